//! Delta computation, merge and validation.

use proptest::prelude::*;
use uuid::Uuid;

use super::*;
use crate::report::{GuestStatus, SCHEMA as REPORT_SCHEMA};

fn guest(vmid: u32, status: GuestStatus) -> GuestReport {
    GuestReport {
        guest_id: Some(Uuid::from_u128(u128::from(vmid))),
        vmid,
        kind: crate::desired::GuestKind::Lxc,
        hostname: format!("g{vmid}"),
        status,
        resources: None,
        controller_digest: None,
        controller_expected: None,
        addresses: Vec::new(),
    }
}

fn report(seq: u64, guests: Vec<GuestReport>) -> StateReport {
    StateReport {
        schema: REPORT_SCHEMA.to_owned(),
        seq,
        host: Some(HostMetrics {
            cpu_count: 8,
            ..HostMetrics::default()
        }),
        guests,
        storage: Vec::new(),
        last_backups: Vec::new(),
        last_restore_test: None,
        tunnel: None,
        versions: Versions {
            agent: "0.1.0".into(),
            controller: None,
            pve: Some("8.2.4".into()),
        },
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

#[test]
fn an_unchanged_report_gives_an_empty_delta() {
    let base = report(5, vec![guest(100, GuestStatus::Running)]);
    let delta = ReportDelta::between(&base, 5, &base, 6);
    assert!(delta.changes_nothing());
    assert_eq!((delta.seq, delta.base_seq), (6, 5));
    delta.validate().unwrap();
    let wire = serde_json::to_value(&delta).unwrap();
    assert_eq!(
        wire.as_object().unwrap().len(),
        3,
        "only schema, seq and base_seq go on the wire: {wire}"
    );
}

#[test]
fn changed_added_and_removed_guests_travel_and_merge() {
    let base = report(
        1,
        vec![
            guest(100, GuestStatus::Running),
            guest(101, GuestStatus::Running),
            guest(102, GuestStatus::Stopped),
        ],
    );
    let mut now = report(
        0,
        vec![
            guest(100, GuestStatus::Running),
            guest(101, GuestStatus::Broken),
            guest(103, GuestStatus::Provisioning),
        ],
    );
    now.host.as_mut().unwrap().cpu_usage = 0.5;
    let delta = ReportDelta::between(&base, 1, &now, 2);
    let changed: Vec<u32> = delta.guests.iter().map(|g| g.vmid).collect();
    assert_eq!(changed, vec![101, 103]);
    assert_eq!(delta.removed_guests, vec![102]);
    assert_eq!(delta.host, now.host);
    assert!(delta.versions.is_none());
    let mut merged = base.clone();
    merged.apply(&delta);
    now.seq = 2;
    assert_eq!(merged, now);
}

#[test]
fn applying_clears_audit_and_keeps_backups_keyed() {
    let guest_id = Uuid::from_u128(7);
    let backup = |target: &str, ok: bool| BackupReport {
        guest_id,
        target: target.into(),
        finished_at: "2026-11-20T01:00:00Z".parse().unwrap(),
        ok,
        size_bytes: None,
        ..BackupReport::default()
    };
    let mut base = report(1, Vec::new());
    base.last_backups = vec![backup("usb", true), backup("pbs", true)];
    let mut now = base.clone();
    now.last_backups[1] = backup("pbs", false);
    now.audit.push(AuditEntry {
        seq: 9,
        at: "2026-11-20T01:00:00Z".parse().unwrap(),
        action: "backup.failed".into(),
        detail: serde_json::Value::Null,
    });
    let delta = ReportDelta::between(&base, 1, &now, 2);
    assert_eq!(delta.last_backups, vec![backup("pbs", false)]);
    assert_eq!(delta.audit.len(), 1);
    let mut merged = base;
    merged.apply(&delta);
    assert!(merged.audit.is_empty());
    assert_eq!(
        merged.last_backups,
        vec![backup("usb", true), backup("pbs", false)]
    );
}

#[test]
fn bad_deltas_name_the_field() {
    let base = report(1, vec![guest(100, GuestStatus::Running)]);
    let mut delta = ReportDelta::between(&base, 4, &base, 4);
    assert_eq!(delta.validate().unwrap_err().field(), "seq");
    delta.seq = 5;
    delta.guests = vec![guest(100, GuestStatus::Stopped)];
    delta.removed_guests = vec![100];
    assert_eq!(delta.validate().unwrap_err().field(), "guests");
    delta.removed_guests.clear();
    delta.host = Some(HostMetrics {
        cpu_usage: 2.0,
        ..HostMetrics::default()
    });
    assert_eq!(delta.validate().unwrap_err().field(), "host.cpu_usage");
    delta.host = None;
    delta.schema = "bosun.report/v1".into();
    assert_eq!(delta.validate().unwrap_err().field(), "schema");
}

#[test]
fn a_poll_carries_exactly_one_of_report_and_delta() {
    let base = report(1, Vec::new());
    let mut poll = crate::poll::PollRequest {
        capabilities: None,
        schema: crate::poll::REQUEST_SCHEMA.into(),
        known_generation: 0,
        applied_generation: 0,
        acked_jobs: Vec::new(),
        report: Some(base.clone()),
        delta: Some(ReportDelta::between(&base, 1, &base, 2)),
        operations: Vec::new(),
        stopping: false,
        hub_pins: Vec::new(),
        next_host_key_sha256: None,
    };
    assert_eq!(poll.validate().unwrap_err().field(), "report");
    poll.report = None;
    poll.validate().unwrap();
    poll.delta = None;
    assert_eq!(poll.validate().unwrap_err().field(), "report");
}

fn arb_guests() -> impl Strategy<Value = Vec<GuestReport>> {
    prop::collection::btree_map(100u32..120, 0u8..4, 0..12).prop_map(|m| {
        m.into_iter()
            .map(|(vmid, s)| {
                let status = match s {
                    0 => GuestStatus::Running,
                    1 => GuestStatus::Stopped,
                    2 => GuestStatus::Broken,
                    _ => GuestStatus::Orphaned,
                };
                guest(vmid, status)
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn base_plus_delta_is_the_current_report(old in arb_guests(), new in arb_guests(), cpu in 0.0f64..=1.0) {
        let base = report(10, old);
        let mut now = report(11, new);
        now.host.as_mut().unwrap().cpu_usage = cpu;
        let delta = ReportDelta::between(&base, 10, &now, 11);
        delta.validate().unwrap();
        let mut merged = base;
        merged.apply(&delta);
        prop_assert_eq!(merged, now);
    }
}

#[test]
fn a_new_restore_test_result_travels_whole_and_applies() {
    use crate::report::{RestoreTestOutcome, RestoreTestReport};
    let base = report(5, vec![guest(100, GuestStatus::Running)]);
    let mut current = base.clone();
    current.restore_tests.push(RestoreTestReport {
        guest_id: Uuid::from_u128(100),
        finished_at: "2026-11-01T03:00:00Z".parse().unwrap(),
        passed: true,
        duration_seconds: 41,
        detail: String::new(),
        outcome: Some(RestoreTestOutcome::Passed),
        tier: Some("local".into()),
        archive: Some("local:backup/vzdump-lxc-100-2026_11_01-02_00_00.tar.zst".into()),
        last_passed_at: Some("2026-11-01T03:00:00Z".parse().unwrap()),
    });
    let delta = ReportDelta::between(&base, 5, &current, 6);
    assert!(!delta.changes_nothing());
    assert_eq!(
        delta.restore_tests.as_deref(),
        Some(&current.restore_tests[..])
    );
    let mut applied = base.clone();
    applied.apply(&delta);
    assert_eq!(applied.restore_tests, current.restore_tests);
    assert!(
        ReportDelta::between(&current, 6, &current, 7)
            .restore_tests
            .is_none()
    );
}

#[test]
fn host_health_and_the_tunnel_travel_when_changed_and_are_validated() {
    use crate::health::{GaugeHealth, HostHealth, SmartReading, SmartState};
    use crate::report::TunnelHealth;
    let base = report(1, Vec::new());
    let mut current = base.clone();
    let gauge = GaugeHealth {
        usage: 0.95,
        high: 0.9,
        low: 0.8,
        raised: true,
        since: None,
    };
    current.host_health = Some(HostHealth {
        cpu: Some(gauge),
        smart: vec![SmartReading {
            device: "/dev/sda".into(),
            state: SmartState::Failing,
            detail: "FAILED".into(),
            checked_at: jiff::Timestamp::UNIX_EPOCH,
        }],
        ..HostHealth::default()
    });
    current.tunnel = Some(TunnelHealth {
        healthy: false,
        detail: "refused".into(),
        down_since: Some(jiff::Timestamp::UNIX_EPOCH),
        raised: true,
        managed: None,
    });
    let delta = ReportDelta::between(&base, 1, &current, 2);
    assert!(!delta.changes_nothing());
    delta.validate().unwrap();
    let mut merged = base.clone();
    merged.apply(&delta);
    assert_eq!(merged.host_health, current.host_health);
    assert_eq!(merged.tunnel, current.tunnel);
    // Unchanged: nothing travels.
    let again = ReportDelta::between(&current, 2, &current, 3);
    assert!(again.changes_nothing());
    // An agent's bad values are refused in a delta as in a report.
    let mut bad = delta.clone();
    bad.host_health
        .as_mut()
        .unwrap()
        .cpu
        .as_mut()
        .unwrap()
        .usage = f64::NAN;
    assert_eq!(bad.validate().unwrap_err().field(), "host_health.cpu.usage");
    let mut long = delta;
    long.tunnel.as_mut().unwrap().detail = "x".repeat(5000);
    assert_eq!(long.validate().unwrap_err().field(), "tunnel.detail");
    let mut full = current;
    full.tunnel.as_mut().unwrap().detail = "\u{7}".into();
    assert!(full.validate().is_err());
    // An older agent's report (no health, no tunnel fields) still parses.
    let old: StateReport = serde_json::from_value(serde_json::json!({
        "schema": REPORT_SCHEMA, "host": {}, "versions": {"agent": "0.1.0"},
        "tunnel": {"healthy": true}
    }))
    .unwrap();
    assert!(old.host_health.is_none());
    assert!(!old.tunnel.unwrap().raised);
}

/// Metrics that could not be read are absent, in the report and through a delta: the hub never
/// keeps the last reading as if it were current, and a reading that comes back replaces it.
#[test]
fn unread_host_metrics_travel_as_absent_not_as_the_old_reading() {
    let base = report(1, vec![guest(100, GuestStatus::Running)]);
    assert!(base.host.is_some());
    let mut unread = base.clone();
    unread.host = None;
    let delta = ReportDelta::between(&base, 1, &unread, 2);
    assert!(delta.host_unread && delta.host.is_none());
    assert!(!delta.changes_nothing());
    delta.validate().unwrap();
    let mut merged = base.clone();
    merged.apply(&delta);
    assert_eq!(merged.host, None);

    let back = ReportDelta::between(&merged, 2, &base, 3);
    assert!(!back.host_unread);
    assert_eq!(back.host, base.host);
    merged.apply(&back);
    assert_eq!(merged.host, base.host);

    let mut both = back.clone();
    both.host_unread = true;
    assert!(both.validate().is_err(), "unread and read at once");
    let json = serde_json::to_value(ReportDelta::between(&base, 1, &base, 2)).unwrap();
    assert!(json.get("host_unread").is_none(), "sent only when true");
}
