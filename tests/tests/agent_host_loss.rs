//! A whole host lost, through the real agents, hub and TLS, on two simulator nodes.
//!
//! The old box backs its guests up to PBS (encrypted with K), and its operator makes the
//! escrow with the customer present: a recovery sheet printed by real Chromium, read back
//! with `pdftotext` the way a person reads it. Then the old node is stopped for good. The
//! operator revokes the host and makes a restore-mode enrollment token; a fresh box on a
//! fresh node enrolls with it, takes over the host's identity and waits (no blank guests)
//! until the storage credentials are resealed to it and the customer's words bring K back;
//! then every guest comes back from PBS with its data, and the hub reports RPO and RTO.
//!
//! A wiretap in front of the hub keeps every byte the agents sent; neither the words nor K
//! are in it, nor anywhere in the hub's data directory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agent_support;
mod escrow_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use agent_support::jobs::{job_result, submit};
use agent_support::signing::OperatorKey;
use agent_support::tap::HubTap;
use agent_support::*;
use bosun_agentd::config::AgentConfig;
use bosun_agentd::escrow::command::{self, SheetOptions, WordSource};
use bosun_agentd::escrow::sheet::Printer;
use bosun_agentd::pbs_key::{Installed, PbsKey};
use bosun_pvesim::SimConfig;
use escrow_support::{contains, files_under, words_on_sheet};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

const MARKER: &str = "/root/bosun-host-loss-marker";
const FP: &str = "12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0";
const PBS: &str = "pbs.example";
/// A low scrypt factor keeps the test quick; the real one is measured in escrow_bench.
const WORK_FACTOR: u8 = 12;

/// The desired state with a PBS tier whose password is sealed to `recipient`.
fn with_pbs(desired: &mut Value, host: Uuid, recipient: &str, password: &str) {
    let durable = pbs_durable();
    let mut target = json!({
        "type": "pbs", "durable_id": durable, "class": "slow", "role": "pbs-offsite",
        "policy": { "schedule": "03:00", "retention": {} }, "state": "attached",
        "namespace": format!("host-{}", host.simple()),
    });
    target["credentials"] = json!(seal_for(recipient, host, &target, password));
    desired["storage"] = json!([target]);
    desired["backup_policy"]["further_tiers"] = json!([durable]);
}

fn pbs_durable() -> String {
    format!("backup@pbs!bosun@{PBS}:store1#{FP}")
}

async fn back_up(
    hub: &RealHub,
    operator: &OperatorKey,
    dir: &Path,
    host: Uuid,
    guest: Uuid,
    vmid: u32,
    storage: &str,
) -> String {
    let (h, g, v, p) = (
        host.to_string(),
        guest.to_string(),
        vmid.to_string(),
        format!("storage={storage}"),
    );
    let args = [
        "--kind",
        "force-backup",
        "--host",
        &h,
        "--guest",
        &g,
        "--vmid",
        &v,
        "--param",
        &p,
    ];
    let job = submit(hub, operator, dir, &args).await;
    let result = job_result(hub, host, job).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    result["output"]["volid"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_host_comes_back_on_a_new_box_with_the_customers_words() {
    let took = lose_the_host(&["alpha", "bravo"]).await;
    eprintln!("host loss: words typed → 2 guests running again after {took:?}");
}

/// Figures for docs/benchmarks.md (ignored; run with `cargo test -p bosun-tests --test
/// agent_host_loss -- --ignored --nocapture`): a host with 5 guests lost and recovered,
/// the time from the words typed to every guest running, and the RTO the hub reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; run explicitly"]
async fn host_loss_rto_for_five_guests() {
    let took = lose_the_host(&["g1", "g2", "g3", "g4", "g5"]).await;
    println!("host loss, 5 guests: words typed → all running again in {took:?}");
}

/// The whole walk for a host with guests named `names`; gives the time from the words
/// typed to every guest running again on the new box.
async fn lose_the_host(names: &[&str]) -> Duration {
    let password = format!("pbs-{}", Uuid::new_v4().simple());
    let hub = RealHub::start().await;
    let tap = HubTap::start(&hub).await;

    // --- The old box: guests, their backups on PBS, the escrow. ---
    let old_sim = start_sim(SimConfig::fast()).await;
    old_sim.add_pbs_remote(PBS, FP, "store1", &password);
    let token = hub.enroll_token().await;
    let old_files = agent_files(&old_sim, &tap.url, &hub.fingerprint, Some(&token));
    let operator = old_files.trusted_operator();
    let old_agent = InProcessAgent::start(&old_files.config_path).await;
    let host = old_agent.handles.host_id;
    let guests: Vec<(Uuid, &str)> = names.iter().map(|n| (Uuid::new_v4(), *n)).collect();
    let mut state = desired(&old_sim, &guests, "running");
    let old_recipient = hub_recipient(&hub, host).await;
    with_pbs(&mut state, host, &old_recipient, &password);
    hub.put_desired(host, &state).await;
    let pbs = pbs_storage(&pbs_durable(), &format!("host-{}", host.simple()));
    let mut before = BTreeMap::new();
    for &(guest, name) in &guests {
        let vmid = running_vmid(&old_agent.handles.reconcile, guest).await;
        write_in_guest(&old_sim, vmid, MARKER, &format!("data of {name}")).await;
        let archive = back_up(
            &hub,
            &operator,
            old_files.dir.path(),
            host,
            guest,
            vmid,
            pbs.as_str(),
        )
        .await;
        assert!(archive.starts_with(pbs.as_str()), "{archive}");
        before.insert(guest, (vmid, archive));
    }
    let old_config = AgentConfig::load(&old_files.config_path).unwrap();
    let k = PbsKey::load_existing(&old_config.state_dir)
        .unwrap()
        .unwrap();
    let k_file = k.key_file_json().as_str().to_owned();
    let k_data = k_file
        .split("\"data\":\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_owned();

    let sheet_dir = tempfile::tempdir().unwrap();
    let options = SheetOptions {
        dir: sheet_dir.path().to_owned(),
        include_blob: false,
        paper_key: false,
        work_factor: WORK_FACTOR,
    };
    let created = command::create(
        &old_config,
        &options,
        &Printer::from_env(),
        "pve-old",
        false,
    )
    .await
    .unwrap();
    assert_eq!(created.fingerprint, k.fingerprint());
    let words = words_on_sheet(&created.sheet);
    // Run twice without `rotate`: refused, nothing changes.
    let again = command::create(
        &old_config,
        &options,
        &Printer::from_env(),
        "pve-old",
        false,
    )
    .await
    .unwrap_err();
    assert_eq!(again.exit_code(), 75, "{again}");
    eventually(
        Duration::from_secs(30),
        "the hub shows a verified escrow",
        || async { hub.host(host).await["escrow"]["state"] == "verified" },
    )
    .await;

    // --- The host dies: its node is stopped for good; PBS is offsite and survives. ---
    old_agent.stop().await;
    let mut offsite = old_sim.export_remote(PBS).unwrap();
    old_sim.shutdown().await;
    // Someone with write access to the datastore plants a newer archive naming a guest,
    // made with another key: it must never be restored.
    let forged = {
        let backups = &mut offsite.namespaces[0].backups;
        let mut forged = backups[0].clone();
        forged.ctime += 3600;
        let at = jiff::Timestamp::from_second(forged.ctime).unwrap();
        forged.volid = format!(
            "backup/ct/{}/{}",
            forged.vmid.unwrap(),
            at.strftime("%Y-%m-%dT%H:%M:%SZ")
        );
        forged.encrypted = Some("aa:".repeat(31) + "aa");
        backups.push(forged.clone());
        forged.volid
    };

    // --- The operator brings a new box in restore mode. ---
    let (status, body) = hub
        .admin(
            Method::POST,
            "/v1/admin/enrollment-tokens",
            Some(json!({ "ttl_seconds": 3600, "restore_host": host })),
        )
        .await;
    assert_eq!(status, 409, "a restore token for an active host: {body}");
    let (status, body) = hub
        .admin(
            Method::POST,
            &format!("/v1/admin/hosts/{host}/revoke"),
            None,
        )
        .await;
    assert!((200..300).contains(&status), "{status} {body}");
    let (status, body) = hub
        .admin(
            Method::POST,
            "/v1/admin/enrollment-tokens",
            Some(json!({ "ttl_seconds": 3600, "restore_host": host })),
        )
        .await;
    assert!((200..300).contains(&status), "{status} {body}");
    let restore_token = body["token"].as_str().unwrap().to_owned();

    let new_sim = start_sim(SimConfig::fast()).await;
    new_sim.import_remote(PBS, offsite).unwrap();
    let new_files = agent_files(&new_sim, &tap.url, &hub.fingerprint, Some(&restore_token));
    let _ = new_files.trusted_operator();
    let new_agent = InProcessAgent::start(&new_files.config_path).await;
    assert_eq!(new_agent.handles.host_id, host, "the new box is the host");
    let new_config = AgentConfig::load(&new_files.config_path).unwrap();

    // It waits: no K of its own, no blank guests.
    eventually(
        Duration::from_secs(30),
        "the new box says what it waits for",
        || async {
            new_agent
                .handles
                .reconcile
                .borrow()
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains("escrow recover"))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        agent_restores(&new_sim).is_empty(),
        "{:?}",
        agent_restores(&new_sim)
    );
    assert!(
        PbsKey::load_existing(&new_config.state_dir)
            .unwrap()
            .is_none()
    );

    // The operator reseals the PBS credentials to the new box.
    let deadline = Instant::now() + Duration::from_secs(30);
    let new_recipient = loop {
        let reported = hub.host(host).await["last_report"]["storage_recipient"]
            .as_str()
            .map(str::to_owned);
        if let Some(r) = reported.filter(|r| *r != old_recipient) {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "the new box reports its recipient"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(hub.host(host).await["reseal_required_since"].is_string());
    with_pbs(&mut state, host, &new_recipient, &password);
    hub.put_desired(host, &state).await;

    // The customer types the words.
    let lost_at = Instant::now();
    let mut typed = words.as_bytes();
    let recovered = command::recover(&new_config, None, WordSource::Reader(&mut typed))
        .await
        .unwrap();
    assert_eq!(recovered.installed, Installed::New);
    assert_eq!(recovered.fingerprint, k.fingerprint());

    for &(guest, name) in &guests {
        let vmid = running_vmid(&new_agent.handles.reconcile, guest).await;
        let (old_vmid, archive) = &before[&guest];
        assert_eq!(vmid, *old_vmid, "the archive's vmid was free");
        assert!(agent_restores(&new_sim).contains(&(vmid.to_string(), archive.clone())));
        let marker = new_sim.guest_file(vmid, MARKER).map(|f| f.content);
        assert_eq!(
            marker.as_deref(),
            Some(format!("data of {name}").as_bytes())
        );
    }
    let took = lost_at.elapsed();
    assert!(
        !agent_restores(&new_sim)
            .iter()
            .any(|(_, a)| a.ends_with(&forged)),
        "an archive of another key was restored: {:?}",
        agent_restores(&new_sim)
    );
    let restored = || async {
        let (_, alerts) = hub
            .admin(Method::GET, "/v1/admin/alerts?limit=1000", None)
            .await;
        alerts
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["kind"] == "guest_restored" && a["host_id"] == host.to_string())
            .filter_map(|a| a["message"].as_str().map(str::to_owned))
            .filter(|m| m.contains("RPO") && m.contains("RTO"))
            .collect::<Vec<_>>()
    };
    eventually(
        Duration::from_secs(30),
        "guest_restored for each guest",
        || async { restored().await.len() == guests.len() },
    )
    .await;
    for message in restored().await {
        println!("  {message}");
    }

    // Neither R nor K ever reached the hub, in any form it could read.
    let received = tap.received();
    assert!(
        contains(&received, "/escrow"),
        "the tap saw the escrow upload"
    );
    let pairs: Vec<String> = words
        .split(' ')
        .collect::<Vec<_>>()
        .windows(2)
        .map(|w| w.join(" "))
        .collect();
    let mut places = vec![("the requests the hub received".to_owned(), received)];
    places.extend(files_under(hub.dir.path()));
    for (place, bytes) in &places {
        assert!(!contains(bytes, &words), "the words reached {place}");
        for pair in &pairs {
            assert!(
                !contains(bytes, pair),
                "two words of the code reached {place}"
            );
        }
        assert!(!contains(bytes, &k_data), "K reached {place}");
        assert!(!contains(bytes, &k_file), "K's file reached {place}");
    }
    // Nor is R stored on either box.
    for dir in [&old_config.state_dir, &new_config.state_dir] {
        for (place, bytes) in files_under(dir) {
            assert!(!contains(&bytes, &words), "the words are stored in {place}");
        }
    }

    new_agent.stop().await;
    hub.stop().await;
    new_sim.shutdown().await;
    took
}
