//! Agent self-update timings, end to end with real processes (the stage of `agent_update`):
//! from the signed job's submission to the gate's commit, and to its rollback for each failure
//! kind, with the gate's windows as the tests set them (window 4 s, ready within 2 s, a poll
//! within 3 s, at most 2 restarts; `RestartSec` 200 ms). Production defaults are 120 s, 60 s,
//! 90 s and 5 s: a commit takes the window, a rollback its bound, plus the same overheads.
//!
//! `cargo nextest run -p bosun-tests --test integration agent_update_bench:: --run-ignored only --no-capture`
//! (build `bosun-agentd` and `bosun-update-gate` first). Figures go to `docs/benchmarks.md`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::update_stack;
use crate::update_support;

use std::time::Duration;

use bosun_proto::update::{UpdatePhase, UpdateRecord};
use update_stack::UpdateStack;
use update_support::{GateTimings, binary, fixtures};

/// Milliseconds from staging to the gate's decision, from the record.
fn staged_to_decided(record: &UpdateRecord) -> i64 {
    record.decided_at_ms.unwrap() - record.staged_at_ms
}

fn row(what: &str, record: &UpdateRecord, total: Duration) {
    println!(
        "agent-update-bench: {what:<22} {:<11} failure={:<10} submit->verdict {:>6} ms  staged->decided {:>6} ms",
        record.phase.as_str(),
        record.failure.map_or("-", |f| f.as_str()),
        total.as_millis(),
        staged_to_decided(record),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with --run-ignored only --no-capture"]
async fn update_commit_and_rollback_times() {
    let timings = GateTimings::default();
    println!(
        "agent-update-bench: window {} ms, ready within {} ms, poll within {} ms, at most {} restarts",
        timings.window, timings.ready, timings.poll, timings.max_restarts
    );
    let cases: [(&str, Option<&str>); 4] = [
        ("good (the agent itself)", None),
        ("exits at start", Some(fixtures::EXITS_AT_START)),
        ("never ready", Some(fixtures::NEVER_READY)),
        ("never polls", Some(fixtures::NEVER_POLLS)),
    ];
    for (what, fixture) in cases {
        let stack = UpdateStack::start(timings).await;
        let bytes = match fixture {
            None => std::fs::read(binary("bosun-agentd")).unwrap(),
            Some(body) => stack.fixture(body),
        };
        let sha256 = stack.upload(bytes).await;
        let (record, total) = stack.update(&sha256).await;
        let want = if fixture.is_none() {
            UpdatePhase::Committed
        } else {
            UpdatePhase::RolledBack
        };
        assert_eq!(record.phase, want, "{what}: {}", stack.prefix.gate_log());
        row(what, &record, total);
    }
}
