//! Golden archives are pruned and the fleet sees each host's golden base (decision 0083), end
//! to end with the real hub, the in-process agent and the Proxmox simulator: every new signed
//! recipe builds another archive; once the new build booted in its scratch guest the older
//! ones are deleted through the Proxmox API, so at most two remain (the newest and the one
//! guests are provisioned from). A delete Proxmox fails is journaled, reported to the hub and
//! tried again at the next pass; it stops nothing. The hub's host list and host detail carry
//! the base the host reports.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::collections::BTreeMap;
use std::time::Duration;

use agent_support::*;
use bosun_pvesim::{EndpointFault, FaultConfig, SimHandle};
use serde_json::Value;

const DIGEST: &str = "sha256:3333333333333333333333333333333333333333333333333333333333333333";
const CONTENT: &str = "/nodes/{node}/storage/{storage}/content/{volume}";

/// The deletes of storage content that reached Proxmox (whatever their answer).
fn deletes(sim: &SimHandle) -> Vec<String> {
    sim.requests()
        .iter()
        .filter(|r| r.method == "DELETE" && r.path.contains("/content/"))
        .map(|r| r.path.clone())
        .collect()
}

/// A golden archive in the simulator's `local` storage, as a build would leave it.
fn add_archive(sim: &SimHandle) -> String {
    let conf: BTreeMap<String, String> = [
        ("arch", "amd64"),
        ("hostname", "golden"),
        ("memory", "512"),
        ("ostype", "debian"),
        ("rootfs", "local-lvm:vm-9000-disk-0,size=4G"),
        ("unprivileged", "1"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    sim.add_backup("local", 9000, conf).unwrap()
}

async fn host_detail(hub: &RealHub, host: uuid::Uuid) -> Value {
    let (_, detail) = hub
        .admin(
            reqwest::Method::GET,
            &format!("/v1/admin/hosts/{host}"),
            None,
        )
        .await;
    detail
}

async fn listed_golden(hub: &RealHub, host: uuid::Uuid) -> Value {
    let (_, hosts) = hub
        .admin(reqwest::Method::GET, "/v1/admin/hosts", None)
        .await;
    hosts
        .as_array()
        .into_iter()
        .flatten()
        .find(|h| h["host_id"] == host.to_string())
        .map(|h| h["golden"].clone())
        .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refreshes_leave_at_most_two_archives_and_a_failed_delete_is_reported_and_retried() {
    let (sim, hub, files) = enrolled_stack().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let journal = agent.handles.journal.clone();
    let mut built = Vec::new();
    for (i, version) in ["2026.11-1", "2026.11-2", "2026.11-3", "2026.11-4"]
        .into_iter()
        .enumerate()
    {
        let volid = add_archive(&sim);
        let file = volid.rsplit('/').next().unwrap().to_owned();
        let sha = format!("{:064x}", i + 1);
        *files.helper.golden_build.lock() = Some((format!("/var/lib/vz/dump/{file}"), sha, 4096));
        if i == 2 {
            // Proxmox fails every delete while the third base is built.
            sim.set_faults(FaultConfig {
                endpoints: vec![EndpointFault {
                    method: Some("DELETE".into()),
                    path: CONTENT.into(),
                    error_rate: 1.0,
                    error_message: "storage is locked".into(),
                    ..EndpointFault::default()
                }],
                ..FaultConfig::default()
            });
        }
        if i == 3 {
            sim.set_faults(FaultConfig::default());
        }
        let doc = bosun_proto::golden_recipe::GoldenRecipeDocument::new(
            version,
            "bosun/controller:1.4",
            DIGEST,
        );
        let recipe = agent_support::signing::signed_golden_recipe_document(&doc);
        let mut desired = desired(&sim, &[], "running");
        desired["golden_recipe"] = recipe;
        hub.put_desired(host, &desired).await;
        eventually(
            Duration::from_secs(60),
            "the new base is verified",
            || async {
                journal
                    .golden_build(version.into(), Some(DIGEST.into()))
                    .await
                    .unwrap()
                    .is_some()
            },
        )
        .await;
        built.push(volid);
        if i == 2 {
            // The second base's delete failed: journaled, reported, not fatal.
            eventually(
                Duration::from_secs(30),
                "the hub shows the failed removal",
                || async {
                    let golden = &host_detail(&hub, host).await["last_report"]["golden"];
                    golden["prune_failed"]["volid"] == built[1].as_str()
                        && golden["current"]["version"] == version
                },
            )
            .await;
            let golden = host_detail(&hub, host).await["last_report"]["golden"].clone();
            assert!(
                golden["prune_failed"]["attempts"].as_u64().unwrap() >= 1,
                "{golden}"
            );
            assert!(
                golden["prune_failed"]["error"]
                    .as_str()
                    .unwrap()
                    .contains("storage is locked"),
                "{golden}"
            );
            assert_eq!(golden["archives"], 2, "the current and the one not removed");
            let audit = journal.audit_since(0, 1000).await.unwrap();
            assert!(audit.iter().any(|e| e.event.event == "golden.prune_failed"));
        } else {
            eventually(
                Duration::from_secs(30),
                "the older archives are gone",
                || async {
                    let left = sim.storage_volumes("local");
                    built[..i].iter().all(|old| !left.contains(old))
                },
            )
            .await;
        }
        let left = sim.storage_volumes("local");
        let ours = built.iter().filter(|v| left.contains(v)).count();
        assert!(ours <= 2, "at most two archives remain: {left:?}");
        assert!(left.contains(&built[i]), "the current base stays");
    }
    // Three refreshes after the first build: the first base removed at once, the second on
    // its retry once the failure passed (with the third); one delete failed before that.
    let sent = deletes(&sim);
    assert!(sent.len() >= 3, "{sent:?}");
    let left = sim.storage_volumes("local");
    assert_eq!(
        built.iter().filter(|v| left.contains(v)).count(),
        1,
        "{left:?}"
    );
    eventually(
        Duration::from_secs(30),
        "the fleet list names the newest base",
        || async { listed_golden(&hub, host).await["version"] == "2026.11-4" },
    )
    .await;
    let listed = listed_golden(&hub, host).await;
    assert_eq!(listed["sha256"], format!("{:064x}", 4));
    let golden = host_detail(&hub, host).await["last_report"]["golden"].clone();
    assert_eq!(golden["archives"], 1, "{golden}");
    assert!(golden.get("prune_failed").is_none(), "{golden}");
    assert_eq!(golden["last_build"]["outcome"], "verified");
    assert_eq!(golden["current"]["controller_digest"], DIGEST);
    assert!(golden["current"]["verified_at"].is_string(), "{golden}");
    assert!(
        golden["current"]["verify_seconds"].as_u64().unwrap() >= 1,
        "{golden}"
    );
    agent.stop().await;
}
