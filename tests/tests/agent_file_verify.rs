//! The lighter check on every file tier (DESIGN §8, decision 0103), through the real agent,
//! hub and TLS and the helper's own hashing verb: on the verification cadence the helper
//! re-reads each guest's archives on the local storage, paced, and compares them with the
//! SHA-256 recorded when each backup ended. Whoever can write the storage changes one byte of
//! one guest's archive: that guest's verification on the tier fails, the hub raises
//! `verify_failed` for it, and the other guest's intact archive still passes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::jobs::{job_result, submit};
use agent_support::storage::alerts;
use agent_support::*;
use bosun_proto::helper::Request;
use serde_json::{Value, json};
use uuid::Uuid;

/// The verifications the hub holds in the host's last report for `guest` on `tier`.
async fn reported(hub: &RealHub, host: Uuid, guest: Uuid, tier: &str) -> Option<Value> {
    hub.host(host).await["last_report"]["verifications"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["guest_id"] == json!(guest) && v["tier"] == tier)
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_byte_in_a_local_archive_fails_its_verification_and_an_intact_one_passes() {
    let (sim, hub, files) = enrolled_stack().await;
    let operator = files.trusted_operator();
    let mut config = std::fs::read_to_string(&files.config_path).unwrap();
    config.push_str("[backup]\nverify_hour_ms = 1000\nverify_rate_mib_s = 8\n");
    std::fs::write(&files.config_path, config).unwrap();
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let (alpha, bravo) = (Uuid::new_v4(), Uuid::new_v4());
    let mut state = desired(&sim, &[(alpha, "alpha"), (bravo, "bravo")], "running");
    // One hour lasts a second here: every guest's archives are re-read every few seconds.
    state["verify_policy"] = json!({ "enabled": true, "interval_hours": 2 });
    hub.put_desired(host, &state).await;
    let mut archives = Vec::new();
    for guest in [alpha, bravo] {
        let vmid = running_vmid(&agent.handles.reconcile, guest).await;
        let (host_text, guest_text, vmid_text) =
            (host.to_string(), guest.to_string(), vmid.to_string());
        let args = [
            "--kind",
            "force-backup",
            "--host",
            &host_text,
            "--guest",
            &guest_text,
            "--vmid",
            &vmid_text,
        ];
        let job = submit(&hub, &operator, files.dir.path(), &args).await;
        let result = job_result(&hub, host, job).await;
        assert_eq!(result["outcome"], "succeeded", "{result}");
        archives.push(result["output"]["volid"].as_str().unwrap().to_owned());
    }
    let tier = archives[0].split_once(':').unwrap().0.to_owned();

    for guest in [alpha, bravo] {
        eventually(
            Duration::from_secs(60),
            "both guests' local archives verify ok",
            || async {
                reported(&hub, host, guest, &tier)
                    .await
                    .is_some_and(|v| v["outcome"] == "ok")
            },
        )
        .await;
    }
    let ok = reported(&hub, host, alpha, &tier).await.unwrap();
    eprintln!(
        "re-hash of alpha's archive on {tier}: {} ms ({})",
        ok["duration_ms"], ok["detail"]
    );
    assert!(alerts(&hub, host, "verify_failed").await.is_empty());
    // The helper was asked to read at the configured pace, beneath its backup roots.
    let paced: Vec<_> = files
        .helper
        .calls
        .lock()
        .iter()
        .filter_map(|c| match c {
            Request::HashArchive(args) if args.rate_mib_s.is_some() => Some(args.clone()),
            _ => None,
        })
        .collect();
    assert!(!paced.is_empty(), "the verifier asks for paced reads");
    assert!(
        paced.iter().all(|a| a.rate_mib_s.unwrap().get() == 8),
        "{paced:?}"
    );

    // Whoever can write the storage changes one byte in the middle of alpha's archive (same
    // size, same name, same listing).
    let file = sim.archive_path(&archives[0]).unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&file, &bytes).unwrap();
    let changed_at = jiff::Timestamp::now();

    eventually(
        Duration::from_secs(60),
        "alpha's verification on the tier fails",
        || async {
            reported(&hub, host, alpha, &tier)
                .await
                .is_some_and(|v| v["outcome"] == "failed")
        },
    )
    .await;
    let failed = reported(&hub, host, alpha, &tier).await.unwrap();
    let detail = failed["detail"].as_str().unwrap();
    assert!(
        detail.contains(&archives[0]) && detail.contains("bytes changed"),
        "the detail names the archive and what changed: {detail}"
    );
    eventually(Duration::from_secs(30), "verify_failed opens", || async {
        alerts(&hub, host, "verify_failed").await.len() == 1
    })
    .await;
    let alert = &alerts(&hub, host, "verify_failed").await[0];
    let message = alert["message"].as_str().unwrap();
    assert!(
        message.contains(&alpha.to_string())
            && message.contains(&format!("(tier {tier})"))
            && message.contains(&archives[0]),
        "{alert}"
    );

    // Bravo's archive is untouched: its verifications after the change still pass.
    eventually(
        Duration::from_secs(60),
        "bravo verifies ok after the change",
        || async {
            reported(&hub, host, bravo, &tier).await.is_some_and(|v| {
                v["outcome"] == "ok"
                    && v["finished_at"]
                        .as_str()
                        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                        .is_some_and(|t| t > changed_at)
            })
        },
    )
    .await;
    assert_eq!(alerts(&hub, host, "verify_failed").await.len(), 1);
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
