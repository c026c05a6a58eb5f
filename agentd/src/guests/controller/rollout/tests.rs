//! The rollout's reading of its journaled steps: which verdict rolls back, what a replay repeats.

use super::*;
use crate::ops::journal::OpId;

const DIGEST: &str = "sha256:0101010101010101010101010101010101010101010101010101010101010101";

fn step(name: &str, state: StepState, error: Option<&str>, detail: Value) -> Step {
    Step {
        op_id: OpId::new(),
        seq: 1,
        name: name.into(),
        detail,
        state,
        upid: None,
        warnings: None,
        error: error.map(str::to_owned),
        intent_at: jiff::Timestamp::now(),
        sent_at: None,
        ended_at: None,
    }
}

#[test]
fn progress_reads_what_the_steps_settled() {
    let snap = step(
        "snapshot",
        StepState::Ok,
        None,
        json!({ "vmid": 101, "snapshot": "bosun-ctl-1" }),
    );
    let announce = step("announce", StepState::Ok, None, Value::Null);
    let of = |steps: &[Step]| Progress::of(steps, DIGEST).unwrap();
    assert_eq!(of(&[]), Progress::default());
    let p = of(&[snap.clone(), announce.clone()]);
    assert_eq!(p.snapshot.as_deref(), Some("bosun-ctl-1"));
    assert!(p.announced && p.health.is_none());
    // A crash during the wait is no verdict: the wait is repeated.
    let interrupted = step(
        "await_health",
        StepState::Failed,
        Some("interrupted; the call may or may not have been sent"),
        Value::Null,
    );
    assert_eq!(
        of(&[snap.clone(), announce.clone(), interrupted]).health,
        None
    );
    let silent = step(
        "await_health",
        StepState::Failed,
        Some("no healthy report"),
        Value::Null,
    );
    assert_eq!(
        of(&[snap.clone(), announce.clone(), silent.clone()]).health,
        Some(Verdict::Silent("no healthy report".into()))
    );
    // A snapshot whose task failed is no snapshot to roll back to.
    let failed_snap = step(
        "snapshot",
        StepState::Failed,
        Some("x"),
        json!({ "snapshot": "s" }),
    );
    assert_eq!(of(&[failed_snap]).snapshot, None);
    let rolled = step("rollback", StepState::Ok, None, Value::Null);
    let revert = step("revert", StepState::Ok, None, Value::Null);
    let p = of(&[
        snap.clone(),
        announce.clone(),
        silent.clone(),
        revert.clone(),
        rolled,
    ]);
    assert!(p.reverted && p.rolled_back && !p.committed);
    // Silence: an interrupted restart is asked again, one that ended is not.
    let heal = |state, error| step("heal", state, error, Value::Null);
    let broken = step("break", StepState::Ok, None, Value::Null);
    let mid = of(&[
        silent.clone(),
        revert.clone(),
        heal(
            StepState::Failed,
            Some("interrupted; the call may or may not have been sent"),
        ),
    ]);
    assert!(mid.reverted && !mid.healed && !mid.broken);
    let failed = of(&[
        silent.clone(),
        revert.clone(),
        heal(StepState::Failed, Some("no [helper] configured")),
    ]);
    assert!(failed.healed && !failed.broken);
    let done = of(&[silent, revert, heal(StepState::Ok, None), broken]);
    assert!(done.healed && done.broken && !done.rolled_back);
}

#[test]
fn only_the_controllers_own_unhealthy_report_is_a_verdict_to_roll_back_on() {
    let unhealthy = HealthWait::Unhealthy {
        digest: DIGEST.into(),
        detail: "image failed its start-up check".into(),
    }
    .to_string();
    assert_eq!(
        Verdict::of_failure(&unhealthy, DIGEST),
        Some(Verdict::Unhealthy(unhealthy.clone()))
    );
    // Silence, whether the wait ended on its own or a replay reads it back.
    let timed_out = HealthWait::TimedOut {
        digest: DIGEST.into(),
        window_ms: 300_000,
    }
    .to_string();
    assert_eq!(
        Verdict::of_failure(&timed_out, DIGEST),
        Some(Verdict::Silent(timed_out.clone()))
    );
    let failed = |error: &str| {
        step(
            "await_health",
            StepState::Failed,
            Some(error),
            json!({ "digest": DIGEST }),
        )
    };
    assert_eq!(
        Progress::of(&[failed(&timed_out)], DIGEST).unwrap().health,
        Some(Verdict::Silent(timed_out.clone()))
    );
    assert_eq!(
        Progress::of(&[failed(&unhealthy)], DIGEST).unwrap().health,
        Some(Verdict::Unhealthy(unhealthy.clone()))
    );
    // Another digest's report, or text that is not a report, is no verdict to roll back on.
    assert!(matches!(
        Verdict::of_failure(&unhealthy, "sha256:other"),
        Some(Verdict::Silent(_))
    ));
    assert!(matches!(
        Verdict::of_failure("journal write failed", DIGEST),
        Some(Verdict::Silent(_))
    ));
    assert_eq!(
        Verdict::of_failure(
            "interrupted; the call may or may not have been sent",
            DIGEST
        ),
        None
    );
}

#[test]
fn snapshot_names_are_valid_and_unique() {
    let now: jiff::Timestamp = "2026-03-14T12:34:56Z".parse().unwrap();
    let first = snapshot_name(now, &[]).unwrap();
    assert_eq!(first.as_str(), "bosun-ctl-20260314-123456");
    let second = snapshot_name(now, &[first.to_string()]).unwrap();
    assert_eq!(second.as_str(), "bosun-ctl-20260314-123456-2");
}

/// A step whose name the step table does not hold (a journal another version wrote) stops the
/// rollout's reading with an error naming it; it is never skipped as if it had not run.
#[test]
fn a_step_of_an_unknown_name_is_an_error_not_a_skip() {
    let snap = step(
        "snapshot",
        StepState::Ok,
        None,
        json!({ "vmid": 101, "snapshot": "bosun-ctl-1" }),
    );
    let stranger = step("announce_v2", StepState::Ok, None, Value::Null);
    let err = Progress::of(&[snap, stranger], DIGEST).unwrap_err();
    assert!(err.contains("\"announce_v2\""), "{err}");
    assert!(err.contains("step table"), "{err}");
}

#[test]
fn a_placement_that_ended_badly_rolls_back_and_an_interrupted_one_is_placed_again() {
    let snap = step(
        "snapshot",
        StepState::Ok,
        None,
        json!({ "vmid": 101, "snapshot": "bosun-ctl-1" }),
    );
    let announce = step("announce", StepState::Ok, None, Value::Null);
    let of = |steps: &[Step]| Progress::of(steps, DIGEST).unwrap();
    let placed = step("place", StepState::Ok, None, Value::Null);
    let p = of(&[snap.clone(), announce.clone(), placed]);
    assert!(p.placed && p.health.is_none(), "{p:?}");
    // A crash inside the placement: placed again, no verdict.
    let interrupted = step(
        "place",
        StepState::Failed,
        Some("interrupted; the call may or may not have been sent"),
        Value::Null,
    );
    let p = of(&[snap.clone(), announce.clone(), interrupted]);
    assert!(!p.placed && p.health.is_none(), "{p:?}");
    // The helper refused the image: the guest goes back to the snapshot.
    let refused = "controller image archive hashes to sha256:ab, not the signed 01";
    let failed = step("place", StepState::Failed, Some(refused), Value::Null);
    assert_eq!(
        of(&[snap, announce, failed]).health,
        Some(Verdict::NotPlaced(refused.into()))
    );
}
