use bosun_proto::data_plan::{DataPlan, PLAN_SCHEMA, PlanBackup};
use bosun_proto::desired::{DesiredState, Retention};
use bosun_proto::report::{StateReport, Versions};
use bosun_proto::signed::SignedDocument;
use bosun_proto::verify::{VerifyOutcome, VerifyPolicy, VerifyReport};
use jiff::Timestamp;
use uuid::Uuid;

use super::super::{HubRecords, OpenWatch, WatchKind, plan};

const GUEST: Uuid = Uuid::from_u128(0x0190_f5a6_0000_7000_8000_0000_0000_00b1);
const TIER: &str = "backup@pbs!bosun@pbs.example:store1#AA";

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn report(outcome: VerifyOutcome, last_ok: Option<&str>) -> StateReport {
    let mut report = StateReport::empty(1, "0.1.0");
    report.versions = Versions::default();
    report.verifications = vec![VerifyReport {
        guest_id: GUEST,
        tier: TIER.into(),
        finished_at: at("2026-11-20T03:00:00Z"),
        outcome,
        duration_ms: 420,
        detail: match outcome {
            VerifyOutcome::Failed => "verification failed - please check the log for details",
            _ => "OK",
        }
        .into(),
        last_ok_at: last_ok.map(at),
        last_failed_at: (outcome == VerifyOutcome::Failed).then(|| at("2026-11-20T03:00:00Z")),
        first_at: at("2026-11-19T00:00:00Z"),
    }];
    report
}

/// Desired state with `policy`, carrying a data plan whose `verify_hours` is `plan_hours`.
fn desired(policy: VerifyPolicy, plan_hours: Option<u32>) -> DesiredState {
    let mut state: DesiredState = serde_json::from_value(serde_json::json!({
        "schema": "bosun.desired/v1",
        "backup_policy": { "schedule": "daily", "retention": {} },
        "restore_test_policy": { "enabled": false, "interval_days": 7, "timeout_minutes": 30 },
    }))
    .unwrap();
    state.verify_policy = policy;
    let plan = DataPlan {
        schema: PLAN_SCHEMA.into(),
        host_id: Uuid::from_u128(7),
        serial: 1,
        issued_at: Timestamp::UNIX_EPOCH,
        targets: Vec::new(),
        backup: PlanBackup {
            schedule: "daily".into(),
            retention: Retention {
                keep_last: 3,
                ..Retention::default()
            },
            target: None,
            further_tiers: Vec::new(),
            min_interval_seconds: 60,
            restore_test_days: None,
            verify_hours: plan_hours,
        },
        node_storages: Vec::new(),
        tunnel: None,
        bulk_backups: Vec::new(),
        guest_share: None,
        guest_access: Vec::new(),
    };
    let bytes = serde_json::to_vec(&plan).unwrap();
    state.data_plan = Some(SignedDocument::new(&bytes, "sig"));
    state
}

fn kinds(plan: &super::super::WatchPlan) -> (Vec<WatchKind>, Vec<&'static str>) {
    (
        plan.raise.iter().map(|c| c.kind).collect(),
        plan.resolve.iter().map(|r| r.event_kind()).collect(),
    )
}

fn open(kind: WatchKind) -> OpenWatch {
    OpenWatch {
        kind,
        subject: format!("{GUEST}@{TIER}"),
        opened_at: at("2026-11-20T03:00:00Z"),
    }
}

#[test]
fn a_failed_verification_raises_and_an_ok_one_recovers() {
    let now = at("2026-11-20T04:00:00Z");
    let records = HubRecords::default();
    let failed = report(VerifyOutcome::Failed, None);
    let raised = plan("h1", &[], &failed, &records, now);
    assert_eq!(kinds(&raised), (vec![WatchKind::VerifyFailed], vec![]));
    assert!(raised.raise[0].message.contains("verification failed"));
    assert_eq!(raised.raise[0].kind.alert_kind().as_str(), "verify_failed");
    // Still failing: nothing new.
    let again = plan(
        "h1",
        &[open(WatchKind::VerifyFailed)],
        &failed,
        &records,
        now,
    );
    assert!(again.is_empty());
    // Could not run since: nothing judged, the alert stays.
    let mut error = report(VerifyOutcome::Error, None);
    error.verifications[0].last_failed_at = Some(at("2026-11-20T02:00:00Z"));
    assert!(
        plan(
            "h1",
            &[open(WatchKind::VerifyFailed)],
            &error,
            &records,
            now
        )
        .is_empty()
    );
    let ok = report(VerifyOutcome::Ok, Some("2026-11-20T03:00:00Z"));
    let recovered = plan("h1", &[open(WatchKind::VerifyFailed)], &ok, &records, now);
    assert_eq!(kinds(&recovered), (vec![], vec!["verify_recovered"]));
    assert_eq!(
        recovered.resolve[0].alert_kind().map(|k| k.as_str()),
        Some("verify_recovered")
    );
}

#[test]
fn overdue_follows_the_plan_whatever_desired_state_turns_off() {
    // Desired state turns verification off; the plan asks for every 12 hours.
    let hostile = desired(
        VerifyPolicy {
            enabled: false,
            interval_hours: 8760,
        },
        Some(12),
    );
    let records = HubRecords {
        desired: Some(&hostile),
        ..HubRecords::default()
    };
    let stale = report(VerifyOutcome::Error, Some("2026-11-19T00:00:00Z"));
    // 23 hours after the last ok: within twice 12 hours.
    let within = plan("h1", &[], &stale, &records, at("2026-11-19T23:00:00Z"));
    assert!(within.is_empty(), "{within:?}");
    assert_eq!(
        super::super::next_change(&stale, &records, at("2026-11-19T23:00:00Z")),
        Some(at("2026-11-20T00:00:00Z"))
    );
    let late = plan("h1", &[], &stale, &records, at("2026-11-20T00:00:01Z"));
    assert_eq!(kinds(&late), (vec![WatchKind::VerifyOverdue], vec![]));
    // Never an ok one: counted from the first verification.
    let never = report(VerifyOutcome::Error, None);
    let late = plan("h1", &[], &never, &records, at("2026-11-20T00:00:01Z"));
    assert_eq!(kinds(&late), (vec![WatchKind::VerifyOverdue], vec![]));
    // An ok one resolves it.
    let ok = report(VerifyOutcome::Ok, Some("2026-11-20T03:00:00Z"));
    let recovered = plan(
        "h1",
        &[open(WatchKind::VerifyOverdue)],
        &ok,
        &records,
        at("2026-11-20T04:00:00Z"),
    );
    assert_eq!(kinds(&recovered), (vec![], vec!["verify_recovered"]));
}

#[test]
fn without_a_plan_desired_state_decides_and_off_means_no_overdue() {
    let off = desired(VerifyPolicy::default(), None);
    let records = HubRecords {
        desired: Some(&off),
        ..HubRecords::default()
    };
    let stale = report(VerifyOutcome::Error, None);
    assert!(plan("h1", &[], &stale, &records, at("2027-01-01T00:00:00Z")).is_empty());
    let on = desired(
        VerifyPolicy {
            enabled: true,
            interval_hours: 1,
        },
        None,
    );
    let records = HubRecords {
        desired: Some(&on),
        ..HubRecords::default()
    };
    let late = plan("h1", &[], &stale, &records, at("2026-11-19T02:00:01Z"));
    assert_eq!(kinds(&late), (vec![WatchKind::VerifyOverdue], vec![]));
}
