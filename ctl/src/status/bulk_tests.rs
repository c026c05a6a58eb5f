use bosun_proto::admin::HostDetail;
use serde_json::{Value, json};

use super::*;

const A: &str = "0190f5a6-0000-7000-8000-00000000000a";

/// A host whose report has guest `alpha` with the bulk volumes `volumes`.
fn host(volumes: Value) -> HostDetail {
    serde_json::from_value(json!({
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
        "desired": null,
        "last_report": {
            "schema": "bosun.report/v1",
            "guests": [{ "guest_id": A, "vmid": 100, "hostname": "alpha", "status": "running" }],
            "storage": [],
            "last_backups": [],
            "versions": { "agent": "0.1.0" },
            "audit": [],
            "bulk_volumes": volumes,
        },
        "escrow_updated_at": null,
    }))
    .expect("a valid host detail")
}

fn volume(backup: Value, extra: Value) -> Value {
    let mut v = json!({
        "guest_id": A, "name": "media", "path": "/srv/media", "size_gib": 100,
        "class": "slow", "target": "nas-media", "backup": backup,
    });
    for (key, value) in extra.as_object().unwrap() {
        v[key] = value.clone();
    }
    v
}

fn now() -> Timestamp {
    "2026-11-21T03:00:00Z".parse().unwrap()
}

fn lines(volumes: Value) -> Vec<String> {
    guest_lines(&host(volumes), A.parse().unwrap(), now())
}

#[test]
fn a_signed_volume_shows_its_target_newest_archive_and_failure() {
    let shown = lines(json!([volume(
        json!({ "kind": "target", "target": "usb1" }),
        json!({
            "signed_target": "usb1",
            "last_archive": { "at": "2026-11-21T01:00:00Z", "target": "usb1",
                "name": "bulk-media-2026_11_21-01_00_00.tar", "size_bytes": 1_610_612_736u64,
                "sha256": "ab".repeat(32) },
            "last_error": "tar exited with status 2\u{1b}[2J",
        }),
    )]));
    assert_eq!(
        shown,
        [
            "    bulk media /srv/media  on nas-media  backup to usb1, newest archive 2h ago (1.5 GiB); newest attempt FAILED: tar exited with status 2 [2J"
        ],
    );
}

#[test]
fn an_unsigned_volume_says_it_is_not_backed_up() {
    let shown = lines(json!([volume(
        json!({ "kind": "target", "target": "usb1" }),
        json!({})
    )]));
    assert_eq!(shown.len(), 1);
    assert!(
        shown[0].contains("NO SIGNED TARGET: not backed up (desired state asks for usb1;"),
        "{shown:?}"
    );
    assert!(!shown[0].contains("archive"), "{shown:?}");
    let signed = lines(json!([volume(
        json!({ "kind": "target", "target": "usb1" }),
        json!({ "signed_target": "usb1" })
    )]));
    assert!(
        signed[0].ends_with("backup to usb1, no archive yet"),
        "{signed:?}"
    );
}

#[test]
fn an_acknowledged_none_and_a_refused_placement_say_so() {
    let shown = lines(json!([volume(
        json!({ "kind": "none", "acknowledged_by": "ops@example 2026-11-20" }),
        json!({ "target": null, "refused": "no_target_of_class" }),
    )]));
    assert_eq!(
        shown,
        [
            "    bulk media /srv/media  NOT PLACED: no attached bulk-data target of class slow  backup none (acknowledged by ops@example 2026-11-20)"
        ],
    );
    let fields = fields(
        &host(json!([volume(
            json!({ "kind": "none", "acknowledged_by": "ops" }),
            json!({})
        )])),
        now(),
    );
    assert_eq!(fields.len(), 1);
    assert_eq!(fields[0].0, "bulk volume");
    assert!(
        fields[0].1.starts_with("guest alpha bulk media"),
        "{fields:?}"
    );
}

#[test]
fn status_shows_the_lines_under_their_guest() {
    let status = crate::status::FleetStatus {
        hosts: vec![host(json!([volume(
            json!({ "kind": "target", "target": "usb1" }),
            json!({})
        )]))],
        alerts: Vec::new(),
        open_alerts: Vec::new(),
    };
    let text = crate::status::render_at(&status, now());
    let guest = text
        .iter()
        .position(|l| l.starts_with("  guest alpha"))
        .unwrap();
    assert!(
        text[guest + 1..]
            .iter()
            .any(|l| l.starts_with("    bulk media /srv/media  on nas-media  NO SIGNED TARGET")),
        "{text:#?}"
    );
}

#[test]
fn a_vms_volume_says_it_is_not_archived_whatever_the_plan_names() {
    let shown = lines(json!([volume(
        json!({ "kind": "target", "target": "usb1" }),
        json!({ "signed_target": "usb1", "not_archived": "vm_disk" }),
    )]));
    assert_eq!(
        shown,
        [
            "    bulk media /srv/media  on nas-media  NOT ARCHIVED: a VM's disk (backup=0): Bosun archives only containers' bulk volumes, and the VM's own backups leave it out"
        ],
    );
    let unknown = lines(json!([volume(
        json!({ "kind": "target", "target": "usb1" }),
        json!({ "not_archived": "from_the_future" }),
    )]));
    assert!(
        unknown[0].contains("NOT ARCHIVED: a reason this bosunctl does not know"),
        "{unknown:?}"
    );
}
