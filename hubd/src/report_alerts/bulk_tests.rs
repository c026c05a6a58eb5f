use bosun_proto::desired::BulkBackup;
use bosun_proto::report::{
    BulkArchiveReport, BulkVolumeReport, GuestReport, GuestStatus, StateReport, Versions,
};
use jiff::Timestamp;
use uuid::Uuid;

use super::super::{HubRecords, OpenWatch, WatchKind, WatchPlan, plan};

const GUEST: Uuid = Uuid::from_u128(0x0190_f5a6_0000_7000_8000_0000_0000_00b1);

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

/// A report with guest `web1` and its bulk volume `media`, whose desired decision is `backup`.
fn report(backup: BulkBackup, signed: Option<&str>) -> StateReport {
    let mut report = StateReport::empty(1, "0.1.0");
    report.versions = Versions::default();
    report.guests = vec![GuestReport {
        guest_id: Some(GUEST),
        vmid: 101,
        kind: bosun_proto::desired::GuestKind::Lxc,
        hostname: "web1".into(),
        status: GuestStatus::Running,
        resources: None,
        controller_digest: None,
        controller_expected: None,
        addresses: Vec::new(),
    }];
    report.bulk_volumes = vec![BulkVolumeReport {
        guest_id: GUEST,
        name: "media".into(),
        path: "/srv/media".into(),
        size_gib: 100,
        class: None,
        target: Some("nas-media".into()),
        storage_id: Some("bosun-nas-media".into()),
        refused: None,
        backup,
        signed_target: signed.map(str::to_owned),
        last_archive: None,
        last_error: None,
        not_archived: None,
    }];
    report
}

fn asks_for(target: &str) -> BulkBackup {
    BulkBackup::Target {
        target: target.into(),
    }
}

fn archive() -> BulkArchiveReport {
    BulkArchiveReport {
        at: at("2026-11-20T03:00:00Z"),
        target: "usb1".into(),
        name: "bulk-media-2026_11_20-03_00_00.tar".into(),
        size_bytes: 1 << 30,
        sha256: "0".repeat(64),
    }
}

fn open(kind: WatchKind) -> OpenWatch {
    OpenWatch {
        kind,
        subject: format!("{GUEST}/media"),
        opened_at: at("2026-11-20T02:00:00Z"),
    }
}

fn judge(open: &[OpenWatch], report: &StateReport) -> WatchPlan {
    plan(
        "pve1",
        open,
        report,
        &HubRecords::default(),
        at("2026-11-20T04:00:00Z"),
    )
}

fn kinds(plan: &WatchPlan) -> (Vec<WatchKind>, Vec<&'static str>) {
    (
        plan.raise.iter().map(|c| c.kind).collect(),
        plan.resolve.iter().map(|r| r.event_kind()).collect(),
    )
}

#[test]
fn a_target_decision_the_plan_does_not_sign_raises_bulk_unprotected() {
    let unsigned = report(asks_for("usb1"), None);
    let raised = judge(&[], &unsigned);
    assert_eq!(kinds(&raised), (vec![WatchKind::BulkUnprotected], vec![]));
    let alert = &raised.raise[0];
    assert_eq!(alert.subject, format!("{GUEST}/media"));
    assert_eq!(alert.kind.alert_kind().as_str(), "bulk_unprotected");
    for word in ["media", "web1", "pve1", "usb1", "bulk_backups", "sign"] {
        assert!(alert.message.contains(word), "{word}: {}", alert.message);
    }
    // Still unsigned: one alert, nothing new.
    assert!(judge(&[open(WatchKind::BulkUnprotected)], &unsigned).is_empty());
    // The plan names a target: protected.
    let signed = report(asks_for("usb1"), Some("usb1"));
    assert!(judge(&[], &signed).is_empty());
    let resolved = judge(&[open(WatchKind::BulkUnprotected)], &signed);
    assert_eq!(kinds(&resolved), (vec![], vec!["bulk_protected"]));
    assert_eq!(
        resolved.resolve[0].alert_kind().map(|k| k.as_str()),
        Some("bulk_protected")
    );
}

#[test]
fn an_acknowledged_none_raises_nothing_and_clears_an_open_alert() {
    let none = report(
        BulkBackup::None {
            acknowledged_by: "ops@example 2026-11-20".into(),
        },
        None,
    );
    assert!(judge(&[], &none).is_empty());
    let cleared = judge(&[open(WatchKind::BulkUnprotected)], &none);
    assert_eq!(kinds(&cleared), (vec![], vec!["bulk_unprotected_cleared"]));
    assert_eq!(cleared.resolve[0].alert_kind(), None);
    // The volume gone from the report clears it too.
    let gone = StateReport::empty(1, "0.1.0");
    let cleared = judge(&[open(WatchKind::BulkUnprotected)], &gone);
    assert_eq!(kinds(&cleared), (vec![], vec!["bulk_unprotected_cleared"]));
}

#[test]
fn a_failed_attempt_raises_bulk_backup_failed_until_a_newer_archive_lands() {
    let mut failed = report(asks_for("usb1"), Some("usb1"));
    failed.bulk_volumes[0].last_archive = Some(archive());
    failed.bulk_volumes[0].last_error = Some("tar exited with status 2\u{1b}[2J".into());
    let raised = judge(&[], &failed);
    assert_eq!(kinds(&raised), (vec![WatchKind::BulkBackupFailed], vec![]));
    let alert = &raised.raise[0];
    assert_eq!(alert.subject, format!("{GUEST}/media"));
    for word in [
        "media",
        "web1",
        "pve1",
        "usb1",
        "tar exited with status 2",
        "2026-11-20T03:00:00Z",
    ] {
        assert!(alert.message.contains(word), "{word}: {}", alert.message);
    }
    assert!(!alert.message.contains('\u{1b}'), "{}", alert.message);
    assert!(judge(&[open(WatchKind::BulkBackupFailed)], &failed).is_empty());
    // A newer archive: the error is gone.
    let mut archived = failed.clone();
    archived.bulk_volumes[0].last_error = None;
    archived.bulk_volumes[0].last_archive = Some(BulkArchiveReport {
        at: at("2026-11-20T03:30:00Z"),
        name: "bulk-media-2026_11_20-03_30_00.tar".into(),
        ..archive()
    });
    let resolved = judge(&[open(WatchKind::BulkBackupFailed)], &archived);
    assert_eq!(kinds(&resolved), (vec![], vec!["bulk_backup_recovered"]));
    assert!(
        resolved.resolve[0]
            .message
            .contains("bulk-media-2026_11_20-03_30_00.tar")
    );
    // The error gone with no archive at all is no recovery.
    let mut never = failed.clone();
    never.bulk_volumes[0].last_error = None;
    never.bulk_volumes[0].last_archive = None;
    let cleared = judge(&[open(WatchKind::BulkBackupFailed)], &never);
    assert_eq!(
        kinds(&cleared),
        (vec![], vec!["bulk_backup_failed_cleared"])
    );
    // Nor is the plan dropping the volume: its old archive is no newer one.
    let mut dropped = report(
        BulkBackup::None {
            acknowledged_by: "ops".into(),
        },
        None,
    );
    dropped.bulk_volumes[0].last_archive = Some(archive());
    let cleared = judge(&[open(WatchKind::BulkBackupFailed)], &dropped);
    assert_eq!(
        kinds(&cleared),
        (vec![], vec!["bulk_backup_failed_cleared"])
    );
}

#[test]
fn an_unsigned_volume_whose_attempt_failed_has_both_alerts() {
    let mut both = report(asks_for("usb1"), None);
    both.bulk_volumes[0].last_error = Some("the plan no longer names a target".into());
    let raised = judge(&[], &both);
    assert_eq!(
        kinds(&raised).0,
        vec![WatchKind::BulkUnprotected, WatchKind::BulkBackupFailed]
    );
    assert!(raised.raise[1].message.contains("its signed target"));
}

#[test]
fn a_vms_volume_the_agent_does_not_archive_stays_unprotected_whatever_the_plan_signs() {
    let mut vm = report(asks_for("usb1"), Some("usb1"));
    vm.bulk_volumes[0].not_archived = Some(bosun_proto::report::BulkNotArchived::VmDisk);
    let raised = judge(&[], &vm);
    assert_eq!(kinds(&raised), (vec![WatchKind::BulkUnprotected], vec![]));
    let alert = &raised.raise[0];
    for word in ["media", "web1", "pve1", "usb1", "vm_disk", "VM's disk"] {
        assert!(alert.message.contains(word), "{word}: {}", alert.message);
    }
    assert!(!alert.message.contains("sign a plan"), "{}", alert.message);
    // Still not archived: one alert, never resolved as protected by the signed target.
    assert!(judge(&[open(WatchKind::BulkUnprotected)], &vm).is_empty());
    // Desired state acknowledging none clears it, not as protected.
    let mut none = report(
        BulkBackup::None {
            acknowledged_by: "ops".into(),
        },
        Some("usb1"),
    );
    none.bulk_volumes[0].not_archived = Some(bosun_proto::report::BulkNotArchived::VmDisk);
    assert!(judge(&[], &none).is_empty());
    let cleared = judge(&[open(WatchKind::BulkUnprotected)], &none);
    assert_eq!(kinds(&cleared), (vec![], vec!["bulk_unprotected_cleared"]));
}
