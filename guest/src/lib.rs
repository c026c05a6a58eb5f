//! `bosun-guest`: the reference client for controllers inside Bosun guests — what a
//! controller author copies.
//!
//! - [`bootstrap`] reads `/etc/bosun-bootstrap/bootstrap.json` (`bosun.bootstrap/v1`), which
//!   the agent writes into the running guest with `pct push` (0600, the guest's root).
//! - [`client`] talks to the agent's local API over HTTPS, accepting exactly the leaf
//!   certificate whose SHA-256 the bootstrap pins.
//! - [`quiesce`] is the crash-safe quiesce loop: when a policy backup is due it stops the
//!   apps (hook commands), asks for a quiesced backup and restarts exactly what it stopped
//!   as soon as the storage snapshot exists — or on any error, a failed status poll, the
//!   max-quiesce bound or shutdown. A marker written before anything is stopped lets the
//!   next start restart what a crash left stopped.
//! - [`controller`] is the controller's side of a rollout: switch to the digest the agent
//!   names (an operator-signed choice) and report health, so a bad image is rolled back.
//! - [`service`] is `bosun-guest run`, the controller image's one process: the quiesce loop
//!   and the controller loop side by side until one shutdown, each retrying a failed pass
//!   after [`backoff`]'s delay.
//! - [`protection`] is the guest's own protection as the agent judges it from its journal
//!   against the signed plan: `bosun-guest status` prints it and exits 3 while anything is
//!   overdue; `bosun-guest run` watches it and warns.
//! - [`apps`] reads the apps files: the controller's own and the guest's, which the
//!   customer writes beside the app they deployed (decision 0107).
//! - [`access`] writes the SSH keys the operator's signed plan trusts for the guest's `root`,
//!   which the bootstrap carries, where the golden image's sshd reads them.
//! - [`restore_check`] is the guest's own restore check: written while the apps are stopped
//!   for a backup (checksums of their data and a script that verifies them), removed when they
//!   run again, run by Bosun's restore test inside a restored copy of the guest.

pub mod access;
pub mod apps;
pub mod backoff;
pub mod bootstrap;
pub mod client;
pub mod controller;
pub mod hooks;
pub mod marker;
pub mod protection;
pub mod quiesce;
pub mod restore_check;
pub mod service;

pub use bootstrap::{BootstrapError, load_bootstrap};
pub use client::{ClientError, LocalApiClient};
pub use controller::{ControllerConfig, ControllerLoop, PassOutcome};
pub use hooks::{App, HookError};
pub use marker::{Marker, MarkerError};
pub use protection::{EXIT_OVERDUE, ProtectionError, ProtectionWatch};
pub use quiesce::{QuiesceConfig, QuiesceError, QuiesceOutcome, Quiescer};
pub use restore_check::{RestoreCheck, RestoreCheckError};
pub use service::Service;
