//! Agent self-update (DESIGN §11): the parameters of a signed `agent-update` job, the A/B slot
//! names, and `bosun.update/v1`, the record the helper starts and the health gate
//! (`bosun-update-gate`) concludes.
//!
//! The record lives beside the slots (`<slots root>/update.json`, owned by root): the helper
//! writes it when it stages a new binary and flips `current` (phase `trial`), the gate alone
//! moves it on (`committed`, or `rolling_back` then `rolled_back` with the failure it saw),
//! and the agent only reads it, to report what happened. The new binary never decides.
//!
//! ```text
//! helper: stage into the inactive slot ─► record `trial` ─► flip `current`
//! gate:   restart the agent ─► watch: ready? polled? restarts? ─┬─► `committed`
//!                                                               └─► `rolling_back` ─► flip back ─► restart ─► `rolled_back`
//! ```

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::validate::ValidationError;

/// Where the slots live on a host: root-owned, beside the helper's other fixed roots and
/// outside the agent's own state directory, which the agent owns (decision 0039).
pub const DEFAULT_SLOTS_ROOT: &str = "/var/lib/bosun-helper/slots";
/// The schema name of [`UpdateRecord`].
pub const RECORD_SCHEMA: &str = "bosun.update/v1";
/// The record's file name under the slots root.
pub const RECORD_FILE: &str = "update.json";
/// The symlink under the slots root naming the slot the agent runs from.
pub const CURRENT_LINK: &str = "current";
/// The agent binary's name inside a slot.
pub const SLOT_BINARY: &str = "bosun-agentd";
/// Largest artifact the hub stores and the helper stages, in bytes.
pub const MAX_ARTIFACT_BYTES: u64 = 256 * 1024 * 1024;
/// Longest version string.
pub const MAX_VERSION_LEN: usize = 64;

/// One of the two slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Slot {
    /// `<slots root>/a`
    A,
    /// `<slots root>/b`
    B,
}

impl Slot {
    /// The directory name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::A => "a",
            Self::B => "b",
        }
    }

    /// The slot a name (a `current` link's target) stands for.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "a" => Some(Self::A),
            "b" => Some(Self::B),
            _ => None,
        }
    }

    /// The other slot.
    pub fn other(self) -> Self {
        match self {
            Self::A => Self::B,
            Self::B => Self::A,
        }
    }
}

/// Where an update stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpdatePhase {
    /// Staged and `current` flipped; the gate has not decided.
    Trial,
    /// The gate saw a clean health window: the trial slot is the good one.
    Committed,
    /// The gate decided to roll back and has not finished flipping and restarting.
    RollingBack,
    /// `current` names the good slot again and the agent was restarted into it.
    RolledBack,
}

impl UpdatePhase {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Trial => "trial",
            Self::Committed => "committed",
            Self::RollingBack => "rolling_back",
            Self::RolledBack => "rolled_back",
        }
    }
}

/// Why the gate rolled an update back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpdateFailure {
    /// The new agent never became ready (systemd never saw `READY=1`).
    NotReady,
    /// The new agent never completed a successful hub poll.
    NoPoll,
    /// The new agent exited or was restarted more often than allowed in the window.
    CrashLoop,
    /// The update was interrupted before `current` was flipped (or found flipped back).
    Interrupted,
}

impl UpdateFailure {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotReady => "not_ready",
            Self::NoPoll => "no_poll",
            Self::CrashLoop => "crash_loop",
            Self::Interrupted => "interrupted",
        }
    }
}

/// When the gate began watching the trial, and the restart count it started from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateWatch {
    /// When the gate restarted the agent into the trial slot (Unix milliseconds).
    pub started_at_ms: i64,
    /// systemd's `NRestarts` for the agent's unit right after that restart.
    pub baseline_restarts: u64,
}

/// `bosun.update/v1`: one update's trial and its verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateRecord {
    /// Always [`RECORD_SCHEMA`].
    pub schema: String,
    /// The signed job that asked for it.
    pub update_id: Uuid,
    /// The version the job named.
    pub version: String,
    /// SHA-256 (lowercase hex) of the staged binary, as the job named and the helper checked.
    pub sha256: String,
    /// Where it stands.
    pub phase: UpdatePhase,
    /// The slot known good before the update (rolled back to on failure).
    pub good: Slot,
    /// The slot holding the new binary.
    pub trial: Slot,
    /// The good slot's version, when it was staged by an update.
    #[serde(default)]
    pub previous_version: Option<String>,
    /// When the helper staged it (Unix milliseconds).
    pub staged_at_ms: i64,
    /// Set once the gate restarted the agent into the trial slot.
    #[serde(default)]
    pub watch: Option<UpdateWatch>,
    /// Why it was rolled back.
    #[serde(default)]
    pub failure: Option<UpdateFailure>,
    /// The gate's words on its verdict.
    #[serde(default)]
    pub detail: Option<String>,
    /// When the gate decided (Unix milliseconds).
    #[serde(default)]
    pub decided_at_ms: Option<i64>,
}

impl UpdateRecord {
    /// Checks the record read back from disk.
    pub fn validate(&self) -> Result<(), ValidationError> {
        crate::validate::schema(&self.schema, RECORD_SCHEMA)?;
        check_version(&self.version).map_err(|reason| ValidationError::Invalid {
            field: "version".into(),
            reason: reason.into(),
        })?;
        check_sha256(&self.sha256).map_err(|reason| ValidationError::Invalid {
            field: "sha256".into(),
            reason: reason.into(),
        })?;
        if self.good == self.trial {
            return Err(ValidationError::Invalid {
                field: "trial".into(),
                reason: "the trial slot must not be the good slot".into(),
            });
        }
        Ok(())
    }

    /// A fresh trial: `version` (`sha256`) staged by the helper at `staged_at_ms` in the slot
    /// beside the known good `good`, for the gate to decide.
    pub fn trial(
        update_id: Uuid,
        version: String,
        sha256: String,
        good: Slot,
        staged_at_ms: i64,
    ) -> Self {
        Self {
            schema: RECORD_SCHEMA.into(),
            update_id,
            version,
            sha256,
            phase: UpdatePhase::Trial,
            good,
            trial: good.other(),
            previous_version: None,
            staged_at_ms,
            watch: None,
            failure: None,
            detail: None,
            decided_at_ms: None,
        }
    }

    /// Whether the gate still has to act on it.
    pub fn open(&self) -> bool {
        matches!(self.phase, UpdatePhase::Trial | UpdatePhase::RollingBack)
    }
}

/// The agent's mark of its last successful hub poll, which the gate reads
/// (`<agent state dir>/update/poll-ok.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PollMark {
    /// When the poll's answer arrived (Unix milliseconds).
    pub at_ms: i64,
    /// The agent process that polled.
    pub pid: u32,
}

/// The parameters of a signed `agent-update` job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentUpdateParams {
    /// The version to run.
    pub version: String,
    /// SHA-256 (lowercase hex) of the binary the hub must serve.
    pub sha256: String,
    /// Run even outside the update window of the poll config.
    pub override_window: bool,
}

impl AgentUpdateParams {
    /// Reads the job's `params` (`version`, `sha256`, optional `override_window`).
    pub fn from_params(
        params: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Self, ValidationError> {
        let text = |name: &str| {
            params
                .get(name)
                .and_then(serde_json::Value::as_str)
                .ok_or_else(|| ValidationError::Invalid {
                    field: format!("params.{name}"),
                    reason: "`agent-update` needs a string".into(),
                })
        };
        let version = text("version")?;
        check_version(version).map_err(|reason| ValidationError::Invalid {
            field: "params.version".into(),
            reason: reason.into(),
        })?;
        let sha256 = text("sha256")?;
        check_sha256(sha256).map_err(|reason| ValidationError::Invalid {
            field: "params.sha256".into(),
            reason: reason.into(),
        })?;
        let override_window = match params.get("override_window") {
            None => false,
            Some(serde_json::Value::Bool(b)) => *b,
            // `bosunctl job new --param override_window=true` writes strings.
            Some(serde_json::Value::String(t)) if t == "true" => true,
            Some(serde_json::Value::String(t)) if t == "false" => false,
            Some(_) => {
                return Err(ValidationError::Invalid {
                    field: "params.override_window".into(),
                    reason: "must be true or false".into(),
                });
            }
        };
        Ok(Self {
            version: version.to_owned(),
            sha256: sha256.to_owned(),
            override_window,
        })
    }
}

/// A version: 1..=64 characters of `[A-Za-z0-9._+-]`, starting with an alphanumeric.
pub fn check_version(v: &str) -> Result<(), &'static str> {
    let ok = !v.is_empty()
        && v.len() <= MAX_VERSION_LEN
        && v.as_bytes()[0].is_ascii_alphanumeric()
        && v.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'+' | b'-'));
    if ok {
        Ok(())
    } else {
        Err("must be 1 to 64 characters of [A-Za-z0-9._+-], starting with a letter or digit")
    }
}

/// A SHA-256: 64 lowercase hex digits.
pub fn check_sha256(v: &str) -> Result<(), &'static str> {
    if v.len() == 64 && v.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        Ok(())
    } else {
        Err("must be 64 lowercase hex digits")
    }
}

/// Whether `now` (minutes since midnight) falls in a daily window starting at `start`
/// (minutes since midnight) and lasting `length` minutes (it may wrap past midnight).
pub fn in_window(now: u32, start: u32, length: u32) -> bool {
    let offset = (now + 1440 - start % 1440) % 1440;
    length >= 1440 || offset < length
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_need_a_version_and_a_hash() {
        let good = serde_json::json!({"version": "0.2.0", "sha256": "a".repeat(64)});
        let p = AgentUpdateParams::from_params(good.as_object().unwrap()).unwrap();
        assert!(!p.override_window);
        for bad in [
            serde_json::json!({"version": "0.2.0"}),
            serde_json::json!({"version": "../x", "sha256": "a".repeat(64)}),
            serde_json::json!({"version": "0.2.0", "sha256": "A".repeat(64)}),
            serde_json::json!({"version": "0.2.0", "sha256": "a".repeat(63)}),
            serde_json::json!({"version": "0.2.0", "sha256": "a".repeat(64), "override_window": "yes"}),
        ] {
            assert!(AgentUpdateParams::from_params(bad.as_object().unwrap()).is_err());
        }
    }

    #[test]
    fn windows_wrap_past_midnight() {
        assert!(in_window(120, 120, 60));
        assert!(!in_window(180, 120, 60));
        assert!(in_window(10, 23 * 60, 120));
        assert!(!in_window(22 * 60, 23 * 60, 120));
        assert!(in_window(5, 700, 1440));
    }

    #[test]
    fn slots_pair_up() {
        assert_eq!(Slot::A.other(), Slot::B);
        assert_eq!(Slot::parse("b"), Some(Slot::B));
        assert_eq!(Slot::parse("c"), None);
    }
}
