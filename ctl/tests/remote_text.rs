//! What a host reports is data, never instructions to the operator's terminal. A compromised
//! host posts a report full of escape sequences (a window title, a screen clear, the C1 CSI,
//! a bell) and invisible format characters (a right-to-left override that makes a name read
//! backwards, an isolate, a zero-width space, a tag character) to a real hub: the hub refuses
//! them in names (422, nothing stored) and keeps free-form words with each one written as
//! visible text. Then the hub's own
//! store is made to hold the raw bytes (a hub that lies, or text an older hub stored), and the
//! real `bosunctl` prints every view of it with no control character but its own line feeds.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::process::Output;

use reqwest::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::common;

use common::hub::{Fixture, start_hub};
use common::text;

/// A window title, a bell, a screen clear and the C1 CSI; then a right-to-left override, a
/// left-to-right isolate, a zero-width space and a tag character, so that the name's end reads
/// `bad` where it says `dab`.
const HOSTILE: &str =
    "\u{1b}]0;pwned\u{7}\u{1b}[2J\u{9b}31mALL GOOD\u{202e}dab\u{2066}\u{200b}\u{e0041}";

/// How [`HOSTILE`]'s format characters print.
const FORMAT_SHOWN: &str = "ALL GOOD\\u{202e}dab\\u{2066}\\u{200b}\\u{e0041}";

/// The same in SQL, for the store.
const HOSTILE_SQL: &str = "char(27) || ']0;pwned' || char(7) || char(27) || '[2J' || char(155) || '31mALL GOOD' || char(8238) || 'dab' || char(8294, 8203, 917569)";

fn poll_body(report: impl FnOnce(&mut Value)) -> Value {
    let mut body: Value =
        serde_json::from_str(include_str!("../../docs/proto/poll-request.json")).unwrap();
    body["report"]["seq"] = json!(jiff::Timestamp::now().as_millisecond());
    report(&mut body["report"]);
    body
}

async fn poll(hub: &Fixture, host: Uuid, key: &str, body: &Value) -> (StatusCode, Value) {
    let resp = hub
        .pinned_client()
        .post(format!("{}/v1/hosts/{host}/poll?wait=0", hub.url))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap())
}

/// The control characters in `text` other than a line feed, and the invisible format
/// characters (Unicode's `Cf`) this suite sends.
fn controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|&c| {
            (c.is_control() && c != '\n')
                || matches!(c, '\u{ad}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}'
                    | '\u{2060}'..='\u{206f}' | '\u{feff}' | '\u{e0000}'..='\u{e007f}')
        })
        .collect()
}

fn assert_inert(what: &str, out: &Output) {
    for (stream, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        let text = String::from_utf8(bytes.clone())
            .unwrap_or_else(|_| panic!("{what}: {stream} is not UTF-8"));
        let found = controls(&text);
        assert!(
            found.is_empty(),
            "{what}: {stream} carries {found:?}: {text:?}"
        );
        // No byte of ESC, BEL or DEL either (C1, two bytes in UTF-8, is caught above).
        assert!(
            !bytes.iter().any(|b| matches!(b, 0x1b | 0x07 | 0x7f)),
            "{what}: {stream} has a raw control byte"
        );
    }
}

/// Every string of a JSON value, keys included, joined.
fn all_strings(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(all_strings).collect(),
        Value::Object(fields) => fields
            .iter()
            .map(|(k, v)| format!("{k}{}", all_strings(v)))
            .collect(),
        _ => String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_report_reaches_the_operators_terminal_inert() {
    let hub = start_hub().await;
    let (host, key) = hub.enroll("pve-text").await;
    let guest = "0b6f4f2e-6c1a-4d6e-9a51-2f0c8d3e7a10";

    // A name with an escape sequence: refused, the field named, nothing stored.
    let (status, answer) = poll(
        &hub,
        host,
        &key,
        &poll_body(|r| r["guests"][0]["hostname"] = json!(HOSTILE)),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert!(
        answer.to_string().contains("guests[0].hostname"),
        "{answer}"
    );
    // A name with only a right-to-left override in it: refused the same way.
    let (status, answer) = poll(
        &hub,
        host,
        &key,
        &poll_body(|r| r["guests"][0]["hostname"] = json!("web-\u{202e}nimda")),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert!(
        answer.to_string().contains("guests[0].hostname"),
        "{answer}"
    );
    let shown = hub.run(&["hosts", "show", "pve-text", "--json"]).await;
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["last_report"], Value::Null, "{shown}");

    // Free-form words with them: kept, each control character as visible text.
    let (status, answer) = poll(
        &hub,
        host,
        &key,
        &poll_body(|r| {
            r["last_restore_test"] = json!({
                "guest_id": guest, "finished_at": "2026-11-24T03:20:00Z", "passed": false,
                "duration_seconds": 9, "outcome": "failed", "tier": "local",
                "detail": format!("the guest's restore check exited with status 1: {HOSTILE}"),
            });
            r["restore_tests"] = json!([r["last_restore_test"].clone()]);
            r["last_backups"][0]["ok"] = json!(false);
            r["last_backups"][0]["error"] = json!(HOSTILE);
            r["storage"][1]["detail"] = json!(HOSTILE);
            r["audit"][1]["detail"] = json!({"vmid": 101, "detail": {"said": HOSTILE}});
        }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let shown = hub.run(&["hosts", "show", "pve-text", "--json"]).await;
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    let stored = all_strings(&shown["last_report"]);
    assert!(controls(&stored).is_empty(), "{stored:?}");
    assert!(
        stored.contains("\\x1b]0;pwned\\x07\\x1b[2J\\u{9b}31m") && stored.contains(FORMAT_SHOWN),
        "{stored}"
    );

    // Now the hub's store holds the raw bytes, in names and words alike.
    let db = hub.dir.path().join("hub/hub.sqlite");
    let sql = format!(
        "UPDATE hosts SET hostname = 'pve-' || {HOSTILE_SQL}, agent_version = {HOSTILE_SQL};
         UPDATE host_reports SET report = json_set(report,
             '$.guests[0].hostname', {HOSTILE_SQL},
             '$.last_restore_test.detail', {HOSTILE_SQL},
             '$.restore_tests[0].detail', {HOSTILE_SQL},
             '$.last_backups[0].target', {HOSTILE_SQL},
             '$.last_backups[0].error', {HOSTILE_SQL});"
    );
    let out = std::process::Command::new("sqlite3")
        .arg(&db)
        .arg(&sql)
        .output()
        .expect("sqlite3 runs (scripts/install-deps installs it)");
    assert!(out.status.success(), "{}", text(&out));
    let raw = hub
        .run(&["hosts", "show", host.to_string().as_str(), "--json"])
        .await;
    let raw: Value = serde_json::from_slice(&raw.stdout).unwrap();
    assert!(
        all_strings(&raw).contains(HOSTILE),
        "the store did not hold the raw bytes: {raw}"
    );

    let host_arg = host.to_string();
    let views: [&[&str]; 10] = [
        &["status"],
        &["status", "--check"],
        &["status", "--json"],
        &["hosts", "list"],
        &["hosts", "show", &host_arg],
        &["hosts", "show", &host_arg, "--json"],
        &["audit", "--host", &host_arg],
        &["events"],
        &["alerts"],
        &["desired", "diff", "--host", &host_arg],
    ];
    for args in views {
        let out = hub.run(args).await;
        assert_inert(&args.join(" "), &out);
    }
    // The words are still there to read, escaped.
    let status = hub.run(&["status"]).await;
    let said = String::from_utf8_lossy(&status.stdout);
    assert!(
        said.contains("pve-\\x1b]0;pwned\\x07\\x1b[2J\\u{9b}31mALL GOOD")
            && said.contains(FORMAT_SHOWN),
        "{said}"
    );
    let show = hub.run(&["hosts", "show", &host_arg]).await;
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(
        shown.contains("pve-\\x1b]0;pwned") && shown.contains(FORMAT_SHOWN),
        "{shown}"
    );
    let check = hub.run(&["status", "--check"]).await;
    assert!(
        String::from_utf8_lossy(&check.stdout).contains("\\x1b]0;pwned"),
        "{}",
        text(&check)
    );
    // JSON stays JSON, with the same text in it.
    let json = hub.run(&["status", "--json"]).await;
    let json: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(all_strings(&json).contains(HOSTILE));
}
