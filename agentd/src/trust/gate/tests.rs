use proptest::prelude::*;

use super::*;
use crate::clock::ManualClock;
use crate::ops::journal::{NewOperation, OwnSnapshot, StepOutcome, Store};
use crate::ops::operation::OpKind;

const VMID: u32 = 100;
const OTHER_VMID: u32 = 200;

fn op_a() -> OpId {
    OpId::from(uuid::Uuid::from_u128(0xA))
}

fn op_b() -> OpId {
    OpId::from(uuid::Uuid::from_u128(0xB))
}

/// The authorities the exhaustive test walks through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Auth {
    Hub,
    CompensateA,
    CompensateB,
    LocalOwn,
    LocalOther,
    Job(JobKind, bool),
    /// Operation A rolling back to the snapshot A took of the target guest.
    OwnSnapA,
    /// Operation A presenting a snapshot operation B took.
    OwnSnapOfB,
    /// Operation A presenting a snapshot it took of another guest.
    OwnSnapOtherGuest,
}

/// The provenances the exhaustive test walks through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prov {
    Unknown,
    CreatedByA,
    CreatedByB,
    ScratchByA,
    ScratchByB,
}

const PROVS: &[Prov] = &[
    Prov::Unknown,
    Prov::CreatedByA,
    Prov::CreatedByB,
    Prov::ScratchByA,
    Prov::ScratchByB,
];

fn auths() -> Vec<Auth> {
    let mut all = vec![
        Auth::Hub,
        Auth::CompensateA,
        Auth::CompensateB,
        Auth::LocalOwn,
        Auth::LocalOther,
        Auth::OwnSnapA,
        Auth::OwnSnapOfB,
        Auth::OwnSnapOtherGuest,
    ];
    for kind in JobKind::ALL {
        all.push(Auth::Job(*kind, true));
        all.push(Auth::Job(*kind, false));
    }
    all
}

fn target_for(action: Action) -> Target {
    if action.on_storage() {
        Target::Storage {
            storage: "usb-1".into(),
        }
    } else {
        Target::Guest { vmid: VMID }
    }
}

fn other_target_for(action: Action) -> Target {
    if action.on_storage() {
        Target::Storage {
            storage: "usb-2".into(),
        }
    } else {
        Target::Guest { vmid: OTHER_VMID }
    }
}

fn authority(auth: Auth, action: Action) -> Authority {
    match auth {
        Auth::Hub => Authority::DesiredState,
        Auth::CompensateA => Authority::Compensation { op_id: op_a() },
        Auth::CompensateB => Authority::Compensation { op_id: op_b() },
        Auth::LocalOwn => Authority::LocalApi { caller_vmid: VMID },
        Auth::LocalOther => Authority::LocalApi {
            caller_vmid: OTHER_VMID,
        },
        Auth::OwnSnapA => Authority::OwnSnapshotRollback {
            op_id: op_a(),
            snapshot: OwnSnapshot::for_tests(op_a(), VMID, "bosun-ctl-a"),
        },
        Auth::OwnSnapOfB => Authority::OwnSnapshotRollback {
            op_id: op_a(),
            snapshot: OwnSnapshot::for_tests(op_b(), VMID, "bosun-ctl-b"),
        },
        Auth::OwnSnapOtherGuest => Authority::OwnSnapshotRollback {
            op_id: op_a(),
            snapshot: OwnSnapshot::for_tests(op_a(), OTHER_VMID, "bosun-ctl-a"),
        },
        Auth::Job(kind, same_target) => Authority::SignedJob(JobAuthority::new(
            &VerifiedSigner::for_tests("SHA256:test"),
            kind,
            if same_target {
                target_for(action)
            } else {
                other_target_for(action)
            },
            "job-1",
        )),
    }
}

fn provenance(prov: Prov) -> Provenance {
    let (created_by, scratch) = match prov {
        Prov::Unknown => return Provenance::unknown(),
        Prov::CreatedByA => (op_a(), false),
        Prov::CreatedByB => (op_b(), false),
        Prov::ScratchByA => (op_a(), true),
        Prov::ScratchByB => (op_b(), true),
    };
    Provenance {
        created_by: Some(created_by),
        scratch,
    }
}

/// The expectation, written from DESIGN §5 independently of `decide`
/// (action first, then who may do it).
fn expected(action: Action, auth: Auth, prov: Prov) -> bool {
    use Action::*;
    let scratch = matches!(prov, Prov::ScratchByA | Prov::ScratchByB);
    let signed_same = |k: JobKind| auth == Auth::Job(k, true);
    let any_signed_same = matches!(auth, Auth::Job(_, true));
    match action {
        ResizeDown | RecreateControllerGuest => false,
        CreateGuest
        | StartGuest
        | RestartGuest
        | ResizeUp
        | SetSpec
        | GuardNetwork
        | HealControllerInPlace => auth == Auth::Hub || any_signed_same,
        StopGuest => {
            auth == Auth::Hub
                || any_signed_same
                || auth == Auth::CompensateA
                || auth == Auth::CompensateB
        }
        Snapshot | Backup => auth == Auth::Hub || any_signed_same || auth == Auth::LocalOwn,
        RollbackToSnapshot => auth == Auth::LocalOwn || auth == Auth::OwnSnapA,
        DestroyGuest => match auth {
            Auth::Hub => scratch,
            Auth::CompensateA => scratch || prov == Prov::CreatedByA,
            Auth::CompensateB => scratch || prov == Prov::CreatedByB,
            _ => signed_same(JobKind::Decommission),
        },
        DecommissionGuest => signed_same(JobKind::Decommission),
        RestoreOverGuest => signed_same(JobKind::Restore),
        RestoreBulkVolume => signed_same(JobKind::RestoreBulk),
        DetachStorage => signed_same(JobKind::StorageDetach),
        WipeStorage => signed_same(JobKind::StorageWipe),
        AdoptGuest => signed_same(JobKind::Adopt) && prov == Prov::Unknown,
    }
}

#[test]
fn every_combination_matches_the_expectation_table() {
    let mut checked = 0;
    for &action in Action::ALL {
        for auth in auths() {
            for &prov in PROVS {
                let request = GateRequest {
                    action,
                    target: target_for(action),
                    authority: authority(auth, action),
                    provenance: provenance(prov),
                };
                let decision = decide(&request);
                assert_eq!(
                    decision.is_allowed(),
                    expected(action, auth, prov),
                    "{action:?} by {auth:?} on {prov:?}: {decision:?}"
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, Action::ALL.len() * auths().len() * PROVS.len());
}

#[test]
fn every_action_on_the_wrong_kind_of_target_is_denied() {
    for &action in Action::ALL {
        let wrong = if action.on_storage() {
            Target::Guest { vmid: VMID }
        } else {
            Target::Storage {
                storage: "usb-1".into(),
            }
        };
        for auth in auths() {
            let mut authority = authority(auth, action);
            if let Authority::SignedJob(job) = &mut authority {
                job.target = wrong.clone();
            }
            let request = GateRequest {
                action,
                target: wrong.clone(),
                authority,
                provenance: provenance(Prov::ScratchByA),
            };
            assert_eq!(
                decide(&request),
                Decision::Deny(Reason::WrongTargetKind),
                "{action:?} {auth:?}"
            );
        }
    }
}

#[test]
fn reasons_name_the_rule() {
    let cases = [
        (
            Action::DestroyGuest,
            Auth::Hub,
            Prov::Unknown,
            Decision::Deny(Reason::NeedsOperatorSignature),
        ),
        (
            Action::DestroyGuest,
            Auth::Hub,
            Prov::CreatedByA,
            Decision::Deny(Reason::NeedsOperatorSignature),
        ),
        (
            Action::DestroyGuest,
            Auth::Hub,
            Prov::ScratchByB,
            Decision::Allow(Reason::AgentScratch),
        ),
        (
            Action::DestroyGuest,
            Auth::CompensateA,
            Prov::CreatedByA,
            Decision::Allow(Reason::CompensatingOwnCreation),
        ),
        (
            Action::DestroyGuest,
            Auth::CompensateA,
            Prov::CreatedByB,
            Decision::Deny(Reason::NotCreatedByThisOperation),
        ),
        (
            Action::DestroyGuest,
            Auth::CompensateA,
            Prov::Unknown,
            Decision::Deny(Reason::NotCreatedByThisOperation),
        ),
        (
            Action::StartGuest,
            Auth::CompensateA,
            Prov::CreatedByA,
            Decision::Deny(Reason::CompensationOnlyUndoes),
        ),
        (
            Action::RestoreOverGuest,
            Auth::CompensateA,
            Prov::CreatedByA,
            Decision::Deny(Reason::NeedsOperatorSignature),
        ),
        (
            Action::RestoreOverGuest,
            Auth::Job(JobKind::Restore, true),
            Prov::Unknown,
            Decision::Allow(Reason::OperatorSigned),
        ),
        (
            Action::RestoreOverGuest,
            Auth::Job(JobKind::Restore, false),
            Prov::Unknown,
            Decision::Deny(Reason::TargetMismatch),
        ),
        (
            Action::RestoreOverGuest,
            Auth::Job(JobKind::Decommission, true),
            Prov::Unknown,
            Decision::Deny(Reason::JobKindDoesNotCover),
        ),
        (
            Action::DecommissionGuest,
            Auth::Hub,
            Prov::ScratchByA,
            Decision::Deny(Reason::NeedsOperatorSignature),
        ),
        (
            Action::Snapshot,
            Auth::LocalOwn,
            Prov::Unknown,
            Decision::Allow(Reason::OwnGuestViaLocalApi),
        ),
        (
            Action::Snapshot,
            Auth::LocalOther,
            Prov::Unknown,
            Decision::Deny(Reason::TargetMismatch),
        ),
        (
            Action::StartGuest,
            Auth::LocalOwn,
            Prov::Unknown,
            Decision::Deny(Reason::NotALocalApiCapability),
        ),
        (
            Action::ResizeDown,
            Auth::Job(JobKind::Restore, true),
            Prov::Unknown,
            Decision::Deny(Reason::NeverTaken),
        ),
        (
            Action::RecreateControllerGuest,
            Auth::Hub,
            Prov::ScratchByA,
            Decision::Deny(Reason::NeverTaken),
        ),
        (
            Action::HealControllerInPlace,
            Auth::Hub,
            Prov::Unknown,
            Decision::Allow(Reason::NonDestructive),
        ),
    ];
    for (action, auth, prov, want) in cases {
        let request = GateRequest {
            action,
            target: target_for(action),
            authority: authority(auth, action),
            provenance: provenance(prov),
        };
        assert_eq!(decide(&request), want, "{action:?} by {auth:?} on {prov:?}");
        assert!(!want.reason().to_string().is_empty());
    }
}

#[test]
fn provenance_comes_from_the_journal_only() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new("2026-01-01T00:00:00Z".parse().unwrap());
    let mut store = Store::open(&dir.path().join("j.db"), clock.shared()).unwrap();
    let new = NewOperation {
        kind: OpKind::Provision,
        guest_id: None,
        vmid: None,
        job_id: None,
        request_id: None,
    };
    let test_op = store.begin_operation(&new).unwrap();
    let other_op = store.begin_operation(&new).unwrap();
    store
        .record_created(test_op, 9001, None, bosun_proto::desired::GuestKind::Lxc)
        .unwrap();
    store.mark_scratch(test_op, 9001).unwrap();
    store
        .record_created(test_op, 9002, None, bosun_proto::desired::GuestKind::Lxc)
        .unwrap();

    let ask = |vmid: u32, authority: Authority, store: &Store| {
        decide(&GateRequest {
            action: Action::DestroyGuest,
            target: Target::Guest { vmid },
            authority,
            provenance: Provenance::from_journal(store.provenance(vmid).unwrap().as_ref()),
        })
    };
    // The agent's scratch guest may go on a desired-state pass.
    assert_eq!(
        ask(9001, Authority::DesiredState, &store),
        Decision::Allow(Reason::AgentScratch)
    );
    // A guest it created (not scratch) only by compensating that operation.
    assert!(!ask(9002, Authority::DesiredState, &store).is_allowed());
    assert!(ask(9002, Authority::Compensation { op_id: test_op }, &store).is_allowed());
    assert!(!ask(9002, Authority::Compensation { op_id: other_op }, &store).is_allowed());
    // A guest the journal does not know (a customer's) never without a signature.
    assert!(!ask(100, Authority::DesiredState, &store).is_allowed());
    assert!(!ask(100, Authority::Compensation { op_id: test_op }, &store).is_allowed());
}

#[test]
fn audit_event_records_the_decision() {
    let request = GateRequest {
        action: Action::RestoreOverGuest,
        target: Target::Guest { vmid: VMID },
        authority: Authority::DesiredState,
        provenance: Provenance::unknown(),
    };
    let decision = decide(&request);
    let event = decision.audit_event(&request);
    assert_eq!(event.event, "gate.denied");
    assert_eq!(event.vmid, Some(VMID));
    assert_eq!(event.detail["action"], "RestoreOverGuest");
    assert_eq!(event.detail["authority"], "desired_state");
    assert_eq!(
        event.detail["reason"],
        Reason::NeedsOperatorSignature.to_string()
    );
}

fn arb_action() -> impl Strategy<Value = Action> {
    proptest::sample::select(Action::ALL.to_vec())
}

fn arb_op() -> impl Strategy<Value = OpId> {
    (0u128..3).prop_map(|n| OpId::from(uuid::Uuid::from_u128(n + 1)))
}

fn arb_target() -> impl Strategy<Value = Target> {
    prop_oneof![
        (1u32..4).prop_map(|vmid| Target::Guest { vmid }),
        (1u32..3).prop_map(|n| Target::Storage {
            storage: format!("s{n}")
        }),
    ]
}

fn arb_authority() -> impl Strategy<Value = Authority> {
    prop_oneof![
        Just(Authority::DesiredState),
        arb_op().prop_map(|op_id| Authority::Compensation { op_id }),
        (1u32..4).prop_map(|caller_vmid| Authority::LocalApi { caller_vmid }),
        (arb_op(), arb_op(), 1u32..4).prop_map(|(op_id, taken_by, vmid)| {
            Authority::OwnSnapshotRollback {
                op_id,
                snapshot: OwnSnapshot::for_tests(taken_by, vmid, "bosun-ctl"),
            }
        }),
        (
            proptest::sample::select(JobKind::ALL.to_vec()),
            arb_target()
        )
            .prop_map(|(kind, target)| {
                Authority::SignedJob(JobAuthority::new(
                    &VerifiedSigner::for_tests("SHA256:p"),
                    kind,
                    target,
                    "job",
                ))
            }),
    ]
}

fn arb_provenance() -> impl Strategy<Value = Provenance> {
    (proptest::option::of(arb_op()), any::<bool>()).prop_map(|(created_by, scratch)| Provenance {
        created_by,
        scratch: scratch && created_by.is_some(),
    })
}

proptest! {
    #[test]
    fn destructive_actions_need_a_signature_or_the_agents_own_provenance(
        action in arb_action(),
        target in arb_target(),
        authority in arb_authority(),
        provenance in arb_provenance(),
    ) {
        let request = GateRequest { action, target: target.clone(), authority: authority.clone(), provenance };
        let decision = decide(&request);
        prop_assert_eq!(decision, decide(&request), "deterministic");
        if !decision.is_allowed() {
            return Ok(());
        }
        prop_assert!(!action.is_never());
        prop_assert_eq!(action.on_storage(), matches!(target, Target::Storage { .. }));
        match &authority {
            Authority::LocalApi { caller_vmid } => {
                prop_assert_eq!(&target, &Target::Guest { vmid: *caller_vmid });
            }
            Authority::SignedJob(job) => prop_assert_eq!(job.target(), &target),
            _ => {}
        }
        if !action.is_non_destructive() {
            let own = matches!(authority, Authority::Compensation { op_id } if provenance.created_by == Some(op_id));
            let by_agent = action == Action::DestroyGuest
                && (provenance.scratch || own)
                && matches!(authority, Authority::DesiredState | Authority::Compensation { .. });
            let signed = matches!(&authority, Authority::SignedJob(job) if job.kind().covers(action));
            let rollback = action == Action::RollbackToSnapshot && matches!(authority, Authority::LocalApi { .. });
            let own_snapshot = action == Action::RollbackToSnapshot
                && matches!(&authority, Authority::OwnSnapshotRollback { op_id, snapshot }
                    if snapshot.taken_by() == *op_id && target == (Target::Guest { vmid: snapshot.vmid() }));
            prop_assert!(by_agent || signed || rollback || own_snapshot, "{:?} allowed {:?}", request, decision);
        }
        if provenance == Provenance::unknown() && authority == Authority::DesiredState {
            prop_assert!(action.is_non_destructive());
        }
    }
}

#[test]
fn a_rollback_to_an_own_snapshot_needs_the_journals_proof_of_this_operation() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new("2026-01-01T00:00:00Z".parse().unwrap());
    let mut store = Store::open(&dir.path().join("j.db"), clock.shared()).unwrap();
    let new = NewOperation {
        kind: OpKind::ControllerUpdateJob,
        guest_id: Some("g".into()),
        vmid: Some(VMID),
        job_id: None,
        request_id: None,
    };
    let rollout = store.begin_operation(&new).unwrap();
    let other = store.begin_operation(&new).unwrap();
    let detail = serde_json::json!({ "vmid": VMID, "snapshot": "bosun-ctl-1" });
    let seq = store.step_intent(rollout, "snapshot", &detail).unwrap();
    store
        .step_finished(rollout, seq, &StepOutcome::Ok { warnings: 0 })
        .unwrap();
    let ask = |op_id: OpId, snapshot: OwnSnapshot, action: Action, vmid: u32| {
        decide(&GateRequest {
            action,
            target: Target::Guest { vmid },
            authority: Authority::OwnSnapshotRollback { op_id, snapshot },
            provenance: Provenance::unknown(),
        })
    };
    let own = store
        .own_snapshot(rollout, VMID, "bosun-ctl-1")
        .unwrap()
        .unwrap();
    assert_eq!(
        ask(rollout, own.clone(), Action::RollbackToSnapshot, VMID),
        Decision::Allow(Reason::OwnSnapshotOfThisOperation)
    );
    // Another operation cannot borrow the proof, nor aim it at another guest or action.
    assert_eq!(
        ask(other, own.clone(), Action::RollbackToSnapshot, VMID),
        Decision::Deny(Reason::NotTakenByThisOperation)
    );
    assert_eq!(
        ask(rollout, own.clone(), Action::RollbackToSnapshot, OTHER_VMID),
        Decision::Deny(Reason::TargetMismatch)
    );
    for action in [
        Action::DestroyGuest,
        Action::RestoreOverGuest,
        Action::DecommissionGuest,
    ] {
        assert_eq!(
            ask(rollout, own.clone(), action, VMID),
            Decision::Deny(Reason::OnlyRollbackToOwnSnapshot)
        );
    }
    // The journal gives no proof for a snapshot the operation did not take.
    assert!(
        store
            .own_snapshot(other, VMID, "bosun-ctl-1")
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .own_snapshot(rollout, VMID, "customer")
            .unwrap()
            .is_none()
    );
    let event = ask(rollout, own, Action::RollbackToSnapshot, VMID).audit_event(&GateRequest {
        action: Action::RollbackToSnapshot,
        target: Target::Guest { vmid: VMID },
        authority: Authority::OwnSnapshotRollback {
            op_id: rollout,
            snapshot: store
                .own_snapshot(rollout, VMID, "bosun-ctl-1")
                .unwrap()
                .unwrap(),
        },
        provenance: Provenance::unknown(),
    });
    assert_eq!(event.detail["authority"], "own_snapshot_rollback");
    assert_eq!(event.detail["snapshot"], "bosun-ctl-1");
    assert_eq!(event.op_id, Some(rollout));
}
