//! Golden images with provenance end to end: the operator signs a golden recipe (version,
//! controller image and digest) into the desired state; the agent has its helper build that
//! version once and journals the build with the helper's hash and size; a guest that names
//! the version is provisioned from this host's own build; a guest naming a version this
//! host never built is refused (`golden_refused`), and a recipe the hub altered is never
//! built. A build is used only once it booted in a scratch guest; one that does not boot is
//! audited `golden.verify_failed`, raises `golden_verify_failed` at the hub and is not used.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::signing::signed_golden_recipe;
use agent_support::*;
use bosun_pvesim::SimHandle;
use serde_json::{Value, json};
use uuid::Uuid;

const DIGEST: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

/// The restores (`POST /nodes/{node}/lxc`) that reached Proxmox, by archive.
fn restores(sim: &SimHandle) -> Vec<String> {
    sim.requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/nodes/pve/lxc")
        .filter_map(|r| {
            r.params
                .iter()
                .find(|(k, _)| k == "ostemplate")
                .map(|(_, v)| v.clone())
        })
        .collect()
}

fn with_recipe(mut desired: Value, recipe: &Value, guests: &[(Uuid, &str, &str)]) -> Value {
    desired["golden_recipe"] = recipe.clone();
    desired["guests"] = guests
        .iter()
        .map(|(id, name, version)| {
            json!({
                "guest_id": id,
                "hostname": name,
                "customer": { "customer_id": "acme", "display_name": "Acme" },
                "resources": { "cores": 1, "memory_mib": 512, "rootfs_gib": 4 },
                "power": "running",
                "golden": { "version": version },
            })
        })
        .collect();
    desired
}

async fn golden_refusals(hub: &RealHub) -> Vec<Value> {
    let (_, alerts) = hub
        .admin(reqwest::Method::GET, "/v1/admin/alerts", None)
        .await;
    alerts
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["kind"] == "golden_refused")
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_recipe_is_built_here_and_guests_naming_its_version_start_from_that_build() {
    let (sim, hub, files) = enrolled_stack().await;
    let golden = sim.endpoint().golden_volid.clone();
    let file = golden.rsplit('/').next().unwrap().to_owned();
    // What the helper's build "produces": the simulator's golden archive, with its hash.
    *files.helper.golden_build.lock() = Some((
        format!("/var/lib/vz/dump/{file}"),
        sim.endpoint().golden_sha256.clone(),
        4096,
    ));
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let journal = agent.handles.journal.clone();

    // A recipe the hub altered (the controller swapped under the operator's signature).
    let mut forged = signed_golden_recipe("2026.11-1", "bosun/controller:1.4", DIGEST);
    let bytes = bosun_proto::golden_recipe::GoldenRecipeDocument::new(
        "2026.11-1",
        "evil/miner:latest",
        DIGEST,
    );
    forged["document"] = json!(base64_of(&serde_json::to_vec(&bytes).unwrap()));
    hub.put_desired(
        host,
        &with_recipe(desired(&sim, &[], "running"), &forged, &[]),
    )
    .await;
    eventually(
        Duration::from_secs(30),
        "the forged recipe is refused",
        || async {
            journal
                .audit_since(0, 1000)
                .await
                .unwrap()
                .iter()
                .any(|e| e.event.event == "golden.build_refused")
        },
    )
    .await;
    assert!(!files.helper.verbs().contains(&"build_golden"));

    // The operator's recipe: built once, journaled with the helper's facts.
    let recipe = signed_golden_recipe("2026.11-1", "bosun/controller:1.4", DIGEST);
    hub.put_desired(
        host,
        &with_recipe(desired(&sim, &[], "running"), &recipe, &[]),
    )
    .await;
    eventually(Duration::from_secs(30), "the recipe is built", || async {
        journal
            .golden_build("2026.11-1".into(), None)
            .await
            .unwrap()
            .is_some()
    })
    .await;
    let build = journal
        .golden_build("2026.11-1".into(), Some(DIGEST.into()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(build.volid, golden);
    assert_eq!(build.size, 4096);

    // Guests: one names the built version, one a version never built here.
    let (good, bad) = (Uuid::new_v4(), Uuid::new_v4());
    let guests = [(good, "web1", "2026.11-1"), (bad, "web2", "2027.01-1")];
    hub.put_desired(
        host,
        &with_recipe(desired(&sim, &[], "running"), &recipe, &guests),
    )
    .await;
    let status = agent.handles.reconcile.clone();
    running_vmid(&status, good).await;
    eventually(
        Duration::from_secs(30),
        "the hub raises golden_refused",
        || async { !golden_refusals(&hub).await.is_empty() },
    )
    .await;
    let refused = golden_refusals(&hub).await;
    assert_eq!(refused.len(), 1, "{refused:?}");
    let message = refused[0]["message"].as_str().unwrap();
    assert!(
        message.contains("golden version 2027.01-1") && message.contains("unknown_version"),
        "{message}"
    );
    assert_eq!(
        restores(&sim),
        vec![golden.clone(), golden.clone()],
        "the build's boot test, then the guest: both from the build"
    );
    let builds = files
        .helper
        .verbs()
        .iter()
        .filter(|v| **v == "build_golden")
        .count();
    assert_eq!(builds, 1, "the same recipe is not built twice");
    agent.stop().await;
}

async fn alerts_of(hub: &RealHub, kind: &str) -> Vec<Value> {
    let (_, alerts) = hub
        .admin(reqwest::Method::GET, "/v1/admin/alerts", None)
        .await;
    alerts
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["kind"] == kind)
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_that_does_not_boot_in_a_scratch_guest_is_never_used_and_the_hub_alerts() {
    let (sim, hub, files) = enrolled_stack().await;
    let golden = sim.endpoint().golden_volid.clone();
    let file = golden.rsplit('/').next().unwrap().to_owned();
    *files.helper.golden_build.lock() = Some((
        format!("/var/lib/vz/dump/{file}"),
        sim.endpoint().golden_sha256.clone(),
        4096,
    ));
    let before: Vec<u32> = sim.guest_ids();
    // Every container start fails: the new base cannot boot.
    sim.set_faults(bosun_pvesim::FaultConfig {
        failed_task_rate: 1.0,
        failed_task_types: vec!["vzstart".into()],
        ..bosun_pvesim::FaultConfig::default()
    });
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let journal = agent.handles.journal.clone();
    let doc = bosun_proto::golden_recipe::GoldenRecipeDocument::new(
        "2026.11-1",
        "bosun/controller:1.4",
        DIGEST,
    )
    .with_refresh_days(7);
    let recipe = agent_support::signing::signed_golden_recipe_document(&doc);
    hub.put_desired(
        host,
        &with_recipe(desired(&sim, &[], "running"), &recipe, &[]),
    )
    .await;
    eventually(
        Duration::from_secs(30),
        "the hub raises golden_verify_failed",
        || async { !alerts_of(&hub, "golden_verify_failed").await.is_empty() },
    )
    .await;
    let audit = journal.audit_since(0, 1000).await.unwrap();
    let failed: Vec<_> = audit
        .iter()
        .filter(|e| e.event.event == "golden.verify_failed")
        .collect();
    assert_eq!(failed[0].event.detail["reason"], "boot_test_failed");
    let message = alerts_of(&hub, "golden_verify_failed").await[0]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("boot_test_failed"), "{message}");
    // Built, tried in a scratch guest (restored from the build), destroyed, never used.
    assert!(files.helper.verbs().contains(&"build_golden"));
    assert_eq!(restores(&sim), vec![golden.clone()]);
    eventually(
        Duration::from_secs(10),
        "the scratch guest is gone",
        || async { sim.guest_ids() == before },
    )
    .await;
    assert!(
        journal
            .golden_build("2026.11-1".into(), None)
            .await
            .unwrap()
            .is_none(),
        "an unverified build seeds no guest"
    );
    let listed = journal.golden_builds(16).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].verified_at.is_none());

    // Starts work again. A desired state that only changes does not hurry the retry (each
    // attempt builds a whole archive, and the hub may change desired state at will).
    sim.set_faults(bosun_pvesim::FaultConfig::default());
    let guest = Uuid::new_v4();
    let builds = || {
        files
            .helper
            .verbs()
            .iter()
            .filter(|v| **v == "build_golden")
            .count()
    };
    assert_eq!(builds(), 1);
    hub.put_desired(
        host,
        &with_recipe(
            desired(&sim, &[], "running"),
            &recipe,
            &[(guest, "web1", "2026.11-1")],
        ),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        builds(),
        1,
        "a changed desired state is no reason to build again"
    );
    // The operator signs the recipe again: tried at once, built, booted, verified.
    let resigned = agent_support::signing::signed_golden_recipe_document(&doc.with_refresh_days(6));
    hub.put_desired(
        host,
        &with_recipe(
            desired(&sim, &[], "running"),
            &resigned,
            &[(guest, "web1", "2026.11-1")],
        ),
    )
    .await;
    running_vmid(&agent.handles.reconcile, guest).await;
    let build = journal
        .golden_build("2026.11-1".into(), Some(DIGEST.into()))
        .await
        .unwrap()
        .expect("verified");
    assert_eq!(build.volid, golden);
    let audit = journal.audit_since(0, 1000).await.unwrap();
    assert!(audit.iter().any(|e| e.event.event == "golden.verified"));
    agent.stop().await;
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
