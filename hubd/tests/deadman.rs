//! Dead-man's switch on the manual clock, the mass-silence guard, webhook retries, metrics.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode as AxumStatus;
use common::TestHub;
use parking_lot::Mutex;
use reqwest::{Method, StatusCode};
use serde_json::Value;
use uuid::Uuid;

async fn alerts(hub: &TestHub) -> Vec<Value> {
    hub.admin(Method::GET, "/v1/admin/alerts", None)
        .await
        .json()
        .await
        .unwrap()
}

async fn host_liveness(hub: &TestHub, host: uuid::Uuid) -> String {
    let body: Value = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}"), None)
        .await
        .json()
        .await
        .unwrap();
    body["liveness"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_silent_host_goes_overdue_alerts_once_and_recovers() {
    let hub = TestHub::start().await;
    let (quiet, quiet_key) = hub.enroll("pve-quiet").await;
    let (chatty, chatty_key) = hub.enroll("pve-chatty").await;
    hub.poll_json(quiet, &quiet_key, 0).await;
    hub.poll_json(chatty, &chatty_key, 0).await;
    assert_eq!(host_liveness(&hub, quiet).await, "ok");

    // Within the grace window (3 × 30 s): nothing.
    hub.clock.advance(Duration::from_secs(89));
    hub.poll_json(chatty, &chatty_key, 0).await;
    assert!(hub.hub.sweep_once().await.unwrap().is_empty());

    // Past it: overdue and alerted at once. Two hosts are too few for a mass silence
    // (`mass_min_hosts` = 5), so the alert is not held for the silence window.
    hub.clock.advance(Duration::from_secs(2));
    hub.poll_json(chatty, &chatty_key, 0).await;
    let raised = hub.hub.sweep_once().await.unwrap();
    assert_eq!(host_liveness(&hub, quiet).await, "overdue");
    assert_eq!(raised.len(), 1);
    assert_eq!(raised[0].kind.as_str(), "host_overdue");
    assert_eq!(raised[0].host_id, Some(quiet));
    // One alert per transition: further sweeps stay quiet.
    hub.clock.advance(Duration::from_secs(60));
    hub.poll_json(chatty, &chatty_key, 0).await;
    assert!(hub.hub.sweep_once().await.unwrap().is_empty());

    // The host polls again: one recovery alert, delivered with the poll.
    hub.poll_json(quiet, &quiet_key, 0).await;
    assert_eq!(host_liveness(&hub, quiet).await, "ok");
    // Every list of the admin API is newest first (decision 0069).
    let listed = alerts(&hub).await;
    let kinds: Vec<&str> = listed.iter().map(|a| a["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["host_recovered", "host_overdue"]);

    let events: Vec<Value> = hub
        .admin(Method::GET, &format!("/v1/admin/events?host={quiet}"), None)
        .await
        .json()
        .await
        .unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert!(kinds.starts_with(&["recovered", "overdue"]), "{kinds:?}");

    let metrics = hub.metrics().await;
    assert!(
        metrics.contains("bosun_hub_alerts_total{kind=\"host_overdue\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("bosun_hub_hosts{status=\"active\"} 2"),
        "{metrics}"
    );
    assert!(metrics.contains("bosun_hub_hosts_overdue 0"), "{metrics}");
    assert!(
        metrics.contains("bosun_hub_poll_duration_seconds_count"),
        "{metrics}"
    );
}

#[tokio::test]
async fn most_hosts_going_silent_raises_one_hub_alert() {
    let hub = TestHub::start().await;
    let mut hosts = Vec::new();
    for n in 0..8 {
        let (host, key) = hub.enroll(&format!("pve-{n}")).await;
        hub.poll_json(host, &key, 0).await;
        hosts.push((host, key));
    }
    // The hub loses its network: nobody gets through. Sweep every 5 s for 5 minutes.
    let mut raised = Vec::new();
    for _ in 0..60 {
        hub.clock.advance(Duration::from_secs(5));
        raised.extend(hub.hub.sweep_once().await.unwrap());
    }
    let kinds: Vec<&str> = raised.iter().map(|a| a.kind.as_str()).collect();
    assert_eq!(kinds, ["hub_connectivity_suspected"]);
    let metrics = hub.metrics().await;
    assert!(metrics.contains("bosun_hub_hosts_overdue 8"), "{metrics}");

    // Connectivity returns: hosts poll, the suspicion closes once.
    for (host, key) in &hosts[..7] {
        hub.poll_json(*host, key, 0).await;
    }
    hub.clock.advance(Duration::from_secs(1));
    let raised = hub.hub.sweep_once().await.unwrap();
    let kinds: Vec<&str> = raised.iter().map(|a| a.kind.as_str()).collect();
    // The one host still silent now gets its own alert.
    assert_eq!(kinds, ["hub_connectivity_restored", "host_overdue"]);
    assert_eq!(raised[1].host_id, Some(hosts[7].0));
}

#[tokio::test]
async fn a_planned_stop_shows_stopped_and_pages_only_past_its_bound() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-stopping").await;
    hub.poll_json(host, &key, 0).await;
    // The agent's last poll before a planned stop (SIGTERM), asking for a long-poll: the hub
    // answers at once anyway.
    let mut last = common::poll_body(0, &[]);
    last["stopping"] = true.into();
    let sent = std::time::Instant::now();
    let resp = hub
        .request(
            Method::POST,
            &format!("/v1/hosts/{host}/poll?wait=30"),
            Some(&key),
            Some(last.to_string().into_bytes()),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(
        sent.elapsed() < Duration::from_secs(10),
        "the stop poll was held"
    );
    let detail: Value = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}"), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(detail["liveness"], "stopped");
    assert_eq!(detail["stopped_at"], detail["last_seen"]);

    // Far past the grace window (3 × 30 s), within the stop bound (30 minutes): no page.
    for _ in 0..29 {
        hub.clock.advance(Duration::from_secs(60));
        assert!(hub.hub.sweep_once().await.unwrap().is_empty());
    }
    assert_eq!(host_liveness(&hub, host).await, "stopped");
    // Past the bound: paged once, saying it was stopped and did not come back.
    hub.clock.advance(Duration::from_secs(61));
    let raised = hub.hub.sweep_once().await.unwrap();
    assert_eq!(raised.len(), 1, "{raised:?}");
    assert_eq!(raised[0].kind.as_str(), "host_overdue");
    assert_eq!(raised[0].host_id, Some(host));
    common::names(
        &raised[0].message,
        &["pve-stopping", "stopped on purpose", "has not come back"],
    );
    assert_eq!(host_liveness(&hub, host).await, "overdue");
    hub.clock.advance(Duration::from_secs(60));
    assert!(hub.hub.sweep_once().await.unwrap().is_empty());

    // It comes back: the stop is cleared, the page resolved.
    hub.poll_json(host, &key, 0).await;
    let detail: Value = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}"), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(detail["liveness"], "ok");
    assert!(detail.get("stopped_at").is_none(), "{detail}");
    let kinds: Vec<String> = common::host_alerts(&hub, host)
        .await
        .into_iter()
        .map(|(kind, _)| kind)
        .collect();
    assert_eq!(kinds, ["host_overdue", "host_recovered"]);
    let events: Vec<String> = common::host_events(&hub, host)
        .await
        .into_iter()
        .map(|(kind, _)| kind)
        .collect();
    assert!(
        events.ends_with(&[
            "stopping".to_owned(),
            "overdue".to_owned(),
            "started".to_owned(),
            "recovered".to_owned()
        ]),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_host_back_from_a_planned_stop_is_watched_like_any_other() {
    let hub = TestHub::start_with(|config| {
        config.dead_man.stopped_grace = Duration::from_secs(600);
    })
    .await;
    let (host, key) = hub.enroll("pve-restarted").await;
    let mut last = common::poll_body(0, &[]);
    last["stopping"] = true.into();
    let (status, _) = common::poll_with(&hub, host, &key, &last).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(host_liveness(&hub, host).await, "stopped");
    // Restarted within a minute: its first poll clears the stop, nothing was paged.
    hub.clock.advance(Duration::from_secs(60));
    hub.poll_json(host, &key, 0).await;
    assert_eq!(host_liveness(&hub, host).await, "ok");
    // From then on its grace window applies again, not the stop bound.
    hub.clock.advance(Duration::from_secs(91));
    let raised = hub.hub.sweep_once().await.unwrap();
    assert_eq!(raised.len(), 1, "{raised:?}");
    common::names(&raised[0].message, &["pve-restarted", "silent for 91s"]);
    assert!(common::host_alerts(&hub, host).await.len() == 1);
}

#[derive(Clone, Default)]
struct Receiver {
    bodies: Arc<Mutex<Vec<Value>>>,
    times: Arc<Mutex<Vec<std::time::Instant>>>,
}

async fn flaky_receiver(
    State(receiver): State<Receiver>,
    axum::Json(body): axum::Json<Value>,
) -> AxumStatus {
    let mut bodies = receiver.bodies.lock();
    bodies.push(body);
    receiver.times.lock().push(std::time::Instant::now());
    if bodies.len() < 3 {
        AxumStatus::SERVICE_UNAVAILABLE
    } else {
        AxumStatus::NO_CONTENT
    }
}

/// Serves `app` on loopback (its `/hook` is the webhook), starts a hub alerting to it with
/// `attempts` deliveries from `backoff`, and makes one host overdue: one alert is raised.
async fn hub_alerting_to(app: axum::Router, backoff: Duration, attempts: u32) -> (TestHub, Uuid) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let hub = TestHub::start_with(|config| {
        let mut webhook = bosun_hubd::alerts::WebhookConfig::new(hook);
        webhook.initial_backoff = backoff;
        webhook.attempts = attempts;
        config.webhook = Some(webhook);
        config.dead_man.silence_window = Duration::ZERO;
    })
    .await;
    let (host, key) = hub.enroll("pve-hook").await;
    hub.poll_json(host, &key, 0).await;
    hub.clock.advance(Duration::from_secs(91));
    assert_eq!(hub.hub.sweep_once().await.unwrap().len(), 1);
    (hub, host)
}

#[tokio::test]
async fn webhook_alerts_are_retried_with_backoff_until_accepted() {
    let receiver = Receiver::default();
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(flaky_receiver))
        .with_state(receiver.clone());
    let (hub, host) = hub_alerting_to(app, Duration::from_millis(50), 4).await;

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while receiver.bodies.lock().len() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "webhook not retried to success"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let bodies = receiver.bodies.lock().clone();
    assert_eq!(bodies.len(), 3, "no attempts after the success");
    assert!(
        bodies.iter().all(|b| b == &bodies[0]),
        "every attempt sends the same alert"
    );
    let times = receiver.times.lock().clone();
    assert!(
        times[1] - times[0] >= Duration::from_millis(50),
        "first backoff"
    );
    assert!(
        times[2] - times[1] >= Duration::from_millis(100),
        "backoff doubles"
    );
    assert_eq!(bodies[0]["schema"], "bosun.alert/v1");
    assert_eq!(bodies[0]["kind"], "host_overdue");
    assert_eq!(bodies[0]["host_id"], host.to_string());
    let metrics = hub.metrics().await;
    assert!(
        metrics.contains("bosun_hub_webhook_failures_total 0"),
        "{metrics}"
    );
    assert_eq!(
        hub.request(Method::GET, "/v1/health", None, None)
            .await
            .status(),
        StatusCode::OK
    );
}

/// A webhook that answers with a redirect is a failed delivery: the hub never follows it
/// (the alert would go somewhere the operator did not configure).
#[tokio::test]
async fn the_webhook_client_follows_no_redirect() {
    let elsewhere = Receiver::default();
    let moved = axum::Router::new()
        .route(
            "/hook",
            axum::routing::post(|| async {
                (
                    AxumStatus::TEMPORARY_REDIRECT,
                    [(axum::http::header::LOCATION, "/elsewhere")],
                )
            }),
        )
        .route("/elsewhere", axum::routing::post(flaky_receiver))
        .with_state(elsewhere.clone());
    let (hub, _host) = hub_alerting_to(moved, Duration::from_millis(20), 2).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = hub.metrics().await;
        if metrics.contains("bosun_hub_webhook_failures_total 1") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the redirected delivery never counted as failed: {metrics}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        elsewhere.bodies.lock().is_empty(),
        "the alert went where the redirect pointed"
    );
}
