//! Nothing signed comes back from the past (decision 0092), run the way a compromised hub
//! would: the real agent and hub, operator-signed golden documents and recipes with serials,
//! and the hub naming the older one again after the operator signed a newer one. The
//! simulator's request log counts the restores that reached Proxmox and the fake helper the
//! builds it was asked for: an older base seeds no guest, an older recipe builds nothing,
//! across a restart of the agent, and the operator's explicit rollback (a higher serial
//! naming the older bytes) still works.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::signing::{signed_golden_document, signed_golden_recipe_document};
use agent_support::*;
use bosun_proto::golden::GoldenDocument;
use bosun_proto::golden_recipe::GoldenRecipeDocument;
use bosun_pvesim::SimHandle;
use serde_json::{Value, json};
use uuid::Uuid;

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

/// Guest removals that reached Proxmox.
fn destroys(sim: &SimHandle) -> usize {
    sim.requests()
        .iter()
        .filter(|r| r.method == "DELETE" && r.path.starts_with("/nodes/pve/lxc/"))
        .count()
}

/// A desired state with `guests` (id, name, `golden` entry) and an optional signed recipe.
fn desired_with(guests: &[(Uuid, &str, &Value)], recipe: Option<&Value>) -> Value {
    let mut desired = json!({
        "schema": "bosun.desired/v1",
        "guests": guests.iter().map(|(id, name, golden)| json!({
            "guest_id": id,
            "hostname": name,
            "customer": { "customer_id": "acme", "display_name": "Acme" },
            "resources": { "cores": 1, "memory_mib": 512, "rootfs_gib": 4 },
            "power": "running",
            "golden": golden,
        })).collect::<Vec<_>>(),
        "backup_policy": { "schedule": "daily", "retention": {} },
        "restore_test_policy": { "enabled": false, "interval_days": 7, "timeout_minutes": 30 },
    });
    if let Some(recipe) = recipe {
        desired["golden_recipe"] = recipe.clone();
    }
    desired
}

/// The agent's audit rows of `action` whose reason is `reason`.
async fn audited(agent: &InProcessAgent, action: &str, reason: &str) -> usize {
    agent
        .handles
        .journal
        .audit_since(0, 10_000)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.event.event == action && e.event.detail["reason"] == reason)
        .count()
}

/// The hub's `golden_refused` alerts that name `reason`.
async fn refused_alerts(hub: &RealHub, reason: &str) -> usize {
    let (_, alerts) = hub
        .admin(reqwest::Method::GET, "/v1/admin/alerts", None)
        .await;
    alerts
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["kind"] == "golden_refused")
        .filter(|a| a["message"].as_str().unwrap_or_default().contains(reason))
        .count()
}

/// The attack the review ran: base A (serial 1) seeds guest 1, base B (serial 2) guest 2;
/// the hub then names A, with the operator's own signed document for it, for guest 3. Guest
/// 3 is not built from A (no restore of A reaches Proxmox), the refusal is audited and
/// alerted; after a restart of the agent the replay is still refused. The operator's
/// rollback, A's bytes signed again under serial 3, seeds guest 3. Guests 1 and 2 are never
/// touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_signed_base_seeds_no_new_guest_once_a_newer_one_did_even_after_a_restart() {
    let (sim, hub, files) = enrolled_stack().await;
    let a = sim.endpoint().golden_volid.clone();
    let a_sha = sim.endpoint().golden_sha256.clone();
    let b = sim.add_golden_backup("local", 9001).unwrap();
    let b_sha = "b1".repeat(32);
    files.helper.set_archive(&b, &b_sha);
    assert!(a.contains("vzdump-lxc-9000"), "{a}");
    let base_a = signed_golden_document(&GoldenDocument::new(&a, &a_sha).with_serial(1));
    let base_b = signed_golden_document(&GoldenDocument::new(&b, &b_sha).with_serial(2));
    let (one, two, three) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());

    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    hub.put_desired(host, &desired_with(&[(one, "one", &base_a)], None))
        .await;
    running_vmid(&agent.handles.reconcile, one).await;
    let both = [(one, "one", &base_a), (two, "two", &base_b)];
    hub.put_desired(host, &desired_with(&both, None)).await;
    running_vmid(&agent.handles.reconcile, two).await;
    assert_eq!(restores(&sim), vec![a.clone(), b.clone()]);

    // The hub names the first base the operator ever signed, with its signed document.
    let replay = [
        (one, "one", &base_a),
        (two, "two", &base_b),
        (three, "three", &base_a),
    ];
    hub.put_desired(host, &desired_with(&replay, None)).await;
    eventually(
        Duration::from_secs(30),
        "the hub raises golden_refused for the older base",
        || async { refused_alerts(&hub, "superseded").await >= 1 },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        audited(&agent, "golden.refused", "superseded").await,
        1,
        "audited once, not on every pass"
    );
    assert_eq!(
        restores(&sim),
        vec![a.clone(), b.clone()],
        "no restore of A"
    );

    // A restart forgets nothing: the highest serial is journaled.
    agent.stop().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    eventually(
        Duration::from_secs(30),
        "the restarted agent refuses the replay again",
        || async { audited(&agent, "golden.refused", "superseded").await >= 2 },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        restores(&sim),
        vec![a.clone(), b.clone()],
        "no restore of A after a restart"
    );
    assert_eq!(sim.guest_ids().len(), 2, "{:?}", sim.guest_ids());
    assert_eq!(destroys(&sim), 0, "guests already made are not touched");

    // The operator rolls back: A's bytes under serial 3.
    let rollback = signed_golden_document(&GoldenDocument::new(&a, &a_sha).with_serial(3));
    let rolled = [
        (one, "one", &base_a),
        (two, "two", &base_b),
        (three, "three", &rollback),
    ];
    hub.put_desired(host, &desired_with(&rolled, None)).await;
    running_vmid(&agent.handles.reconcile, three).await;
    assert_eq!(restores(&sim), vec![a.clone(), b, a]);
    assert_eq!(destroys(&sim), 0);
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

const OLD_DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const NEW_DIGEST: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

/// A recipe replay: the operator signed recipe 2026.10-1 (serial 1), then 2026.11-1 (serial
/// 2), which this host built. The hub then serves the older recipe, and a guest naming its
/// version: no golden build is asked of the helper, before or after a restart, and the guest
/// is not provisioned. The operator's rollback (2026.10-1 signed again under serial 3) is
/// built and seeds the guest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_older_recipe_builds_nothing_even_after_a_restart() {
    let (sim, hub, files) = enrolled_stack().await;
    let golden = sim.endpoint().golden_volid.clone();
    let dump = |volid: &str| format!("/var/lib/vz/dump/{}", volid.rsplit('/').next().unwrap());
    *files.helper.golden_build.lock() =
        Some((dump(&golden), sim.endpoint().golden_sha256.clone(), 4096));
    let image = "bosun/controller:1.4";
    let old = GoldenRecipeDocument::new("2026.10-1", image, OLD_DIGEST);
    let old_recipe = signed_golden_recipe_document(&old.clone().with_serial(1));
    let new_recipe = signed_golden_recipe_document(
        &GoldenRecipeDocument::new("2026.11-1", image, NEW_DIGEST).with_serial(2),
    );
    let builds = || {
        files
            .helper
            .verbs()
            .iter()
            .filter(|v| **v == "build_golden")
            .count()
    };
    let by_version = |version: &str| json!({ "version": version });
    let (current, current_guest) = (by_version("2026.11-1"), Uuid::new_v4());
    let (older, older_guest) = (by_version("2026.10-1"), Uuid::new_v4());

    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    hub.put_desired(
        host,
        &desired_with(&[(current_guest, "web1", &current)], Some(&new_recipe)),
    )
    .await;
    running_vmid(&agent.handles.reconcile, current_guest).await;
    assert_eq!(builds(), 1);

    // The replay: the older recipe, and a guest naming its version.
    let guests = [
        (current_guest, "web1", &current),
        (older_guest, "web2", &older),
    ];
    hub.put_desired(host, &desired_with(&guests, Some(&old_recipe)))
        .await;
    eventually(
        Duration::from_secs(30),
        "the older recipe is refused",
        || async { audited(&agent, "golden.build_refused", "superseded").await >= 1 },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(builds(), 1, "no golden build for the older recipe");
    assert_eq!(
        audited(&agent, "golden.build_refused", "superseded").await,
        1
    );
    let restored = restores(&sim).len();

    agent.stop().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    eventually(
        Duration::from_secs(30),
        "the restarted agent refuses the older recipe again",
        || async { audited(&agent, "golden.build_refused", "superseded").await >= 2 },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(builds(), 1, "no golden build after a restart either");
    assert_eq!(
        restores(&sim).len(),
        restored,
        "the older version seeds nothing"
    );

    // The operator's rollback: the older version signed again under serial 3.
    let other = sim.add_golden_backup("local", 9002).unwrap();
    let other_sha = "0d".repeat(32);
    files.helper.set_archive(&other, &other_sha);
    *files.helper.golden_build.lock() = Some((dump(&other), other_sha, 4096));
    let rollback = signed_golden_recipe_document(&old.with_serial(3));
    hub.put_desired(host, &desired_with(&guests, Some(&rollback)))
        .await;
    running_vmid(&agent.handles.reconcile, older_guest).await;
    assert_eq!(builds(), 2, "the rollback is built");
    assert_eq!(restores(&sim).last(), Some(&other));
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
