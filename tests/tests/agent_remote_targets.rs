//! Remote storage targets that fail, end to end (the simulator, a real hub and the agent):
//! an NFS server that hangs is reported `unreachable` within seconds while the local tier
//! keeps its cadence (the NFS storage is a soft mount, so nothing waits on it for long), and
//! PBS targets with a wrong password or fingerprint reach the hub as `auth_failed` and
//! `fingerprint_mismatch`, never with Proxmox's words.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::{Duration, Instant};

use agent_support::*;
use bosun_agentd::data::storage::naming::storage_id_of;
use bosun_agentd::data::storage::target::NFS_MOUNT_OPTIONS;
use bosun_proto::desired::StorageType;
use bosun_pve::{ContentType, Pve, StorageCreate, StorageId, StorageKind};
use bosun_pvesim::SimHandle;
use serde_json::{Value, json};
use uuid::Uuid;

const NAS: &str = "nas.example";
/// A second NFS server, healthy until the test takes it off the network.
const NAS2: &str = "nas2.example";
const EXPORT: &str = "/export/backups";
const FP: &str = "12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0";
const OTHER_FP: &str = "AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89";

/// The hub's report of the target `durable_id`, if any.
async fn target_report(hub: &RealHub, host: Uuid, durable_id: &str) -> Option<Value> {
    hub.host(host).await["last_report"]["storage"]
        .as_array()?
        .iter()
        .find(|t| t["durable_id"] == durable_id)
        .cloned()
}

/// The vzdumps the simulator was asked for that write to `storage`.
fn vzdumps_to(sim: &SimHandle, storage: &str) -> usize {
    sim.requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/vzdump"))
        .filter(|r| r.params.iter().any(|(k, v)| k == "storage" && v == storage))
        .count()
}

/// Appends `text` to the agent's configuration.
fn configure(files: &AgentFiles, text: &str) {
    let mut config = std::fs::read_to_string(&files.config_path).unwrap();
    config.push_str(text);
    std::fs::write(&files.config_path, config).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_nfs_tier_is_unreachable_within_seconds_and_the_local_tier_keeps_its_cadence() {
    let (sim, hub, files) = enrolled_stack().await;
    configure(
        &files,
        "[backup]\nwatch_interval_ms = 500\nstorage_call_timeout_ms = 2000\n",
    );
    sim.add_nfs_remote(NAS, EXPORT);
    sim.add_nfs_remote(NAS2, EXPORT);
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let guest = Uuid::new_v4();
    let durable = format!("{NAS}:{EXPORT}");
    let storage = storage_id_of(StorageType::Nfs, &durable);
    let other = format!("{NAS2}:{EXPORT}");
    // Both tiers every 2 s (from when the guest runs): tier 0 on `local`, tier 1 on the NFS
    // export.
    let every_2s = "*:*:0/2";
    let mut desired = desired(&sim, &[(guest, "alpha")], "running");
    desired["storage"] = json!([
        {
            "type": "nfs",
            "durable_id": durable,
            "class": "slow",
            "role": "vzdump-target",
            "policy": { "schedule": every_2s, "retention": {} },
            "state": "attached",
        },
        {
            "type": "nfs",
            "durable_id": other,
            "class": "slow",
            "role": "vzdump-target",
            "policy": { "retention": {} },
            "state": "attached",
        },
    ]);
    hub.put_desired(host, &desired).await;
    running_vmid(&agent.handles.reconcile, guest).await;
    eventually(
        Duration::from_secs(30),
        "the NFS targets are mounted",
        || async {
            let mounted = |t: Option<Value>| t.is_some_and(|t| t["status"] == "mounted");
            mounted(target_report(&hub, host, &durable).await)
                && mounted(target_report(&hub, host, &other).await)
        },
    )
    .await;
    // The policy once the guest runs (a new policy wakes the scheduler at once).
    desired["backup_policy"] = json!({
        "schedule": every_2s,
        "retention": {},
        "further_tiers": [durable],
    });
    hub.put_desired(host, &desired).await;

    // Registered as a soft mount with timeouts.
    let config = root_client(&sim).storage_config(&storage).await.unwrap();
    assert_eq!(config["options"], NFS_MOUNT_OPTIONS, "{config:?}");
    let create = sim
        .requests()
        .into_iter()
        .find(|r| {
            r.method == "POST"
                && r.path == "/storage"
                && r.params.iter().any(|(k, v)| k == "server" && v == NAS)
        })
        .expect("the storage was added");
    assert!(
        create
            .params
            .iter()
            .any(|(k, v)| k == "options" && v == "soft,timeo=30,retrans=2"),
        "{create:?}"
    );
    eventually(Duration::from_secs(30), "both tiers back up", || async {
        vzdumps_to(&sim, "local") >= 1 && vzdumps_to(&sim, storage.as_str()) >= 1
    })
    .await;

    // The NFS server hangs: unreachable at the hub within seconds.
    sim.set_remote_hanging(NAS, true);
    let hung_at = Instant::now();
    let local_before = vzdumps_to(&sim, "local");
    let nfs_before = vzdumps_to(&sim, storage.as_str());
    eventually(
        Duration::from_secs(15),
        "the NFS target is unreachable at the hub",
        || async {
            target_report(&hub, host, &durable)
                .await
                .is_some_and(|t| t["status"] == "unreachable" && t["reason"] == "unreachable")
        },
    )
    .await;
    let took = hung_at.elapsed();
    eprintln!("NFS server hangs → reported unreachable at the hub after {took:?}");
    assert!(took < Duration::from_secs(5), "the hub knew after {took:?}");
    let reported = target_report(&hub, host, &durable).await.unwrap();
    assert!(reported.get("detail").is_none(), "{reported}");

    // The local tier keeps its 2 s cadence while the NFS server hangs.
    let window = Duration::from_secs(10);
    tokio::time::sleep(window.saturating_sub(hung_at.elapsed())).await;
    let local_during = vzdumps_to(&sim, "local") - local_before;
    let nfs_during = vzdumps_to(&sim, storage.as_str()) - nfs_before;
    eprintln!(
        "during {:?} of hanging: {local_during} vzdumps to local, {nfs_during} to the NFS storage",
        hung_at.elapsed()
    );
    assert!(
        local_during >= 3,
        "only {local_during} local backups in {window:?} at a 2 s cadence"
    );
    // An administrator adds a hard-mounted storage on the hanging server: the node's storage
    // list now hangs. The watcher gives up on it and looks at each target by itself, so the
    // other NFS server dropping off the network is still reported within seconds.
    let root = root_client(&sim);
    root.create_storage(&StorageCreate {
        storage: StorageId::new("admin-nfs").unwrap(),
        kind: StorageKind::Nfs {
            server: NAS.into(),
            export: EXPORT.into(),
            content: vec![ContentType::Backup],
            options: None,
        },
    })
    .await
    .unwrap();
    sim.set_remote_reachable(NAS2, false);
    let dropped_at = Instant::now();
    eventually(
        Duration::from_secs(20),
        "the other NFS target is unreachable at the hub",
        || async {
            target_report(&hub, host, &other)
                .await
                .is_some_and(|t| t["status"] == "unreachable" && t["reason"] == "unreachable")
        },
    )
    .await;
    let took = dropped_at.elapsed();
    eprintln!("storage list hangs; another NFS server drops → reported unreachable after {took:?}");
    assert!(
        took < Duration::from_secs(10),
        "the hub knew after {took:?}"
    );
    assert_eq!(
        target_report(&hub, host, &durable).await.unwrap()["status"],
        "unreachable"
    );

    // The servers answer again: mounted again.
    sim.set_remote_hanging(NAS, false);
    sim.set_remote_reachable(NAS2, true);
    eventually(
        Duration::from_secs(30),
        "the NFS targets are back",
        || async {
            let back = |t: Option<Value>| {
                t.is_some_and(|t| t["status"] == "mounted" && t.get("reason").is_none())
            };
            back(target_report(&hub, host, &durable).await)
                && back(target_report(&hub, host, &other).await)
        },
    )
    .await;
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pbs_targets_refused_for_password_or_fingerprint_reach_the_hub_as_reasons_only() {
    let (sim, hub, files) = enrolled_stack().await;
    let password = format!("pbs-{}", Uuid::new_v4().simple());
    sim.set_strict_remotes(true);
    sim.add_pbs_remote("pbs.example", FP, "store1", &password);
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let recipient = hub_recipient(&hub, host).await;
    let sealed = |durable: &str, secret: &str| {
        let credential = bosun_proto::sealed_credential::SealedCredential::new(
            host,
            bosun_proto::data_plan::TargetIdentity {
                kind: bosun_proto::desired::StorageType::Pbs,
                durable_id: durable.to_owned(),
                namespace: None,
                username: None,
                serial: None,
            },
            jiff::Timestamp::now(),
            bosun_proto::secret::SecretToken::new(secret),
        );
        agent_support::signing::seal_signed(&recipient, &credential)
    };
    let pbs = |durable: &str, credentials: String| {
        json!({
            "type": "pbs",
            "durable_id": durable,
            "class": "slow",
            "role": "pbs-offsite",
            "policy": { "schedule": "03:00", "retention": {} },
            "state": "attached",
            "credentials": credentials,
        })
    };
    let wrong_password = format!("backup@pbs!bosun@pbs.example:store1#{FP}");
    let wrong_fingerprint = format!("backup@pbs!other@pbs.example:store1#{OTHER_FP}");
    let mut desired = desired(&sim, &[], "running");
    desired["storage"] = json!([
        pbs(&wrong_password, sealed(&wrong_password, "not-the-password")),
        pbs(&wrong_fingerprint, sealed(&wrong_fingerprint, &password)),
    ]);
    hub.put_desired(host, &desired).await;

    eventually(
        Duration::from_secs(30),
        "both refusals at the hub",
        || async {
            let a = target_report(&hub, host, &wrong_password).await;
            let b = target_report(&hub, host, &wrong_fingerprint).await;
            a.is_some_and(|t| t["reason"] == "auth_failed")
                && b.is_some_and(|t| t["reason"] == "fingerprint_mismatch")
        },
    )
    .await;
    for durable in [&wrong_password, &wrong_fingerprint] {
        let t = target_report(&hub, host, durable).await.unwrap();
        assert_eq!(t["status"], "unreachable", "{t}");
        assert!(t.get("detail").is_none(), "Proxmox's words at the hub: {t}");
    }
    // Proxmox did say why, in its own words; the agent kept them to itself.
    let refusals: Vec<String> = sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == "/storage")
        .map(|r| r.status.to_string())
        .collect();
    assert!(refusals.iter().all(|s| s == "500"), "{refusals:?}");
    let alerts = {
        let (status, body) = hub
            .admin(reqwest::Method::GET, "/v1/admin/alerts", None)
            .await;
        assert_eq!(status, 200, "{body}");
        body.to_string()
    };
    assert!(alerts.contains("auth_failed"), "{alerts}");
    assert!(alerts.contains("fingerprint_mismatch"), "{alerts}");
    agent.stop().await;
    for words in [
        "error fetching datastores",
        "Unauthorized",
        "not verified",
        "create storage failed",
    ] {
        assert!(
            !hub_files_contain(&hub, words.as_bytes()),
            "the hub holds Proxmox's words {words:?}"
        );
    }
    hub.stop().await;
    sim.shutdown().await;
}

/// Whether any file the hub wrote holds `needle`.
fn hub_files_contain(hub: &RealHub, needle: &[u8]) -> bool {
    let mut stack = vec![hub.dir.path().to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if std::fs::read(&path)
                .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle))
            {
                return true;
            }
        }
    }
    false
}
