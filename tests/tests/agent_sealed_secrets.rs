//! Storage credentials never travel in plaintext, and the PBS key K never leaves the box:
//! the agent makes its age identity and K on its first start and reports the recipient and
//! K's fingerprint; the operator seals a password to it with
//! `bosunctl secret seal`; desired state carries the ciphertext through the real hub to the
//! agent. The plaintext is then searched for in every file the hub and the agent wrote —
//! and only the host's identity opens the ciphertext.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agent_support;

use std::path::Path;
use std::time::Duration;

use agent_support::jobs::ctl;
use agent_support::*;
use bosun_agentd::sealing::StorageIdentity;
use bosun_proto::secret::SealedSecret;
use serde_json::json;
use uuid::Uuid;

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
    let key = bosun_agentd::pbs_key::PbsKey::load_or_create(&files.state_dir).unwrap();
    assert_eq!(
        hub.host(host).await["last_report"]["pbs_key_fingerprint"],
        json!(key.fingerprint())
    );
    let key_file: serde_json::Value = serde_json::from_str(&key.key_file_json()).unwrap();
    let key_data = key_file["data"].as_str().unwrap().to_owned();

    // The operator seals a password (from a file, never the command line).
    let password = format!("pbs-secret-{}", Uuid::new_v4().simple());
    let secret_file = files.dir.path().join("pbs-password");
    std::fs::write(&secret_file, format!("{password}\n")).unwrap();
    ctl(
        &hub,
        &[
            "secret",
            "seal",
            "--host",
            &host.to_string(),
            "--file",
            &secret_file.display().to_string(),
        ],
    )
    .await;
    std::fs::remove_file(&secret_file).unwrap();
    let sealed = bosunctl::secret::seal(&recipient, password.as_bytes()).unwrap();

    let mut desired = desired(&sim, &[], "running");
    desired["storage"] = json!([{
        "type": "pbs",
        "durable_id": "backup@pbs@pbs.example.net:store1",
        "class": "slow",
        "role": "pbs-offsite",
        "policy": { "schedule": "02:30", "retention": { "keep_daily": 14 } },
        "state": "attached",
        "credentials": sealed.armored(),
    }]);
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

    // Only this host opens it.
    assert_eq!(
        identity.open(&held).unwrap().as_slice(),
        password.as_bytes()
    );
    let elsewhere = tempfile::tempdir().unwrap();
    let other = StorageIdentity::load_or_create(elsewhere.path()).unwrap();
    assert!(other.open(&held).is_err());
    hub.stop().await;
    sim.shutdown().await;
}
