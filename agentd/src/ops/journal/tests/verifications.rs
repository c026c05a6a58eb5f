use std::time::Duration;

use bosun_proto::verify::VerifyOutcome;

use super::{open, start};
use crate::ops::journal::Verification;

fn verification(outcome: VerifyOutcome) -> Verification {
    Verification {
        guest_id: "g-1".into(),
        tier: "pbs1".into(),
        outcome,
        duration_ms: 420,
        detail: "OK".into(),
    }
}

#[test]
fn the_newest_verification_per_tier_keeps_the_first_the_last_ok_and_the_last_failure() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, clock) = open(&dir);
    assert!(store.last_verifications().unwrap().is_empty());
    store
        .record_verification(&verification(VerifyOutcome::Ok))
        .unwrap();
    let ok_at = start();
    clock.advance(Duration::from_secs(60));
    store
        .record_verification(&verification(VerifyOutcome::Failed))
        .unwrap();
    let failed_at = clock.shared().now();
    clock.advance(Duration::from_secs(60));
    store
        .record_verification(&verification(VerifyOutcome::Error))
        .unwrap();
    let rows = store.last_verifications().unwrap();
    assert_eq!(rows.len(), 1, "one row per (guest, tier): {rows:?}");
    let row = &rows[0];
    assert_eq!(row.verification.outcome, VerifyOutcome::Error);
    assert_eq!(row.first_at, ok_at);
    assert_eq!(row.last_ok_at, Some(ok_at));
    assert_eq!(row.last_failed_at, Some(failed_at));
    assert_eq!(row.finished_at, clock.shared().now());
    // Another tier is its own row.
    let mut other = verification(VerifyOutcome::Ok);
    other.tier = "pbs2".into();
    store.record_verification(&other).unwrap();
    assert_eq!(store.last_verifications().unwrap().len(), 2);
}

#[test]
fn rows_of_departed_guests_and_tiers_are_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _clock) = open(&dir);
    for (guest, tier) in [("g-1", "pbs1"), ("g-1", "pbs2"), ("g-2", "pbs1")] {
        let mut v = verification(VerifyOutcome::Ok);
        v.guest_id = guest.into();
        v.tier = tier.into();
        store.record_verification(&v).unwrap();
    }
    let set = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect();
    // g-2 left desired state and pbs2 left the policy: one row stays.
    let gone = store
        .prune_verifications(&set(&["g-1", "g-3"]), &set(&["pbs1"]))
        .unwrap();
    assert_eq!(gone, 2);
    let rows = store.last_verifications().unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| (
                r.verification.guest_id.as_str(),
                r.verification.tier.as_str()
            ))
            .collect::<Vec<_>>(),
        [("g-1", "pbs1")]
    );
    // Nothing left to prune: nothing goes.
    assert_eq!(
        store
            .prune_verifications(&set(&["g-1"]), &set(&["pbs1"]))
            .unwrap(),
        0
    );
}
