#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

use std::time::Duration;

use bosun_proto::data_plan::{DataPlan, PLAN_SCHEMA, PlanBackup};
use bosun_proto::desired::{
    BackupPolicy, DesiredState, DrPolicy, RestoreTestPolicy, Retention, StorageClass, StorageRole,
    StorageTarget, StorageType, TargetPolicy, TargetState,
};
use bosun_proto::protection::{PromisedBy, ProtectionKind, ProtectionResult};
use bosun_proto::verify::{VerifyOutcome, VerifyPolicy};
use jiff::{SignedDuration, Timestamp};
use uuid::Uuid;

use super::{Facts, assess};
use crate::data::plan::apply;
use crate::ops::journal::{
    LastBackup, LastRestoreTest, LastVerification, OpId, RestoreTestResult, TestOutcome,
    Verification,
};

const PBS: &str = "bosun@pbs@pbs.example:8007:store#ab";
const GUEST: Uuid = Uuid::from_u128(0xa1);
const OTHER: Uuid = Uuid::from_u128(0xb2);

fn now() -> Timestamp {
    "2026-03-04T10:00:00Z".parse().unwrap()
}

fn ago(hours: i64) -> Timestamp {
    now() - SignedDuration::from_hours(hours)
}

fn pbs() -> StorageTarget {
    StorageTarget {
        kind: StorageType::Pbs,
        durable_id: PBS.into(),
        class: StorageClass::Slow,
        role: StorageRole::PbsOffsite,
        policy: TargetPolicy {
            schedule: Some("daily".into()),
            retention: Retention::default(),
            default: false,
            schedulable: true,
        },
        state: TargetState::Attached,
        label: None,
        credentials: None,
        username: None,
        namespace: Some("hosts/a".into()),
        fstype: None,
        serial: None,
    }
}

/// A plan: tier 0 daily at 02:00, the PBS target as tier 1 (daily), verification every
/// `verify_hours`, restore tests every `restore_days`.
fn plan(verify_hours: Option<u32>, restore_days: Option<u32>) -> DataPlan {
    DataPlan {
        schema: PLAN_SCHEMA.into(),
        host_id: Uuid::from_u128(1),
        serial: 7,
        issued_at: Timestamp::UNIX_EPOCH,
        targets: vec![pbs()],
        backup: PlanBackup {
            schedule: "02:00".into(),
            retention: Retention::default(),
            target: None,
            further_tiers: vec![PBS.into()],
            min_interval_seconds: 60,
            restore_test_days: restore_days,
            verify_hours,
        },
        node_storages: Vec::new(),
        tunnel: None,
        bulk_backups: Vec::new(),
        guest_share: None,
        guest_access: Vec::new(),
    }
}

/// The hub's document: every five minutes, verification and restore tests off, and the PBS
/// target without its credential.
fn hubs() -> DesiredState {
    DesiredState {
        schema: bosun_proto::desired::SCHEMA.into(),
        guests: Vec::new(),
        storage: vec![pbs()],
        backup_policy: BackupPolicy {
            schedule: "*:0/5".into(),
            retention: Retention::default(),
            quiesce_grace_minutes: 0,
            target: None,
            further_tiers: vec![PBS.into()],
            floor: None,
        },
        verify_policy: VerifyPolicy::default(),
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

fn backup(
    guest: Uuid,
    tier: u32,
    at: Timestamp,
    ok: bool,
    last_ok: Option<Timestamp>,
) -> LastBackup {
    LastBackup {
        op_id: OpId::new(),
        guest_id: guest.to_string(),
        vmid: Some(101),
        storage: if tier == 0 {
            "local".into()
        } else {
            "bosun-pbs".into()
        },
        finished_at: at,
        ok,
        archive: None,
        size_bytes: None,
        target: (tier > 0).then(|| PBS.to_owned()),
        tier: Some(tier),
        warnings: 0,
        encrypted: tier > 0,
        error: (!ok).then(|| "vzdump failed\n\u{1b}[2J".to_owned()),
        started_at: None,
        last_ok_at: last_ok,
    }
}

fn verification(
    guest: Uuid,
    outcome: VerifyOutcome,
    at: Timestamp,
    first: Timestamp,
    ok: Option<Timestamp>,
) -> LastVerification {
    LastVerification {
        verification: Verification {
            guest_id: guest.to_string(),
            tier: PBS.into(),
            outcome,
            duration_ms: 5,
            detail: "the target's sealed credentials are not at hand".into(),
        },
        finished_at: at,
        last_ok_at: ok,
        last_failed_at: None,
        first_at: first,
    }
}

fn restore(
    guest: Uuid,
    outcome: TestOutcome,
    at: Timestamp,
    passed: Option<Timestamp>,
) -> LastRestoreTest {
    LastRestoreTest {
        op_id: OpId::new(),
        result: RestoreTestResult {
            guest_id: guest.to_string(),
            storage: "bosun-pbs".into(),
            archive: None,
            outcome,
            duration_ms: 1000,
            detail: None,
        },
        finished_at: at,
        last_passed_at: passed,
    }
}

struct Journal {
    backups: Vec<LastBackup>,
    verifications: Vec<LastVerification>,
    restore_tests: Vec<LastRestoreTest>,
}

fn facts<'a>(
    state: Option<&'a DesiredState>,
    plan: Option<&'a DataPlan>,
    j: &'a Journal,
    arrived: Option<Timestamp>,
) -> Facts<'a> {
    Facts {
        guest_id: GUEST,
        vmid: 101,
        now: now(),
        state,
        plan,
        default_storage: "local",
        verify_hour: Duration::from_secs(3600),
        arrived_at: arrived,
        backups: &j.backups,
        verifications: &j.verifications,
        restore_tests: &j.restore_tests,
    }
}

#[test]
fn a_withheld_credential_shows_as_overdue_verification_against_the_signed_plan() {
    let plan = plan(Some(1), None);
    let state = apply(&hubs(), Some(&plan)).state;
    let j = Journal {
        backups: vec![
            backup(GUEST, 0, ago(2), true, None),
            backup(GUEST, 1, ago(3), true, None),
        ],
        // Every attempt since three hours ago could not run; another guest's group is fine.
        verifications: vec![
            verification(GUEST, VerifyOutcome::Error, ago(0), ago(3), None),
            verification(OTHER, VerifyOutcome::Ok, ago(0), ago(3), Some(ago(0))),
        ],
        restore_tests: Vec::new(),
    };
    let p = assess(&facts(Some(&state), Some(&plan), &j, Some(ago(100))));
    p.validate().unwrap();
    assert_eq!(p.plan_serial, Some(7));
    assert!(p.overdue);
    let overdue: Vec<_> = p.overdue_items().collect();
    assert_eq!(overdue.len(), 1, "{p:#?}");
    let v = overdue[0];
    assert_eq!(v.kind, ProtectionKind::Verification);
    assert_eq!(v.tier, Some(1));
    assert_eq!(v.target, PBS);
    assert_eq!(v.promised_by, PromisedBy::SignedPlan);
    assert_eq!(v.interval_s, 3600);
    assert_eq!(v.last_result, Some(ProtectionResult::Error));
    assert_eq!(v.last_ok_at, None);
    assert_eq!(
        v.counted_from,
        Some(ago(3)),
        "counted from the first attempt"
    );
    assert_eq!(v.overdue_at, Some(ago(1)));
    assert!(v.detail.as_deref().unwrap().contains("credentials"));
    // The backups are fresh: tier 0 on the configured storage, tier 1 on the PBS target.
    let b: Vec<_> = p
        .items
        .iter()
        .filter(|i| i.kind == ProtectionKind::Backup)
        .collect();
    assert_eq!(b.len(), 2);
    assert_eq!((b[0].tier, b[0].target.as_str()), (Some(0), "local"));
    assert_eq!((b[1].tier, b[1].target.as_str()), (Some(1), PBS));
    assert!(
        b.iter()
            .all(|i| !i.overdue && i.last_result == Some(ProtectionResult::Ok))
    );
    // The plan names no restore-test cadence and the hub turned them off: not listed.
    assert!(
        p.items
            .iter()
            .all(|i| i.kind != ProtectionKind::RestoreTest)
    );
}

#[test]
fn one_missed_run_is_grace_a_second_is_overdue() {
    let plan = plan(Some(1), None);
    let state = apply(&hubs(), Some(&plan)).state;
    let mut j = Journal {
        backups: Vec::new(),
        verifications: vec![verification(
            GUEST,
            VerifyOutcome::Error,
            ago(0),
            ago(5),
            Some(ago(1)),
        )],
        restore_tests: Vec::new(),
    };
    let v = |j: &Journal| {
        assess(&facts(Some(&state), Some(&plan), j, None))
            .items
            .into_iter()
            .find(|i| i.kind == ProtectionKind::Verification)
            .unwrap()
    };
    assert!(
        !v(&j).overdue,
        "the newest ok an hour ago is within twice the interval"
    );
    j.verifications[0].last_ok_at = Some(ago(3));
    assert!(v(&j).overdue);
}

#[test]
fn the_signed_schedule_is_the_promise_not_the_hubs_more_frequent_one() {
    let plan = plan(None, None);
    let state = apply(&hubs(), Some(&plan)).state;
    // Tier 0: the hub asks every five minutes, the plan daily at 02:00. A good backup 30
    // hours ago is within twice the day; 49 hours ago is not.
    let mut j = Journal {
        backups: vec![backup(GUEST, 0, ago(1), false, Some(ago(30)))],
        verifications: Vec::new(),
        restore_tests: Vec::new(),
    };
    let tier0 = |j: &Journal| {
        assess(&facts(Some(&state), Some(&plan), j, Some(ago(1000))))
            .items
            .into_iter()
            .find(|i| i.kind == ProtectionKind::Backup && i.tier == Some(0))
            .unwrap()
    };
    let item = tier0(&j);
    assert_eq!(item.interval_s, 24 * 3600);
    assert_eq!(item.promised_by, PromisedBy::SignedPlan);
    assert_eq!(item.last_result, Some(ProtectionResult::Failed));
    assert!(!item.overdue);
    let detail = item.detail.unwrap();
    assert!(!detail.chars().any(char::is_control), "{detail:?}");
    j.backups[0].last_ok_at = Some(ago(49));
    assert!(tier0(&j).overdue);
    // Tier 1 never backed up: counted from the guest's arrival, long ago.
    let tier1 = assess(&facts(Some(&state), Some(&plan), &j, Some(ago(1000))))
        .items
        .into_iter()
        .find(|i| i.kind == ProtectionKind::Backup && i.tier == Some(1))
        .unwrap();
    assert!(tier1.overdue && tier1.last_at.is_none());
    assert_eq!(tier1.counted_from, Some(ago(1000)));
}

#[test]
fn another_guests_success_never_counts() {
    let plan = plan(None, Some(7));
    let state = apply(&hubs(), Some(&plan)).state;
    let j = Journal {
        backups: vec![backup(OTHER, 0, ago(1), true, Some(ago(1)))],
        verifications: Vec::new(),
        restore_tests: vec![restore(OTHER, TestOutcome::Passed, ago(1), Some(ago(1)))],
    };
    let p = assess(&facts(Some(&state), Some(&plan), &j, Some(ago(24 * 15))));
    let kinds: Vec<_> = p.overdue_items().map(|i| (i.kind, i.tier)).collect();
    assert_eq!(
        kinds,
        [
            (ProtectionKind::Backup, Some(0)),
            (ProtectionKind::Backup, Some(1)),
            (ProtectionKind::RestoreTest, None)
        ]
    );
    assert!(p.items.iter().all(|i| i.last_at.is_none()));
}

#[test]
fn restore_tests_follow_the_plan_and_not_checked_is_no_pass() {
    let plan = plan(None, Some(7));
    // The hub turned restore tests off; the plan asks weekly.
    let state = apply(&hubs(), Some(&plan)).state;
    let mut j = Journal {
        backups: Vec::new(),
        verifications: Vec::new(),
        restore_tests: vec![restore(GUEST, TestOutcome::Passed, ago(24 * 8), None)],
    };
    let item = |j: &Journal| {
        assess(&facts(Some(&state), Some(&plan), j, Some(ago(24 * 100))))
            .items
            .into_iter()
            .find(|i| i.kind == ProtectionKind::RestoreTest)
            .unwrap()
    };
    let passed = item(&j);
    assert_eq!(passed.promised_by, PromisedBy::SignedPlan);
    assert_eq!(passed.last_result, Some(ProtectionResult::Ok));
    assert_eq!(passed.last_ok_at, Some(ago(24 * 8)));
    assert!(!passed.overdue, "eight days is within twice a week");
    // Only "not checked" since, for fifteen days: overdue.
    j.restore_tests = vec![restore(
        GUEST,
        TestOutcome::NotChecked,
        ago(1),
        Some(ago(24 * 15)),
    )];
    let unchecked = item(&j);
    assert_eq!(unchecked.last_result, Some(ProtectionResult::NotChecked));
    assert!(unchecked.overdue);
}

#[test]
fn without_a_plan_the_hubs_cadence_is_named_as_such_and_off_means_not_listed() {
    let mut hubs = hubs();
    hubs.verify_policy = VerifyPolicy {
        enabled: true,
        interval_hours: 2,
    };
    let state = apply(&hubs, None).state;
    let j = Journal {
        backups: Vec::new(),
        verifications: Vec::new(),
        restore_tests: Vec::new(),
    };
    let p = assess(&facts(Some(&state), None, &j, Some(ago(1))));
    assert_eq!(p.plan_serial, None);
    // Without a plan no target is used: tier 0 alone, on the configured storage, promised by
    // the hub; no PBS tier, so no verification.
    assert_eq!(p.items.len(), 1, "{p:#?}");
    assert_eq!(p.items[0].promised_by, PromisedBy::DesiredState);
    assert_eq!(p.items[0].interval_s, 300);
    assert!(p.overdue, "an hour without a backup every five minutes");
    // No desired state at all: nothing promised, nothing overdue.
    let none = assess(&facts(None, None, &j, Some(ago(1))));
    assert!(none.items.is_empty() && !none.overdue);
}

#[test]
fn a_short_verify_hour_shortens_the_interval() {
    let plan = plan(Some(1), None);
    let state = apply(&hubs(), Some(&plan)).state;
    let j = Journal {
        backups: Vec::new(),
        verifications: vec![verification(
            GUEST,
            VerifyOutcome::Error,
            now(),
            now() - SignedDuration::from_secs(3),
            None,
        )],
        restore_tests: Vec::new(),
    };
    let mut f = facts(Some(&state), Some(&plan), &j, None);
    f.verify_hour = Duration::from_secs(1);
    let v = assess(&f)
        .items
        .into_iter()
        .find(|i| i.kind == ProtectionKind::Verification)
        .unwrap();
    assert_eq!(v.interval_s, 1);
    assert!(
        v.overdue,
        "three seconds without an ok against a one-second hour"
    );
}
