use std::sync::Arc;

use bosun_proto::job::{JobOutcome as WireOutcome, JobResult};
use bosun_pve::{NodeName, PveClient, PveConfig, RetryPolicy, StorageId, TlsTrust};
use serde_json::json;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::*;
use crate::clock::SystemClock;
use crate::guests::queue::GuestQueue;
use crate::ops::jobs::runner::JobRunner;
use crate::ops::journal::{JobClaim, JobOutcome, JournalHandle, NewOperation, StepState};
use crate::ops::operation::StepName;

const HOST: Uuid = Uuid::from_u128(0x1111);
const GUEST: Uuid = Uuid::from_u128(0x2222);
const VMID: u32 = 101;

/// A runner with no optional context, on a real journal, against a Proxmox that never
/// answers (nothing here may reach it).
struct Fixture {
    runner: JobRunner<PveClient>,
    journal: JournalHandle,
    results: mpsc::UnboundedReceiver<JobResult>,
    _dir: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = JournalHandle::open(&dir.path().join("journal.sqlite"), SystemClock::shared())
        .await
        .expect("journal");
    let pve = PveClient::new(PveConfig {
        base_url: "https://127.0.0.1:9/api2/json".parse().expect("url"),
        node: NodeName::new("pve").expect("node"),
        token_id: "bosun@pve!agent".into(),
        token_secret: secrecy::SecretString::from("secret"),
        trust: TlsTrust::PinnedSha256("AB:".repeat(31) + "CD"),
        policy: RetryPolicy::fast(),
    })
    .expect("client");
    let storage = StorageId::new("local").expect("storage");
    let (tx, results) = mpsc::unbounded_channel();
    let runner = JobRunner::new(
        Arc::new(pve),
        journal.clone(),
        GuestQueue::new(2),
        SystemClock::shared(),
        dir.path().join("allowed_signers"),
        HOST,
        storage.clone(),
        storage,
        tx,
    );
    Fixture {
        runner,
        journal,
        results,
        _dir: dir,
    }
}

/// Claims job `job_id` of `row`'s kind and opens its operation, as the runner does before
/// it journals the `accepted` step.
async fn claimed(journal: &JournalHandle, row: KindRow, job_id: Uuid) -> OpJournal {
    let on_guest = row.kind.needs_guest();
    journal
        .claim_job(JobClaim {
            job_id: job_id.to_string(),
            kind: row.name().to_owned(),
            nonce: format!("nonce-{job_id}"),
            expires_at: jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1),
            signer_fingerprint: "SHA256:operator".into(),
            principals: "op@example".into(),
            timeout_s: None,
        })
        .await
        .expect("claim");
    let operation = NewOperation {
        kind: row.op,
        guest_id: on_guest.then(|| GUEST.to_string()),
        vmid: on_guest.then_some(VMID),
        job_id: Some(job_id.to_string()),
        request_id: None,
    };
    OpJournal::begin(journal, operation).await.expect("begin")
}

async fn resume_all(f: &Fixture) -> usize {
    let unfinished = f.journal.unfinished_operations().await.expect("unfinished");
    f.runner.resume(unfinished).await.expect("resume")
}

fn results(f: &mut Fixture) -> Vec<JobResult> {
    std::iter::from_fn(|| f.results.try_recv().ok()).collect()
}

#[tokio::test]
async fn every_kind_interrupted_before_acceptance_is_closed_failed_and_reported() {
    let mut f = fixture().await;
    let mut jobs = Vec::new();
    for (n, row) in KindRow::ALL.iter().enumerate() {
        let job_id = Uuid::from_u128(0x5000 + n as u128);
        let op = claimed(&f.journal, *row, job_id).await;
        jobs.push((*row, job_id, op.op_id()));
    }
    assert_eq!(
        resume_all(&f).await,
        0,
        "no job had anything to run on from"
    );
    let results = results(&mut f);
    assert_eq!(results.len(), KindRow::ALL.len());
    for (row, job_id, op_id) in jobs {
        let result = results
            .iter()
            .find(|r| r.job_id == job_id)
            .unwrap_or_else(|| panic!("{}: no result", row.name()));
        assert_eq!(result.outcome, WireOutcome::Failed, "{}", row.name());
        assert_eq!(
            result.detail,
            "interrupted before acceptance",
            "{}",
            row.name()
        );
        let run = f
            .journal
            .job_run(job_id.to_string())
            .await
            .expect("job run")
            .expect("claimed");
        assert_eq!(run.outcome, Some(JobOutcome::Failed), "{}", row.name());
        assert_eq!(run.op_id, Some(op_id), "{}", row.name());
        assert_eq!(
            run.detail.as_deref(),
            Some("interrupted before acceptance"),
            "{}",
            row.name()
        );
    }
    assert!(
        f.journal
            .unfinished_operations()
            .await
            .expect("unfinished")
            .is_empty(),
        "every interrupted job is closed"
    );
}

/// An `accepted` step that names another kind, or one no row has, is never carried out as
/// some kind: the job fails saying why, and no step follows its acceptance.
#[tokio::test]
async fn an_accepted_step_naming_another_or_an_unknown_kind_never_runs() {
    let mut f = fixture().await;
    let restore = KindRow::of(bosun_proto::job::JobKind::RestoreNow);
    let cases = [
        (
            Uuid::from_u128(0x6001),
            "force-backup",
            "the accepted step names a force-backup job, which does not run as a restore_job operation",
        ),
        (
            Uuid::from_u128(0x6002),
            "frobnicate",
            "the accepted step of this restore_job operation does not read as its job's parameters: unknown variant `frobnicate`",
        ),
    ];
    let mut ops = Vec::new();
    for (job_id, kind, _) in &cases {
        let op = claimed(&f.journal, restore, *job_id).await;
        let accepted = json!({
            "job_id": job_id.to_string(),
            "kind": kind,
            "guest_id": GUEST,
            "vmid": VMID,
            "backup": null,
            "storage": null,
            "signer": "SHA256:operator",
            "principals": "op@example",
            "expires_at": jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1),
        });
        op.local(StepName::Accepted, accepted, async { Ok::<(), String>(()) })
            .await
            .expect("accepted");
        ops.push(op.op_id());
    }
    resume_all(&f).await;
    let results = results(&mut f);
    assert_eq!(results.len(), cases.len());
    for ((job_id, kind, why), op_id) in cases.iter().zip(ops) {
        let result = results
            .iter()
            .find(|r| r.job_id == *job_id)
            .expect("a result");
        assert_eq!(result.outcome, WireOutcome::Failed, "{kind}");
        assert!(result.detail.starts_with(why), "{kind}: {}", result.detail);
        let steps = f.journal.steps(op_id).await.expect("steps");
        let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["accepted"], "{kind}: nothing ran");
        assert!(steps.iter().all(|s| s.state == StepState::Ok));
    }
}

/// A family the agent was not set up for (no detach context, no rollout context, no helper
/// for the door, no update context) never carries out a resumed job: it fails naming the
/// kind the `accepted` step names and what the agent lacks, and no step follows.
#[tokio::test]
async fn a_resumed_job_of_a_family_not_set_up_fails_naming_what_is_missing() {
    use bosun_proto::job::JobKind;
    let mut f = fixture().await;
    let signer = json!({ "signer": "SHA256:operator", "principals": "op@example" });
    let with_signer = |mut accepted: serde_json::Value| {
        let fields = accepted.as_object_mut().expect("an object");
        fields.extend(signer.as_object().expect("an object").clone());
        accepted
    };
    let cases = [
        (
            JobKind::StorageDetach,
            Uuid::from_u128(0x7001),
            with_signer(json!({
                "job_id": Uuid::from_u128(0x7001).to_string(),
                "durable_id": "/mnt/usb1",
                "kind": "usb",
                "storage": "bosun-usb-1",
                "params": {},
            })),
            "storage-detach cannot run on this agent: it has no storage-detach context",
        ),
        (
            JobKind::ControllerUpdate,
            Uuid::from_u128(0x7002),
            with_signer(json!({
                "job_id": Uuid::from_u128(0x7002).to_string(),
                "guest_id": GUEST,
                "vmid": VMID,
                "digest": "sha256:00",
            })),
            "controller-update cannot run on this agent: it has no controller rollout context",
        ),
        (
            // Resumed through the first row of its operation kind (enable): the step's
            // kind is the one named.
            JobKind::BreakGlassDisable,
            Uuid::from_u128(0x7003),
            with_signer(json!({
                "job_id": Uuid::from_u128(0x7003),
                "kind": "break-glass-disable",
            })),
            "break-glass-disable cannot run on this agent: it has no helper",
        ),
        (
            JobKind::AgentUpdate,
            Uuid::from_u128(0x7004),
            with_signer(json!({
                "job_id": Uuid::from_u128(0x7004),
                "version": "1.2.3",
                "sha256": "00".repeat(32),
                "override_window": true,
            })),
            "agent-update cannot run on this agent: it has no update context",
        ),
    ];
    let mut ops = Vec::new();
    for (kind, job_id, accepted, _) in &cases {
        let op = claimed(&f.journal, KindRow::of(*kind), *job_id).await;
        op.local(StepName::Accepted, accepted.clone(), async {
            Ok::<(), String>(())
        })
        .await
        .expect("accepted");
        ops.push(op.op_id());
    }
    assert_eq!(resume_all(&f).await, cases.len(), "each read its step");
    let results = results(&mut f);
    assert_eq!(results.len(), cases.len());
    for ((kind, job_id, _, why), op_id) in cases.iter().zip(ops) {
        let result = results
            .iter()
            .find(|r| r.job_id == *job_id)
            .expect("a result");
        assert_eq!(result.outcome, WireOutcome::Failed, "{kind:?}");
        assert_eq!(result.detail, *why, "{kind:?}");
        let steps = f.journal.steps(op_id).await.expect("steps");
        let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["accepted"], "{kind:?}: nothing ran");
    }
}

/// A claimed job of a family the agent was not set up for is refused (`unsupported_kind`,
/// reported `rejected`) before anything is journaled for it: no operation is opened.
#[tokio::test]
async fn a_claimed_job_of_a_family_not_set_up_is_refused_before_its_operation() {
    use bosun_proto::job::{JobDocument, JobKind, JobTarget};
    let mut f = fixture().await;
    for (n, kind) in [
        JobKind::StorageDetach,
        JobKind::BreakGlassDisable,
        JobKind::AgentUpdate,
    ]
    .into_iter()
    .enumerate()
    {
        let job_id = Uuid::from_u128(0x8000 + n as u128);
        let now = jiff::Timestamp::now();
        let document = JobDocument {
            schema: bosun_proto::job::DOCUMENT_SCHEMA.to_owned(),
            job_id,
            kind,
            target: JobTarget {
                host_id: HOST,
                guest_id: None,
                vmid: None,
            },
            params: serde_json::Map::new(),
            nonce: format!("nonce-{job_id}"),
            not_before: now,
            expires_at: now + jiff::SignedDuration::from_hours(1),
            timeout_s: None,
            priority: 0,
        };
        let job = Claimed {
            row: KindRow::of(kind),
            document,
            signer: crate::trust::signing::VerifiedSigner::resumed("SHA256:operator", "op@example"),
            request_id: None,
        };
        run_claimed(&f.runner.context, &f.runner.setups, job).await;
        let results = results(&mut f);
        assert_eq!(results.len(), 1, "{kind:?}");
        assert_eq!(results[0].outcome, WireOutcome::Rejected, "{kind:?}");
        assert_eq!(
            results[0].detail,
            format!(
                "unsupported_kind: job kind {} is not run by this agent",
                kind.as_str()
            ),
            "{kind:?}"
        );
    }
    assert!(
        f.journal
            .unfinished_operations()
            .await
            .expect("unfinished")
            .is_empty(),
        "no operation was opened"
    );
}
