//! Hot volumes placed only on fast storage, end to end: the simulator, a real hub and the
//! agent. A hot volume whose storage the signed plan classes `slow` (or does not class) is
//! refused with its reason in the report, the audit log and a hub alert, the host is not in
//! sync and nothing of its guest is built; once the operator's plan classes the storage
//! `fast`, the guest is built with the volume as a `backup=1` mount point there.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::signing::{plan_of, signed_plan};
use agent_support::storage::alerts;
use agent_support::*;
use bosun_proto::data_plan::NodeStorage;
use bosun_proto::desired::StorageClass;
use serde_json::{Value, json};
use uuid::Uuid;

/// `desired` with the signed plan classing the node's `local-lvm` as `class` (none: unclassed).
fn with_plan(desired: &Value, host: Uuid, class: Option<StorageClass>) -> Value {
    let mut plan = plan_of(desired, host);
    plan.node_storages = class
        .map(|class| {
            vec![NodeStorage {
                storage: "local-lvm".to_owned(),
                class,
            }]
        })
        .unwrap_or_default();
    let mut out = desired.clone();
    out["data_plan"] = signed_plan(&plan);
    out
}

/// The report's refusal of `guest`'s hot volume `name`, once there is one.
async fn hot_refusal(hub: &RealHub, host: Uuid, guest: Uuid, name: &str) -> Option<Value> {
    hub.host(host).await["last_report"]["refused"]
        .as_array()?
        .iter()
        .find(|r| r["guest_id"] == json!(guest) && r["field"] == format!("hot_volumes.{name}"))
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_volume_is_built_only_on_a_storage_the_signed_plan_classes_fast() {
    let (sim, hub, files) = enrolled_stack().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let guest = Uuid::new_v4();
    let mut desired = desired(&sim, &[(guest, "shop")], "running");
    desired["guests"][0]["hot_volumes"] = json!([{
        "name": "db", "size_gib": 2, "path": "/var/lib/postgresql",
    }]);

    // The plan classes the root volume's storage slow: the hot volume has no place.
    hub.put_desired(host, &with_plan(&desired, host, Some(StorageClass::Slow)))
        .await;
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
    assert_eq!(audited.len(), 1, "{audited:?}");
    assert_eq!(audited[0].guest_id, Some(guest.to_string()));
    assert_eq!(audited[0].detail["volume"], "db");
    assert_eq!(audited[0].detail["hot"], true);
    assert_eq!(audited[0].detail["storage"], "local-lvm");
    assert_eq!(audited[0].detail["reason"], "storage_not_fast");
    eventually(
        Duration::from_secs(30),
        "the refusal is reported",
        || async { hot_refusal(&hub, host, guest, "db").await.is_some() },
    )
    .await;
    let refused = hot_refusal(&hub, host, guest, "db").await.unwrap();
    assert_eq!(refused["kind"], "guest_field", "{refused}");
    let reason = refused["reason"].as_str().unwrap();
    assert!(
        reason.contains("local-lvm is not one") && reason.contains("not of class fast"),
        "{reason}"
    );
    eventually(Duration::from_secs(30), "the hub alerts", || async {
        alerts(&hub, host, "placement_refused")
            .await
            .iter()
            .any(|a| {
                a["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("hot volume db (storage local-lvm)"))
            })
    })
    .await;
    // Kept out of sync: the generation is never reported applied while it is refused.
    let detail = hub.host(host).await;
    assert_ne!(
        detail["applied_generation"], detail["desired_generation"],
        "{detail}"
    );

    // A plan that does not class the storage at all: never taken for fast either.
    hub.put_desired(host, &with_plan(&desired, host, None))
        .await;
    eventually(
        Duration::from_secs(30),
        "an unclassed storage is refused",
        || async {
            refusals()
                .await
                .iter()
                .any(|e| e.detail["reason"] == "storage_unclassed")
        },
    )
    .await;

    // Nothing of the guest was built: no restore, no container, no volume.
    assert!(
        agent_restores(&sim).is_empty(),
        "{:?}",
        agent_restores(&sim)
    );
    assert!(
        mutations(&sim).iter().all(|r| !r.path.contains("/lxc")),
        "{:?}",
        mutations(&sim)
    );

    // The operator's plan classes local-lvm fast: the guest is built with its hot volume there,
    // one mount point the guest's vzdump includes.
    hub.put_desired(host, &with_plan(&desired, host, Some(StorageClass::Fast)))
        .await;
    let vmid = running_vmid(&agent.handles.reconcile, guest).await;
    let config = sim.guest_config(vmid).expect("the guest exists");
    let hot: Vec<&String> = config
        .iter()
        .filter(|(k, v)| k.starts_with("mp") && v.contains("mp=/var/lib/postgresql"))
        .map(|(_, v)| v)
        .collect();
    assert_eq!(hot.len(), 1, "{config:?}");
    assert!(hot[0].starts_with("local-lvm:"), "{}", hot[0]);
    assert!(hot[0].split(',').any(|p| p == "backup=1"), "{}", hot[0]);
    eventually(Duration::from_secs(30), "the refusal is gone", || async {
        hot_refusal(&hub, host, guest, "db").await.is_none()
    })
    .await;
    eventually(
        Duration::from_secs(30),
        "the generation is applied",
        || async {
            let detail = hub.host(host).await;
            detail["applied_generation"] == detail["desired_generation"]
        },
    )
    .await;
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
