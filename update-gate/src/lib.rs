//! `bosun-update-gate`: the revert authority of an agent self-update (DESIGN §11), a small
//! program of its own so the binary on trial never judges itself.
//!
//! `bosun-helper stage_agent_update` stages the new agent into the inactive slot, writes the
//! update record (`<slots root>/update.json`, phase `trial`) and flips `current`. The record
//! changing starts this gate (`bosun-update-gate.path`; it also runs at boot), which
//!
//! 1. restarts the agent's unit into the trial slot and journals when, with systemd's restart
//!    count then (`watch`);
//! 2. looks every `check_interval_ms` at `systemctl show` (`ActiveState`: a `Type=notify`
//!    unit is `active` only after `READY=1`; `NRestarts`; `MainPID`) and the agent's poll
//!    mark, and judges ([`decide::judge`]);
//! 3. commits after a clean health window, or journals `rolling_back` with the failure,
//!    flips `current` back to the good slot, restarts the agent and journals `rolled_back`.
//!
//! Every step is journaled before or after it is idempotent, so a gate killed at any point
//! and started again converges: a `trial` whose `current` does not name the trial slot
//! [`FLIP_GRACE_MS`] after staging was interrupted before the flip and is closed
//! `rolled_back` (`interrupted`); a watch
//! already journaled is resumed from its recorded start; `rolling_back` is finished.

pub mod config;
pub mod decide;
pub mod record;
pub mod systemd;

use std::time::Duration;

use bosun_proto::update::{PollMark, UpdateFailure, UpdatePhase, UpdateRecord, UpdateWatch};

use crate::config::Config;
use crate::decide::{Observed, Verdict, judge};
use crate::record::{RecordError, Slots};
use crate::systemd::{Unit, UnitError};

/// How long after staging a trial whose `current` still names the good slot is taken for a
/// helper that has yet to flip it, rather than one that crashed before the flip.
pub const FLIP_GRACE_MS: i64 = 30_000;

/// Why the gate stopped without a verdict (systemd starts it again).
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// The slots or the record could not be read or written.
    #[error("update record")]
    Record(#[source] RecordError),
    /// `systemctl` failed.
    #[error("agent unit")]
    Unit(#[source] UnitError),
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// No update was on trial.
    Idle,
    /// The update was committed.
    Committed {
        /// Its version.
        version: String,
    },
    /// The update was rolled back.
    RolledBack {
        /// Its version.
        version: String,
        /// Why.
        failure: UpdateFailure,
    },
}

/// Watches the update on trial, if any, to its verdict.
pub fn run(config: &Config) -> Result<Outcome, GateError> {
    let slots = Slots::new(&config.slots_root);
    let unit = Unit::new(&config.systemctl, &config.agent_unit);
    let Some(mut record) = slots.read().map_err(GateError::Record)? else {
        return Ok(Outcome::Idle);
    };
    match record.phase {
        UpdatePhase::Committed | UpdatePhase::RolledBack => Ok(Outcome::Idle),
        UpdatePhase::RollingBack => finish_rollback(&slots, &unit, record),
        UpdatePhase::Trial => {
            let mut current = slots.current().map_err(GateError::Record)?;
            // The helper records the trial, then flips `current`: the record may be seen a
            // moment before the flip. Only a flip missing long after staging is a crash.
            while current != record.trial
                && record.watch.is_none()
                && now_ms() - record.staged_at_ms < FLIP_GRACE_MS
            {
                std::thread::sleep(Duration::from_millis(config.check_interval_ms));
                current = slots.current().map_err(GateError::Record)?;
            }
            if current != record.trial {
                log(
                    &record,
                    "trial slot not current: the update was interrupted",
                );
                record.phase = UpdatePhase::RollingBack;
                record.failure = Some(UpdateFailure::Interrupted);
                record.detail = Some(format!(
                    "current names slot {}, not the trial slot {}",
                    current.as_str(),
                    record.trial.as_str()
                ));
                record.decided_at_ms = Some(now_ms());
                slots.write(&record).map_err(GateError::Record)?;
                return finish_rollback(&slots, &unit, record);
            }
            let watch = match record.watch {
                Some(watch) => watch,
                None => {
                    let before = unit.show().map_err(GateError::Unit)?;
                    unit.restart().map_err(GateError::Unit)?;
                    let facts = restarted(config, &unit, &before)?;
                    let watch = UpdateWatch {
                        started_at_ms: now_ms(),
                        baseline_restarts: facts.n_restarts,
                    };
                    record.watch = Some(watch);
                    slots.write(&record).map_err(GateError::Record)?;
                    log(&record, "agent restarted into the trial slot; watching");
                    watch
                }
            };
            watch_trial(config, &slots, &unit, record, watch)
        }
    }
}

fn watch_trial(
    config: &Config,
    slots: &Slots,
    unit: &Unit,
    mut record: UpdateRecord,
    watch: UpdateWatch,
) -> Result<Outcome, GateError> {
    let mut seen = Observed::default();
    loop {
        let facts = unit.show().map_err(GateError::Unit)?;
        let mark = read_mark(&config.poll_mark);
        let elapsed = u64::try_from(now_ms() - watch.started_at_ms).unwrap_or(0);
        seen.look(
            facts,
            mark,
            watch.started_at_ms,
            watch.baseline_restarts,
            elapsed,
        );
        match judge(&seen, config) {
            Verdict::Wait => std::thread::sleep(Duration::from_millis(config.check_interval_ms)),
            Verdict::Commit => {
                record.phase = UpdatePhase::Committed;
                record.decided_at_ms = Some(now_ms());
                record.detail = Some(format!(
                    "healthy for {elapsed} ms with {} restarts",
                    seen.restarts
                ));
                slots.write(&record).map_err(GateError::Record)?;
                log(&record, "committed");
                return Ok(Outcome::Committed {
                    version: record.version,
                });
            }
            Verdict::RollBack(failure, detail) => {
                record.phase = UpdatePhase::RollingBack;
                record.failure = Some(failure);
                record.detail = Some(detail);
                record.decided_at_ms = Some(now_ms());
                slots.write(&record).map_err(GateError::Record)?;
                log(&record, "rolling back");
                return finish_rollback(slots, unit, record);
            }
        }
    }
}

/// Waits (at most 30 s) until the queued restart took effect: the old process is gone, so
/// neither its readiness nor its poll mark can count for the trial.
fn restarted(
    config: &Config,
    unit: &Unit,
    before: &decide::UnitFacts,
) -> Result<decide::UnitFacts, GateError> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let facts = unit.show().map_err(GateError::Unit)?;
        let replaced = before.main_pid == 0
            || facts.main_pid != before.main_pid
            || facts.active_state != "active";
        if replaced || std::time::Instant::now() >= deadline {
            return Ok(facts);
        }
        std::thread::sleep(Duration::from_millis(config.check_interval_ms));
    }
}

/// Flips `current` back to the good slot, restarts the agent there and closes the record.
fn finish_rollback(
    slots: &Slots,
    unit: &Unit,
    mut record: UpdateRecord,
) -> Result<Outcome, GateError> {
    slots.flip(record.good).map_err(GateError::Record)?;
    unit.reset_failed().map_err(GateError::Unit)?;
    unit.restart().map_err(GateError::Unit)?;
    record.phase = UpdatePhase::RolledBack;
    slots.write(&record).map_err(GateError::Record)?;
    log(&record, "rolled back");
    Ok(Outcome::RolledBack {
        version: record.version,
        failure: record.failure.unwrap_or(UpdateFailure::Interrupted),
    })
}

/// The agent's poll mark, when readable (at most 4 KiB).
fn read_mark(path: &std::path::Path) -> Option<PollMark> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).ok()?;
    let mut text = Vec::new();
    file.take(4096).read_to_end(&mut text).ok()?;
    serde_json::from_slice(&text).ok()
}

fn log(record: &UpdateRecord, message: &str) {
    eprintln!(
        "bosun-update-gate: {message} update_id={} version={} phase={} good={} trial={} failure={} detail={:?}",
        record.update_id,
        record.version,
        record.phase.as_str(),
        record.good.as_str(),
        record.trial.as_str(),
        record.failure.map_or("-", UpdateFailure::as_str),
        record.detail.as_deref().unwrap_or(""),
    );
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
