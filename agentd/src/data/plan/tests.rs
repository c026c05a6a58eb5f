use bosun_proto::data_plan::{DataPlan, PLAN_SCHEMA, PlanBackup};
use bosun_proto::desired::{
    BackupPolicy, DesiredState, DrPolicy, RestoreTestPolicy, Retention, StorageClass, StorageRole,
    StorageTarget, StorageType, TargetPolicy, TargetState,
};
use bosun_proto::report::TargetReason;
use jiff::Timestamp;
use uuid::Uuid;

use super::apply;

const PBS: &str = "bosun@pbs@pbs.example:store";
const NFS: &str = "nas.example:/backups";

fn target(kind: StorageType, durable_id: &str, role: StorageRole) -> StorageTarget {
    StorageTarget {
        kind,
        durable_id: durable_id.into(),
        class: StorageClass::Slow,
        role,
        policy: TargetPolicy {
            schedule: Some("daily".into()),
            retention: Retention {
                keep_last: 5,
                ..Retention::default()
            },
            default: false,
            schedulable: true,
        },
        state: TargetState::Attached,
        label: None,
        credentials: None,
        username: None,
        namespace: Some("hosts/a".into()).filter(|_| kind == StorageType::Pbs),
        fstype: None,
        serial: None,
    }
}

fn plan() -> DataPlan {
    DataPlan {
        schema: PLAN_SCHEMA.into(),
        host_id: Uuid::from_u128(1),
        serial: 3,
        issued_at: Timestamp::UNIX_EPOCH,
        targets: vec![target(StorageType::Pbs, PBS, StorageRole::PbsOffsite)],
        backup: PlanBackup {
            schedule: "02:00".into(),
            retention: Retention {
                keep_last: 3,
                ..Retention::default()
            },
            target: None,
            further_tiers: vec![PBS.into()],
            min_interval_seconds: 60,
            restore_test_days: None,
            verify_hours: None,
        },
        node_storages: Vec::new(),
        tunnel: None,
        bulk_backups: Vec::new(),
        guest_share: None,
        guest_access: Vec::new(),
    }
}

fn desired(storage: Vec<StorageTarget>, further: Vec<&str>) -> DesiredState {
    DesiredState {
        schema: bosun_proto::desired::SCHEMA.into(),
        guests: Vec::new(),
        storage,
        backup_policy: BackupPolicy {
            schedule: "*:0/5".into(),
            retention: Retention {
                keep_last: 1,
                ..Retention::default()
            },
            quiesce_grace_minutes: 0,
            target: None,
            further_tiers: further.into_iter().map(str::to_owned).collect(),
            floor: None,
        },
        verify_policy: Default::default(),
        restore_test_policy: RestoreTestPolicy {
            enabled: false,
            interval_days: 7,
            timeout_minutes: 30,
            window: None,
        },
        dr_policy: DrPolicy::Auto,
        golden_recipe: None,
        data_plan: None,
        tunnel_credentials: None,
        share_classes: Vec::new(),
    }
}

#[test]
fn without_a_plan_no_target_or_tier_is_used() {
    let hubs = desired(
        vec![target(StorageType::Nfs, NFS, StorageRole::VzdumpTarget)],
        vec![NFS],
    );
    let held = apply(&hubs, None);
    assert!(held.state.storage.is_empty());
    assert!(held.state.backup_policy.further_tiers.is_empty());
    assert_eq!(held.refused.len(), 2, "{:?}", held.refused);
    assert!(
        held.refused
            .iter()
            .all(|r| r.reason == TargetReason::NotInPlan)
    );
    // Tier 0 on the configured storage keeps the hub's schedule and retention.
    assert_eq!(held.state.backup_policy.schedule, "*:0/5");
}

#[test]
fn a_hub_added_target_and_tier_are_refused_and_the_plans_are_kept() {
    let mut hubs = desired(
        vec![
            target(StorageType::Pbs, PBS, StorageRole::PbsOffsite),
            target(StorageType::Nfs, NFS, StorageRole::VzdumpTarget),
        ],
        vec![NFS],
    );
    hubs.storage[0].label = Some("offsite".into());
    let held = apply(&hubs, Some(&plan()));
    assert_eq!(held.state.storage.len(), 1);
    assert_eq!(held.state.storage[0].durable_id, PBS);
    assert_eq!(held.state.storage[0].label.as_deref(), Some("offsite"));
    // The hub dropped the PBS tier and named its NFS one: the plan's tiers run.
    assert_eq!(held.state.backup_policy.further_tiers, vec![PBS.to_owned()]);
    let refused: Vec<(&str, bool)> = held
        .refused
        .iter()
        .map(|r| (r.durable_id.as_str(), r.tier))
        .collect();
    assert_eq!(refused, vec![(NFS, false), (NFS, true)]);
}

#[test]
fn another_namespace_is_another_target_never_drift() {
    let mut moved = target(StorageType::Pbs, PBS, StorageRole::PbsOffsite);
    moved.namespace = Some("hosts/victim".into());
    moved.policy.retention.keep_last = 1;
    let held = apply(&desired(vec![moved], vec![PBS]), Some(&plan()));
    assert_eq!(held.state.storage[0].namespace.as_deref(), Some("hosts/a"));
    // Nothing of the mismatching entry is taken, not even its retention.
    assert_eq!(held.state.storage[0].policy.retention.keep_last, 5);
    assert_eq!(held.refused.len(), 1);
    assert_eq!(held.refused[0].reason, TargetReason::IdentityMismatch);
    assert_eq!(held.refused[0].fields, vec!["namespace"]);
}

#[test]
fn the_hub_may_keep_longer_and_add_a_schedule_but_not_shorten() {
    let mut same = target(StorageType::Pbs, PBS, StorageRole::PbsOffsite);
    same.policy.retention.keep_last = 2;
    same.policy.schedule = Some("hourly".into());
    let held = apply(&desired(vec![same.clone()], vec![PBS]), Some(&plan()));
    assert!(held.refused.is_empty(), "{:?}", held.refused);
    assert_eq!(held.state.storage[0].policy.retention.keep_last, 5);
    assert_eq!(
        held.state.storage[0].policy.schedule.as_deref(),
        Some("hourly")
    );
    same.policy.retention.keep_last = 9;
    let held = apply(&desired(vec![same], vec![PBS]), Some(&plan()));
    assert_eq!(held.state.storage[0].policy.retention.keep_last, 9);
}

#[test]
fn tiers_follow_the_plan_with_the_hubs_schedule_bounded() {
    let configured = bosun_pve::StorageId::new("local").unwrap();
    let plan = plan();
    let held = apply(
        &desired(
            vec![target(StorageType::Pbs, PBS, StorageRole::PbsOffsite)],
            vec![],
        ),
        Some(&plan),
    );
    let tiers = crate::data::backup::tiers::plan(&held.state, Some(&plan), None, &configured, 15);
    assert_eq!(tiers.tiers.len(), 2);
    let first = &tiers.tiers[0];
    assert_eq!(first.schedule, "02:00");
    assert_eq!(first.extra_schedule.as_deref(), Some("*:0/5"));
    assert_eq!(first.min_interval_seconds, 60);
    // The hub asks keep_last 1; the plan's least is 3.
    assert_eq!(first.applied.keep_last, 3);
    let pbs = &tiers.tiers[1];
    assert_eq!(
        pbs.storage,
        crate::data::storage::naming::target_storage_id(&plan.targets[0])
    );
    assert_eq!(pbs.extra_schedule, None);
}
