//! A host's key rotates while answers are lost and the agent is killed (decision 0044): the
//! agent process against a real hub over real TLS, through a link that loses the hub's answer
//! at each step of the exchange on purpose. Whatever is lost, the rotation completes, the agent
//! keeps polling with a key the hub accepts, and the old key is refused once the new one was
//! presented:
//!
//! 1. the answer asking for a new key is lost;
//! 2. the answer to the poll carrying the new key's hash is lost (the hub holds it);
//! 3. the answer to the first poll presenting the new key is lost (the hub took it);
//! 4. the agent is killed (SIGKILL) while the hub holds the new key's hash and every answer
//!    naming it is lost, and started again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::path::Path;
use std::time::Duration;

use agent_support::crash::{AgentChild, host_id, kill, log_tail, spawn_agent};
use agent_support::lossy_tap::{Exchange, LossyTap};
use agent_support::{RealHub, agent_files, eventually, start_sim};
use bosun_pvesim::SimConfig;
use reqwest::Method;
use serde_json::Value;
use uuid::Uuid;

/// The key `host.json` holds.
fn key_on_disk(state_dir: &Path) -> String {
    let text = std::fs::read_to_string(state_dir.join("host.json")).unwrap();
    let identity: Value = serde_json::from_str(&text).unwrap();
    identity["host_key"].as_str().unwrap().to_owned()
}

fn rotating(state_dir: &Path) -> bool {
    state_dir.join("host-key-next.json").exists()
}

/// The hub's answer to `key` on an endpoint that changes nothing (the escrow blob, which it
/// does not hold): 404 for a key it accepts, 401 for one it refuses.
async fn accepted(hub: &RealHub, host: Uuid, key: &str) -> bool {
    let status = hub
        .client
        .get(format!("{}/v1/hosts/{host}/escrow", hub.url))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16();
    assert!(status == 404 || status == 401, "escrow answered {status}");
    status == 404
}

/// `host.key_rotated` events the hub recorded for `host`.
async fn rotations(hub: &RealHub, host: Uuid) -> usize {
    let (status, events) = hub
        .admin(
            Method::GET,
            &format!("/v1/admin/events?host={host}&limit=1000"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{events}");
    events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "host.key_rotated")
        .count()
}

async fn ask_rotation(hub: &RealHub, host: Uuid) {
    let (status, body) = hub
        .admin(
            Method::POST,
            &format!("/v1/admin/hosts/{host}/rotate-key"),
            None,
        )
        .await;
    assert_eq!(status, 202, "{body}");
}

/// Waits until the agent holds a new key the hub accepts, the old one is refused, and the
/// hub recorded `rotated` rotations in all.
async fn rotated(hub: &RealHub, host: Uuid, state_dir: &Path, old: &str, rotated: usize) -> String {
    let config = state_dir.parent().unwrap().join("agent.toml");
    eventually(
        Duration::from_secs(60),
        "the rotation completes",
        || async { key_on_disk(state_dir) != old && !rotating(state_dir) },
    )
    .await;
    let new = key_on_disk(state_dir);
    assert!(accepted(hub, host, &new).await, "{}", log_tail(&config, 40));
    assert!(!accepted(hub, host, old).await, "the old key is retired");
    assert_eq!(rotations(hub, host).await, rotated);
    new
}

/// The agent polls on with its key: the hub saw it after `since`.
async fn polls_on(hub: &RealHub, host: Uuid) {
    let seen = |host: Value| host["last_seen"].as_str().map(str::to_owned);
    let before = seen(hub.host(host).await);
    eventually(Duration::from_secs(30), "the agent polls again", || async {
        seen(hub.host(host).await) != before
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_answer_or_a_kill_at_every_step_never_locks_the_host_out() {
    let sim = start_sim(SimConfig::fast()).await;
    // A 1 s poll interval: the agent paces rotations at ten of them (and the configured 10 s).
    let hub = RealHub::start_polling_every(Duration::from_secs(1)).await;
    let tap = LossyTap::start(&hub).await;
    let token = hub.enroll_token().await;
    let files = agent_files(&sim, &tap.url, &hub.fingerprint, Some(&token));
    // Four rotations in a row: paced at one per 10 s, not the default hour.
    files.pace_host_keys(10);
    let mut agent: AgentChild = spawn_agent(&files.config_path, None);
    let host = host_id(&files.state_dir).await;
    polls_on(&hub, host).await;

    // 1–3: each step's answer lost once.
    type Pick = Box<dyn Fn(&str) -> Box<dyn Fn(&Exchange<'_>) -> bool + Send + Sync>>;
    let steps: [(&str, Pick); 3] = [
        (
            "the answer asking for a new key",
            Box::new(|_| Box::new(|x| x.is_poll() && x.mentions("\"rotate_host_key\":true"))),
        ),
        (
            "the answer to the poll carrying the new key's hash",
            Box::new(|_| Box::new(|x| x.is_poll() && x.mentions("\"next_host_key_sha256\""))),
        ),
        (
            "the answer to the first poll presenting the new key",
            Box::new(|old: &str| {
                let old = old.to_owned();
                Box::new(move |x| x.is_poll() && x.bearer().is_some_and(|key| key != old))
            }),
        ),
    ];
    let mut key = key_on_disk(&files.state_dir);
    for (n, (what, pick)) in steps.iter().enumerate() {
        let rule = pick(&key);
        tap.lose_next(move |x| rule(x));
        ask_rotation(&hub, host).await;
        key = rotated(&hub, host, &files.state_dir, &key, n + 1).await;
        assert_eq!(tap.lost(), n + 1, "{what} was lost");
        polls_on(&hub, host).await;
    }

    // 4: every answer naming the new key lost, the agent killed while the hub holds its hash.
    tap.lose_all(|x| x.is_poll() && x.mentions("\"next_host_key_sha256\""));
    ask_rotation(&hub, host).await;
    let lost = tap.lost();
    eventually(
        Duration::from_secs(30),
        "the hub holds the new key's hash",
        || async { tap.lost() > lost && rotating(&files.state_dir) },
    )
    .await;
    kill(&mut agent);
    tap.heal();
    assert!(accepted(&hub, host, &key).await, "the old key still works");
    let mut agent = spawn_agent(&files.config_path, None);
    rotated(&hub, host, &files.state_dir, &key, 4).await;
    polls_on(&hub, host).await;
    kill(&mut agent);
}
