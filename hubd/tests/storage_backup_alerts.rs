//! Storage and backup alerts from reports: a lost target opens `storage_lost` and recovers as
//! `storage_recovered`, a failed backup opens `backup_failed` and a newer good one resolves
//! it, a full report and a delta alike; backups turn overdue on the hub's clock in the sweep;
//! the last good backup the hub remembers never moves backwards. Each opening and each
//! recovery is an alert of `GET /v1/admin/alerts` and the webhook; a condition cleared for
//! another reason is an event only.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use bosun_hubd::clock::Clock as _;
use bosun_proto::desired::Retention;
use bosun_proto::report::{
    BackupReport, GuestReport, GuestStatus, StateReport, TargetReport, TargetStatus, TierReport,
};

use common::{
    Hook, TestHub, full, host_alerts as alerts, host_events, names, report, send, send_delta,
};
use jiff::Timestamp;
use reqwest::Method;
use serde_json::Value;
use uuid::Uuid;

const GUEST: Uuid = Uuid::from_u128(0x0190_f5a6_0000_7000_8000_0000_0000_000a);

async fn events(hub: &TestHub, host: Uuid) -> Vec<(String, Value)> {
    host_events(hub, host).await
}

async fn kinds(hub: &TestHub, host: Uuid, of: &[&str]) -> Vec<String> {
    events(hub, host)
        .await
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| of.contains(&k.as_str()))
        .collect()
}

fn alert_kinds(alerts: &[(String, String)]) -> Vec<&str> {
    alerts.iter().map(|(k, _)| k.as_str()).collect()
}

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn base(seq: u64) -> StateReport {
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
        ..report()
    }
}

fn usb(status: TargetStatus) -> TargetReport {
    TargetReport {
        durable_id: "5e2c1c7a-usb".into(),
        status,
        free_gib: Some(100),
        kind: None,
        class: None,
        role: None,
        storage_id: Some("bosun-usb".into()),
        total_bytes: None,
        used_bytes: None,
        reason: None,
        detail: (status != TargetStatus::Mounted).then(|| "device gone".into()),
        since: None,
    }
}

fn backup(ok: bool, finished: &str, last_ok: Option<&str>) -> BackupReport {
    BackupReport {
        guest_id: GUEST,
        target: "pbs-offsite".into(),
        finished_at: at(finished),
        ok,
        tier: Some(1),
        error: (!ok).then(|| "datastore full".into()),
        last_ok_at: last_ok.map(at),
        ..BackupReport::default()
    }
}

fn daily_tier() -> TierReport {
    TierReport {
        tier: 1,
        target: "pbs-offsite".into(),
        storage_id: "bosun-pbs".into(),
        schedule: "daily".into(),
        extra_schedule: None,
        desired: Retention::default(),
        applied: Retention::default(),
        held: None,
    }
}

const STORAGE: &[&str] = &["storage_lost", "storage_recovered", "storage_lost_cleared"];
const BACKUP: &[&str] = &[
    "backup_failed",
    "backup_overdue",
    "backup_recovered",
    "backup_failed_cleared",
];

#[tokio::test]
async fn a_lost_target_alerts_once_and_recovers_from_full_reports_and_deltas() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-storage").await;
    let mut first = base(10);
    first.storage = vec![usb(TargetStatus::Mounted)];
    send(&hub, host, &key, &full(&first)).await;
    assert!(kinds(&hub, host, STORAGE).await.is_empty());

    // Lost in a delta.
    let mut lost = base(11);
    lost.storage = vec![usb(TargetStatus::Disconnected)];
    send_delta(&hub, host, &key, &first, &lost).await;
    // Lost another way, and repeated in a full report: still one alert.
    let mut unreachable = base(12);
    unreachable.storage = vec![usb(TargetStatus::Unreachable)];
    send_delta(&hub, host, &key, &lost, &unreachable).await;
    send(&hub, host, &key, &full(&unreachable)).await;
    let history = events(&hub, host).await;
    let raised: Vec<&Value> = history
        .iter()
        .filter(|(k, _)| k == "storage_lost")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(raised.len(), 1, "{history:?}");
    assert_eq!(raised[0]["subject"], "5e2c1c7a-usb");
    assert_eq!(raised[0]["detail"]["status"], "disconnected");
    assert!(
        raised[0]["message"]
            .as_str()
            .unwrap()
            .contains("disconnected: device gone")
    );
    let raised = alerts(&hub, host).await;
    assert_eq!(alert_kinds(&raised), ["storage_lost"], "{raised:?}");
    names(
        &raised[0].1,
        &["5e2c1c7a-usb", "pve-storage", "disconnected: device gone"],
    );

    // Mounted again in a full report: recovered.
    let mut back = base(13);
    back.storage = vec![usb(TargetStatus::Mounted)];
    send(&hub, host, &key, &full(&back)).await;
    assert_eq!(
        kinds(&hub, host, STORAGE).await,
        ["storage_lost", "storage_recovered"]
    );
    let recovered = alerts(&hub, host).await;
    assert_eq!(
        alert_kinds(&recovered),
        ["storage_lost", "storage_recovered"]
    );
    names(
        &recovered[1].1,
        &["5e2c1c7a-usb", "pve-storage", "mounted again"],
    );

    // Lost in a full report, then detached on purpose in a delta: closed, not recovered.
    let mut error = base(14);
    error.storage = vec![usb(TargetStatus::Error)];
    send(&hub, host, &key, &full(&error)).await;
    let mut detached = base(15);
    detached.storage = vec![usb(TargetStatus::Detached)];
    send_delta(&hub, host, &key, &error, &detached).await;
    assert_eq!(
        kinds(&hub, host, STORAGE).await,
        [
            "storage_lost",
            "storage_recovered",
            "storage_lost",
            "storage_lost_cleared"
        ]
    );
    // The detach is no recovery: the second loss is the last alert.
    assert_eq!(
        alert_kinds(&alerts(&hub, host).await),
        ["storage_lost", "storage_recovered", "storage_lost"]
    );
    let metrics = hub.metrics().await;
    assert!(
        metrics.contains("kind=\"storage_lost\"} 2")
            && metrics.contains("kind=\"storage_recovered\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_failed_backup_alerts_and_a_newer_good_one_resolves_it() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-backup").await;
    let mut ok = base(20);
    ok.last_backups = vec![backup(true, "2026-11-20T02:00:00Z", None)];
    send(&hub, host, &key, &full(&ok)).await;

    let mut failed = base(21);
    failed.last_backups = vec![backup(
        false,
        "2026-11-21T02:00:00Z",
        Some("2026-11-20T02:00:00Z"),
    )];
    send_delta(&hub, host, &key, &ok, &failed).await;
    let history = events(&hub, host).await;
    let (_, detail) = history.iter().find(|(k, _)| k == "backup_failed").unwrap();
    assert_eq!(detail["detail"]["error"], "datastore full");
    assert_eq!(detail["detail"]["tier"], 1);
    let raised = alerts(&hub, host).await;
    assert_eq!(alert_kinds(&raised), ["backup_failed"], "{raised:?}");
    names(
        &raised[0].1,
        &[
            "pve-backup",
            "web1",
            &GUEST.to_string(),
            "pbs-offsite",
            "tier 1",
            "datastore full",
        ],
    );

    // The same failure in a full report opens nothing new; a newer good one resolves it.
    send(&hub, host, &key, &full(&failed)).await;
    let mut good = base(22);
    good.last_backups = vec![backup(true, "2026-11-21T03:00:00Z", None)];
    send_delta(&hub, host, &key, &failed, &good).await;
    assert_eq!(
        kinds(&hub, host, BACKUP).await,
        ["backup_failed", "backup_recovered"]
    );
    let recovered = alerts(&hub, host).await;
    assert_eq!(
        alert_kinds(&recovered),
        ["backup_failed", "backup_recovered"]
    );
    names(
        &recovered[1].1,
        &[
            "pve-backup",
            "web1",
            &GUEST.to_string(),
            "pbs-offsite",
            "tier 1",
        ],
    );
    // A failure reported whole from the start opens one too.
    let mut again = base(23);
    again.last_backups = vec![backup(
        false,
        "2026-11-22T02:00:00Z",
        Some("2026-11-21T03:00:00Z"),
    )];
    send(&hub, host, &key, &full(&again)).await;
    assert_eq!(
        kinds(&hub, host, BACKUP).await,
        ["backup_failed", "backup_recovered", "backup_failed"]
    );
    // The failed backup gone from the report clears its alert without a recovery.
    let gone = base(24);
    send(&hub, host, &key, &full(&gone)).await;
    assert_eq!(
        kinds(&hub, host, BACKUP).await,
        [
            "backup_failed",
            "backup_recovered",
            "backup_failed",
            "backup_failed_cleared"
        ]
    );
    assert_eq!(
        alert_kinds(&alerts(&hub, host).await),
        ["backup_failed", "backup_recovered", "backup_failed"]
    );
}

#[tokio::test]
async fn a_backup_turns_overdue_on_the_hub_clock_and_a_good_one_resolves_it() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-overdue").await;
    // The last good backup is 30 hours old by the hub's clock; the tier runs daily, so it is
    // overdue past 48 hours.
    let now = hub.clock.now();
    let hours_ago = |h: i64| now - jiff::SignedDuration::from_hours(h);
    let mut r = base(30);
    r.tiers = vec![daily_tier()];
    r.last_backups = vec![BackupReport {
        finished_at: hours_ago(30),
        ..backup(true, "2026-01-01T00:00:00Z", None)
    }];
    send(&hub, host, &key, &full(&r)).await;
    assert!(hub.hub.sweep_backups_once().await.unwrap().is_empty());
    hub.clock.advance(std::time::Duration::from_secs(19 * 3600));
    let changes = hub.hub.sweep_backups_once().await.unwrap();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(changes[0].opened);
    assert_eq!(changes[0].event, "backup_overdue");
    assert!(
        changes[0].message.contains("web1"),
        "{}",
        changes[0].message
    );
    let raised = alerts(&hub, host).await;
    assert_eq!(alert_kinds(&raised), ["backup_overdue"], "{raised:?}");
    assert_eq!(
        changes[0].alert.as_ref().map(|a| a.message.as_str()),
        Some(raised[0].1.as_str())
    );
    names(
        &raised[0].1,
        &[
            "pve-overdue",
            "web1",
            &GUEST.to_string(),
            "pbs-offsite",
            "tier 1",
        ],
    );
    // Swept again: still the one alert.
    assert!(hub.hub.sweep_backups_once().await.unwrap().is_empty());
    assert_eq!(alerts(&hub, host).await.len(), 1);

    // A good backup arrives in a delta: resolved at once.
    let mut caught_up = base(31);
    caught_up.tiers = r.tiers.clone();
    caught_up.last_backups = vec![BackupReport {
        finished_at: hub.clock.now(),
        ..r.last_backups[0].clone()
    }];
    send_delta(&hub, host, &key, &r, &caught_up).await;
    assert_eq!(
        kinds(&hub, host, BACKUP).await,
        ["backup_overdue", "backup_recovered"]
    );
    assert!(hub.hub.sweep_backups_once().await.unwrap().is_empty());
    let recovered = alerts(&hub, host).await;
    assert_eq!(
        alert_kinds(&recovered),
        ["backup_overdue", "backup_recovered"]
    );
    names(
        &recovered[1].1,
        &[
            "pve-overdue",
            "web1",
            &GUEST.to_string(),
            "pbs-offsite",
            "tier 1",
        ],
    );
}

#[tokio::test]
async fn storage_and_backup_alerts_reach_the_webhook_and_a_clearing_does_not() {
    let (hook, url) = Hook::start().await;
    let hub = TestHub::start_with(|config| {
        config.webhook = Some(bosun_hubd::alerts::WebhookConfig::new(url));
    })
    .await;
    let (host, key) = hub.enroll("pve-hooked").await;

    let mut lost = base(50);
    lost.storage = vec![usb(TargetStatus::Disconnected)];
    send(&hub, host, &key, &full(&lost)).await;
    let mut back = base(51);
    back.storage = vec![usb(TargetStatus::Mounted)];
    back.last_backups = vec![backup(false, "2026-11-21T02:00:00Z", None)];
    send_delta(&hub, host, &key, &lost, &back).await;
    // The failed backup leaves the report (cleared, no alert), then the target is lost again:
    // the webhook's next body is that loss.
    let mut gone = base(52);
    gone.storage = vec![usb(TargetStatus::Mounted)];
    send(&hub, host, &key, &full(&gone)).await;
    let mut again = base(53);
    again.storage = vec![usb(TargetStatus::Unreachable)];
    send(&hub, host, &key, &full(&again)).await;
    let bodies = hook.received(4).await;
    let kinds: Vec<&str> = bodies.iter().map(|b| b["kind"].as_str().unwrap()).collect();
    // Within one poll what opens is recorded before what resolves.
    assert_eq!(
        kinds,
        [
            "storage_lost",
            "backup_failed",
            "storage_recovered",
            "storage_lost"
        ],
        "{bodies:?}"
    );
    assert!(
        bodies
            .iter()
            .all(|b| b["schema"] == "bosun.alert/v1" && b["host_id"] == host.to_string()),
        "{bodies:?}"
    );
    names(
        bodies[1]["message"].as_str().unwrap(),
        &["pve-hooked", "web1", "pbs-offsite", "tier 1"],
    );
    // The webhook carries exactly what the alert list holds.
    let listed = alerts(&hub, host).await;
    let hooked: Vec<(String, String)> = bodies
        .iter()
        .map(|b| {
            (
                b["kind"].as_str().unwrap().to_owned(),
                b["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(listed, hooked);
    assert_eq!(
        kinds_of(&hub, host).await,
        [
            "storage_lost",
            "backup_failed",
            "storage_recovered",
            "backup_failed_cleared",
            "storage_lost"
        ]
    );
}

async fn kinds_of(hub: &TestHub, host: Uuid) -> Vec<String> {
    let mut of = STORAGE.to_vec();
    of.extend_from_slice(BACKUP);
    kinds(hub, host, &of).await
}

#[tokio::test]
async fn the_remembered_last_good_backup_never_moves_backwards() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-lastgood").await;
    let mut good = base(40);
    good.last_backups = vec![backup(true, "2026-11-21T02:00:00Z", None)];
    send(&hub, host, &key, &full(&good)).await;
    // An agent that lost its journal reports an older good backup, then a failure with no
    // last good at all.
    let mut older = base(41);
    older.last_backups = vec![backup(true, "2026-11-19T02:00:00Z", None)];
    send(&hub, host, &key, &full(&older)).await;
    let mut failed = base(42);
    failed.last_backups = vec![backup(false, "2026-11-22T02:00:00Z", None)];
    send_delta(&hub, host, &key, &older, &failed).await;
    let detail: Value = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}"), None)
        .await
        .json()
        .await
        .unwrap();
    let shown = &detail["last_report"]["last_backups"][0];
    assert_eq!(shown["ok"], false);
    assert_eq!(
        shown["last_ok_at"]
            .as_str()
            .unwrap()
            .parse::<Timestamp>()
            .unwrap(),
        at("2026-11-21T02:00:00Z"),
        "{shown}"
    );
    // And it survives a restart.
    let (dir, admin) = hub.stop().await;
    let config = common::config(&dir);
    let hub = TestHub::start_in(dir, admin, config).await;
    let detail: Value = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}"), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        detail["last_report"]["last_backups"][0]["last_ok_at"],
        shown["last_ok_at"]
    );
}
