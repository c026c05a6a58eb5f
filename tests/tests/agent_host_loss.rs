//! A whole host lost, through the real agents, hub and TLS, on two simulator nodes.
//!
//! The old box backs its guests up to PBS (encrypted with K), and its operator makes the
//! escrow with the customer present: a recovery sheet rendered by the agent itself, read back
//! with `pdftotext` the way a person reads it. Then the old node is stopped for good. The
//! operator revokes the host and makes a restore-mode enrollment token; a fresh box on a
//! fresh node enrolls with it, takes over the host's identity and waits (no blank guests)
//! until the storage credentials are resealed to it and the customer's words bring K back;
//! then every guest comes back from PBS with its data, and the hub reports RPO and RTO.
//!
//! A second walk rotates the escrow between the guests' backups, so the host's archives are
//! encrypted with two keys: the new sheet's words bring both back, and each guest comes back
//! from its archive, an archive of the retired key through the storage that holds it.
//!
//! The host's signed plan routes a hostname to each guest through its tunnel, and the tunnel's
//! credentials are sealed to the old box. The operator reseals them to the new box with the
//! storage credentials (decision 0084); the new box, configured with a tunnel (the
//! cloudflared stand-in), writes the same hostnames to its restored guests and the credentials
//! file.
//!
//! A wiretap in front of the hub keeps every byte the agents sent; neither the words nor any
//! key nor the tunnel's secret are in it, nor anywhere in the hub's data directory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;
use crate::cloudflared;
use crate::escrow_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use agent_support::tap::HubTap;
use agent_support::*;
use bosun_agentctl::escrow::command;
use bosun_agentctl::escrow::command::WordSource;
use bosun_agentctl::escrow::rotate;
use bosun_agentd::config::AgentConfig;
use bosun_agentd::data::storage::naming::restore_only_id;
use bosun_agentd::trust::keys::pbs_key::{Installed, PbsKey, PbsKeyring};
use bosun_pvesim::SimConfig;
use escrow_support::pbs::{PBS, PbsHost, sheet_options, with_pbs};
use escrow_support::{contains, files_under, words_on_sheet};
use reqwest::Method;
use serde_json::json;

const MARKER: &str = "/root/bosun-host-loss-marker";
const TUNNEL_ID: u128 = 0x6ff4_2ae2_765d_4adf_8112_31c5_5c15_51ef;

/// `desired` with an operator-signed plan (its own, with the tunnel) routing
/// `NAME.example.com` to each guest.
fn with_tunnel(
    desired: &serde_json::Value,
    host: uuid::Uuid,
    guests: &[(uuid::Uuid, String, u32)],
) -> serde_json::Value {
    let mut plan = signing::plan_of(desired, host);
    plan.tunnel = Some(bosun_proto::tunnel::PlanTunnel {
        tunnel_id: uuid::Uuid::from_u128(TUNNEL_ID),
        routes: guests
            .iter()
            .map(|(guest_id, name, _)| bosun_proto::tunnel::TunnelRoute {
                hostname: format!("{name}.example.com"),
                guest_id: *guest_id,
                port: 80,
            })
            .collect(),
    });
    let mut desired = desired.clone();
    desired["data_plan"] = signing::signed_plan(&plan);
    desired
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_host_comes_back_on_a_new_box_with_the_customers_words() {
    let took = lose_the_host(&["alpha", "bravo"], false).await;
    eprintln!("host loss: words typed → 2 guests running again after {took:?}");
}

/// The escrow was rotated between the guests' backups: alpha's archive is encrypted with the
/// key the rotation retired, bravo's with the new one. The new sheet's words bring both keys
/// back, and both guests come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_lost_after_a_rotation_comes_back_from_archives_of_both_keys() {
    let took = lose_the_host(&["alpha", "bravo"], true).await;
    eprintln!("host loss after a rotation: words typed → 2 guests running again after {took:?}");
}

/// Figures for docs/benchmarks.md (ignored; run with `cargo test -p bosun-tests --test
/// agent_host_loss -- --ignored --nocapture`): a host with 5 guests lost and recovered,
/// the time from the words typed to every guest running, and the RTO the hub reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; run explicitly"]
async fn host_loss_rto_for_five_guests() {
    let took = lose_the_host(&["g1", "g2", "g3", "g4", "g5"], false).await;
    println!("host loss, 5 guests: words typed → all running again in {took:?}");
}

/// The data of a key file (what must never leave the box).
fn key_data(key: &PbsKey) -> String {
    key.key_file_json()
        .as_str()
        .split("\"data\":\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_owned()
}

/// The whole walk for a host with guests named `names`; with `rotated`, the escrow is
/// rotated after the first guest's backup and the others are backed up after it. Gives the
/// time from the words typed to every guest running again on the new box.
async fn lose_the_host(names: &[&str], rotated: bool) -> Duration {
    let hub = RealHub::start().await;
    let tap = HubTap::start(&hub).await;

    // --- The old box: guests, their backups on PBS, the escrow. ---
    let old = PbsHost::start(&hub, &tap.url, names).await;
    let host = old.host;
    let old_recipient = old.recipient.clone();
    let password = old.password.clone();
    let mut state = old.state.clone();
    let pbs = old.pbs.clone();
    // The operator signs the tunnel's routes and seals its credentials to the old box.
    let tunnel = uuid::Uuid::from_u128(TUNNEL_ID);
    let tunnel_secret = format!("tunnel-secret-{}", uuid::Uuid::new_v4().simple());
    let tunnel_file = cloudflared::credentials_json(tunnel, &tunnel_secret);
    state = with_tunnel(&state, host, &old.guests);
    state["tunnel_credentials"] =
        cloudflared::seal_credentials(&old_recipient, host, tunnel, &tunnel_file).into();
    hub.put_desired(host, &state).await;
    old.storage_holds_current_key().await;
    let mut before = BTreeMap::new();
    let back_up = |index: usize| {
        let old = &old;
        let hub = &hub;
        async move {
            let (guest, name, vmid) = old.guests[index].clone();
            write_in_guest(&old.sim, vmid, MARKER, &format!("data of {name}")).await;
            let archive = old.back_up(hub, index).await;
            (guest, (vmid, archive))
        }
    };
    let backed_up_first = if rotated { 1 } else { names.len() };
    for index in 0..backed_up_first {
        let (guest, done) = back_up(index).await;
        before.insert(guest, done);
    }
    let old_config = old.config.clone();
    let k = PbsKey::load_existing(&old_config.state_dir)
        .unwrap()
        .unwrap();
    let mut secrets = vec![
        (key_data(&k), k.key_file_json().as_str().to_owned()),
        (tunnel_secret.clone(), tunnel_file.clone()),
    ];

    let sheet_dir = tempfile::tempdir().unwrap();
    let options = sheet_options(sheet_dir.path());
    let created = command::create(&old_config, &options, "pve-old")
        .await
        .unwrap();
    assert_eq!(created.fingerprint, k.fingerprint());
    let mut words = words_on_sheet(&created.sheet);
    // Run twice: refused, nothing changes.
    let again = command::create(&old_config, &options, "pve-old")
        .await
        .unwrap_err();
    assert_eq!(again.exit_code(), 75, "{again}");
    eventually(
        Duration::from_secs(30),
        "the hub shows a verified escrow",
        || async { hub.host(host).await["escrow"]["state"] == "verified" },
    )
    .await;
    // The key the guests' newest archives are encrypted with, and those of the others.
    let mut current = k.fingerprint();
    if rotated {
        let second = tempfile::tempdir().unwrap();
        let rotation = rotate::rotate(&old_config, &sheet_options(second.path()), "pve-old")
            .await
            .unwrap();
        words = words_on_sheet(&rotation.sheet);
        current = rotation.fingerprint.clone();
        let k2 = PbsKey::load_existing(&old_config.state_dir)
            .unwrap()
            .unwrap();
        assert_eq!(k2.fingerprint(), current);
        secrets.push((key_data(&k2), k2.key_file_json().as_str().to_owned()));
        old.storage_holds_current_key().await;
        for index in backed_up_first..names.len() {
            let (guest, done) = back_up(index).await;
            assert_eq!(
                old.archive_key(&done.1).await.as_deref(),
                Some(current.as_str())
            );
            before.insert(guest, done);
        }
        eventually(
            Duration::from_secs(30),
            "the hub verifies the rotated escrow",
            || async {
                let escrow = &hub.host(host).await["escrow"];
                escrow["state"] == "verified" && escrow["key_fingerprint"] == current.as_str()
            },
        )
        .await;
    }
    // Each guest's archive and the key it is encrypted with.
    let mut keys = BTreeMap::new();
    for (guest, (_, archive)) in &before {
        keys.insert(*guest, old.archive_key(archive).await.unwrap());
    }

    // --- The host dies: its node is stopped for good; PBS is offsite and survives. ---
    let PbsHost {
        sim: old_sim,
        agent: old_agent,
        files: _old_files,
        guests,
        ..
    } = old;
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
    // The new box runs the tunnel (its replicas the stand-in), with no credentials yet.
    let tunnel_dir = tempfile::tempdir().unwrap();
    let tunnel_config = tunnel_dir.path().join("config.yml");
    let tunnel_credentials = tunnel_dir.path().join("credentials.json");
    std::fs::write(
        &tunnel_config,
        format!(
            "tunnel: {tunnel}\ncredentials-file: \"{}\"\ningress:\n  - service: http_status:404\n",
            tunnel_credentials.display()
        ),
    )
    .unwrap();
    let stand_in = cloudflared::StandIn::start(
        tunnel_dir.path(),
        &tunnel_config,
        &["bosun-tunnel@a.service", "bosun-tunnel@b.service"],
    )
    .await
    .unwrap();
    let mut config_text = std::fs::read_to_string(&new_files.config_path).unwrap();
    config_text.push_str(&stand_in.agent_config(
        &tunnel_credentials,
        "interval_ms = 100\ntimeout_ms = 300\ndown_after_ms = 1000\nrestart_timeout_ms = 5000\n",
    ));
    std::fs::write(&new_files.config_path, config_text).unwrap();
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
    state["tunnel_credentials"] =
        cloudflared::seal_credentials(&new_recipient, host, tunnel, &tunnel_file).into();
    hub.put_desired(host, &state).await;

    // The customer types the words.
    let lost_at = Instant::now();
    let mut typed = words.as_bytes();
    let recovered = command::recover(&new_config, None, WordSource::Reader(&mut typed))
        .await
        .unwrap();
    assert_eq!(recovered.installed, Installed::New);
    assert_eq!(recovered.fingerprint, current);
    let ring = PbsKeyring::load(&new_config.state_dir).unwrap().unwrap();
    if rotated {
        assert_eq!(recovered.older, vec![k.fingerprint()]);
        assert_eq!(ring.fingerprints(), vec![current.clone(), k.fingerprint()]);
    } else {
        assert!(recovered.older.is_empty());
        assert_eq!(ring.fingerprints(), vec![current.clone()]);
    }

    let mut routes = BTreeMap::new();
    for (guest, name, _) in &guests {
        let vmid = running_vmid(&new_agent.handles.reconcile, *guest).await;
        routes.insert(
            format!("{name}.example.com"),
            format!("http://{}:80", bosun_pvesim::dhcp_address(vmid)),
        );
        let (old_vmid, archive) = &before[guest];
        assert_eq!(vmid, *old_vmid, "the archive's vmid was free");
        // An archive of the retired key is read through the storage that holds it.
        let key = &keys[guest];
        let read_as = if key.eq_ignore_ascii_case(&current) {
            archive.clone()
        } else {
            assert!(rotated, "{archive} is encrypted with {key}");
            let name = archive.split_once(':').unwrap().1;
            format!("{}:{name}", restore_only_id(&pbs, key))
        };
        assert!(
            agent_restores(&new_sim).contains(&(vmid.to_string(), read_as.clone())),
            "{read_as}: {:?}",
            agent_restores(&new_sim)
        );
        let marker = new_sim.guest_file(vmid, MARKER).map(|f| f.content);
        assert_eq!(
            marker.as_deref(),
            Some(format!("data of {name}").as_bytes())
        );
    }
    let took = lost_at.elapsed();
    // The new box serves the same hostnames, at the restored guests, with the credentials.
    eventually(
        Duration::from_secs(30),
        "the new box's tunnel routes every hostname with the resealed credentials",
        || async {
            let id = Some(tunnel.to_string());
            (0..2).all(|i| stand_in.routes(i) == routes && stand_in.credentials(i) == id)
        },
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(&tunnel_credentials).unwrap(),
        tunnel_file
    );
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&tunnel_credentials)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o640);
    }
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
    // Until a new backup lands, each restored guest's last backup is the archive it came back
    // from (never `last backup never` right after the restore).
    let last_backups = || async {
        hub.host(host).await["last_report"]["last_backups"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    eventually(
        Duration::from_secs(30),
        "the restored guests' archives reported as their last backups",
        || async {
            let reported = last_backups().await;
            before.iter().all(|(guest, (_, archive))| {
                let name = |a: &str| a.split_once(':').map(|(_, n)| n.to_owned());
                reported.iter().any(|b| {
                    b["guest_id"] == guest.to_string()
                        && b["ok"] == true
                        && b["archive"].as_str().and_then(name) == name(archive.as_str())
                })
            })
        },
    )
    .await;

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
        for (data, file) in &secrets {
            assert!(!contains(bytes, data), "a key reached {place}");
            assert!(!contains(bytes, file), "a key's file reached {place}");
        }
    }
    // Nor is R stored on either box.
    for dir in [&old_config.state_dir, &new_config.state_dir] {
        for (place, bytes) in files_under(dir) {
            assert!(!contains(&bytes, &words), "the words are stored in {place}");
        }
    }

    new_agent.stop().await;
    stand_in.stop().await;
    hub.stop().await;
    new_sim.shutdown().await;
    took
}
