//! A small live fleet for the dashboard tests, built only through the hub's own APIs:
//! `pve-alpha` polls with guests (one desired, one not), backups on two tiers (the offsite one
//! failing), a restore test, a lost USB target and a job with its result; `pve-beta` polled
//! once and then went silent until the dead-man's switch marked it overdue; `pve-gamma`
//! enrolled and never polled.

use std::time::Duration;

use bosun_hubd::clock::Clock as _;
use bosun_proto::desired::{GuestResources, Retention, StorageRole, StorageType};
use bosun_proto::report::{
    BackupReport, GuestReport, GuestStatus, RestoreTestOutcome, RestoreTestReport, StateReport,
    TargetReport, TargetStatus, TierReport,
};
use jiff::{SignedDuration, Timestamp};
use reqwest::{Method, StatusCode};
use serde_json::json;
use uuid::Uuid;

use crate::common::{TestHub, desired, full, report, send, signed_job};

/// The desired guest of `docs/proto/desired.json`.
pub const APP_GUEST: Uuid = Uuid::from_u128(0x0b6f4f2e_6c1a_4d6e_9a51_2f0c8d3e7a10);
/// A guest the agent reports that desired state does not list (a VM).
pub const STRAY_GUEST: Uuid = Uuid::from_u128(0x0190_f5a6_0000_7000_8000_0000_0000_00b2);

/// The fleet.
pub struct Fleet {
    pub hub: TestHub,
    pub alpha: Uuid,
    pub beta: Uuid,
    pub gamma: Uuid,
    pub job: Uuid,
}

fn ago(now: Timestamp, secs: i64) -> Timestamp {
    now - SignedDuration::from_secs(secs)
}

fn tier(n: u32, target: &str, storage_id: &str, schedule: &str) -> TierReport {
    TierReport {
        tier: n,
        target: target.into(),
        storage_id: storage_id.into(),
        schedule: schedule.into(),
        extra_schedule: None,
        desired: Retention::default(),
        applied: Retention::default(),
        held: None,
    }
}

fn target(id: &str, kind: StorageType, role: StorageRole, status: TargetStatus) -> TargetReport {
    TargetReport {
        durable_id: id.into(),
        status,
        free_gib: Some(412),
        kind: Some(kind),
        class: None,
        role: Some(role),
        storage_id: None,
        total_bytes: None,
        used_bytes: None,
        reason: None,
        detail: (status != TargetStatus::Mounted).then(|| "USB device gone".into()),
        since: None,
    }
}

/// `pve-alpha`'s report at `now`.
pub fn alpha_report(seq: u64, now: Timestamp) -> StateReport {
    StateReport {
        seq,
        guests: vec![
            GuestReport {
                guest_id: Some(APP_GUEST),
                vmid: 101,
                kind: bosun_proto::desired::GuestKind::Lxc,
                hostname: "acme-app".into(),
                status: GuestStatus::Running,
                resources: Some(GuestResources {
                    cores: 2,
                    memory_mib: 4096,
                    rootfs_gib: 32,
                }),
                controller_digest: Some(format!("sha256:{}", "ab".repeat(32))),
                controller_expected: None,
                addresses: Vec::new(),
            },
            GuestReport {
                guest_id: Some(STRAY_GUEST),
                vmid: 150,
                kind: bosun_proto::desired::GuestKind::Qemu,
                hostname: "old-staging".into(),
                status: GuestStatus::Orphaned,
                resources: None,
                controller_digest: None,
                controller_expected: None,
                addresses: Vec::new(),
            },
        ],
        storage: vec![
            target(
                "usb-backup-1",
                StorageType::Usb,
                StorageRole::VzdumpTarget,
                TargetStatus::Disconnected,
            ),
            target(
                "pbs-offsite",
                StorageType::Pbs,
                StorageRole::PbsOffsite,
                TargetStatus::Mounted,
            ),
        ],
        tiers: vec![
            tier(0, "usb-backup-1", "bosun-usb", "01:00"),
            tier(1, "pbs-offsite", "bosun-pbs", "daily"),
        ],
        last_backups: vec![
            BackupReport {
                guest_id: APP_GUEST,
                target: "usb-backup-1".into(),
                finished_at: ago(now, 3 * 3600),
                ok: true,
                size_bytes: Some(3 * 1024 * 1024 * 1024 / 2),
                tier: Some(0),
                ..BackupReport::default()
            },
            BackupReport {
                guest_id: APP_GUEST,
                target: "pbs-offsite".into(),
                finished_at: ago(now, 20 * 60),
                ok: false,
                tier: Some(1),
                error: Some("datastore full".into()),
                last_ok_at: Some(ago(now, 26 * 3600)),
                ..BackupReport::default()
            },
        ],
        restore_tests: vec![RestoreTestReport {
            guest_id: APP_GUEST,
            finished_at: ago(now, 2 * 3600),
            passed: true,
            duration_seconds: 41,
            detail: "booted, checks passed".into(),
            outcome: Some(RestoreTestOutcome::Passed),
            tier: Some("bosun-usb".into()),
            archive: None,
            last_passed_at: None,
        }],
        ..report()
    }
}

/// A poll carrying `report` whole from an agent that holds and applied generation 1.
fn converged(report: &StateReport) -> serde_json::Value {
    json!({
        "schema": "bosun.poll/v1", "known_generation": 1, "applied_generation": 1,
        "report": report,
    })
}

/// Builds the fleet on a fresh hub.
pub async fn fleet() -> Fleet {
    let hub = TestHub::start().await;
    let (alpha, alpha_key) = hub.enroll("pve-alpha").await;
    let (beta, beta_key) = hub.enroll("pve-beta").await;
    let (gamma, _) = hub.enroll("pve-gamma").await;

    let resp = hub
        .admin(
            Method::PUT,
            &format!("/v1/admin/hosts/{alpha}/desired"),
            Some(desired()),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let job = Uuid::new_v4();
    let queued = Uuid::new_v4();
    for id in [job, queued] {
        let resp = hub
            .admin(
                Method::POST,
                &format!("/v1/admin/hosts/{alpha}/jobs"),
                Some(signed_job(alpha, id)),
            )
            .await;
        assert_eq!(resp.status(), StatusCode::CREATED);
    }

    let now = hub.clock.now();
    // The agent acknowledges the first job and reports its result.
    let resp = hub.poll(alpha, &alpha_key, 1, &[job], 0).await;
    assert_eq!(resp.status(), StatusCode::OK);
    send(&hub, alpha, &alpha_key, &converged(&alpha_report(2, now))).await;
    send(&hub, beta, &beta_key, &full(&report())).await;
    let result = json!({
        "schema": "bosun.job-result/v1", "job_id": job, "outcome": "succeeded",
        "finished_at": now.to_string(), "detail": "backup done in 52s",
    });
    let resp = hub
        .request(
            Method::POST,
            &format!("/v1/hosts/{alpha}/jobs/{job}/result"),
            Some(&alpha_key),
            Some(result.to_string().into_bytes()),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);

    // Beta goes silent past its grace window (3 × 30 s) while alpha keeps polling.
    hub.clock.advance(Duration::from_secs(200));
    let later = hub.clock.now();
    send(&hub, alpha, &alpha_key, &converged(&alpha_report(3, later))).await;
    let raised = hub.hub.sweep_once().await.unwrap();
    assert!(
        raised
            .iter()
            .any(|a| a.host_id == Some(beta) && a.kind.as_str() == "host_overdue"),
        "{raised:?}"
    );
    Fleet {
        hub,
        alpha,
        beta,
        gamma,
        job,
    }
}
