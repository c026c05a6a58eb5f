//! What a host reports reaches the dashboard inert: a compromised host's report full of escape
//! sequences (a window title, a screen clear, the C1 CSI, a bell) and invisible format
//! characters (a right-to-left override, an isolate, a zero-width space) is refused where they
//! stand in a name and kept as visible text where they stand in free-form words; and text the store
//! holds raw (a hub that lies, or what an older hub stored) leaves every page with each control
//! character written out, HTML escaped as ever.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::time::Duration;

use bosun_hubd::store::StoreLocation;
use bosun_proto::report::{BackupReport, GuestReport, GuestStatus, RestoreTestReport, StateReport};
use reqwest::StatusCode;
use reqwest::header;
use serde_json::Value;
use tempfile::TempDir;
use uuid::Uuid;

use common::{TestHub, full, poll_with, report, send, test_store};

/// A window title, a bell, a screen clear, the C1 CSI, a DEL, and markup; then a right-to-left
/// override, a left-to-right isolate and a zero-width space.
const HOSTILE: &str =
    "\u{1b}]0;pwned\u{7}\u{1b}[2J\u{9b}31m\u{7f}<b>ALL GOOD</b>\u{202e}dab\u{2066}\u{200b}";

/// The report a compromised host sends: `text` in names and words alike.
fn hostile_report(now: jiff::Timestamp, names: &str, words: &str) -> StateReport {
    let guest = Uuid::new_v4();
    StateReport {
        seq: now.as_millisecond().unsigned_abs(),
        guests: vec![GuestReport {
            guest_id: Some(guest),
            vmid: 101,
            kind: bosun_proto::desired::GuestKind::Lxc,
            hostname: names.into(),
            status: GuestStatus::Running,
            resources: None,
            controller_digest: None,
            controller_expected: None,
            addresses: Vec::new(),
        }],
        last_backups: vec![BackupReport {
            guest_id: guest,
            target: "local".into(),
            finished_at: now,
            ok: false,
            error: Some(words.into()),
            ..BackupReport::default()
        }],
        last_restore_test: Some(RestoreTestReport {
            guest_id: guest,
            finished_at: now,
            passed: false,
            duration_seconds: 5,
            detail: format!("the guest's restore check exited with status 1: {words}"),
            outcome: None,
            tier: Some("local".into()),
            archive: None,
            last_passed_at: None,
        }),
        ..report()
    }
}

/// Runs `sql` with `params` (`?1`, `?2`) on the store of the test hub in `dir`.
async fn store_execute(dir: &TempDir, sql: &str, params: &[String]) {
    match test_store(dir) {
        StoreLocation::Sqlite => {
            let conn = rusqlite::Connection::open(dir.path().join("hub.sqlite")).unwrap();
            conn.execute(sql, rusqlite::params_from_iter(params))
                .unwrap();
        }
        StoreLocation::Postgres(url) => {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params
                .iter()
                .map(|p| p as &(dyn tokio_postgres::types::ToSql + Sync))
                .collect();
            client
                .execute(&sql.replace("?1", "$1").replace("?2", "$2"), &params)
                .await
                .unwrap();
        }
    }
}

async fn login(hub: &TestHub, client: &reqwest::Client) -> String {
    let resp = client
        .post(format!("{}/ui/login", hub.url))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::ORIGIN, &hub.url)
        .body(format!("token={}", hub.admin.replace('+', "%2B")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let cookie = resp.headers()[header::SET_COOKIE].to_str().unwrap();
    cookie.split(';').next().unwrap().to_owned()
}

/// The control characters of `text` other than a line feed, and the invisible format
/// characters (Unicode's `Cf`) this test sends.
fn controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|&c| {
            (c.is_control() && c != '\n')
                || matches!(c, '\u{ad}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}'
                    | '\u{2060}'..='\u{206f}' | '\u{feff}' | '\u{e0000}'..='\u{e007f}')
        })
        .collect()
}

#[tokio::test]
async fn a_report_full_of_escape_sequences_renders_inert() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-text").await;
    let now = bosun_hubd::clock::Clock::now(&hub.clock);

    // In a name: refused, the field named, nothing stored.
    let (status, answer) = poll_with(
        &hub,
        host,
        &key,
        &full(&hostile_report(now, HOSTILE, "fine")),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert!(
        answer.to_string().contains("guests[0].hostname"),
        "{answer}"
    );
    let detail: Value = hub
        .request(
            reqwest::Method::GET,
            &format!("/v1/admin/hosts/{host}"),
            Some(&hub.admin),
            None,
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(detail["last_report"], Value::Null, "{detail}");
    // A name whose only trick is a right-to-left override: refused the same way.
    let (status, answer) = poll_with(
        &hub,
        host,
        &key,
        &full(&hostile_report(now, "web-\u{202e}nimda", "fine")),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert!(
        answer.to_string().contains("guests[0].hostname"),
        "{answer}"
    );

    // In free-form words: kept, every control character as visible text.
    let words = hostile_report(now, "acme-app", HOSTILE);
    send(&hub, host, &key, &full(&words)).await;
    let detail: Value = hub
        .request(
            reqwest::Method::GET,
            &format!("/v1/admin/hosts/{host}"),
            Some(&hub.admin),
            None,
        )
        .await
        .json()
        .await
        .unwrap();
    let error = detail["last_report"]["last_backups"][0]["error"]
        .as_str()
        .unwrap();
    assert_eq!(
        error,
        "\\x1b]0;pwned\\x07\\x1b[2J\\u{9b}31m\\x7f<b>ALL GOOD</b>\\u{202e}dab\\u{2066}\\u{200b}"
    );

    // The store holds the raw bytes: a hub that lies, or what an older hub stored.
    let raw = serde_json::to_string(&hostile_report(now, HOSTILE, HOSTILE)).unwrap();
    store_execute(
        &hub.dir,
        "UPDATE host_reports SET report = ?1 WHERE host_id = ?2",
        &[raw, host.to_string()],
    )
    .await;
    store_execute(
        &hub.dir,
        "UPDATE hosts SET hostname = ?1 WHERE host_id = ?2",
        &[format!("pve-{HOSTILE}"), host.to_string()],
    )
    .await;
    let detail = hub
        .request(
            reqwest::Method::GET,
            &format!("/v1/admin/hosts/{host}"),
            Some(&hub.admin),
            None,
        )
        .await
        .text()
        .await
        .unwrap();
    assert!(
        serde_json::from_str::<Value>(&detail)
            .unwrap()
            .to_string()
            .contains("\\u001b]0;pwned"),
        "the store did not answer the raw text: {detail}"
    );

    let client = reqwest::Client::builder()
        .use_preconfigured_tls(
            bosun_hubd::tls::pinned_client_config(&hub.hub.fingerprint()).unwrap(),
        )
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let session = login(&hub, &client).await;
    for path in ["/ui/".to_owned(), format!("/ui/hosts/{host}")] {
        let resp = client
            .get(format!("{}{path}", hub.url))
            .header(header::COOKIE, &session)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        let body = resp.text().await.unwrap();
        let found = controls(&body);
        assert!(found.is_empty(), "{path} carries {found:?}");
        assert!(!body.contains("<b>"), "{path} has markup from the host");
        assert!(
            body.contains("pve-\\x1b]0;pwned\\x07\\x1b[2J\\u{9b}31m\\x7f&lt;b&gt;ALL GOOD")
                && body.contains("\\u{202e}dab\\u{2066}\\u{200b}"),
            "{path} does not show the host's name as inert text: {body}"
        );
    }
}
