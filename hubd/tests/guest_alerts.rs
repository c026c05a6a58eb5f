//! Per-guest alerts from polls: a guest reported `broken`, `orphaned` or `lost` opens one alert
//! (`guest_broken`, `guest_orphaned`, `guest_lost`) however many reports repeat it, full or
//! delta; the report showing it running again closes it as `guest_recovered`; a guest gone
//! from the report closes it without a recovery. Read back through `GET /v1/admin/alerts`,
//! `GET /v1/admin/events`, the dashboard's open alerts and the webhook. The suite runs on
//! SQLite, and on PostgreSQL under `scripts/with-postgres`.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use bosun_hubd::store::dashboard::{DashboardQuery, OpenAlert};
use bosun_proto::admin::AlertKind;
use bosun_proto::report::{GuestReport, GuestStatus, StateReport};
use uuid::Uuid;

use common::{
    Hook, TestHub, full, host_alerts as alerts, host_events, names, report, send, send_delta,
};

const WEB: Uuid = Uuid::from_u128(0x0190_f5a6_0000_7000_8000_0000_0000_0c01);
const DB: Uuid = Uuid::from_u128(0x0190_f5a6_0000_7000_8000_0000_0000_0c02);

fn guest(guest_id: Option<Uuid>, vmid: u32, hostname: &str, status: GuestStatus) -> GuestReport {
    GuestReport {
        guest_id,
        vmid,
        kind: bosun_proto::desired::GuestKind::Lxc,
        hostname: hostname.into(),
        status,
        resources: None,
        controller_digest: None,
        controller_expected: None,
        addresses: Vec::new(),
    }
}

/// A report numbered `seq` with the guest `web` (vmid 101) in `status` beside a running `db`.
fn with_web(seq: u64, status: GuestStatus) -> StateReport {
    StateReport {
        seq,
        guests: vec![
            guest(Some(WEB), 101, "web", status),
            guest(Some(DB), 102, "db", GuestStatus::Running),
        ],
        ..report()
    }
}

/// The host's alerts of the guest kinds, as (kind, message).
async fn guest_alerts(hub: &TestHub, host: Uuid) -> Vec<(String, String)> {
    alerts(hub, host)
        .await
        .into_iter()
        .filter(|(k, _)| k.starts_with("guest_"))
        .collect()
}

fn kinds(alerts: &[(String, String)]) -> Vec<&str> {
    alerts.iter().map(|(k, _)| k.as_str()).collect()
}

/// The host's events of the guest kinds, oldest first.
async fn guest_events(hub: &TestHub, host: Uuid) -> Vec<String> {
    host_events(hub, host)
        .await
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with("guest_"))
        .collect()
}

/// The alerts the store holds open for `host`.
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

#[tokio::test]
async fn a_broken_orphaned_or_lost_guest_raises_one_alert_until_it_recovers() {
    let hub = TestHub::start().await;
    let cases = [
        (
            GuestStatus::Broken,
            "guest_broken",
            AlertKind::GuestBroken,
            "is broken",
        ),
        (
            GuestStatus::Orphaned,
            "guest_orphaned",
            AlertKind::GuestOrphaned,
            "is orphaned",
        ),
        (
            GuestStatus::Lost,
            "guest_lost",
            AlertKind::GuestLost,
            "is lost",
        ),
    ];
    for (i, (status, kind, alert_kind, says)) in cases.into_iter().enumerate() {
        let (host, key) = hub.enroll(&format!("pve-guest-{i}")).await;
        let running = with_web(10, GuestStatus::Running);
        send(&hub, host, &key, &full(&running)).await;
        assert!(guest_alerts(&hub, host).await.is_empty());

        // Shown in trouble by a delta, then by a full report, then by a delta again: one alert.
        let troubled = with_web(11, status);
        send_delta(&hub, host, &key, &running, &troubled).await;
        let again = with_web(12, status);
        send(&hub, host, &key, &full(&again)).await;
        let mut still = with_web(13, status);
        still.guests[1].status = GuestStatus::Stopped;
        send_delta(&hub, host, &key, &again, &still).await;
        let raised = guest_alerts(&hub, host).await;
        assert_eq!(kinds(&raised), [kind], "{status:?}: {raised:?}");
        names(
            &raised[0].1,
            &[
                "web",
                &WEB.to_string(),
                "vmid 101",
                &format!("pve-guest-{i}"),
                says,
            ],
        );
        let held = open(&hub, host).await;
        assert_eq!(held.len(), 1, "{status:?}: {held:?}");
        assert_eq!(held[0].kind, alert_kind);
        assert_eq!(held[0].subject, WEB.to_string());
        assert_eq!(
            held[0].subject_name.as_deref(),
            Some("web"),
            "named from the report"
        );

        // Running again: closed, once, as a recovery.
        let back = with_web(14, GuestStatus::Running);
        send_delta(&hub, host, &key, &still, &back).await;
        let back_again = with_web(15, GuestStatus::Running);
        send(&hub, host, &key, &full(&back_again)).await;
        let raised = guest_alerts(&hub, host).await;
        assert_eq!(
            kinds(&raised),
            [kind, "guest_recovered"],
            "{status:?}: {raised:?}"
        );
        names(&raised[1].1, &["web", "running again", kind]);
        assert!(open(&hub, host).await.is_empty(), "{status:?}");
        assert_eq!(guest_events(&hub, host).await, [kind, "guest_recovered"]);

        // In trouble again: a new alert.
        let relapse = with_web(16, status);
        send_delta(&hub, host, &key, &back_again, &relapse).await;
        assert_eq!(
            kinds(&guest_alerts(&hub, host).await),
            [kind, "guest_recovered", kind],
            "{status:?}"
        );
        assert_eq!(open(&hub, host).await.len(), 1, "{status:?}");
    }
}

#[tokio::test]
async fn a_troubled_guest_that_leaves_the_report_is_cleared_without_a_recovery() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-decommission").await;
    // A container the agent does not manage, left alone as an orphan: alerted by its vmid.
    let mut orphan = with_web(20, GuestStatus::Broken);
    orphan
        .guests
        .push(guest(None, 230, "legacy", GuestStatus::Orphaned));
    send(&hub, host, &key, &full(&orphan)).await;
    let raised = guest_alerts(&hub, host).await;
    assert_eq!(
        kinds(&raised),
        ["guest_broken", "guest_orphaned"],
        "{raised:?}"
    );
    names(
        &raised[1].1,
        &["legacy (vmid 230)", "pve-decommission", "is orphaned"],
    );
    let mut subjects: Vec<String> = open(&hub, host)
        .await
        .into_iter()
        .map(|o| o.subject)
        .collect();
    subjects.sort();
    assert_eq!(subjects, [WEB.to_string(), "vmid:230".to_owned()]);

    // The orphan is decommissioned (gone from the report), the broken guest is lost now.
    let gone = with_web(21, GuestStatus::Lost);
    send_delta(&hub, host, &key, &orphan, &gone).await;
    assert_eq!(
        kinds(&guest_alerts(&hub, host).await),
        ["guest_broken", "guest_orphaned", "guest_lost"]
    );
    let mut cleared = guest_events(&hub, host).await;
    cleared.sort();
    assert_eq!(
        cleared,
        [
            "guest_broken",
            "guest_broken_cleared",
            "guest_lost",
            "guest_orphaned",
            "guest_orphaned_cleared"
        ]
    );
    let held = open(&hub, host).await;
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].kind, AlertKind::GuestLost);
}

#[tokio::test]
async fn guest_alerts_reach_the_webhook() {
    let (hook, url) = Hook::start().await;
    let hub = TestHub::start_with(|config| {
        config.webhook = Some(bosun_hubd::alerts::WebhookConfig::new(url));
    })
    .await;
    let (host, key) = hub.enroll("pve-hooked-guests").await;
    let broken = with_web(30, GuestStatus::Broken);
    send(&hub, host, &key, &full(&broken)).await;
    send(&hub, host, &key, &full(&with_web(31, GuestStatus::Broken))).await;
    let running = with_web(32, GuestStatus::Running);
    send(&hub, host, &key, &full(&running)).await;
    let bodies = hook.received(2).await;
    let kinds: Vec<&str> = bodies.iter().map(|b| b["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["guest_broken", "guest_recovered"], "{bodies:?}");
    assert!(
        bodies
            .iter()
            .all(|b| b["schema"] == "bosun.alert/v1" && b["host_id"] == host.to_string()),
        "{bodies:?}"
    );
}
