//! A pin set is the operator's signed decision (decision 0049), over real TLS against the real
//! agent and hub:
//!
//! 1. **A one-time holder of the hub's key does not keep the fleet.** An attacker serves the
//!    hub's own certificate and key (stolen from its data directory) on the hub's address and
//!    announces a pin set holding only its own key, unsigned and as a set signed by a key the
//!    agent does not trust. The agent takes neither (each audited once, however many polls),
//!    and when the real hub comes back with the configured key it is polled at once, and again
//!    after the agent restarts.
//! 2. **A signed rotation works end to end.** `cert rotate stage` and the document the operator
//!    signs with `ssh-keygen -Y sign -n bosun-policy@v1`, published through the hub: the agent
//!    takes it, the hub activates the new key without `--force`, the agent polls on under it,
//!    and trusts it after a restart; a replayed serial is refused by the hub.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::hostile_hub::HostileHub;
use agent_support::signing::{OperatorKey, sign_policy};
use agent_support::{InProcessAgent, RealHub, agent_files, eventually, start_sim};
use bosun_hubd::cert::{self, NewKey};
use bosun_hubd::store::hub_keys::KeyState;
use bosun_pin::Pin;
use bosun_proto::hub_pins::{HUB_PINS_NAMESPACE, HUB_PINS_SCHEMA, HubPinsDocument};
use bosun_proto::signed::SignedDocument;
use bosun_pvesim::SimConfig;
use serde_json::json;

/// Runs a `bosun-hubd cert` step as the command does, off the async runtime.
async fn step<T: Send + 'static>(
    hub: &RealHub,
    f: impl FnOnce(&bosun_hubd::HubConfig) -> T + Send + 'static,
) -> T {
    let config = hub.hub.config().clone();
    tokio::task::spawn_blocking(move || f(&config))
        .await
        .unwrap()
}

/// The polls the agent has made so far (every answered poll, whichever hub answered it).
fn polls(agent: &InProcessAgent) -> u64 {
    agent.handles.hub.borrow().polls
}

/// How many polls the agent makes in `window`.
async fn polls_within(agent: &InProcessAgent, window: Duration) -> u64 {
    let before = polls(agent);
    tokio::time::sleep(window).await;
    polls(agent) - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_of_the_hub_key_announcing_only_itself_does_not_keep_the_fleet() {
    let sim = start_sim(SimConfig::fast()).await;
    let hub = RealHub::start().await;
    let files = agent_files(
        &sim,
        &hub.url,
        &hub.fingerprint,
        Some(&hub.enroll_token().await),
    );
    let agent = InProcessAgent::start(&files.config_path).await;
    let mut status = agent.handles.hub.clone();
    tokio::time::timeout(Duration::from_secs(30), status.wait_for(|s| s.polls >= 2))
        .await
        .expect("the agent polls the real hub")
        .unwrap();
    let host = agent.handles.host_id;

    // The attacker holds the hub's key (its data directory) and takes the hub's address.
    let paused = hub.pause().await;
    let tls = paused.dir.path().join("tls");
    let cert_pem = std::fs::read_to_string(tls.join("cert.pem")).unwrap();
    let key_pem = std::fs::read_to_string(tls.join("key.pem")).unwrap();
    let own = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let own_pin = Pin::of_key(own.cert.der()).unwrap().to_string();
    let attacker = HostileHub::start_as(&cert_pem, &key_pem, paused.port()).await;
    // Its own key alone, unsigned, and as a set signed by a key the agent does not trust.
    let forger = OperatorKey::new("attacker@example");
    let forged = HubPinsDocument {
        schema: HUB_PINS_SCHEMA.into(),
        serial: 99,
        issued_at: jiff::Timestamp::now(),
        host_id: Some(host),
        pins: vec![own_pin.clone()],
    };
    let bytes = serde_json::to_vec(&forged).unwrap();
    let signature = forger.sign(&bytes, HUB_PINS_NAMESPACE);
    {
        let mut script = attacker.script.lock();
        script.hub_pins = vec![own_pin.clone()];
        script.hub_pins_signed = Some(json!(SignedDocument::new(&bytes, &signature)));
    }
    eventually(
        Duration::from_secs(60),
        "the agent polls the attacker ten times",
        || async { attacker.answered(200) >= 10 },
    )
    .await;
    let attacked = attacker.answered(200);
    let audit = attacker.audit();
    let count = |action: &str| audit.iter().filter(|(a, _)| a == action).count();
    assert_eq!(
        count("hub_pins.unsigned_ignored"),
        1,
        "the unsigned announcement is audited once in {attacked} polls: {audit:?}"
    );
    assert_eq!(
        count("hub_pins.refused"),
        1,
        "the forged set is audited once in {attacked} polls: {audit:?}"
    );
    assert_eq!(count("hub_pins.accepted"), 0);
    assert!(
        !files.state_dir.join("hub-pins.json").exists(),
        "nothing was journaled"
    );
    attacker.shutdown();

    // The real hub comes back with the configured key: polled at once.
    let hub = paused.resume().await;
    let failures_before = agent.handles.hub.borrow().failures;
    let back = polls(&agent);
    eventually(
        Duration::from_secs(30),
        "the real hub is polled again",
        || async { polls(&agent) > back },
    )
    .await;
    // The real hub holds each poll up to 5 s when nothing changes: two or three polls in 12 s.
    let after_attack = polls_within(&agent, Duration::from_secs(12)).await;
    println!(
        "polls from the real hub in 12 s after {attacked} polls answered by the attacker: {after_attack} (failures before its return: {failures_before})"
    );
    assert!(after_attack >= 2, "{after_attack} polls in 12 s");
    assert_eq!(agent.handles.hub.borrow().failures, 0);
    let seen = hub.host(host).await;
    assert!(seen["last_seen"].is_string(), "{seen}");

    // ...and after the agent restarts.
    agent.stop().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let mut status = agent.handles.hub.clone();
    tokio::time::timeout(Duration::from_secs(30), status.wait_for(|s| s.polls >= 1))
        .await
        .expect("the restarted agent polls the real hub")
        .unwrap();
    let after_restart = polls_within(&agent, Duration::from_secs(12)).await;
    println!("polls from the real hub in 12 s after an agent restart: {after_restart}");
    assert!(after_restart >= 2, "{after_restart} polls in 12 s");
    assert_eq!(agent.handles.hub.borrow().failures, 0);
    agent.stop().await;
}

/// Writes the unsigned pin set the hub names now, signs it as the operator and publishes it;
/// gives its serial.
async fn sign_and_publish(hub: &RealHub) -> u64 {
    let doc = step(hub, |c| cert::pins_document(c, None)).await.unwrap();
    let bytes = serde_json::to_vec_pretty(&doc).unwrap();
    let signature = sign_policy(&bytes);
    step(hub, move |c| cert::publish(c, &bytes, &signature))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_rotation_moves_the_agent_to_the_new_key_end_to_end() {
    let sim = start_sim(SimConfig::fast()).await;
    let hub = RealHub::start().await;
    let files = agent_files(
        &sim,
        &hub.url,
        &hub.fingerprint,
        Some(&hub.enroll_token().await),
    );
    let agent = InProcessAgent::start(&files.config_path).await;
    let mut status = agent.handles.hub.clone();
    tokio::time::timeout(Duration::from_secs(30), status.wait_for(|s| s.polls >= 1))
        .await
        .expect("the agent polls")
        .unwrap();

    // Staged: not announced to anyone until the operator signs the set naming it.
    let next = step(&hub, |c| cert::stage(c, NewKey::SelfSigned(Vec::new())))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held = |rotation: &bosun_hubd::store::hub_keys::KeyRotation| {
        rotation.key(KeyState::Staged).map_or(0, |k| k.holders)
    };
    assert_eq!(held(&step(&hub, cert::status).await.unwrap().0), 0);
    assert!(step(&hub, |c| cert::activate(c, false)).await.is_err());

    assert_eq!(sign_and_publish(&hub).await, 1);
    eventually(
        Duration::from_secs(60),
        "the agent holds the staged key",
        || async { held(&step(&hub, cert::status).await.unwrap().0) == 1 },
    )
    .await;
    assert_eq!(
        step(&hub, |c| cert::activate(c, false)).await.unwrap(),
        next
    );
    eventually(
        Duration::from_secs(20),
        "the hub serves the new key",
        || async { hub.hub.key_pin() == next },
    )
    .await;
    let at_switch = polls(&agent);
    eventually(
        Duration::from_secs(60),
        "the agent polls under the new key",
        || async { polls(&agent) > at_switch + 2 },
    )
    .await;
    assert_eq!(agent.handles.hub.borrow().failures, 0);

    // Retired, and the set naming the new key alone signed: the agent trusts it after a
    // restart too.
    step(&hub, cert::retire).await.unwrap();
    assert_eq!(sign_and_publish(&hub).await, 2);
    eventually(
        Duration::from_secs(30),
        "the agent holds serial 2",
        || async {
            std::fs::read_to_string(files.state_dir.join("hub-pins.json"))
                .is_ok_and(|t| t.contains("\"serial\":2"))
        },
    )
    .await;
    agent.stop().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let before = polls(&agent);
    eventually(
        Duration::from_secs(30),
        "the restarted agent polls under the new key",
        || async { polls(&agent) > before + 1 },
    )
    .await;
    agent.stop().await;

    // The hub refuses to publish an older serial again (a replay of the first set).
    let doc = step(&hub, |c| cert::pins_document(c, None)).await.unwrap();
    let stale = HubPinsDocument { serial: 1, ..doc };
    let bytes = serde_json::to_vec(&stale).unwrap();
    let signature = sign_policy(&bytes);
    let refused = step(&hub, move |c| cert::publish(c, &bytes, &signature))
        .await
        .unwrap_err();
    assert!(
        bosun_errchain::error_chain(&refused).contains("not above"),
        "{}",
        bosun_errchain::error_chain(&refused)
    );
}
