//! Figures for `docs/benchmarks.md` (ignored by default; run with
//! `cargo test -p bosun-agentctl --release --test escrow_bench -- --ignored --nocapture`).
//!
//! `unwrap_time_by_work_factor`: the time to unwrap an escrow (scrypt at log2 N, then the
//! age payload, then K's fingerprint) for the work factors around the one Bosun uses,
//! median of 3 each. The chosen factor is the largest that stays near one second here.

#![allow(
    clippy::unwrap_used,
    reason = "benchmark code: a panic is a failed run with its location"
)]

use std::time::{Duration, Instant};

use bosun_agentctl::escrow::code::RecoveryCode;
use bosun_agentctl::escrow::wrap;
use bosun_agentctl::escrow::wrap::{MAX_WORK_FACTOR, WORK_FACTOR};
use bosun_agentd::trust::keys::pbs_key::PbsKeyring;
use uuid::Uuid;

#[test]
#[ignore = "benchmark; run explicitly"]
fn unwrap_time_by_work_factor() {
    let dir = tempfile::tempdir().unwrap();
    bosun_agentd::trust::keys::pbs_key::PbsKey::load_or_create(dir.path()).unwrap();
    let ring = PbsKeyring::load(dir.path()).unwrap().unwrap();
    let host = Uuid::new_v4();
    let code = RecoveryCode::generate().unwrap();
    for factor in (WORK_FACTOR - 2)..=MAX_WORK_FACTOR {
        let wrapped_at = Instant::now();
        let blob = wrap::wrap(&ring, host, &code, factor, jiff::Timestamp::now()).unwrap();
        let wrap_time = wrapped_at.elapsed();
        let mut times: Vec<Duration> = (0..3)
            .map(|_| {
                let started = Instant::now();
                let back = wrap::unwrap(&blob, &code, host).unwrap();
                let took = started.elapsed();
                assert_eq!(back.fingerprints(), ring.fingerprints());
                took
            })
            .collect();
        times.sort();
        let chosen = if factor == WORK_FACTOR {
            "  <- chosen"
        } else {
            ""
        };
        println!(
            "escrow work factor {factor}: unwrap {:.2} s (median of 3), wrap {:.2} s{chosen}",
            times[1].as_secs_f64(),
            wrap_time.as_secs_f64()
        );
    }
}
