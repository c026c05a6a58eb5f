//! Snapshots and rollbacks a controller asked for, which a stop or crash interrupted: at
//! start their operations are still `running`. Each is closed in its guest's queue slot (so
//! the guest's next request waits for it) with what happened in Proxmox: a sent task is
//! followed to its end, an intent is looked up in the node's task list, and the operation
//! ends `done` only if its snapshot or rollback did.

use std::sync::Arc;

use bosun_errchain::error_chain;
use bosun_pve::Pve;

use crate::guests::queue::{GuestKey, GuestQueue};
use crate::ops::journal::{JournalHandle, OpStatus, UnfinishedOperation};
use crate::ops::operation::OpKind;
use crate::ops::operation::StepName;
use crate::ops::operation::replay::close_by_final_step;

/// The step whose outcome is the operation's.
fn final_step(kind: OpKind) -> Option<StepName> {
    match kind {
        OpKind::Snapshot => Some(StepName::Snapshot),
        OpKind::Rollback => Some(StepName::Rollback),
        _ => None,
    }
}

/// Closes every interrupted local-API operation (the local API list of
/// [`crate::ops::operation::replay::sort`]); gives how many it closed.
pub async fn close_interrupted<P: Pve + 'static>(
    pve: &Arc<P>,
    journal: &JournalHandle,
    queue: &GuestQueue,
    unfinished: Vec<UnfinishedOperation>,
) -> usize {
    let mut closed = 0;
    for interrupted in unfinished {
        let op_id = interrupted.operation.op_id;
        let Some((kind, step)) = interrupted
            .operation
            .op_kind()
            .and_then(|k| final_step(k).map(|s| (k, s)))
        else {
            tracing::error!(op_id = %op_id, kind = %interrupted.operation.kind, "not a local api operation; left for its own replayer");
            continue;
        };
        let key = match &interrupted.operation.guest_id {
            Some(guest_id) => GuestKey::guest(guest_id),
            None => GuestKey::vmid(interrupted.operation.vmid.unwrap_or(0)),
        };
        let work = {
            let (pve, journal) = (Arc::clone(pve), journal.clone());
            async move { close_by_final_step(&*pve, &journal, &interrupted, kind, step).await }
        };
        match queue.run(key, work).await {
            Ok(Ok(status)) => {
                closed += 1;
                let done = status == OpStatus::Done;
                tracing::info!(op_id = %op_id, kind = %kind, done, "interrupted local api operation closed");
            }
            Ok(Err(e)) => {
                tracing::error!(op_id = %op_id, error = %error_chain(&e), "could not close an interrupted local api operation");
            }
            Err(e) => {
                tracing::warn!(op_id = %op_id, error = %error_chain(&e), "interrupted local api operation left for the next start");
            }
        }
    }
    closed
}
