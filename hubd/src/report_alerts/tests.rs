use bosun_proto::desired::Retention;
use bosun_proto::report::{
    BackupReport, GuestReport, HostMetrics, TargetReport, TierReport, Versions,
};

use super::*;

const GUEST: Uuid = Uuid::from_u128(0x0190_f5a6_0000_7000_8000_0000_0000_000a);

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn report() -> StateReport {
    StateReport {
        schema: bosun_proto::report::SCHEMA.to_owned(),
        seq: 1,
        host: HostMetrics::default(),
        guests: vec![GuestReport {
            guest_id: Some(GUEST),
            vmid: 101,
            hostname: "web1".into(),
            status: GuestStatus::Running,
            resources: None,
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
        desired: Retention::default(),
        applied: Retention::default(),
        held: None,
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
    let first = plan("pve1", &open, &r, &[], now);
    assert_eq!(first.raise.len(), 1, "{first:?}");
    assert_eq!(first.raise[0].kind, WatchKind::StorageLost);
    assert!(first.raise[0].message.contains("disconnected: unplugged"));
    apply(&mut open, &first, now);
    // Still lost, another way: the one alert stays open.
    r.storage = vec![target(TargetStatus::Unreachable)];
    assert!(plan("pve1", &open, &r, &[], now).is_empty());
    r.storage = vec![target(TargetStatus::Mounted)];
    let back = plan("pve1", &open, &r, &[], now);
    assert_eq!(back.resolve.len(), 1);
    assert_eq!(back.resolve[0].event_kind(), "storage_recovered");
    assert_eq!(
        back.resolve[0].alert_kind(),
        Some(AlertKind::StorageRecovered)
    );
    // Detached on purpose: closed, but not as a recovery.
    r.storage = vec![target(TargetStatus::Detached)];
    let detached = plan("pve1", &open, &r, &[], now);
    assert_eq!(detached.resolve[0].event_kind(), "storage_lost_cleared");
    assert_eq!(detached.resolve[0].alert_kind(), None);
    // Detached or retired targets never open one.
    for status in [TargetStatus::Detached, TargetStatus::Decommissioned] {
        r.storage = vec![target(status)];
        assert!(plan("pve1", &[], &r, &[], now).raise.is_empty());
    }
}

#[test]
fn a_failed_backup_opens_and_a_newer_good_one_resolves() {
    let now = at("2026-11-21T01:00:00Z");
    let mut open = Vec::new();
    let mut r = report();
    r.last_backups = vec![backup(false, "2026-11-21T00:40:00Z")];
    let failed = plan("pve1", &open, &r, &[], now);
    assert_eq!(failed.raise.len(), 1);
    assert_eq!(failed.raise[0].kind, WatchKind::BackupFailed);
    assert_eq!(failed.raise[0].subject, backup_subject(GUEST, "pbs1"));
    assert!(failed.raise[0].message.contains("connection refused"));
    assert!(failed.raise[0].message.contains("tier 1"));
    apply(&mut open, &failed, now);
    r.last_backups = vec![backup(true, "2026-11-21T00:55:00Z")];
    let good = plan("pve1", &open, &r, &[], now);
    assert_eq!(good.resolve.len(), 1);
    assert_eq!(good.resolve[0].event_kind(), "backup_recovered");
    assert_eq!(
        good.resolve[0].alert_kind(),
        Some(AlertKind::BackupRecovered)
    );
    assert!(good.resolve[0].message.contains("tier 1"), "{good:?}");
    r.last_backups.clear();
    let gone = plan("pve1", &open, &r, &[], now);
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
        conditions("pve1", r, last_good, at(now))
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
    let late = plan("pve1", &open, &r, &reported_last_good(&r), now);
    assert_eq!(late.raise.len(), 1);
    assert_eq!(late.raise[0].kind, WatchKind::BackupOverdue);
    apply(&mut open, &late, now);
    r.last_backups = vec![backup(true, "2026-11-22T23:00:00Z")];
    let caught_up = plan("pve1", &open, &r, &reported_last_good(&r), now);
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
    let dropped = plan("pve1", &open, &r, &reported_last_good(&r), now);
    assert_eq!(dropped.resolve[0].event_kind(), "backup_overdue_cleared");
    assert_eq!(dropped.resolve[0].alert_kind(), None);
}

#[test]
fn alerts_carry_the_names_of_their_events() {
    for kind in [
        WatchKind::StorageLost,
        WatchKind::BackupFailed,
        WatchKind::BackupOverdue,
    ] {
        assert_eq!(kind.alert_kind().as_str(), kind.as_str());
        assert_eq!(kind.recovered_alert_kind().as_str(), kind.recovered());
    }
}
