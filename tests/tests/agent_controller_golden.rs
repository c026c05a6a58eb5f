//! The controller of a guest provisioned from the golden base is managed from the start
//! (DESIGN §8, decision 0074): the real hub (or a hostile one), the agent in-process, the
//! simulator, the fake helper building the signed recipe, and `bosun-guest`'s controller loop
//! standing in for the controller in the guest.
//!
//! - Provisioning journals the recipe's signed controller digest as the guest's record
//!   (`running`); the local API tells the controller that digest.
//! - The report carries the digest the controller says it runs beside the recorded one; a
//!   controller running another raises `controller_mismatch` at the hub, which resolves as
//!   `controller_matched` once it runs the signed one.
//! - A crashed controller is restarted in place through the helper exactly as a rolled-out
//!   one: never a destroy, never a rollback. The time from crash to healed is printed.
//! - A hub cannot choose the controller: desired state has no `controller_version` (the real
//!   hub refuses it, the agent refuses a hostile hub's document carrying it), and nothing a
//!   hub sends changes the record.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::{Duration, Instant};

use agent_support::hostile_hub::HostileHub;
use agent_support::signing::signed_golden_recipe;
use agent_support::*;
use bosun_guest::{ControllerConfig, ControllerLoop, LocalApiClient};
use bosun_proto::bootstrap::Bootstrap;
use bosun_pvesim::{SimConfig, SimHandle};
use reqwest::Method;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const CONFIG: &str = "[backup]\nstorage = \"local\"\n[controller]\nhealth_window_ms = 15000\nreport_interval_ms = 1000\nheal_after_ms = 2500\nmax_restarts = 2\n";

/// The controller digest the operator's recipe bakes into the golden base.
const SIGNED: &str = "sha256:3333333333333333333333333333333333333333333333333333333333333333";
/// A digest the operator never signed.
const UNSIGNED: &str = "sha256:6666666666666666666666666666666666666666666666666666666666666666";
const VERSION: &str = "2026.11-7";

/// The desired state: the signed recipe and one guest naming its version.
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

/// What the helper's golden build "produces": the simulator's golden archive.
fn build_produces(sim: &SimHandle, files: &AgentFiles) {
    let golden = sim.endpoint().golden_volid.clone();
    let file = golden.rsplit('/').next().unwrap().to_owned();
    *files.helper.golden_build.lock() = Some((
        format!("/var/lib/vz/dump/{file}"),
        sim.endpoint().golden_sha256.clone(),
        4096,
    ));
}

/// `(digest, state, restarts)` the journal holds for `guest`'s controller.
fn record(files: &AgentFiles, guest: Uuid) -> Option<(Option<String>, String, u32)> {
    let db = rusqlite::Connection::open(files.state_dir.join("journal.sqlite")).unwrap();
    db.query_row(
        "SELECT digest, state, restarts FROM controllers WHERE guest_id = ?1",
        [guest.to_string()],
        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
    )
    .ok()
}

/// The guest's controller: `bosun-guest`'s loop, activating whatever it is told (a script
/// that succeeds), its state file in `dir`.
struct Controller {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Controller {
    fn start(boot: &Bootstrap, dir: &std::path::Path) -> Self {
        let client = LocalApiClient::from_bootstrap(boot).unwrap();
        let config = ControllerConfig {
            activate: vec!["true".into()],
            health: None,
            state_file: dir.join("controller.digest"),
            placed_file: None,
            command_timeout: Duration::from_secs(10),
        };
        let stop = CancellationToken::new();
        let looped = ControllerLoop::new(client, config);
        let token = stop.clone();
        let task = tokio::spawn(async move { looped.run(&token).await });
        Self { stop, task }
    }

    /// Crashes it: no more reports.
    async fn crash(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// A client of the local API as the guest's bootstrap names it.
fn local_api(boot: &Bootstrap) -> reqwest::Client {
    let tls = bosun_pin::client_config(&boot.local_api.fingerprint).unwrap();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .build()
        .unwrap()
}

async fn told(boot: &Bootstrap) -> Value {
    local_api(boot)
        .get(format!("{}/v1/controller", boot.local_api.url))
        .bearer_auth(boot.local_api.token.expose())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// A health report as a controller running `digest` sends it.
async fn report_health(boot: &Bootstrap, digest: &str) -> Value {
    local_api(boot)
        .post(format!("{}/v1/controller/health", boot.local_api.url))
        .bearer_auth(boot.local_api.token.expose())
        .json(&json!({ "digest": digest, "healthy": true, "detail": "tampered" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn alerts(hub: &RealHub, kind: &str) -> Vec<Value> {
    let (_, alerts) = hub.admin(Method::GET, "/v1/admin/alerts", None).await;
    alerts
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["kind"] == kind)
        .cloned()
        .collect()
}

/// The guest's entry in the host's last report at the hub.
async fn reported(hub: &RealHub, host: Uuid, guest: Uuid) -> Value {
    let report = hub.host(host).await["last_report"].clone();
    report["guests"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|g| g["guest_id"] == guest.to_string().as_str())
        .cloned()
        .unwrap_or(Value::Null)
}

/// Provisions the guest from the signed recipe; gives its vmid and bootstrap.
async fn provisioned(
    sim: &SimHandle,
    files: &AgentFiles,
    vmid_of: impl Fn() -> Option<u32>,
) -> (u32, Bootstrap) {
    let helper = files.helper.clone();
    eventually(Duration::from_secs(60), "the bootstrap is pushed", || {
        let vmid = vmid_of();
        let helper = &helper;
        async move { vmid.is_some_and(|v| helper.bootstrap_path(v).exists()) }
    })
    .await;
    let vmid = vmid_of().unwrap();
    assert_eq!(sim.guest_ids(), vec![vmid]);
    (vmid, files.helper.read_bootstrap(vmid))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provisioned_guests_controller_is_the_recipes_reported_checked_and_healed_in_place() {
    let (sim, hub, files) = enrolled_stack().await;
    build_produces(&sim, &files);
    files.use_local_api(fixed_port(), CONFIG);
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let guest = Uuid::new_v4();
    hub.put_desired(host, &with_recipe(&sim, guest)).await;
    let sim_ids = sim.clone();
    let (vmid, boot) = provisioned(&sim, &files, || sim_ids.guest_ids().first().copied()).await;

    // Provisioning journaled the recipe's signed digest as the guest's record, in its own
    // step, and the local API tells the controller that digest.
    assert_eq!(
        record(&files, guest),
        Some((Some(SIGNED.to_owned()), "running".to_owned(), 0))
    );
    let told = told(&boot).await;
    assert_eq!(
        (told["digest"].as_str(), told["status"].as_str()),
        (Some(SIGNED), Some("running"))
    );
    let db = rusqlite::Connection::open(files.state_dir.join("journal.sqlite")).unwrap();
    let steps: u32 = db
        .query_row(
            "SELECT count(*) FROM op_steps JOIN operations USING (op_id)
             WHERE operations.kind = 'provision' AND op_steps.name = 'manage_controller'
               AND op_steps.state = 'ok'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(steps, 1, "one manage_controller step");

    // A controller running code the operator never signed: the hub alerts, naming both.
    let answer = report_health(&boot, UNSIGNED).await;
    assert_eq!(answer["desired_digest"], SIGNED);
    assert_eq!(answer["matches"], false);
    let mut mismatch = None;
    for _ in 0..300 {
        if let Some(alert) = alerts(&hub, "controller_mismatch").await.pop() {
            mismatch = Some(alert);
            break;
        }
        // Reporting keeps it from being restarted meanwhile (it is not silent).
        report_health(&boot, UNSIGNED).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mismatch = mismatch.expect("a controller_mismatch alert at the hub");
    let message = mismatch["message"].as_str().unwrap();
    assert!(
        message.contains(UNSIGNED) && message.contains(SIGNED),
        "{message}"
    );
    let entry = reported(&hub, host, guest).await;
    assert_eq!(entry["controller_digest"], UNSIGNED);
    assert_eq!(entry["controller_expected"], SIGNED);

    // The controller switches to the signed digest it is told: reported, resolved.
    let dir = tempfile::tempdir().unwrap();
    let controller = Controller::start(&boot, dir.path());
    eventually(Duration::from_secs(30), "controller_matched", || async {
        !alerts(&hub, "controller_matched").await.is_empty()
    })
    .await;
    eventually(
        Duration::from_secs(30),
        "the signed digest reported",
        || async {
            let report = hub.host(host).await["last_report"].clone();
            reported(&hub, host, guest).await["controller_digest"] == SIGNED
                && report["versions"]["controller"] == SIGNED
        },
    )
    .await;

    // It crashes: restarted in place through the helper, as a rolled-out one is. (The golden
    // build's boot test destroyed its own scratch guest before: only what follows counts.)
    let destroyed_before = destructive(&sim).len();
    controller.crash().await;
    let crashed = Instant::now();
    let helper = files.helper.clone();
    eventually(Duration::from_secs(30), "an in-place restart", || {
        let helper = helper.clone();
        async move { !helper.controller_restarts().is_empty() }
    })
    .await;
    let restarted = crashed.elapsed();
    assert_eq!(files.helper.controller_restarts(), vec![vmid]);
    // The guest's systemd starts it again; it reports healthy and the count clears.
    let controller = Controller::start(&boot, dir.path());
    eventually(Duration::from_secs(30), "healthy again", || async {
        record(&files, guest)
            .is_some_and(|(_, state, restarts)| state == "running" && restarts == 0)
    })
    .await;
    let healed = crashed.elapsed();
    eprintln!(
        "controller crash to in-place restart: {} ms; crash to healthy again: {} ms (heal_after 2500 ms)",
        restarted.as_millis(),
        healed.as_millis()
    );
    let destroyed = destructive(&sim).split_off(destroyed_before);
    assert!(
        destroyed.is_empty(),
        "healing never destroys: {destroyed:?}"
    );
    let rollbacks = sim
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/rollback"))
        .count();
    assert_eq!(rollbacks, 0, "healing never rolls back");
    assert_eq!(sim.guest_ids(), vec![vmid]);

    // Silent for good: broken after max_restarts, alerted; still no rollback.
    controller.crash().await;
    eventually(Duration::from_secs(30), "controller_broken", || async {
        !alerts(&hub, "controller_broken").await.is_empty()
    })
    .await;
    assert_eq!(
        record(&files, guest).map(|r| r.1),
        Some("broken".to_owned())
    );
    let destroyed = destructive(&sim).split_off(destroyed_before);
    assert!(destroyed.is_empty(), "{destroyed:?}");
    assert_eq!(sim.guest_running(vmid), Some(true));

    // The real hub refuses a desired state naming a controller version.
    let mut pinned = with_recipe(&sim, guest);
    pinned["controller_version"] = json!("evil");
    let (status, body) = hub
        .admin(
            Method::PUT,
            &format!("/v1/admin/hosts/{host}/desired"),
            Some(pinned),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_hub_cannot_choose_or_change_a_provisioned_guests_controller() {
    let sim = start_sim(SimConfig::fast()).await;
    let hub = HostileHub::start().await;
    let files = agent_files(
        &sim,
        &hub.url,
        &hub.fingerprint,
        Some("hostile-enroll-token"),
    );
    build_produces(&sim, &files);
    files.use_local_api(fixed_port(), CONFIG);
    let agent = InProcessAgent::start(&files.config_path).await;
    let guest = Uuid::new_v4();
    hub.set_desired(with_recipe(&sim, guest));
    let sim_ids = sim.clone();
    let (_vmid, boot) = provisioned(&sim, &files, || sim_ids.guest_ids().first().copied()).await;
    assert_eq!(
        record(&files, guest).map(|r| r.0),
        Some(Some(SIGNED.to_owned()))
    );

    // A document naming a controller version is refused whole, and audited.
    let mut pinned = with_recipe(&sim, guest);
    pinned["controller_version"] = json!(UNSIGNED);
    hub.set_desired(pinned);
    eventually(Duration::from_secs(30), "desired.refused", || async {
        hub.audit().iter().any(|(action, detail)| {
            action == "desired.refused"
                && detail["detail"]["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("controller_version"))
        })
    })
    .await;

    // A recipe whose controller the hub swapped (the operator's signature over other bytes)
    // and the guest moved to a signed archive without a controller: the record stays.
    let mut swapped = with_recipe(&sim, guest);
    let forged = bosun_proto::golden_recipe::GoldenRecipeDocument::new(
        VERSION,
        "evil/miner:latest",
        UNSIGNED,
    );
    swapped["golden_recipe"]["document"] = json!(base64_of(&serde_json::to_vec(&forged).unwrap()));
    swapped["guests"][0]["golden"] = agent_support::signing::signed_golden(
        &sim.endpoint().golden_volid,
        &sim.endpoint().golden_sha256,
    );
    hub.set_desired(swapped);
    eventually(
        Duration::from_secs(30),
        "the forged recipe refused",
        || async {
            hub.audit()
                .iter()
                .any(|(action, _)| action == "golden.build_refused")
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        record(&files, guest).map(|r| r.0),
        Some(Some(SIGNED.to_owned()))
    );
    assert_eq!(told(&boot).await["digest"], SIGNED);
    assert_eq!(sim.guest_ids().len(), 1, "nothing provisioned again");
    agent.stop().await;
    hub.shutdown();
    sim.shutdown().await;
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
