//! `/metrics` of a real hub: content negotiation between OpenMetrics and the text format
//! 0.0.4, both checked by `promtool check metrics`, and the per-host gauges (last-seen age,
//! generation lag, overdue, backup age and failures, failing restore tests, missing escrow,
//! guests by kind and status) after real enrollments, a desired state and a poll carrying a
//! report.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;
#[path = "metrics/promtool.rs"]
mod promtool;

use std::time::Duration;

use bosun_proto::desired::{GuestKind, Retention};
use bosun_proto::report::{
    BackupReport, GuestReport, GuestStatus, RestoreTestOutcome, RestoreTestReport, StateReport,
    TierReport,
};
use common::{TestHub, desired, poll_with, report};
use jiff::{SignedDuration, Timestamp};
use reqwest::{Method, StatusCode};
use serde_json::json;
use uuid::Uuid;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const KEY: &str = "3b:8f:0c:1d:2e:4a:5b:6c:7d:8e:9f:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22:33:44";

/// Scrapes with `accept` (none: no header); gives the content type and the body.
async fn scrape(hub: &TestHub, accept: Option<&str>) -> (String, String) {
    let mut request = hub.client.get(format!("{}/metrics", hub.url));
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    (content_type, response.text().await.unwrap())
}

fn ago(seconds: i64) -> Timestamp {
    Timestamp::now() - SignedDuration::from_secs(seconds)
}

/// A report of five guests (three VMs, one of them lost; a container and an orphaned one),
/// two of them backing up to `local` and a PBS tier, with a failed restore test
/// and the host's PBS key (the hub holds no escrow of it).
fn busy_report(g1: Uuid, g2: Uuid) -> StateReport {
    let backup = |guest_id, finished_at, ok, last_ok_at| BackupReport {
        guest_id,
        target: "local".into(),
        finished_at,
        ok,
        size_bytes: Some(1 << 20),
        tier: Some(0),
        archive: None,
        duration_seconds: Some(3),
        warnings: 0,
        encrypted: false,
        error: (!ok).then(|| "vzdump failed".to_owned()),
        last_ok_at,
    };
    let guest = |guest_id, vmid, kind, status| GuestReport {
        guest_id,
        vmid,
        kind,
        hostname: format!("guest-{vmid}"),
        status,
        resources: None,
        controller_digest: None,
        controller_expected: None,
        addresses: Vec::new(),
    };
    StateReport {
        guests: vec![
            guest(Some(g1), 101, GuestKind::Lxc, GuestStatus::Running),
            guest(Some(g2), 102, GuestKind::Qemu, GuestStatus::Running),
            guest(
                Some(Uuid::new_v4()),
                103,
                GuestKind::Qemu,
                GuestStatus::Running,
            ),
            guest(
                Some(Uuid::new_v4()),
                104,
                GuestKind::Qemu,
                GuestStatus::Lost,
            ),
            guest(None, 150, GuestKind::Lxc, GuestStatus::Orphaned),
        ],
        last_backups: vec![
            backup(g1, ago(3600), true, Some(ago(3600))),
            backup(g2, ago(60), false, Some(ago(7200))),
        ],
        restore_tests: vec![RestoreTestReport {
            guest_id: g1,
            finished_at: ago(30),
            passed: false,
            duration_seconds: 12,
            detail: "did not stay up".into(),
            outcome: Some(RestoreTestOutcome::Failed),
            tier: Some("local".into()),
            archive: None,
            last_passed_at: None,
        }],
        tiers: vec![TierReport {
            tier: 1,
            target: "backup@pbs@pbs.example.net:store1".into(),
            storage_id: "bosun-pbs-1a2b3c4d".into(),
            schedule: "daily".into(),
            extra_schedule: None,
            desired: Retention::default(),
            applied: Retention::default(),
            held: None,
        }],
        pbs_key_fingerprint: Some(KEY.to_owned()),
        ..report()
    }
}

#[tokio::test]
async fn prometheus_gets_openmetrics_and_everyone_else_the_text_format_both_lint_clean() {
    let hub = TestHub::start().await;
    let (alpha, alpha_key) = hub.enroll("alpha").await;
    let (beta, _) = hub.enroll("beta").await;
    let put = hub
        .admin(
            Method::PUT,
            &format!("/v1/admin/hosts/{alpha}/desired"),
            Some(desired()),
        )
        .await;
    assert!(put.status().is_success(), "{:?}", put.text().await);
    let (g1, g2) = (Uuid::new_v4(), Uuid::new_v4());
    let body = json!({
        "schema": "bosun.poll/v1",
        "known_generation": 0,
        "applied_generation": 0,
        "report": busy_report(g1, g2),
    });
    let (status, answer) = poll_with(&hub, alpha, &alpha_key, &body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    hub.clock.advance(Duration::from_secs(120));

    // Prometheus' own Accept header (2.43 and later) gets OpenMetrics.
    let (content_type, om) = scrape(
        &hub,
        Some(
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
             version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
        ),
    )
    .await;
    assert_eq!(content_type, OPENMETRICS);
    assert!(om.ends_with("# EOF\n"), "{om}");
    assert!(om.contains("# TYPE bosun_hub_alerts counter\n"), "{om}");
    promtool::assert_openmetrics_only_counter_naming(&om);

    // curl, no header, and an explicit 0.0.4 get the text format.
    for accept in [Some("*/*"), None, Some("text/plain; version=0.0.4")] {
        let (content_type, text) = scrape(&hub, accept).await;
        assert_eq!(content_type, TEXT, "{accept:?}");
        assert!(!text.contains("# EOF"), "{text}");
        assert!(!text.contains("# UNIT"), "{text}");
        assert!(
            text.contains("# TYPE bosun_hub_alerts_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE process_cpu_seconds_total counter\n"),
            "{text}"
        );
        promtool::assert_clean_text(&text);
    }

    let (_, text) = scrape(&hub, None).await;
    let value = |series: &str| {
        promtool::sample(&text, series).unwrap_or_else(|| panic!("no {series} in\n{text}"))
    };
    let host = |name: &str, host: Uuid| format!("{name}{{host=\"{host}\"}}");
    let target = |name: &str| format!("{name}{{host=\"{alpha}\",target=\"local\"}}");

    assert_eq!(
        value(&format!(
            "bosun_hub_build_info{{version=\"{}\"}}",
            env!("CARGO_PKG_VERSION")
        )),
        1.0
    );
    assert!(value("process_resident_memory_bytes") > 1_000_000.0);
    assert!(value("process_start_time_seconds") > 1.6e9);
    assert_eq!(value("bosun_hub_hosts{status=\"active\"}"), 2.0);
    // The poll was 120 s ago on the hub's clock; beta never polled, so it has no age.
    let age = value(&host("bosun_hub_host_last_seen_age_seconds", alpha));
    assert!((119.0..=125.0).contains(&age), "{age}");
    assert!(promtool::sample(&text, &host("bosun_hub_host_last_seen_age_seconds", beta)).is_none());
    assert_eq!(value(&host("bosun_hub_host_overdue", alpha)), 0.0);
    // Generation 1 desired, 0 applied.
    assert_eq!(value(&host("bosun_hub_host_generation_lag", alpha)), 1.0);
    assert_eq!(value(&host("bosun_hub_host_generation_lag", beta)), 0.0);
    // The oldest newest-good backup is g2's, 7200 s before the poll (+120 s on the clock).
    let backup_age = value(&target("bosun_hub_backup_age_seconds"));
    assert!((7300.0..=7400.0).contains(&backup_age), "{backup_age}");
    assert_eq!(value(&target("bosun_hub_backups_failing")), 1.0);
    assert_eq!(value(&host("bosun_hub_restore_tests_failing", alpha)), 1.0);
    assert_eq!(value(&host("bosun_hub_escrow_missing", alpha)), 1.0);
    assert_eq!(value(&host("bosun_hub_escrow_missing", beta)), 0.0);
    // The guests by kind and status; none of a kind or status the report does not hold, and
    // none for a host without a report.
    let guests = |kind: &str, status: &str| {
        promtool::sample(
            &text,
            &format!("bosun_hub_guests{{host=\"{alpha}\",kind=\"{kind}\",status=\"{status}\"}}"),
        )
    };
    assert_eq!(guests("qemu", "running"), Some(2.0), "{text}");
    assert_eq!(guests("qemu", "lost"), Some(1.0), "{text}");
    assert_eq!(guests("lxc", "running"), Some(1.0), "{text}");
    assert_eq!(guests("lxc", "orphaned"), Some(1.0), "{text}");
    assert_eq!(guests("lxc", "lost"), None, "{text}");
    assert_eq!(text.matches("bosun_hub_guests{").count(), 4, "{text}");
    assert!(
        !text.contains(&format!("bosun_hub_guests{{host=\"{beta}\"")),
        "{text}"
    );
    assert_eq!(
        value(&format!(
            "bosun_hub_host_info{{host=\"{alpha}\",hostname=\"alpha\",agent_version=\"0.1.0\"}}"
        )),
        1.0
    );

    // Silent past the grace window (3 × 30 s, already 120 s): overdue, per host.
    hub.hub.sweep_once().await.unwrap();
    let (_, text) = scrape(&hub, None).await;
    assert_eq!(
        promtool::sample(&text, &host("bosun_hub_host_overdue", alpha)),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        promtool::sample(&text, "bosun_hub_hosts_overdue"),
        Some(1.0)
    );
    promtool::assert_clean_text(&text);

    // A revoked host leaves the per-host series.
    let revoked = hub
        .admin(
            Method::POST,
            &format!("/v1/admin/hosts/{beta}/revoke"),
            None,
        )
        .await;
    assert!(revoked.status().is_success(), "{:?}", revoked.text().await);
    let (_, text) = scrape(&hub, None).await;
    assert!(!text.contains(&beta.to_string()), "{text}");
}
