//! The agent update health gate as a real process (`bosun-update-gate`, installed under a
//! private root-owned prefix with its own config) against real slot directories, with
//! [`update_support::FakeSystemd`] standing in for systemd (no PID-1 systemd here) and
//! shell-script agents: a good one commits; one that exits at start, one that never sends
//! `READY=1`, one that never polls and one that crashes after polling are each rolled back
//! and the old slot runs again. A gate killed at any step converges when run again.
//!
//! Runs as root (the gate refuses a config that root does not control).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::update_support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bosun_proto::update::{
    RECORD_SCHEMA, Slot, UpdateFailure, UpdatePhase, UpdateRecord, UpdateWatch,
};
use update_support::{FakeSystemd, GateTimings, Prefix, UnitSpec, fixtures, install_script};

struct Stage {
    prefix: Prefix,
    systemd: FakeSystemd,
    state: tempfile::TempDir,
    mark: PathBuf,
}

impl Stage {
    /// Slot a runs a good agent under the stand-in systemd.
    fn new(timings: GateTimings) -> Self {
        let state = tempfile::tempdir().unwrap();
        let mark = state.path().join("update/poll-ok.json");
        std::fs::create_dir_all(mark.parent().unwrap()).unwrap();
        let prefix = Prefix::new(&mark, timings);
        install_script(
            prefix.dir.path(),
            &prefix.slot_binary("a"),
            &fixtures::good(&mark, "a"),
        );
        let systemd = FakeSystemd::start(
            &prefix.unit_dir,
            UnitSpec {
                exec: prefix.slots.join("current/bosun-agentd"),
                args: Vec::new(),
                env: Vec::new(),
                restart_sec: Duration::from_millis(100),
                log: state.path().join("unit.log"),
                run_as: None,
            },
        )
        .unwrap();
        systemd.wait(
            |s| s.contains("ActiveState=active"),
            Duration::from_secs(10),
        );
        Self {
            prefix,
            systemd,
            state,
            mark,
        }
    }

    /// Does what the helper does: the new binary into slot b, the trial record, the flip.
    fn stage(&self, script: &str) {
        install_script(
            self.prefix.dir.path(),
            &self.prefix.slot_binary("b"),
            script,
        );
        let record = trial();
        self.prefix.set_state(&record, "b");
    }

    fn running(&self) -> String {
        std::fs::read_to_string(self.state.path().join("update/running"))
            .unwrap_or_default()
            .trim()
            .to_owned()
    }
}

fn trial() -> UpdateRecord {
    UpdateRecord {
        schema: RECORD_SCHEMA.into(),
        update_id: uuid::Uuid::new_v4(),
        version: "0.2.0".into(),
        sha256: "ab".repeat(32),
        phase: UpdatePhase::Trial,
        good: Slot::A,
        trial: Slot::B,
        previous_version: None,
        staged_at_ms: jiff::Timestamp::now().as_millisecond(),
        watch: None,
        failure: None,
        detail: None,
        decided_at_ms: None,
    }
}

fn wait_running(stage: &Stage, tag: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while stage.running() != tag {
        assert!(Instant::now() < deadline, "slot {tag} never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stages `script`, runs the gate, and gives the record and how long the gate took.
fn judge(stage: &Stage, script: &str) -> (UpdateRecord, Duration) {
    stage.stage(script);
    let started = Instant::now();
    assert!(
        stage.prefix.run_gate(Duration::from_secs(60)),
        "{}",
        stage.prefix.gate_log()
    );
    (stage.prefix.record().unwrap(), started.elapsed())
}

fn assert_rolled_back(stage: &Stage, record: &UpdateRecord, failure: UpdateFailure) {
    assert_eq!(
        record.phase,
        UpdatePhase::RolledBack,
        "{}",
        stage.prefix.gate_log()
    );
    assert_eq!(record.failure, Some(failure), "{record:?}");
    assert_eq!(stage.prefix.current(), "a");
    // The old agent runs again, restarted by the gate.
    stage.systemd.wait(
        |s| s.contains("ActiveState=active"),
        Duration::from_secs(10),
    );
    wait_running(stage, "a");
    let calls = stage.prefix.systemctl_calls();
    assert!(
        calls.iter().filter(|c| c.starts_with("restart")).count() >= 2,
        "restarted into the trial and back: {calls:?}"
    );
}

#[test]
fn a_good_agent_is_committed_after_a_clean_window() {
    let timings = GateTimings::default();
    let stage = Stage::new(timings);
    let (record, took) = judge(&stage, &fixtures::good(&stage.mark, "b"));
    assert_eq!(
        record.phase,
        UpdatePhase::Committed,
        "{}",
        stage.prefix.gate_log()
    );
    assert_eq!(stage.prefix.current(), "b");
    assert_eq!(stage.running(), "b");
    assert!(record.watch.is_some() && record.decided_at_ms.is_some());
    assert!(
        took >= Duration::from_millis(timings.window),
        "committed after {took:?}"
    );
    println!("update-gate: committed after {took:?}");
}

#[test]
fn an_agent_that_exits_at_start_is_rolled_back() {
    let stage = Stage::new(GateTimings::default());
    let (record, took) = judge(&stage, fixtures::EXITS_AT_START);
    assert_rolled_back(&stage, &record, UpdateFailure::CrashLoop);
    println!("update-gate: exits at start rolled back after {took:?}");
}

#[test]
fn an_agent_that_never_becomes_ready_is_rolled_back() {
    let stage = Stage::new(GateTimings::default());
    let (record, took) = judge(&stage, fixtures::NEVER_READY);
    assert_rolled_back(&stage, &record, UpdateFailure::NotReady);
    println!("update-gate: never ready rolled back after {took:?}");
}

#[test]
fn an_agent_that_never_polls_is_rolled_back() {
    let stage = Stage::new(GateTimings::default());
    let (record, took) = judge(&stage, fixtures::NEVER_POLLS);
    assert_rolled_back(&stage, &record, UpdateFailure::NoPoll);
    println!("update-gate: never polls rolled back after {took:?}");
}

#[test]
fn an_agent_that_crashes_after_polling_is_rolled_back() {
    let stage = Stage::new(GateTimings::default());
    let (record, _) = judge(&stage, &fixtures::crashes_later(&stage.mark));
    assert_rolled_back(&stage, &record, UpdateFailure::CrashLoop);
}

#[test]
fn the_old_agents_poll_mark_does_not_vouch_for_the_new_one() {
    // Slot a keeps writing marks until it is stopped; the trial binary writes none. A mark
    // counts only from the unit's main process after the restart, so this is `no_poll`.
    let stage = Stage::new(GateTimings::default());
    // The unit is active before slot a's first mark lands; wait for it, bounded.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !stage.mark.exists() {
        assert!(
            Instant::now() < deadline,
            "slot a wrote no poll mark in 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (record, _) = judge(&stage, fixtures::NEVER_POLLS);
    assert_eq!(record.failure, Some(UpdateFailure::NoPoll));
}

#[test]
fn a_gate_killed_mid_watch_converges_when_started_again() {
    let stage = Stage::new(GateTimings::default());
    stage.stage(&fixtures::good(&stage.mark, "b"));
    let mut gate = stage.prefix.start_gate();
    let record = stage
        .prefix
        .wait_phase(UpdatePhase::Trial, Duration::from_secs(5));
    let deadline = Instant::now() + Duration::from_secs(10);
    while stage.prefix.record().unwrap().watch.is_none() {
        assert!(
            Instant::now() < deadline,
            "the gate never journaled its watch"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    gate.kill().unwrap();
    gate.wait().unwrap();
    let watched = stage.prefix.record().unwrap().watch.unwrap();
    assert_eq!(record.update_id, stage.prefix.record().unwrap().update_id);
    // Started again (systemd's Restart=on-failure, or the next boot): it resumes the same
    // watch, without restarting the agent a second time.
    let restarts_before = stage
        .prefix
        .systemctl_calls()
        .iter()
        .filter(|c| c.starts_with("restart"))
        .count();
    assert!(stage.prefix.run_gate(Duration::from_secs(60)));
    let done = stage.prefix.record().unwrap();
    assert_eq!(
        done.phase,
        UpdatePhase::Committed,
        "{}",
        stage.prefix.gate_log()
    );
    assert_eq!(done.watch, Some(watched));
    let restarts_after = stage
        .prefix
        .systemctl_calls()
        .iter()
        .filter(|c| c.starts_with("restart"))
        .count();
    assert_eq!(restarts_before, restarts_after);
}

#[test]
fn a_rollback_interrupted_after_its_decision_is_finished() {
    // Killed after journaling `rolling_back`, before the flip: the next run flips and restarts.
    let stage = Stage::new(GateTimings::default());
    install_script(
        stage.prefix.dir.path(),
        &stage.prefix.slot_binary("b"),
        fixtures::NEVER_READY,
    );
    let mut record = trial();
    record.phase = UpdatePhase::RollingBack;
    record.failure = Some(UpdateFailure::NotReady);
    record.watch = Some(UpdateWatch {
        started_at_ms: record.staged_at_ms,
        baseline_restarts: 0,
    });
    stage.prefix.set_state(&record, "b");
    assert!(stage.prefix.run_gate(Duration::from_secs(30)));
    let done = stage.prefix.record().unwrap();
    assert_eq!(done.phase, UpdatePhase::RolledBack);
    assert_eq!(done.failure, Some(UpdateFailure::NotReady));
    assert_eq!(stage.prefix.current(), "a");
    // Nothing left to do: a third run changes nothing.
    assert!(stage.prefix.run_gate(Duration::from_secs(10)));
    assert_eq!(stage.prefix.record().unwrap(), done);
}

#[test]
fn a_trial_whose_flip_never_happened_is_closed_as_interrupted() {
    // The helper crashed between recording the trial and flipping `current`.
    let stage = Stage::new(GateTimings::default());
    let mut record = trial();
    record.staged_at_ms -= bosun_update_gate::FLIP_GRACE_MS;
    stage.prefix.set_state(&record, "a");
    assert!(stage.prefix.run_gate(Duration::from_secs(30)));
    let done = stage.prefix.record().unwrap();
    assert_eq!(done.phase, UpdatePhase::RolledBack);
    assert_eq!(done.failure, Some(UpdateFailure::Interrupted));
    assert_eq!(stage.prefix.current(), "a");
}

#[test]
fn with_nothing_on_trial_the_gate_does_nothing() {
    let stage = Stage::new(GateTimings::default());
    assert!(stage.prefix.run_gate(Duration::from_secs(10)));
    assert!(stage.prefix.systemctl_calls().is_empty());
    assert_eq!(stage.prefix.current(), "a");
}

#[test]
fn a_config_root_does_not_control_is_refused() {
    let stage = Stage::new(GateTimings::default());
    let config = stage.prefix.dir.path().join("etc/bosun/update-gate.json");
    std::os::unix::fs::chown(&config, Some(65534), None).unwrap();
    stage.prefix.set_state(&trial(), "b");
    assert!(!stage.prefix.run_gate(Duration::from_secs(10)));
    assert!(stage.prefix.gate_log().contains("must be owned by root"));
    // Nothing was touched.
    assert_eq!(stage.prefix.current(), "b");
    assert_eq!(stage.prefix.record().unwrap().phase, UpdatePhase::Trial);
}
