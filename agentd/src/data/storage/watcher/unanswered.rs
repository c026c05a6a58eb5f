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
    /// `names` are the manifest's targets' storage ids, in its order.
    pub(super) async fn statuses(
        &self,
        manifest: &[StorageTarget],
        names: &[StorageId],
    ) -> HashMap<String, Result<StorageInfo, WatchCallError>> {
        let asks = status_asks(manifest, names).map(|(t, storage)| async move {
            let status = self
                .call(Op::StorageStatus, self.parts.pve.storage_status(storage))
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
        storage: &StorageId,
        status: Option<Result<StorageInfo, WatchCallError>>,
        generation: u64,
    ) -> Observed {
        let e = match status {
            Some(Ok(info)) => return self.attached(target, storage, &[info], generation).await,
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

/// The status calls made when the node's storage list does not come: one for each attached
/// target, of the storage its whole identity names (a USB disk's serial, a PBS namespace or
/// user, a CIFS user are part of it), with `names` in `manifest`'s order.
fn status_asks<'a>(
    manifest: &'a [StorageTarget],
    names: &'a [StorageId],
) -> impl Iterator<Item = (&'a StorageTarget, &'a StorageId)> {
    manifest
        .iter()
        .zip(names)
        .filter(|(t, _)| t.state == TargetState::Attached)
}

#[cfg(test)]
mod tests {
    use bosun_proto::desired::{StorageRole, StorageType};

    use super::super::super::naming::{StorageNames, storage_id_of, target_storage_id};
    use super::super::super::target::test_target;
    use super::*;

    #[test]
    fn each_attached_target_is_asked_about_by_its_whole_identity() {
        let mut usb = test_target(
            StorageType::Usb,
            "0b7f8c5e-1d2a-4c3b-9e8f-7a6b5c4d3e2f",
            StorageRole::VzdumpTarget,
        );
        usb.serial = Some("WD-WX41A12B3C4D".into());
        let mut pbs = test_target(
            StorageType::Pbs,
            "pbs.example:store",
            StorageRole::VzdumpTarget,
        );
        pbs.namespace = Some("tenant-a".into());
        let mut gone = test_target(StorageType::Nfs, "nas:/export", StorageRole::VzdumpTarget);
        gone.state = TargetState::Disconnected;
        let manifest = vec![usb.clone(), gone, pbs.clone()];
        let names = StorageNames::default().of_manifest(&manifest);
        let asked: Vec<(&str, &StorageId)> = status_asks(&manifest, &names)
            .map(|(t, s)| (t.durable_id.as_str(), s))
            .collect();
        assert_eq!(
            asked,
            [
                (usb.durable_id.as_str(), &target_storage_id(&usb)),
                (pbs.durable_id.as_str(), &target_storage_id(&pbs)),
            ]
        );
        // Not the name of the same place without the rest of the identity: that storage is
        // not the one registered for the target.
        assert_ne!(
            target_storage_id(&usb),
            storage_id_of(usb.kind, &usb.durable_id)
        );
        assert_ne!(
            target_storage_id(&pbs),
            storage_id_of(pbs.kind, &pbs.durable_id)
        );
    }
}
