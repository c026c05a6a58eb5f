//! The reversibility gate (DESIGN §5): one function, [`decide`], and one
//! table, deciding whether the agent may carry out an action.
//!
//! Every destroy/overwrite path in the agent asks [`decide`] first and does
//! nothing on [`Decision::Deny`] except report and audit it
//! ([`Decision::audit_event`]). The decision depends on three things:
//!
//! - the [`Action`] (by its effect, not by who asked);
//! - the [`Authority`] behind the request: a desired-state change from the
//!   hub, an operator-signed job ([`JobAuthority`] can only be built from a
//!   [`VerifiedSigner`]), the in-guest controller's local API request, or the
//!   compensation of the agent's own journaled operation;
//! - the guest's [`Provenance`], which only the agent's journal provides:
//!   [`Provenance::from_journal`] takes a [`GuestProvenance`], which only
//!   `crate::ops::journal` can build. Nothing the hub sends and no Proxmox tag can
//!   make a guest "scratch" or "created by this operation".
//!
//! | action | desired state | compensation of op X | local API (own guest) | signed job |
//! |---|---|---|---|---|
//! | create, start, stop, restart, resize up, set spec, guard network, snapshot, backup, heal controller in place | allow | stop only | snapshot, backup | allow (its target) |
//! | destroy guest | only if the journal marked it scratch | only if op X created it, or scratch | deny | `decommission` |
//! | decommission (destroy + purge) | deny | deny | deny | `decommission` |
//! | restore over a guest | deny | deny | deny | `restore` |
//! | restore a bulk volume from its archive (overwrites the volume) | deny | deny | deny | `restore_bulk` |
//! | roll back to a snapshot | deny | deny | allow | deny |
//! | roll back to the snapshot op X took (own snapshot, rollback of op X) | — | allow | — | — |
//! | detach storage | deny | deny | deny | `storage_detach` |
//! | wipe storage (delete the archives the journal recorded on it) | deny | deny | deny | `storage_wipe` |
//! | adopt a guest the journal does not hold | deny | deny | deny | `adopt` |
//! | shrink a volume, recreate the controller's guest | deny | deny | deny | deny |
//!
//! A signed job or a local API request aimed at another target is denied.
//!
//! The own-snapshot column is [`Authority::OwnSnapshotRollback`]: a failed controller rollout
//! rolls its guest back to the snapshot the same journaled operation took a moment before
//! (an [`OwnSnapshot`], which only the journal builds from the operation's own `snapshot`
//! step). It allows that one rollback and nothing else: another guest, another operation's
//! snapshot or any other action is denied.

use std::fmt;

use crate::ops::journal::{AuditEvent, GuestProvenance, OpId, OwnSnapshot};

use crate::trust::signing::VerifiedSigner;

/// What the agent is about to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Create a guest (including provisioning by restore into a fresh vmid).
    CreateGuest,
    /// Start a guest.
    StartGuest,
    /// Stop a guest.
    StopGuest,
    /// Restart a guest.
    RestartGuest,
    /// Grow a volume.
    ResizeUp,
    /// Shrink a volume: never attempted, only reported.
    ResizeDown,
    /// Change cores, memory or swap.
    SetSpec,
    /// Turn a guest's firewall and its filters on (`crate::guests::reconcile::network_guard`):
    /// protection only, nothing is ever turned off.
    GuardNetwork,
    /// Take a snapshot.
    Snapshot,
    /// Take a backup.
    Backup,
    /// Roll a guest back to one of its snapshots (loses newer data).
    RollbackToSnapshot,
    /// Destroy a guest.
    DestroyGuest,
    /// Destroy a guest with purge (and drop what belongs to it).
    DecommissionGuest,
    /// Restore a backup over an existing guest.
    RestoreOverGuest,
    /// Put a bulk volume's archive back into the volume, replacing what it holds.
    RestoreBulkVolume,
    /// Detach a storage target.
    DetachStorage,
    /// Wipe a storage target: delete the archives the journal recorded writing to it.
    WipeStorage,
    /// Heal a crashed controller inside its existing guest.
    HealControllerInPlace,
    /// Heal a controller by recreating its guest: never.
    RecreateControllerGuest,
    /// Make a container that was on the node before Bosun one of the agent's guests (its
    /// identity written, its record journaled): from then on desired state may start, stop
    /// and resize it, so only a signed `adopt` job may, and only for a guest the journal does
    /// not hold already.
    AdoptGuest,
}

impl Action {
    /// Every action.
    pub const ALL: &'static [Action] = &[
        Action::CreateGuest,
        Action::StartGuest,
        Action::StopGuest,
        Action::RestartGuest,
        Action::ResizeUp,
        Action::ResizeDown,
        Action::SetSpec,
        Action::GuardNetwork,
        Action::Snapshot,
        Action::Backup,
        Action::RollbackToSnapshot,
        Action::DestroyGuest,
        Action::DecommissionGuest,
        Action::RestoreOverGuest,
        Action::RestoreBulkVolume,
        Action::DetachStorage,
        Action::WipeStorage,
        Action::HealControllerInPlace,
        Action::RecreateControllerGuest,
        Action::AdoptGuest,
    ];

    /// Whether the action concerns a storage target rather than a guest.
    pub fn on_storage(self) -> bool {
        matches!(self, Action::DetachStorage | Action::WipeStorage)
    }

    fn is_non_destructive(self) -> bool {
        matches!(
            self,
            Action::CreateGuest
                | Action::StartGuest
                | Action::StopGuest
                | Action::RestartGuest
                | Action::ResizeUp
                | Action::SetSpec
                | Action::GuardNetwork
                | Action::Snapshot
                | Action::Backup
                | Action::HealControllerInPlace
        )
    }

    fn is_never(self) -> bool {
        matches!(self, Action::ResizeDown | Action::RecreateControllerGuest)
    }
}

/// What an action is aimed at.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// A guest, by vmid.
    Guest {
        /// The vmid.
        vmid: u32,
    },
    /// A storage target, by its id.
    Storage {
        /// The storage id.
        storage: String,
    },
}

/// The kinds of signed jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobKind {
    /// Restore a guest from a backup, over the existing guest.
    Restore,
    /// Destroy a guest with purge.
    Decommission,
    /// Take a backup now.
    ForceBackup,
    /// Detach a storage target.
    StorageDetach,
    /// Enable break-glass access.
    BreakGlassEnable,
    /// Update the agent.
    AgentUpdate,
    /// Roll a new controller image out to a guest.
    ControllerUpdate,
    /// Close break-glass access early.
    BreakGlassDisable,
    /// Adopt a container that was on the node before Bosun.
    Adopt,
    /// Wipe a storage target.
    StorageWipe,
    /// Put a bulk volume's archive back.
    RestoreBulk,
}

impl JobKind {
    /// Every job kind.
    pub const ALL: &'static [JobKind] = &[
        JobKind::Restore,
        JobKind::Decommission,
        JobKind::ForceBackup,
        JobKind::StorageDetach,
        JobKind::BreakGlassEnable,
        JobKind::AgentUpdate,
        JobKind::ControllerUpdate,
        JobKind::BreakGlassDisable,
        JobKind::Adopt,
        JobKind::StorageWipe,
        JobKind::RestoreBulk,
    ];

    /// Whether a job of this kind covers a destructive `action`.
    fn covers(self, action: Action) -> bool {
        matches!(
            (self, action),
            (JobKind::Restore, Action::RestoreOverGuest)
                | (
                    JobKind::Decommission,
                    Action::DestroyGuest | Action::DecommissionGuest
                )
                | (JobKind::StorageDetach, Action::DetachStorage)
                | (JobKind::StorageWipe, Action::WipeStorage)
                | (JobKind::RestoreBulk, Action::RestoreBulkVolume)
                | (JobKind::Adopt, Action::AdoptGuest)
        )
    }
}

/// An operator-signed job that passed every check, as the gate sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobAuthority {
    kind: JobKind,
    target: Target,
    job_id: String,
    signer: String,
}

impl JobAuthority {
    /// Builds the authority of a job whose signature was verified (hence the
    /// [`VerifiedSigner`]) and whose document checks passed.
    pub fn new(
        signer: &VerifiedSigner,
        kind: JobKind,
        target: Target,
        job_id: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            target,
            job_id: job_id.into(),
            signer: signer.fingerprint().to_owned(),
        }
    }

    /// The job's kind.
    pub fn kind(&self) -> JobKind {
        self.kind
    }

    /// What the job targets.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The job id.
    pub fn job_id(&self) -> &str {
        &self.job_id
    }
}

/// Who is asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authority {
    /// A desired-state change from the hub (the reconciler).
    DesiredState,
    /// An operator-signed job.
    SignedJob(JobAuthority),
    /// The in-guest controller, whose guest was resolved from its token.
    LocalApi {
        /// The caller's own guest.
        caller_vmid: u32,
    },
    /// Rolling back the agent's own journaled operation.
    Compensation {
        /// The operation being compensated.
        op_id: OpId,
    },
    /// Operation `op_id` rolling its guest back to the snapshot it took itself (a controller
    /// rollout whose controller did not report healthy).
    OwnSnapshotRollback {
        /// The operation rolling back.
        op_id: OpId,
        /// The snapshot, as the journal shows the operation took it.
        snapshot: OwnSnapshot,
    },
}

/// Where a guest came from, as the agent's journal knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Provenance {
    created_by: Option<OpId>,
    scratch: bool,
}

impl Provenance {
    /// The provenance of a guest, from the journal's record (`None`: the agent
    /// did not create it, so it holds customer data as far as the gate knows).
    pub fn from_journal(record: Option<&GuestProvenance>) -> Self {
        match record {
            None => Self::unknown(),
            Some(record) => Self {
                created_by: Some(record.created_by_op()),
                scratch: record.is_scratch(),
            },
        }
    }

    /// A guest created by a restore that the journal recorded operation `op_id` sending
    /// for its vmid (and whose tag it carries), after that operation's provenance row went:
    /// a restore that landed after its window ([`crate::ops::journal::LateLanding`]).
    pub fn late_landing_of(op_id: OpId) -> Self {
        Self {
            created_by: Some(op_id),
            scratch: false,
        }
    }

    /// No record: the most careful assumption.
    pub fn unknown() -> Self {
        Self {
            created_by: None,
            scratch: false,
        }
    }
}

/// One question to the gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateRequest {
    /// What would be done.
    pub action: Action,
    /// To what.
    pub target: Target,
    /// On whose authority.
    pub authority: Authority,
    /// What the journal knows about the target guest.
    pub provenance: Provenance,
}

/// Why the gate decided as it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The action loses no data.
    NonDestructive,
    /// The guest was created by the operation being compensated.
    CompensatingOwnCreation,
    /// The journal marks the guest as the agent's scratch guest.
    AgentScratch,
    /// An operator signed a job that covers this action on this target.
    OperatorSigned,
    /// The controller asks for its own guest.
    OwnGuestViaLocalApi,
    /// It would destroy or overwrite customer data without an operator signature.
    NeedsOperatorSignature,
    /// Compensation may only destroy what its own operation created.
    NotCreatedByThisOperation,
    /// Compensation only stops and destroys.
    CompensationOnlyUndoes,
    /// The signed job or local API caller is aimed at another target.
    TargetMismatch,
    /// The signed job's kind does not cover this action.
    JobKindDoesNotCover,
    /// The local API does not offer this action.
    NotALocalApiCapability,
    /// The action is never taken (shrink, recreate a controller's guest).
    NeverTaken,
    /// The target is not of the kind the action needs.
    WrongTargetKind,
    /// The operation rolls its guest back to the snapshot it took itself.
    OwnSnapshotOfThisOperation,
    /// The snapshot was not taken by the operation rolling back.
    NotTakenByThisOperation,
    /// A rollback to an own snapshot is the only action that authority allows.
    OnlyRollbackToOwnSnapshot,
    /// The guest is the agent's already (created or adopted): it is never adopted again.
    AlreadyTheAgents,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reason::NonDestructive => "non-destructive",
            Reason::CompensatingOwnCreation => "compensating what this operation created",
            Reason::AgentScratch => "scratch guest marked by the agent",
            Reason::OperatorSigned => "covered by an operator-signed job",
            Reason::OwnGuestViaLocalApi => "the controller's own guest",
            Reason::NeedsOperatorSignature => {
                "destroys or overwrites customer data: needs an operator-signed job"
            }
            Reason::NotCreatedByThisOperation => "not created by the operation being compensated",
            Reason::CompensationOnlyUndoes => {
                "compensation only stops and destroys what it created"
            }
            Reason::TargetMismatch => "aimed at another target than the request's",
            Reason::JobKindDoesNotCover => "the signed job's kind does not cover this action",
            Reason::NotALocalApiCapability => "not offered by the local API",
            Reason::NeverTaken => "never taken automatically",
            Reason::WrongTargetKind => "wrong kind of target for this action",
            Reason::OwnSnapshotOfThisOperation => "rolls back to the snapshot this operation took",
            Reason::NotTakenByThisOperation => "the snapshot was not taken by this operation",
            Reason::OnlyRollbackToOwnSnapshot => {
                "an own-snapshot rollback allows only that rollback"
            }
            Reason::AlreadyTheAgents => "the journal holds this guest already",
        })
    }
}

/// The gate's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Go ahead.
    Allow(Reason),
    /// Do nothing; report and audit.
    Deny(Reason),
}

impl Decision {
    /// Whether the action may proceed.
    pub fn is_allowed(self) -> bool {
        matches!(self, Decision::Allow(_))
    }

    /// The reason either way.
    pub fn reason(self) -> Reason {
        match self {
            Decision::Allow(reason) | Decision::Deny(reason) => reason,
        }
    }

    /// The audit row recording this decision about `request`.
    pub fn audit_event(self, request: &GateRequest) -> AuditEvent {
        let mut event = AuditEvent::new(if self.is_allowed() {
            "gate.allowed"
        } else {
            "gate.denied"
        });
        let mut snapshot_name = None;
        let (authority, job_kind) = match &request.authority {
            Authority::DesiredState => ("desired_state", None),
            Authority::SignedJob(job) => {
                event.job_id = Some(job.job_id.clone());
                ("signed_job", Some(format!("{:?}", job.kind)))
            }
            Authority::LocalApi { .. } => ("local_api", None),
            Authority::Compensation { op_id } => {
                event.op_id = Some(*op_id);
                ("compensation", None)
            }
            Authority::OwnSnapshotRollback { op_id, snapshot } => {
                event.op_id = Some(*op_id);
                snapshot_name = Some(snapshot.name().to_owned());
                ("own_snapshot_rollback", None)
            }
        };
        let storage = match &request.target {
            Target::Guest { vmid } => {
                event.vmid = Some(*vmid);
                None
            }
            Target::Storage { storage } => Some(storage.clone()),
        };
        event.detail = serde_json::json!({
            "action": format!("{:?}", request.action),
            "authority": authority,
            "job_kind": job_kind,
            "storage": storage,
            "reason": self.reason().to_string(),
        });
        if let (Some(name), Some(detail)) = (snapshot_name, event.detail.as_object_mut()) {
            detail.insert("snapshot".to_owned(), serde_json::Value::String(name));
        }
        event
    }
}

/// The gate.
pub fn decide(request: &GateRequest) -> Decision {
    let GateRequest {
        action,
        target,
        authority,
        provenance,
    } = request;
    let action = *action;
    if action.on_storage() != matches!(target, Target::Storage { .. }) {
        return Decision::Deny(Reason::WrongTargetKind);
    }
    if action.is_never() {
        return Decision::Deny(Reason::NeverTaken);
    }
    match authority {
        Authority::DesiredState => {
            if action.is_non_destructive() {
                Decision::Allow(Reason::NonDestructive)
            } else if action == Action::DestroyGuest && provenance.scratch {
                Decision::Allow(Reason::AgentScratch)
            } else {
                Decision::Deny(Reason::NeedsOperatorSignature)
            }
        }
        Authority::Compensation { op_id } => match action {
            Action::StopGuest => Decision::Allow(Reason::NonDestructive),
            Action::DestroyGuest if provenance.created_by == Some(*op_id) => {
                Decision::Allow(Reason::CompensatingOwnCreation)
            }
            Action::DestroyGuest if provenance.scratch => Decision::Allow(Reason::AgentScratch),
            Action::DestroyGuest => Decision::Deny(Reason::NotCreatedByThisOperation),
            a if a.is_non_destructive() => Decision::Deny(Reason::CompensationOnlyUndoes),
            _ => Decision::Deny(Reason::NeedsOperatorSignature),
        },
        Authority::LocalApi { caller_vmid } => {
            if *target != (Target::Guest { vmid: *caller_vmid }) {
                Decision::Deny(Reason::TargetMismatch)
            } else if matches!(
                action,
                Action::Snapshot | Action::Backup | Action::RollbackToSnapshot
            ) {
                Decision::Allow(Reason::OwnGuestViaLocalApi)
            } else {
                Decision::Deny(Reason::NotALocalApiCapability)
            }
        }
        Authority::OwnSnapshotRollback { op_id, snapshot } => {
            if action != Action::RollbackToSnapshot {
                Decision::Deny(Reason::OnlyRollbackToOwnSnapshot)
            } else if *target
                != (Target::Guest {
                    vmid: snapshot.vmid(),
                })
            {
                Decision::Deny(Reason::TargetMismatch)
            } else if snapshot.taken_by() != *op_id {
                Decision::Deny(Reason::NotTakenByThisOperation)
            } else {
                Decision::Allow(Reason::OwnSnapshotOfThisOperation)
            }
        }
        Authority::SignedJob(job) => {
            if job.target != *target {
                Decision::Deny(Reason::TargetMismatch)
            } else if action.is_non_destructive() {
                Decision::Allow(Reason::NonDestructive)
            } else if action == Action::AdoptGuest && provenance.created_by.is_some() {
                Decision::Deny(Reason::AlreadyTheAgents)
            } else if job.kind.covers(action) {
                Decision::Allow(Reason::OperatorSigned)
            } else {
                Decision::Deny(Reason::JobKindDoesNotCover)
            }
        }
    }
}

#[cfg(test)]
mod tests;
