//! Storage credentials never travel in plaintext, and the PBS key K never leaves the box:
//! the agent makes its age identity and K on its first start and reports the recipient and
//! K's fingerprint; the operator seals a password to it with
//! `bosunctl secret seal`; desired state carries the ciphertext through the real hub to the
//! agent. The plaintext is then searched for in every file the hub and the agent wrote —
//! and only the host's identity opens the ciphertext, for the target it was sealed for.
//!
//! A hub that copies a PBS password sealed for one server onto a target naming its own
//! server gets nothing: the agent reports that target refused, sends Proxmox nothing for it
//! and audits the refusal once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::path::Path;
use std::time::Duration;

use agent_support::jobs::ctl;
use agent_support::*;
use bosun_agentd::data::storage::naming::storage_id_of;
use bosun_agentd::trust::keys::credentials::{CredentialError, CredentialOpener};
use bosun_agentd::trust::keys::sealing::StorageIdentity;
use bosun_proto::desired::{StorageTarget, StorageType};
use bosun_proto::secret::SealedSecret;
use reqwest::Method;
use secrecy::ExposeSecret;
use serde_json::{Value, json};
use uuid::Uuid;

const FP_A: &str = "12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0";
const FP_B: &str = "AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89";

/// Every file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&next) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path)
                && bytes.windows(needle.len()).any(|w| w == needle)
            {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_credential_crosses_the_hub_and_only_the_host_opens_it() {
    let (sim, hub, files) = enrolled_stack().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;

    // The recipient reaches the hub with the agent's report.
    let recipient = hub_recipient(&hub, host).await;
    let identity = StorageIdentity::load_or_create(&files.state_dir).unwrap();
    assert_eq!(recipient, identity.recipient());
    // K stays on the box; the hub learns only its fingerprint.
    let key = bosun_agentd::trust::keys::pbs_key::PbsKey::load_or_create(&files.state_dir).unwrap();
    assert_eq!(
        hub.host(host).await["last_report"]["pbs_key_fingerprint"],
        json!(key.fingerprint())
    );
    let key_file: serde_json::Value = serde_json::from_str(&key.key_file_json()).unwrap();
    let key_data = key_file["data"].as_str().unwrap().to_owned();

    // The operator seals a password (from a file, never the command line) for one target
    // (its JSON, as desired state will carry it).
    let password = format!("pbs-secret-{}", Uuid::new_v4().simple());
    let mut target = json!({
        "type": "pbs",
        "durable_id": "backup@pbs@pbs.example.net:store1",
        "class": "slow",
        "role": "pbs-offsite",
        "policy": { "schedule": "02:30", "retention": { "keep_daily": 14 } },
        "state": "attached",
    });
    let secret_file = files.dir.path().join("pbs-password");
    std::fs::write(&secret_file, format!("{password}\n")).unwrap();
    let target_file = files.dir.path().join("pbs-target.json");
    std::fs::write(&target_file, target.to_string()).unwrap();
    // The recipient is the one the node's console shows (`bosun-agentctl status`), named
    // explicitly: bosunctl never seals to the hub's word alone.
    let console_recipient = identity.recipient();
    ctl(
        &hub,
        &[
            "secret",
            "seal",
            "--host",
            &host.to_string(),
            "--recipient",
            &console_recipient,
            "--target-file",
            &target_file.display().to_string(),
            "--file",
            &secret_file.display().to_string(),
            "--key",
            &agent_support::signing::policy_operator_key(files.dir.path())
                .display()
                .to_string(),
        ],
    )
    .await;
    std::fs::remove_file(&secret_file).unwrap();
    let sealed = SealedSecret::try_from(seal_for(&recipient, host, &target, &password)).unwrap();
    target["credentials"] = json!(sealed.armored());

    let mut desired = desired(&sim, &[], "running");
    desired["storage"] = json!([target]);
    hub.put_desired(host, &desired).await;
    let desired_rx = agent.handles.desired.clone();
    eventually(
        Duration::from_secs(30),
        "the agent holds the sealed credential",
        || {
            let desired_rx = desired_rx.clone();
            async move {
                desired_rx
                    .borrow()
                    .as_ref()
                    .is_some_and(|d| d.state.storage.iter().any(|t| t.credentials.is_some()))
            }
        },
    )
    .await;
    let held: SealedSecret = desired_rx.borrow().as_ref().unwrap().state.storage[0]
        .credentials
        .clone()
        .unwrap();
    assert_eq!(held, sealed, "the hub forwarded the ciphertext unchanged");

    // The journal has cached it; now look for the plaintext everywhere either side wrote.
    agent.stop().await;
    let ciphertext_line = sealed.armored().lines().nth(1).unwrap().as_bytes().to_vec();
    let plaintext_hits: Vec<String> = [hub.dir.path(), files.dir.path()]
        .iter()
        .flat_map(|d| files_containing(d, password.as_bytes()))
        .collect();
    assert!(
        plaintext_hits.is_empty(),
        "plaintext found in {plaintext_hits:?}"
    );
    let key_hits = files_containing(hub.dir.path(), key_data.as_bytes());
    assert!(key_hits.is_empty(), "K found at the hub in {key_hits:?}");
    assert!(
        !files_containing(hub.dir.path(), &ciphertext_line).is_empty(),
        "the search reads the hub's database (the ciphertext is there)"
    );
    assert!(
        !files_containing(&files.state_dir, &ciphertext_line).is_empty(),
        "the search reads the agent's journal (the ciphertext is there)"
    );

    // Only this host opens it, for this target, with the operator's signature.
    let identity_of: StorageTarget = serde_json::from_value(target.clone()).unwrap();
    let clock = std::sync::Arc::new(bosun_agentd::clock::SystemClock);
    let opener = CredentialOpener::new(
        std::sync::Arc::new(identity),
        files.signers_path.clone(),
        clock.clone(),
    );
    let opened = opener
        .open_credential(&held, host, &identity_of.identity())
        .unwrap();
    assert_eq!(opened.secret.expose_secret(), password);
    let elsewhere = tempfile::tempdir().unwrap();
    let other = CredentialOpener::new(
        std::sync::Arc::new(StorageIdentity::load_or_create(elsewhere.path()).unwrap()),
        files.signers_path.clone(),
        clock,
    );
    assert!(matches!(
        other.open_credential(&held, host, &identity_of.identity()),
        Err(CredentialError::Open { .. })
    ));
    hub.stop().await;
    sim.shutdown().await;
}

/// A PBS target of desired state.
fn pbs_target(server: &str, fingerprint: &str, host: Uuid) -> Value {
    json!({
        "type": "pbs",
        "durable_id": format!("backup@pbs!bosun@{server}:store1#{fingerprint}"),
        "class": "slow",
        "role": "pbs-offsite",
        "policy": { "schedule": "03:00", "retention": { "keep_daily": 7 } },
        "state": "attached",
        "namespace": format!("host-{}", host.simple()),
    })
}

/// The hub's report of the target `durable_id`, if any.
async fn target_report(hub: &RealHub, host: Uuid, durable_id: &str) -> Option<Value> {
    hub.host(host).await["last_report"]["storage"]
        .as_array()?
        .iter()
        .find(|t| t["durable_id"] == durable_id)
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_sealed_for_one_pbs_is_never_sent_to_another() {
    let (sim, hub, files) = enrolled_stack().await;
    let password = format!("pbs-{}", Uuid::new_v4().simple());
    sim.set_strict_remotes(true);
    sim.add_pbs_remote("pbs-a.example", FP_A, "store1", &password);
    // The hub's own server: it would take the password (and so learn it).
    sim.add_pbs_remote("pbs-b.example", FP_B, "store1", &password);
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let recipient = hub_recipient(&hub, host).await;

    // The operator sealed the password for A; the hub copies the ciphertext onto B, same
    // user, datastore and namespace, another server.
    let mut a = pbs_target("pbs-a.example", FP_A, host);
    let sealed_for_a = seal_for(&recipient, host, &a, &password);
    a["credentials"] = json!(sealed_for_a);
    let mut b = pbs_target("pbs-b.example", FP_B, host);
    b["credentials"] = json!(sealed_for_a);
    let (a_id, b_id) = (
        a["durable_id"].as_str().unwrap().to_owned(),
        b["durable_id"].as_str().unwrap().to_owned(),
    );
    let b_storage = storage_id_of(StorageType::Pbs, &b_id);
    let mut state = desired(&sim, &[], "running");
    state["storage"] = json!([a, b]);
    hub.put_desired(host, &state).await;

    eventually(
        Duration::from_secs(30),
        "A mounted and B refused at the hub",
        || async {
            let a = target_report(&hub, host, &a_id).await;
            let b = target_report(&hub, host, &b_id).await;
            a.is_some_and(|a| a["status"] == "mounted")
                && b.is_some_and(|b| b["status"] == "refused")
        },
    )
    .await;
    let reported = target_report(&hub, host, &b_id).await.unwrap();
    assert_eq!(reported["reason"], "credentials_refused", "{reported}");
    assert!(
        reported.get("detail").is_none_or(Value::is_null),
        "no error text goes to the hub: {reported}"
    );
    eventually(
        Duration::from_secs(30),
        "the hub raises storage_refused",
        || async {
            let (status, body) = hub.admin(Method::GET, "/v1/admin/alerts", None).await;
            assert_eq!(status, 200, "{body}");
            body.as_array()
                .or_else(|| body["alerts"].as_array())
                .is_some_and(|alerts| {
                    alerts.iter().any(|alert| {
                        alert["kind"] == "storage_refused" && alert["host_id"] == json!(host)
                    })
                })
        },
    )
    .await;

    // Several watch passes later (every second): still nothing sent for B, audited once.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let creates: Vec<_> = sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == "/storage")
        .collect();
    assert!(
        creates
            .iter()
            .any(|r| r.params.iter().any(|(_, v)| v.contains("pbs-a.example"))),
        "the request log shows A's registration: {creates:?}"
    );
    let for_b: Vec<_> = creates
        .iter()
        .filter(|r| {
            r.params
                .iter()
                .any(|(_, v)| v.contains("pbs-b.example") || v == b_storage.as_str())
        })
        .collect();
    assert!(for_b.is_empty(), "B reached Proxmox: {for_b:?}");
    let audit = agent.handles.journal.audit_since(0, 10_000).await.unwrap();
    let refused: Vec<_> = audit
        .iter()
        .filter(|e| e.event.event == "storage.refused")
        .collect();
    assert_eq!(refused.len(), 1, "audited once: {refused:?}");
    let detail = &refused[0].event.detail;
    assert_eq!(detail["durable_id"], b_id.as_str());
    assert_eq!(detail["type"], "pbs");
    assert_eq!(detail["reason"], "credentials_refused");
    assert_eq!(detail["fields"], "durable_id");
    assert!(!detail.to_string().contains(&password));

    // The operator seals the password for B too: B is registered with it.
    let mut b = pbs_target("pbs-b.example", FP_B, host);
    b["credentials"] = json!(seal_for(&recipient, host, &b, &password));
    state["storage"][1] = b;
    hub.put_desired(host, &state).await;
    eventually(Duration::from_secs(30), "B mounted", || async {
        target_report(&hub, host, &b_id)
            .await
            .is_some_and(|b| b["status"] == "mounted")
    })
    .await;
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
