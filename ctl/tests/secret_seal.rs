//! `bosunctl secret seal` against a real hub on loopback that answers with a recipient of its
//! own (as a hub that lies would): the operator's password is never sealed to it. The
//! recipient a secret is sealed to is the one the operator pinned at `hosts approve
//! --recipient` (read off the node's console), or the one `--recipient` names.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use uuid::Uuid;

use crate::common;

use common::hub::{Fixture, start_hub};
use common::text;

const PASSWORD: &str = "pbs-password-of-the-operator-4711";

/// Polls as the host with a report naming `recipient` as its sealing recipient: what the hub
/// then answers for the host.
async fn report_recipient(hub: &Fixture, host: Uuid, key: &str, recipient: &str) {
    let mut body: Value =
        serde_json::from_str(include_str!("../../docs/proto/poll-request.json")).unwrap();
    body["report"]["storage_recipient"] = json!(recipient);
    // Each report newer than the last.
    body["report"]["seq"] = json!(jiff::Timestamp::now().as_millisecond());
    let resp = hub
        .pinned_client()
        .post(format!("{}/v1/hosts/{host}/poll?wait=0", hub.url))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());
}

/// Enrolls `hostname` with a token that needs the operator's approval; its id and host key.
async fn enroll_pending(hub: &Fixture, hostname: &str) -> (Uuid, String) {
    let out = hub
        .run(&["enroll-token", "create", "--require-approval", "--json"])
        .await;
    assert!(out.status.success(), "{}", text(&out));
    let token: Value = serde_json::from_slice(&out.stdout).unwrap();
    let resp: Value = hub
        .pinned_client()
        .post(format!("{}/v1/enroll", hub.url))
        .json(&json!({
            "schema": "bosun.enroll/v1", "token": token["token"], "hostname": hostname,
            "agent_version": "0.1.0"
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (
        resp["host_id"].as_str().unwrap().parse().unwrap(),
        resp["host_key"].as_str().unwrap().to_owned(),
    )
}

async fn seal(hub: &Fixture, dir: &Path, extra: &[&str]) -> Output {
    let secret = dir.join("pbs-password");
    std::fs::write(&secret, format!("{PASSWORD}\n")).unwrap();
    let secret = secret.display().to_string();
    // The operator's key signs what is sealed.
    let key = dir.join("id_ed25519");
    if !key.exists() {
        let made = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "op@example", "-f"])
            .arg(&key)
            .status()
            .unwrap();
        assert!(made.success());
    }
    let key = key.display().to_string();
    let mut args = vec![
        "secret",
        "seal",
        "--type",
        "pbs",
        "--durable-id",
        "backup@pbs@pbs.example.net:store1",
        "--file",
        &secret,
        "--key",
        &key,
    ];
    args.extend_from_slice(extra);
    hub.run(&args).await
}

/// The armored ciphertexts in `out`'s stdout.
fn armored(out: &Output) -> Vec<String> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .split_inclusive("-----END AGE ENCRYPTED FILE-----")
        .filter(|s| s.contains("-----BEGIN AGE ENCRYPTED FILE-----"))
        .map(|s| s.trim().to_owned())
        .collect()
}

/// Whether `identity` opens any ciphertext `out` printed, to the password (inside the signed
/// envelope's document).
fn opens(identity: &age::x25519::Identity, out: &Output) -> bool {
    armored(out).iter().any(|a| {
        age::decrypt(identity, a.as_bytes()).is_ok_and(|plain| {
            bosun_proto::sealed_credential::CredentialEnvelope::from_plaintext(&plain)
                .and_then(|envelope| envelope.document())
                .is_ok_and(|document| String::from_utf8_lossy(&document).contains(PASSWORD))
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_answering_with_its_own_recipient_gets_nothing_sealed_to_it() {
    let hub = start_hub().await;
    let scratch = tempfile::tempdir().unwrap();
    let node = age::x25519::Identity::generate();
    let node_recipient = node.to_public().to_string();
    let hubs = age::x25519::Identity::generate();
    let hubs_recipient = hubs.to_public().to_string();

    // Approval: the operator pins what the node's console showed.
    let (host, key) = enroll_pending(&hub, "pve-sealed").await;
    let out = hub
        .run(&[
            "hosts",
            "approve",
            "pve-sealed",
            "--recipient",
            &node_recipient,
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&node_recipient),
        "{}",
        text(&out)
    );
    let pins = hub.dir.path().join(".config/bosun/known-recipients.json");
    let pinned: Value = serde_json::from_slice(&std::fs::read(&pins).unwrap()).unwrap();
    assert_eq!(
        pinned["hosts"][host.to_string()]["recipient"],
        json!(node_recipient)
    );

    // The honest answer: sealed to the node, which alone opens it.
    report_recipient(&hub, host, &key, &node_recipient).await;
    let honest = seal(&hub, scratch.path(), &["--host", "pve-sealed"]).await;
    assert!(honest.status.success(), "{}", text(&honest));
    assert_eq!(armored(&honest).len(), 1, "{}", text(&honest));
    assert!(opens(&node, &honest) && !opens(&hubs, &honest));

    // The hub answers with its own recipient: nothing is sealed, to anyone.
    report_recipient(&hub, host, &key, &hubs_recipient).await;
    let shown = hub.run(&["hosts", "show", "pve-sealed"]).await;
    // A field too long for the line wraps: its words are read as one line.
    let shown = String::from_utf8_lossy(&shown.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        shown.contains(&format!("NOT the pinned {node_recipient}")),
        "{shown}"
    );
    let lied = seal(&hub, scratch.path(), &["--host", &host.to_string()]).await;
    assert_eq!(lied.status.code(), Some(13), "{}", text(&lied));
    assert!(lied.stdout.is_empty(), "{}", text(&lied));
    assert!(armored(&lied).is_empty() && !opens(&hubs, &lied));
    let said = String::from_utf8_lossy(&lied.stderr);
    for needle in [
        "sealing recipient changed",
        node_recipient.as_str(),
        hubs_recipient.as_str(),
        "nothing was sealed",
        "bosun-agentctl status",
    ] {
        assert!(said.contains(needle), "{needle} missing: {said}");
    }

    // The operator's explicit recipient is sealed to whatever the hub says.
    let explicit = seal(
        &hub,
        scratch.path(),
        &["--host", "pve-sealed", "--recipient", &node_recipient],
    )
    .await;
    assert!(explicit.status.success(), "{}", text(&explicit));
    assert!(opens(&node, &explicit) && !opens(&hubs, &explicit));

    // Once the operator confirms a new recipient (a box that took over the host), it is the
    // one sealed to; the pin file says so.
    let new_box = age::x25519::Identity::generate();
    let new_recipient = new_box.to_public().to_string();
    report_recipient(&hub, host, &key, &new_recipient).await;
    let out = hub
        .run(&[
            "hosts",
            "pin-recipient",
            "pve-sealed",
            "--recipient",
            &new_recipient,
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out));
    // A sentence too long for the line wraps: its words are read as one line.
    let said = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        said.contains(&format!("replaces {node_recipient}")),
        "{}",
        text(&out)
    );
    let resealed = seal(&hub, scratch.path(), &["--host", "pve-sealed"]).await;
    assert!(resealed.status.success(), "{}", text(&resealed));
    assert!(opens(&new_box, &resealed));
    assert!(!opens(&node, &resealed) && !opens(&hubs, &resealed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_whose_recipient_nobody_confirmed_gets_nothing_sealed() {
    let hub = start_hub().await;
    let scratch = tempfile::tempdir().unwrap();
    let (host, key) = hub.enroll("pve-unpinned").await;
    let hubs = age::x25519::Identity::generate();
    report_recipient(&hub, host, &key, &hubs.to_public().to_string()).await;
    let out = seal(&hub, scratch.path(), &["--host", "pve-unpinned"]).await;
    assert_eq!(out.status.code(), Some(13), "{}", text(&out));
    assert!(
        out.stdout.is_empty() && !opens(&hubs, &out),
        "{}",
        text(&out)
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("no sealing recipient is pinned")
            && said.contains("which alone is not trusted")
            && said.contains("hosts pin-recipient"),
        "{said}"
    );
    // A recipient that is no age recipient is refused before anything is read.
    let out = seal(
        &hub,
        scratch.path(),
        &["--host", "pve-unpinned", "--recipient", "age1nope"],
    )
    .await;
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    assert!(out.stdout.is_empty());
    // Nor is one ever pinned.
    let out = hub
        .run(&[
            "hosts",
            "pin-recipient",
            "pve-unpinned",
            "--recipient",
            "age1nope",
        ])
        .await;
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    assert!(
        !hub.dir
            .path()
            .join(".config/bosun/known-recipients.json")
            .exists()
    );
}
