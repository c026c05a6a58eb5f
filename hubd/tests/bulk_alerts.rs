//! Bulk volumes' own backups at the hub (decision 0090): a volume whose desired decision asks
//! for a backup the signed plan never named opens `bulk_unprotected` once and resolves as
//! `bulk_protected` when the plan names a target; a failed attempt opens `bulk_backup_failed`
//! and a newer archive resolves it as `bulk_backup_recovered`, through full reports and the
//! live-only deltas a bulk volume's changes arrive in. A report whose bulk fields break the
//! protocol (an error too long or escaping, an archive name with a slash, a digest that is not
//! SHA-256) is refused with the field named, in a full report and in a delta, and nothing of
//! it is stored.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use bosun_hubd::store::dashboard::DashboardQuery;
use bosun_proto::admin::{AlertKind, OpenAlert};
use bosun_proto::desired::BulkBackup;
use bosun_proto::report::{
    BulkArchiveReport, BulkVolumeReport, GuestReport, GuestStatus, StateReport,
};
use reqwest::StatusCode;
use serde_json::json;
use uuid::Uuid;

use common::{TestHub, full, host_alerts, names, poll_with, report, send, send_delta};

const GUEST: Uuid = Uuid::from_u128(0x0190_f5a6_0000_7000_8000_0000_0000_00b7);

/// Report `seq` with guest `web1` and its bulk volume `media`, which desired state asks to be
/// archived to `usb1`; the plan signs `signed`.
fn with_media(seq: u64, signed: Option<&str>) -> StateReport {
    StateReport {
        seq,
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
        bulk_volumes: vec![BulkVolumeReport {
            guest_id: GUEST,
            name: "media".into(),
            path: "/srv/media".into(),
            size_gib: 100,
            class: None,
            target: Some("nas-media".into()),
            storage_id: Some("bosun-nas-media".into()),
            refused: None,
            backup: BulkBackup::Target {
                target: "usb1".into(),
            },
            signed_target: signed.map(str::to_owned),
            last_archive: None,
            last_error: None,
            not_archived: None,
        }],
        ..report()
    }
}

fn archive(time: &str) -> BulkArchiveReport {
    BulkArchiveReport {
        at: format!("2026-11-20T{}Z", time.replace('_', ":"))
            .parse()
            .unwrap(),
        target: "usb1".into(),
        name: format!("bulk-media-2026_11_20-{time}.tar"),
        size_bytes: 1 << 30,
        sha256: "ab".repeat(32),
    }
}

async fn open(hub: &TestHub, host: Uuid) -> Vec<OpenAlert> {
    hub.hub
        .store_call(move |store| {
            store.dashboard_facts(DashboardQuery {
                host_id: Some(host),
                alert_limit: 1,
                now_ms: i64::MAX,
            })
        })
        .await
        .unwrap()
        .open_alerts
}

fn kinds(alerts: &[(String, String)]) -> Vec<&str> {
    alerts.iter().map(|(k, _)| k.as_str()).collect()
}

#[tokio::test]
async fn an_unsigned_volume_alerts_until_the_plan_names_it_and_a_failure_until_an_archive() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-bulk").await;
    let unsigned = with_media(10, None);
    send(&hub, host, &key, &full(&unsigned)).await;
    // Repeated in a full report: still one alert.
    let again = with_media(11, None);
    send(&hub, host, &key, &full(&again)).await;
    let raised = host_alerts(&hub, host).await;
    assert_eq!(kinds(&raised), ["bulk_unprotected"], "{raised:?}");
    names(
        &raised[0].1,
        &["media", "web1", "pve-bulk", "usb1", "bulk_backups"],
    );
    let held = open(&hub, host).await;
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].kind, AlertKind::BulkUnprotected);
    assert_eq!(held[0].subject, format!("{GUEST}/media"));
    assert_eq!(held[0].subject_name.as_deref(), Some("web1/media"));

    // The plan names a target (a delta of the live part alone): protected.
    let signed = with_media(12, Some("usb1"));
    send_delta(&hub, host, &key, &again, &signed).await;
    assert_eq!(
        kinds(&host_alerts(&hub, host).await),
        ["bulk_unprotected", "bulk_protected"]
    );
    assert!(open(&hub, host).await.is_empty());

    // An archive, then a failed attempt: bulk_backup_failed, with the agent's words.
    let mut archived = with_media(13, Some("usb1"));
    archived.bulk_volumes[0].last_archive = Some(archive("03_00_00"));
    send_delta(&hub, host, &key, &signed, &archived).await;
    let mut failed = archived.clone();
    failed.seq = 14;
    failed.bulk_volumes[0].last_error = Some("tar exited with status 2".into());
    send_delta(&hub, host, &key, &archived, &failed).await;
    let raised = host_alerts(&hub, host).await;
    assert_eq!(
        kinds(&raised),
        ["bulk_unprotected", "bulk_protected", "bulk_backup_failed"]
    );
    names(
        &raised[2].1,
        &["media", "web1", "usb1", "tar exited with status 2"],
    );

    // A newer archive: recovered.
    let mut recovered = with_media(15, Some("usb1"));
    recovered.bulk_volumes[0].last_archive = Some(archive("04_00_00"));
    send_delta(&hub, host, &key, &failed, &recovered).await;
    let raised = host_alerts(&hub, host).await;
    assert_eq!(kinds(&raised)[3], "bulk_backup_recovered", "{raised:?}");
    names(&raised[3].1, &["bulk-media-2026_11_20-04_00_00.tar"]);
    assert!(open(&hub, host).await.is_empty());
}

#[tokio::test]
async fn bulk_fields_that_break_the_protocol_are_refused_and_nothing_is_stored() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-bulk-bad").await;
    let good = with_media(10, Some("usb1"));
    send(&hub, host, &key, &full(&good)).await;
    type Edit = fn(&mut BulkVolumeReport);
    let cases: [(Edit, &str); 5] = [
        (
            |v| v.last_error = Some("x".repeat(201)),
            "bulk_volumes[0].last_error",
        ),
        (
            |v| v.last_error = Some("tar\u{1b}[2J".into()),
            "bulk_volumes[0].last_error",
        ),
        (
            |v| {
                v.last_archive = Some(BulkArchiveReport {
                    name: "../../bulk-media-x.tar".into(),
                    ..archive("03_00_00")
                })
            },
            "bulk_volumes[0].last_archive.name",
        ),
        (
            |v| {
                v.last_archive = Some(BulkArchiveReport {
                    sha256: "AB".repeat(32),
                    ..archive("03_00_00")
                })
            },
            "bulk_volumes[0].last_archive.sha256",
        ),
        (
            |v| v.signed_target = Some("u".repeat(300)),
            "bulk_volumes[0].signed_target",
        ),
    ];
    for (i, (edit, field)) in cases.into_iter().enumerate() {
        let mut bad = with_media(11 + i as u64, Some("usb1"));
        edit(&mut bad.bulk_volumes[0]);
        let (status, answer) = poll_with(&hub, host, &key, &full(&bad)).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{field}: {answer}"
        );
        assert_eq!(answer["code"], "invalid_field", "{answer}");
        assert!(answer.to_string().contains(field), "{field}: {answer}");
        let delta = bosun_proto::delta::ReportDelta::between(&good, good.seq, &bad, bad.seq);
        let body = json!({ "schema": "bosun.poll/v1", "delta": delta });
        let (status, answer) = poll_with(&hub, host, &key, &body).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{field}: {answer}"
        );
        assert!(answer.to_string().contains(field), "{field}: {answer}");
    }
    let detail = hub
        .admin(
            reqwest::Method::GET,
            &format!("/v1/admin/hosts/{host}"),
            None,
        )
        .await
        .json::<serde_json::Value>()
        .await
        .unwrap();
    assert_eq!(detail["last_report"]["seq"], 10, "{detail}");
    assert_eq!(
        detail["last_report"]["bulk_volumes"][0].get("last_error"),
        None,
        "{detail}"
    );
    assert!(host_alerts(&hub, host).await.is_empty());
}
