//! A VM of the agent's own in the planner (decisions 0117, 0125): never provisioned again, and
//! planned as a container is for its power, name, cores and memory, share, `startup`, root
//! disk and network guard; its bootstrap delivered while it runs; orphaned when desired state
//! drops it.

use bosun_proto::desired::{GuestKind, Power};
use bosun_proto::share::ShareClass;
use bosun_pve::{StartupOrder, Thousandths, VmConfig};

use super::super::share::{Limit, ObservedShare, ShareChange, vm_rated_devices};

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
fn a_vm_grows_but_never_shrinks() {
    let mut small = vm(ObservedPower::Running);
    small.cores = Some(1);
    small.memory_mib = Some(512);
    small.rootfs_gib = Some(4);
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

/// One VM guest in class `class`, providing `db` (so it takes part in the order, place 1).
fn classed_vm_state(class: ShareClass) -> DesiredState {
    let mut state = vm_state(Power::Running);
    state.guests[0].share_class = Some(class.name.clone());
    state.guests[0].provides = vec!["db".into()];
    state.share_classes = vec![class];
    state
}

fn class(weight: u32, limit_millicores: u32, rate: u32) -> ShareClass {
    ShareClass {
        name: "shop".into(),
        cpu_weight: Some(weight),
        cpu_limit_millicores: Some(limit_millicores),
        net_rate_mbytes_per_s: Some(rate),
    }
}

/// The agent's VM of guest 1 holding exactly what [`class`]`(300, 1500, 10)` and place 1 ask,
/// with two network devices.
fn vm_as_asked() -> ObservedGuest {
    ObservedGuest {
        share: ObservedShare {
            cpu_weight: Some(300),
            cpu_limit: Some(Thousandths(1500)),
            net_rates: vec![Some(Thousandths::whole(10)), Some(Thousandths::whole(10))],
        },
        startup: Some("order=1,up=0,down=60".into()),
        ..vm(ObservedPower::Running)
    }
}

fn set_spec_of(got: &Plan) -> (Option<String>, Option<ShareChange>, Option<StartupOrder>) {
    match got.actions.as_slice() {
        [
            Action::SetSpec {
                kind: GuestKind::Qemu,
                vmid: VMID,
                cores: None,
                memory_mib: None,
                hostname,
                share,
                startup,
                ..
            },
        ] => (hostname.clone(), *share, *startup),
        other => panic!("one set_spec for the vm, nothing else: {other:?}"),
    }
}

#[test]
fn a_vms_name_share_and_order_are_planned_as_a_containers_and_nothing_when_they_hold() {
    let state = classed_vm_state(class(300, 1500, 10));
    let got = plan(&state, &[], &with_vm(vm_as_asked(), facts()));
    assert!(got.is_converged(), "as asked: nothing to do: {got:?}");

    // Each drift alone is planned alone, for the VM, with the VM's kind.
    let renamed = ObservedGuest {
        hostname: Some("renamed".into()),
        ..vm_as_asked()
    };
    let got = plan(&state, &[], &with_vm(renamed, facts()));
    assert_eq!(set_spec_of(&got), (Some("g1".into()), None, None));

    let mut weighted = vm_as_asked();
    weighted.share.cpu_weight = Some(10_000);
    let got = plan(&state, &[], &with_vm(weighted, facts()));
    let want = ShareChange {
        cpu_weight: Some(300),
        cpu_limit: None,
        net_rate: None,
    };
    assert_eq!(set_spec_of(&got), (None, Some(want), None));

    let mut unlimited = vm_as_asked();
    unlimited.share.cpu_limit = Some(Thousandths(0));
    let got = plan(&state, &[], &with_vm(unlimited, facts()));
    let want = ShareChange {
        cpu_weight: None,
        cpu_limit: Some(Limit::To(Thousandths(1500))),
        net_rate: None,
    };
    assert_eq!(set_spec_of(&got), (None, Some(want), None));

    // One device without its rate: the rate is planned for the VM's devices.
    let mut unrated = vm_as_asked();
    unrated.share.net_rates[1] = Some(Thousandths(0));
    let got = plan(&state, &[], &with_vm(unrated, facts()));
    let want = ShareChange {
        cpu_weight: None,
        cpu_limit: None,
        net_rate: Some(Limit::To(Thousandths::whole(10))),
    };
    assert_eq!(set_spec_of(&got), (None, Some(want), None));

    let reordered = ObservedGuest {
        startup: Some("order=9".into()),
        ..vm_as_asked()
    };
    let got = plan(&state, &[], &with_vm(reordered, facts()));
    let place = StartupOrder {
        order: 1,
        up: Some(0),
        down: Some(60),
    };
    assert_eq!(set_spec_of(&got), (None, None, Some(place)));

    // A VM taking part in no order keeps whatever `startup` it has, as a container does.
    let mut unordered = state.clone();
    unordered.guests[0].provides.clear();
    let reordered = ObservedGuest {
        startup: Some("order=9".into()),
        ..vm_as_asked()
    };
    let got = plan(&unordered, &[], &with_vm(reordered, facts()));
    assert!(got.is_converged(), "{got:?}");
}

#[test]
fn a_vms_cpu_limit_is_held_to_what_proxmox_takes_for_a_vm() {
    // 200 cores: a container takes it, a VM's `cpulimit` stops at 128.
    let state = classed_vm_state(class(300, 200_000, 10));
    let mut unlimited = vm_as_asked();
    unlimited.share.cpu_limit = Some(Thousandths(0));
    let got = plan(&state, &[], &with_vm(unlimited, facts()));
    let want = ShareChange {
        cpu_weight: None,
        cpu_limit: Some(Limit::To(Thousandths::whole(128))),
        net_rate: None,
    };
    assert_eq!(set_spec_of(&got), (None, Some(want), None));
    let mut at_most = vm_as_asked();
    at_most.share.cpu_limit = Some(Thousandths::whole(128));
    let got = plan(&state, &[], &with_vm(at_most, facts()));
    assert!(got.is_converged(), "held at 128 cores, converged: {got:?}");
}

fn vm_config(pairs: &[(&str, &str)]) -> VmConfig {
    let mut values: serde_json::Map<String, serde_json::Value> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), serde_json::json!(v)))
        .collect();
    values.insert("digest".into(), serde_json::json!("d"));
    serde_json::from_value(serde_json::Value::Object(values)).unwrap()
}

#[test]
fn a_rate_change_writes_each_device_back_whole_with_its_mac() {
    let config = vm_config(&[
        (
            "net0",
            "virtio=BC:24:11:5E:A1:08,bridge=vmbr0,firewall=1,link_down=1,tag=20",
        ),
        (
            "net1",
            "model=virtio,macaddr=BC:24:11:00:00:02,bridge=vmbr1,firewall=1,rate=10",
        ),
    ]);
    let set = vm_rated_devices(&config, Limit::To(Thousandths(12_500))).unwrap();
    let written: Vec<String> = set
        .values()
        .map(|n| n.to_property_string().unwrap())
        .collect();
    assert_eq!(
        written,
        [
            "virtio=BC:24:11:5E:A1:08,bridge=vmbr0,firewall=1,link_down=1,rate=12.5,tag=20",
            "virtio=BC:24:11:00:00:02,bridge=vmbr1,firewall=1,rate=12.5",
        ],
        "the MAC, bridge, firewall, link state and VLAN as read; only the rate changed"
    );
    // A device that holds the rate already is not written; lifting it removes `rate=`.
    let set = vm_rated_devices(&config, Limit::To(Thousandths::whole(10))).unwrap();
    assert_eq!(set.keys().copied().collect::<Vec<_>>(), [0]);
    let set = vm_rated_devices(&config, Limit::Lifted).unwrap();
    assert_eq!(
        set[&1].to_property_string().unwrap(),
        "virtio=BC:24:11:00:00:02,bridge=vmbr1,firewall=1"
    );
    assert_eq!(set.keys().copied().collect::<Vec<_>>(), [1]);
    // A device with a key Bosun would drop is refused, never written back without it.
    let odd = vm_config(&[("net0", "virtio=BC:24:11:5E:A1:08,bridge=vmbr0,queues=4")]);
    let error = vm_rated_devices(&odd, Limit::To(Thousandths::whole(10))).unwrap_err();
    assert_eq!(error.index, 0);
}
