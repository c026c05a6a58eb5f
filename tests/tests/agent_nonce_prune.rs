//! The journal's nonce table is pruned by the running agent: the nonces of signed jobs long
//! expired are forgotten at start (and hourly), the others kept; and a replay of a job whose
//! nonce was forgotten is still refused, as expired, before anything is claimed again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::sync::Arc;
use std::time::Duration;

use agent_support::signing::OperatorKey;
use agent_support::*;
use bosun_agentd::clock::{ManualClock, SystemClock};
use bosun_agentd::guests::queue::GuestQueue;
use bosun_agentd::ops::jobs::check::DEFAULT_SKEW;
use bosun_agentd::ops::jobs::runner::JobRunner;
use bosun_agentd::ops::journal::{JobClaim, JournalHandle, Store};
use bosun_agentd::ops::nonce_prune::{KEEP_AFTER_EXPIRY, NoncePruneTask};
use bosun_proto::job::{SIGNATURE_NAMESPACE, SignedJob};
use bosun_pve::{NodeName, PveClient, PveConfig, RetryPolicy, StorageId, TlsTrust};
use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use uuid::Uuid;

/// The replayed job's nonce (a valid one: at least 16 characters).
const NONCE: &str = "n-replayed-0123456789";

fn claim(job_id: Uuid, nonce: &str, expires_at: Timestamp) -> JobClaim {
    JobClaim {
        job_id: job_id.to_string(),
        kind: "force-backup".into(),
        nonce: nonce.into(),
        expires_at,
        signer_fingerprint: "SHA256:operator".into(),
        principals: "op@example".into(),
        timeout_s: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_running_agent_forgets_the_nonces_of_long_expired_jobs() {
    let (sim, hub, files) = enrolled_stack().await;
    // Two jobs an earlier run of the agent claimed: one expired two days ago, one still valid.
    std::fs::create_dir_all(&files.state_dir).unwrap();
    {
        let mut journal = Store::open(
            &files.state_dir.join("journal.sqlite"),
            SystemClock::shared(),
        )
        .unwrap();
        let now = Timestamp::now();
        journal
            .claim_job(&claim(
                Uuid::new_v4(),
                "n-expired",
                now - SignedDuration::from_hours(48),
            ))
            .unwrap();
        journal
            .claim_job(&claim(
                Uuid::new_v4(),
                "n-valid",
                now + SignedDuration::from_hours(1),
            ))
            .unwrap();
    }
    let agent = InProcessAgent::start(&files.config_path).await;
    let journal = agent.handles.journal.clone();
    eventually(
        Duration::from_secs(20),
        "the expired job's nonce is pruned",
        || {
            let journal = journal.clone();
            async move { !journal.nonce_seen("n-expired".into()).await.unwrap() }
        },
    )
    .await;
    assert!(journal.nonce_seen("n-valid".into()).await.unwrap());
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_of_a_job_whose_nonce_was_pruned_is_refused_as_expired() {
    let dir = tempfile::tempdir().unwrap();
    let start = Timestamp::now();
    let clock = ManualClock::new(start);
    let journal = JournalHandle::open(&dir.path().join("journal.sqlite"), clock.shared())
        .await
        .unwrap();
    let operator = OperatorKey::new("op@example");
    let signers = dir.path().join("allowed_signers");
    std::fs::write(
        &signers,
        format!("{}\n", operator.allowed_line("op@example")),
    )
    .unwrap();
    let (host, guest, job_id) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let expires_at = start + SignedDuration::from_hours(1);
    let document = json!({
        "schema": "bosun.job/v1",
        "job_id": job_id,
        "kind": "force-backup",
        "target": { "host_id": host, "guest_id": guest, "vmid": 101 },
        "params": {},
        "nonce": NONCE,
        "not_before": start - SignedDuration::from_secs(60),
        "expires_at": expires_at,
    });
    let bytes = serde_json::to_vec(&document).unwrap();
    let signed = SignedJob::new(&bytes, &operator.sign(&bytes, SIGNATURE_NAMESPACE));
    // The job ran once: its run and nonce are in the journal.
    journal
        .claim_job(claim(job_id, NONCE, expires_at))
        .await
        .unwrap();

    // Past its expiry, the check's skew and the margin, a pass forgets the nonce.
    let pruner = NoncePruneTask::new(journal.clone(), clock.shared());
    clock.set(expires_at + DEFAULT_SKEW + KEEP_AFTER_EXPIRY);
    assert_eq!(pruner.prune_once().await.unwrap(), 0);
    clock.set(expires_at + DEFAULT_SKEW + KEEP_AFTER_EXPIRY + SignedDuration::from_secs(1));
    assert_eq!(pruner.prune_once().await.unwrap(), 1);
    assert!(!journal.nonce_seen(NONCE.into()).await.unwrap());

    // The same bytes again, through the agent's job intake: refused as expired.
    let sim = start_sim(bosun_pvesim::SimConfig::fast()).await;
    let endpoint = sim.endpoint();
    let pve = PveClient::new(PveConfig {
        base_url: endpoint.url.parse().unwrap(),
        node: NodeName::new(endpoint.node.clone()).unwrap(),
        token_id: endpoint.tokens.agent.id.clone(),
        token_secret: endpoint.tokens.agent.secret.clone().into(),
        trust: TlsTrust::PinnedSha256(endpoint.fingerprint.clone()),
        policy: RetryPolicy::fast(),
    })
    .unwrap();
    let (results_tx, mut results_rx) = tokio::sync::mpsc::unbounded_channel();
    let runner = JobRunner::new(
        Arc::new(pve),
        journal.clone(),
        GuestQueue::new(1),
        clock.shared(),
        signers,
        host,
        StorageId::new("local").unwrap(),
        StorageId::new("local").unwrap(),
        results_tx,
    );
    runner.handle(&signed, None).await;
    let audit = journal.audit_since(0, 1_000).await.unwrap();
    let refusals: Vec<_> = audit
        .iter()
        .filter(|e| {
            e.event.event == "job.refused"
                && e.event.job_id.as_deref() == Some(job_id.to_string().as_str())
        })
        .map(|e| e.event.detail["code"].clone())
        .collect();
    assert_eq!(refusals, [json!("expired")], "{audit:?}");
    if let Ok(result) = results_rx.try_recv() {
        assert_eq!(result.output["code"], "expired", "{result:?}");
    }
    // Nothing was claimed again, and no request reached Proxmox.
    assert!(!journal.nonce_seen(NONCE.into()).await.unwrap());
    let run = journal.job_run(job_id.to_string()).await.unwrap().unwrap();
    assert_eq!(run.started_at.as_millisecond(), start.as_millisecond());
    assert!(sim.requests().is_empty(), "{:?}", sim.requests());
    sim.shutdown().await;
}
