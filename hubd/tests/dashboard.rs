//! The operator dashboard (`/ui/`): plain HTTP checks of the login, the session cookie, the
//! redirects, the security headers and the escaping of what agents report, and one run in
//! real headless Chromium over a live fleet that keeps its screenshots as
//! `target/test-artifacts/dashboard-*.png`.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

#[path = "dashboard/browser.rs"]
mod browser;
use crate::common;
#[path = "dashboard/fixture.rs"]
mod fixture;
#[path = "dashboard/pages.rs"]
mod pages;
#[path = "dashboard/triage.rs"]
mod triage;
#[path = "dashboard/walkthrough.rs"]
mod walkthrough;

use std::time::Duration;

use bosun_hubd::ui::{CONTENT_SECURITY_POLICY, COOKIE_NAME};
use bosun_proto::report::{BackupReport, GuestReport, GuestStatus, StateReport};
use reqwest::header::{self, HeaderMap};
use reqwest::{Method, Response, StatusCode};

use common::{TestHub, desired, full, report, send};

/// A client pinned to the hub that, like a browser's fetch of one URL, does not follow
/// redirects, so the tests see each 303.
fn ui_client(hub: &TestHub) -> reqwest::Client {
    reqwest::Client::builder()
        .use_preconfigured_tls(
            bosun_hubd::tls::pinned_client_config(&hub.hub.fingerprint()).unwrap(),
        )
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

async fn get(
    hub: &TestHub,
    client: &reqwest::Client,
    path: &str,
    cookie: Option<&str>,
) -> Response {
    let mut req = client.get(format!("{}{path}", hub.url));
    if let Some(cookie) = cookie {
        req = req.header(header::COOKIE, cookie);
    }
    req.send().await.unwrap()
}

/// Posts a urlencoded form with this hub's `Origin` (or the one given).
async fn post_form(
    hub: &TestHub,
    client: &reqwest::Client,
    path: &str,
    body: String,
    origin: Option<&str>,
    cookie: Option<&str>,
) -> Response {
    let mut req = client
        .post(format!("{}{path}", hub.url))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(body);
    if let Some(origin) = origin {
        req = req.header(header::ORIGIN, origin);
    }
    if let Some(cookie) = cookie {
        req = req.header(header::COOKIE, cookie);
    }
    req.send().await.unwrap()
}

fn token_form(token: &str) -> String {
    format!("token={}", token.replace('+', "%2B"))
}

fn location(resp: &Response) -> &str {
    resp.headers()
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

fn set_cookie(resp: &Response) -> String {
    resp.headers()
        .get(header::SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// Logs in; returns the `Cookie` header value that carries the session.
async fn login(hub: &TestHub, client: &reqwest::Client) -> String {
    let resp = post_form(
        hub,
        client,
        "/ui/login",
        token_form(&hub.admin),
        Some(&hub.url),
        None,
    )
    .await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&resp), "/ui/");
    let cookie = set_cookie(&resp);
    cookie.split(';').next().unwrap().to_owned()
}

#[tokio::test]
async fn an_unauthenticated_browser_is_sent_to_the_login_page() {
    let hub = TestHub::start().await;
    let client = ui_client(&hub);
    let (host, _) = hub.enroll("pve-one").await;
    for path in [
        "/ui/".to_owned(),
        format!("/ui/hosts/{host}"),
        "/ui/hosts/not-a-uuid".to_owned(),
        "/ui/alerts".to_owned(),
        "/ui/events".to_owned(),
        "/ui/events?host=nonsense".to_owned(),
        "/ui/no-such-page".to_owned(),
    ] {
        let resp = get(&hub, &client, &path, None).await;
        assert_eq!(resp.status(), StatusCode::SEE_OTHER, "{path}");
        assert_eq!(location(&resp), "/ui/login", "{path}");
        let body = resp.text().await.unwrap();
        assert!(!body.contains("pve-one"), "{path} leaked: {body}");
    }
    let resp = get(&hub, &client, "/", None).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&resp), "/ui/");
    let resp = get(&hub, &client, "/ui/login", None).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let body = resp.text().await.unwrap();
    assert!(
        body.contains(r#"<form method="post" action="/ui/login">"#),
        "{body}"
    );
    // A forged session is no session.
    let forged = format!("{COOKIE_NAME}={}", "A".repeat(43));
    let resp = get(&hub, &client, "/ui/", Some(&forged)).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn the_login_sets_a_strict_session_cookie_and_logout_ends_it() {
    let hub = TestHub::start().await;
    let client = ui_client(&hub);
    hub.enroll("pve-one").await;

    let wrong = post_form(
        &hub,
        &client,
        "/ui/login",
        token_form("bsa_not-the-token"),
        Some(&hub.url),
        None,
    )
    .await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(wrong.headers().get(header::SET_COOKIE).is_none());
    assert!(
        wrong
            .text()
            .await
            .unwrap()
            .contains("not a valid operator token of this hub")
    );

    let resp = post_form(
        &hub,
        &client,
        "/ui/login",
        token_form(&hub.admin),
        Some(&hub.url),
        None,
    )
    .await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&resp), "/ui/");
    let cookie = set_cookie(&resp);
    let attributes: Vec<&str> = cookie.split(';').map(str::trim).collect();
    for wanted in [
        "HttpOnly",
        "Secure",
        "SameSite=Strict",
        "Path=/",
        "Max-Age=43200",
    ] {
        assert!(attributes.contains(&wanted), "{wanted} missing: {cookie}");
    }
    assert!(!cookie.contains(&hub.admin), "the token is not the session");
    let session = attributes[0].to_owned();
    assert!(session.starts_with(&format!("{COOKIE_NAME}=")));

    let page = get(&hub, &client, "/ui/", Some(&session)).await;
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.text().await.unwrap().contains("pve-one"));
    let resp = get(&hub, &client, "/ui/login", Some(&session)).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&resp), "/ui/");

    let resp = post_form(
        &hub,
        &client,
        "/ui/logout",
        String::new(),
        Some(&hub.url),
        Some(&session),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&resp), "/ui/login");
    assert!(set_cookie(&resp).contains("Max-Age=0"));
    let resp = get(&hub, &client, "/ui/", Some(&session)).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER, "the session ended");
}

/// Any operator token may log in, the login is an event naming it, and a session ends when
/// its token is revoked or rotated.
#[tokio::test]
async fn a_viewer_logs_in_and_its_session_ends_with_its_token() {
    let hub = TestHub::start().await;
    let client = ui_client(&hub);
    let mut sessions = Vec::new();
    for name in ["watcher", "rotated"] {
        let resp = hub
            .admin(
                reqwest::Method::POST,
                "/v1/admin/tokens",
                Some(serde_json::json!({ "name": name, "role": "viewer" })),
            )
            .await;
        assert_eq!(resp.status(), StatusCode::CREATED);
        let created: serde_json::Value = resp.json().await.unwrap();
        let token = created["token"].as_str().unwrap().to_owned();
        let resp = post_form(
            &hub,
            &client,
            "/ui/login",
            token_form(&token),
            Some(&hub.url),
            None,
        )
        .await;
        assert_eq!(resp.status(), StatusCode::SEE_OTHER, "{name}");
        let cookie = set_cookie(&resp);
        let session = cookie.split(';').next().unwrap().to_owned();
        let page = get(&hub, &client, "/ui/", Some(&session)).await;
        assert_eq!(page.status(), StatusCode::OK, "{name}");
        sessions.push(session);
    }
    let events: Vec<serde_json::Value> = hub
        .admin(reqwest::Method::GET, "/v1/admin/events", None)
        .await
        .json()
        .await
        .unwrap();
    let logins: Vec<&str> = events
        .iter()
        .filter(|e| e["kind"] == "dashboard_login")
        .map(|e| e["detail"]["by"].as_str().unwrap())
        .collect();
    // Newest first, as every list of the admin API.
    assert_eq!(logins, ["rotated", "watcher"]);

    for (name, action) in [("watcher", "revoke"), ("rotated", "rotate")] {
        let resp = hub
            .admin(
                reqwest::Method::POST,
                &format!("/v1/admin/tokens/{name}/{action}"),
                None,
            )
            .await;
        assert_eq!(resp.status(), StatusCode::OK, "{action}");
    }
    for session in &sessions {
        let resp = get(&hub, &client, "/ui/alerts", Some(session)).await;
        assert_eq!(resp.status(), StatusCode::SEE_OTHER);
        assert_eq!(location(&resp), "/ui/login");
    }
}

#[tokio::test]
async fn a_session_expires_after_twelve_hours_on_the_hubs_clock() {
    let hub = TestHub::start().await;
    let client = ui_client(&hub);
    let session = login(&hub, &client).await;
    hub.clock.advance(Duration::from_secs(12 * 3600 - 1));
    let resp = get(&hub, &client, "/ui/alerts", Some(&session)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    hub.clock.advance(Duration::from_secs(2));
    let resp = get(&hub, &client, "/ui/alerts", Some(&session)).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&resp), "/ui/login");
}

#[tokio::test]
async fn login_and_logout_need_this_hubs_origin_and_a_small_form() {
    let hub = TestHub::start().await;
    let client = ui_client(&hub);
    let form = token_form(&hub.admin);
    for origin in [None, Some("https://evil.example"), Some("null")] {
        let resp = post_form(&hub, &client, "/ui/login", form.clone(), origin, None).await;
        assert_eq!(resp.status(), StatusCode::FORBIDDEN, "{origin:?}");
        assert!(resp.headers().get(header::SET_COOKIE).is_none());
    }
    let huge = format!("{form}&pad={}", "x".repeat(8 * 1024));
    let resp = post_form(&hub, &client, "/ui/login", huge, Some(&hub.url), None).await;
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let resp = client
        .post(format!("{}/ui/login", hub.url))
        .header(header::ORIGIN, &hub.url)
        .json(&serde_json::json!({ "token": hub.admin }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let resp = post_form(
        &hub,
        &client,
        "/ui/login",
        "tok=1".into(),
        Some(&hub.url),
        None,
    )
    .await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);

    // A logout posted from elsewhere does not end the session.
    let session = login(&hub, &client).await;
    let resp = post_form(
        &hub,
        &client,
        "/ui/logout",
        String::new(),
        Some("https://evil.example"),
        Some(&session),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    let resp = get(&hub, &client, "/ui/", Some(&session)).await;
    assert_eq!(resp.status(), StatusCode::OK);
}

#[tokio::test]
async fn failed_logins_run_dry_and_the_admin_api_keeps_working() {
    let hub = TestHub::start().await;
    // The guesser on an address of its own; the admin API is called from 127.0.0.1.
    let client = reqwest::Client::builder()
        .use_preconfigured_tls(
            bosun_hubd::tls::pinned_client_config(&hub.hub.fingerprint()).unwrap(),
        )
        .redirect(reqwest::redirect::Policy::none())
        .local_address(std::net::IpAddr::from([127, 0, 0, 5]))
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    for attempt in 0..10 {
        let resp = post_form(
            &hub,
            &client,
            "/ui/login",
            token_form(&format!("bsa_guess{attempt}")),
            Some(&hub.url),
            None,
        )
        .await;
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "attempt {attempt}");
    }
    for token in ["bsa_guess10", hub.admin.as_str()] {
        let resp = post_form(
            &hub,
            &client,
            "/ui/login",
            token_form(token),
            Some(&hub.url),
            None,
        )
        .await;
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        let wait: u64 = resp.headers()[header::RETRY_AFTER]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=6).contains(&wait), "{wait}");
    }
    let resp = hub.admin(Method::GET, "/v1/admin/hosts", None).await;
    assert_eq!(resp.status(), StatusCode::OK);
    // The guesses came from 127.0.0.5: an operator on another address still logs in.
    let elsewhere = reqwest::Client::builder()
        .use_preconfigured_tls(
            bosun_hubd::tls::pinned_client_config(&hub.hub.fingerprint()).unwrap(),
        )
        .redirect(reqwest::redirect::Policy::none())
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let resp = post_form(
        &hub,
        &elsewhere,
        "/ui/login",
        token_form(&hub.admin),
        Some(&hub.url),
        None,
    )
    .await;
    assert_eq!(
        resp.status(),
        StatusCode::SEE_OTHER,
        "another address is not locked out"
    );
}

#[tokio::test]
async fn the_fleet_says_when_the_hub_suspects_its_own_silence() {
    let hub = TestHub::start_with(|config| config.dead_man.mass_min_hosts = 2).await;
    let client = ui_client(&hub);
    let mut hosts = Vec::new();
    for name in ["pve-one", "pve-two"] {
        let (host, key) = hub.enroll(name).await;
        send(&hub, host, &key, &full(&report())).await;
        hosts.push(host);
    }
    let session = login(&hub, &client).await;
    let calm = get(&hub, &client, "/ui/", Some(&session)).await;
    let calm = calm.text().await.unwrap();
    assert!(!calm.contains("id=\"hub-silence\"") && !calm.contains("id=\"overdue\""));

    // Both go silent at once: one hub-wide alert instead of one per host.
    hub.clock.advance(Duration::from_secs(200));
    let raised = hub.hub.sweep_once().await.unwrap();
    assert_eq!(raised.len(), 1, "{raised:?}");
    let fleet = get(&hub, &client, "/ui/", Some(&session))
        .await
        .text()
        .await
        .unwrap();
    assert!(fleet.contains("id=\"hub-silence\""), "{fleet}");
    assert!(fleet.contains("<strong>2 overdue: </strong>"), "{fleet}");
    for host in &hosts {
        assert!(fleet.contains(&format!("/ui/hosts/{host}")));
    }
    let alerts = get(&hub, &client, "/ui/alerts", Some(&session))
        .await
        .text()
        .await
        .unwrap();
    assert!(alerts.contains("hub_connectivity_suspected"), "{alerts}");
}

#[tokio::test]
async fn the_fleet_shows_a_planned_stop_as_stopped_not_overdue() {
    let hub = TestHub::start().await;
    let client = ui_client(&hub);
    let (host, key) = hub.enroll("pve-rebooting").await;
    let mut last = full(&report());
    last["stopping"] = true.into();
    send(&hub, host, &key, &last).await;
    let session = login(&hub, &client).await;
    // Ten minutes on: past the grace window, inside the stop bound.
    hub.clock.advance(Duration::from_secs(600));
    assert!(hub.hub.sweep_once().await.unwrap().is_empty());
    let fleet = get(&hub, &client, "/ui/", Some(&session))
        .await
        .text()
        .await
        .unwrap();
    assert!(
        fleet.contains("<span class=\"badge warn\">stopped</span>"),
        "{fleet}"
    );
    assert!(!fleet.contains("id=\"overdue\""), "{fleet}");
    assert!(fleet.contains("<dt>Stopped</dt><dd>1</dd>"), "{fleet}");
}

#[tokio::test]
async fn a_host_state_rolls_up_its_open_alerts_and_a_revoked_host_leaves_the_banner() {
    let hub = TestHub::start().await;
    let client = ui_client(&hub);
    let (calm, calm_key) = hub.enroll("pve-calm").await;
    let (broken, broken_key) = hub.enroll("pve-broken").await;
    let (gone, gone_key) = hub.enroll("pve-gone").await;
    send(&hub, calm, &calm_key, &full(&report())).await;
    send(&hub, gone, &gone_key, &full(&report())).await;
    // pve-broken polls on time, with a guest that failed to start too often.
    let with_broken_guest = StateReport {
        seq: 1,
        guests: vec![GuestReport {
            guest_id: Some(uuid::Uuid::new_v4()),
            vmid: 120,
            kind: bosun_proto::desired::GuestKind::Lxc,
            hostname: "shop".into(),
            status: GuestStatus::Broken,
            resources: None,
            controller_digest: None,
            controller_expected: None,
            addresses: Vec::new(),
        }],
        ..report()
    };
    send(&hub, broken, &broken_key, &full(&with_broken_guest)).await;
    // pve-gone falls silent past its grace window, is paged, and is revoked.
    hub.clock.advance(Duration::from_secs(200));
    send(&hub, calm, &calm_key, &full(&report())).await;
    send(&hub, broken, &broken_key, &full(&with_broken_guest)).await;
    hub.hub.sweep_once().await.unwrap();
    let resp = hub
        .admin(
            Method::POST,
            &format!("/v1/admin/hosts/{gone}/revoke"),
            None,
        )
        .await;
    assert!(resp.status().is_success(), "{:?}", resp.status());

    let session = login(&hub, &client).await;
    let fleet = get(&hub, &client, "/ui/", Some(&session))
        .await
        .text()
        .await
        .unwrap();
    let state_of = |host: uuid::Uuid| {
        let row = fleet
            .split(&format!("<tr data-host=\"{host}\">"))
            .nth(1)
            .unwrap_or_else(|| panic!("a row for {host}: {fleet}"));
        let cell = row.split("data-label=\"State\">").nth(1).unwrap();
        cell[..cell.find("</td>").unwrap()].to_owned()
    };
    assert_eq!(state_of(calm), "<span class=\"badge ok\">ok</span>");
    assert_eq!(
        state_of(broken),
        "<span class=\"badge danger\">critical</span>"
    );
    assert_eq!(state_of(gone), "<span class=\"badge muted\">revoked</span>");
    assert!(fleet.contains("<dt>Critical</dt><dd>1</dd>"), "{fleet}");
    assert!(
        !fleet.contains("id=\"overdue\""),
        "a revoked host is not overdue: {fleet}"
    );
    let page = get(
        &hub,
        &client,
        &format!("/ui/hosts/{broken}"),
        Some(&session),
    )
    .await
    .text()
    .await
    .unwrap();
    assert!(
        page.contains("pve-broken <span class=\"badge danger\">critical</span>"),
        "{page}"
    );

    // Acknowledged, the broken guest still shows, marked, and the host is a warning; a
    // silence of the host marks it too and keeps it from raising the host at all (decision
    // 0064).
    let open: Vec<serde_json::Value> = hub
        .admin(
            Method::GET,
            &format!("/v1/admin/alerts/open?host={broken}"),
            None,
        )
        .await
        .json()
        .await
        .unwrap();
    let ack = serde_json::json!({
        "host_id": broken, "kind": open[0]["kind"], "subject": open[0]["subject"],
        "note": "customer rebuilds it tonight"
    });
    let resp = hub
        .admin(Method::POST, "/v1/admin/alerts/ack", Some(ack))
        .await;
    assert_eq!(resp.status(), reqwest::StatusCode::OK);
    let page = get(
        &hub,
        &client,
        &format!("/ui/hosts/{broken}"),
        Some(&session),
    )
    .await
    .text()
    .await
    .unwrap();
    assert!(
        page.contains("pve-broken <span class=\"badge warn\">warning</span>"),
        "{page}"
    );
    assert!(
        page.contains("<span class=\"badge ok\">acknowledged</span>"),
        "{page}"
    );
    assert!(page.contains("customer rebuilds it tonight"), "{page}");
    let silence = serde_json::json!({
        "host_id": broken, "duration_seconds": 600, "reason": "rebuild"
    });
    let resp = hub
        .admin(Method::POST, "/v1/admin/alerts/silences", Some(silence))
        .await;
    assert_eq!(resp.status(), reqwest::StatusCode::CREATED);
    let page = get(
        &hub,
        &client,
        &format!("/ui/hosts/{broken}"),
        Some(&session),
    )
    .await
    .text()
    .await
    .unwrap();
    assert!(
        page.contains("pve-broken <span class=\"badge ok\">ok</span>"),
        "{page}"
    );
    assert!(
        page.contains("<span class=\"badge muted\">silenced #"),
        "{page}"
    );
}

const HOSTILE_HOST: &str = r#"<script>alert("host")</script>"#;
const HOSTILE_GUEST: &str = "<img src=x onerror=alert(1)>";
const HOSTILE_ERROR: &str = "</td></table><script>alert('backup')</script>";

#[tokio::test]
async fn what_agents_report_is_shown_as_text_never_as_markup() {
    let hub = TestHub::start().await;
    let client = ui_client(&hub);
    let (host, key) = hub.enroll(HOSTILE_HOST).await;
    let guest = uuid::Uuid::new_v4();
    let now = bosun_hubd::clock::Clock::now(&hub.clock);
    let hostile = StateReport {
        seq: 1,
        guests: vec![GuestReport {
            guest_id: Some(guest),
            vmid: 666,
            kind: bosun_proto::desired::GuestKind::Lxc,
            hostname: HOSTILE_GUEST.into(),
            status: GuestStatus::Running,
            resources: None,
            controller_digest: None,
            controller_expected: None,
            addresses: Vec::new(),
        }],
        last_backups: vec![BackupReport {
            guest_id: guest,
            target: "<b>target</b>".into(),
            finished_at: now,
            ok: false,
            error: Some(HOSTILE_ERROR.into()),
            ..BackupReport::default()
        }],
        verifications: vec![bosun_proto::verify::VerifyReport {
            guest_id: guest,
            tier: "<u>tier</u>".into(),
            finished_at: now,
            outcome: bosun_proto::verify::VerifyOutcome::Failed,
            duration_ms: 420,
            detail: "<i>chunk</i> corrupt".into(),
            last_ok_at: None,
            last_failed_at: Some(now),
            first_at: now,
        }],
        bulk_volumes: vec![
            hostile_bulk(
                guest,
                "media",
                Some("<s>usb</s>"),
                Some("<em>tar</em> failed"),
            ),
            hostile_bulk(guest, "downloads", None, None),
        ],
        ..report()
    };
    send(&hub, host, &key, &full(&hostile)).await;
    // Silent past its grace window: the overdue alert's message names the host.
    hub.clock.advance(Duration::from_secs(200));
    hub.hub.sweep_once().await.unwrap();

    let session = login(&hub, &client).await;
    for path in [
        "/ui/".to_owned(),
        format!("/ui/hosts/{host}"),
        "/ui/alerts".to_owned(),
        format!("/ui/events?host={host}"),
    ] {
        let resp = get(&hub, &client, &path, Some(&session)).await;
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        let body = resp.text().await.unwrap();
        assert!(!body.contains("<script"), "{path} has a script tag: {body}");
        assert!(!body.contains("<img"), "{path} has an img tag");
        assert!(!body.contains("<b>"), "{path} has a b tag");
        assert!(
            body.contains("&lt;script&gt;alert("),
            "{path} does not show the host name as text: {body}"
        );
        if !path.starts_with("/ui/events") {
            assert!(body.contains("&lt;script&gt;alert(&quot;host&quot;)&lt;/script&gt;"));
        }
    }
    let host_page = get(&hub, &client, &format!("/ui/hosts/{host}"), Some(&session))
        .await
        .text()
        .await
        .unwrap();
    assert!(host_page.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(host_page.contains("&lt;/td&gt;&lt;/table&gt;&lt;script&gt;"));
    // The PBS verification table shows the agent's tier and detail as text.
    assert!(host_page.contains("id=\"verifications\""), "{host_page}");
    assert!(
        host_page.contains("&lt;i&gt;chunk&lt;/i&gt; corrupt"),
        "{host_page}"
    );
    assert!(!host_page.contains("<i>chunk") && !host_page.contains("<u>tier"));
    // The bulk volume table: the signed target, the newest failure as text, and a volume the
    // plan signs no target for says it is not backed up.
    assert!(host_page.contains("id=\"bulk-volumes\""), "{host_page}");
    assert!(
        host_page.contains("&lt;s&gt;usb&lt;/s&gt;")
            && host_page.contains("&lt;em&gt;tar&lt;/em&gt; failed")
            && host_page.contains("no signed target: not backed up")
            && host_page.contains("bulk-media-2026_11_20-03_00_00.tar"),
        "{host_page}"
    );
    assert!(!host_page.contains("<em>tar") && !host_page.contains("<s>usb"));
}

/// A bulk volume of `guest`: archived to `signed` (with an archive) or unsigned, its newest
/// attempt failing with `error`; desired state asks for `<u>nas</u>`.
fn hostile_bulk(
    guest: uuid::Uuid,
    name: &str,
    signed: Option<&str>,
    error: Option<&str>,
) -> bosun_proto::report::BulkVolumeReport {
    bosun_proto::report::BulkVolumeReport {
        guest_id: guest,
        name: name.into(),
        path: format!("/srv/{name}"),
        size_gib: 10,
        class: None,
        target: Some("<b>bulk</b>".into()),
        storage_id: None,
        refused: None,
        backup: bosun_proto::desired::BulkBackup::Target {
            target: "<u>nas</u>".into(),
        },
        signed_target: signed.map(str::to_owned),
        last_archive: signed.map(|target| bosun_proto::report::BulkArchiveReport {
            at: "2026-11-20T03:00:00Z".parse().unwrap(),
            target: target.into(),
            name: format!("bulk-{name}-2026_11_20-03_00_00.tar"),
            size_bytes: 1 << 30,
            sha256: "ab".repeat(32),
        }),
        last_error: error.map(str::to_owned),
        not_archived: None,
    }
}

fn assert_security_headers(headers: &HeaderMap, what: &str) {
    let value = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("{what}: no {name}"))
            .to_owned()
    };
    let csp = value("content-security-policy");
    assert_eq!(csp, CONTENT_SECURITY_POLICY, "{what}");
    for directive in [
        "default-src 'none'",
        "frame-ancestors 'none'",
        "style-src 'self'",
    ] {
        assert!(csp.contains(directive), "{what}: {csp}");
    }
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("http"),
        "{what}: {csp}"
    );
    assert_eq!(value("x-frame-options"), "DENY", "{what}");
    assert_eq!(value("referrer-policy"), "no-referrer", "{what}");
    assert_eq!(value("cache-control"), "no-store", "{what}");
    assert_eq!(value("x-content-type-options"), "nosniff", "{what}");
}

/// Every `href="…"` and `src="…"` of a page points into the hub itself.
fn assert_no_external_references(body: &str, what: &str) {
    for attribute in ["href=\"", "src=\""] {
        for (at, _) in body.match_indices(attribute) {
            let value = &body[at + attribute.len()..];
            assert!(
                value.starts_with('/') && !value.starts_with("//"),
                "{what}: external reference {}",
                &value[..value.len().min(60)]
            );
        }
    }
    assert!(!body.contains("<script"), "{what} has a script");
    assert!(!body.contains(" style=\""), "{what} has inline style");
}

#[tokio::test]
async fn every_answer_carries_the_security_headers_and_no_outside_asset() {
    let hub = TestHub::start().await;
    let client = ui_client(&hub);
    let (host, _) = hub.enroll("pve-one").await;
    let session = login(&hub, &client).await;
    let checks = [
        ("/ui/login", None, StatusCode::OK),
        ("/ui/", None, StatusCode::SEE_OTHER),
        ("/", None, StatusCode::SEE_OTHER),
        ("/ui/static/dashboard.css", None, StatusCode::OK),
        ("/ui/", Some(&session), StatusCode::OK),
        ("/ui/alerts", Some(&session), StatusCode::OK),
        ("/ui/events", Some(&session), StatusCode::OK),
        ("/ui/no-such-page", Some(&session), StatusCode::NOT_FOUND),
        (
            "/ui/events?host=nonsense",
            Some(&session),
            StatusCode::BAD_REQUEST,
        ),
    ];
    for (path, cookie, status) in checks {
        let resp = get(&hub, &client, path, cookie.map(String::as_str)).await;
        assert_eq!(resp.status(), status, "{path}");
        assert_security_headers(resp.headers(), path);
        let body = resp.text().await.unwrap();
        if path != "/ui/static/dashboard.css" {
            assert_no_external_references(&body, path);
        }
    }
    let unknown = uuid::Uuid::new_v4();
    for path in [format!("/ui/hosts/{host}"), format!("/ui/hosts/{unknown}")] {
        let resp = get(&hub, &client, &path, Some(&session)).await;
        let expected = if path.contains(&host.to_string()) {
            StatusCode::OK
        } else {
            StatusCode::NOT_FOUND
        };
        assert_eq!(resp.status(), expected, "{path}");
        assert_security_headers(resp.headers(), &path);
        assert_no_external_references(&resp.text().await.unwrap(), &path);
    }
    let refused = post_form(&hub, &client, "/ui/login", token_form("x"), None, None).await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    assert_security_headers(refused.headers(), "refused login");
    let css = get(&hub, &client, "/ui/static/dashboard.css", None).await;
    assert_eq!(
        css.headers()[header::CONTENT_TYPE],
        "text/css; charset=utf-8"
    );
    assert!(
        !css.text().await.unwrap().contains("url("),
        "the stylesheet loads nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_in_headless_chromium() {
    tokio::time::timeout(Duration::from_secs(240), walkthrough::run())
        .await
        .expect("the browser walk-through finishes within 240 s");
}

#[tokio::test]
async fn the_host_page_shows_its_newest_audit_entries_and_pages_to_older_ones() {
    let hub = TestHub::start().await;
    let client = ui_client(&hub);
    let (host, key) = hub.enroll("pve-audited").await;
    let (quiet, _) = hub.enroll("pve-quiet").await;
    let now = bosun_hubd::clock::Clock::now(&hub.clock);
    let audit = (1..=25_i64)
        .map(|seq| bosun_proto::report::AuditEntry {
            seq: seq.unsigned_abs(),
            at: now - jiff::SignedDuration::from_mins(30 - seq),
            action: if seq == 25 {
                "<script>alert(1)</script>".into()
            } else {
                "backup.finished".into()
            },
            detail: serde_json::json!({
                "guest_id": "0b6f4f2e-6c1a-4d6e-9a51-2f0c8d3e7a10", "vmid": 101,
                "detail": { "n": seq }
            }),
        })
        .collect();
    send(&hub, host, &key, &full(&StateReport { audit, ..report() })).await;
    let session = login(&hub, &client).await;
    let page = |path: String| {
        let (hub, client, session) = (&hub, &client, &session);
        async move {
            let resp = get(hub, client, &path, Some(session)).await;
            assert_eq!(resp.status(), StatusCode::OK, "{path}");
            resp.text().await.unwrap()
        }
    };
    let shown = |body: &str| -> Vec<i64> {
        (1..=25)
            .filter(|n| body.contains(&format!("vm 101 guest 0b6f4f2e n={n}</td>")))
            .collect()
    };

    // The newest 20, as text, and a link to the older ones.
    let newest = page(format!("/ui/hosts/{host}")).await;
    assert!(newest.contains("Audit trail"), "{newest}");
    assert_eq!(shown(&newest), (6..=25).collect::<Vec<_>>());
    assert!(newest.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(!newest.contains("Newest entries"));
    let marker = format!("href=\"/ui/hosts/{host}?audit_before=");
    let start = newest.find(&marker).expect("a link to older entries") + marker.len();
    let cursor = &newest[start..start + newest[start..].find('#').unwrap()];

    // The older page: the rest, a way back, no further link.
    let older = page(format!("/ui/hosts/{host}?audit_before={cursor}")).await;
    assert_eq!(shown(&older), (1..=5).collect::<Vec<_>>());
    assert!(older.contains("Newest entries"));
    assert!(!older.contains("Older entries"));

    let none = page(format!("/ui/hosts/{quiet}")).await;
    assert!(none.contains("No audit entries."));
    assert!(!none.contains("Older entries"));

    let resp = get(
        &hub,
        &client,
        &format!("/ui/hosts/{host}?audit_before=yesterday"),
        Some(&session),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_field_that_cannot_be_applied_is_never_shown_converged() {
    let hub = TestHub::start().await;
    let client = ui_client(&hub);
    let (host, key) = hub.enroll("pve-shrink").await;
    // Desired state asks acme-app for a 32 GiB root disk; the guest has 40 GiB, and the host
    // says it converged to generation 1.
    let resp = hub
        .admin(
            Method::PUT,
            &format!("/v1/admin/hosts/{host}/desired"),
            Some(desired()),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let spec: bosun_proto::desired::DesiredState =
        serde_json::from_value(desired()).expect("the shared desired document");
    let app = &spec.guests[0];
    let larger = StateReport {
        seq: 1,
        guests: vec![GuestReport {
            guest_id: Some(app.guest_id),
            vmid: 101,
            kind: bosun_proto::desired::GuestKind::Lxc,
            hostname: app.hostname.clone(),
            status: GuestStatus::Running,
            resources: Some(bosun_proto::desired::GuestResources {
                rootfs_gib: app.resources.rootfs_gib + 8,
                ..app.resources
            }),
            controller_digest: None,
            controller_expected: None,
            addresses: Vec::new(),
        }],
        ..report()
    };
    let mut poll = full(&larger);
    poll["known_generation"] = 1.into();
    poll["applied_generation"] = 1.into();
    send(&hub, host, &key, &poll).await;

    let session = login(&hub, &client).await;
    let page = get(&hub, &client, &format!("/ui/hosts/{host}"), Some(&session))
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains("NOT IN SYNC"), "{page}");
    assert!(!page.contains(">in sync<"), "{page}");
    assert!(
        page.contains("rootfs_gib: the root disk is 40 GiB and is never shrunk"),
        "{page}"
    );
}

#[tokio::test]
async fn what_a_host_refuses_is_listed_escaped_and_names_read_as_an_operator_types_them() {
    let hub = TestHub::start().await;
    let client = ui_client(&hub);
    let (host, key) = hub.enroll("pve-refuses").await;
    let pbs = format!("backup@pbs@pbs.example:store1#{}", ["ab"; 32].join(":"));
    let mut doc = desired();
    doc["storage"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "type": "pbs", "durable_id": pbs, "class": "slow", "role": "vzdump-target",
            "policy": {}, "state": "attached", "label": "offsite-pbs",
        }));
    let resp = hub
        .admin(
            Method::PUT,
            &format!("/v1/admin/hosts/{host}/desired"),
            Some(doc),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK, "{:?}", resp.text().await);
    let mut refusing: serde_json::Value = serde_json::to_value(report()).unwrap();
    refusing["seq"] = 1.into();
    refusing["storage"] = serde_json::json!([{
        "durable_id": pbs, "storage_id": "bosun-pbs-1", "status": "mounted",
    }]);
    refusing["refused"] = serde_json::json!([{
        "kind": "storage_target", "name": "nas.hub.example:/exfil",
        "reason": "not in the plan\u{1b}[31m",
    }]);
    let mut poll = full(&serde_json::from_value(refusing).unwrap());
    poll["known_generation"] = 1.into();
    send(&hub, host, &key, &poll).await;

    let session = login(&hub, &client).await;
    let page = get(&hub, &client, &format!("/ui/hosts/{host}"), Some(&session))
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains("NOT IN SYNC"), "{page}");
    assert!(
        page.contains("storage target nas.hub.example:/exfil: not in the plan"),
        "{page}"
    );
    assert!(!page.contains('\u{1b}'), "the reason is escaped: {page}");
    // The PBS target by its label; its whole identity only in the title.
    assert!(page.contains(">offsite-pbs<"), "{page}");
    assert!(!page.contains(&format!(">{pbs}<")), "{page}");
    // The host's summary counts the refusal (in either store): the admin list carries it and
    // the fleet page says the host is not in sync, as its own page does.
    let listed: serde_json::Value = hub
        .admin(Method::GET, "/v1/admin/hosts", None)
        .await
        .json()
        .await
        .unwrap();
    let summary = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["host_id"] == serde_json::json!(host))
        .unwrap();
    assert_eq!(summary["refused"], 1, "{summary}");
    let fleet = get(&hub, &client, "/ui/", Some(&session))
        .await
        .text()
        .await
        .unwrap();
    let row = &fleet[fleet.find(&format!("data-host=\"{host}\"")).unwrap()..];
    let generation = &row[row.find("data-label=\"Generation\"").unwrap()..];
    let generation = &generation[..generation.find("</td>").unwrap()];
    assert!(generation.contains("NOT IN SYNC"), "{generation}");

    // The events page names the host, not its id.
    let events = get(&hub, &client, "/ui/events", Some(&session))
        .await
        .text()
        .await
        .unwrap();
    assert!(events.contains(">pve-refuses<"), "{events}");
}

/// Every id the host page shows is whole or the shortest prefix that tells the jobs apart, and
/// a prefix it shows is taken back by the admin API (issue 45 item 3).
#[tokio::test]
async fn ids_on_the_host_page_are_unique_prefixes_the_api_takes_back() {
    let hub = TestHub::start().await;
    let client = ui_client(&hub);
    let (host, _key) = hub.enroll("pve-prefixes").await;
    // Three jobs sharing their first block; two of them all but their last digit.
    let ids = [
        "01a213eb-0000-4000-8000-000000000001",
        "01a213eb-0000-4000-8000-000000000002",
        "01a213eb-7000-4000-8000-000000000003",
    ]
    .map(|id| uuid::Uuid::parse_str(id).unwrap());
    for job in ids {
        let resp = hub
            .admin(
                Method::POST,
                &format!("/v1/admin/hosts/{host}/jobs"),
                Some(common::signed_job(host, job)),
            )
            .await;
        assert!(resp.status().is_success(), "{:?}", resp.text().await);
    }
    let session = login(&hub, &client).await;
    let page = get(&hub, &client, &format!("/ui/hosts/{host}"), Some(&session))
        .await
        .text()
        .await
        .unwrap();
    let shown: Vec<String> = ids
        .iter()
        .map(|id| {
            let cell = format!("title=\"{id}\">");
            let at = page.find(&cell).unwrap_or_else(|| panic!("{id}: {page}")) + cell.len();
            page[at..].split('<').next().unwrap().to_owned()
        })
        .collect();
    for (id, text) in ids.iter().zip(&shown) {
        assert!(id.to_string().starts_with(text.as_str()), "{text} of {id}");
        let others = ids.iter().filter(|o| *o != id);
        for other in others {
            assert!(
                !other.to_string().starts_with(text.as_str()),
                "{text}: {shown:?}"
            );
        }
    }
    assert!(!page.contains(">01a213eb<"), "{page}");

    // What the pages show, the API takes back: the host by its first block, a job by the
    // prefix shown; a prefix of two jobs is refused naming both.
    let first = &host.to_string()[..8];
    // The pages take a host's prefix too; an unknown one is not found.
    let by_prefix = get(&hub, &client, &format!("/ui/hosts/{first}"), Some(&session)).await;
    assert_eq!(by_prefix.status(), StatusCode::OK);
    assert!(by_prefix.text().await.unwrap().contains("pve-prefixes"));
    let events = get(
        &hub,
        &client,
        &format!("/ui/events?host={first}"),
        Some(&session),
    )
    .await;
    assert_eq!(events.status(), StatusCode::OK);
    let unknown = if first.starts_with('f') {
        "0000abcd"
    } else {
        "ffffabcd"
    };
    let missing = get(
        &hub,
        &client,
        &format!("/ui/hosts/{unknown}"),
        Some(&session),
    )
    .await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let resp = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{first}"), None)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let resp = hub
        .admin(
            Method::POST,
            &format!("/v1/admin/hosts/{first}/jobs/01a213eb/cancel"),
            None,
        )
        .await;
    assert_eq!(resp.status(), StatusCode::CONFLICT);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["code"], "ambiguous_id", "{body}");
    let message = body["message"].as_str().unwrap();
    for id in ids {
        assert!(message.contains(&id.to_string()), "{message}");
    }
    assert!(
        message.contains("force-backup on pve-prefixes"),
        "{message}"
    );
    let resp = hub
        .admin(
            Method::POST,
            &format!("/v1/admin/hosts/{first}/jobs/{}/cancel", shown[2]),
            None,
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK, "{:?}", resp.text().await);
    let none = if first.starts_with('f') {
        "0000"
    } else {
        "ffff"
    };
    let resp = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{none}"), None)
        .await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
}
