//! Alerts that mean something, against the real agent and hub: a storage target the host
//! refuses is one `storage_refused` alert, open while the report shows it refused — not one
//! more per desired-state change or agent restart — that makes the host a warning and closes
//! when the target leaves desired state; a signed job the agent refuses for an unknown signer
//! raises one `job_refused` alert.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::jobs::{job_result, submit};
use agent_support::signing::OperatorKey;
use agent_support::storage::*;
use agent_support::*;
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

/// The open alerts of `kind` on `host`.
async fn open_alerts(hub: &RealHub, host: Uuid, kind: &str) -> Vec<Value> {
    let (status, body) = hub
        .admin(
            Method::GET,
            &format!("/v1/admin/alerts/open?host={host}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body.as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|a| a["kind"] == kind)
        .collect()
}

/// The host's health as `GET /v1/admin/hosts` serves it.
async fn listed_health(hub: &RealHub, host: Uuid) -> Value {
    let (status, body) = hub.admin(Method::GET, "/v1/admin/hosts", None).await;
    assert_eq!(status, 200, "{body}");
    body.as_array()
        .unwrap()
        .iter()
        .find(|h| h["host_id"] == json!(host))
        .map(|h| h["health"].clone())
        .unwrap()
}

fn refused_target() -> Value {
    // `/` cannot stand in a signed plan: the agent refuses it (`not_in_plan`).
    json!({
        "type": "local-dir", "durable_id": "/", "class": "slow", "role": "vzdump-target",
        "policy": {}, "state": "attached",
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_target_is_one_alert_open_while_refused_through_republishes_and_restarts() {
    let (sim, hub, files) = enrolled_stack().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let mut with_target = desired(&sim, &[], "running");
    with_target["storage"] = json!([refused_target()]);
    hub.put_desired(host, &with_target).await;
    eventually(Duration::from_secs(30), "the target is refused", || async {
        target_report(&hub, host, "/")
            .await
            .is_some_and(|t| t["status"] == "refused")
    })
    .await;
    eventually(Duration::from_secs(10), "storage_refused opens", || async {
        open_alerts(&hub, host, "storage_refused").await.len() == 1
    })
    .await;

    // The same desired state published twice more, and the agent restarted: each makes the
    // agent hold the plan again and audit the refusal again.
    hub.put_desired(host, &with_target).await;
    hub.put_desired(host, &with_target).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    agent.stop().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    eventually(
        Duration::from_secs(30),
        "the restarted agent reports",
        || async {
            let detail = hub.host(host).await;
            detail["last_report"]["audit"].is_array() && detail["liveness"] == "ok"
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let history = alerts(&hub, host, "storage_refused").await;
    assert_eq!(history.len(), 1, "one opening in the history: {history:#?}");
    let open = open_alerts(&hub, host, "storage_refused").await;
    assert_eq!(open.len(), 1, "{open:#?}");
    assert_eq!(open[0]["subject"], "/");
    let health = listed_health(&hub, host).await;
    assert_eq!(health["level"], "warning", "{health}");
    assert!(
        health["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["alert"] == "storage_refused"),
        "{health}"
    );

    // The target leaves desired state: the condition no longer holds and the alert closes.
    hub.put_desired(host, &desired(&sim, &[], "running")).await;
    eventually(
        Duration::from_secs(30),
        "storage_refused closes",
        || async { open_alerts(&hub, host, "storage_refused").await.is_empty() },
    )
    .await;
    assert_eq!(alerts(&hub, host, "storage_refused").await.len(), 1);
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_refused_for_an_unknown_signer_raises_job_refused_once() {
    let (_sim, hub, files) = enrolled_stack().await;
    let spool = files.dir.path().join("support-commands.jsonl");
    let mut config = std::fs::read_to_string(&files.config_path).unwrap();
    config.push_str(&format!(
        "[break_glass]\nspool = {spool:?}\nscan_interval_seconds = 1\n"
    ));
    std::fs::write(&files.config_path, config).unwrap();
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let host_s = host.to_string();
    let door_key = OperatorKey::new("oncall@desk");
    let public = std::fs::read_to_string(door_key.key.with_extension("pub")).unwrap();
    let key_param = format!("ssh_public_key={}", public.trim());
    assert!(alerts(&hub, host, "job_refused").await.is_empty());

    let mallory = OperatorKey::new("mallory@example");
    let args = [
        "--kind",
        "break-glass-enable",
        "--host",
        &host_s,
        "--param",
        &key_param,
        "--param",
        "duration_seconds=3600",
        "--param",
        "reason=let me in",
    ];
    let forged = submit(&hub, &mallory, files.dir.path(), &args).await;
    let result = job_result(&hub, host, forged).await;
    assert_eq!(result["output"]["code"], "unknown_signer", "{result}");
    eventually(Duration::from_secs(10), "job_refused is raised", || async {
        !alerts(&hub, host, "job_refused").await.is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let raised = alerts(&hub, host, "job_refused").await;
    assert_eq!(raised.len(), 1, "{raised:#?}");
    let message = raised[0]["message"].as_str().unwrap();
    assert!(
        message.contains(&forged.to_string()) && message.contains("unknown_signer"),
        "{message}"
    );
    agent.stop().await;
    hub.stop().await;
}
