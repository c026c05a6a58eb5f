//! The watcher's side of a storage that does not answer: every Proxmox call it makes is
//! bounded ([`super::WatcherParts::call_timeout`]); when the node's storage list does not come (a
//! hard-mounted storage whose server hangs holds it up), each target is looked at by its own
//! status call, all at once; and a remote storage Proxmox sees inactive is asked why (its
//! content listing activates it), in the fixed vocabulary of [`TargetReason`].

use std::collections::HashMap;

use bosun_errchain::error_chain;
use bosun_proto::desired::{StorageTarget, TargetState};
use bosun_proto::report::{TargetReason, TargetStatus};
use bosun_pve::{ContentFilter, ContentType, Op, Pve, PveError, StorageId, StorageInfo};

use super::super::naming::storage_id_of;
use super::super::reason::{WatchCallError, bounded, classify};
use super::{Observed, StorageWatcher};

impl<P: Pve + 'static> StorageWatcher<P> {
    /// Runs one Proxmox call, bounded by [`super::WatcherParts::call_timeout`].
    pub(super) async fn call<T>(
        &self,
        op: Op,
        call: impl Future<Output = Result<T, PveError>>,
    ) -> Result<T, WatchCallError> {
        bounded(op, self.parts.call_timeout, call).await
    }

    /// Each attached target's own status, asked all at once (when the list did not come).
    pub(super) async fn statuses(
        &self,
        manifest: &[StorageTarget],
    ) -> HashMap<String, Result<StorageInfo, WatchCallError>> {
        let asks = manifest
            .iter()
            .filter(|t| t.state == TargetState::Attached)
            .map(|t| async move {
                let storage = storage_id_of(t.kind, &t.durable_id);
                let status = self
                    .call(Op::StorageStatus, self.parts.pve.storage_status(&storage))
                    .await
                    .map(|mut info| {
                        info.storage = Some(storage.as_str().to_owned());
                        info
                    });
                (t.durable_id.clone(), status)
            });
        futures::future::join_all(asks).await.into_iter().collect()
    }

    /// A target looked at by itself, from its own status call: a storage that does not
    /// answer in time is unreachable; one that does is looked at as usual (but not
    /// registered: without the list, Proxmox's answer that it does not exist is no proof).
    pub(super) async fn alone(
        &mut self,
        target: &StorageTarget,
        status: Option<Result<StorageInfo, WatchCallError>>,
        generation: u64,
    ) -> Observed {
        let e = match status {
            Some(Ok(info)) => return self.attached(target, &[info], generation).await,
            Some(Err(e)) => e,
            None => return Observed::plain(TargetStatus::Unknown, Some(TargetReason::Failed)),
        };
        let detail = error_chain(&e);
        tracing::warn!(durable_id = %target.durable_id, error = %detail, "could not ask Proxmox about the storage target");
        match (classify(&e), self.watched.get(&target.durable_id)) {
            (TargetReason::Unreachable, _) => {
                Observed::failing(TargetStatus::Unreachable, TargetReason::Unreachable, detail)
            }
            (_, Some(w)) => Observed {
                status: w.status,
                reason: w.reason,
                detail: w.detail.clone(),
                info: None,
            },
            (_, None) => Observed::failing(
                TargetStatus::Unknown,
                TargetReason::ProxmoxUnavailable,
                detail,
            ),
        }
    }

    /// A registered remote storage Proxmox does not see active: its content listing
    /// activates it and says why not (its server does not answer, refuses the credentials,
    /// has no such datastore or export). Asked again only as failed attempts are (backing
    /// off); in between the last reason holds.
    pub(super) async fn why_inactive(
        &mut self,
        target: &StorageTarget,
        storage: &StorageId,
    ) -> Observed {
        if let Some(waiting) = self.waiting(&target.durable_id) {
            return Observed {
                status: TargetStatus::Unreachable,
                ..waiting
            };
        }
        let filter = ContentFilter {
            content: Some(ContentType::Backup),
            vmid: None,
        };
        let listing = self
            .call(
                Op::ListContent,
                self.parts.pve.list_content(storage, filter),
            )
            .await;
        let observed = match listing {
            // Active again by now: the next look sees it.
            Ok(_) => Observed::failing(
                TargetStatus::Unreachable,
                TargetReason::NotActive,
                format!("storage {storage} is not active"),
            ),
            Err(e) => {
                let detail = error_chain(&e);
                tracing::warn!(durable_id = %target.durable_id, storage = %storage, error = %detail, "storage target not active");
                Observed::failing(TargetStatus::Unreachable, classify(&e), detail)
            }
        };
        self.failed(target, observed)
    }
}
