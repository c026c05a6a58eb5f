//! Every view of one host gives the same answer. A host reports to a real hub a refusal that
//! stands, a restore test that booted but was not checked, a signed plan naming two targets (one
//! of them a PBS id the host's description of itself leaves out) and a PBS verification of a
//! guest; then the real `bosunctl status`, `bosunctl hosts show`, both with `--output json`,
//! and the dashboard's host page are read, and for each concept (the host's state, whether it
//! is in sync, the restore test's verdict, the plan's targets, the name a verification gives
//! its guest) the five answers must be one. The fleet page and `hosts list`, which see the
//! host's summary only, say it is not in sync too.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::common;

use common::hub::{Fixture, start_hub};
use common::text;

const GUEST: &str = "0b6f4f2e-6c1a-4d6e-9a51-2f0c8d3e7a10";
const PBS: &str = "backup@pbs@pbs.example.net:store1";
const USB: &str = "5e2c1c7a-3b4f-4d8e-8f7a-1c2d3e4f5a6b";

/// The example poll with the report this suite is about.
fn poll_body() -> Value {
    let mut body: Value =
        serde_json::from_str(include_str!("../../docs/proto/poll-request.json")).unwrap();
    let now = jiff::Timestamp::now();
    let at = |minutes: i64| (now - jiff::SignedDuration::from_mins(minutes)).to_string();
    let r = &mut body["report"];
    r["seq"] = json!(now.as_millisecond());
    r["refused"] = json!([{
        "kind": "guest_field", "name": "acme-app", "guest_id": GUEST, "field": "rootfs_gib",
        "reason": "the root disk is 32 GiB and is never shrunk to the 16 GiB asked: ask for 32 GiB or more",
    }]);
    let test = json!({
        "guest_id": GUEST, "finished_at": at(30), "passed": false, "duration_seconds": 38,
        "outcome": "not_checked", "tier": "local",
        "detail": "booted, not checked: the guest installs no restore check",
    });
    r["last_restore_test"] = test.clone();
    r["restore_tests"] = json!([test]);
    r["data_plan"] = json!({
        "serial": 2, "issued_at": at(600), "signer": "SHA256:views",
        "targets": [PBS, USB], "min_interval_seconds": 3600,
    });
    r["verifications"] = json!([{
        "guest_id": GUEST, "tier": PBS, "finished_at": at(5), "outcome": "ok",
        "duration_ms": 420, "detail": "", "last_ok_at": at(5), "first_at": at(600),
    }]);
    // What the agent describes of itself: only the plan targets whose ids are plain words.
    body["capabilities"] = json!({ "arch": "x86_64", "cpu_count": 8, "plan_targets": [USB] });
    body
}

async fn ctl_ok(hub: &Fixture, args: &[&str]) -> String {
    let out = hub.run(args).await;
    assert!(out.status.success(), "{args:?}: {}", text(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// The value of field `key` of `hosts show`'s text (`key: value`).
fn field<'a>(shown: &'a str, key: &str) -> Option<&'a str> {
    shown.lines().find_map(|l| {
        l.split_once(':')
            .filter(|(k, _)| k.trim() == key)
            .map(|(_, v)| v.trim())
    })
}

/// The text after `marker` in `page` up to the next tag, with any tags right after the marker
/// skipped: the text of the element `marker` opens.
fn element_text(page: &str, marker: &str) -> Option<String> {
    let mut rest = &page[page.find(marker)? + marker.len()..];
    while let Some(tag) = rest.strip_prefix('<') {
        rest = &tag[tag.find('>')? + 1..];
    }
    Some(rest[..rest.find('<')?].trim().to_owned())
}

/// The text of the first `data-label="{label}"` cell of the table `id`.
fn cell(page: &str, id: &str, label: &str) -> Option<String> {
    let table = &page[page.find(&format!("id=\"{id}\""))?..];
    element_text(table, &format!("data-label=\"{label}\">"))
}

/// The text of the first badge after `marker` in `page`.
fn badge_after(page: &str, marker: &str) -> Option<String> {
    let rest = &page[page.find(marker)?..];
    let badge = &rest[rest.find("class=\"badge ")?..];
    let text = &badge[badge.find('>')? + 1..];
    Some(text[..text.find('<')?].trim().to_owned())
}

/// `status`'s answers.
fn from_status(out: &str) -> BTreeMap<&'static str, Option<String>> {
    let lines: Vec<&str> = out.lines().collect();
    let header = lines.iter().find(|l| l.starts_with("host pve-views "));
    let line = |prefix: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(prefix))
            .map(str::trim)
    };
    let verify_guest = lines
        .iter()
        .position(|l| l.starts_with("    verify "))
        .and_then(|i| lines[..i].iter().rev().find(|l| l.starts_with("  guest ")))
        .and_then(|l| l.split_whitespace().nth(1))
        .map(str::to_owned);
    BTreeMap::from([
        (
            "state",
            header
                .and_then(|h| h.split_once(")  "))
                .and_then(|(_, rest)| rest.split_once("  last seen"))
                .map(|(state, _)| state.to_owned()),
        ),
        (
            "sync",
            line("  sync ")
                .and_then(|s| s.split_once(':'))
                .map(|(w, _)| w.to_owned()),
        ),
        (
            "restore test",
            line("  last restore-test ")
                .and_then(|s| s.split_once(" at "))
                .map(|(w, _)| w.to_owned()),
        ),
        ("plan targets", line("  plan targets ").map(str::to_owned)),
        ("verified guest", verify_guest),
    ])
}

/// `hosts show`'s answers.
fn from_show(out: &str) -> BTreeMap<&'static str, Option<String>> {
    BTreeMap::from([
        ("state", field(out, "state").map(str::to_owned)),
        (
            "sync",
            field(out, "sync")
                .and_then(|s| s.split_once(':'))
                .map(|(w, _)| w.to_owned()),
        ),
        (
            "restore test",
            field(out, "restore test")
                .and_then(|s| s.split_once(" at "))
                .map(|(w, _)| w.to_owned()),
        ),
        (
            "plan targets",
            field(out, "plan targets").map(str::to_owned),
        ),
        (
            "verified guest",
            field(out, "verify")
                .and_then(|v| v.strip_prefix("guest "))
                .and_then(|v| v.split_whitespace().next())
                .map(str::to_owned),
        ),
    ])
}

/// The answers of a host's JSON (`status`'s `hosts[0]`, or `hosts show`'s).
fn from_json(host: &Value) -> BTreeMap<&'static str, Option<String>> {
    let view = &host["view"];
    let string = |v: &Value| v.as_str().map(str::to_owned);
    BTreeMap::from([
        ("state", string(&view["state"])),
        ("sync", string(&view["sync"]["word"])),
        ("restore test", string(&view["restore_tests"][0]["word"])),
        (
            "plan targets",
            view["plan_targets"].as_array().map(|targets| {
                targets
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            }),
        ),
        ("verified guest", string(&view["verifications"][0]["guest"])),
    ])
}

/// The dashboard host page's answers.
fn from_page(page: &str) -> BTreeMap<&'static str, Option<String>> {
    BTreeMap::from([
        ("state", element_text(page, "<h1>pve-views ")),
        ("sync", element_text(page, "id=\"sync\">")),
        ("restore test", cell(page, "restore-tests", "Outcome")),
        ("plan targets", element_text(page, "id=\"plan-targets\">")),
        ("verified guest", cell(page, "verifications", "Guest")),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_hosts_show_their_json_and_the_dashboard_say_the_same_of_a_host() {
    let hub = start_hub().await;
    let (host, key) = hub.enroll("pve-views").await;
    let resp = hub
        .pinned_client()
        .post(format!("{}/v1/hosts/{host}/poll?wait=0", hub.url))
        .bearer_auth(&key)
        .json(&poll_body())
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());

    let status = ctl_ok(&hub, &["status"]).await;
    let shown = ctl_ok(&hub, &["hosts", "show", "pve-views"]).await;
    let status_json: Value =
        serde_json::from_str(&ctl_ok(&hub, &["--output", "json", "status"]).await).unwrap();
    let shown_json: Value = serde_json::from_str(
        &ctl_ok(&hub, &["--output", "json", "hosts", "show", "pve-views"]).await,
    )
    .unwrap();
    let page = hub.dashboard(&format!("/ui/hosts/{host}")).await;
    let fleet = hub.dashboard("/ui/").await;

    let views = [
        ("bosunctl status", from_status(&status)),
        ("bosunctl hosts show", from_show(&shown)),
        (
            "bosunctl status --output json",
            from_json(&status_json["hosts"][0]),
        ),
        ("bosunctl hosts show --output json", from_json(&shown_json)),
        ("the dashboard's host page", from_page(&page)),
    ];
    let wanted = BTreeMap::from([
        ("sync", "NOT IN SYNC".to_owned()),
        ("restore test", "booted, NOT CHECKED".to_owned()),
        ("plan targets", format!("{PBS}, {USB}")),
        ("verified guest", "acme-app".to_owned()),
    ]);
    // The state word is the hub's roll-up: whatever it is, it is one word in every view, and
    // never the enrollment status.
    let state = views[4].1["state"].clone().unwrap_or_default();
    assert!(
        ["ok", "warning", "critical"].contains(&state.as_str()),
        "the dashboard's state: {state:?}\n{page}"
    );
    let mut disagree = Vec::new();
    for concept in [
        "state",
        "sync",
        "restore test",
        "plan targets",
        "verified guest",
    ] {
        let want = wanted
            .get(concept)
            .cloned()
            .unwrap_or_else(|| state.clone());
        for (view, answers) in &views {
            let said = answers[concept].as_deref();
            if said != Some(want.as_str()) {
                disagree.push(format!("{concept}: {view} says {said:?}, not {want:?}"));
            }
        }
    }
    assert!(
        disagree.is_empty(),
        "the views disagree:\n  {}\n\nstatus:\n{status}\nhosts show:\n{shown}",
        disagree.join("\n  ")
    );
    assert!(!status.contains("active /"), "{status}");

    // The fleet page and `hosts list` see the host's summary only: it counts the refusal, so
    // they say the host is not in sync too.
    let row = format!("data-host=\"{host}\"");
    let row = &fleet[fleet.find(&row).unwrap_or_else(|| panic!("{fleet}"))..];
    assert_eq!(
        badge_after(row, "data-label=\"Generation\"").as_deref(),
        Some("NOT IN SYNC"),
        "{fleet}"
    );
    assert_eq!(
        badge_after(row, "data-label=\"State\"").as_deref(),
        Some(state.as_str())
    );
    let listed = ctl_ok(&hub, &["hosts", "list"]).await;
    let line = listed
        .lines()
        .find(|l| l.contains("pve-views"))
        .unwrap_or_else(|| panic!("{listed}"));
    assert!(line.split_whitespace().any(|w| w == "no"), "{listed}");
}
