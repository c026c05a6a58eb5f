//! Host-key rotations are paced by the agent (decision 0044), over real TLS against the real
//! agent:
//!
//! 1. **Key churn on demand is refused.** A hub that asks for a new host key in every answer
//!    (and holds each new key at once, as the real hub does) gets at most one rotation per
//!    paced interval, here 10 s (`[poll] host_key_rotation_min_seconds`, an hour by default),
//!    instead of one every few polls; the pace survives an agent restart.
//! 2. **An operator's request is served, not dropped.** Against the real hub, a second
//!    `rotate-key` asked right after a rotation completes at the next allowed moment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use agent_support::hostile_hub::HostileHub;
use agent_support::{InProcessAgent, RealHub, agent_files, eventually, start_sim};
use bosun_pvesim::SimConfig;
use reqwest::Method;
use serde_json::Value;

/// The least time between rotations these agents are configured with.
const PACE: Duration = Duration::from_secs(10);

/// The host keys the agent presented, in order, each once.
fn keys_presented(hub: &HostileHub) -> Vec<String> {
    let mut seen = Vec::new();
    for key in &hub.script.lock().bearers {
        if seen.last() != Some(key) && !seen.contains(key) {
            seen.push(key.clone());
        }
    }
    seen
}

/// When each host key after the first was first presented: when each rotation completed.
fn rotation_times(hub: &HostileHub) -> Vec<Instant> {
    let script = hub.script.lock();
    let mut seen: Vec<&String> = Vec::new();
    let mut times = Vec::new();
    for (key, at) in script.bearers.iter().zip(&script.poll_times) {
        if !seen.contains(&key) {
            if !seen.is_empty() {
                times.push(*at);
            }
            seen.push(key);
        }
    }
    times
}

/// The next-key hashes the agent sent (each a key it made and wrote).
fn keys_made(hub: &HostileHub) -> usize {
    hub.script
        .lock()
        .polls
        .iter()
        .filter_map(|p| p.next_host_key_sha256.clone())
        .collect::<BTreeSet<_>>()
        .len()
}

fn key_on_disk(state_dir: &Path) -> String {
    let text = std::fs::read_to_string(state_dir.join("host.json")).unwrap();
    let identity: Value = serde_json::from_str(&text).unwrap();
    identity["host_key"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_asking_in_every_answer_gets_one_rotation_per_paced_interval() {
    let sim = start_sim(SimConfig::fast()).await;
    let hub = HostileHub::start().await;
    let files = agent_files(
        &sim,
        &hub.url,
        &hub.fingerprint,
        Some("hostile-enroll-token"),
    );
    files.pace_host_keys(PACE.as_secs());
    hub.script.lock().churn_host_key = true;
    let started = Instant::now();
    let agent = InProcessAgent::start(&files.config_path).await;

    // 30 s of answers (1 s poll interval), every one asking for a new key.
    let window = Duration::from_secs(30);
    tokio::time::sleep(window.saturating_sub(started.elapsed())).await;
    let elapsed = started.elapsed();
    let answered = hub.answered(200);
    let rotations = keys_presented(&hub).len() - 1;
    let made = keys_made(&hub);
    let allowed = usize::try_from(elapsed.as_secs() / PACE.as_secs()).unwrap() + 1;
    println!(
        "hostile hub asking in all {answered} answers over {elapsed:?}: {rotations} rotations completed, {made} keys made; \
         bound {allowed} (one at once, then one per {PACE:?}): {} per hour at this pace, 1 per hour at the default",
        3600 / PACE.as_secs()
    );
    assert!(answered >= 15, "the agent kept polling: {answered}");
    assert!(rotations >= 2, "rotations still happen: {rotations}");
    assert!(
        rotations <= allowed,
        "{rotations} rotations in {elapsed:?}, more than one per {PACE:?}"
    );
    assert!(made <= allowed, "{made} keys made");

    // The pace survives a restart: asked at once again, the agent waits out the interval.
    agent.stop().await;
    let restarted_at = Instant::now();
    let before = keys_presented(&hub).len();
    let key_before = key_on_disk(&files.state_dir);
    let agent = InProcessAgent::start(&files.config_path).await;
    eventually(
        Duration::from_secs(30),
        "the agent rotates again",
        || async { key_on_disk(&files.state_dir) != key_before },
    )
    .await;
    let again = restarted_at.elapsed();
    println!("after a restart the next rotation came {again:?} later");
    assert_eq!(keys_presented(&hub).len(), before + 1);
    // Never two rotations closer than the pace, across the restart too.
    let times = rotation_times(&hub);
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    println!("gaps between rotations: {gaps:?}");
    assert!(
        gaps.iter()
            .all(|gap| *gap + Duration::from_millis(500) >= PACE),
        "two rotations closer than {PACE:?}: {gaps:?}"
    );
    let audit = hub.audit();
    let deferred = audit
        .iter()
        .filter(|(a, _)| a == "hub.host_key_rotation_deferred")
        .count();
    assert!(
        deferred <= rotations + 2,
        "a deferral is audited once per request, not once per answer: {deferred}"
    );
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_request_right_after_a_rotation_is_served_at_the_allowed_moment() {
    let sim = start_sim(SimConfig::fast()).await;
    // A 1 s poll interval: the pace is the configured 10 s (ten poll intervals at the least).
    let hub = RealHub::start_polling_every(Duration::from_secs(1)).await;
    let files = agent_files(
        &sim,
        &hub.url,
        &hub.fingerprint,
        Some(&hub.enroll_token().await),
    );
    files.pace_host_keys(PACE.as_secs());
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let ask = || async {
        let (status, body) = hub
            .admin(
                Method::POST,
                &format!("/v1/admin/hosts/{host}/rotate-key"),
                None,
            )
            .await;
        assert_eq!(status, 202, "{body}");
    };
    let first = key_on_disk(&files.state_dir);
    ask().await;
    eventually(Duration::from_secs(30), "the first rotation", || async {
        key_on_disk(&files.state_dir) != first
    })
    .await;
    let done = Instant::now();
    let second = key_on_disk(&files.state_dir);
    ask().await;
    eventually(Duration::from_secs(60), "the second rotation", || async {
        key_on_disk(&files.state_dir) != second
    })
    .await;
    let waited = done.elapsed();
    println!("the operator's second request completed {waited:?} after the first rotation");
    assert!(
        waited + Duration::from_secs(1) >= PACE,
        "served before the pace allowed: {waited:?}"
    );
    agent.stop().await;
}
