//! Acknowledging and silencing an alert from the alerts page, against a real hub over TLS: an
//! operator's form post writes the very event `bosunctl alerts ack` writes (its token as
//! `by`); a post without the session's form token, with another session's, or from another
//! site is refused and changes nothing; a viewer sees the controls disabled and its post is
//! refused by the hub too.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{fixture, get, location, post_form, set_cookie, token_form, ui_client};
use crate::common::TestHub;

/// Makes an operator token of `role` named `name`; gives the token.
async fn token(hub: &TestHub, name: &str, role: &str) -> String {
    let resp = hub
        .admin(
            Method::POST,
            "/v1/admin/tokens",
            Some(json!({ "name": name, "role": role })),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::CREATED);
    let created: Value = resp.json().await.unwrap();
    created["token"].as_str().unwrap().to_owned()
}

/// Logs in with `token`; gives the `Cookie` value of the session.
async fn login_as(hub: &TestHub, client: &reqwest::Client, token: &str) -> String {
    let resp = post_form(
        hub,
        client,
        "/ui/login",
        token_form(token),
        Some(&hub.url),
        None,
    )
    .await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    set_cookie(&resp).split(';').next().unwrap().to_owned()
}

/// The alerts page as `session` sees it.
async fn alerts_page(hub: &TestHub, client: &reqwest::Client, session: &str) -> String {
    let resp = get(hub, client, "/ui/alerts", Some(session)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    resp.text().await.unwrap()
}

/// The form token the page's forms carry.
fn form_token(page: &str) -> String {
    let marker = r#"name="csrf" value=""#;
    let at = page.find(marker).expect("a form token on the page") + marker.len();
    page[at..].split('"').next().unwrap().to_owned()
}

fn encode(text: &str) -> String {
    let pair = serde_urlencoded::to_string([("v", text)]).unwrap();
    pair["v=".len()..].to_owned()
}

/// The form body acknowledging `alert` with `note`, carrying `csrf` when given.
fn ack_form(alert: &Value, note: &str, csrf: Option<&str>) -> String {
    let mut body = format!(
        "host_id={}&kind={}&subject={}&note={}",
        alert["host_id"].as_str().unwrap(),
        alert["kind"].as_str().unwrap(),
        encode(alert["subject"].as_str().unwrap()),
        encode(note)
    );
    if let Some(csrf) = csrf {
        body = format!("csrf={}&{body}", encode(csrf));
    }
    body
}

async fn open_alerts(hub: &TestHub) -> Vec<Value> {
    hub.admin(Method::GET, "/v1/admin/alerts/open", None)
        .await
        .json()
        .await
        .unwrap()
}

async fn events(hub: &TestHub, kind: &str) -> Vec<Value> {
    let all: Vec<Value> = hub
        .admin(Method::GET, "/v1/admin/events", None)
        .await
        .json()
        .await
        .unwrap();
    all.into_iter().filter(|e| e["kind"] == kind).collect()
}

/// An event as the log keeps it, without its number, time and actor: what the CLI's and the
/// dashboard's acknowledgement of one alert must share.
fn shape(event: &Value) -> Value {
    let mut event = event.clone();
    let map = event.as_object_mut().unwrap();
    for key in ["seq", "at"] {
        map.remove(key);
    }
    map["detail"].as_object_mut().unwrap().remove("by");
    event
}

#[tokio::test]
async fn an_operator_acknowledges_and_silences_from_the_alerts_page_as_the_cli_does() {
    let fleet = fixture::fleet().await;
    let hub = &fleet.hub;
    let client = ui_client(hub);
    let desk = token(hub, "desk", "operator").await;
    let session = login_as(hub, &client, &desk).await;
    let page = alerts_page(hub, &client, &session).await;
    assert!(
        page.contains(r#"action="/ui/alerts/ack""#)
            && page.contains(r#"action="/ui/alerts/silence""#),
        "{page}"
    );
    assert!(
        !page.contains("disabled"),
        "an operator's controls work: {page}"
    );
    let csrf = form_token(&page);

    let open = open_alerts(hub).await;
    let lost = open
        .iter()
        .find(|a| a["kind"] == "storage_lost")
        .expect("alpha's storage_lost is open")
        .clone();
    let resp = post_form(
        hub,
        &client,
        "/ui/alerts/ack",
        ack_form(&lost, "replacing the USB disk", Some(&csrf)),
        Some(&hub.url),
        Some(&session),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&resp), "/ui/alerts");
    let from_page = events(hub, "alert_acknowledged").await;
    assert_eq!(from_page.len(), 1, "{from_page:?}");
    assert_eq!(from_page[0]["detail"]["by"], "desk", "{from_page:?}");
    let acked = open_alerts(hub).await;
    let lost_now = acked.iter().find(|a| a["kind"] == "storage_lost").unwrap();
    assert_eq!(lost_now["acknowledged"]["note"], "replacing the USB disk");

    // The CLI's call for the same alert and note: the same event, but for who acted.
    let resp = hub
        .admin(
            Method::POST,
            "/v1/admin/alerts/ack",
            Some(json!({
                "host_id": lost["host_id"], "kind": lost["kind"], "subject": lost["subject"],
                "note": "replacing the USB disk",
            })),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let both = events(hub, "alert_acknowledged").await;
    assert_eq!(both.len(), 2, "{both:?}");
    // Newest first.
    let (cli, page_event) = (&both[0], &both[1]);
    assert_ne!(cli["detail"]["by"], "desk");
    assert!(cli["detail"]["by"].is_string(), "{cli}");
    assert_eq!(shape(cli), shape(page_event));

    // A silence from the page: 4 hours, for this kind and subject, named by the token.
    let failed = open
        .iter()
        .find(|a| a["kind"] == "backup_failed")
        .expect("alpha's backup_failed is open");
    let body = format!(
        "csrf={}&host_id={}&kind=backup_failed&subject={}&hours=4&reason={}",
        encode(&csrf),
        failed["host_id"].as_str().unwrap(),
        encode(failed["subject"].as_str().unwrap()),
        encode("offsite maintenance")
    );
    let resp = post_form(
        hub,
        &client,
        "/ui/alerts/silence",
        body,
        Some(&hub.url),
        Some(&session),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let silences: Vec<Value> = hub
        .admin(Method::GET, "/v1/admin/alerts/silences", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(silences.len(), 1, "{silences:?}");
    assert_eq!(silences[0]["kind"], "backup_failed");
    assert_eq!(silences[0]["reason"], "offsite maintenance");
    let silenced = events(hub, "alert_silenced").await;
    assert_eq!(silenced.len(), 1, "{silenced:?}");
    assert_eq!(silenced[0]["detail"]["by"], "desk");
    let page = alerts_page(hub, &client, &session).await;
    assert!(
        page.contains("acknowledged") && page.contains("silenced #"),
        "{page}"
    );

    // A silence the form does not offer is refused, and so is an unknown alert.
    let odd = format!(
        "csrf={}&host_id={}&kind=backup_failed&subject=x&hours=3&reason=r",
        encode(&csrf),
        failed["host_id"].as_str().unwrap()
    );
    let resp = post_form(
        hub,
        &client,
        "/ui/alerts/silence",
        odd,
        Some(&hub.url),
        Some(&session),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let mut ghost = lost.clone();
    ghost["kind"] = json!("disk_failing");
    let resp = post_form(
        hub,
        &client,
        "/ui/alerts/ack",
        ack_form(&ghost, "n", Some(&csrf)),
        Some(&hub.url),
        Some(&session),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_post_without_this_sessions_form_token_or_origin_is_refused() {
    let fleet = fixture::fleet().await;
    let hub = &fleet.hub;
    let client = ui_client(hub);
    let session = login_as(hub, &client, &token(hub, "desk", "operator").await).await;
    let other = login_as(hub, &client, &token(hub, "other", "operator").await).await;
    let csrf = form_token(&alerts_page(hub, &client, &session).await);
    let others = form_token(&alerts_page(hub, &client, &other).await);
    assert_ne!(csrf, others, "each session has its own form token");
    let open = open_alerts(hub).await;
    let lost = open.iter().find(|a| a["kind"] == "storage_lost").unwrap();

    for (what, body, origin) in [
        (
            "no form token",
            ack_form(lost, "n", None),
            Some(hub.url.clone()),
        ),
        (
            "an empty one",
            ack_form(lost, "n", Some("")),
            Some(hub.url.clone()),
        ),
        (
            "a wrong one",
            ack_form(lost, "n", Some(&"A".repeat(43))),
            Some(hub.url.clone()),
        ),
        (
            "another session's",
            ack_form(lost, "n", Some(&others)),
            Some(hub.url.clone()),
        ),
        (
            "another site's",
            ack_form(lost, "n", Some(&csrf)),
            Some("https://evil.example".to_owned()),
        ),
        ("no origin", ack_form(lost, "n", Some(&csrf)), None),
    ] {
        let resp = post_form(
            hub,
            &client,
            "/ui/alerts/ack",
            body,
            origin.as_deref(),
            Some(&session),
        )
        .await;
        assert_eq!(resp.status(), StatusCode::FORBIDDEN, "{what}");
    }
    // Without a session there is no page at all.
    let resp = post_form(
        hub,
        &client,
        "/ui/alerts/ack",
        ack_form(lost, "n", Some(&csrf)),
        Some(&hub.url),
        None,
    )
    .await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&resp), "/ui/login");
    assert!(events(hub, "alert_acknowledged").await.is_empty());
    let still = open_alerts(hub).await;
    assert!(
        still.iter().all(|a| a["acknowledged"].is_null()),
        "{still:?}"
    );
}

#[tokio::test]
async fn a_viewer_sees_the_controls_disabled_and_is_refused_by_the_hub() {
    let fleet = fixture::fleet().await;
    let hub = &fleet.hub;
    let client = ui_client(hub);
    let session = login_as(hub, &client, &token(hub, "watcher", "viewer").await).await;
    let page = alerts_page(hub, &client, &session).await;
    assert!(
        page.contains(r#"<button type="submit" disabled>Acknowledge</button>"#)
            && page.contains(r#"<button type="submit" disabled>Silence</button>"#),
        "{page}"
    );
    assert!(
        page.contains("A viewer token cannot acknowledge or silence"),
        "{page}"
    );
    let csrf = form_token(&page);
    let open = open_alerts(hub).await;
    let lost = open.iter().find(|a| a["kind"] == "storage_lost").unwrap();
    let resp = post_form(
        hub,
        &client,
        "/ui/alerts/ack",
        ack_form(lost, "n", Some(&csrf)),
        Some(&hub.url),
        Some(&session),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    assert!(resp.text().await.unwrap().contains("`viewer` token"));
    let body = format!(
        "csrf={}&host_id={}&kind=storage_lost&subject={}&hours=1&reason=r",
        encode(&csrf),
        lost["host_id"].as_str().unwrap(),
        encode(lost["subject"].as_str().unwrap())
    );
    let resp = post_form(
        hub,
        &client,
        "/ui/alerts/silence",
        body,
        Some(&hub.url),
        Some(&session),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    assert!(events(hub, "alert_acknowledged").await.is_empty());
    assert!(events(hub, "alert_silenced").await.is_empty());
}
