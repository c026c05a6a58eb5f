//! The one journaled-step protocol (DESIGN §9) and its replay registry.
//!
//! Every operation the agent carries out in Proxmox (provisioning, reconcile actions,
//! signed jobs, backups, snapshots and rollbacks a controller asked for) is an
//! [`OpJournal`]: it begins with a kind from the closed table in
//! [`crate::ops::operation::OpKind`], writes each step's intent before its call, the task's UPID
//! once sent and the outcome when it ends, and finishes with a status.
//!
//! At start, [`replay::sort`] reads what a crash or stop left `running` and hands each
//! operation to the replayer its kind names ([`crate::ops::operation::Replayer`]); an operation
//! whose kind no entry names (a journal from another version) is closed failed there. Every
//! replayer first closes the operation's open step with [`replay::close_open_step`]: a sent
//! task is followed to its end; an intent whose call starts a task is looked up in the
//! node's task list ([`look`]) before it is judged, since Proxmox may have carried out a
//! call whose answer never arrived.

pub mod look;
pub mod replay;
pub mod scratch;
pub mod step;
pub mod steps;

pub use crate::ops::op_kind::{OpKind, Replayer};
pub use step::StepName;
pub use steps::{Deadline, OpJournal, StepError};

/// Where an operation's work came from: the request that brought it (a poll, a local-API
/// call) and the operator's correlation id of the desired-state generation behind it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    /// The request id.
    pub request_id: Option<String>,
    /// The operator's correlation id.
    pub correlation_id: Option<String>,
}

impl From<Option<String>> for Origin {
    /// Work a request brought, no generation behind it.
    fn from(request_id: Option<String>) -> Self {
        Self {
            request_id,
            correlation_id: None,
        }
    }
}
