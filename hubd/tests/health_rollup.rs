//! One health roll-up everywhere: on one state — two acknowledged critical alerts, a silenced
//! warning, an overdue host, a failing check — `GET /v1/admin/hosts`, the host detail,
//! `bosunctl status`, `status --check`, `hosts list`, the dashboard's fleet page and `/metrics`
//! all say what `bosun_hubd::health::roll_up` says.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::time::Duration;

use bosun_proto::admin::{HostDetail, OpenAlert};
use bosun_proto::rollup::{HealthLevel, HostRollup};
use reqwest::header;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use common::{TestHub, full, report, send};

const LOST: &str = "0190f5a6-0000-7000-8000-0000000000a1";
const BROKEN: &str = "0190f5a6-0000-7000-8000-0000000000a2";
const ORPHAN: &str = "0190f5a6-0000-7000-8000-0000000000b1";
const FAILING: &str = "0190f5a6-0000-7000-8000-0000000000c1";

/// The common report with `edit` applied to its JSON, as a poll.
fn poll(edit: impl FnOnce(&mut Value)) -> Value {
    let mut value = serde_json::to_value(report()).unwrap();
    edit(&mut value);
    full(&serde_json::from_value(value).unwrap())
}

fn guest(id: &str, vmid: u32, name: &str, status: &str) -> Value {
    json!({ "guest_id": id, "vmid": vmid, "hostname": name, "status": status })
}

async fn admin_json(hub: &TestHub, method: Method, path: &str, body: Option<Value>) -> Value {
    let resp = hub.admin(method, path, body).await;
    assert!(resp.status().is_success(), "{path}: {}", resp.status());
    resp.json().await.unwrap()
}

/// The fleet page, logged in with the admin token.
async fn fleet_page(hub: &TestHub) -> String {
    let client = reqwest::Client::builder()
        .use_preconfigured_tls(
            bosun_hubd::tls::pinned_client_config(&hub.hub.fingerprint()).unwrap(),
        )
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let resp = client
        .post(format!("{}/ui/login", hub.url))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::ORIGIN, &hub.url)
        .body(format!("token={}", hub.admin.replace('+', "%2B")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let cookie = resp.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    client
        .get(format!("{}/ui/", hub.url))
        .header(header::COOKIE, cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The level the fleet page's state badge shows for `host`.
fn dashboard_level(page: &str, host: Uuid) -> HealthLevel {
    let row = page
        .split(&format!("<tr data-host=\"{host}\">"))
        .nth(1)
        .unwrap_or_else(|| panic!("a row for {host}: {page}"));
    let cell = row.split("data-label=\"State\">").nth(1).unwrap();
    let cell = &cell[..cell.find("</td>").unwrap()];
    if cell.contains("badge danger") {
        HealthLevel::Critical
    } else if cell.contains("badge warn") {
        HealthLevel::Warning
    } else {
        assert!(cell.contains("badge ok"), "{cell}");
        HealthLevel::Ok
    }
}

/// `bosun_hub_host_health{host="…"}` in the scrape.
fn metric_level(metrics: &str, host: Uuid) -> i64 {
    let prefix = format!("bosun_hub_host_health{{host=\"{host}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no health series for {host}: {metrics}"))
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn every_view_shows_the_one_roll_up() {
    let hub = TestHub::start().await;
    let (acked, acked_key) = hub.enroll("pve-acked").await;
    let (quiet, quiet_key) = hub.enroll("pve-quiet").await;
    let (silent, silent_key) = hub.enroll("pve-silent").await;
    let (failing, failing_key) = hub.enroll("pve-failing").await;
    let (calm, calm_key) = hub.enroll("pve-calm").await;
    let acked_report = poll(|r| {
        r["guests"] = json!([
            guest(LOST, 101, "web", "lost"),
            guest(BROKEN, 102, "db", "broken")
        ]);
    });
    let quiet_report = poll(|r| r["guests"] = json!([guest(ORPHAN, 201, "mine", "orphaned")]));
    let failing_report = poll(|r| {
        r["guests"] = json!([guest(FAILING, 301, "shop", "running")]);
        r["last_backups"] = json!([{ "guest_id": FAILING, "target": "local",
            "finished_at": "2026-11-21T00:50:00Z", "ok": false, "error": "vzdump failed" }]);
    });
    let calm_report = poll(|_| {});
    send(&hub, acked, &acked_key, &acked_report).await;
    send(&hub, quiet, &quiet_key, &quiet_report).await;
    send(&hub, silent, &silent_key, &calm_report).await;
    send(&hub, failing, &failing_key, &failing_report).await;
    send(&hub, calm, &calm_key, &calm_report).await;
    // pve-silent falls silent past its grace window; the others poll on.
    hub.clock.advance(Duration::from_secs(200));
    send(&hub, acked, &acked_key, &acked_report).await;
    send(&hub, quiet, &quiet_key, &quiet_report).await;
    send(&hub, failing, &failing_key, &failing_report).await;
    send(&hub, calm, &calm_key, &calm_report).await;
    hub.hub.sweep_once().await.unwrap();
    // Both criticals of pve-acked acknowledged; pve-quiet's orphan silenced.
    for (kind, subject) in [("guest_lost", LOST), ("guest_broken", BROKEN)] {
        admin_json(
            &hub,
            Method::POST,
            "/v1/admin/alerts/ack",
            Some(json!({"host_id": acked, "kind": kind, "subject": subject, "note": "on it"})),
        )
        .await;
    }
    admin_json(
        &hub,
        Method::POST,
        "/v1/admin/alerts/silences",
        Some(
            json!({"host_id": quiet, "kind": "guest_orphaned", "duration_seconds": 3600,
                    "reason": "the operator's own container"}),
        ),
    )
    .await;

    // The one function, on what the admin API serves.
    let open: Vec<OpenAlert> =
        serde_json::from_value(admin_json(&hub, Method::GET, "/v1/admin/alerts/open", None).await)
            .unwrap();
    let listed = admin_json(&hub, Method::GET, "/v1/admin/hosts", None).await;
    let mut details: Vec<HostDetail> = Vec::new();
    for host in [acked, quiet, silent, failing, calm] {
        let value = admin_json(&hub, Method::GET, &format!("/v1/admin/hosts/{host}"), None).await;
        details.push(serde_json::from_value(value).unwrap());
    }
    let expected: Vec<HostRollup> = details
        .iter()
        .map(|d| bosun_hubd::health::roll_up(d, &open))
        .collect();
    let levels: Vec<HealthLevel> = expected.iter().map(|r| r.level).collect();
    assert_eq!(
        levels,
        [
            HealthLevel::Warning,
            HealthLevel::Ok,
            HealthLevel::Critical,
            HealthLevel::Critical,
            HealthLevel::Ok
        ],
        "{expected:#?}"
    );
    assert!(
        expected[0].reasons.iter().all(|r| r.acknowledged),
        "{expected:#?}"
    );
    assert!(
        expected[1].reasons.iter().any(|r| r.silenced),
        "{expected:#?}"
    );

    let page = fleet_page(&hub).await;
    let metrics = hub.metrics().await;
    for (detail, rollup) in details.iter().zip(&expected) {
        let id = detail.summary.host_id;
        // The admin API: the list and the detail.
        let summary = listed
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["host_id"] == json!(id))
            .unwrap();
        assert_eq!(summary["health"], serde_json::to_value(rollup).unwrap());
        assert_eq!(detail.summary.health.as_ref(), Some(rollup));
        // The dashboard and /metrics.
        assert_eq!(
            dashboard_level(&page, id),
            rollup.level,
            "{}",
            detail.summary.hostname
        );
        assert_eq!(
            metric_level(&metrics, id),
            i64::from(rollup.level.plugin_exit())
        );
        // bosunctl: hosts list's HEALTH column and status's health line.
        let summary: bosun_proto::admin::HostSummary =
            serde_json::from_value(summary.clone()).unwrap();
        assert_eq!(
            bosunctl::hosts::summary_row(&summary, 36)[4],
            rollup.level.as_str()
        );
        assert_eq!(bosunctl::status::health::summary(detail), rollup.summary());
    }
    assert!(page.contains("<dt>Critical</dt><dd>2</dd>"), "{page}");
    assert!(page.contains("<dt>Warning</dt><dd>1</dd>"), "{page}");

    // status --check: the worst level, each counted host named, the acknowledged and
    // silenced ones not paged for.
    let fleet = bosunctl::status::FleetStatus {
        hosts: details.clone(),
        alerts: Vec::new(),
        open_alerts: open.clone(),
    };
    let (exit, line) = bosunctl::status::check_line(&fleet);
    assert_eq!(exit, 2, "{line}");
    assert!(
        line.starts_with("BOSUN CRITICAL - pve-acked: guest_")
            && line.contains("pve-silent: overdue (silent)")
            && line.contains("pve-failing: backup_failed shop@local")
            && !line.contains("pve-quiet")
            && line.ends_with("| hosts=5 critical=2 warning=1"),
        "{line}"
    );
    let rendered = bosunctl::status::render_at(&fleet, jiff::Timestamp::UNIX_EPOCH);
    for rollup in &expected {
        let wanted = format!("  health            {}", rollup.summary());
        assert!(rendered.contains(&wanted), "{wanted}: {rendered:#?}");
    }

    // Acknowledging the last critical conditions turns the check into a WARNING.
    let failing_subject = format!("{FAILING}@local");
    for (host, kind, subject) in [
        (failing, "backup_failed", failing_subject.as_str()),
        (silent, "host_overdue", &*silent.to_string()),
    ] {
        admin_json(
            &hub,
            Method::POST,
            "/v1/admin/alerts/ack",
            Some(json!({"host_id": host, "kind": kind, "subject": subject, "note": "on it"})),
        )
        .await;
    }
    let mut details = Vec::new();
    for host in [acked, quiet, silent, failing, calm] {
        let value = admin_json(&hub, Method::GET, &format!("/v1/admin/hosts/{host}"), None).await;
        details.push(serde_json::from_value::<HostDetail>(value).unwrap());
    }
    let (exit, line) = bosunctl::status::check_line(&bosunctl::status::FleetStatus {
        hosts: details,
        alerts: Vec::new(),
        open_alerts: Vec::new(),
    });
    assert_eq!(exit, 1, "{line}");
    assert!(line.starts_with("BOSUN WARNING - "), "{line}");
}
