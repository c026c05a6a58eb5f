//! Signed one-shot jobs; each passes the reversibility gate ([`crate::trust::gate`]).
//!
//! Signatures are checked by [`crate::trust::signing`] (the agent's OpenSSH `allowed_signers`,
//! namespace `bosun-job@v1`).
//!
//! - `kind`: the closed table of job kinds, one row each: its operation kind, gate rule
//!   and family (typed parameters, run, resume).
//! - [`check`]: the job document checks on top of the signature
//!   (`not_before`/`expires_at` with skew, host binding, a known kind, kind/target
//!   consistency).
//! - [`runner`]: claims a checked job in the journal (nonce seen once, job id
//!   run once) and hands it to its family; at start it resumes the jobs a crash
//!   interrupted.
//! - `dispatch`: the one place that names the families: it hands a claimed job to its
//!   kind's family and reads every interrupted job's `accepted` step.
//! - `family`: what a family is (the `JobFamily` trait) and the opening every family
//!   shares; `context`: what every family works with (Proxmox, the journal, the queues,
//!   the clock) and how a job ends: journaled, audited, reported.
//! - [`error`]: why an accepted job failed; the families' own failures
//!   (`detach_refusal`, `update_error`) are leaves it holds.
//! - `guest_run` and `execute`: `restore-now`, `decommission`, `force-backup` on one guest
//!   (`guest_accepted`: what such a job asks).
//! - [`detach`]: the `storage-detach` job: its refusal rules and its steps.
//! - [`wipe`]: the `storage-wipe` job: the archives the journal recorded on a
//!   target's storage deleted, by the detach's target rules.
//! - `storage_run`: the one family both storage jobs run as, over the storage they resolve to.
//! - [`restore_now`]: `restore-now`'s source when it names none, and the DR restore of a lost
//!   guest it starts.
//! - `controller_run`: the `controller-update` job, a rollout ([`crate::guests::controller::rollout`]).
//! - `break_glass_run`: `break-glass-enable` and `break-glass-disable`, through
//!   [`crate::trust::break_glass`].
//! - [`update_run`]: the `agent-update` job: window, download, stage (DESIGN §11).
//! - `retry`: whether a failed job is worth signing again (its result's `retriable`).
//!
//! A job's result carries when it began (its claim), how long it ran, whether it is
//! retriable and the tail of its journaled steps (bounded and redacted by
//! [`bosun_proto::job_log`]). A job may carry a signed `timeout_s` (its operation's steps are
//! held to a deadline, [`crate::ops::operation::Deadline`]) and a `priority` (the order a
//! poll's jobs are taken in); decision 0072.
//! - `adopt_run`: the `adopt` job: a container that was on the node before Bosun made one of
//!   the agent's guests (decision 0073); `adopt_check`: what it must be to be adopted.
//! - `bulk_restore_run`: the `restore-bulk` job: a bulk volume's archive, as the journal
//!   recorded it, put back into the volume by the helper (decision 0108).

mod adopt_check;
mod adopt_run;
mod break_glass_run;
mod bulk_restore_run;
pub mod check;
mod context;
mod controller_run;
mod decommission;
pub mod detach;
mod detach_refusal;
mod dispatch;
pub mod error;
mod execute;
mod family;
mod guest_accepted;
mod guest_run;
mod kind;
mod machine;
mod power;
pub mod restore_now;
mod restore_vm;
mod retry;
pub mod runner;
mod storage_run;
mod update_error;
pub mod update_run;
pub mod wipe;

pub use bulk_restore_run::BulkRestoreSetup;
