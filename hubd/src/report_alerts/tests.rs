use bosun_proto::admin::AlertKind;
use bosun_proto::desired::{DesiredState, Retention};
use bosun_proto::report::{
    BackupReport, GuestReport, GuestStatus, HostMetrics, RestoreTestOutcome, RestoreTestReport,
    TargetReport, TierReport, Versions,
};

use jiff::SignedDuration;
use uuid::Uuid;

use super::*;

const GUEST: Uuid = Uuid::from_u128(0x0190_f5a6_0000_7000_8000_0000_0000_000a);

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn report() -> StateReport {
    StateReport {
        schema: bosun_proto::report::SCHEMA.to_owned(),
        seq: 1,
        host: Some(HostMetrics::default()),
        guests: vec![GuestReport {
            guest_id: Some(GUEST),
            vmid: 101,
            kind: bosun_proto::desired::GuestKind::Lxc,
            hostname: "web1".into(),
            status: GuestStatus::Running,
            resources: None,
            controller_digest: None,
            controller_expected: None,
            addresses: Vec::new(),
        }],
        storage: Vec::new(),
        last_backups: Vec::new(),
        last_restore_test: None,
        tunnel: None,
        versions: Versions::default(),
        audit: Vec::new(),
        storage_recipient: None,
        pbs_key_fingerprint: None,
        tiers: Vec::new(),
        bulk_volumes: Vec::new(),
        restore_tests: Vec::new(),
        verifications: Vec::new(),
        host_health: None,
        data_plan: None,
        refused: Vec::new(),
        golden: None,
    }
}

fn target(status: TargetStatus) -> TargetReport {
    TargetReport {
        durable_id: "usb-1".into(),
        status,
        free_gib: None,
        kind: None,
        class: None,
        role: None,
        storage_id: Some("bosun-usb-1".into()),
        total_bytes: None,
        used_bytes: None,
        reason: None,
        detail: Some("unplugged".into()),
        since: None,
    }
}

fn backup(ok: bool, finished: &str) -> BackupReport {
    BackupReport {
        guest_id: GUEST,
        target: "pbs1".into(),
        finished_at: at(finished),
        ok,
        tier: Some(1),
        error: (!ok).then(|| "connection refused".into()),
        ..BackupReport::default()
    }
}

fn tier(schedule: &str) -> TierReport {
    TierReport {
        tier: 1,
        target: "pbs1".into(),
        storage_id: "bosun-pbs1".into(),
        schedule: schedule.into(),
        extra_schedule: None,
        desired: Retention::default(),
        applied: Retention::default(),
        held: None,
    }
}

/// The hub's records when only its remembered good backups matter.
fn backups_only(last_good: &[LastGood]) -> HubRecords<'_> {
    HubRecords {
        last_good,
        ..HubRecords::default()
    }
}

/// Applies `plan` to `open` the way the store does.
fn apply(open: &mut Vec<OpenWatch>, plan: &WatchPlan, now: Timestamp) {
    open.retain(|o| !plan.resolve.iter().any(|r| r.open == *o));
    open.extend(plan.raise.iter().map(|c| OpenWatch {
        kind: c.kind,
        subject: c.subject.clone(),
        opened_at: now,
    }));
}

#[test]
fn a_lost_target_opens_once_and_mounted_recovers_while_detached_only_clears() {
    let now = at("2026-11-21T01:00:00Z");
    let mut open = Vec::new();
    let mut r = report();
    r.storage = vec![target(TargetStatus::Disconnected)];
    let first = plan("pve1", &open, &r, &HubRecords::default(), now);
    assert_eq!(first.raise.len(), 1, "{first:?}");
    assert_eq!(first.raise[0].kind, WatchKind::StorageLost);
    assert!(first.raise[0].message.contains("disconnected: unplugged"));
    apply(&mut open, &first, now);
    // Still lost, another way: the one alert stays open.
    r.storage = vec![target(TargetStatus::Unreachable)];
    assert!(plan("pve1", &open, &r, &HubRecords::default(), now).is_empty());
    r.storage = vec![target(TargetStatus::Mounted)];
    let back = plan("pve1", &open, &r, &HubRecords::default(), now);
    assert_eq!(back.resolve.len(), 1);
    assert_eq!(back.resolve[0].event_kind(), "storage_recovered");
    assert_eq!(
        back.resolve[0].alert_kind(),
        Some(AlertKind::StorageRecovered)
    );
    // Detached on purpose: closed, but not as a recovery.
    r.storage = vec![target(TargetStatus::Detached)];
    let detached = plan("pve1", &open, &r, &HubRecords::default(), now);
    assert_eq!(detached.resolve[0].event_kind(), "storage_lost_cleared");
    assert_eq!(detached.resolve[0].alert_kind(), None);
    // Detached or retired targets never open one.
    for status in [TargetStatus::Detached, TargetStatus::Decommissioned] {
        r.storage = vec![target(status)];
        assert!(
            plan("pve1", &[], &r, &HubRecords::default(), now)
                .raise
                .is_empty()
        );
    }
}

#[test]
fn a_refused_target_stays_open_while_a_restarted_agent_has_not_looked_yet() {
    let now = at("2026-11-21T01:00:00Z");
    let mut open = Vec::new();
    let mut r = report();
    r.storage = vec![target(TargetStatus::Refused)];
    let mut state = desired(false, 7);
    state.storage = vec![
        serde_json::from_value(serde_json::json!({
            "type": "usb", "durable_id": "usb-1", "class": "slow", "role": "vzdump-target",
            "policy": {}, "state": "attached",
        }))
        .unwrap(),
    ];
    let records = HubRecords {
        desired: Some(&state),
        ..HubRecords::default()
    };
    let first = plan("pve1", &open, &r, &records, now);
    assert_eq!(first.raise[0].kind, WatchKind::StorageRefused);
    apply(&mut open, &first, now);
    // A restarted agent's first report names no target yet: nothing closes while the hub's
    // desired state still names it.
    r.storage.clear();
    assert!(plan("pve1", &open, &r, &records, now).is_empty());
    // Without that desired state the silence is the target's absence: it clears.
    let gone = plan("pve1", &open, &r, &HubRecords::default(), now);
    assert_eq!(gone.resolve[0].event_kind(), "storage_refused_cleared");
}

#[test]
fn a_lost_target_says_its_reason_and_an_older_agents_text_only_cut_short() {
    let now = at("2026-11-21T01:00:00Z");
    let mut r = report();
    let mut t = target(TargetStatus::Unreachable);
    t.reason = Some(bosun_proto::report::TargetReason::AuthFailed);
    t.detail = Some("bosun-pbs: error fetching datastores - 401 Unauthorized".into());
    r.storage = vec![t];
    let raised = plan("pve1", &[], &r, &HubRecords::default(), now).raise;
    assert!(
        raised[0].message.ends_with("is unreachable: auth_failed"),
        "{raised:?}"
    );
    assert!(!raised[0].message.contains("401"));
    assert_eq!(raised[0].detail["reason"], "auth_failed");
    assert!(!raised[0].detail.to_string().contains("401"));

    let mut old = target(TargetStatus::Error);
    old.detail = Some(format!("line one\nline two {}", "x".repeat(400)));
    r.storage = vec![old];
    let raised = plan("pve1", &[], &r, &HubRecords::default(), now).raise;
    let why = raised[0].detail["reason"].as_str().unwrap().to_owned();
    assert!(why.starts_with("line one line two x"), "{why}");
    assert_eq!(
        why.chars().count(),
        bosun_proto::report::MAX_LEGACY_DETAIL_CHARS + 1
    );
    assert!(why.ends_with('…'));

    let mut silent = target(TargetStatus::Error);
    silent.detail = None;
    r.storage = vec![silent];
    let raised = plan("pve1", &[], &r, &HubRecords::default(), now).raise;
    assert!(
        raised[0].message.ends_with("is error: no reason given"),
        "{raised:?}"
    );
}

#[test]
fn a_failed_backup_opens_and_a_newer_good_one_resolves() {
    let now = at("2026-11-21T01:00:00Z");
    let mut open = Vec::new();
    let mut r = report();
    r.last_backups = vec![backup(false, "2026-11-21T00:40:00Z")];
    let failed = plan("pve1", &open, &r, &HubRecords::default(), now);
    assert_eq!(failed.raise.len(), 1);
    assert_eq!(failed.raise[0].kind, WatchKind::BackupFailed);
    assert_eq!(failed.raise[0].subject, backup_subject(GUEST, "pbs1"));
    assert!(failed.raise[0].message.contains("connection refused"));
    assert!(failed.raise[0].message.contains("tier 1"));
    apply(&mut open, &failed, now);
    r.last_backups = vec![backup(true, "2026-11-21T00:55:00Z")];
    let good = plan("pve1", &open, &r, &HubRecords::default(), now);
    assert_eq!(good.resolve.len(), 1);
    assert_eq!(good.resolve[0].event_kind(), "backup_recovered");
    assert_eq!(
        good.resolve[0].alert_kind(),
        Some(AlertKind::BackupRecovered)
    );
    assert!(good.resolve[0].message.contains("tier 1"), "{good:?}");
    r.last_backups.clear();
    let gone = plan("pve1", &open, &r, &HubRecords::default(), now);
    assert_eq!(gone.resolve[0].event_kind(), "backup_failed_cleared");
    assert_eq!(gone.resolve[0].alert_kind(), None);
}

#[test]
fn the_cadence_is_the_longest_gap_between_occurrences() {
    let now = at("2026-11-18T12:00:00Z");
    let hours = |h: i64| Some(SignedDuration::from_hours(h));
    assert_eq!(cadence("daily", now), hours(24));
    assert_eq!(cadence("02:30", now), hours(24));
    assert_eq!(cadence("hourly", now), hours(1));
    assert_eq!(cadence("*:0/15", now), Some(SignedDuration::from_mins(15)));
    assert_eq!(cadence("mon..fri 02:00", now), hours(72));
    assert_eq!(cadence("weekly", now), hours(7 * 24));
    assert_eq!(cadence("not a schedule", now), None);
}

#[test]
fn a_backup_is_overdue_after_twice_the_cadence_and_the_hubs_memory_counts() {
    let mut r = report();
    r.tiers = vec![tier("daily")];
    // The newest run failed; the agent still names the last good one.
    let mut failed = backup(false, "2026-11-21T00:00:00Z");
    failed.last_ok_at = Some(at("2026-11-20T00:00:00Z"));
    r.last_backups = vec![failed.clone()];
    let good = reported_last_good(&r);
    assert_eq!(good[0].at, at("2026-11-20T00:00:00Z"));
    let overdue = |r: &StateReport, now: &str, last_good: &[LastGood]| {
        conditions("pve1", r, &backups_only(last_good), at(now))
            .into_iter()
            .filter(|c| c.kind == WatchKind::BackupOverdue)
            .collect::<Vec<_>>()
    };
    assert!(overdue(&r, "2026-11-21T23:59:00Z", &good).is_empty());
    let late = overdue(&r, "2026-11-22T00:01:00Z", &good);
    assert_eq!(late.len(), 1);
    assert_eq!(late[0].subject, backup_subject(GUEST, "pbs1"));
    assert!(late[0].message.contains("web1"), "{}", late[0].message);
    // The hub remembers a newer good backup than the agent names: not overdue.
    let remembered = [LastGood {
        at: at("2026-11-21T12:00:00Z"),
        ..good[0].clone()
    }];
    assert!(overdue(&r, "2026-11-22T00:01:00Z", &remembered).is_empty());
    // No good backup ever: nothing to measure from (the failure is its own alert).
    assert!(overdue(&r, "2026-11-30T00:00:00Z", &[]).is_empty());
    // A guest gone from the host is not overdue.
    r.guests.clear();
    assert!(overdue(&r, "2026-11-30T00:00:00Z", &good).is_empty());
}

#[test]
fn an_overdue_backup_resolves_when_a_good_one_arrives() {
    let mut r = report();
    r.tiers = vec![tier("daily")];
    r.last_backups = vec![backup(true, "2026-11-20T00:00:00Z")];
    let now = at("2026-11-23T00:00:00Z");
    let mut open = Vec::new();
    let late = plan(
        "pve1",
        &open,
        &r,
        &backups_only(&reported_last_good(&r)),
        now,
    );
    assert_eq!(late.raise.len(), 1);
    assert_eq!(late.raise[0].kind, WatchKind::BackupOverdue);
    apply(&mut open, &late, now);
    r.last_backups = vec![backup(true, "2026-11-22T23:00:00Z")];
    let caught_up = plan(
        "pve1",
        &open,
        &r,
        &backups_only(&reported_last_good(&r)),
        now,
    );
    assert!(caught_up.raise.is_empty(), "{caught_up:?}");
    assert_eq!(caught_up.resolve.len(), 1);
    assert_eq!(caught_up.resolve[0].event_kind(), "backup_recovered");
    assert_eq!(
        caught_up.resolve[0].alert_kind(),
        Some(AlertKind::BackupRecovered)
    );
    assert!(
        caught_up.resolve[0].message.contains("tier 1"),
        "{caught_up:?}"
    );
    // The tier dropped from the report: closed, not recovered.
    r.tiers.clear();
    r.last_backups = vec![backup(true, "2026-11-20T00:00:00Z")];
    let dropped = plan(
        "pve1",
        &open,
        &r,
        &backups_only(&reported_last_good(&r)),
        now,
    );
    assert_eq!(dropped.resolve[0].event_kind(), "backup_overdue_cleared");
    assert_eq!(dropped.resolve[0].alert_kind(), None);
}

#[test]
fn every_watch_kind_parses_back_from_its_stored_name() {
    for kind in WatchKind::ALL {
        assert_eq!(WatchKind::parse(kind.as_str()), Some(kind));
        assert_eq!(kind.alert_kind().as_str(), kind.as_str());
        assert_eq!(kind.recovered_alert_kind().as_str(), kind.recovered());
        assert!(kind.cleared().starts_with(kind.as_str()), "{kind:?}");
    }
    assert_eq!(WatchKind::parse("restore_test_recovered"), None);
}

const OTHER: Uuid = Uuid::from_u128(0x0190_f5a6_0000_7000_8000_0000_0000_000b);

fn restore_test(outcome: Option<RestoreTestOutcome>, finished: &str) -> RestoreTestReport {
    let passed = outcome == Some(RestoreTestOutcome::Passed);
    RestoreTestReport {
        guest_id: GUEST,
        finished_at: at(finished),
        passed,
        duration_seconds: 41,
        detail: if passed {
            String::new()
        } else {
            "guest did not start".into()
        },
        outcome,
        tier: Some("bosun-pbs-1a2b3c4d".into()),
        archive: Some("bosun-pbs-1a2b3c4d:backup/ct/101/2026-11-20T02:30:00Z".into()),
        last_passed_at: None,
    }
}

/// Desired state naming `web1` (GUEST) and `db1` (OTHER), restore tests every `days` days.
fn desired(enabled: bool, days: u32) -> DesiredState {
    let guest = |id: Uuid, name: &str| {
        serde_json::json!({
            "guest_id": id,
            "hostname": name,
            "customer": { "customer_id": "acme", "display_name": "Acme" },
            "resources": { "cores": 2, "memory_mib": 1024, "rootfs_gib": 10 },
            "power": "running",
            "golden": {
                "volid": "local:backup/golden.tar.zst",
                "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            },
        })
    };
    serde_json::from_value(serde_json::json!({
        "schema": "bosun.desired/v1",
        "guests": [guest(GUEST, "web1"), guest(OTHER, "db1")],
        "backup_policy": { "schedule": "daily", "retention": {} },
        "restore_test_policy": { "enabled": enabled, "interval_days": days, "timeout_minutes": 30 },
    }))
    .unwrap()
}

fn restore_kinds(plan: &WatchPlan) -> (Vec<WatchKind>, Vec<&'static str>) {
    (
        plan.raise.iter().map(|c| c.kind).collect(),
        plan.resolve.iter().map(Resolution::event_kind).collect(),
    )
}

#[test]
fn a_failed_restore_test_opens_once_per_result_and_a_pass_on_its_tier_recovers() {
    let now = at("2026-11-21T06:00:00Z");
    let none = HubRecords::default();
    let mut open = Vec::new();
    let mut r = report();
    r.restore_tests = vec![restore_test(
        Some(RestoreTestOutcome::Failed),
        "2026-11-21T03:00:00Z",
    )];
    let failed = plan("pve1", &open, &r, &none, now);
    assert_eq!(
        restore_kinds(&failed),
        (vec![WatchKind::RestoreTestFailed], vec![])
    );
    let message = &failed.raise[0].message;
    for part in [
        "web1",
        &GUEST.to_string(),
        "pve1",
        "failed at 2026-11-21T03:00:00Z",
        "guest did not start",
        "tier bosun-pbs-1a2b3c4d",
        "archive bosun-pbs-1a2b3c4d:backup/ct/101/2026-11-20T02:30:00Z",
    ] {
        assert!(message.contains(part), "`{part}` missing from: {message}");
    }
    assert_eq!(failed.raise[0].detail["outcome"], "failed");
    apply(&mut open, &failed, now);
    // The same result in every later poll: the one alert stays open, nothing new.
    assert!(plan("pve1", &open, &r, &none, now).is_empty());
    // A pass on another tier does not resolve this tier's failure.
    let mut local = restore_test(Some(RestoreTestOutcome::Passed), "2026-11-21T04:00:00Z");
    local.tier = Some("local".into());
    r.restore_tests.push(local);
    assert!(plan("pve1", &open, &r, &none, now).is_empty());
    // A newer failing result on the tier is news: it opens its own alert and closes the old
    // one without a recovery.
    r.restore_tests[0] = restore_test(
        Some(RestoreTestOutcome::Interrupted),
        "2026-11-21T05:00:00Z",
    );
    let again = plan("pve1", &open, &r, &none, now);
    assert_eq!(
        restore_kinds(&again),
        (
            vec![WatchKind::RestoreTestFailed],
            vec!["restore_test_failed_cleared"]
        )
    );
    assert_eq!(again.resolve[0].alert_kind(), None);
    assert!(
        again.raise[0].message.contains("was interrupted"),
        "{again:?}"
    );
    apply(&mut open, &again, now);
    // A pass on the tier recovers it.
    r.restore_tests[0] = restore_test(Some(RestoreTestOutcome::Passed), "2026-11-21T05:50:00Z");
    let passed = plan("pve1", &open, &r, &none, now);
    assert_eq!(
        restore_kinds(&passed),
        (vec![], vec!["restore_test_recovered"])
    );
    assert_eq!(
        passed.resolve[0].alert_kind(),
        Some(AlertKind::RestoreTestRecovered)
    );
    let message = &passed.resolve[0].message;
    assert!(
        message.contains("web1") && message.contains("bosun-pbs-1a2b3c4d"),
        "{message}"
    );
}

#[test]
fn an_older_agent_says_it_with_passed_and_only_the_last_restore_test() {
    let now = at("2026-11-21T06:00:00Z");
    let mut r = report();
    r.last_restore_test = Some(RestoreTestReport {
        tier: None,
        archive: None,
        ..restore_test(None, "2026-11-21T03:00:00Z")
    });
    let failed = plan("pve1", &[], &r, &HubRecords::default(), now);
    assert_eq!(
        restore_kinds(&failed),
        (vec![WatchKind::RestoreTestFailed], vec![])
    );
    assert!(
        failed.raise[0].message.contains("tier -, archive unknown"),
        "{failed:?}"
    );
    // Once the agent sends the list, the list is what counts.
    r.restore_tests = vec![restore_test(
        Some(RestoreTestOutcome::Passed),
        "2026-11-21T04:00:00Z",
    )];
    assert!(
        plan("pve1", &[], &r, &HubRecords::default(), now)
            .raise
            .is_empty()
    );
    // The agent's text is cut before it reaches an alert.
    r.restore_tests = vec![RestoreTestReport {
        detail: "x".repeat(10_000),
        ..restore_test(Some(RestoreTestOutcome::Failed), "2026-11-21T05:00:00Z")
    }];
    let long = plan("pve1", &[], &r, &HubRecords::default(), now);
    assert!(
        long.raise[0].message.len() < 1_000,
        "{}",
        long.raise[0].message.len()
    );
}

#[test]
fn a_restore_test_is_overdue_after_twice_the_interval_on_the_hub_clock() {
    let start = at("2026-11-01T00:00:00Z");
    let day = |d: i64| start + SignedDuration::from_hours(24 * d);
    let minute = SignedDuration::from_mins(1);
    let weekly = desired(true, 7);
    let clocks = [
        RestoreTestClock {
            guest_id: GUEST,
            since: start,
        },
        RestoreTestClock {
            guest_id: OTHER,
            since: day(10),
        },
    ];
    let records = HubRecords {
        desired: Some(&weekly),
        clocks: &clocks,
        ..HubRecords::default()
    };
    let overdue = |r: &StateReport, records: &HubRecords<'_>, now: Timestamp| {
        conditions("pve1", r, records, now)
            .into_iter()
            .filter(|c| c.kind == WatchKind::RestoreTestOverdue)
            .collect::<Vec<_>>()
    };
    let mut r = report();
    // Desired guests are watched whether reported or not.
    assert_eq!(
        restore_results::watched(Some(&weekly), &r),
        [GUEST, OTHER].into_iter().collect()
    );
    // Never passed: counted from when the hub began expecting a test, 14 days allowed.
    assert!(overdue(&r, &records, day(14) - minute).is_empty());
    let late = overdue(&r, &records, day(14) + minute);
    assert_eq!(late.len(), 1, "{late:?}");
    assert_eq!(late[0].subject, GUEST.to_string());
    for part in [
        "web1",
        "pve1",
        "began expecting one at 2026-11-01T00:00:00Z",
        "every 7 days",
    ] {
        assert!(
            late[0].message.contains(part),
            "`{part}` missing from: {}",
            late[0].message
        );
    }
    // The other guest's clock started later.
    assert_eq!(overdue(&r, &records, day(24) + minute).len(), 2);
    // A pass on day 3 moves it to day 17.
    r.restore_tests = vec![RestoreTestReport {
        last_passed_at: Some(day(3)),
        ..restore_test(Some(RestoreTestOutcome::Failed), "2026-11-05T00:00:00Z")
    }];
    assert!(overdue(&r, &records, day(17) - minute).is_empty());
    let late = overdue(&r, &records, day(17) + minute);
    assert_eq!(late.len(), 1);
    assert!(
        late[0]
            .message
            .contains("since 2026-11-04T00:00:00Z (tier bosun-pbs-1a2b3c4d)"),
        "{}",
        late[0].message
    );
    // The hub remembers a newer pass than the agent reports.
    let remembered = [LastPassed {
        guest_id: GUEST,
        tier: Some("local".into()),
        at: day(10),
    }];
    let with_memory = HubRecords {
        last_passed: &remembered,
        ..records
    };
    assert!(overdue(&r, &with_memory, day(17) + minute).is_empty());
    // A pass from before the clock started (the policy was off since) counts from the clock.
    let restarted = [RestoreTestClock {
        guest_id: GUEST,
        since: day(20),
    }];
    let after_restart = HubRecords {
        clocks: &restarted,
        ..with_memory
    };
    assert!(overdue(&r, &after_restart, day(34) - minute).is_empty());
    assert_eq!(overdue(&r, &after_restart, day(34) + minute).len(), 1);
    // Restore tests switched off: nothing is overdue, ever.
    let off = desired(false, 7);
    let disabled = HubRecords {
        desired: Some(&off),
        ..records
    };
    assert!(overdue(&r, &disabled, day(400)).is_empty());
    assert!(restore_results::watched(Some(&off), &r).is_empty());
    // No desired state: nothing is expected.
    assert!(
        overdue(
            &r,
            &HubRecords {
                desired: None,
                ..records
            },
            day(400)
        )
        .is_empty()
    );
}

#[test]
fn an_overdue_restore_test_recovers_on_a_pass_and_clears_when_the_policy_is_off() {
    let start = at("2026-11-01T00:00:00Z");
    let now = start + SignedDuration::from_hours(24 * 15);
    let weekly = desired(true, 7);
    let clocks = [GUEST, OTHER].map(|guest_id| RestoreTestClock {
        guest_id,
        since: start,
    });
    let records = HubRecords {
        desired: Some(&weekly),
        clocks: &clocks,
        ..HubRecords::default()
    };
    let mut open = Vec::new();
    let mut r = report();
    let late = plan("pve1", &open, &r, &records, now);
    assert_eq!(
        restore_kinds(&late),
        (
            vec![WatchKind::RestoreTestOverdue, WatchKind::RestoreTestOverdue],
            vec![]
        )
    );
    apply(&mut open, &late, now);
    assert!(plan("pve1", &open, &r, &records, now).is_empty());
    // web1 passes: recovered; db1 stays overdue.
    r.restore_tests = vec![restore_test(
        Some(RestoreTestOutcome::Passed),
        "2026-11-15T23:00:00Z",
    )];
    let passed = plan("pve1", &open, &r, &records, now);
    assert_eq!(
        restore_kinds(&passed),
        (vec![], vec!["restore_test_recovered"])
    );
    assert_eq!(passed.resolve[0].open.subject, GUEST.to_string());
    assert_eq!(
        passed.resolve[0].alert_kind(),
        Some(AlertKind::RestoreTestRecovered)
    );
    assert!(passed.resolve[0].message.contains("web1"), "{passed:?}");
    apply(&mut open, &passed, now);
    // Restore tests switched off: db1's alert closes, but nothing recovered.
    let off = desired(false, 7);
    let disabled = HubRecords {
        desired: Some(&off),
        ..records
    };
    let cleared = plan("pve1", &open, &r, &disabled, now);
    assert_eq!(
        restore_kinds(&cleared),
        (vec![], vec!["restore_test_overdue_cleared"])
    );
    assert_eq!(cleared.resolve[0].open.subject, OTHER.to_string());
    assert_eq!(cleared.resolve[0].alert_kind(), None);
}

/// A rollback, signed restore, decommission or storage detach carried out is a notification
/// (`destructive_operation`); a snapshot, a backup, or a restore refused or rolled back
/// before it did anything is not.
#[test]
fn a_destructive_operation_that_ended_notifies_and_others_do_not() {
    let r = report();
    let finished = |kind: &str, status: &str| {
        serde_json::json!({
            "guest_id": GUEST, "vmid": 101,
            "detail": { "kind": kind, "status": status, "error": "vzdump archive unreadable" },
        })
    };
    let judge = |kind: &str, status: &str| {
        audit::judge(
            "pve1",
            Some(&r),
            "operation.finished",
            &finished(kind, status),
        )
        .and_then(|f| f.alert)
    };
    let (kind, message) = judge("localapi.rollback", "done").expect("a rollback notifies");
    assert_eq!(kind, AlertKind::DestructiveOperation);
    assert_eq!(
        message,
        format!(
            "guest web1 ({GUEST}) (vmid 101) on host pve1 was rolled back to a snapshot by its controller"
        )
    );
    let (_, message) = judge("restore_job", "done").expect("a restore notifies");
    assert!(
        message.ends_with("restored from a backup by a signed job"),
        "{message}"
    );
    assert!(judge("decommission_job", "done").is_some());
    assert!(judge("storage_detach_job", "done").is_some());
    assert!(judge("storage_wipe_job", "done").is_some());
    assert_eq!(judge("restore_job", "failed"), None);
    assert_eq!(judge("restore_job", "compensated"), None);
    for quiet in ["localapi.snapshot", "backup", "provision", "restore_test"] {
        assert_eq!(judge(quiet, "done"), None, "{quiet}");
    }
}

#[test]
fn a_restored_lost_guest_raises_guest_restored_with_its_rpo_and_rto() {
    let mut r = report();
    r.guests[0].vmid = 104;
    let entry = serde_json::json!({
        "op_id": null,
        "guest_id": GUEST,
        "vmid": 104,
        "detail": {
            "guest_id": GUEST,
            "vmid": 104,
            "lost_vmid": 101,
            "archive": "local:backup/vzdump-lxc-101-2026_11_21-01_00_00.tar.zst",
            "tier": "local",
            "rpo_seconds": 7_385,
            "rto_seconds": 48,
            "trigger": "auto",
        },
        "hash": "00",
    });
    let found = audit::judge("pve1", Some(&r), "guest.restored", &entry).unwrap();
    let (kind, message) = found.alert.unwrap();
    assert_eq!(kind, AlertKind::GuestRestored);
    for part in [
        "guest web1",
        &GUEST.to_string(),
        "vmid 104, was 101",
        "host pve1",
        "automatic disaster recovery",
        "archive local:backup/vzdump-lxc-101-2026_11_21-01_00_00.tar.zst",
        "tier local",
        "RPO 2 h 3 min, RTO 48 s",
    ] {
        assert!(message.contains(part), "`{part}` missing from: {message}");
    }
    let (event, detail) = found.event.unwrap();
    assert_eq!(event, "guest_restored");
    assert_eq!(detail["rpo_seconds"], 7_385);
    assert_eq!(detail["rto_seconds"], 48);
    assert_eq!(detail["vmid"], 104);
    assert_eq!(detail["trigger"], "auto");
    // What the agent says is bounded; missing numbers are said to be unknown.
    let hostile = serde_json::json!({ "detail": {
        "guest_id": GUEST, "archive": "a".repeat(100_000), "tier": "t".repeat(300),
        "trigger": "job",
    }});
    let (_, message) = audit::judge("pve1", None, "guest.restored", &hostile)
        .unwrap()
        .alert
        .unwrap();
    assert!(message.len() < 1_000, "{}", message.len());
    assert!(message.contains("a signed restore job"), "{message}");
    assert!(message.contains("RPO unknown, RTO unknown"), "{message}");
    // A skipped restore test is an event, not an alert; other actions are only stored.
    let skipped = audit::judge(
        "pve1",
        Some(&r),
        "restore_test.skipped",
        &serde_json::json!({ "detail": { "reason": "outside the window" } }),
    )
    .unwrap();
    assert_eq!(skipped.alert, None);
    assert_eq!(skipped.event.unwrap().1["reason"], "outside the window");
    assert_eq!(
        audit::judge("pve1", Some(&r), "guest.created", &entry),
        None
    );
}

#[test]
fn spans_read_in_their_two_largest_units() {
    let cases = [
        (0, "0 s"),
        (48, "48 s"),
        (60, "1 min"),
        (125, "2 min 5 s"),
        (7_385, "2 h 3 min"),
        (7_200, "2 h"),
        (90_061, "1 d 1 h"),
    ];
    for (secs, text) in cases {
        assert_eq!(audit::span(secs), text, "{secs}");
    }
}

#[test]
fn a_rolled_back_or_broken_controller_raises_an_alert_and_its_other_steps_are_events() {
    let r = report();
    let digest = format!("sha256:{}", "c".repeat(64));
    let entry = |detail: serde_json::Value| serde_json::json!({ "guest_id": GUEST, "vmid": 101, "detail": detail });
    let rolled = audit::judge(
        "pve1",
        Some(&r),
        "controller.rolled_back",
        &entry(serde_json::json!({
            "guest_id": GUEST, "vmid": 101, "digest": digest, "snapshot": "bosun-ctl-20261123-120000",
            "reason": "no healthy report within 2000 ms", "rolled_back": true,
        })),
    )
    .unwrap();
    let (kind, message) = rolled.alert.unwrap();
    assert_eq!(kind, AlertKind::ControllerRolledBack);
    for part in [
        "guest web1",
        "vmid 101",
        "host pve1",
        digest.as_str(),
        "bosun-ctl-20261123-120000",
        "no healthy report",
    ] {
        assert!(message.contains(part), "`{part}` missing from: {message}");
    }
    let failed = audit::judge(
        "pve1",
        None,
        "controller.rolled_back",
        &entry(
            serde_json::json!({ "rolled_back": false, "error": "e".repeat(10_000), "reason": "r" }),
        ),
    )
    .unwrap();
    let (_, message) = failed.alert.unwrap();
    assert!(
        message.contains("rolling the guest back failed"),
        "{message}"
    );
    assert!(message.len() < 1_000, "bounded: {}", message.len());
    let broken = audit::judge(
        "pve1",
        Some(&r),
        "controller.broken",
        &entry(serde_json::json!({ "digest": digest, "restarts": 3 })),
    )
    .unwrap();
    let (kind, message) = broken.alert.unwrap();
    assert_eq!(kind, AlertKind::ControllerBroken);
    assert!(message.contains("3 in-place restarts"), "{message}");
    // Silent through a rollout: broken too, and the operator is told the guest kept its data.
    let previous = format!("sha256:{}", "a".repeat(64));
    let silent = audit::judge(
        "pve1",
        Some(&r),
        "controller.broken",
        &entry(serde_json::json!({
            "digest": digest, "previous_digest": previous, "cause": "rollout_silent",
            "reason": "no healthy report within 300000 ms", "snapshot": "bosun-ctl-20261123-120000",
            "rolled_back": false, "restarted": true,
        })),
    )
    .unwrap();
    let (kind, message) = silent.alert.unwrap();
    assert_eq!(kind, AlertKind::ControllerBroken);
    for part in [
        "guest web1",
        digest.as_str(),
        previous.as_str(),
        "no healthy report",
        "restarted in place (ok)",
        "not rolled back",
        "bosun-ctl-20261123-120000",
    ] {
        assert!(message.contains(part), "`{part}` missing from: {message}");
    }
    assert!(!message.contains("in-place restarts"), "{message}");
    for (action, event) in [
        ("controller.committed", "controller_committed"),
        ("controller.restarted", "controller_restarted"),
        ("controller.recovered", "controller_recovered"),
    ] {
        let found = audit::judge(
            "pve1",
            Some(&r),
            action,
            &entry(serde_json::json!({ "digest": digest, "attempt": 1 })),
        )
        .unwrap();
        assert_eq!(found.alert, None, "{action}");
        let (name, detail) = found.event.unwrap();
        assert_eq!(name, event);
        assert_eq!(detail["digest"], digest.as_str());
    }
}

/// The kinds that hold at `now` and turn with time alone.
fn time_driven(report: &StateReport, records: &HubRecords<'_>, now: Timestamp) -> usize {
    conditions("pve1", report, records, now)
        .iter()
        .filter(|c| {
            matches!(
                c.kind,
                WatchKind::BackupOverdue | WatchKind::RestoreTestOverdue
            )
        })
        .count()
}

#[test]
fn the_next_change_is_the_instant_a_backup_or_restore_test_turns_overdue() {
    let start = at("2026-11-01T00:00:00Z");
    let day = |d: i64| start + SignedDuration::from_hours(24 * d);
    let ns = SignedDuration::from_nanos(1);
    // A daily tier whose last good backup finished on day 2: overdue after day 4.
    let mut r = report();
    r.tiers = vec![tier("daily")];
    r.last_backups = vec![backup(true, "2026-11-03T00:00:00Z")];
    let good = reported_last_good(&r);
    let records = backups_only(&good);
    let next = next_change(&r, &records, day(2)).unwrap();
    assert_eq!(next, day(4));
    assert_eq!(time_driven(&r, &records, next), 0);
    assert_eq!(time_driven(&r, &records, next + ns), 1);
    // Once overdue, nothing else turns: no next change.
    assert_eq!(next_change(&r, &records, day(5)), None);
    // A weekly restore-test policy whose clock started on day 1 turns on day 15, later than
    // the backup; the earlier of the two is the next change.
    let weekly = desired(true, 7);
    let clocks = [RestoreTestClock {
        guest_id: GUEST,
        since: day(1),
    }];
    let both = HubRecords {
        desired: Some(&weekly),
        clocks: &clocks,
        ..records
    };
    assert_eq!(next_change(&r, &both, day(2)), Some(day(4)));
    let restore_due = next_change(&r, &both, day(5)).unwrap();
    assert_eq!(restore_due, day(15));
    assert_eq!(time_driven(&r, &both, restore_due), 1);
    assert_eq!(time_driven(&r, &both, restore_due + ns), 2);
    // Nothing the hub could foresee: no tiers, no policy.
    assert_eq!(next_change(&report(), &HubRecords::default(), day(2)), None);
}

#[test]
fn text_an_alert_repeats_is_bounded_and_carries_no_control_character() {
    use super::watch::bounded;
    assert_eq!(
        bounded("pool\u{1b}[2J\r\nx", 64),
        "pool\u{fffd}[2J\u{fffd}\u{fffd}x"
    );
    assert_eq!(bounded("abcdef", 3), "abc");
    assert_eq!(bounded("wörds", 64), "wörds");
}
