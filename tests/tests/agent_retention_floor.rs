//! A hub cannot delete backups by policy. Against the real hub and agent: without a signed
//! floor, a desired `keep_last 1` is held at keep-all; an operator's floor, signed with
//! `ssh-keygen -Y sign -n bosun-policy@v1` and carried in desired state, lets retention
//! down to the floor and no further; a replayed older floor, a floor signed by an unknown
//! key, one for another host or one signed for another namespace change nothing; only a
//! newer floor (here made with `bosunctl policy sign-floor`) lowers it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::jobs::ctl;
use agent_support::signing::OperatorKey;
use agent_support::*;
use bosun_proto::retention::{FLOOR_SCHEMA, POLICY_NAMESPACE};
use bosun_proto::signed::SignedDocument;
use serde_json::{Value, json};
use uuid::Uuid;

/// A floor document for `host` issued at `issued_at` with the first tier's `keep_last`.
fn floor_bytes(host: Uuid, issued_at: &str, keep_last: u32) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "schema": FLOOR_SCHEMA,
        "host_id": host,
        "issued_at": issued_at,
        "tiers": [{ "retention": { "keep_last": keep_last } }],
    }))
    .unwrap()
}

fn signed(bytes: &[u8], key: &OperatorKey, namespace: &str) -> Value {
    serde_json::to_value(SignedDocument::new(bytes, &key.sign(bytes, namespace))).unwrap()
}

/// The first tier as the hub holds it, once `accept` holds.
async fn first_tier(
    hub: &RealHub,
    host: Uuid,
    what: &str,
    accept: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let tier = hub.host(host).await["last_report"]["tiers"][0].clone();
        if accept(&tier) {
            return tier;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}; tier is {tier}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_newer_signed_floor_lowers_retention() {
    let (sim, hub, files) = enrolled_stack().await;
    let operator = files.trusted_operator();
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let mut desired = desired(&sim, &[], "running");
    let mut round = 0u64;
    let mut put = |desired: &Value| {
        round += 1;
        let mut d = desired.clone();
        // Each document differs, so each is a new generation the agent acts on.
        d["backup_policy"]["quiesce_grace_minutes"] = json!(round);
        d
    };

    // A compromised hub asks for keep_last 1: held at keep-all, nothing is pruned.
    desired["backup_policy"]["retention"] = json!({ "keep_last": 1 });
    hub.put_desired(host, &put(&desired)).await;
    let tier = first_tier(&hub, host, "the held tier", |t| {
        t["desired"]["keep_last"] == 1
    })
    .await;
    assert_eq!(
        tier["applied"],
        json!({"keep_last":0,"keep_daily":0,"keep_weekly":0,"keep_monthly":0})
    );
    assert!(
        tier["held"]
            .as_str()
            .unwrap()
            .contains("no signed retention floor")
    );

    // The operator signs a floor of keep_last 3: the hub's 1 is raised to it.
    let floor = signed(
        &floor_bytes(host, "2026-11-20T10:00:00Z", 3),
        &operator,
        POLICY_NAMESPACE,
    );
    desired["backup_policy"]["floor"] = floor;
    hub.put_desired(host, &put(&desired)).await;
    let tier = first_tier(&hub, host, "the floor", |t| t["applied"]["keep_last"] == 3).await;
    assert!(
        tier["held"]
            .as_str()
            .unwrap()
            .contains("below the signed floor"),
        "{tier}"
    );

    // What a hub may try next; each leaves the floor at 3.
    let stranger = OperatorKey::new("stranger@example");
    let attempts = [
        (
            "an older floor, replayed",
            signed(
                &floor_bytes(host, "2026-11-19T10:00:00Z", 1),
                &operator,
                POLICY_NAMESPACE,
            ),
        ),
        (
            "a floor signed by an unknown key",
            signed(
                &floor_bytes(host, "2026-11-21T10:00:00Z", 1),
                &stranger,
                POLICY_NAMESPACE,
            ),
        ),
        (
            "a floor for another host",
            signed(
                &floor_bytes(Uuid::new_v4(), "2026-11-21T10:00:00Z", 1),
                &operator,
                POLICY_NAMESPACE,
            ),
        ),
        (
            "a floor signed as a job",
            signed(
                &floor_bytes(host, "2026-11-21T10:00:00Z", 1),
                &operator,
                "bosun-job@v1",
            ),
        ),
    ];
    for (what, floor) in attempts {
        desired["backup_policy"]["floor"] = floor;
        hub.put_desired(host, &put(&desired)).await;
        let wanted = hub.host(host).await["desired_generation"].as_u64().unwrap();
        eventually(Duration::from_secs(30), what, || async {
            hub.host(host).await["applied_generation"].as_u64() >= Some(wanted)
        })
        .await;
        // Give the tier feed a moment to act wrongly, should it.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let tier = hub.host(host).await["last_report"]["tiers"][0].clone();
        assert_eq!(tier["applied"]["keep_last"], 3, "{what}: {tier}");
    }
    let refused = agent
        .handles
        .journal
        .audit_since(0, 10_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.event.event == "retention.floor_refused")
        .count();
    assert_eq!(refused, 3, "unknown key, other host, wrong namespace");

    // A newer floor from bosunctl lowers it to 1: now the hub's keep_last 1 applies.
    let file = files.dir.path().join("desired.json");
    let mut d = put(&desired);
    d["backup_policy"]["floor"] = Value::Null;
    d["backup_policy"].as_object_mut().unwrap().remove("floor");
    std::fs::write(&file, serde_json::to_vec_pretty(&d).unwrap()).unwrap();
    ctl(
        &hub,
        &[
            "policy",
            "sign-floor",
            "--host",
            &host.to_string(),
            "--key",
            &operator.key.display().to_string(),
            "--tier",
            "first=keep_last:1",
            "--desired",
            &file.display().to_string(),
        ],
    )
    .await;
    let d: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    hub.put_desired(host, &d).await;
    let tier = first_tier(&hub, host, "the lowered floor", |t| {
        t["applied"]["keep_last"] == 1
    })
    .await;
    assert!(tier["held"].is_null(), "{tier}");
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
