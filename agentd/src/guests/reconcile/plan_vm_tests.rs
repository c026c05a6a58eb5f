//! A VM of the agent's own in the planner (decision 0117): never provisioned again, and
//! planned as a container is for its power, cores and memory, root disk and network guard;
//! its bootstrap delivered while it runs; orphaned when desired state drops it.

use bosun_proto::desired::{GuestKind, Power};

use super::tests::{desired, facts, seen, spec};
use super::*;

const VMID: u32 = 4321;

/// The desired state of one VM guest, `power`.
fn vm_state(power: Power) -> DesiredState {
    let mut guest = spec(1, power);
    guest.kind = GuestKind::Qemu;
    desired(vec![guest])
}

/// The agent's VM of guest 1 at [`VMID`], as desired, `power`.
fn vm(power: ObservedPower) -> ObservedGuest {
    seen(1, VMID, power)
}

fn with_vm(vm: ObservedGuest, facts: Facts) -> Facts {
    Facts {
        vms: [(Uuid::from_u128(1), vm)].into(),
        ..facts
    }
}

fn names(plan: &Plan) -> Vec<&'static str> {
    plan.actions.iter().map(Action::name).collect()
}

#[test]
fn an_own_vm_is_never_provisioned_again_and_converges_as_it_is() {
    let state = vm_state(Power::Running);
    let none = plan(&state, &[], &facts());
    assert_eq!(names(&none), ["provision"], "{none:?}");
    let got = plan(&state, &[], &with_vm(vm(ObservedPower::Running), facts()));
    assert!(got.is_converged(), "{got:?}");
    // Running without a token: its bootstrap, at its vmid, and nothing else.
    let tokenless = Facts {
        tokenless: [Uuid::from_u128(1)].into(),
        ..facts()
    };
    let got = plan(
        &state,
        &[],
        &with_vm(vm(ObservedPower::Running), tokenless.clone()),
    );
    assert!(
        matches!(
            got.actions.as_slice(),
            [Action::DeliverBootstrap { vmid: VMID, .. }]
        ),
        "{got:?}"
    );
    // Not running: started first; its bootstrap waits until it runs.
    let got = plan(&state, &[], &with_vm(vm(ObservedPower::Stopped), tokenless));
    assert_eq!(names(&got), ["start"], "{got:?}");
}

#[test]
fn a_vms_power_drifts_back_both_ways_as_a_vm() {
    let got = plan(
        &vm_state(Power::Running),
        &[],
        &with_vm(vm(ObservedPower::Stopped), facts()),
    );
    assert_eq!(
        got.actions,
        [Action::Start {
            guest_id: Uuid::from_u128(1),
            vmid: VMID,
            kind: GuestKind::Qemu,
        }]
    );
    let got = plan(
        &vm_state(Power::Stopped),
        &[],
        &with_vm(vm(ObservedPower::Running), facts()),
    );
    assert_eq!(
        got.actions,
        [Action::Stop {
            guest_id: Uuid::from_u128(1),
            vmid: VMID,
            kind: GuestKind::Qemu,
        }]
    );
    // The containers' restart limit: a VM that failed to start too often is broken.
    let failing = Facts {
        start_failures: [(Uuid::from_u128(1), 5)].into(),
        ..facts()
    };
    let got = plan(
        &vm_state(Power::Running),
        &[],
        &with_vm(vm(ObservedPower::Stopped), failing),
    );
    assert!(got.actions.is_empty(), "{got:?}");
    assert!(
        matches!(
            got.findings.as_slice(),
            [Finding::Broken {
                vmid: VMID,
                failures: 5,
                ..
            }]
        ),
        "{got:?}"
    );
}

#[test]
fn a_vm_grows_but_never_shrinks_and_keeps_its_name_share_and_order() {
    let mut small = vm(ObservedPower::Running);
    small.cores = Some(1);
    small.memory_mib = Some(512);
    small.rootfs_gib = Some(4);
    // What a container would have corrected, a VM keeps for now.
    small.hostname = Some("renamed".into());
    small.startup = Some("order=9".into());
    let got = plan(&vm_state(Power::Running), &[], &with_vm(small, facts()));
    assert_eq!(
        got.actions,
        [
            Action::SetSpec {
                guest_id: Uuid::from_u128(1),
                vmid: VMID,
                kind: GuestKind::Qemu,
                hostname: None,
                cores: Some(2),
                memory_mib: Some(1024),
                share: None,
                startup: None,
            },
            Action::GrowRootfs {
                guest_id: Uuid::from_u128(1),
                vmid: VMID,
                kind: GuestKind::Qemu,
                from_gib: 4,
                to_gib: 8,
            },
        ]
    );
    let mut big = vm(ObservedPower::Running);
    big.rootfs_gib = Some(32);
    let got = plan(&vm_state(Power::Running), &[], &with_vm(big, facts()));
    assert!(got.actions.is_empty(), "a shrink is never planned: {got:?}");
    assert_eq!(
        got.findings,
        [Finding::ShrinkRefused {
            guest_id: Uuid::from_u128(1),
            vmid: VMID,
            have_gib: 32,
            want_gib: 8,
        }]
    );
}

#[test]
fn an_unguarded_vm_is_guarded_a_locked_one_waits_and_a_dropped_one_is_orphaned() {
    let mut open = vm(ObservedPower::Running);
    open.unguarded = true;
    let got = plan(&vm_state(Power::Running), &[], &with_vm(open, facts()));
    assert_eq!(
        got.actions,
        [Action::GuardNetwork {
            guest_id: Uuid::from_u128(1),
            vmid: VMID,
            kind: GuestKind::Qemu,
        }]
    );
    let mut locked = vm(ObservedPower::Stopped);
    locked.locked = true;
    let got = plan(&vm_state(Power::Running), &[], &with_vm(locked, facts()));
    assert!(got.actions.is_empty(), "{got:?}");
    assert_eq!(
        got.findings,
        [Finding::Deferred {
            guest_id: Uuid::from_u128(1)
        }]
    );
    // Desired state without it: orphaned, nothing done to it (not even a stop).
    let got = plan(
        &desired(vec![]),
        &[],
        &with_vm(vm(ObservedPower::Running), facts()),
    );
    assert!(got.actions.is_empty(), "{got:?}");
    assert_eq!(
        got.findings,
        [Finding::Orphaned {
            vmid: VMID,
            guest_id: Some(Uuid::from_u128(1)),
        }]
    );
}

#[test]
fn a_lost_vm_is_reported_and_restored_under_auto_never_provisioned() {
    let lost = Facts {
        lost: [(Uuid::from_u128(1), VMID)].into(),
        ..facts()
    };
    let mut state = vm_state(Power::Running);
    state.dr_policy = DrPolicy::Auto;
    let got = plan(&state, &[], &lost);
    assert_eq!(
        got.findings,
        [Finding::Lost {
            guest_id: Uuid::from_u128(1),
            vmid: VMID,
        }]
    );
    match got.actions.as_slice() {
        [
            Action::Recover {
                spec,
                lost_vmid,
                source: None,
            },
        ] => {
            assert_eq!(spec.kind, GuestKind::Qemu);
            assert_eq!(*lost_vmid, VMID);
        }
        other => panic!("{other:?}"),
    }
    // Under `manual` it waits for a signed restore-now; after the restart limit of failed
    // restores it waits too. Never provisioned blank.
    state.dr_policy = DrPolicy::Manual;
    assert!(plan(&state, &[], &lost).actions.is_empty());
    state.dr_policy = DrPolicy::Auto;
    let failed = Facts {
        recover_failures: [(Uuid::from_u128(1), lost.restart_limit.max(1))].into(),
        ..lost.clone()
    };
    assert!(plan(&state, &[], &failed).actions.is_empty());
}

/// A VM whose hot volume asks for the root storage, on a host whose storages are classed as
/// `state` and `classed` say (decision 0124: the containers' rule).
fn hot_vm(classed: Option<bosun_proto::desired::StorageClass>) -> (DesiredState, Facts) {
    use bosun_proto::data_plan::{DataPlan, NodeStorage};
    let mut state = vm_state(Power::Running);
    state.guests[0].hot_volumes = vec![bosun_proto::desired::HotVolume {
        name: "db".into(),
        size_gib: 2,
        path: "/var/lib/db".into(),
        storage: None,
    }];
    let mut plan: DataPlan = serde_json::from_value(serde_json::json!({
        "schema": "bosun.data-plan/v1",
        "host_id": Uuid::from_u128(1),
        "serial": 1,
        "issued_at": "2026-11-26T00:00:00Z",
        "backup": {
            "schedule": "daily",
            "retention": { "keep_daily": 1 },
            "min_interval_seconds": 3600,
            "restore_test_days": null,
            "verify_hours": null,
        },
    }))
    .expect("a plan");
    plan.node_storages = classed
        .map(|class| {
            vec![NodeStorage {
                storage: "local-lvm".into(),
                class,
            }]
        })
        .unwrap_or_default();
    let facts = Facts {
        hot_places: crate::data::storage::hot::HotPlaces::new(&state, Some(&plan), "local-lvm"),
        ..facts()
    };
    (state, facts)
}

#[test]
fn a_vm_whose_hot_volume_has_no_fast_storage_is_refused_as_a_container_is() {
    use bosun_proto::desired::{PlacementRefusal, StorageClass};
    for (classed, why) in [
        (Some(StorageClass::Slow), PlacementRefusal::StorageNotFast),
        (None, PlacementRefusal::StorageUnclassed),
    ] {
        let (state, facts) = hot_vm(classed);
        let got = plan(&state, &[], &facts);
        assert!(names(&got).is_empty(), "{classed:?}: {got:?}");
        assert!(
            got.findings.iter().any(|f| matches!(
                f,
                Finding::HotRefused { volume, storage, reason, .. }
                    if volume == "db" && storage == "local-lvm" && *reason == why
            )),
            "{classed:?}: {got:?}"
        );
    }
    let (state, facts) = hot_vm(Some(StorageClass::Fast));
    let got = plan(&state, &[], &facts);
    assert_eq!(names(&got), ["provision"], "{got:?}");
}

#[test]
fn a_vm_whose_bulk_volume_has_no_target_of_its_class_is_refused() {
    let mut state = vm_state(Power::Running);
    state.guests[0].bulk_volumes = vec![bosun_proto::desired::BulkVolume {
        name: "media".into(),
        size_gib: 4,
        path: "/srv/media".into(),
        class: bosun_proto::desired::StorageClass::Slow,
        target: None,
        backup: bosun_proto::desired::BulkBackup::None {
            acknowledged_by: "ops".into(),
        },
    }];
    let got = plan(&state, &[], &facts());
    assert!(names(&got).is_empty(), "{got:?}");
    assert!(
        got.findings.iter().any(|f| matches!(
            f,
            Finding::PlacementRefused { volume, .. } if volume == "media"
        )),
        "{got:?}"
    );
}
