//! The hub backed up while twenty hosts poll it, destroyed, and brought back from the archive,
//! all with the real `bosun-hubd` binary over real TLS: two whole agents (in process, against
//! the simulator) and eighteen light ones (the agent's own hub client, polling every 100 ms).
//!
//! What each agent does after the restore, shown here:
//! - every host the backup knows polls the restored hub again, with the same key and pin;
//! - an agent that took a desired state after the backup holds a generation the restored hub
//!   never stored: the hub answers with its own, lower one, and the agent acts on it as a hub
//!   reset (audited `desired.generation_reset`), never refusing it;
//! - the restored hub numbers no generation for a host before that host has polled it (409
//!   `not_seen_since_restore`), and after, numbers the next one above what the host held;
//! - a host enrolled after the backup is unknown to the restored hub: its polls are refused
//!   (404 `unknown_host`) and it must be enrolled again;
//! - an agent whose key rotated after the backup presents a key the restored hub never knew:
//!   refused, it falls back to the key the rotation replaced (which the restored hub holds),
//!   audits it (`hub.host_key_fell_back`) and rotates again once its pace allows;
//! - the restore is in the hub's audit trail (`hub_restored`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use crate::agent_support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agent_support::hubd_binary::{field, free_port, hubd, serve};
use agent_support::{InProcessAgent, agent_files, desired, eventually, start_sim};
use bosun_agentd::links::hub_client::client::HubClient;
use bosun_pin::{Pin, Trust};
use bosun_proto::poll::PollRequest;
use bosun_proto::report::StateReport;
use bosun_pvesim::SimConfig;
use reqwest::Method;
use secrecy::SecretString;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Light agents beside the two whole ones: twenty hosts in all.
const LIGHT_AGENTS: usize = 18;

/// The admin API, as `bosunctl` reaches it.
struct Admin {
    url: String,
    token: String,
    client: reqwest::Client,
}

impl Admin {
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn enroll_token(&self) -> String {
        let (status, body) = self
            .call(
                Method::POST,
                "/v1/admin/enrollment-tokens",
                Some(json!({ "ttl_seconds": 600, "require_approval": false })),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        body["token"].as_str().unwrap().to_owned()
    }

    async fn put_desired(&self, host: Uuid, document: &Value) -> (u16, Value) {
        self.call(
            Method::PUT,
            &format!("/v1/admin/hosts/{host}/desired"),
            Some(document.clone()),
        )
        .await
    }

    async fn host(&self, host: Uuid) -> Value {
        let (status, body) = self
            .call(Method::GET, &format!("/v1/admin/hosts/{host}"), None)
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }
}

fn report() -> StateReport {
    StateReport::empty(1, "0.1.0")
}

/// A light agent: enrolled, then polling every 100 ms until `stop`; counts answered and
/// failed polls and keeps the last failure's text.
struct Light {
    answered: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    last_error: Arc<parking_lot::Mutex<String>>,
    task: tokio::task::JoinHandle<()>,
}

async fn light_agent(url: &str, pin: &str, admin: &Admin, stop: CancellationToken) -> Light {
    let client = HubClient::with_trust(
        url.parse().unwrap(),
        &Trust::Pins(vec![Pin::parse(pin).unwrap()]),
    )
    .unwrap();
    let token = SecretString::from(admin.enroll_token().await);
    let enrolled = client.enroll(&token, "light", None).await.unwrap();
    let (host_id, key) = (
        enrolled.host_id,
        SecretString::from(enrolled.host_key.expose().to_owned()),
    );
    let answered = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let last_error = Arc::new(parking_lot::Mutex::new(String::new()));
    let (ok, bad, said) = (
        Arc::clone(&answered),
        Arc::clone(&failed),
        Arc::clone(&last_error),
    );
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
                hub_pins: Vec::new(),
                next_host_key_sha256: None,
            };
            let id = Uuid::new_v4().to_string();
            match client
                .poll(host_id, &key, Duration::ZERO, &request, &id)
                .await
            {
                Ok(_) => {
                    ok.fetch_add(1, Ordering::Relaxed);
                }
                Err(err) => {
                    bad.fetch_add(1, Ordering::Relaxed);
                    *said.lock() = bosun_errchain::error_chain(&err);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    Light {
        answered,
        failed,
        last_error,
        task,
    }
}

/// The generation an in-process agent holds.
/// The key `host.json` in `state_dir` holds.
fn host_key(state_dir: &Path) -> String {
    let text = std::fs::read_to_string(state_dir.join("host.json")).unwrap();
    serde_json::from_str::<Value>(&text).unwrap()["host_key"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn holds(agent: &InProcessAgent) -> u64 {
    agent
        .handles
        .desired
        .borrow()
        .as_ref()
        .map_or(0, |d| d.generation)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_restored_from_its_backup_keeps_every_agent_it_knew() {
    agent_support::install_crypto();
    let sim = start_sim(SimConfig::fast()).await;
    let scratch = tempfile::tempdir().unwrap();
    let data = scratch.path().join("hub");
    let archive = scratch.path().join("hub-backup.tar");

    let init = hubd(&["init"], &data);
    let pin = field(&init, "fingerprint:").to_owned();
    let token = field(&init, "admin token:").to_owned();
    let port = free_port();
    let url = format!("https://127.0.0.1:{port}");
    let hub = serve(&data, port);
    let admin = Admin {
        url: url.clone(),
        token,
        client: reqwest::Client::builder()
            .use_preconfigured_tls(bosun_hubd::tls::pinned_client_config(&pin).unwrap())
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap(),
    };

    // Twenty hosts: two whole agents with a desired state applied, eighteen light ones.
    let mut whole = Vec::new();
    let mut whole_files = Vec::new();
    for _ in 0..2 {
        let files = agent_files(&sim, &url, &pin, Some(&admin.enroll_token().await));
        // The fall-back below rotates again once the pace allows: 10 s here, not an hour.
        files.pace_host_keys(10);
        let agent = InProcessAgent::start(&files.config_path).await;
        whole.push(agent);
        whole_files.push(files);
    }
    let ids: Vec<Uuid> = whole.iter().map(|a| a.handles.host_id).collect();
    let first = desired(&sim, &[], "running");
    for id in &ids {
        let (status, body) = admin.put_desired(*id, &first).await;
        assert_eq!(status, 200, "{body}");
    }
    for agent in &whole {
        let mut reconcile = agent.handles.reconcile.clone();
        tokio::time::timeout(
            Duration::from_secs(60),
            reconcile.wait_for(|s| s.applied_generation == 1),
        )
        .await
        .expect("each whole agent applies generation 1")
        .unwrap();
    }
    let stop = CancellationToken::new();
    let mut light = Vec::new();
    for _ in 0..LIGHT_AGENTS {
        light.push(light_agent(&url, &pin, &admin, stop.clone()).await);
    }

    // The backup, while every host polls.
    let before = light
        .iter()
        .map(|l| l.answered.load(Ordering::Relaxed))
        .sum::<u64>();
    let backed_up = hubd(&["backup", "--out", archive.to_str().unwrap()], &data);
    assert_eq!(field(&backed_up, "hosts:"), "20", "{backed_up}");
    let after = light
        .iter()
        .map(|l| l.answered.load(Ordering::Relaxed))
        .sum::<u64>();
    assert_eq!(
        light
            .iter()
            .map(|l| l.failed.load(Ordering::Relaxed))
            .sum::<u64>(),
        0,
        "no poll failed while the backup ran"
    );
    eprintln!("polls answered while the backup ran: {}", after - before);

    // After the backup: the first whole agent moves on to generation 2, and a host enrolls.
    let mut second = first.clone();
    second["restore_test_policy"]["interval_days"] = json!(14);
    let (status, body) = admin.put_desired(ids[0], &second).await;
    assert_eq!(
        (status, body["generation"].as_u64()),
        (200, Some(2)),
        "{body}"
    );
    let mut reconcile = whole[0].handles.reconcile.clone();
    tokio::time::timeout(
        Duration::from_secs(60),
        reconcile.wait_for(|s| s.applied_generation == 2),
    )
    .await
    .expect("the first whole agent applies generation 2")
    .unwrap();
    // ...and the second whole agent's key rotates.
    let second_state = whole_files[1].state_dir.clone();
    let key_at_backup = host_key(&second_state);
    let (status, body) = admin
        .call(
            Method::POST,
            &format!("/v1/admin/hosts/{}/rotate-key", ids[1]),
            None,
        )
        .await;
    assert_eq!(status, 202, "{body}");
    eventually(
        Duration::from_secs(60),
        "the second agent's key rotates",
        || async {
            host_key(&second_state) != key_at_backup
                && !second_state.join("host-key-next.json").exists()
        },
    )
    .await;
    let key_after_backup = host_key(&second_state);
    let latecomer = light_agent(&url, &pin, &admin, stop.clone()).await;
    eventually(Duration::from_secs(20), "the latecomer polls", || async {
        latecomer.answered.load(Ordering::Relaxed) > 0
    })
    .await;

    // The hub is lost: killed, its data directory gone. Then restored from the archive.
    drop(hub);
    std::fs::remove_dir_all(&data).unwrap();
    let restored = hubd(&["restore", "--from", archive.to_str().unwrap()], &data);
    assert_eq!(field(&restored, "hosts:"), "20", "{restored}");
    let at_restore: Vec<u64> = light
        .iter()
        .map(|l| l.answered.load(Ordering::Relaxed))
        .collect();
    let whole_at_restore: Vec<u64> = whole.iter().map(|a| a.handles.hub.borrow().polls).collect();
    let latecomer_failed = latecomer.failed.load(Ordering::Relaxed);
    let _hub = serve(&data, port);

    // Every host the backup knew polls again, with the key and pin it had.
    eventually(
        Duration::from_secs(60),
        "every host the backup knew polls the restored hub",
        || async {
            light
                .iter()
                .zip(&at_restore)
                .all(|(l, then)| l.answered.load(Ordering::Relaxed) > *then)
                && whole
                    .iter()
                    .zip(&whole_at_restore)
                    .all(|(a, then)| a.handles.hub.borrow().polls > *then)
        },
    )
    .await;

    // The first whole agent held generation 2, which the backup never saw: it takes the
    // restored hub's generation 1 as a hub reset, and audits it.
    eventually(
        Duration::from_secs(60),
        "the first whole agent follows the restored hub back to generation 1",
        || async { holds(&whole[0]) == 1 },
    )
    .await;
    let audit = whole[0]
        .handles
        .journal
        .audit_since(0, 10_000)
        .await
        .unwrap();
    let reset = audit
        .iter()
        .find(|e| e.event.event == "desired.generation_reset")
        .expect("the reset is audited");
    assert_eq!(reset.event.detail["previous"], 2, "{:?}", reset.event);
    assert_eq!(
        holds(&whole[1]),
        1,
        "the second agent, as backed up, is unchanged"
    );

    // The second agent's key rotated after the backup: the restored hub knows only the key it
    // replaced. The agent falls back to that one, and rotates again from it.
    eventually(
        Duration::from_secs(60),
        "the second agent rotates again from the key the restored hub knows",
        || async {
            let now = host_key(&second_state);
            now != key_at_backup
                && now != key_after_backup
                && !second_state.join("host-key-next.json").exists()
        },
    )
    .await;
    let audit = whole[1]
        .handles
        .journal
        .audit_since(0, 10_000)
        .await
        .unwrap();
    assert!(
        audit
            .iter()
            .any(|e| e.event.event == "hub.host_key_fell_back"),
        "the fallback is audited"
    );

    // The next generation for the first host is numbered above what it held, and applied.
    let (status, body) = admin.put_desired(ids[0], &second).await;
    assert_eq!(status, 200, "{body}");
    let generation = body["generation"].as_u64().unwrap();
    assert!(generation >= 2, "numbered above generation 1: {body}");
    eventually(
        Duration::from_secs(60),
        "the first whole agent applies the new generation and says so",
        || async {
            holds(&whole[0]) == generation
                && admin.host(ids[0]).await["applied_generation"] == generation
        },
    )
    .await;

    // The latecomer is unknown to the restored hub: refused, to be enrolled again.
    eventually(
        Duration::from_secs(20),
        "the latecomer's polls are refused",
        || async { latecomer.failed.load(Ordering::Relaxed) > latecomer_failed + 1 },
    )
    .await;
    let said = latecomer.last_error.lock().clone();
    assert!(
        said.contains("unknown_host") || said.contains("404"),
        "{said}"
    );

    // The restore is in the audit trail.
    let (status, events) = admin
        .call(Method::GET, "/v1/admin/events?limit=1000", None)
        .await;
    assert_eq!(status, 200, "{events}");
    let restored_event = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "hub_restored")
        .cloned()
        .expect("a hub_restored event");
    assert_eq!(restored_event["detail"]["source"], "hub-backup.tar");

    stop.cancel();
    let mut light_failures_after = 0;
    for (agent, then) in light.into_iter().zip(at_restore) {
        let failed = agent.failed.load(Ordering::Relaxed);
        agent.task.await.unwrap();
        assert!(agent.answered.load(Ordering::Relaxed) > then);
        light_failures_after += failed;
    }
    // Polls fail only while the hub is down (between the kill and the restored hub serving).
    eprintln!("light agents' failed polls while the hub was down: {light_failures_after}");
    latecomer.task.await.unwrap();
    for agent in whole {
        agent.stop().await;
    }
    drop(whole_files);
}
