use std::path::Path;
use std::sync::Arc;

use bosun_proto::data_plan::{DataPlan, PlanBackup, PlanBulkBackup};
use bosun_proto::desired::{BulkBackup, DesiredState, Retention, StorageTarget};
use jiff::Timestamp;
use uuid::Uuid;

use super::*;
use crate::data::plan::VerifiedPlan;
use crate::ops::journal::BulkArchived;

const GUEST: &str = "5b0f9c62-3a0e-4c44-9d55-0a1b2c3d4e5f";

/// A desired state with one guest holding bulk volume `media` (placed on `bulk-nfs`, desired
/// backup to `backup-dir`) and the targets it names.
fn desired() -> DesiredState {
    serde_json::from_value(serde_json::json!({
        "schema": "bosun.desired-state/v1",
        "storage": [
            {"type": "nfs", "durable_id": "nas.example:/bulk", "class": "slow", "role": "bulk-data",
             "policy": {"retention": {}}, "state": "attached"},
            {"type": "local-dir", "durable_id": "/srv/bosun/backup", "class": "slow",
             "role": "vzdump-target", "policy": {"retention": {}}, "state": "attached"}
        ],
        "backup_policy": {"schedule": "daily", "retention": {"keep_last": 3}},
        "restore_test_policy": {"enabled": false, "interval_days": 7, "timeout_minutes": 30},
        "guests": [{
            "guest_id": GUEST,
            "hostname": "alpha",
            "customer": {"customer_id": "c1", "display_name": "C"},
            "resources": {"cores": 1, "memory_mib": 512, "rootfs_gib": 4},
            "power": "running",
            "golden": {
                "volid": "local:backup/vzdump-lxc-9000-2026_11_01-02_00_00.tar.zst",
                "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
            },
            "bulk_volumes": [{
                "name": "media", "size_gib": 2, "path": "/srv/media", "class": "slow",
                "backup": {"kind": "target", "target": "/srv/bosun/backup"}
            }]
        }]
    }))
    .expect("a desired state")
}

fn plan(state: &DesiredState, bulk: Vec<PlanBulkBackup>) -> DataPlan {
    DataPlan {
        schema: bosun_proto::data_plan::PLAN_SCHEMA.to_owned(),
        host_id: Uuid::parse_str("0b7f8c5e-1d2a-4c3b-9e8f-7a6b5c4d3e2f").unwrap(),
        serial: 1,
        issued_at: Timestamp::UNIX_EPOCH,
        targets: state
            .storage
            .iter()
            .map(|t| StorageTarget {
                credentials: None,
                ..t.clone()
            })
            .collect(),
        backup: PlanBackup {
            schedule: "daily".into(),
            retention: Retention::default(),
            target: None,
            further_tiers: Vec::new(),
            min_interval_seconds: 60,
            restore_test_days: None,
            verify_hours: None,
        },
        node_storages: Vec::new(),
        tunnel: None,
        bulk_backups: bulk,
        guest_share: None,
        guest_access: Vec::new(),
    }
}

fn entry(target: &str) -> PlanBulkBackup {
    PlanBulkBackup {
        guest_id: Uuid::parse_str(GUEST).unwrap(),
        volume: "media".into(),
        path: "/srv/media".into(),
        target: target.into(),
        schedule: "daily".into(),
        keep_last: 4,
    }
}

#[test]
fn only_what_the_signed_plan_names_is_planned_with_its_directory() {
    let state = desired();
    assert!(planned(&state, &plan(&state, Vec::new()), Path::new("/mnt/b")).is_empty());
    let signed = plan(&state, vec![entry("/srv/bosun/backup")]);
    signed.validate().expect("a valid plan");
    let all = planned(&state, &signed, Path::new("/mnt/b"));
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].storage_dir, "/srv/bosun/backup");
    assert_eq!(all[0].path, "/srv/media");
    assert_eq!(all[0].keep_last, 4);
    assert!(all[0].running);
}

#[test]
fn desired_state_cannot_stop_or_redirect_a_signed_archive() {
    let mut state = desired();
    let signed = plan(&state, vec![entry("/srv/bosun/backup")]);
    // The volume listed at another path: the plan's path is archived.
    state.guests[0].bulk_volumes[0].path = "/etc".into();
    let all = planned(&state, &signed, Path::new("/mnt/b"));
    assert_eq!(all[0].path, "/srv/media");
    // The volume dropped from the list: still archived, bounded by the largest volume.
    state.guests[0].bulk_volumes.clear();
    let all = planned(&state, &signed, Path::new("/mnt/b"));
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].size_gib, 65_536);
    // A guest desired state does not have is not entered.
    state.guests.clear();
    assert!(planned(&state, &signed, Path::new("/mnt/b")).is_empty());
}

#[test]
fn the_report_carries_the_signed_target_and_the_journal_rows() {
    let state = desired();
    let signed = plan(&state, vec![entry("/srv/bosun/backup")]);
    let snapshot = DesiredSnapshot {
        generation: 3,
        state: state.clone(),
        request_id: None,
        correlation_id: None,
        plan: Some(Arc::new(VerifiedPlan {
            plan: signed,
            signer: "SHA256:x".into(),
        })),
        refused: Vec::new(),
        unknown_kinds: Vec::new(),
    };
    let at: Timestamp = "2026-11-26T10:00:00Z".parse().unwrap();
    let row = LastBulk {
        guest_id: GUEST.into(),
        volume: "media".into(),
        archive: Some((
            BulkArchived {
                guest_id: GUEST.into(),
                volume: "media".into(),
                target: "/srv/bosun/backup".into(),
                name: "bulk-media-2026_11_26-10_00_00.tar".into(),
                size_bytes: 10_240,
                sha256: "ab".repeat(32),
            },
            at,
        )),
        error: Some(("tar\u{7} failed".into(), at)),
    };
    let reports = reports(Some(&snapshot), &[row], &BTreeSet::new());
    assert_eq!(reports.len(), 1);
    let r = &reports[0];
    assert_eq!(r.signed_target.as_deref(), Some("/srv/bosun/backup"));
    assert_eq!(r.last_archive.as_ref().unwrap().size_bytes, 10_240);
    assert_eq!(r.last_error.as_deref(), Some("tar  failed"));

    let unsigned = DesiredSnapshot {
        plan: None,
        ..snapshot
    };
    let r = &reports_of(&unsigned)[0];
    assert_eq!(r.signed_target, None);
    assert!(r.last_archive.is_none());
    assert_eq!(r.not_archived, None);
}

fn reports_of(snapshot: &DesiredSnapshot) -> Vec<BulkVolumeReport> {
    reports(Some(snapshot), &[], &BTreeSet::new())
}

#[test]
fn a_vms_volume_is_reported_not_archived_whatever_the_plan_says() {
    let state = desired();
    let snapshot = DesiredSnapshot {
        generation: 3,
        state: state.clone(),
        request_id: None,
        correlation_id: None,
        plan: Some(Arc::new(VerifiedPlan {
            plan: plan(&state, vec![entry("/srv/bosun/backup")]),
            signer: "SHA256:x".into(),
        })),
        refused: Vec::new(),
        unknown_kinds: Vec::new(),
    };
    let guest: Uuid = GUEST.parse().unwrap();
    let r = &reports(Some(&snapshot), &[], &[guest].into_iter().collect())[0];
    assert_eq!(r.not_archived, Some(BulkNotArchived::VmDisk));
    // The plan's entry is still shown: what the operator signed is not hidden.
    assert_eq!(r.signed_target.as_deref(), Some("/srv/bosun/backup"));
    let other = Uuid::from_u128(7);
    let r = &reports(Some(&snapshot), &[], &[other].into_iter().collect())[0];
    assert_eq!(r.not_archived, None);
}

#[test]
fn a_desired_target_other_than_the_plans_disagrees_and_none_never_does() {
    let target = BulkBackup::Target {
        target: "/srv/other".into(),
    };
    assert_eq!(
        disagreeing_target(&target, Some("/srv/bosun/backup")),
        Some("/srv/other")
    );
    assert_eq!(disagreeing_target(&target, Some("/srv/other")), None);
    assert_eq!(disagreeing_target(&target, None), None);
    let none = BulkBackup::None {
        acknowledged_by: "ops".into(),
    };
    assert_eq!(disagreeing_target(&none, Some("/srv/bosun/backup")), None);
}

#[test]
fn an_archive_may_be_its_volume_a_tenth_more_and_64_mib() {
    assert_eq!(max_bytes(1), (1 << 30) + (1 << 30) / 10 + (64 << 20));
    assert!(max_bytes(65_536) > 65_536u64 << 30);
}
