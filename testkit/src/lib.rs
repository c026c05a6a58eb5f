//! `bosun-testkit`: test and benchmark code that has no place in a daemon.
//!
//! - [`pg_cluster`]: a throwaway PostgreSQL cluster (`initdb`, `pg_ctl`, `createdb` from
//!   Debian's `postgresql`, run as an unprivileged user under root), for the hub's
//!   PostgreSQL store tests and its HTTP suites.
//!
//! The hub's load generator, `hub-bench`, is the package beside this one
//! (`testkit/hub-bench/`, `bosun-hub-bench`): it links the hub, which this crate must not.

pub mod pg_cluster;

pub use pg_cluster::{ClusterError, PgCluster};
