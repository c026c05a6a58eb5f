use bosun_proto::admin::HostDetail;
use serde_json::json;

use super::*;

const A: &str = "0190f5a6-0000-7000-8000-00000000000a";
const B: &str = "0190f5a6-0000-7000-8000-00000000000b";

fn host(report_guests: serde_json::Value) -> HostDetail {
    let desired = json!({
        "schema": "bosun.desired/v1",
        "guests": [{
            "guest_id": A,
            "hostname": "alpha",
            "customer": { "customer_id": "acme", "display_name": "Acme" },
            "resources": { "cores": 2, "memory_mib": 1024, "rootfs_gib": 10 },
            "power": "running",
            "golden": { "volid": "local:backup/golden.tar.zst", "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".to_owned() },
        }],
        "backup_policy": { "schedule": "daily", "retention": {} },
        "restore_test_policy": { "enabled": false, "interval_days": 7, "timeout_minutes": 30 },
    });
    let value = json!({
        "host_id": "0190f5a6-0000-7000-8000-000000000001",
        "hostname": "pve1",
        "status": "active",
        "liveness": "ok",
        "last_seen": "2026-11-21T01:00:00Z",
        "agent_version": "0.1.0",
        "controller_version": null,
        "desired_generation": 2,
        "known_generation": 2,
        "applied_generation": 2,
        "pending_jobs": 0,
        "enrolled_at": "2026-11-21T00:59:00Z",
        "poll_interval_seconds": 1,
        "desired": desired,
        "last_report": {
            "schema": "bosun.report/v1",
            "host": { "cpu_count": 2, "cpu_usage": 0.1, "memory_total_mib": 4096,
                      "memory_used_mib": 1024, "disk_total_gib": 100, "disk_used_gib": 20 },
            "guests": report_guests,
            "storage": [],
            "last_backups": [
                { "guest_id": A, "target": "local", "finished_at": "2026-11-21T00:30:00Z", "ok": true },
                { "guest_id": A, "target": "local", "finished_at": "2026-11-21T00:50:00Z", "ok": false },
            ],
            "last_restore_test": null,
            "tunnel": null,
            "versions": { "agent": "0.1.0" },
            "audit": [],
        },
        "escrow_updated_at": null,
    });
    serde_json::from_value(value).expect("a valid host detail")
}

#[test]
fn desired_and_reported_guests_merge_by_id_and_undesired_ones_stand_out() {
    let detail = host(json!([
        { "guest_id": A, "vmid": 100, "hostname": "alpha", "status": "running" },
        { "guest_id": B, "vmid": 101, "hostname": "bravo", "status": "orphaned" },
    ]));
    let lines = guest_lines(&detail);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0].vmid, Some(100));
    assert!(lines[0].desired);
    assert_eq!(lines[0].observed, "running");
    assert_eq!(lines[1].hostname, "bravo");
    assert!(!lines[1].desired);
    assert_eq!(lines[1].observed, "orphaned");
}

#[test]
fn a_desired_guest_not_yet_reported_is_absent() {
    let lines = guest_lines(&host(json!([])));
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].observed, "absent");
    assert_eq!(lines[0].vmid, None);
}

#[test]
fn the_rendering_names_the_newest_backup_and_missing_restore_test() {
    let status = FleetStatus {
        hosts: vec![host(json!([
            { "guest_id": A, "vmid": 100, "hostname": "alpha", "status": "running" },
        ]))],
        alerts: Vec::new(),
    };
    let text = render(&status).join("\n");
    assert!(
        text.contains("last backup       2026-11-21 00:50:00Z on local (FAILED)"),
        "{text}"
    );
    assert!(text.contains("last restore-test never"), "{text}");
    assert!(text.contains("alpha"), "{text}");
    assert!(text.contains("alerts: none"), "{text}");
}

#[test]
fn a_broken_guest_shows_as_broken() {
    let status = FleetStatus {
        hosts: vec![host(json!([
            { "guest_id": A, "vmid": 100, "hostname": "alpha", "status": "broken" },
        ]))],
        alerts: Vec::new(),
    };
    assert_eq!(guest_lines(&status.hosts[0])[0].observed, "broken");
    let text = render(&status).join("\n");
    assert!(
        text.lines()
            .any(|l| l.contains("alpha") && l.contains("desired") && l.ends_with("broken")),
        "{text}"
    );
}
