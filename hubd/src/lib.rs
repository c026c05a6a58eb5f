//! `bosun-hubd`: the hub. It holds desired state per host, queues operator-signed jobs it
//! cannot forge, stores escrow blobs it cannot open, and notices when a box goes silent.
//! Boxes always call the hub, never the other way round.
//!
//! ```text
//!  agents ──TLS──► axum router ──► api::agent ─┐        ┌─► HostSignals (watch per host)
//!  bosunctl ─TLS─►   (request ids,  api::admin ─┼─► Hub ─┤      wakes held long-polls
//!                    body limit)               │        ├─► Store (SQLite, blocking pool)
//!                                              │        └─► AlertSink ─► log, /metrics,
//!  sweeper_task (every sweep_interval) ────────┘                 └─mpsc─► webhook_task
//!    (dead-man's switch; backup sweep of the hosts due: overdue backups and restore tests)
//!  polls and sweeps judge the merged report and desired state: report_alerts (storage_lost,
//!    backup_failed, backup_overdue, restore_test_failed, restore_test_overdue, verify_failed,
//!    verify_overdue, bulk_unprotected, bulk_backup_failed, escrow_missing, the last also judged
//!    by an escrow PUT), opened and resolved in the
//!    store, history in the event log; each opening and recovery is an alert like any other,
//!    delivered through AlertSink; audit entries a poll carries raise golden_refused and
//!    guest_restored once each (report_alerts::audit)
//!  api::agent::enroll with a restore-mode token: a new box takes over a revoked host's id
//!    (Store::enroll; the host-key cache forgets the old key, the poll's transaction checks
//!    the key again)
//!  watchdog_task (WATCHDOG_USEC / 2): a store read, then WATCHDOG=1 to systemd
//!  api::agent::poll ─mpsc─► poll_writer_task (one thread, group commit) ─► Store
//!    (a PostgreSQL heartbeat on the row the replica kept goes from the poll's task, in one
//!    statement: Store::heartbeat, decision 0130)
//!  flush_task (every second, and once after serving): makes durable the heartbeats the
//!    poll writer committed without waiting for the disk
//! ```
//!
//! [`run`] binds the configured address; tests use [`Hub::open`] + [`Hub::serve`] with a
//! port-0 listener and a [`clock::ManualClock`].

pub mod actor;
pub mod alerts;
pub mod api;
pub mod auth_limit;
pub mod cert;
pub mod cli;
pub mod clock;
mod config;
pub mod config_file;
pub mod config_page;
pub mod deadman;
mod error;
pub mod flush_task;
pub mod health;
pub mod history;
pub mod hub;
pub mod hub_backup;
pub mod metrics;
pub mod poll_writer_task;
pub mod report_alerts;
mod run;
pub mod secret;
mod served_key;
pub mod signals;
pub mod store;
pub mod sweeper_task;
pub mod tls;
pub mod ui;
pub mod watchdog_task;

pub use crate::config::HubConfig;
pub use crate::error::HubError;
pub use crate::hub::Hub;
pub use crate::run::{InitReport, init, init_store, run};
pub use crate::tls::install_crypto_provider;
