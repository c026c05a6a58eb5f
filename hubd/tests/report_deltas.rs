//! Change-only reports: the hub merges a delta into the stored report when the delta's base
//! is exactly the stored report, and otherwise asks for a full report (`full_report: true`)
//! without touching what it holds.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use bosun_proto::delta::ReportDelta;
use bosun_proto::report::{BackupReport, GuestReport, GuestStatus, StateReport};
use common::{TestHub, poll_with, report};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

fn guest(vmid: u32, status: GuestStatus) -> GuestReport {
    GuestReport {
        guest_id: Some(Uuid::from_u128(u128::from(vmid))),
        vmid,
        kind: bosun_proto::desired::GuestKind::Lxc,
        hostname: format!("g{vmid}"),
        status,
        resources: None,
        controller_digest: None,
        controller_expected: None,
        addresses: Vec::new(),
    }
}

fn full(report: &StateReport) -> Value {
    json!({ "schema": "bosun.poll/v1", "report": report })
}

fn delta(delta: &ReportDelta) -> Value {
    json!({ "schema": "bosun.poll/v1", "delta": delta })
}

async fn stored(hub: &TestHub, host: Uuid) -> StateReport {
    let detail: Value = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}"), None)
        .await
        .json()
        .await
        .unwrap();
    serde_json::from_value(detail["last_report"].clone()).unwrap()
}

fn with_guests(seq: u64, guests: Vec<GuestReport>) -> StateReport {
    StateReport {
        seq,
        guests,
        ..report()
    }
}

#[tokio::test]
async fn deltas_merge_into_the_stored_report() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-delta").await;
    let first = with_guests(
        100,
        vec![
            guest(101, GuestStatus::Running),
            guest(102, GuestStatus::Running),
        ],
    );
    let (status, answer) = poll_with(&hub, host, &key, &full(&first)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["report_seq"], 100);
    assert_eq!(answer["full_report"], false);

    // 101 breaks, 102 is gone, 103 appears.
    let mut second = with_guests(
        0,
        vec![
            guest(101, GuestStatus::Broken),
            guest(103, GuestStatus::Provisioning),
        ],
    );
    let change = ReportDelta::between(&first, 100, &second, 101);
    assert_eq!(change.removed_guests, vec![102]);
    let (status, answer) = poll_with(&hub, host, &key, &delta(&change)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["report_seq"], 101);
    assert_eq!(answer["full_report"], false);
    second.seq = 101;
    assert_eq!(stored(&hub, host).await, second);

    // An empty delta is a heartbeat: the state stays, the number moves on.
    let beat = ReportDelta::between(&second, 101, &second, 102);
    let (_, answer) = poll_with(&hub, host, &key, &delta(&beat)).await;
    assert_eq!(answer["report_seq"], 102);
    assert_eq!(answer["full_report"], false);
    second.seq = 102;
    assert_eq!(stored(&hub, host).await, second);
}

#[tokio::test]
async fn a_gap_or_a_missing_base_asks_for_a_full_report() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-gap").await;
    let base = with_guests(10, vec![guest(101, GuestStatus::Running)]);

    // No stored report at all.
    let change = ReportDelta::between(&base, 10, &with_guests(0, Vec::new()), 11);
    let (status, answer) = poll_with(&hub, host, &key, &delta(&change)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["full_report"], true);
    assert_eq!(answer["report_seq"], Value::Null);

    poll_with(&hub, host, &key, &full(&base)).await;
    // A delta built on seq 12, which the hub never saw (its answer to 11 was lost, say).
    let gap = ReportDelta::between(&base, 12, &with_guests(0, Vec::new()), 13);
    let (status, answer) = poll_with(&hub, host, &key, &delta(&gap)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["full_report"], true);
    assert_eq!(answer["report_seq"], 10);
    assert_eq!(
        stored(&hub, host).await,
        base,
        "a delta without its base changes nothing"
    );

    // The full report that follows is taken whole.
    let fresh = with_guests(14, vec![guest(105, GuestStatus::Stopped)]);
    let (_, answer) = poll_with(&hub, host, &key, &full(&fresh)).await;
    assert_eq!(answer["full_report"], false);
    assert_eq!(stored(&hub, host).await, fresh);
    let text = hub.metrics().await;
    assert!(
        text.contains("bosun_hub_full_reports_requested_total 2"),
        "{text}"
    );
}

#[tokio::test]
async fn the_stored_report_and_its_number_survive_a_restart() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-restart").await;
    let base = with_guests(
        7,
        vec![
            guest(101, GuestStatus::Running),
            guest(102, GuestStatus::Running),
        ],
    );
    poll_with(&hub, host, &key, &full(&base)).await;
    let (dir, admin) = hub.stop().await;
    let config = common::config(&dir);
    let hub = TestHub::start_in(dir, admin, config).await;

    let mut now = with_guests(0, vec![guest(101, GuestStatus::Running)]);
    let change = ReportDelta::between(&base, 7, &now, 8);
    let (status, answer) = poll_with(&hub, host, &key, &delta(&change)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["full_report"], false);
    assert_eq!(answer["report_seq"], 8);
    now.seq = 8;
    assert_eq!(stored(&hub, host).await, now);
}

#[tokio::test]
async fn audit_entries_in_a_delta_are_stored_and_acknowledged() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-audit").await;
    let base = with_guests(3, Vec::new());
    poll_with(&hub, host, &key, &full(&base)).await;
    let mut change = ReportDelta::between(&base, 3, &base, 4);
    change.audit = vec![bosun_proto::report::AuditEntry {
        seq: 5,
        at: jiff::Timestamp::now(),
        action: "guest.broken".into(),
        detail: json!({ "vmid": 101 }),
    }];
    let (_, answer) = poll_with(&hub, host, &key, &delta(&change)).await;
    assert_eq!(answer["audit_acked_seq"], 5);
    assert!(
        stored(&hub, host).await.audit.is_empty(),
        "audit entries are not part of the stored state"
    );
}

#[tokio::test]
async fn a_poll_with_both_or_neither_is_refused() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-shape").await;
    let base = with_guests(3, Vec::new());
    let both = json!({
        "schema": "bosun.poll/v1",
        "report": base,
        "delta": ReportDelta::between(&base, 3, &base, 4),
    });
    let (status, body) = poll_with(&hub, host, &key, &both).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, body) = poll_with(&hub, host, &key, &json!({ "schema": "bosun.poll/v1" })).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
}

#[tokio::test]
async fn a_delta_on_the_report_before_the_stored_one_merges_there_and_a_stale_one_is_ignored() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-prev").await;
    let base = with_guests(10, vec![guest(101, GuestStatus::Running)]);
    poll_with(&hub, host, &key, &full(&base)).await;
    // Delta 11 arrives (its answer is never read: the agent abandoned that poll).
    let stopped = with_guests(0, vec![guest(101, GuestStatus::Stopped)]);
    poll_with(
        &hub,
        host,
        &key,
        &delta(&ReportDelta::between(&base, 10, &stopped, 11)),
    )
    .await;
    // The agent builds delta 12 on report 10, the last it saw acknowledged.
    let mut now = with_guests(
        0,
        vec![
            guest(101, GuestStatus::Running),
            guest(102, GuestStatus::Provisioning),
        ],
    );
    let change = ReportDelta::between(&base, 10, &now, 12);
    assert!(
        change.guests.iter().all(|g| g.vmid == 102),
        "101 is unchanged since report 10"
    );
    let (_, answer) = poll_with(&hub, host, &key, &delta(&change)).await;
    assert_eq!(answer["full_report"], false);
    assert_eq!(answer["report_seq"], 12);
    now.seq = 12;
    assert_eq!(
        stored(&hub, host).await,
        now,
        "merged into report 10, not 11"
    );

    // Delta 11 again, late: older than what is stored, ignored.
    let (_, answer) = poll_with(
        &hub,
        host,
        &key,
        &delta(&ReportDelta::between(&base, 10, &stopped, 11)),
    )
    .await;
    assert_eq!(answer["full_report"], true);
    assert_eq!(stored(&hub, host).await, now);

    // And the chain goes on from 12.
    let next = ReportDelta::between(&now, 12, &now, 13);
    let (_, answer) = poll_with(&hub, host, &key, &delta(&next)).await;
    assert_eq!(answer["full_report"], false);
    assert_eq!(answer["report_seq"], 13);
}

async fn open_kinds(hub: &TestHub) -> Vec<String> {
    let alerts: Vec<Value> = hub
        .admin(Method::GET, "/v1/admin/alerts/open", None)
        .await
        .json()
        .await
        .unwrap();
    alerts
        .iter()
        .filter_map(|a| a["kind"].as_str().map(str::to_owned))
        .collect()
}

/// A delta built on the report before the stored one replaces the stored report, so it is
/// judged against what that report opened: the guest broken in the stored report (its poll's
/// answer lost to the agent) and running again in a delta on the one before resolves the
/// alert, though nothing differs from the report the delta was built on.
#[tokio::test]
async fn a_delta_on_the_report_before_resolves_what_the_stored_one_opened() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-prev-judged").await;
    let base = with_guests(10, vec![guest(101, GuestStatus::Running)]);
    poll_with(&hub, host, &key, &full(&base)).await;
    let broken = with_guests(0, vec![guest(101, GuestStatus::Broken)]);
    poll_with(
        &hub,
        host,
        &key,
        &delta(&ReportDelta::between(&base, 10, &broken, 11)),
    )
    .await;
    assert!(open_kinds(&hub).await.contains(&"guest_broken".to_owned()));
    // The agent never read 11's answer; the guest runs again, as in report 10.
    let (_, answer) = poll_with(
        &hub,
        host,
        &key,
        &delta(&ReportDelta::between(&base, 10, &base, 12)),
    )
    .await;
    assert_eq!(answer["report_seq"], 12);
    assert_eq!(stored(&hub, host).await.guests, base.guests);
    assert!(
        !open_kinds(&hub).await.contains(&"guest_broken".to_owned()),
        "the stored report says running; the alert it opened is resolved"
    );
}

fn backup(guest: u128, target: &str, ok: bool, second: i64) -> BackupReport {
    BackupReport {
        guest_id: Uuid::from_u128(guest),
        target: target.to_owned(),
        finished_at: jiff::Timestamp::from_second(1_790_000_000 + second).unwrap(),
        ok,
        size_bytes: ok.then_some(4096),
        ..BackupReport::default()
    }
}

#[tokio::test]
async fn last_backups_in_a_delta_merge_per_guest_and_target() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-backups").await;
    let mut first = with_guests(200, vec![guest(101, GuestStatus::Running)]);
    first.last_backups = vec![backup(101, "local", true, 0)];
    let (_, answer) = poll_with(&hub, host, &key, &full(&first)).await;
    assert_eq!(answer["report_seq"], 200);

    // A newer, failed backup to the same storage, and a first one to another.
    let mut second = first.clone();
    second.last_backups = vec![
        backup(101, "local", false, 60),
        backup(101, "nfs", true, 30),
    ];
    let change = ReportDelta::between(&first, 200, &second, 201);
    assert_eq!(change.last_backups.len(), 2);
    assert!(!change.changes_nothing());
    let (_, answer) = poll_with(&hub, host, &key, &delta(&change)).await;
    assert_eq!(answer["report_seq"], 201);
    assert_eq!(answer["full_report"], false);
    let held = stored(&hub, host).await;
    assert_eq!(held.seq, 201);
    // The hub shows the last good backup it remembers beside each one, even after a failure.
    let mut shown = second.last_backups.clone();
    shown[0].last_ok_at = Some(first.last_backups[0].finished_at);
    shown[1].last_ok_at = Some(shown[1].finished_at);
    assert_eq!(held.last_backups, shown);

    // Unchanged backups are not repeated, and the hub keeps them.
    let beat = ReportDelta::between(&second, 201, &second, 202);
    assert!(beat.last_backups.is_empty());
    let (_, answer) = poll_with(&hub, host, &key, &delta(&beat)).await;
    assert_eq!(answer["report_seq"], 202);
    assert_eq!(stored(&hub, host).await.last_backups, shown);
}
