use bosun_proto::desired::{
    BackupPolicy, CustomerIdentity, DesiredState, GoldenArchive, GuestResources, GuestSpec, Power,
    RestoreTestPolicy,
};
use proptest::prelude::*;

use super::*;

pub(in crate::guests::reconcile) fn desired(guests: Vec<GuestSpec>) -> DesiredState {
    DesiredState {
        schema: "bosun.desired/v1".into(),
        guests,
        storage: vec![],
        backup_policy: BackupPolicy {
            schedule: "daily".into(),
            retention: Default::default(),
            quiesce_grace_minutes: 0,
            target: None,
            further_tiers: Vec::new(),
            floor: None,
        },
        verify_policy: Default::default(),
        restore_test_policy: RestoreTestPolicy {
            enabled: false,
            interval_days: 7,
            timeout_minutes: 30,
            window: None,
        },
        dr_policy: Default::default(),
        golden_recipe: None,
        data_plan: None,
        tunnel_credentials: None,
        share_classes: Vec::new(),
    }
}

pub(in crate::guests::reconcile) fn spec(n: u128, power: Power) -> GuestSpec {
    GuestSpec {
        guest_id: Uuid::from_u128(n),
        kind: Default::default(),
        hostname: format!("g{n}"),
        vmid: None,
        customer: CustomerIdentity {
            customer_id: "c".into(),
            display_name: "C".into(),
        },
        resources: GuestResources {
            cores: 2,
            memory_mib: 1024,
            rootfs_gib: 8,
        },
        power,
        golden: GoldenArchive {
            volid: "local:backup/vzdump-lxc-9000-2026_01_01-00_00_00.tar.zst".into(),
            sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".to_owned(),
            signed: None,
            version: None,
        },
        bulk_volumes: Vec::new(),
        hot_volumes: Vec::new(),
        thresholds: None,
        share_class: None,
        provides: Vec::new(),
        requires: Vec::new(),
        network: None,
    }
}

pub(in crate::guests::reconcile) fn seen(
    n: u128,
    vmid: u32,
    power: ObservedPower,
) -> ObservedGuest {
    ObservedGuest {
        vmid,
        guest_id: Some(Uuid::from_u128(n)),
        power,
        hostname: Some(format!("g{n}")),
        cores: Some(2),
        memory_mib: Some(1024),
        rootfs_gib: Some(8),
        locked: false,
        unguarded: false,
        addresses: Vec::new(),
        share: Default::default(),
        startup: None,
    }
}

pub(in crate::guests::reconcile) fn facts() -> Facts {
    Facts {
        restart_limit: 5,
        ..Facts::default()
    }
}

#[test]
fn table() {
    let g1 = Uuid::from_u128(1);
    struct Case {
        name: &'static str,
        desired: Vec<GuestSpec>,
        observed: Vec<ObservedGuest>,
        facts: Facts,
        actions: Vec<&'static str>,
        findings: Vec<Finding>,
    }
    let mut drifted = seen(1, 101, ObservedPower::Running);
    drifted.cores = Some(1);
    drifted.hostname = Some("old".into());
    let mut small = seen(1, 101, ObservedPower::Running);
    small.rootfs_gib = Some(4);
    let mut big = seen(1, 101, ObservedPower::Running);
    big.rootfs_gib = Some(16);
    let mut locked = seen(1, 101, ObservedPower::Stopped);
    locked.locked = true;
    let mut unguarded = seen(1, 101, ObservedPower::Stopped);
    unguarded.unguarded = true;
    let mut unguarded_stranger = seen(2, 102, ObservedPower::Running);
    unguarded_stranger.guest_id = None;
    unguarded_stranger.unguarded = true;
    let mut foreign = seen(1, 150, ObservedPower::Running);
    foreign.guest_id = None;
    let mut pinned = spec(1, Power::Running);
    pinned.vmid = Some(150);
    let mut pinned_taken = spec(2, Power::Running);
    pinned_taken.vmid = Some(101);
    let cases = vec![
        Case {
            name: "missing guest is provisioned",
            desired: vec![spec(1, Power::Running)],
            observed: vec![],
            facts: facts(),
            actions: vec!["provision"],
            findings: vec![],
        },
        Case {
            name: "converged guest needs nothing",
            desired: vec![spec(1, Power::Running)],
            observed: vec![seen(1, 101, ObservedPower::Running)],
            facts: facts(),
            actions: vec![],
            findings: vec![],
        },
        Case {
            name: "a guest of ours without its network guard gets it before power",
            desired: vec![spec(1, Power::Running)],
            observed: vec![unguarded.clone()],
            facts: facts(),
            actions: vec!["guard_network", "start"],
            findings: vec![],
        },
        Case {
            name: "a stranger is never guarded, only reported",
            desired: vec![],
            observed: vec![unguarded_stranger.clone()],
            facts: facts(),
            actions: vec![],
            findings: vec![Finding::Orphaned {
                vmid: 102,
                guest_id: None,
            }],
        },
        Case {
            name: "stopped guest that should run is started",
            desired: vec![spec(1, Power::Running)],
            observed: vec![seen(1, 101, ObservedPower::Stopped)],
            facts: facts(),
            actions: vec!["start"],
            findings: vec![],
        },
        Case {
            name: "running guest that should stop is stopped",
            desired: vec![spec(1, Power::Stopped)],
            observed: vec![seen(1, 101, ObservedPower::Running)],
            facts: facts(),
            actions: vec!["stop"],
            findings: vec![],
        },
        Case {
            name: "spec drift is corrected before power",
            desired: vec![spec(1, Power::Running)],
            observed: vec![{
                let mut d = drifted.clone();
                d.power = ObservedPower::Stopped;
                d
            }],
            facts: facts(),
            actions: vec!["set_spec", "start"],
            findings: vec![],
        },
        Case {
            name: "smaller rootfs grows",
            desired: vec![spec(1, Power::Running)],
            observed: vec![small],
            facts: facts(),
            actions: vec!["grow_rootfs"],
            findings: vec![],
        },
        Case {
            name: "larger rootfs is a refused shrink",
            desired: vec![spec(1, Power::Running)],
            observed: vec![big],
            facts: facts(),
            actions: vec![],
            findings: vec![Finding::ShrinkRefused {
                guest_id: g1,
                vmid: 101,
                have_gib: 16,
                want_gib: 8,
            }],
        },
        Case {
            name: "guest gone from desired state is orphaned, untouched",
            desired: vec![],
            observed: vec![seen(1, 101, ObservedPower::Running)],
            facts: facts(),
            actions: vec![],
            findings: vec![Finding::Orphaned {
                vmid: 101,
                guest_id: Some(g1),
            }],
        },
        Case {
            name: "five failed starts make a guest broken",
            desired: vec![spec(1, Power::Running)],
            observed: vec![seen(1, 101, ObservedPower::Stopped)],
            facts: Facts {
                start_failures: [(g1, 5)].into(),
                ..facts()
            },
            actions: vec![],
            findings: vec![Finding::Broken {
                guest_id: g1,
                vmid: 101,
                failures: 5,
            }],
        },
        Case {
            name: "four failed starts still retry",
            desired: vec![spec(1, Power::Running)],
            observed: vec![seen(1, 101, ObservedPower::Stopped)],
            facts: Facts {
                start_failures: [(g1, 4)].into(),
                ..facts()
            },
            actions: vec!["start"],
            findings: vec![],
        },
        Case {
            name: "a locked guest is deferred",
            desired: vec![spec(1, Power::Running)],
            observed: vec![locked],
            facts: facts(),
            actions: vec![],
            findings: vec![Finding::Deferred { guest_id: g1 }],
        },
        Case {
            name: "a busy guest is deferred, even if missing",
            desired: vec![spec(1, Power::Running)],
            observed: vec![],
            facts: Facts {
                busy: [g1].into(),
                ..facts()
            },
            actions: vec![],
            findings: vec![Finding::Deferred { guest_id: g1 }],
        },
        Case {
            name: "a pinned vmid held by a guest the agent did not create is never adopted",
            desired: vec![pinned.clone()],
            observed: vec![foreign.clone()],
            facts: facts(),
            actions: vec![],
            findings: vec![
                Finding::VmidTaken {
                    guest_id: pinned.guest_id,
                    vmid: foreign.vmid,
                },
                Finding::Orphaned {
                    vmid: foreign.vmid,
                    guest_id: None,
                },
            ],
        },
        Case {
            name: "a lost guest is restored from its backup (DR auto), never provisioned blank, even with a stranger at its vmid",
            desired: vec![pinned.clone()],
            observed: vec![foreign.clone()],
            facts: Facts {
                lost: [(pinned.guest_id, foreign.vmid)].into(),
                ..facts()
            },
            actions: vec!["recover"],
            findings: vec![
                Finding::Lost {
                    guest_id: pinned.guest_id,
                    vmid: foreign.vmid,
                },
                Finding::Orphaned {
                    vmid: foreign.vmid,
                    guest_id: None,
                },
            ],
        },
        Case {
            name: "a decommissioned guest named in desired state is not provisioned again",
            desired: vec![spec(1, Power::Running)],
            observed: vec![],
            facts: Facts {
                gone: [g1].into(),
                ..facts()
            },
            actions: vec![],
            findings: vec![Finding::Decommissioned { guest_id: g1 }],
        },
        Case {
            name: "a pinned vmid held by another managed guest is not provisioned over",
            desired: vec![pinned_taken, spec(1, Power::Running)],
            observed: vec![seen(1, 101, ObservedPower::Running)],
            facts: facts(),
            actions: vec![],
            findings: vec![Finding::VmidTaken {
                guest_id: Uuid::from_u128(2),
                vmid: 101,
            }],
        },
    ];
    for case in cases {
        let got = plan(&desired(case.desired), &case.observed, &case.facts);
        let names: Vec<&str> = got.actions.iter().map(Action::name).collect();
        assert_eq!(names, case.actions, "{}: actions", case.name);
        assert_eq!(got.findings, case.findings, "{}: findings", case.name);
    }
}

fn arb_power() -> impl Strategy<Value = ObservedPower> {
    prop_oneof![
        Just(ObservedPower::Running),
        Just(ObservedPower::Stopped),
        Just(ObservedPower::Other)
    ]
}

prop_compose! {
    fn arb_observed()(
        n in 0u128..8, vmid in 100u32..110, power in arb_power(),
        cores in 1u16..4, rootfs in 1u32..16, managed in any::<bool>(), locked in any::<bool>(),
        unguarded in any::<bool>(),
    ) -> ObservedGuest {
        ObservedGuest {
            vmid,
            guest_id: managed.then(|| Uuid::from_u128(n)),
            power,
            hostname: Some(format!("g{n}")),
            cores: Some(cores),
            memory_mib: Some(1024),
            rootfs_gib: Some(rootfs),
            locked,
            unguarded: unguarded && managed,
            addresses: Vec::new(),
            share: Default::default(),
            startup: None,
        }
    }
}

proptest! {
    #[test]
    fn never_touches_what_is_not_desired_and_never_duplicates(
        wanted in proptest::collection::btree_set(0u128..8, 0..6),
        running in any::<bool>(),
        observed in proptest::collection::vec(arb_observed(), 0..8),
        failures in 0u32..8,
    ) {
        // Distinct vmids and guest ids, as on a real host.
        let mut vmids = BTreeSet::new();
        let mut ids = BTreeSet::new();
        let observed: Vec<_> = observed.into_iter().filter(|o| {
            vmids.insert(o.vmid) && o.guest_id.is_none_or(|g| ids.insert(g))
        }).collect();
        let power = if running { Power::Running } else { Power::Stopped };
        let specs: Vec<_> = wanted.iter().map(|n| spec(*n, power)).collect();
        let facts = Facts {
            start_failures: wanted.iter().map(|n| (Uuid::from_u128(*n), failures)).collect(),
            ..facts()
        };
        let got = plan(&desired(specs), &observed, &facts);
        let wanted_ids: BTreeSet<Uuid> = wanted.iter().map(|n| Uuid::from_u128(*n)).collect();
        for action in &got.actions {
            // Every action is for a desired guest.
            prop_assert!(wanted_ids.contains(&action.guest_id()));
            match action {
                // Never provisions a guest that exists.
                Action::Provision { spec } => {
                    let exists = observed.iter().any(|o| o.guest_id == Some(spec.guest_id));
                    prop_assert!(!exists);
                }
                Action::Start { guest_id, .. } => prop_assert!(failures < 5, "{guest_id} broken yet started"),
                Action::GrowRootfs { from_gib, to_gib, .. } => prop_assert!(from_gib < to_gib),
                _ => {}
            }
            // Never acts on a locked guest or an orphan.
            if let Some(vmid) = match action {
                Action::Provision { .. } | Action::Recover { .. } => None,
                Action::SetSpec { vmid, .. } | Action::GrowRootfs { vmid, .. }
                | Action::GuardNetwork { vmid, .. }
                | Action::Start { vmid, .. } | Action::Stop { vmid, .. }
                | Action::DeliverBootstrap { vmid, .. } => Some(*vmid),
            } {
                let o = observed.iter().find(|o| o.vmid == vmid);
                prop_assert!(o.is_some_and(|o| !o.locked));
                let orphaned = got.findings.iter().any(|f| matches!(f, Finding::Orphaned { vmid: v, .. } if *v == vmid));
                prop_assert!(!orphaned);
            }
        }
        // Every observed guest is either claimed by a desired guest or reported orphaned.
        for o in &observed {
            let orphan = got.findings.iter().any(|f| matches!(f, Finding::Orphaned { vmid, .. } if *vmid == o.vmid));
            let claimed = o.guest_id.is_some_and(|g| wanted_ids.contains(&g));
            prop_assert!(orphan != claimed || o.guest_id.is_none());
        }
        // At most one provision per guest.
        let provisions: Vec<_> = got.actions.iter().filter(|a| matches!(a, Action::Provision { .. })).map(Action::guest_id).collect();
        let unique: BTreeSet<_> = provisions.iter().collect();
        prop_assert_eq!(provisions.len(), unique.len());
    }
}

#[test]
fn a_lost_guest_waits_for_an_operator_under_manual_dr_or_after_failed_restores() {
    let lost = spec(1, Power::Running);
    let lost_facts = |failures: u32| Facts {
        lost: [(lost.guest_id, 300)].into(),
        recover_failures: [(lost.guest_id, failures)].into(),
        ..facts()
    };
    let mut manual = desired(vec![lost.clone()]);
    manual.dr_policy = bosun_proto::desired::DrPolicy::Manual;
    let got = plan(&manual, &[], &lost_facts(0));
    assert!(got.actions.is_empty(), "{:?}", got.actions);
    assert_eq!(
        got.findings,
        vec![Finding::Lost {
            guest_id: lost.guest_id,
            vmid: 300
        }]
    );
    let auto = desired(vec![lost.clone()]);
    let limit = facts().restart_limit;
    assert_eq!(plan(&auto, &[], &lost_facts(limit - 1)).actions.len(), 1);
    assert!(plan(&auto, &[], &lost_facts(limit)).actions.is_empty());
}

/// A guest another node of the cluster holds is neither recovered (even under `auto` DR) nor
/// provisioned again: a finding, never an action; and the host is not converged while it is
/// away.
#[test]
fn a_migrated_guest_is_never_recovered_or_provisioned_here() {
    let away = spec(1, Power::Running);
    let f = Facts {
        migrated: [(away.guest_id, (300, "pve2".to_owned()))].into(),
        ..facts()
    };
    let auto = desired(vec![away.clone()]);
    assert_eq!(auto.dr_policy, bosun_proto::desired::DrPolicy::Auto);
    let got = plan(&auto, &[], &f);
    assert!(got.actions.is_empty(), "{:?}", got.actions);
    assert_eq!(
        got.findings,
        vec![Finding::Migrated {
            guest_id: away.guest_id,
            vmid: 300,
            node: "pve2".to_owned(),
        }]
    );
    assert!(!got.is_converged());
}

#[test]
fn after_host_loss_guests_wait_for_the_key_then_come_back_from_pbs_whatever_the_dr_policy() {
    let found = spec(1, Power::Running);
    let waiting = spec(2, Power::Running);
    let mut state = desired(vec![found.clone(), waiting.clone()]);
    state.dr_policy = bosun_proto::desired::DrPolicy::Manual;
    let source = crate::data::recovery::BackupSource {
        tier: 1,
        storage: bosun_pve::StorageId::new("bosun-pbs").unwrap(),
        archive: bosun_pve::VolumeId::new("bosun-pbs:backup/ct/300/2026-03-01T02:00:00Z").unwrap(),
        taken_at: jiff::Timestamp::from_second(1_772_330_400).unwrap(),
        retired_key: None,
    };
    let f = Facts {
        host_loss: [(found.guest_id, (300, source.clone()))].into(),
        awaiting_recovery: [waiting.guest_id].into(),
        ..facts()
    };
    let got = plan(&state, &[], &f);
    // Never a blank provision for either: one comes back from its archive, the other waits.
    assert_eq!(
        got.actions,
        vec![Action::Recover {
            spec: Box::new(found.clone()),
            lost_vmid: 300,
            source: Some(Box::new(source)),
        }]
    );
    assert!(got.findings.contains(&Finding::Lost {
        guest_id: found.guest_id,
        vmid: 300
    }));
    assert!(got.findings.contains(&Finding::Deferred {
        guest_id: waiting.guest_id
    }));
    assert!(!got.is_converged());
    // Bounded like any DR restore.
    let exhausted = Facts {
        recover_failures: [(found.guest_id, f.restart_limit)].into(),
        ..f
    };
    assert!(plan(&state, &[], &exhausted).actions.is_empty());
}

#[test]
fn a_guest_whose_bulk_volume_has_no_target_of_its_class_is_neither_built_nor_restored() {
    use bosun_proto::desired::{
        BulkBackup, BulkVolume, PlacementRefusal, StorageClass, StorageRole, StorageTarget,
        StorageType, TargetPolicy, TargetState,
    };
    let target = |id: &str, class: StorageClass| StorageTarget {
        kind: StorageType::LocalDir,
        durable_id: id.into(),
        class,
        role: StorageRole::BulkData,
        policy: TargetPolicy {
            schedule: None,
            retention: Default::default(),
            default: false,
            schedulable: true,
        },
        state: TargetState::Attached,
        label: None,
        credentials: None,
        username: None,
        namespace: None,
        fstype: None,
        serial: None,
    };
    let volume = |name: &str, class: StorageClass| BulkVolume {
        name: name.into(),
        size_gib: 4,
        path: format!("/mnt/{name}"),
        class,
        target: None,
        backup: BulkBackup::None {
            acknowledged_by: "ops".into(),
        },
    };
    let mut hot = spec(1, Power::Running);
    hot.bulk_volumes = vec![
        volume("db", StorageClass::Fast),
        volume("media", StorageClass::Slow),
    ];
    let plain = spec(2, Power::Running);
    let mut only_slow = desired(vec![hot.clone(), plain.clone()]);
    only_slow.storage = vec![target("/srv/slow", StorageClass::Slow)];

    // Not provisioned; the guest beside it is.
    let got = plan(&only_slow, &[], &facts());
    assert_eq!(
        got.actions,
        vec![Action::Provision {
            spec: Box::new(plain.clone())
        }]
    );
    let refused = Finding::PlacementRefused {
        guest_id: hot.guest_id,
        volume: "db".into(),
        class: StorageClass::Fast,
        reason: PlacementRefusal::NoTargetOfClass,
    };
    assert_eq!(got.findings, vec![refused.clone()]);
    let built = plan(
        &only_slow,
        &[seen(2, 102, ObservedPower::Running)],
        &facts(),
    );
    assert!(built.actions.is_empty());
    assert!(!built.is_converged(), "a refused guest is not converged");

    // Nor restored when it is lost.
    let lost = Facts {
        lost: [(hot.guest_id, 300)].into(),
        ..facts()
    };
    let got = plan(&only_slow, &[seen(2, 102, ObservedPower::Running)], &lost);
    assert!(got.actions.is_empty(), "{:?}", got.actions);
    assert!(got.findings.contains(&refused));

    // With a fast target too, it is built (the provisioner puts each volume on its class).
    let mut both = only_slow.clone();
    both.storage.push(target("/srv/fast", StorageClass::Fast));
    let got = plan(&both, &[seen(2, 102, ObservedPower::Running)], &facts());
    assert_eq!(
        got.actions,
        vec![Action::Provision {
            spec: Box::new(hot.clone())
        }]
    );
    assert!(got.findings.is_empty());
}
