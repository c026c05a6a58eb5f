//! The controller inside each guest (DESIGN §5, §11): which image digest it runs, how a new
//! one is rolled out, and how a crashed one is healed.
//!
//! ```text
//!  signed controller-update job ──► JobRunner ──► rollout.rs (one journaled operation,
//!     (params.digest; the hub         queue slot     controller_update_job):
//!      cannot make one)                              accepted → snapshot → announce
//!                                                    → await_health ─► commit
//!                            own `unhealthy` report ───────┼► revert → rollback
//!                                                          │  (gate: own snapshot)
//!                            silence (window past) ────────┴► revert → heal → break
//!                                                             (in place; never a rollback)
//!  controller ──GET /v1/controller──────────► board.rs ◄── announce / commit / revert
//!  (bosun-guest) ─POST /v1/controller/health─►  (health reports; journal mirror)
//!                                                  │
//!                                    heal_task.rs ─┘ silent past `heal_after`: restart in
//!                                    place through the helper (`restart_controller`),
//!                                    at most `max_restarts` times, then `broken`
//! ```
//!
//! A guest provisioned from a golden build starts with a record too: provisioning's
//! `manage_controller` step sets it to the signed recipe's controller digest (state `running`),
//! so it is reported, health-gated and healed in place like a committed rollout. The report
//! carries the digest each controller says it runs (its last health report) beside the one
//! its record names; the hub alerts `controller_mismatch` when they differ.
//!
//! Only a signature chooses a digest (the recipe's, or a job's); desired state has no
//! `controller_version` (decision 0074).
//! A rollback needs no signature because the same operation took the snapshot moments before
//! ([`crate::trust::gate::Authority::OwnSnapshotRollback`]), and only the controller's own
//! authenticated `unhealthy` report triggers one: silence (which a connection flood produces)
//! never costs the guest the writes made since the snapshot. A silent rollout reverts the
//! digest, restarts the controller in place and leaves it `broken` for the operator, who
//! decides with a signed job (DESIGN §7). Outcomes are audited
//! (`controller.committed`, `controller.rolled_back`, `controller.restarted`,
//! `controller.broken`, `controller.recovered`), which the hub turns into alerts.

pub mod board;
pub mod heal_task;
pub mod rollout;

pub use crate::config::controller::ControllerSettings;
pub use board::{Announced, ControllerBoard, HealthReport, HealthWait};
pub use heal_task::HealTask;
pub use rollout::{Rollout, RolloutContext};

/// The audit action of a committed rollout.
pub const COMMITTED_ACTION: &str = "controller.committed";
/// The audit action of a rollout rolled back to its snapshot.
pub const ROLLED_BACK_ACTION: &str = "controller.rolled_back";
/// The audit action of one in-place restart.
pub const RESTARTED_ACTION: &str = "controller.restarted";
/// The audit action of a controller given up on: silent through its in-place restarts, or
/// through a rollout's window (`cause`: [`rollout::ROLLOUT_SILENT_CAUSE`]).
pub const BROKEN_ACTION: &str = "controller.broken";
/// The audit action of a broken controller reporting healthy again.
pub const RECOVERED_ACTION: &str = "controller.recovered";
