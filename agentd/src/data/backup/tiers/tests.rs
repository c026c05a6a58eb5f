use bosun_proto::desired::{BackupPolicy, RestoreTestPolicy, StorageRole, StorageTarget};
use bosun_proto::retention::{FLOOR_SCHEMA, FloorTier};
use uuid::Uuid;

use super::*;
use crate::data::storage::target::test_target;

const PBS: &str = "backup@pbs@pbs.example:store1";

fn keep(last: u32, daily: u32) -> Retention {
    Retention {
        keep_last: last,
        keep_daily: daily,
        ..Retention::default()
    }
}

fn pbs_target(retention: Retention) -> StorageTarget {
    let mut target = test_target(StorageType::Pbs, PBS, StorageRole::PbsOffsite);
    target.policy.schedule = Some("daily".into());
    target.policy.retention = retention;
    target
}

fn desired(first: Retention, pbs: Option<Retention>) -> DesiredState {
    DesiredState {
        schema: "bosun.desired/v1".into(),
        guests: Vec::new(),
        storage: pbs.map(pbs_target).into_iter().collect(),
        backup_policy: BackupPolicy {
            schedule: "02:00".into(),
            retention: first,
            quiesce_grace_minutes: 30,
            target: None,
            further_tiers: pbs.map(|_| vec![PBS.to_owned()]).unwrap_or_default(),
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

fn floor(tiers: Vec<(Option<&str>, Retention)>) -> RetentionFloor {
    RetentionFloor {
        schema: FLOOR_SCHEMA.into(),
        host_id: Uuid::from_u128(1),
        issued_at: "2026-11-01T00:00:00Z".parse().unwrap(),
        tiers: tiers
            .into_iter()
            .map(|(target, retention)| FloorTier {
                target: target.map(str::to_owned),
                retention,
            })
            .collect(),
    }
}

fn local() -> StorageId {
    StorageId::new("local").unwrap()
}

#[test]
fn two_tiers_in_order_with_their_own_schedules() {
    let p = plan(
        &desired(keep(3, 0), Some(keep(0, 7))),
        None,
        None,
        &local(),
        0,
    );
    assert_eq!(p.tiers.len(), 2);
    let (first, pbs) = (&p.tiers[0], &p.tiers[1]);
    assert_eq!((first.index, first.storage.as_str()), (0, "local"));
    assert_eq!(first.schedule, "02:00");
    assert_eq!(first.quiesce_grace_minutes, 30);
    assert_eq!(first.report_key(), "local");
    assert_eq!(pbs.index, 1);
    assert_eq!(
        pbs.storage,
        crate::data::storage::naming::storage_id_of(StorageType::Pbs, PBS)
    );
    assert_eq!(pbs.schedule, "daily");
    assert_eq!(pbs.quiesce_grace_minutes, 0);
    assert_eq!(pbs.report_key(), PBS);
}

#[test]
fn without_a_signed_floor_nothing_is_pruned() {
    let p = plan(
        &desired(keep(1, 0), Some(keep(0, 1))),
        None,
        None,
        &local(),
        0,
    );
    for tier in &p.tiers {
        assert!(tier.applied.keeps_all(), "{tier:?}");
        assert_eq!(tier.held, Some(HELD_NO_FLOOR));
    }
    // Keeping everything needs no floor.
    let p = plan(
        &desired(Retention::default(), None),
        None,
        None,
        &local(),
        0,
    );
    assert_eq!(p.tiers[0].held, None);
}

#[test]
fn the_floor_raises_a_short_retention_and_lets_a_longer_one_through() {
    let f = floor(vec![(None, keep(3, 7)), (Some(PBS), keep(0, 14))]);
    let short = plan(
        &desired(keep(1, 0), Some(keep(0, 2))),
        None,
        Some(&f),
        &local(),
        0,
    );
    assert_eq!(short.tiers[0].applied, keep(3, 7));
    assert_eq!(short.tiers[0].held, Some(HELD_BELOW_FLOOR));
    assert_eq!(short.tiers[1].applied, keep(0, 14));
    let long = plan(
        &desired(keep(10, 30), Some(keep(0, 60))),
        None,
        Some(&f),
        &local(),
        0,
    );
    assert_eq!(long.tiers[0].applied, keep(10, 30));
    assert_eq!(long.tiers[0].held, None);
    assert_eq!(long.tiers[1].applied, keep(0, 60));
    // A tier the floor does not name prunes nothing.
    let only_first = floor(vec![(None, keep(3, 0))]);
    let p = plan(
        &desired(keep(3, 0), Some(keep(0, 7))),
        None,
        Some(&only_first),
        &local(),
        0,
    );
    assert!(p.tiers[1].applied.keeps_all());
    assert_eq!(p.tiers[1].held, Some(HELD_NOT_IN_FLOOR));
}

#[test]
fn a_tier_the_floor_names_keeps_running_when_desired_state_drops_it() {
    let f = floor(vec![(None, keep(3, 0)), (Some(PBS), keep(0, 7))]);
    let mut d = desired(keep(3, 0), Some(keep(0, 7)));
    d.backup_policy.further_tiers.clear();
    let p = plan(&d, None, Some(&f), &local(), 0);
    assert_eq!(p.tiers.len(), 2);
    assert_eq!(p.tiers[1].target.as_deref(), Some(PBS));
    assert_eq!(p.tiers[1].held, Some(HELD_KEPT));
    assert_eq!(p.tiers[1].applied, keep(0, 7));
    // Gone from the manifest too: reported, not backed up.
    d.storage.clear();
    let p = plan(&d, None, Some(&f), &local(), 0);
    assert_eq!(p.tiers.len(), 1);
    assert_eq!(p.unplaceable, vec![PBS.to_owned()]);
}
