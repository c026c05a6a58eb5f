use bosun_proto::admin::{AlertKind, HostDetail, OpenAlert};
use bosun_proto::alert_triage::AlertAck;
use bosun_proto::rollup::HealthLevel;
use jiff::Timestamp;
use serde_json::json;
use uuid::Uuid;

use super::roll_up;

const A: &str = "0190f5a6-0000-7000-8000-00000000000a";
const HOST: &str = "0190f5a6-0000-7000-8000-000000000001";

/// A healthy, active host with guest `alpha`, `edit` applied to its JSON.
fn host_with(edit: impl FnOnce(&mut serde_json::Value)) -> HostDetail {
    let mut value = json!({
        "host_id": HOST, "hostname": "pve1", "status": "active", "liveness": "ok",
        "last_seen": "2026-11-21T01:00:00Z", "agent_version": "0.1.0", "controller_version": null,
        "desired_generation": 2, "known_generation": 2, "applied_generation": 2, "pending_jobs": 0,
        "enrolled_at": "2026-11-21T00:59:00Z", "poll_interval_seconds": 1, "desired": null,
        "last_report": {
            "schema": "bosun.report/v1",
            "guests": [{ "guest_id": A, "vmid": 101, "hostname": "alpha", "status": "running" }],
            "storage": [], "last_backups": [], "last_restore_test": null, "tunnel": null,
            "versions": { "agent": "0.1.0" }, "audit": [],
        },
        "escrow_updated_at": null,
    });
    edit(&mut value);
    serde_json::from_value(value).unwrap()
}

fn open(kind: AlertKind, subject: &str) -> OpenAlert {
    OpenAlert {
        subject_name: None,
        host_id: Uuid::parse_str(HOST).unwrap(),
        hostname: "pve1".into(),
        kind,
        subject: subject.into(),
        since: Timestamp::UNIX_EPOCH,
        message: "m".into(),
        acknowledged: None,
        silenced_by: None,
    }
}

fn acked(mut alert: OpenAlert) -> OpenAlert {
    alert.acknowledged = Some(AlertAck {
        at: Timestamp::UNIX_EPOCH,
        note: "on it".into(),
    });
    alert
}

fn silenced(mut alert: OpenAlert) -> OpenAlert {
    alert.silenced_by = Some(7);
    alert
}

#[test]
fn a_healthy_host_is_ok_and_a_revoked_one_is_never_paged_for() {
    assert_eq!(roll_up(&host_with(|_| {}), &[]).summary(), "ok");
    let revoked = host_with(|v| {
        v["status"] = json!("revoked");
        v["liveness"] = json!("overdue");
    });
    let rollup = roll_up(&revoked, &[open(AlertKind::GuestLost, A)]);
    assert_eq!(rollup.level, HealthLevel::Ok);
    assert!(rollup.reasons.is_empty());
}

#[test]
fn open_alerts_count_at_their_kinds_level_acknowledged_as_warnings_silenced_not_at_all() {
    let host = host_with(|_| {});
    let lost = roll_up(&host, &[open(AlertKind::GuestLost, A)]);
    assert_eq!(lost.level, HealthLevel::Critical);
    assert_eq!(lost.summary(), "critical: guest_lost alpha");

    let escrow = roll_up(&host, &[acked(open(AlertKind::EscrowMissing, "pbs_key"))]);
    assert_eq!(escrow.level, HealthLevel::Warning);
    assert_eq!(
        escrow.summary(),
        "warning: escrow_missing pbs_key (acknowledged)"
    );

    let orphan = roll_up(&host, &[silenced(open(AlertKind::GuestOrphaned, A))]);
    assert_eq!(orphan.level, HealthLevel::Ok);
    assert_eq!(orphan.summary(), "ok: guest_orphaned alpha (silenced)");

    // Another host's alerts are not this host's.
    let mut elsewhere = open(AlertKind::GuestLost, A);
    elsewhere.host_id = Uuid::new_v4();
    assert_eq!(roll_up(&host, &[elsewhere]).level, HealthLevel::Ok);

    // The worst unacknowledged one decides; acknowledged criticals do not.
    let mixed = roll_up(
        &host,
        &[
            acked(open(AlertKind::StorageLost, "usb-1")),
            open(AlertKind::StorageRefused, "nfs-x"),
            silenced(open(AlertKind::BackupFailed, "b")),
        ],
    );
    assert_eq!(mixed.level, HealthLevel::Warning);
    assert_eq!(mixed.reasons.last().map(|r| r.level), Some(HealthLevel::Ok));
}

#[test]
fn liveness_counts_once_through_the_overdue_alert_when_it_is_open() {
    let overdue = host_with(|v| v["liveness"] = json!("overdue"));
    assert_eq!(
        roll_up(&overdue, &[]).summary(),
        "critical: overdue (silent)"
    );
    let alert = open(AlertKind::HostOverdue, HOST);
    assert_eq!(
        roll_up(&overdue, std::slice::from_ref(&alert)).summary(),
        "critical: overdue (silent)"
    );
    assert_eq!(
        roll_up(&overdue, &[acked(alert)]).summary(),
        "warning: overdue (silent) (acknowledged)"
    );
    for (liveness, text) in [
        ("stopped", "warning: stopped (planned)"),
        ("never", "warning: never polled"),
    ] {
        let host = host_with(|v| v["liveness"] = json!(liveness));
        assert_eq!(roll_up(&host, &[]).summary(), text);
    }
    let pending = host_with(|v| v["status"] = json!("pending_approval"));
    assert_eq!(
        roll_up(&pending, &[]).summary(),
        "warning: waiting for approval"
    );
}

#[test]
fn report_checks_without_an_alert_count_from_the_report() {
    let not_checked = host_with(|v| {
        v["last_report"]["restore_tests"] = json!([
            { "guest_id": A, "finished_at": "2026-11-21T00:40:00Z", "passed": false,
              "duration_seconds": 20, "detail": "booted", "outcome": "not_checked" }
        ]);
    });
    assert_eq!(
        roll_up(&not_checked, &[]).summary(),
        "warning: restore test of alpha booted, not checked"
    );
    // A newer pass replaces it.
    let passed = host_with(|v| {
        v["last_report"]["restore_tests"] = json!([
            { "guest_id": A, "finished_at": "2026-11-21T00:40:00Z", "passed": false,
              "duration_seconds": 20, "detail": "booted", "outcome": "not_checked" },
            { "guest_id": A, "finished_at": "2026-11-21T00:45:00Z", "passed": true,
              "duration_seconds": 20, "detail": "ok", "outcome": "passed" },
        ]);
    });
    assert_eq!(roll_up(&passed, &[]).level, HealthLevel::Ok);
    let unknown = host_with(|v| {
        v["last_report"]["guests"][0]["status"] = json!("hibernating");
        v["last_report"]["storage"] = json!([{ "durable_id": "usb-1", "status": "melting" }]);
        v["reseal_required_since"] = json!("2026-11-21T00:00:00Z");
    });
    let rollup = roll_up(&unknown, &[]);
    assert_eq!(rollup.level, HealthLevel::Warning);
    let text = rollup.summary();
    for part in [
        "guest alpha in an unknown state",
        "storage usb-1 in an unknown state",
        "storage credentials to reseal",
    ] {
        assert!(text.contains(part), "{text}");
    }
    // A failed check the hub holds an alert for counts through the alert only.
    let failed = host_with(|v| {
        v["last_report"]["restore_tests"] = json!([
            { "guest_id": A, "finished_at": "2026-11-21T00:40:00Z", "passed": false,
              "duration_seconds": 20, "detail": "orders.db: FAILED", "outcome": "failed" }
        ]);
    });
    assert_eq!(roll_up(&failed, &[]).level, HealthLevel::Ok);
    let subject = format!("{A}:1:2026-11-21T00:40:00Z");
    let alert = acked(open(AlertKind::RestoreTestFailed, &subject));
    assert_eq!(roll_up(&failed, &[alert]).level, HealthLevel::Warning);
}
