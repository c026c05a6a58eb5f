//! Agent self-update end to end, with real processes and real slot directories: the real
//! `bosun-agentd` runs from `<slots>/current/` under a stand-in for systemd
//! ([`update_support::FakeSystemd`]), polls a real hub and drives the simulator; the operator
//! uploads the new binary to the hub (`PUT /v1/admin/artifacts/{sha256}`) and signs an
//! `agent-update` job naming its digest; the agent downloads it, checks it, and the helper's
//! own `stage_agent_update` code stages it into slot b and flips `current`; then the real
//! `bosun-update-gate` restarts the agent and decides.
//!
//! - a good binary (the agent itself) is committed, and the hub hears `agent_update_committed`;
//! - a binary that exits at start, one that never sends `READY=1` and one that never polls
//!   are each rolled back: the old agent runs again and the hub raises `agent_update_failed`;
//! - a compromised hub cannot start an update (a job without an operator's signature is
//!   refused) nor swap the artifact (bytes that do not hash to the signed digest are never
//!   staged, and the hub raises `agent_update_failed`); a signed job outside the update
//!   window and without `override_window` is refused.
//!
//! Runs as root (the gate refuses a config root does not control).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;
use crate::update_stack;
use crate::update_support;

use std::time::{Duration, Instant};

use agent_support::signing::OperatorKey;
use bosun_proto::update::{UpdateFailure, UpdatePhase, UpdateRecord};
use serde_json::Value;
use update_stack::UpdateStack;
use update_support::{GateTimings, binary, fixtures};

async fn assert_rolled_back(stack: &UpdateStack, record: &UpdateRecord, failure: UpdateFailure) {
    assert_eq!(
        record.phase,
        UpdatePhase::RolledBack,
        "{}",
        stack.prefix.gate_log()
    );
    assert_eq!(record.failure, Some(failure), "{record:?}");
    assert_eq!(stack.prefix.current(), "a");
    let message = stack.alert("agent_update_failed").await;
    assert!(message.contains(failure.as_str()), "{message}");
    // The old agent is back: it polls again after the rollback.
    let mark = stack.prefix.poll_mark.clone();
    let decided = record.decided_at_ms.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read(&mark).unwrap_or_default();
        let at = serde_json::from_slice::<Value>(&text)
            .ok()
            .and_then(|v| v["at_ms"].as_i64())
            .unwrap_or(0);
        if at > decided {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the old agent does not poll again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_update_commits_and_the_hub_hears_it() {
    // Room for the new (debug, ~75 MB) agent to start and poll on a loaded two-core CI
    // machine; the rollback tests keep the short bounds, since they wait for them to pass.
    let stack = UpdateStack::start(GateTimings {
        window: 10_000,
        poll: 8_000,
        ..GateTimings::default()
    })
    .await;
    let sha256 = stack
        .upload(std::fs::read(binary("bosun-agentd")).unwrap())
        .await;
    let (record, took) = stack.update(&sha256).await;
    assert_eq!(
        record.phase,
        UpdatePhase::Committed,
        "{}",
        stack.prefix.gate_log()
    );
    assert_eq!(stack.prefix.current(), "b");
    assert_eq!(
        std::fs::read(stack.prefix.slot_binary("b")).unwrap(),
        std::fs::read(binary("bosun-agentd")).unwrap()
    );
    let event = stack.event("agent_update_committed").await;
    assert_eq!(event["detail"]["version"], "0.2.0-test");
    println!("agent-update: update -> committed in {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binary_that_exits_at_start_is_rolled_back() {
    let stack = UpdateStack::start(GateTimings::default()).await;
    let sha256 = stack.upload(stack.fixture(fixtures::EXITS_AT_START)).await;
    let (record, took) = stack.update(&sha256).await;
    assert_rolled_back(&stack, &record, UpdateFailure::CrashLoop).await;
    println!("agent-update: exits at start rolled back in {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binary_that_never_becomes_ready_is_rolled_back() {
    let stack = UpdateStack::start(GateTimings::default()).await;
    let sha256 = stack.upload(stack.fixture(fixtures::NEVER_READY)).await;
    let (record, took) = stack.update(&sha256).await;
    assert_rolled_back(&stack, &record, UpdateFailure::NotReady).await;
    println!("agent-update: never ready rolled back in {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binary_that_never_polls_is_rolled_back() {
    let stack = UpdateStack::start(GateTimings::default()).await;
    let sha256 = stack.upload(stack.fixture(fixtures::NEVER_POLLS)).await;
    let (record, took) = stack.update(&sha256).await;
    assert_rolled_back(&stack, &record, UpdateFailure::NoPoll).await;
    println!("agent-update: never polls rolled back in {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compromised_hub_can_neither_start_an_update_nor_swap_the_artifact_and_the_window_holds()
{
    let stack = UpdateStack::start_behind_proxy(GateTimings::default()).await;
    let signed = stack.fixture(fixtures::EXITS_AT_START);
    let sha256 = stack.upload(signed).await;

    // No operator signature: the hub's own key (or any key the host does not trust).
    let (unsigned_id, bytes) = stack.job(&sha256);
    let stranger = OperatorKey::new("hub@compromised");
    stack.submit(&bytes, &stranger).await;
    let result = stack.job_result(unsigned_id).await;
    assert_eq!(result["outcome"], "rejected", "{result}");
    assert!(
        result["detail"]
            .as_str()
            .unwrap()
            .contains("unknown_signer"),
        "{result}"
    );

    // Signed, but outside the update window (this hub gives none) and without the override.
    let (windowless_id, bytes) = stack.job_with(&sha256, false);
    stack.submit(&bytes, &stack.operator).await;
    let result = stack.job_result(windowless_id).await;
    assert_eq!(result["outcome"], "rejected", "{result}");
    assert!(
        result["detail"]
            .as_str()
            .unwrap()
            .contains("outside_update_window"),
        "{result}"
    );

    // The artifact swapped behind the signed digest: the hub serves other bytes. (An honest
    // hub checks what it serves against the digest, so the swap is a compromised hub's front
    // that holds the hub's own certificate.)
    let swapped = stack.fixture(fixtures::NEVER_READY);
    stack.proxy.as_ref().unwrap().swap(&sha256, swapped);
    let (swapped_id, bytes) = stack.job(&sha256);
    stack.submit(&bytes, &stack.operator).await;
    let result = stack.job_result(swapped_id).await;
    assert_eq!(result["outcome"], "failed", "{result}");
    assert!(
        result["detail"]
            .as_str()
            .unwrap()
            .contains("digest_mismatch"),
        "{result}"
    );
    let message = stack.alert("agent_update_failed").await;
    assert!(message.contains("digest_mismatch"), "{message}");

    // Nothing was kept (the bytes were written as they came and removed when their digest
    // was not the signed one), staged, recorded or flipped, and the agent was never restarted.
    let incoming = stack.files.state_dir.join("update/incoming");
    let kept: Vec<_> = std::fs::read_dir(&incoming)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(kept.is_empty(), "{kept:?} left in {}", incoming.display());
    assert!(stack.prefix.record().is_none());
    assert_eq!(stack.prefix.current(), "a");
    assert!(!stack.prefix.slot_binary("b").exists());
    assert_eq!(stack.systemd.starts(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_rollout_reads_the_health_gates_verdict_and_stops_on_a_rollback() {
    // `bosunctl fleet rollout --kind agent-update` (decision 0086): the job succeeds once the
    // binary is staged; the host is done or failed only when its health gate decided, which
    // the rollout reads from the host's audit trail (`agent_update.failed` with the job id).
    let stack = UpdateStack::start(GateTimings::default()).await;
    let sha256 = stack.upload(stack.fixture(fixtures::EXITS_AT_START)).await;
    let host = stack.host_id.to_string();
    agent_support::jobs::ctl(&stack.hub, &["hosts", "label", &host, "ring=canary"]).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !stack.hub.host(stack.host_id).await["capabilities"]["helper"]
        .as_bool()
        .unwrap_or(false)
    {
        assert!(
            Instant::now() < deadline,
            "the host's capabilities at the hub"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let key = stack.operator.key.display().to_string();
    let rollout = tokio::process::Command::new(binary("bosunctl"))
        .args([
            "--hub-url",
            &stack.hub.url,
            "--fingerprint",
            &stack.hub.fingerprint,
        ])
        .args(["--admin-token", &stack.hub.admin, "--output", "json"])
        .args([
            "fleet",
            "rollout",
            "--kind",
            "agent-update",
            "--label",
            "ring=canary",
            // The operator names its canary (decision 0093): no terminal here to confirm on.
            "--hosts",
            &host,
        ])
        .args([
            "--param",
            "version=0.2.0-test",
            "--param",
            &format!("sha256={sha256}"),
        ])
        .args([
            "--param",
            "override_window=true",
            "-f",
            &key,
            "--wait",
            "2m",
        ])
        .env_remove("BOSUN_CTL_CONFIG")
        .kill_on_drop(true)
        .output();
    let rollout = tokio::spawn(rollout);
    // What bosun-update-gate.path does when the record appears.
    let deadline = Instant::now() + Duration::from_secs(120);
    while stack.prefix.record().is_none() {
        assert!(Instant::now() < deadline, "never staged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut gate = stack.prefix.start_gate();
    tokio::task::spawn_blocking(move || gate.wait().unwrap())
        .await
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(120), rollout)
        .await
        .expect("the rollout ends once the gate decided")
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(14), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let line = &report["hosts"][0];
    assert_eq!(line["outcome"], "failed", "{report}");
    let why = line["reason"].as_str().unwrap();
    assert!(
        why.contains("health gate rolled it back") && why.contains("crash_loop"),
        "{why}"
    );
    assert_eq!(stack.prefix.current(), "a");
}
