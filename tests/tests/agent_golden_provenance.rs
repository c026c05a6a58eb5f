//! Provenance of what is restored (DESIGN §5), run the way a compromised hub would: the
//! real agent and hub, the hub's desired state pointing a new guest at archives the
//! operator never chose, and the simulator's request log counting the restores that reached
//! Proxmox. Only a golden archive an allowed operator signed (or the host's helper built),
//! whose file still hashes to the signed value, seeds a guest; every refusal raises one
//! `golden_refused` alert at the hub.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::collections::BTreeMap;
use std::time::Duration;

use agent_support::signing::signed_golden;
use agent_support::*;
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

/// A desired state with one guest `name` starting from `golden`.
fn desired_with(guest: Uuid, name: &str, golden: Value) -> Value {
    json!({
        "schema": "bosun.desired/v1",
        "guests": [{
            "guest_id": guest,
            "hostname": name,
            "customer": { "customer_id": "mallory", "display_name": "Mallory" },
            "resources": { "cores": 1, "memory_mib": 512, "rootfs_gib": 4 },
            "power": "running",
            "golden": golden,
        }],
        "backup_policy": { "schedule": "daily", "retention": {} },
        "restore_test_policy": { "enabled": false, "interval_days": 7, "timeout_minutes": 30 },
    })
}

/// The hub's `golden_refused` alerts.
async fn golden_alerts(hub: &RealHub) -> Vec<Value> {
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

async fn wait_refusals(hub: &RealHub, want: usize, what: &str) -> Vec<Value> {
    eventually(Duration::from_secs(30), what, || async {
        golden_alerts(hub).await.len() >= want
    })
    .await;
    golden_alerts(hub).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_cannot_seed_a_guest_from_an_archive_the_operator_did_not_choose() {
    let (sim, hub, files) = enrolled_stack().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;

    // Another customer's backup on the same host, with its real hash known to the hub.
    let mut conf = BTreeMap::new();
    conf.insert("hostname".to_owned(), "victim".to_owned());
    let victim = sim.add_backup("local", 4242, conf).unwrap();
    let victim_sha = "ab".repeat(32);
    files.helper.set_archive(&victim, &victim_sha);
    let golden = sim.endpoint().golden_volid.clone();
    let golden_sha = sim.endpoint().golden_sha256.clone();

    // 1. The victim's archive, unsigned: no known provenance.
    let attacks = [
        json!({ "volid": victim, "sha256": victim_sha }),
        // 2. The real golden archive named without a signature and with a hash of the hub's.
        json!({ "volid": golden, "sha256": "cd".repeat(32) }),
        // 3. The operator's signed document for the golden, re-attached to the victim's
        //    archive: the agent refuses the whole document (it names another archive).
        {
            let mut entry = signed_golden(&golden, &golden_sha);
            entry["volid"] = json!(victim);
            entry["sha256"] = json!(victim_sha);
            entry
        },
    ];
    let mut refused = 0;
    for (i, attack) in attacks.iter().enumerate() {
        let guest = Uuid::new_v4();
        let name = format!("mallory{i}");
        let document = desired_with(guest, &name, attack.clone());
        if i == 2 {
            // An honest hub refuses the tampered document outright; a compromised one
            // would serve it anyway, and the agent must refuse it the same way.
            let (status, _) = hub
                .admin(
                    reqwest::Method::PUT,
                    &format!("/v1/admin/hosts/{host}/desired"),
                    Some(document),
                )
                .await;
            assert_eq!(status, 422, "the hub validates the signed golden entry");
            continue;
        }
        hub.put_desired(host, &document).await;
        refused += 1;
        let alerts = wait_refusals(&hub, refused, "the hub raises golden_refused").await;
        assert_eq!(
            alerts.len(),
            refused,
            "one alert per refused archive: {alerts:?}"
        );
        // A few more reconcile passes: still nothing restored, still one alert.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(golden_alerts(&hub).await.len(), refused);
    }
    assert_eq!(
        restores(&sim),
        Vec::<String>::new(),
        "no restore reached Proxmox"
    );
    assert!(sim.guest_ids().is_empty(), "{:?}", sim.guest_ids());
    let alerts = golden_alerts(&hub).await;
    assert!(
        alerts[0]["message"]
            .as_str()
            .unwrap()
            .contains("unknown_provenance"),
        "{alerts:?}"
    );
    assert!(
        alerts[1]["message"]
            .as_str()
            .unwrap()
            .contains("hash_not_journaled")
            || alerts[1]["message"]
                .as_str()
                .unwrap()
                .contains("unknown_provenance"),
        "{alerts:?}"
    );

    // The operator's signed choice is restored, once, after the helper hashed the file.
    let guest = Uuid::new_v4();
    hub.put_desired(
        host,
        &desired_with(guest, "honest", signed_golden(&golden, &golden_sha)),
    )
    .await;
    running_vmid(&agent.handles.reconcile, guest).await;
    assert_eq!(restores(&sim), vec![golden.clone()]);
    assert!(files.helper.verbs().contains(&"hash_archive"));

    // The golden file changes on disk (another hash when the helper reads it): the next
    // guest is refused, though the journal and the signature still name the old hash.
    files.helper.set_archive(&golden, &"ef".repeat(32));
    let next = Uuid::new_v4();
    let mut both = desired_with(guest, "honest", signed_golden(&golden, &golden_sha));
    both["guests"].as_array_mut().unwrap().push(
        desired_with(next, "later", signed_golden(&golden, &golden_sha))["guests"][0].clone(),
    );
    hub.put_desired(host, &both).await;
    let alerts = wait_refusals(&hub, refused + 1, "a changed golden file is refused").await;
    assert!(
        alerts
            .iter()
            .any(|a| a["message"].as_str().unwrap().contains("changed")),
        "{alerts:?}"
    );
    assert_eq!(
        restores(&sim),
        vec![golden],
        "no restore from a changed file"
    );
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

/// A signature by a key the agent does not trust for golden archives (a job signer's key
/// listed for `bosun-job@v1` only, or a stranger's) admits nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_key_allowed_for_golden_archives_can_name_one() {
    let (sim, hub, files) = enrolled_stack().await;
    let operator = agent_support::signing::OperatorKey::new("op@example");
    std::fs::write(
        &files.signers_path,
        format!(
            "op@example namespaces=\"bosun-job@v1\" {}\n",
            operator.allowed_line("x").split_once(' ').unwrap().1
        ),
    )
    .unwrap();
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let golden = sim.endpoint().golden_volid.clone();
    let golden_sha = sim.endpoint().golden_sha256.clone();
    let document = serde_json::to_vec(&bosun_proto::golden::GoldenDocument::new(
        &golden,
        &golden_sha,
    ))
    .unwrap();
    let signature = operator.sign(&document, bosun_proto::golden::GOLDEN_NAMESPACE);
    let entry = json!({
        "volid": golden,
        "sha256": golden_sha,
        "signed": bosun_proto::golden::SignedGolden::new(&document, &signature),
    });
    hub.put_desired(host, &desired_with(Uuid::new_v4(), "job-signer", entry))
        .await;
    let alerts = wait_refusals(&hub, 1, "the job signer's golden is refused").await;
    assert!(
        alerts[0]["message"]
            .as_str()
            .unwrap()
            .contains("bad_signature"),
        "{alerts:?}"
    );
    assert!(restores(&sim).is_empty());
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

/// A golden entry for `document`, signed by `operator` in the golden namespace.
fn signed_by(
    operator: &agent_support::signing::OperatorKey,
    document: &bosun_proto::golden::GoldenDocument,
) -> Value {
    let bytes = serde_json::to_vec(document).unwrap();
    let signature = operator.sign(&bytes, bosun_proto::golden::GOLDEN_NAMESPACE);
    json!({
        "volid": document.volid,
        "sha256": document.sha256,
        "signed": bosun_proto::golden::SignedGolden::new(&bytes, &signature),
    })
}

/// `allowed_signers` trusting the harness's signers and `operator` (as `principal`) for
/// golden archives.
fn trust_for_golden(
    files: &AgentFiles,
    operator: &agent_support::signing::OperatorKey,
    principal: &str,
) {
    let line = operator.allowed_line(principal);
    let (principal, key) = line.split_once(' ').unwrap();
    std::fs::write(
        &files.signers_path,
        format!(
            "{}{principal} namespaces=\"{}\" {key}\n",
            agent_support::signing::harness_signer_lines(),
            bosun_proto::golden::GOLDEN_NAMESPACE,
        ),
    )
    .unwrap();
}

/// The attack revocation must stop: an operator's golden choice was admitted and seeded a
/// guest; the operator then leaves `allowed_signers`. The hub (or anyone replaying the old
/// desired state) asks for one more guest from the same archive: the agent re-checks the
/// journaled signer against the file as it is now and refuses, and no restore is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_golden_archive_stops_seeding_guests_once_its_signer_leaves_allowed_signers() {
    let (sim, hub, files) = enrolled_stack().await;
    let leaver = agent_support::signing::OperatorKey::new("leaver@example");
    trust_for_golden(&files, &leaver, "leaver@example");
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let golden = sim.endpoint().golden_volid.clone();
    let golden_sha = sim.endpoint().golden_sha256.clone();
    let entry = signed_by(
        &leaver,
        &bosun_proto::golden::GoldenDocument::new(&golden, &golden_sha),
    );

    let first = Uuid::new_v4();
    hub.put_desired(host, &desired_with(first, "first", entry.clone()))
        .await;
    running_vmid(&agent.handles.reconcile, first).await;
    assert_eq!(
        restores(&sim),
        vec![golden.clone()],
        "the signed choice seeds"
    );

    // The operator leaves: their line is gone from the file the agent reads.
    std::fs::write(
        &files.signers_path,
        agent_support::signing::harness_signer_lines(),
    )
    .unwrap();
    let second = Uuid::new_v4();
    let mut both = desired_with(first, "first", entry.clone());
    both["guests"]
        .as_array_mut()
        .unwrap()
        .push(desired_with(second, "second", entry)["guests"][0].clone());
    hub.put_desired(host, &both).await;
    let alerts = wait_refusals(&hub, 1, "the revoked signer's golden is refused").await;
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert!(
        alerts[0]["message"]
            .as_str()
            .unwrap()
            .contains("signer_revoked"),
        "{alerts:?}"
    );
    assert_eq!(
        restores(&sim),
        vec![golden],
        "no restore after the signer left"
    );
    assert_eq!(sim.guest_ids().len(), 1, "{:?}", sim.guest_ids());
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

/// A signed choice narrowed to another host, or past its expiry, seeds nothing on this host
/// (each refusal is one `golden_refused` alert and no restore); the same operator's choice
/// bound to this host and still in its window does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_golden_document_for_another_host_or_past_its_expiry_seeds_nothing() {
    let (sim, hub, files) = enrolled_stack().await;
    let operator = agent_support::signing::OperatorKey::new("scoped@example");
    trust_for_golden(&files, &operator, "scoped@example");
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let golden = sim.endpoint().golden_volid.clone();
    let golden_sha = sim.endpoint().golden_sha256.clone();
    let document = bosun_proto::golden::GoldenDocument::new(&golden, &golden_sha);
    let now = jiff::Timestamp::now();

    let refusals = [
        (document.clone().for_host(Uuid::new_v4()), "other_host"),
        (
            document
                .clone()
                .for_host(host)
                .expiring_at(now - jiff::SignedDuration::from_secs(60)),
            "expired",
        ),
    ];
    for (i, (scoped, reason)) in refusals.iter().enumerate() {
        let entry = signed_by(&operator, scoped);
        hub.put_desired(
            host,
            &desired_with(Uuid::new_v4(), &format!("scoped{i}"), entry),
        )
        .await;
        let alerts = wait_refusals(&hub, i + 1, reason).await;
        assert_eq!(alerts.len(), i + 1, "{alerts:?}");
        assert!(
            alerts
                .iter()
                .any(|a| a["message"].as_str().unwrap().contains(reason)),
            "{reason}: {alerts:?}"
        );
        assert!(restores(&sim).is_empty(), "{reason}: {:?}", restores(&sim));
    }

    let covered = document
        .for_host(host)
        .expiring_at(now + jiff::SignedDuration::from_hours(1));
    let guest = Uuid::new_v4();
    hub.put_desired(
        host,
        &desired_with(guest, "covered", signed_by(&operator, &covered)),
    )
    .await;
    running_vmid(&agent.handles.reconcile, guest).await;
    assert_eq!(restores(&sim), vec![golden]);
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
