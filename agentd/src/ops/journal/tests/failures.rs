//! Failure counts per guest and a job's timeout survive the journal being reopened.

use super::*;

#[test]
fn failure_counts_survive_a_restart_and_start_again_under_a_new_spec() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, clock) = open(&dir);
    assert_eq!(
        store
            .count_failure("g-1", FailureKind::Start, "spec-a")
            .unwrap(),
        1
    );
    assert_eq!(
        store
            .count_failure("g-1", FailureKind::Start, "spec-a")
            .unwrap(),
        2
    );
    assert_eq!(
        store
            .count_failure("g-1", FailureKind::Recover, "spec-a")
            .unwrap(),
        1
    );
    drop(store);

    let mut store = Store::open(&dir.path().join("journal.db"), clock.shared()).unwrap();
    let counts = store.failure_counts().unwrap();
    let start = &counts[&("g-1".to_owned(), FailureKind::Start)];
    assert_eq!((start.spec.as_str(), start.count), ("spec-a", 2));
    assert_eq!(
        store
            .count_failure("g-1", FailureKind::Start, "spec-a")
            .unwrap(),
        3
    );
    // A changed spec starts the count again; a success clears it.
    assert_eq!(
        store
            .count_failure("g-1", FailureKind::Start, "spec-b")
            .unwrap(),
        1
    );
    assert!(store.clear_failures("g-1", FailureKind::Start).unwrap());
    assert!(!store.clear_failures("g-1", FailureKind::Start).unwrap());
    let counts = store.failure_counts().unwrap();
    assert_eq!(counts.len(), 1, "{counts:?}");
    assert!(counts.contains_key(&("g-1".to_owned(), FailureKind::Recover)));
}

#[test]
fn a_claimed_jobs_timeout_is_read_back_with_its_run() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = open(&dir);
    let mut timed = claim("job-timed", "nonce-timed-0000001");
    timed.timeout_s = Some(90);
    store.claim_job(&timed).unwrap();
    store
        .claim_job(&claim("job-plain", "nonce-plain-000001"))
        .unwrap();
    let run = store.job_run("job-timed").unwrap().unwrap();
    assert_eq!((run.timeout_s, run.started_at), (Some(90), start()));
    assert_eq!(store.job_run("job-plain").unwrap().unwrap().timeout_s, None);
}
