//! Bulk volumes placed by class, end to end: the simulator, a real hub and the agent with its
//! local API. A `fast` volume lands on the host's fast target beside a slow one, and the
//! controller's `GET /v1/storage` names each mount's class as the signed plan sets it. A `fast`
//! volume on a host whose plan holds only slow targets is refused with its reason in the
//! report and the audit log, and nothing of its guest is built until a fast target arrives.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::signing::{plan_of, signed_plan};
use agent_support::*;
use bosun_agentd::data::storage::naming::storage_id_of;
use bosun_proto::data_plan::NodeStorage;
use bosun_proto::desired::{StorageClass, StorageType};
use serde_json::{Value, json};
use uuid::Uuid;

fn bulk_target(dir: &str, class: &str) -> Value {
    json!({
        "type": "local-dir",
        "durable_id": dir,
        "class": class,
        "role": "bulk-data",
        "policy": {},
        "state": "attached",
    })
}

fn volume(name: &str, class: &str) -> Value {
    json!({
        "name": name,
        "size_gib": 4,
        "path": format!("/mnt/{name}"),
        "class": class,
        "backup": { "kind": "none", "acknowledged_by": "ops@example 2026-11-20" },
    })
}

/// The hub's report of `guest`'s bulk volume `name`, once there is one.
async fn bulk_report(hub: &RealHub, host: Uuid, guest: Uuid, name: &str) -> Option<Value> {
    hub.host(host).await["last_report"]["bulk_volumes"]
        .as_array()?
        .iter()
        .find(|v| v["guest_id"] == json!(guest) && v["name"] == name)
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_volume_lands_on_the_fast_target_and_the_local_api_names_each_mounts_class() {
    let (sim, hub, files) = enrolled_stack().await;
    let helper = files.helper.clone();
    files.allow_local_dirs(&["/srv"]);
    files.use_local_api(0, "");
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let guest = Uuid::new_v4();
    let mut desired = desired(&sim, &[(guest, "shop")], "running");
    // The slow target first: a fast volume must not take the first bulk-data target there is.
    desired["storage"] = json!([
        bulk_target("/srv/slow", "slow"),
        bulk_target("/srv/fast", "fast")
    ]);
    desired["guests"][0]["bulk_volumes"] = json!([volume("db", "fast"), volume("media", "slow")]);
    // The operator's plan classes the node's own storage, where root volumes live.
    let mut plan = plan_of(&desired, host);
    plan.node_storages = vec![NodeStorage {
        storage: "local-lvm".to_owned(),
        class: StorageClass::Fast,
    }];
    desired["data_plan"] = signed_plan(&plan);
    hub.put_desired(host, &desired).await;

    let vmid = running_vmid(&agent.handles.reconcile, guest).await;
    let fast = storage_id_of(StorageType::LocalDir, "/srv/fast");
    let slow = storage_id_of(StorageType::LocalDir, "/srv/slow");
    let config = sim.guest_config(vmid).expect("the guest exists");
    let mp = |key: &str| config.get(key).cloned().unwrap_or_default();
    assert!(mp("mp0").starts_with(&format!("{fast}:")), "{}", mp("mp0"));
    assert!(mp("mp0").contains("mp=/mnt/db"), "{}", mp("mp0"));
    assert!(mp("mp1").starts_with(&format!("{slow}:")), "{}", mp("mp1"));

    // The controller asks with the token its bootstrap carries.
    eventually(Duration::from_secs(30), "the bootstrap is pushed", || {
        let path = helper.bootstrap_path(vmid);
        async move { path.exists() }
    })
    .await;
    let doc = helper.read_bootstrap(vmid);
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let storage = || async {
        let answer = client
            .get(format!("{}/v1/storage", doc.local_api.url))
            .bearer_auth(doc.local_api.token.expose())
            .send()
            .await
            .unwrap();
        // The token's hash is stored right after the push: a moment of 401 is possible.
        if answer.status() != 200 {
            return None;
        }
        Some(answer.json::<Value>().await.unwrap())
    };
    eventually(
        Duration::from_secs(10),
        "the local api answers with classes",
        || async {
            storage().await.is_some_and(|b| {
                b["mounts"]
                    .as_array()
                    .is_some_and(|m| m.iter().all(|m| !m["class"].is_null()))
            })
        },
    )
    .await;
    let body = storage().await.unwrap();
    let mount = |key: &str| {
        body["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["key"] == key)
            .cloned()
            .unwrap_or_else(|| panic!("no {key} in {body}"))
    };
    assert_eq!(mount("mp0")["class"], "fast", "{body}");
    assert_eq!(mount("mp0")["storage"], fast.as_str());
    assert_eq!(mount("mp0")["path"], "/mnt/db");
    assert_eq!(mount("mp1")["class"], "slow", "{body}");
    assert_eq!(mount("mp1")["storage"], slow.as_str());
    // The root disk lives on the node's own storage, classed by the signed plan.
    assert_eq!(mount("rootfs")["storage"], "local-lvm", "{body}");
    assert_eq!(mount("rootfs")["class"], "fast", "{body}");

    // The report says where each volume went and what it asked for.
    eventually(
        Duration::from_secs(30),
        "the volumes are reported",
        || async { bulk_report(&hub, host, guest, "db").await.is_some() },
    )
    .await;
    let db = bulk_report(&hub, host, guest, "db").await.unwrap();
    assert_eq!(db["class"], "fast");
    assert_eq!(db["target"], "/srv/fast");
    assert!(db.get("refused").is_none(), "{db}");
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_volume_on_a_host_with_only_slow_targets_is_refused_and_nothing_is_built() {
    let (sim, hub, files) = enrolled_stack().await;
    files.allow_local_dirs(&["/srv"]);
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let guest = Uuid::new_v4();
    let mut desired = desired(&sim, &[(guest, "shop")], "running");
    desired["guests"][0]["bulk_volumes"] = json!([volume("db", "fast"), volume("media", "slow")]);
    // The operator's plan holds only a slow target; the hub's document also names a fast one,
    // which the plan does not (so the agent refuses it and never uses it).
    desired["storage"] = json!([bulk_target("/srv/slow", "slow")]);
    let plan = plan_of(&desired, host);
    desired["storage"] = json!([
        bulk_target("/srv/slow", "slow"),
        bulk_target("/srv/fast", "fast")
    ]);
    desired["data_plan"] = signed_plan(&plan);
    hub.put_desired(host, &desired).await;

    // Refused with its reason, audited once a reconcile pass planned it.
    let journal = agent.handles.journal.clone();
    let refusals = || {
        let journal = journal.clone();
        async move {
            journal
                .audit_since(0, 10_000)
                .await
                .unwrap()
                .into_iter()
                .filter(|e| e.event.event == "guest.placement_refused")
                .map(|e| e.event)
                .collect::<Vec<_>>()
        }
    };
    eventually(
        Duration::from_secs(30),
        "the refusal is audited",
        || async { !refusals().await.is_empty() },
    )
    .await;
    let audited = refusals().await;
    assert_eq!(
        audited.len(),
        1,
        "only the fast volume is refused: {audited:?}"
    );
    assert_eq!(audited[0].guest_id, Some(guest.to_string()));
    assert_eq!(audited[0].detail["volume"], "db");
    assert_eq!(audited[0].detail["reason"], "no_target_of_class");
    assert_eq!(
        audited[0].detail["why"],
        "no attached bulk-data target of class fast"
    );
    eventually(
        Duration::from_secs(30),
        "the refusal is reported",
        || async {
            bulk_report(&hub, host, guest, "db")
                .await
                .is_some_and(|v| v["refused"] == "no_target_of_class")
        },
    )
    .await;
    let db = bulk_report(&hub, host, guest, "db").await.unwrap();
    assert_eq!(db["class"], "fast");
    assert!(db.get("target").is_none(), "{db}");
    let media = bulk_report(&hub, host, guest, "media").await.unwrap();
    assert_eq!(media["target"], "/srv/slow");

    // Nothing of the guest was built: no restore, no container.
    assert!(
        agent_restores(&sim).is_empty(),
        "{:?}",
        agent_restores(&sim)
    );
    assert!(
        agent.handles.reconcile.borrow().guests.is_empty(),
        "{:?}",
        agent.handles.reconcile.borrow().guests
    );
    assert!(
        mutations(&sim).iter().all(|r| !r.path.contains("/lxc")),
        "{:?}",
        mutations(&sim)
    );

    // Once the operator's plan holds a fast target, the guest is built with it.
    let mut both = desired.clone();
    both.as_object_mut().unwrap().remove("data_plan");
    hub.put_desired(host, &both).await;
    let vmid = running_vmid(&agent.handles.reconcile, guest).await;
    let fast = storage_id_of(StorageType::LocalDir, "/srv/fast");
    let mp0 = sim
        .guest_config(vmid)
        .and_then(|c| c.get("mp0").cloned())
        .expect("mp0 exists");
    assert!(mp0.starts_with(&format!("{fast}:")), "{mp0}");
    eventually(Duration::from_secs(30), "the refusal is gone", || async {
        bulk_report(&hub, host, guest, "db")
            .await
            .is_some_and(|v| v["target"] == "/srv/fast" && v.get("refused").is_none())
    })
    .await;
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
