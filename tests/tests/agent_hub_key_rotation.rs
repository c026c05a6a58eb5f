//! The hub's key rotated under a polling fleet, over real TLS: three whole agents (in process,
//! against the simulator) and 47 light ones (the agent's own hub client and pin journal, polling
//! in a loop) learn the staged key from the operator's signed pin set their poll answers carry
//! (decision 0049), activation waits until every live host holds it, and the switch costs no
//! agent a single failed poll. An agent that slept
//! through the whole rotation refuses the hub's new key and says it must be enrolled again;
//! a whole agent restarted after the retirement trusts the new key from its journal, and so
//! does `bosun-agentctl` on its node.
//!
//! The real `bosun-hubd` binary through the same rotation, and through a backup and restore:
//! at every start `serve` prints the key pin of the certificate its TLS listener presents
//! (what the operator guide says to pin), and `bosunctl` pinning that printed value connects.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use crate::agent_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agent_support::hubd_binary::{self, field, free_port, hubd};
use agent_support::{InProcessAgent, RealHub, agent_files, eventually, start_sim};
use bosun_agentd::links::hub_client::client::HubClient;
use bosun_agentd::links::hub_client::pins::HubPins;
use bosun_hubd::cert::{self, NewKey};
use bosun_hubd::store::hub_keys::KeyState;
use bosun_pin::{Pin, Trust};
use bosun_proto::poll::PollRequest;
use bosun_proto::report::StateReport;
use bosun_proto::signed::SignedDocument;
use bosun_pvesim::SimConfig;
use secrecy::SecretString;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Light agents beside the three whole ones: fifty hosts in all.
const LIGHT_AGENTS: usize = 47;

fn report() -> StateReport {
    StateReport::empty(1, "0.1.0")
}

/// One light agent: enrolled, then polling every 100 ms with the agent's own client, taking
/// what the hub announces into its journal, until `stop`. Counts its polls and failures.
struct Light {
    polls: Arc<AtomicU64>,
    failures: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
    _state: tempfile::TempDir,
}

async fn light_agent(hub: &RealHub, name: String, stop: CancellationToken) -> Light {
    let state = tempfile::tempdir().unwrap();
    let signers = state.path().join("allowed_signers");
    std::fs::write(&signers, agent_support::signing::harness_signer_lines()).unwrap();
    let configured = vec![Pin::parse(&hub.fingerprint).unwrap()];
    let client =
        HubClient::with_trust(hub.url.parse().unwrap(), &Trust::Pins(configured.clone())).unwrap();
    let pins = HubPins::open(
        state.path(),
        &configured,
        Arc::clone(client.pins().unwrap()),
        &signers,
        jiff::Timestamp::now(),
    )
    .unwrap();
    let token = SecretString::from(hub.enroll_token().await);
    let enrolled = client.enroll(&token, &name, None).await.unwrap();
    let (host_id, key) = (
        enrolled.host_id,
        SecretString::from(enrolled.host_key.expose().to_owned()),
    );
    let (polls, failures) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (counted, failed) = (Arc::clone(&polls), Arc::clone(&failures));
    let task = tokio::spawn(async move {
        while !stop.is_cancelled() {
            let request = PollRequest {
                capabilities: None,
                schema: bosun_proto::poll::REQUEST_SCHEMA.to_owned(),
                known_generation: 0,
                applied_generation: 0,
                acked_jobs: Vec::new(),
                report: Some(report()),
                delta: None,
                operations: Vec::new(),
                stopping: false,
                hub_pins: pins.to_send(),
                next_host_key_sha256: None,
            };
            match client
                .poll(
                    host_id,
                    &key,
                    Duration::ZERO,
                    &request,
                    &Uuid::new_v4().to_string(),
                )
                .await
            {
                Ok(answer) => {
                    counted.fetch_add(1, Ordering::Relaxed);
                    pins.answered(&request.hub_pins);
                    if let Some(signed) = answer.hub_pins_signed {
                        let signed: SignedDocument = serde_json::from_value(signed).unwrap();
                        if pins
                            .adopt(&signed, host_id, jiff::Timestamp::now())
                            .is_err()
                        {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                Err(_) => {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    Light {
        polls,
        failures,
        task,
        _state: state,
    }
}

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

/// Writes the unsigned pin set the hub names now, signs it as the operator
/// (`ssh-keygen -Y sign -n bosun-policy@v1`) and publishes it.
async fn sign_and_publish(hub: &RealHub) {
    let doc = step(hub, |c| cert::pins_document(c, None)).await.unwrap();
    let bytes = serde_json::to_vec_pretty(&doc).unwrap();
    let signature = agent_support::signing::sign_policy(&bytes);
    step(hub, move |c| cert::publish(c, &bytes, &signature))
        .await
        .unwrap();
}

/// The most consecutive failed polls a whole agent reports while it runs.
fn worst_failures(agent: &InProcessAgent) -> tokio::task::JoinHandle<u32> {
    let mut status = agent.handles.hub.clone();
    tokio::spawn(async move {
        let mut worst = 0;
        while status.changed().await.is_ok() {
            worst = worst.max(status.borrow().failures);
        }
        worst
    })
}

/// How many polls each agent made, whole ones first.
fn polls(whole: &[InProcessAgent], light: &[Light]) -> Vec<u64> {
    whole
        .iter()
        .map(|a| a.handles.hub.borrow().polls)
        .chain(light.iter().map(|l| l.polls.load(Ordering::Relaxed)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_key_rotates_under_fifty_polling_agents_and_none_loses_contact() {
    let sim = start_sim(SimConfig::fast()).await;
    let hub = RealHub::start().await;

    // The sleeper enrolls, polls once, and is offline through the whole rotation.
    let sleeper_files = agent_files(
        &sim,
        &hub.url,
        &hub.fingerprint,
        Some(&hub.enroll_token().await),
    );
    let sleeper = InProcessAgent::start(&sleeper_files.config_path).await;
    let mut status = sleeper.handles.hub.clone();
    status.wait_for(|s| s.polls >= 1).await.unwrap();
    sleeper.stop().await;

    let mut whole = Vec::new();
    let mut whole_files = Vec::new();
    for _ in 0..3 {
        let files = agent_files(
            &sim,
            &hub.url,
            &hub.fingerprint,
            Some(&hub.enroll_token().await),
        );
        whole.push(InProcessAgent::start(&files.config_path).await);
        whole_files.push(files);
    }
    let watchers: Vec<_> = whole.iter().map(worst_failures).collect();
    let stop = CancellationToken::new();
    let mut light = Vec::new();
    for i in 0..LIGHT_AGENTS {
        light.push(light_agent(&hub, format!("light-{i:02}"), stop.clone()).await);
    }

    // Stage: the fifty polling hosts learn the key from their answers and say they hold it;
    // the sleeper, live as far as the hub knows, does not.
    let next = step(&hub, |c| cert::stage(c, NewKey::SelfSigned(Vec::new())))
        .await
        .unwrap();
    sign_and_publish(&hub).await;
    eventually(
        Duration::from_secs(60),
        "fifty hosts hold the staged key",
        || async {
            let rotation = step(&hub, cert::status).await.unwrap().0;
            rotation.key(KeyState::Staged).map_or(0, |k| k.holders) == 50
        },
    )
    .await;
    let refused = step(&hub, |c| cert::activate(c, false)).await.unwrap_err();
    let said = bosun_errchain::error_chain(&refused);
    assert!(said.contains("1 of 51 live hosts"), "{said}");

    // Activate past the sleeper; every hub connection from now on presents the new key.
    assert_eq!(step(&hub, |c| cert::activate(c, true)).await.unwrap(), next);
    eventually(
        Duration::from_secs(20),
        "the hub serves the new key",
        || async { hub.hub.key_pin() == next },
    )
    .await;
    let at_switch = polls(&whole, &light);
    eventually(
        Duration::from_secs(60),
        "every agent polls again after the switch",
        || async {
            polls(&whole, &light)
                .iter()
                .zip(&at_switch)
                .all(|(now, then)| now > then)
        },
    )
    .await;
    let retired = step(&hub, cert::retire).await.unwrap();
    sign_and_publish(&hub).await;
    let sleeper_name = hub.host(whole_files_host(&sleeper_files)).await["hostname"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(retired.without_active, vec![sleeper_name]);
    let at_retirement = polls(&whole, &light);
    eventually(
        Duration::from_secs(60),
        "every agent polls after the retirement",
        || async {
            polls(&whole, &light)
                .iter()
                .zip(&at_retirement)
                .all(|(now, then)| now > then)
        },
    )
    .await;

    // No agent lost contact: not one light poll failed, no whole agent saw a failed poll.
    stop.cancel();
    let mut light_failures = 0;
    for agent in light {
        agent.task.await.unwrap();
        light_failures += agent.failures.load(Ordering::Relaxed);
    }
    assert_eq!(light_failures, 0, "light agents' failed polls");

    // A whole agent restarted after the retirement trusts the new key from its journal.
    let restarted_files = whole_files.pop().unwrap();
    whole.pop().unwrap().stop().await;
    let restarted = InProcessAgent::start(&restarted_files.config_path).await;
    let mut status = restarted.handles.hub.clone();
    tokio::time::timeout(Duration::from_secs(30), status.wait_for(|s| s.polls >= 1))
        .await
        .expect("the restarted agent polls under the new key")
        .unwrap();
    restarted.stop().await;
    // The operator's tools on that node trust what its agent trusts: `bosun-agentctl` reaches
    // the hub under the new key, though agent.toml still pins only the retired one.
    let sheets = tempfile::tempdir().unwrap();
    crate::escrow_support::agentctl(
        &restarted_files.config_path,
        &[
            "escrow",
            "create",
            "--sheet",
            sheets.path().to_str().unwrap(),
            "--work-factor",
            "12",
        ],
        None,
    )
    .await
    .expect(0, &["Print the sheet now"]);
    for agent in whole {
        agent.stop().await;
    }
    for watcher in watchers {
        assert_eq!(watcher.await.unwrap(), 0, "a whole agent's poll failed");
    }

    // The sleeper comes back trusting only the retired key: it refuses the hub, never polls.
    let sleeper = InProcessAgent::start(&sleeper_files.config_path).await;
    let mut status = sleeper.handles.hub.clone();
    tokio::time::timeout(
        Duration::from_secs(30),
        status.wait_for(|s| s.failures >= 2),
    )
    .await
    .expect("the sleeper's polls fail")
    .unwrap();
    assert_eq!(sleeper.handles.hub.borrow().polls, 0);
    sleeper.stop().await;
}

/// The host id an agent's files enrolled as.
fn whole_files_host(files: &agent_support::AgentFiles) -> Uuid {
    bosun_agentd::links::hub_client::identity::HostIdentity::load(&files.state_dir)
        .unwrap()
        .unwrap()
        .host_id
}

/// `bosunctl hosts list` against the hub on `port`, pinning `pin`: its exit code.
async fn bosunctl_pinning(port: u16, pin: &str, token: &str, home: &std::path::Path) -> i32 {
    let url = format!("https://127.0.0.1:{port}");
    let child = tokio::process::Command::new(hubd_binary::binary("bosunctl"))
        .args(["--hub-url", &url, "--fingerprint", pin, "hosts", "list"])
        .env_clear()
        .env("HOME", home)
        .env("BOSUN_ADMIN_TOKEN", token)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("bosunctl finishes within a minute")
        .unwrap();
    out.status.code().unwrap_or(-1)
}

/// Starts `bosun-hubd serve` on `data` and checks what it printed against what it serves: the
/// printed key pin is the presented certificate's, and `bosunctl` pinning it connects. Gives
/// the printed pin.
async fn serve_and_check(
    data: &std::path::Path,
    token: &str,
    home: &std::path::Path,
    after: &str,
) -> String {
    let port = free_port();
    let served = hubd_binary::serve(data, port);
    let printed = field(&served.printed, "key pin:").to_owned();
    let presented = hubd_binary::presented_key(port).await.to_string();
    assert_eq!(
        printed, presented,
        "after {after}: `serve` printed another key than it serves"
    );
    assert_eq!(
        bosunctl_pinning(port, &printed, token, home).await,
        0,
        "after {after}: bosunctl pinning the printed key pin"
    );
    printed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_prints_the_key_it_serves_through_a_rotation_and_a_restore() {
    agent_support::install_crypto();
    let scratch = tempfile::tempdir().unwrap();
    let (data, home) = (scratch.path().join("hub"), scratch.path().join("home"));
    std::fs::create_dir(&home).unwrap();
    let init = hubd(&["init"], &data);
    let (first, token) = (
        field(&init, "key pin:").to_owned(),
        field(&init, "admin token:").to_owned(),
    );
    assert_eq!(serve_and_check(&data, &token, &home, "init").await, first);

    // Stage and publish: the first key is still the one served.
    let document = scratch.path().join("hub-pins.json");
    let staged = hubd(
        &[
            "cert",
            "rotate",
            "stage",
            "--document",
            document.to_str().unwrap(),
        ],
        &data,
    );
    let next = field(&staged, "staged:").to_owned();
    assert_ne!(next, first);
    assert_eq!(serve_and_check(&data, &token, &home, "stage").await, first);
    let signature = agent_support::signing::sign_policy(&std::fs::read(&document).unwrap());
    std::fs::write(scratch.path().join("hub-pins.json.sig"), signature).unwrap();
    hubd(
        &[
            "cert",
            "rotate",
            "publish",
            "--document",
            document.to_str().unwrap(),
        ],
        &data,
    );
    assert_eq!(
        serve_and_check(&data, &token, &home, "publish").await,
        first
    );

    // Activate: the new key is served, and printed, though the data directory's files still
    // hold the first; the first pin no longer reaches the hub (bosunctl exits 5).
    assert_eq!(
        field(&hubd(&["cert", "rotate", "activate"], &data), "active:"),
        next
    );
    assert_eq!(
        serve_and_check(&data, &token, &home, "activate").await,
        next
    );
    {
        let port = free_port();
        let _served = hubd_binary::serve(&data, port);
        assert_eq!(bosunctl_pinning(port, &first, &token, &home).await, 5);
    }
    hubd(&["cert", "rotate", "retire"], &data);
    assert_eq!(serve_and_check(&data, &token, &home, "retire").await, next);

    // A backup restored on a new data directory serves the key the hub served, and says so.
    let archive = scratch.path().join("hub-backup.tar");
    hubd(&["backup", "--out", archive.to_str().unwrap()], &data);
    std::fs::remove_dir_all(&data).unwrap();
    hubd(&["restore", "--from", archive.to_str().unwrap()], &data);
    assert_eq!(serve_and_check(&data, &token, &home, "restore").await, next);
}
