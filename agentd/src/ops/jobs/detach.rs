//! `storage-detach`: remove a manifest target's storage from Proxmox (`DELETE
//! /storage/{storage}`; Proxmox keeps the data on the target) and, for a USB target, unmount
//! it through the helper. Only a signed job does this (DESIGN §5); the storage watcher leaves
//! a target that left the manifest registered.
//!
//! The target resolves from the agent's own naming only: the job names a `durable_id` (and
//! the target's `type` when the manifest no longer holds it); the storage is
//! [`storage_id_of`] of the two, always a `bosun-…` storage. A job that also names a
//! `storage` must name that one (a job naming `local` is refused). Refused before anything
//! is sent to Proxmox (`resolve`, `confirm`):
//!
//! | refusal | code |
//! |---|---|
//! | `type` not a target kind, or absent while the manifest does not hold the target | `bad_params`, `unknown_target` |
//! | `storage` names another storage than the one this agent named for the target | `not_ours` |
//! | no desired state yet | `no_desired_state` |
//! | the target is still `attached` in desired state (the watcher would register it again) | `still_attached` |
//! | a backup tier of the current plan writes to the storage | `tier_writes` |
//! | Proxmox has no such storage, or it is not of the target's type | `no_such_storage`, `wrong_type` |
//!
//! Steps (`storage_detach_job.<step>.<phase>`): `accepted`, `delete_storage`, `unmount` (USB
//! with a helper). Each pass looks at Proxmox first: a storage already gone counts as
//! removed, so a job a crash interrupted converges on restart without a second removal.

use std::sync::Arc;

use bosun_errchain::error_chain;
use bosun_proto::desired::{DesiredState, StorageType, TargetState};
use bosun_proto::helper::{Output, Request, TargetId, Unmount};
use bosun_pve::{Pve, StorageId};
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use super::decommission::{Patience, is_retryable};
pub use super::detach_refusal::DetachRefusal;
use super::error::JobError;
use crate::data::backup::tiers::TierPlan;
use crate::data::desired::DesiredSnapshot;
use crate::data::storage::naming::{is_bosun_storage, kind_name, storage_id_of, target_storage_id};
use crate::links::helper::{HelperClient, HelperClientError};
use crate::ops::journal::{AuditEvent, JournalHandle};
use crate::ops::operation::OpJournal;
use crate::ops::operation::StepName;
use crate::trust::gate::{self, Action, Authority, GateRequest, JobAuthority, Provenance, Target};

/// What the runner needs to judge and carry out a detach: the current desired state and
/// backup tier plan, and the helper that unmounts USB targets.
#[derive(Debug, Clone)]
pub struct DetachContext {
    desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
    tiers: watch::Receiver<TierPlan>,
    helper: Option<HelperClient>,
}

impl DetachContext {
    /// A context following `desired` and `tiers`.
    pub fn new(
        desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
        tiers: watch::Receiver<TierPlan>,
        helper: Option<HelperClient>,
    ) -> Self {
        Self {
            desired,
            tiers,
            helper,
        }
    }

    /// Applies the rules of [`resolve`] to the state as it is now.
    pub(super) fn resolve(
        &self,
        params: &Map<String, Value>,
    ) -> Result<DetachTarget, DetachRefusal> {
        let desired = self.desired.borrow().clone();
        let plan = self.tiers.borrow().clone();
        resolve(params, desired.as_deref().map(|d| &d.state), &plan)
    }

    pub(super) fn helper(&self) -> Option<&HelperClient> {
        self.helper.as_ref()
    }
}

/// The target of a detach, resolved from the agent's own naming.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DetachTarget {
    pub(super) durable_id: String,
    pub(super) kind: StorageType,
    pub(super) storage: StorageId,
}

/// What a detach job asks, once accepted; stored in its `accepted` step.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct DetachAccepted {
    pub(super) job_id: String,
    pub(super) durable_id: String,
    pub(super) kind: StorageType,
    pub(super) storage: String,
    pub(super) params: Map<String, Value>,
    pub(super) signer: String,
    pub(super) principals: String,
    pub(super) expires_at: Option<jiff::Timestamp>,
}

/// The Proxmox storage type a target of `kind` is registered as.
fn pve_type(kind: StorageType) -> &'static str {
    match kind {
        StorageType::LocalDir | StorageType::Usb => "dir",
        StorageType::Nfs => "nfs",
        StorageType::Cifs => "cifs",
        StorageType::Pbs => "pbs",
    }
}

fn text_param<'a>(
    params: &'a Map<String, Value>,
    param: &'static str,
) -> Result<Option<&'a str>, DetachRefusal> {
    match params.get(param) {
        None => Ok(None),
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s)),
        Some(_) => Err(DetachRefusal::BadParams {
            param,
            reason: "expected a non-empty string".into(),
        }),
    }
}

/// The refusal rules that need no Proxmox call, on `desired` (the current desired state,
/// if any) and `plan` (the current backup tiers).
pub(super) fn resolve(
    params: &Map<String, Value>,
    desired: Option<&DesiredState>,
    plan: &TierPlan,
) -> Result<DetachTarget, DetachRefusal> {
    let durable_id = text_param(params, "durable_id")?
        .ok_or_else(|| DetachRefusal::BadParams {
            param: "durable_id",
            reason: "required".into(),
        })?
        .to_owned();
    let named_kind = match text_param(params, "type")? {
        Some(t) => Some(
            serde_json::from_value::<StorageType>(Value::String(t.to_owned())).map_err(|_| {
                DetachRefusal::BadParams {
                    param: "type",
                    reason: format!("{t:?} is not a target type"),
                }
            })?,
        ),
        None => None,
    };
    let in_manifest = |kind: Option<StorageType>| {
        desired
            .into_iter()
            .flat_map(|d| &d.storage)
            .find(|t| t.durable_id == durable_id && kind.is_none_or(|k| k == t.kind))
    };
    let kind = match named_kind {
        Some(kind) => kind,
        None => in_manifest(None)
            .map(|t| t.kind)
            .ok_or_else(|| DetachRefusal::UnknownTarget {
                durable_id: durable_id.clone(),
            })?,
    };
    // The storage is named by the target's whole identity: from the manifest while the
    // target is in it; a target that left it is named by the job (a `bosun-<kind>-…`
    // storage), else taken to have no namespace, user or serial.
    let named_storage = text_param(params, "storage")?;
    let storage = match (in_manifest(Some(kind)), named_storage) {
        (Some(target), _) => target_storage_id(target),
        (None, Some(named))
            if named.starts_with(&format!("bosun-{}-", kind_name(kind)))
                && StorageId::new(named).is_ok() =>
        {
            StorageId::new(named).map_err(|_| DetachRefusal::UnknownTarget {
                durable_id: durable_id.clone(),
            })?
        }
        (None, _) => storage_id_of(kind, &durable_id),
    };
    if let Some(named) = named_storage
        && (named != storage.as_str() || !is_bosun_storage(named))
    {
        return Err(DetachRefusal::NotOurs {
            named: named.to_owned(),
            durable_id,
            kind: kind_name(kind),
            expected: storage.as_str().to_owned(),
        });
    }
    if desired.is_none() {
        return Err(DetachRefusal::NoDesiredState { durable_id });
    }
    if in_manifest(Some(kind)).is_some_and(|t| t.state == TargetState::Attached) {
        return Err(DetachRefusal::StillAttached { durable_id });
    }
    if let Some(tier) = plan.tiers.iter().find(|t| t.storage == storage) {
        return Err(DetachRefusal::TierWrites {
            index: tier.index,
            storage: storage.as_str().to_owned(),
        });
    }
    Ok(DetachTarget {
        durable_id,
        kind,
        storage,
    })
}

/// Whether the storage exists in Proxmox as a storage of the target's type. `Ok(false)`:
/// Proxmox says it does not exist.
pub(super) async fn look<P: Pve>(pve: &P, target: &DetachTarget) -> Result<bool, DetachRefusal> {
    let storage = target.storage.as_str().to_owned();
    match pve.storage_config(&target.storage).await {
        Ok(config) => {
            let found = config
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let expected = pve_type(target.kind);
            if found == expected {
                Ok(true)
            } else {
                Err(DetachRefusal::WrongType {
                    storage,
                    found: found.to_owned(),
                    expected,
                    kind: kind_name(target.kind),
                })
            }
        }
        Err(e) if e.is_missing() => Ok(false),
        Err(source) => Err(DetachRefusal::Unreadable { storage, source }),
    }
}

/// The last refusal rule, asked of Proxmox (a read): the storage exists and is of the
/// target's type.
pub(super) async fn confirm<P: Pve>(pve: &P, target: &DetachTarget) -> Result<(), DetachRefusal> {
    if look(pve, target).await? {
        Ok(())
    } else {
        Err(DetachRefusal::NoSuchStorage {
            storage: target.storage.as_str().to_owned(),
        })
    }
}

/// Asks the gate whether `action` may be taken on `storage` (audited either way).
pub(super) async fn ask_gate(
    journal: &JournalHandle,
    action: Action,
    storage: &StorageId,
    authority: &JobAuthority,
) -> Result<(), JobError> {
    let request = GateRequest {
        action,
        target: Target::Storage {
            storage: storage.as_str().to_owned(),
        },
        authority: Authority::SignedJob(authority.clone()),
        provenance: Provenance::unknown(),
    };
    let decision = gate::decide(&request);
    let _ = journal.append_audit(decision.audit_event(&request)).await;
    if decision.is_allowed() {
        Ok(())
    } else {
        Err(JobError::GateDenied {
            action,
            reason: decision.reason(),
        })
    }
}

/// Carries out an accepted detach: gate, remove the storage (looking first, so a removal
/// already done is not sent again), unmount a USB target.
pub(super) async fn detach<P: Pve>(
    pve: &P,
    journal: &JournalHandle,
    op: &OpJournal,
    target: &DetachTarget,
    authority: &JobAuthority,
    helper: Option<&HelperClient>,
    mut patience: Patience,
) -> Result<Value, JobError> {
    let storage = &target.storage;
    ask_gate(journal, Action::DetachStorage, storage, authority).await?;
    let mut removed = false;
    loop {
        let present = match look(pve, target).await {
            Ok(present) => present,
            Err(DetachRefusal::Unreadable { source, .. })
                if is_retryable(&source) && patience.pause().await =>
            {
                continue;
            }
            Err(refusal) => return Err(refusal.into()),
        };
        if !present {
            break;
        }
        let deleted = op
            .call(
                StepName::DeleteStorage,
                json!({ "storage": storage.as_str(), "durable_id": target.durable_id }),
                pve.delete_storage(storage),
            )
            .await;
        match deleted {
            Ok(()) => {
                removed = true;
                break;
            }
            // Gone meanwhile (a removal whose answer was lost): the next look says so.
            Err(e) if e.pve().is_some_and(|p| p.is_missing() || is_retryable(p)) => {
                tracing::info!(storage = %storage, error = %error_chain(&e), "storage removal did not finish; looking again");
                if !patience.pause().await {
                    return Err(e.into());
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    let unmounted = match (target.kind, helper) {
        (StorageType::Usb, Some(helper)) => {
            let target_id = TargetId::new(storage.as_str().to_owned())?;
            let request = Request::Unmount(Unmount { target_id });
            op.local_typed(
                StepName::Unmount,
                json!({ "target_id": storage.as_str() }),
                unmount(helper, &request),
            )
            .await?;
            Some(true)
        }
        (StorageType::Usb, None) => {
            tracing::warn!(storage = %storage, "no helper is configured; the USB target stays mounted");
            Some(false)
        }
        _ => None,
    };
    let mut event = AuditEvent::new("storage.detached");
    event.op_id = Some(op.op_id());
    event.job_id = Some(authority.job_id().to_owned());
    event.detail = json!({
        "storage": storage.as_str(),
        "durable_id": target.durable_id,
        "type": kind_name(target.kind),
        "removed": removed,
        "unmounted": unmounted,
    });
    let _ = journal.append_audit(event).await;
    tracing::info!(storage = %storage, removed, "storage detached");
    Ok(json!({
        "storage": storage.as_str(),
        "durable_id": target.durable_id,
        "removed": removed,
        "already_gone": !removed,
        "unmounted": unmounted,
    }))
}

/// Why the helper did not unmount a USB target.
#[derive(Debug, thiserror::Error)]
enum UnmountError {
    /// The helper gave an answer that does not belong to an unmount.
    #[error("the helper answered {answer} to an unmount")]
    Answer {
        /// The answer, as debug text.
        answer: String,
    },
    /// The helper could not be asked, or refused.
    #[error(transparent)]
    Helper(HelperClientError),
}

/// Unmounts through the helper; a target no longer mounted (an earlier pass unmounted it)
/// counts as done.
async fn unmount(helper: &HelperClient, request: &Request) -> Result<(), UnmountError> {
    match helper.call(request).await {
        Ok(Output::Unmounted { .. }) => Ok(()),
        Ok(other) => Err(UnmountError::Answer {
            answer: format!("{other:?}"),
        }),
        Err(HelperClientError::Failed { message, .. })
            if message.contains("not a mount point") || message.contains("not found") =>
        {
            Ok(())
        }
        Err(e) => Err(UnmountError::Helper(e)),
    }
}

#[cfg(test)]
#[path = "detach_tests.rs"]
mod tests;
