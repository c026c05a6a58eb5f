//! Guest reconcile: [`plan`] decides, [`apply`] acts through the per-guest
//! queue, [`provision`] builds a guest as a sequence of journaled steps, and
//! [`replay`] resumes or rolls back what a crash left unfinished.

pub mod apply;
mod apply_ct;
mod apply_vm;
pub mod compensate;
pub mod config_cache;
pub mod failures;
mod finding_audit;
pub mod golden;
pub mod late_landing;
pub mod lookup;
mod lost_kind;
pub mod network_guard;
pub mod observe;
pub mod observe_vm;
pub mod order;
pub mod pacing;
pub mod plan;
pub mod provision;
pub mod reconcile_task;
pub mod refusals;
pub mod replay;
pub mod share;
pub mod vm_guard;
