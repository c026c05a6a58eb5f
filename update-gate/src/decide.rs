//! The verdict, as a pure function of what the gate observed: systemd's view of the agent's
//! unit and the agent's mark of its last hub poll. Nothing the new binary says about itself
//! counts except that mark, and the mark counts only when it is newer than the trial's start
//! and written by the process systemd runs as the unit's main process.

use bosun_proto::update::{PollMark, UpdateFailure};

use crate::config::Config;

/// What systemd says about the agent's unit (`systemctl show`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnitFacts {
    /// `ActiveState`: `active` only after `READY=1` for a `Type=notify` unit.
    pub active_state: String,
    /// `NRestarts`: automatic restarts since the unit was last started by hand.
    pub n_restarts: u64,
    /// `MainPID` (0 when not running).
    pub main_pid: u32,
}

/// What the gate has seen of the trial so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// Milliseconds since the gate restarted the agent into the trial slot.
    pub elapsed_ms: u64,
    /// The unit was `active` at some look since then.
    pub ever_active: bool,
    /// A poll mark of the unit's main process, newer than the start, was seen.
    pub ever_polled: bool,
    /// The newest facts.
    pub unit: UnitFacts,
    /// Restarts since the start.
    pub restarts: u64,
}

impl Observed {
    /// Folds one look into what was seen: `started_at_ms` is the trial's start, `baseline`
    /// the restart count then.
    pub fn look(
        &mut self,
        unit: UnitFacts,
        mark: Option<PollMark>,
        started_at_ms: i64,
        baseline: u64,
        elapsed_ms: u64,
    ) {
        self.elapsed_ms = elapsed_ms;
        self.restarts = unit.n_restarts.saturating_sub(baseline);
        if unit.active_state == "active" {
            self.ever_active = true;
        }
        if let Some(mark) = mark
            && mark.at_ms >= started_at_ms
            && unit.main_pid != 0
            && mark.pid == unit.main_pid
        {
            self.ever_polled = true;
        }
        self.unit = unit;
    }
}

/// What to do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Keep watching.
    Wait,
    /// A clean window: the trial slot is good.
    Commit,
    /// Roll back, for this reason, with these words.
    RollBack(UpdateFailure, String),
}

/// Judges the trial from what was seen.
pub fn judge(seen: &Observed, config: &Config) -> Verdict {
    if seen.unit.active_state == "failed" {
        return Verdict::RollBack(
            UpdateFailure::CrashLoop,
            format!("the unit failed after {} restarts", seen.restarts),
        );
    }
    if seen.restarts > config.max_restarts {
        return Verdict::RollBack(
            UpdateFailure::CrashLoop,
            format!(
                "restarted {} times within {} ms (at most {} allowed)",
                seen.restarts, seen.elapsed_ms, config.max_restarts
            ),
        );
    }
    if !seen.ever_active && seen.elapsed_ms >= config.ready_timeout_ms {
        return Verdict::RollBack(
            UpdateFailure::NotReady,
            format!("not ready after {} ms", seen.elapsed_ms),
        );
    }
    if !seen.ever_polled && seen.elapsed_ms >= config.poll_timeout_ms {
        return Verdict::RollBack(
            UpdateFailure::NoPoll,
            format!("no successful hub poll after {} ms", seen.elapsed_ms),
        );
    }
    if seen.elapsed_ms >= config.health_window_ms {
        if seen.unit.active_state == "active" && seen.ever_polled {
            return Verdict::Commit;
        }
        return Verdict::RollBack(
            UpdateFailure::CrashLoop,
            format!("{} at the end of the health window", seen.unit.active_state),
        );
    }
    Verdict::Wait
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config {
            health_window_ms: 10_000,
            ready_timeout_ms: 4_000,
            poll_timeout_ms: 6_000,
            max_restarts: 2,
            ..Config::default()
        }
    }

    fn seen(elapsed_ms: u64, state: &str, restarts: u64, active: bool, polled: bool) -> Observed {
        Observed {
            elapsed_ms,
            ever_active: active,
            ever_polled: polled,
            unit: UnitFacts {
                active_state: state.into(),
                n_restarts: restarts,
                main_pid: 7,
            },
            restarts,
        }
    }

    fn failure(v: Verdict) -> Option<UpdateFailure> {
        match v {
            Verdict::RollBack(f, _) => Some(f),
            _ => None,
        }
    }

    #[test]
    fn the_table() {
        let c = config();
        let cases = [
            (seen(1_000, "activating", 0, false, false), None, false),
            (
                seen(4_000, "activating", 0, false, false),
                Some(UpdateFailure::NotReady),
                false,
            ),
            (seen(5_000, "active", 0, true, false), None, false),
            (
                seen(6_000, "active", 0, true, false),
                Some(UpdateFailure::NoPoll),
                false,
            ),
            (
                seen(2_000, "activating", 3, false, false),
                Some(UpdateFailure::CrashLoop),
                false,
            ),
            (
                seen(2_000, "failed", 1, false, false),
                Some(UpdateFailure::CrashLoop),
                false,
            ),
            (seen(9_999, "active", 2, true, true), None, false),
            (seen(10_000, "active", 2, true, true), None, true),
            (
                seen(10_000, "activating", 1, true, true),
                Some(UpdateFailure::CrashLoop),
                false,
            ),
        ];
        for (i, (s, want, commit)) in cases.into_iter().enumerate() {
            let v = judge(&s, &c);
            assert_eq!(v == Verdict::Commit, commit, "case {i}: {v:?}");
            assert_eq!(failure(v), want, "case {i}");
        }
    }

    #[test]
    fn a_mark_counts_only_from_the_main_process_after_the_start() {
        let unit = |pid| UnitFacts {
            active_state: "active".into(),
            n_restarts: 5,
            main_pid: pid,
        };
        let mut s = Observed::default();
        s.look(unit(7), Some(PollMark { at_ms: 99, pid: 7 }), 100, 5, 10);
        assert!(!s.ever_polled, "older than the start");
        s.look(unit(7), Some(PollMark { at_ms: 150, pid: 8 }), 100, 5, 20);
        assert!(!s.ever_polled, "another process");
        s.look(unit(0), Some(PollMark { at_ms: 150, pid: 0 }), 100, 5, 20);
        assert!(!s.ever_polled, "nothing running");
        s.look(unit(7), Some(PollMark { at_ms: 150, pid: 7 }), 100, 5, 30);
        assert!(s.ever_polled && s.ever_active && s.restarts == 0);
    }
}
