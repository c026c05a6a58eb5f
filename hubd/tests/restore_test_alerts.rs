//! Restore-test and disaster-recovery alerts from polls: a failing restore test opens
//! `restore_test_failed` once per result and a pass on its tier resolves it as
//! `restore_test_recovered`, from full reports and deltas alike; with restore tests enabled in
//! desired state, a guest turns `restore_test_overdue` on the hub's clock in the sweep, past
//! twice the interval and not before; a `guest.restored` audit entry raises `guest_restored`
//! with the RPO and RTO once, the guest reported running again closes its `guest_lost` as
//! `guest_recovered`, and its next loss is alerted again. Everything is read
//! back through `GET /v1/admin/alerts` and `GET /v1/admin/events`.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use bosun_hubd::clock::Clock as _;
use bosun_proto::report::{
    AuditEntry, GuestReport, GuestStatus, RestoreTestOutcome, RestoreTestReport, StateReport,
};
use jiff::{SignedDuration, Timestamp};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

use common::{TestHub, full, host_alerts as alerts, host_events, names, report, send, send_delta};

/// The guest of `docs/proto/desired.json`.
const GUEST: Uuid = Uuid::from_u128(0x0b6f_4f2e_6c1a_4d6e_9a51_2f0c_8d3e_7a10);
const PBS: &str = "bosun-pbs-1a2b3c4d";

/// The host's events of the kinds `of`, oldest first, with their detail.
async fn events(hub: &TestHub, host: Uuid, of: &[&str]) -> Vec<(String, Value)> {
    host_events(hub, host)
        .await
        .into_iter()
        .filter(|(k, _)| of.contains(&k.as_str()))
        .collect()
}

async fn event_kinds(hub: &TestHub, host: Uuid, of: &[&str]) -> Vec<String> {
    events(hub, host, of)
        .await
        .into_iter()
        .map(|(k, _)| k)
        .collect()
}

fn kinds(alerts: &[(String, String)]) -> Vec<&str> {
    alerts.iter().map(|(k, _)| k.as_str()).collect()
}

fn base(seq: u64, vmid: u32, status: GuestStatus) -> StateReport {
    StateReport {
        seq,
        guests: vec![GuestReport {
            guest_id: Some(GUEST),
            vmid,
            kind: bosun_proto::desired::GuestKind::Lxc,
            hostname: "acme-app".into(),
            status,
            resources: None,
            controller_digest: None,
            controller_expected: None,
            addresses: Vec::new(),
        }],
        ..report()
    }
}

fn test_result(outcome: RestoreTestOutcome, tier: &str, finished: Timestamp) -> RestoreTestReport {
    let passed = outcome == RestoreTestOutcome::Passed;
    RestoreTestReport {
        guest_id: GUEST,
        finished_at: finished,
        passed,
        duration_seconds: 52,
        detail: if passed {
            String::new()
        } else {
            "the guest did not stay up".into()
        },
        outcome: Some(outcome),
        tier: Some(tier.into()),
        archive: Some(format!("{tier}:backup/ct/101/2026-11-20T02:30:00Z")),
        last_passed_at: None,
    }
}

fn with_tests(mut report: StateReport, tests: Vec<RestoreTestReport>) -> StateReport {
    report.last_restore_test = tests.iter().max_by_key(|t| t.finished_at).cloned();
    report.restore_tests = tests;
    report
}

async fn put_desired(hub: &TestHub, host: Uuid, enabled: bool, interval_days: u32) {
    let mut doc = common::desired();
    doc["restore_test_policy"]["enabled"] = enabled.into();
    doc["restore_test_policy"]["interval_days"] = interval_days.into();
    let resp = hub
        .admin(
            Method::PUT,
            &format!("/v1/admin/hosts/{host}/desired"),
            Some(doc),
        )
        .await;
    assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());
}

const RESTORE: &[&str] = &[
    "restore_test_failed",
    "restore_test_overdue",
    "restore_test_recovered",
    "restore_test_failed_cleared",
    "restore_test_overdue_cleared",
];

#[tokio::test]
async fn a_failing_restore_test_alerts_once_per_result_and_a_pass_on_its_tier_recovers() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-restore").await;
    let t = |h: i64| {
        "2026-11-20T00:00:00Z".parse::<Timestamp>().unwrap() + SignedDuration::from_hours(h)
    };
    let passing = with_tests(
        base(10, 101, GuestStatus::Running),
        vec![
            test_result(RestoreTestOutcome::Passed, "local", t(1)),
            test_result(RestoreTestOutcome::Passed, PBS, t(2)),
        ],
    );
    send(&hub, host, &key, &full(&passing)).await;
    assert!(alerts(&hub, host).await.is_empty());

    // The PBS tier's test fails, in a delta; the agent has forgotten the earlier pass.
    let failing = with_tests(
        base(11, 101, GuestStatus::Running),
        vec![
            passing.restore_tests[0].clone(),
            test_result(RestoreTestOutcome::Failed, PBS, t(30)),
        ],
    );
    send_delta(&hub, host, &key, &passing, &failing).await;
    // The same result again, in a full report and a heartbeat: still one alert.
    send(&hub, host, &key, &full(&failing)).await;
    send_delta(
        &hub,
        host,
        &key,
        &failing,
        &StateReport {
            seq: 12,
            ..failing.clone()
        },
    )
    .await;
    let raised = alerts(&hub, host).await;
    assert_eq!(kinds(&raised), ["restore_test_failed"], "{raised:?}");
    names(
        &raised[0].1,
        &[
            "pve-restore",
            "acme-app",
            &GUEST.to_string(),
            PBS,
            "the guest did not stay up",
            &format!("archive {PBS}:backup/ct/101/2026-11-20T02:30:00Z"),
        ],
    );
    let opened = events(&hub, host, &["restore_test_failed"]).await;
    assert_eq!(opened.len(), 1);
    assert_eq!(opened[0].1["detail"]["tier"], PBS);
    assert_eq!(opened[0].1["detail"]["outcome"], "failed");
    // The hub remembers the pass the agent forgot, and shows it with the failure.
    let detail: Value = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}"), None)
        .await
        .json()
        .await
        .unwrap();
    let shown = &detail["last_report"]["restore_tests"][1];
    assert_eq!(shown["outcome"], "failed");
    assert_eq!(
        shown["last_passed_at"]
            .as_str()
            .unwrap()
            .parse::<Timestamp>()
            .unwrap(),
        t(2),
        "{shown}"
    );

    // A newer failure, interrupted this time, is alerted on its own.
    let interrupted = with_tests(
        StateReport {
            seq: 13,
            ..failing.clone()
        },
        vec![
            passing.restore_tests[0].clone(),
            test_result(RestoreTestOutcome::Interrupted, PBS, t(40)),
        ],
    );
    send(&hub, host, &key, &full(&interrupted)).await;
    // A pass on the PBS tier recovers it.
    let recovered = with_tests(
        StateReport {
            seq: 14,
            ..failing.clone()
        },
        vec![
            passing.restore_tests[0].clone(),
            test_result(RestoreTestOutcome::Passed, PBS, t(50)),
        ],
    );
    send_delta(&hub, host, &key, &interrupted, &recovered).await;
    assert_eq!(
        event_kinds(&hub, host, RESTORE).await,
        [
            "restore_test_failed",
            "restore_test_failed",
            "restore_test_failed_cleared",
            "restore_test_recovered"
        ]
    );
    let raised = alerts(&hub, host).await;
    assert_eq!(
        kinds(&raised),
        [
            "restore_test_failed",
            "restore_test_failed",
            "restore_test_recovered"
        ],
        "{raised:?}"
    );
    names(&raised[1].1, &["acme-app", PBS, "was interrupted"]);
    names(&raised[2].1, &["pve-restore", "acme-app", PBS, "passed"]);
    let metrics = hub.metrics().await;
    for line in [
        "kind=\"restore_test_failed\"} 2",
        "kind=\"restore_test_failed_cleared\"} 1",
        "kind=\"restore_test_recovered\"} 1",
    ] {
        assert!(metrics.contains(line), "`{line}` missing from: {metrics}");
    }
}

#[tokio::test]
async fn a_restore_test_turns_overdue_on_the_hub_clock_past_twice_the_interval() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-rt-overdue").await;
    put_desired(&hub, host, true, 1).await;
    // The hub begins expecting a test of the guest at its first report, and nine hours later
    // one passes; the policy asks for one a day, so the guest is overdue 48 hours after that
    // pass (not after the first report).
    let first = base(29, 101, GuestStatus::Running);
    send(&hub, host, &key, &full(&first)).await;
    hub.clock.advance(std::time::Duration::from_secs(10 * 3600));
    let passed_at = hub.clock.now() - SignedDuration::from_hours(1);
    let r = with_tests(
        base(30, 101, GuestStatus::Running),
        vec![test_result(RestoreTestOutcome::Passed, "local", passed_at)],
    );
    send_delta(&hub, host, &key, &first, &r).await;
    assert!(hub.hub.sweep_backups_once().await.unwrap().is_empty());
    hub.clock.advance(std::time::Duration::from_secs(47 * 3600));
    assert!(hub.hub.sweep_backups_once().await.unwrap().is_empty());
    assert!(alerts(&hub, host).await.is_empty());
    hub.clock.advance(std::time::Duration::from_secs(120));
    let changes = hub.hub.sweep_backups_once().await.unwrap();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(changes[0].opened);
    assert_eq!(changes[0].event, "restore_test_overdue");
    assert_eq!(changes[0].subject, GUEST.to_string());
    let raised = alerts(&hub, host).await;
    assert_eq!(kinds(&raised), ["restore_test_overdue"], "{raised:?}");
    names(
        &raised[0].1,
        &[
            "pve-rt-overdue",
            "acme-app",
            &GUEST.to_string(),
            "(tier local)",
            "every 1 day",
        ],
    );
    // Swept again: still the one alert.
    assert!(hub.hub.sweep_backups_once().await.unwrap().is_empty());

    // A pass arrives in a delta: recovered at once.
    let caught_up = with_tests(
        base(31, 101, GuestStatus::Running),
        vec![test_result(
            RestoreTestOutcome::Passed,
            "local",
            hub.clock.now(),
        )],
    );
    send_delta(&hub, host, &key, &r, &caught_up).await;
    let raised = alerts(&hub, host).await;
    assert_eq!(
        kinds(&raised),
        ["restore_test_overdue", "restore_test_recovered"]
    );
    names(
        &raised[1].1,
        &["pve-rt-overdue", "acme-app", "no longer overdue"],
    );

    // Overdue again two days on; switching restore tests off closes it without a recovery,
    // and nothing is overdue however long the hub waits.
    hub.clock.advance(std::time::Duration::from_secs(49 * 3600));
    assert_eq!(hub.hub.sweep_backups_once().await.unwrap().len(), 1);
    put_desired(&hub, host, false, 1).await;
    let changes = hub.hub.sweep_backups_once().await.unwrap();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0].event, "restore_test_overdue_cleared");
    assert!(changes[0].alert.is_none());
    hub.clock
        .advance(std::time::Duration::from_secs(30 * 86_400));
    assert!(hub.hub.sweep_backups_once().await.unwrap().is_empty());
    assert_eq!(
        kinds(&alerts(&hub, host).await),
        [
            "restore_test_overdue",
            "restore_test_recovered",
            "restore_test_overdue"
        ]
    );
    // Switched on again, the guest has twice the interval from now, not from its old pass.
    put_desired(&hub, host, true, 1).await;
    assert!(hub.hub.sweep_backups_once().await.unwrap().is_empty());
    hub.clock.advance(std::time::Duration::from_secs(47 * 3600));
    assert!(hub.hub.sweep_backups_once().await.unwrap().is_empty());
    hub.clock.advance(std::time::Duration::from_secs(2 * 3600));
    let changes = hub.hub.sweep_backups_once().await.unwrap();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0].event, "restore_test_overdue");
}

#[tokio::test]
async fn a_test_that_booted_but_was_not_checked_is_no_failure_and_no_pass() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-rt-unchecked").await;
    put_desired(&hub, host, true, 1).await;
    let t = |h: i64| hub.clock.now() + SignedDuration::from_hours(h);
    let mut unchecked = test_result(RestoreTestOutcome::NotChecked, "local", t(0));
    unchecked.detail =
        "booted, not checked: the guest installs no restore check at /etc/bosun/restore-check"
            .into();
    let first = with_tests(base(40, 101, GuestStatus::Running), vec![unchecked.clone()]);
    send(&hub, host, &key, &full(&first)).await;
    // Not a failure: no restore_test_failed, and the metric counts none.
    assert!(alerts(&hub, host).await.is_empty());
    let metrics = hub.metrics().await;
    assert!(
        metrics.contains(&format!("restore_tests_failing{{host=\"{host}\"}} 0")),
        "{metrics}"
    );
    // Visible as it is.
    let detail: Value = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}"), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        detail["last_report"]["restore_tests"][0]["outcome"],
        "not_checked"
    );
    // Not a pass either: a guest only ever booted-not-checked turns overdue, twice the
    // interval after the hub began expecting a pass.
    assert!(hub.hub.sweep_backups_once().await.unwrap().is_empty());
    hub.clock.advance(std::time::Duration::from_secs(49 * 3600));
    let mut again = unchecked.clone();
    again.finished_at = hub.clock.now();
    let second = with_tests(base(41, 101, GuestStatus::Running), vec![again]);
    send_delta(&hub, host, &key, &first, &second).await;
    hub.hub.sweep_backups_once().await.unwrap();
    assert_eq!(
        kinds(&alerts(&hub, host).await),
        ["restore_test_overdue"],
        "no restore_test_failed"
    );
    // A failure after it is alerted; a not-checked result after that supersedes it without
    // recovering it.
    let failed = with_tests(
        base(42, 101, GuestStatus::Running),
        vec![test_result(RestoreTestOutcome::Failed, "local", t(50))],
    );
    send_delta(&hub, host, &key, &second, &failed).await;
    let mut later = unchecked;
    later.finished_at = t(51);
    let third = with_tests(base(43, 101, GuestStatus::Running), vec![later]);
    send_delta(&hub, host, &key, &failed, &third).await;
    assert_eq!(
        event_kinds(&hub, host, RESTORE).await,
        [
            "restore_test_overdue",
            "restore_test_failed",
            "restore_test_failed_cleared"
        ]
    );
}

fn audit(seq: u64, at: Timestamp, action: &str, detail: Value) -> AuditEntry {
    AuditEntry {
        seq,
        at,
        action: action.into(),
        // As the agent sends it: the journal's fields, the event's own detail under `detail`.
        detail: json!({
            "op_id": null, "job_id": null, "guest_id": GUEST, "vmid": 104,
            "request_id": null, "detail": detail, "hash": "00",
        }),
    }
}

#[tokio::test]
async fn a_restored_lost_guest_raises_guest_restored_once_and_a_later_loss_alerts_again() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-dr").await;
    let running = base(40, 101, GuestStatus::Running);
    send(&hub, host, &key, &full(&running)).await;
    let lost = base(41, 101, GuestStatus::Lost);
    send_delta(&hub, host, &key, &running, &lost).await;
    assert_eq!(kinds(&alerts(&hub, host).await), ["guest_lost"]);

    // Restored by DR under a new vmid, reported with its audit entry.
    let now = hub.clock.now();
    let mut restored = base(42, 104, GuestStatus::Running);
    restored.audit = vec![audit(
        1,
        now,
        "guest.restored",
        json!({
            "guest_id": GUEST, "vmid": 104, "lost_vmid": 101,
            "archive": "local:backup/vzdump-lxc-101-2026_11_21-01_00_00.tar.zst",
            "tier": "local", "rpo_seconds": 7_385, "rto_seconds": 48, "trigger": "auto",
        }),
    )];
    send(&hub, host, &key, &full(&restored)).await;
    // The agent sends the same entry again (it did not see the acknowledgement), and then
    // a skipped restore test.
    send(&hub, host, &key, &full(&restored)).await;
    let mut skipped = restored.clone();
    skipped.seq = 43;
    skipped.audit = vec![audit(
        2,
        now,
        "restore_test.skipped",
        json!({ "reason": "no backup on any tier yet" }),
    )];
    send(&hub, host, &key, &full(&skipped)).await;

    let raised = alerts(&hub, host).await;
    // The report closes the lost alert before the poll's audit entries are judged.
    assert_eq!(
        kinds(&raised),
        ["guest_lost", "guest_recovered", "guest_restored"],
        "{raised:?}"
    );
    names(&raised[1].1, &["acme-app", "vmid 104", "running again"]);
    names(
        &raised[2].1,
        &[
            "guest acme-app",
            &GUEST.to_string(),
            "vmid 104, was 101",
            "host pve-dr",
            "automatic disaster recovery",
            "archive local:backup/vzdump-lxc-101-2026_11_21-01_00_00.tar.zst",
            "tier local",
            "RPO 2 h 3 min, RTO 48 s",
        ],
    );
    let dr = events(&hub, host, &["guest_restored", "restore_test_skipped"]).await;
    assert_eq!(dr.len(), 2, "{dr:?}");
    assert_eq!(dr[0].0, "guest_restored");
    assert_eq!(dr[0].1["rpo_seconds"], 7_385);
    assert_eq!(dr[0].1["rto_seconds"], 48);
    assert_eq!(dr[0].1["vmid"], 104);
    assert_eq!(dr[0].1["lost_vmid"], 101);
    assert_eq!(dr[0].1["trigger"], "auto");
    assert_eq!(dr[1].0, "restore_test_skipped");
    assert_eq!(dr[1].1["reason"], "no backup on any tier yet");

    // Lost again: alerted again.
    let lost_again = base(44, 104, GuestStatus::Lost);
    send_delta(&hub, host, &key, &skipped, &lost_again).await;
    assert_eq!(
        kinds(&alerts(&hub, host).await),
        [
            "guest_lost",
            "guest_recovered",
            "guest_restored",
            "guest_lost"
        ]
    );
}
