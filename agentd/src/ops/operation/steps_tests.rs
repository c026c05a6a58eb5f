use std::time::Duration;

use super::*;
use crate::clock::ManualClock;
use crate::ops::journal::StepState;

/// Past its deadline an operation starts no step that begins new work (and journals no
/// intent for it), while the steps that finish or undo what it began still run.
#[tokio::test]
async fn past_the_deadline_no_new_work_begins_but_undoing_runs() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new("2026-11-20T00:00:00Z".parse().unwrap());
    let journal = JournalHandle::open(&dir.path().join("j.sqlite"), clock.shared())
        .await
        .unwrap();
    let new = NewOperation {
        kind: OpKind::DecommissionJob,
        guest_id: Some("g".into()),
        vmid: Some(101),
        job_id: Some("job".into()),
        request_id: None,
    };
    let op = OpJournal::begin(&journal, new)
        .await
        .unwrap()
        .with_deadline(Deadline::after(clock.shared().now(), 10, clock.shared()));
    let ok = StepOutcome::Ok { warnings: 0 };
    let seq = op
        .intent(StepName::Stop, serde_json::json!({}))
        .await
        .unwrap();
    op.finished(StepName::Stop, seq, ok.clone()).await.unwrap();
    assert_eq!(op.timed_out(), None);
    assert_eq!(op.time_left(), Some(Duration::from_secs(10)));

    clock.advance(Duration::from_secs(11));
    let refused = op.intent(StepName::Destroy, serde_json::json!({})).await;
    assert!(
        matches!(&refused, Err(StepError::TimedOut { step, timeout_s: 10, .. }) if step == "destroy"),
        "{refused:?}"
    );
    assert_eq!(op.timed_out(), Some(10));
    assert_eq!(op.time_left(), Some(Duration::ZERO));
    // Undoing what the job began still runs: the guest it stopped is started again.
    let seq = op
        .intent(StepName::Start, serde_json::json!({}))
        .await
        .unwrap();
    op.finished(StepName::Start, seq, ok).await.unwrap();
    let steps = journal.steps(op.op_id()).await.unwrap();
    let names: Vec<(&str, StepState)> = steps.iter().map(|s| (s.name.as_str(), s.state)).collect();
    assert_eq!(
        names,
        [("stop", StepState::Ok), ("start", StepState::Ok)],
        "no intent journaled for the refused destroy"
    );
    // An operation without a deadline is never held back.
    let free = OpJournal::resume(&journal, op.op_id(), OpKind::DecommissionJob);
    assert_eq!(free.time_left(), None);
    free.intent(StepName::Destroy, serde_json::json!({}))
        .await
        .unwrap();
}
