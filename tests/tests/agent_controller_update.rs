//! A controller update in a golden guest, end to end (DESIGN §11, decision 0102): the real hub
//! (or a hostile one), the agent in-process, the simulator, the helper's real
//! `restart_controller` through the simulator's `pct`, and `bosun-guest`'s loop without a
//! switch command standing in for the controller image, restarted as the guest's systemd
//! restarts its unit.
//!
//! - A signed `controller-update` snapshots the guest, has the helper place the signed image
//!   (hashed on the host, pushed, loaded, tagged, measured back), restarts the controller on it
//!   and commits once it reports healthy; the hub sees the digest the helper measured.
//! - A controller that then lies about its digest changes nothing the hub sees.
//! - A signed digest the node's image archive does not hash to is placed nowhere: the guest is
//!   rolled back to the rollout's snapshot.
//! - A hub that alters the signed digest gets the job refused; nothing is placed.
//!
//! The time from job to healthy and from job to rolled back is printed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use agent_support::hostile_hub::HostileHub;
use agent_support::jobs::{job_result, submit};
use agent_support::signing::{envelope, job_doc, signed_golden_recipe};
use agent_support::*;
use bosun_guest::{ControllerConfig, ControllerLoop, LocalApiClient};
use bosun_proto::bootstrap::Bootstrap;
use bosun_proto::helper::{
    CONTROLLER_UNIT, GUEST_CONTROLLER_DIGEST, GUEST_CONTROLLER_IMAGE, Request,
};
use bosun_pvesim::{RESTART_COUNTS, SimConfig, SimHandle};
use reqwest::Method;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const CONFIG: &str = "[backup]\nstorage = \"local\"\n[controller]\nhealth_window_ms = 15000\nreport_interval_ms = 1000\nheal_after_ms = 5000\nmax_restarts = 2\n";

/// The controller digest the golden recipe baked.
const SIGNED: &str = "sha256:3333333333333333333333333333333333333333333333333333333333333333";
const VERSION: &str = "2026.11-7";
/// The new controller image archive the operator puts on the node.
const NEW_IMAGE: &[u8] = b"bosun controller 1.5, as docker save writes it\n";

fn digest_of(bytes: &[u8]) -> String {
    let hex: String = Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// The desired state: the signed recipe and one golden guest.
fn with_recipe(sim: &SimHandle, guest: Uuid) -> Value {
    let mut doc = desired(sim, &[], "running");
    doc["golden_recipe"] = signed_golden_recipe(VERSION, "bosun/controller:1.4", SIGNED);
    doc["guests"] = json!([{
        "guest_id": guest,
        "hostname": "shop",
        "customer": { "customer_id": "acme", "display_name": "Acme" },
        "resources": { "cores": 1, "memory_mib": 512, "rootfs_gib": 8 },
        "power": "running",
        "golden": { "version": VERSION },
    }]);
    doc
}

/// The node's golden build is the simulator's golden archive; the helper enters guests through
/// the simulator's `pct` and places `NEW_IMAGE` from the test's root-only directory.
fn node(sim: &SimHandle, files: &AgentFiles) {
    let golden = sim.endpoint().golden_volid.clone();
    let file = golden.rsplit('/').next().unwrap().to_owned();
    *files.helper.golden_build.lock() = Some((
        format!("/var/lib/vz/dump/{file}"),
        sim.endpoint().golden_sha256.clone(),
        4096,
    ));
    files.use_sim_pct(sim);
    let archive = files.dir.path().join("controller-image.tar");
    std::fs::write(&archive, NEW_IMAGE).unwrap();
    *files.helper.controller_image.lock() = Some(archive);
}

/// `(digest, state)` the journal holds for `guest`'s controller.
fn record(files: &AgentFiles, guest: Uuid) -> Option<(Option<String>, String)> {
    let db = rusqlite::Connection::open(files.state_dir.join("journal.sqlite")).unwrap();
    db.query_row(
        "SELECT digest, state FROM controllers WHERE guest_id = ?1",
        [guest.to_string()],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )
    .ok()
}

/// The controller unit of the golden guest as its systemd runs it: `bosun-guest`'s loop with
/// no switch command (the controller image), started again whenever the simulated guest counts
/// a `systemctl restart` of the unit, and seeing the guest's `/etc/bosun-bootstrap` (where the
/// helper writes the digest it placed) as the container's read-only volume does.
struct GuestUnit {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl GuestUnit {
    fn start(sim: &SimHandle, vmid: u32, boot: &Bootstrap, dir: PathBuf) -> Self {
        let (sim, boot) = (sim.clone(), boot.clone());
        let stop = CancellationToken::new();
        let token = stop.clone();
        let task = tokio::spawn(async move {
            let counted = format!("{RESTART_COUNTS}/{CONTROLLER_UNIT}");
            let restarts = || sim.guest_file(vmid, &counted).map(|f| f.content);
            let placed = dir.join("controller.digest");
            loop {
                let seen = restarts();
                match sim.guest_file(vmid, GUEST_CONTROLLER_DIGEST) {
                    Some(file) => std::fs::write(&placed, file.content).unwrap(),
                    None => drop(std::fs::remove_file(&placed)),
                }
                let config = ControllerConfig {
                    activate: Vec::new(),
                    health: None,
                    state_file: dir.join("state.digest"),
                    placed_file: Some(placed.clone()),
                    command_timeout: Duration::from_secs(10),
                };
                let client = LocalApiClient::from_bootstrap(&boot).unwrap();
                let looped = ControllerLoop::new(client, config);
                let run = CancellationToken::new();
                let inner = run.clone();
                let running = tokio::spawn(async move { looped.run(&inner).await });
                let stopped = loop {
                    tokio::select! {
                        () = token.cancelled() => break true,
                        () = tokio::time::sleep(Duration::from_millis(50)) => {}
                    }
                    if restarts() != seen {
                        break false;
                    }
                };
                run.cancel();
                let _ = running.await;
                if stopped {
                    return;
                }
            }
        });
        Self { stop, task }
    }

    async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// Waits for the agent's bootstrap push into the provisioned guest; gives its vmid and bootstrap.
async fn provisioned(sim: &SimHandle, files: &AgentFiles) -> (u32, Bootstrap) {
    let helper = files.helper.clone();
    let ids = sim.clone();
    eventually(Duration::from_secs(60), "the bootstrap is pushed", || {
        let vmid = ids.guest_ids().first().copied();
        let helper = &helper;
        async move { vmid.is_some_and(|v| helper.bootstrap_path(v).exists()) }
    })
    .await;
    let vmid = sim.guest_ids()[0];
    (vmid, files.helper.read_bootstrap(vmid))
}

/// The guest's entry in the host's last report at the hub, and that report's sequence number.
async fn reported(hub: &RealHub, host: Uuid, guest: Uuid) -> (Value, u64) {
    let report = hub.host(host).await["last_report"].clone();
    let entry = report["guests"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|g| g["guest_id"] == guest.to_string().as_str())
        .cloned()
        .unwrap_or(Value::Null);
    (entry, report["seq"].as_u64().unwrap_or(0))
}

/// The helper's rollout placements asked so far (`restart_controller` naming an image).
fn placements(files: &AgentFiles) -> Vec<String> {
    let calls = files.helper.calls.lock();
    calls
        .iter()
        .filter_map(|r| match r {
            Request::RestartController(args) => args.image.as_ref().map(|i| i.to_string()),
            _ => None,
        })
        .collect()
}

async fn update(
    hub: &RealHub,
    files: &AgentFiles,
    target: (Uuid, Uuid, u32),
    digest: &str,
) -> Uuid {
    let (host, guest, vmid) = target;
    let (host, guest, vmid) = (host.to_string(), guest.to_string(), vmid.to_string());
    let param = format!("digest={digest}");
    let args = [
        "--kind",
        "controller-update",
        "--host",
        &host,
        "--guest",
        &guest,
        "--vmid",
        &vmid,
        "--param",
        &param,
    ];
    submit(hub, &files.trusted_operator(), files.dir.path(), &args).await
}

fn rollbacks(sim: &SimHandle) -> usize {
    let requests = sim.requests();
    let rollback =
        |r: &&bosun_pvesim::LoggedRequest| r.method == "POST" && r.path.ends_with("/rollback");
    requests.iter().filter(rollback).count()
}

/// A golden guest provisioned from the signed recipe on the real hub, its controller unit
/// running and reported.
struct Golden {
    sim: SimHandle,
    hub: RealHub,
    files: AgentFiles,
    agent: InProcessAgent,
    host: Uuid,
    guest: Uuid,
    vmid: u32,
    boot: Bootstrap,
    unit: GuestUnit,
    _dir: tempfile::TempDir,
}

impl Golden {
    async fn start() -> Self {
        let (sim, hub, files) = enrolled_stack().await;
        node(&sim, &files);
        files.use_local_api(fixed_port(), CONFIG);
        let agent = InProcessAgent::start(&files.config_path).await;
        let host = agent.handles.host_id;
        let guest = Uuid::new_v4();
        hub.put_desired(host, &with_recipe(&sim, guest)).await;
        let (vmid, boot) = provisioned(&sim, &files).await;
        let dir = tempfile::tempdir().unwrap();
        let unit = GuestUnit::start(&sim, vmid, &boot, dir.path().to_owned());
        eventually(
            Duration::from_secs(30),
            "the baked controller reported",
            || async { reported(&hub, host, guest).await.0["controller_digest"] == SIGNED },
        )
        .await;
        // A snapshot taken in the second the token was minted would hold a bootstrap a
        // rollback must treat as stale.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        Self {
            sim,
            hub,
            files,
            agent,
            host,
            guest,
            vmid,
            boot,
            unit,
            _dir: dir,
        }
    }

    async fn update(&self, digest: &str) -> Value {
        let job = update(
            &self.hub,
            &self.files,
            (self.host, self.guest, self.vmid),
            digest,
        )
        .await;
        job_result(&self.hub, self.host, job).await
    }

    async fn stop(self) {
        self.unit.stop().await;
        self.agent.stop().await;
        self.hub.stop().await;
        self.sim.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_update_places_and_measures_the_new_controller_and_rolls_back_an_unsigned_image() {
    let golden = Golden::start().await;
    let Golden {
        sim,
        hub,
        files,
        host,
        guest,
        vmid,
        boot,
        ..
    } = &golden;
    let (host, guest, vmid) = (*host, *guest, *vmid);

    // The operator signs the new image's digest: placed, restarted on, healthy, committed.
    let new = digest_of(NEW_IMAGE);
    let asked = Instant::now();
    let result = golden.update(&new).await;
    let to_healthy = asked.elapsed();
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert_eq!(
        record(files, guest),
        Some((Some(new.clone()), "running".to_owned()))
    );
    assert_eq!(
        placements(files),
        vec![new.trim_start_matches("sha256:").to_owned()]
    );
    let image = sim
        .guest_file(vmid, GUEST_CONTROLLER_IMAGE)
        .map(|f| f.content);
    assert_eq!(
        image.as_deref(),
        Some(NEW_IMAGE),
        "the image is in the guest"
    );
    let placed = sim
        .guest_file(vmid, GUEST_CONTROLLER_DIGEST)
        .map(|f| f.content);
    assert_eq!(placed, Some(format!("{new}\n").into_bytes()));
    assert_eq!(rollbacks(sim), 0);
    eventually(
        Duration::from_secs(30),
        "the measured digest reported",
        || async {
            let (entry, _) = reported(hub, host, guest).await;
            entry["controller_digest"] == new.as_str()
                && entry["controller_expected"] == new.as_str()
        },
    )
    .await;

    // The controller lies about what it runs: the hub still sees what the helper measured.
    let (_, before) = reported(hub, host, guest).await;
    let lie = "sha256:6666666666666666666666666666666666666666666666666666666666666666";
    let tls = bosun_pin::client_config(&boot.local_api.fingerprint).unwrap();
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .build()
        .unwrap();
    let mut fresh = None;
    for _ in 0..300 {
        client
            .post(format!("{}/v1/controller/health", boot.local_api.url))
            .bearer_auth(boot.local_api.token.expose())
            .json(&json!({ "digest": lie, "healthy": true }))
            .send()
            .await
            .unwrap();
        let (entry, seq) = reported(hub, host, guest).await;
        if seq > before {
            fresh = Some(entry);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let entry = fresh.expect("a report after the lie");
    assert_eq!(entry["controller_digest"], new.as_str(), "{entry}");
    let (_, alerts) = hub.admin(Method::GET, "/v1/admin/alerts", None).await;
    assert!(
        !alerts.to_string().contains("controller_mismatch"),
        "a lie raised no mismatch: {alerts}"
    );
    // Nor does a restart of the agent open the door to the lie: the measurement is journaled
    // (and loaded with the controller records at start).
    let journaled: Option<String> =
        rusqlite::Connection::open(files.state_dir.join("journal.sqlite"))
            .unwrap()
            .query_row(
                "SELECT measured FROM controllers WHERE guest_id = ?1",
                [guest.to_string()],
                |row| row.get(0),
            )
            .unwrap();
    assert_eq!(journaled.as_deref(), Some(new.as_str()));

    // A digest the node's archive does not hash to: nothing placed, rolled back.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let unsigned_image = digest_of(b"an image the operator signed but never put on the node");
    let asked = Instant::now();
    let result = golden.update(&unsigned_image).await;
    let to_rolled_back = asked.elapsed();
    assert_eq!(result["outcome"], "failed", "{result}");
    let detail = result["detail"].as_str().unwrap();
    assert!(detail.starts_with("rolled_back:"), "{detail}");
    assert!(detail.contains("controller image archive"), "{detail}");
    assert_eq!(rollbacks(sim), 1);
    assert_eq!(
        record(files, guest),
        Some((Some(new.clone()), "rolled_back".to_owned()))
    );
    let image = sim
        .guest_file(vmid, GUEST_CONTROLLER_IMAGE)
        .map(|f| f.content);
    assert_eq!(
        image.as_deref(),
        Some(NEW_IMAGE),
        "the guest keeps the signed image"
    );
    eprintln!(
        "controller update: job to healthy {} ms; job to rolled back {} ms (health window 15000 ms, reports every 1000 ms)",
        to_healthy.as_millis(),
        to_rolled_back.as_millis()
    );
    golden.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placement_whose_answer_is_lost_is_asked_again_and_committed() {
    let golden = Golden::start().await;
    golden
        .files
        .helper
        .lose_placements
        .store(1, std::sync::atomic::Ordering::SeqCst);
    let new = digest_of(NEW_IMAGE);
    let result = golden.update(&new).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    let hex = new.trim_start_matches("sha256:").to_owned();
    assert_eq!(
        placements(&golden.files),
        vec![hex.clone(), hex],
        "asked again once"
    );
    assert_eq!(rollbacks(&golden.sim), 0, "a lost answer is no verdict");
    assert_eq!(
        record(&golden.files, golden.guest),
        Some((Some(new), "running".to_owned()))
    );
    golden.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_that_alters_the_signed_digest_gets_nothing_placed() {
    let sim = start_sim(SimConfig::fast()).await;
    let hub = HostileHub::start().await;
    let files = agent_files(
        &sim,
        &hub.url,
        &hub.fingerprint,
        Some("hostile-enroll-token"),
    );
    node(&sim, &files);
    files.use_local_api(fixed_port(), CONFIG);
    let operator = files.trusted_operator();
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let guest = Uuid::new_v4();
    hub.set_desired(with_recipe(&sim, guest));
    let (vmid, _boot) = provisioned(&sim, &files).await;

    // The operator signed one digest; the hub presents the job naming the node's image.
    let signed = job_doc(
        "controller-update",
        host,
        guest,
        vmid,
        json!({ "digest": digest_of(b"the image the operator signed") }),
        1,
    );
    let bytes = serde_json::to_vec(&signed).unwrap();
    let signature = operator.sign(&bytes, "bosun-job@v1");
    let altered = String::from_utf8(bytes).unwrap().replace(
        &digest_of(b"the image the operator signed"),
        &digest_of(NEW_IMAGE),
    );
    hub.set_jobs(vec![envelope(altered.as_bytes(), &signature)]);
    let id = signed["job_id"].as_str().unwrap().to_owned();
    eventually(
        Duration::from_secs(30),
        "the altered job refused",
        || async {
            hub.audit().iter().any(|(action, d)| {
                action == "job.refused"
                    && d["job_id"] == id.as_str()
                    && d["detail"]["code"] == "bad_signature"
            })
        },
    )
    .await;
    assert_eq!(placements(&files), Vec::<String>::new(), "nothing placed");
    let image = sim
        .guest_file(vmid, GUEST_CONTROLLER_IMAGE)
        .map(|f| f.content);
    assert_ne!(
        image.as_deref(),
        Some(NEW_IMAGE),
        "the guest keeps its golden image"
    );
    agent.stop().await;
    hub.shutdown();
    sim.shutdown().await;
}
