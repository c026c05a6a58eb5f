//! Detaching a storage target end to end: the simulator, a real hub and the agent. Only a
//! job signed by a key in `allowed_signers` removes a storage, and only one this agent named
//! for a target that desired state no longer attaches and no backup tier writes to; the
//! removal is one `DELETE /storage/{storage}`, and the same job replayed runs no more.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agent_support::jobs::{ctl, job_result};
use agent_support::signing::OperatorKey;
use agent_support::*;
use bosun_agentd::clock::SystemClock;
use bosun_agentd::data::backup::tiers::TierPlan;
use bosun_agentd::data::storage::naming::storage_id_of;
use bosun_agentd::guests::queue::GuestQueue;
use bosun_agentd::ops::jobs::detach::DetachContext;
use bosun_agentd::ops::jobs::runner::JobRunner;
use bosun_proto::desired::StorageType;
use bosun_proto::job::SignedJob;
use bosun_pve::{NodeName, Pve, PveClient, PveConfig, RetryPolicy, StorageId, TlsTrust};
use serde_json::{Value, json};
use uuid::Uuid;

const ARCHIVE: &str = "/srv/bosun-archive";

fn client(sim: &bosun_pvesim::SimHandle, token: &bosun_pvesim::TokenCredential) -> PveClient {
    let endpoint = sim.endpoint();
    PveClient::new(PveConfig {
        base_url: endpoint.url.parse().unwrap(),
        node: NodeName::new(endpoint.node.clone()).unwrap(),
        token_id: token.id.clone(),
        token_secret: token.secret.clone().into(),
        trust: TlsTrust::PinnedSha256(endpoint.fingerprint.clone()),
        policy: RetryPolicy::fast(),
    })
    .unwrap()
}

/// The `DELETE /storage/…` requests the simulator saw.
fn storage_deletes(sim: &bosun_pvesim::SimHandle) -> Vec<bosun_pvesim::LoggedRequest> {
    sim.requests()
        .into_iter()
        .filter(|r| r.method == "DELETE" && r.path.starts_with("/storage"))
        .collect()
}

/// Authors and signs a job with `key`, submits it to the hub; gives the envelope as sent.
async fn submit_signed(
    hub: &RealHub,
    key: &OperatorKey,
    dir: &Path,
    args: &[&str],
) -> (Uuid, SignedJob) {
    let file = dir.join(format!("job-{}.json", Uuid::new_v4().simple()));
    let file_text = file.display().to_string();
    let mut new = vec!["job", "new", "-o", &file_text];
    new.extend_from_slice(args);
    ctl(hub, &new).await;
    let key_text = key.key.display().to_string();
    ctl(hub, &["job", "sign", &file_text, "-f", &key_text]).await;
    let sig = format!("{file_text}.sig");
    ctl(hub, &["job", "submit", &file_text, &sig]).await;
    let bytes = std::fs::read(&file).unwrap();
    let doc: Value = serde_json::from_slice(&bytes).unwrap();
    let signed = SignedJob::new(&bytes, &std::fs::read_to_string(&sig).unwrap());
    (doc["job_id"].as_str().unwrap().parse().unwrap(), signed)
}

fn desired_with(sim: &bosun_pvesim::SimHandle, state: &str) -> Value {
    let mut desired = desired(sim, &[], "running");
    desired["storage"] = json!([{
        "type": "local-dir",
        "durable_id": ARCHIVE,
        "class": "slow",
        "role": "vzdump-target",
        "policy": { "schedule": "03:00", "retention": { "keep_daily": 7 } },
        "state": state,
    }]);
    desired
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_signed_job_detaches_a_target_desired_state_let_go_of_and_only_once() {
    let (sim, hub, files) = enrolled_stack().await;
    files.allow_local_dirs(&["/srv"]);
    let operator = files.trusted_operator();
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let storage = storage_id_of(StorageType::LocalDir, ARCHIVE);
    let root = client(&sim, &sim.endpoint().tokens.root);
    hub.put_desired(host, &desired_with(&sim, "attached")).await;
    eventually(Duration::from_secs(30), "the target is registered", || {
        let (root, storage) = (&root, storage.clone());
        async move { root.storage_config(&storage).await.is_ok() }
    })
    .await;
    let host_s = host.to_string();
    let durable = format!("durable_id={ARCHIVE}");
    let detach = [
        "--kind",
        "storage-detach",
        "--host",
        &host_s,
        "--param",
        &durable,
    ];
    let dir = files.dir.path();

    // A hub cannot sign: a job signed by a key the host does not trust is refused.
    let stranger = OperatorKey::new("hub@example");
    let (job, _) = submit_signed(&hub, &stranger, dir, &detach).await;
    let result = job_result(&hub, host, job).await;
    assert_eq!(result["outcome"], "rejected", "{result}");
    assert!(
        result["detail"]
            .as_str()
            .unwrap()
            .contains("unknown_signer"),
        "{result}"
    );

    // Signed, but the target is still attached in desired state: refused, and the job says
    // what to do first.
    let (job, _) = submit_signed(&hub, &operator, dir, &detach).await;
    let result = job_result(&hub, host, job).await;
    assert_eq!(result["outcome"], "rejected", "{result}");
    assert_eq!(result["output"]["code"], "still_attached", "{result}");
    let detail = result["detail"].as_str().unwrap();
    assert!(detail.contains("disconnected"), "{detail}");
    assert!(
        storage_deletes(&sim).is_empty(),
        "{:?}",
        storage_deletes(&sim)
    );
    assert!(root.storage_config(&storage).await.is_ok());

    // The target is marked disconnected; the watcher leaves its storage registered.
    hub.put_desired(host, &desired_with(&sim, "disconnected"))
        .await;
    let desired_rx = agent.handles.desired.clone();
    eventually(
        Duration::from_secs(30),
        "the agent has the new state",
        || {
            let desired_rx = desired_rx.clone();
            async move {
                desired_rx.borrow().as_ref().is_some_and(|d| {
                    d.state
                        .storage
                        .iter()
                        .all(|t| t.state == bosun_proto::desired::TargetState::Disconnected)
                })
            }
        },
    )
    .await;
    assert!(root.storage_config(&storage).await.is_ok());

    // A job naming an operator's own storage is refused whatever else it says.
    let local = [&detach[..], &["--param", "storage=local"]].concat();
    let (job, _) = submit_signed(&hub, &operator, dir, &local).await;
    let result = job_result(&hub, host, job).await;
    assert_eq!(result["outcome"], "rejected", "{result}");
    assert_eq!(result["output"]["code"], "not_ours", "{result}");
    assert!(storage_deletes(&sim).is_empty());

    // Now the signed job removes the storage: one DELETE, the data left on the target.
    let (job, signed) = submit_signed(&hub, &operator, dir, &detach).await;
    let result = job_result(&hub, host, job).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert_eq!(result["output"]["storage"], storage.as_str(), "{result}");
    assert_eq!(result["output"]["removed"], true, "{result}");
    let deletes = storage_deletes(&sim);
    assert_eq!(deletes.len(), 1, "{deletes:?}");
    assert_eq!(deletes[0].path, format!("/storage/{storage}"));
    let gone = root.storage_config(&storage).await.unwrap_err();
    assert!(gone.to_string().contains("does not exist"), "{gone}");
    assert!(
        root.storage_config(&StorageId::new("local").unwrap())
            .await
            .is_ok()
    );

    // The same job replayed at the agent (through its own journal) does not run again.
    let (results_tx, mut results_rx) = tokio::sync::mpsc::unbounded_channel();
    let (_tiers_tx, tiers_rx) = tokio::sync::watch::channel(TierPlan::default());
    let replayer = JobRunner::new(
        Arc::new(client(&sim, &sim.endpoint().tokens.agent)),
        agent.handles.journal.clone(),
        GuestQueue::new(1),
        SystemClock::shared(),
        files.signers_path.clone(),
        host,
        StorageId::new("local").unwrap(),
        StorageId::new("local").unwrap(),
        results_tx,
    )
    .with_storage_detach(DetachContext::new(
        agent.handles.desired.clone(),
        tiers_rx,
        None,
    ));
    replayer.handle(&signed, None).await;
    assert!(
        results_rx.try_recv().is_err(),
        "a replay must not overwrite the job's result"
    );
    let audit = agent.handles.journal.audit_since(0, 10_000).await.unwrap();
    assert!(
        audit.iter().any(|e| e.event.event == "job.refused"
            && e.event.job_id.as_deref() == Some(job.to_string().as_str())
            && e.event.detail["code"] == "already_run"),
        "the replay is refused as already run"
    );
    assert!(audit.iter().any(|e| e.event.event == "storage.detached"));
    assert_eq!(storage_deletes(&sim).len(), 1, "the replay sent a DELETE");
    let result = job_result(&hub, host, job).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");

    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
