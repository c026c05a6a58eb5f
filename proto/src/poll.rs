//! The poll exchange: `bosun.poll/v1` up (heartbeat + report) and `bosun.poll-response/v1`
//! down (desired state, pending signed jobs, agent config).
//!
//! `POST /v1/hosts/{host_id}/poll?wait=SECONDS` with `wait` in `0..=60`: the hub answers at
//! once when `known_generation` is stale or a job is pending, otherwise it holds the request
//! until something changes or `wait` runs out.
//!
//! Each poll carries either a full `report` or a `delta` (exactly one). The response's
//! `report_seq` names the report the hub now holds (the base of the agent's next delta)
//! and `full_report: true` asks for a full report at once: the hub sets it when it
//! could not apply a delta (no stored report, or `base_seq` is not the stored `seq`).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::delta::ReportDelta;
use crate::desired::DesiredState;
use crate::job::SignedJob;
use crate::oplog::OperationRecord;
use crate::report::{AuditEntry, StateReport, Versions};
use crate::validate::{self, ValidationError};

/// The schema name of [`PollRequest`].
pub use crate::schema_ids::POLL_REQUEST as REQUEST_SCHEMA;
/// The schema name of [`PollResponse`].
pub use crate::schema_ids::POLL_RESPONSE as RESPONSE_SCHEMA;
/// The longest long-poll the hub holds, in seconds.
pub const MAX_WAIT_SECONDS: u32 = 60;
/// The most job ids one poll may acknowledge (`acked_jobs`); the hub refuses a poll
/// carrying more, so the agent never sends more.
pub const MAX_ACKED_JOBS: usize = 1_000;
/// The most signed jobs one poll answer carries; the hub sends the oldest this many and
/// the agent looks at no more than this many of an answer.
pub const MAX_JOBS_PER_POLL: usize = 64;
/// The largest poll answer the agent reads, in bytes. The hub's largest honest answer
/// (a desired state within the hub's 1 MiB body limit plus [`MAX_JOBS_PER_POLL`] jobs of
/// at most `MAX_DOCUMENT_BYTES + MAX_SIGNATURE_BYTES` each, escaped) stays well below it.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// The most key pins a poll or its answer carries (`hub_pins`): the agent's configured pins
/// and those of the operator's signed set.
pub const MAX_HUB_PINS: usize = 16;
/// Shortest `poll_interval_seconds` the hub may set.
pub const MIN_POLL_INTERVAL_SECONDS: u32 = 1;
/// Longest `poll_interval_seconds` the hub may set: a hub cannot park an agent for longer
/// than this (five minutes, well inside any dead-man's grace window).
pub const MAX_POLL_INTERVAL_SECONDS: u32 = 300;

/// Heartbeat + state report, sent by the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PollRequest {
    /// Always [`REQUEST_SCHEMA`].
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::openapi::poll_request))]
    pub schema: String,
    /// Generation of the desired state the agent holds (0 = none yet).
    #[serde(default)]
    pub known_generation: u64,
    /// Generation the agent last converged to completely (0 = none yet).
    #[serde(default)]
    pub applied_generation: u64,
    /// Jobs the agent has durably received; the hub stops sending them.
    #[serde(default)]
    pub acked_jobs: Vec<Uuid>,
    /// What the agent observes, whole (after start, after a reconnect, when asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<StateReport>,
    /// What changed since the report the hub acknowledged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<ReportDelta>,
    /// Operation-journal records changed since the hub last answered (the whole tail after a
    /// full report), at most [`oplog::MAX_PER_POLL`](crate::oplog::MAX_PER_POLL).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operations: Vec<OperationRecord>,
    /// The agent is shutting down on purpose (SIGTERM: a reboot, a package upgrade, an operator
    /// stopping the service) and this is its last poll until it starts again. The hub answers
    /// at once and shows the host `stopped` instead of paging it overdue, until the hub's stop
    /// bound passes without a poll; the next poll clears it. Absent (older agents): `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopping: bool,
    /// The pins the agent trusts the hub by (`spki:` key pins, or certificate fingerprints),
    /// at most [`MAX_HUB_PINS`]; sent on the first poll after the agent starts and whenever
    /// they change, so the hub knows which hosts hold its next key before it switches.
    /// Empty: unchanged since the agent last sent them (or an older agent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hub_pins: Vec<String>,
    /// While the host's key rotates: the SHA-256 (64 lowercase hex digits) of the key the agent
    /// made to replace the one this poll presents ([`is_key_hash`]). The hub keeps it beside the
    /// current key and names it back in [`PollResponse::next_host_key_sha256`]; the agent
    /// presents the new key from then on, and the first request that does retires the old one.
    /// The key itself never travels until it is presented.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_host_key_sha256: Option<String>,
    /// What the host is and has ([`crate::capabilities`]): sent with every full report and
    /// whenever it changed since the last answered poll; absent otherwise (the hub keeps the
    /// last one it got).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<crate::capabilities::HostCapabilities>,
}

/// What the hub sends back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PollResponse {
    /// Always [`RESPONSE_SCHEMA`].
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::openapi::poll_response))]
    pub schema: String,
    /// Current desired-state generation for this host (0 = none set yet).
    pub generation: u64,
    /// The desired state, present when the agent's `known_generation` differs from
    /// `generation`.
    #[serde(default)]
    pub desired: Option<DesiredState>,
    /// Signed jobs not yet acknowledged, oldest first, forwarded byte-exact.
    #[serde(default)]
    pub jobs: Vec<SignedJob>,
    /// Agent settings.
    pub config: AgentConfig,
    /// Highest audit sequence number the hub has stored; send only newer entries.
    #[serde(default)]
    pub audit_acked_seq: Option<u64>,
    /// The `seq` of the report the hub holds for this host (absent: none); the agent's
    /// next delta applies to it.
    #[serde(default)]
    pub report_seq: Option<u64>,
    /// The hub holds no usable base for a delta: send a full report now.
    #[serde(default)]
    pub full_report: bool,
    /// The operator's correlation id of the current generation, when it named one; the
    /// agent records it with the operations the generation causes. Older agents ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// Unsigned key pins. The agent no longer takes them (a holder of the hub's key could name
    /// only its own and keep the fleet, decision 0049); it audits an unsigned announcement once.
    /// The hub sends none: the operator's signed set travels in [`Self::hub_pins_signed`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hub_pins: Vec<String>,
    /// The operator's signed set of hub key pins (`bosun.hub-pins/v1`,
    /// [`crate::hub_pins`]), forwarded byte-exact while the hub holds one. The agent takes a new
    /// set only from here; unsigned `hub_pins` are ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub_pins_signed: Option<crate::signed::SignedDocument>,
    /// The hub asks the agent to replace its key: the key is older than the hub's rotation
    /// age, or an operator asked (`bosunctl hosts rotate-key`). The agent makes a new key and
    /// sends its hash in [`PollRequest::next_host_key_sha256`]. Absent: `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rotate_host_key: bool,
    /// The hash of the next key the hub holds for this host (as the agent sent it): present it
    /// from now on. The old key stays valid until the new one is first presented.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_host_key_sha256: Option<String>,
}

/// Settings the hub pushes to the agent. Every timing has a documented range:
/// `poll_interval_seconds` in
/// [`MIN_POLL_INTERVAL_SECONDS`]`..=`[`MAX_POLL_INTERVAL_SECONDS`], `long_poll_seconds` in
/// `0..=`[`MAX_WAIT_SECONDS`]; the agent refuses a config outside them and clamps what
/// it uses ([`AgentConfig::clamped`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentConfig {
    /// Seconds between polls when nothing is held.
    pub poll_interval_seconds: u32,
    /// The `wait` the agent should ask for.
    pub long_poll_seconds: u32,
    /// When self-updates may run, if restricted.
    #[serde(default)]
    pub update_window: Option<UpdateWindow>,
}

/// A daily window (host local time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UpdateWindow {
    /// Start, `HH:MM`.
    pub start: String,
    /// Length in minutes, 1..=1440.
    pub duration_minutes: u32,
}

pub use crate::validate::is_pin;

/// Whether `text` is a host key's hash as polls carry it: 64 lowercase hex digits (SHA-256).
pub fn is_key_hash(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A key hash field, when present, as [`is_key_hash`] reads it.
fn check_key_hash(field: &str, hash: Option<&String>) -> Result<(), ValidationError> {
    match hash {
        Some(hash) if !is_key_hash(hash) => Err(ValidationError::Invalid {
            field: field.into(),
            reason: "not a key hash: 64 lowercase hex digits (SHA-256)".into(),
        }),
        _ => Ok(()),
    }
}

/// At most [`MAX_HUB_PINS`] pins, each as [`is_pin`] reads it, none twice.
fn check_pins(pins: &[String]) -> Result<(), ValidationError> {
    validate::count("hub_pins", pins.len(), MAX_HUB_PINS)?;
    for (i, pin) in pins.iter().enumerate() {
        if !is_pin(pin) {
            return Err(ValidationError::Invalid {
                field: format!("hub_pins[{i}]"),
                reason:
                    "not a pin: `spki:` and 64 lowercase hex digits, or 64 lowercase hex digits"
                        .into(),
            });
        }
        if pins[..i].contains(pin) {
            return Err(ValidationError::Invalid {
                field: format!("hub_pins[{i}]"),
                reason: "named twice".into(),
            });
        }
    }
    Ok(())
}

impl PollRequest {
    /// Checks the request and its report.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::schema(&self.schema, REQUEST_SCHEMA)?;
        validate::count("acked_jobs", self.acked_jobs.len(), MAX_ACKED_JOBS)?;
        check_pins(&self.hub_pins)?;
        check_key_hash("next_host_key_sha256", self.next_host_key_sha256.as_ref())?;
        if let Some(capabilities) = &self.capabilities {
            capabilities.validate()?;
        }
        validate::count(
            "operations",
            self.operations.len(),
            crate::oplog::MAX_PER_POLL,
        )?;
        for (i, op) in self.operations.iter().enumerate() {
            op.validate()
                .map_err(|e| validate::prefix(&format!("operations[{i}]"), e))?;
        }
        if self.applied_generation > self.known_generation {
            return Err(ValidationError::Invalid {
                field: "applied_generation".into(),
                reason: "cannot be newer than known_generation".into(),
            });
        }
        match (&self.report, &self.delta) {
            (Some(report), None) => report.validate().map_err(|e| validate::prefix("report", e)),
            (None, Some(delta)) => delta.validate().map_err(|e| validate::prefix("delta", e)),
            (Some(_), Some(_)) | (None, None) => Err(ValidationError::Invalid {
                field: "report".into(),
                reason: "a poll carries exactly one of `report` and `delta`".into(),
            }),
        }
    }

    /// The audit entries the poll carries, from its report or its delta.
    pub fn audit(&self) -> &[AuditEntry] {
        match (&self.report, &self.delta) {
            (Some(report), _) => &report.audit,
            (None, Some(delta)) => &delta.audit,
            (None, None) => &[],
        }
    }

    /// The software versions the poll names: always in a report, in a delta only when
    /// they changed.
    pub fn versions(&self) -> Option<&Versions> {
        match (&self.report, &self.delta) {
            (Some(report), _) => Some(&report.versions),
            (None, Some(delta)) => delta.versions.as_ref(),
            (None, None) => None,
        }
    }
}

impl PollResponse {
    /// Checks the response (the agent calls this before acting on it).
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::schema(&self.schema, RESPONSE_SCHEMA)?;
        if let Some(id) = &self.correlation_id {
            crate::oplog::check_correlation_id("correlation_id", id)?;
        }
        if let Some(desired) = &self.desired {
            desired
                .validate()
                .map_err(|e| validate::prefix("desired", e))?;
        }
        validate::count("jobs", self.jobs.len(), MAX_JOBS_PER_POLL)?;
        check_pins(&self.hub_pins)?;
        check_key_hash("next_host_key_sha256", self.next_host_key_sha256.as_ref())?;
        if let Some(signed) = &self.hub_pins_signed {
            signed.hub_pins()?;
        }
        for (i, job) in self.jobs.iter().enumerate() {
            job.validate()
                .map_err(|e| validate::prefix(&format!("jobs[{i}]"), e))?;
        }
        self.config
            .validate()
            .map_err(|e| validate::prefix("config", e))
    }
}

impl AgentConfig {
    /// Checks intervals and the update window.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::range(
            || "poll_interval_seconds".into(),
            self.poll_interval_seconds,
            MIN_POLL_INTERVAL_SECONDS,
            MAX_POLL_INTERVAL_SECONDS,
        )?;
        validate::range(
            || "long_poll_seconds".into(),
            self.long_poll_seconds,
            0,
            MAX_WAIT_SECONDS,
        )?;
        if let Some(window) = &self.update_window {
            let ok = window.start.len() == 5
                && window.start.as_bytes()[2] == b':'
                && window.start[..2].parse::<u8>().is_ok_and(|h| h < 24)
                && window.start[3..].parse::<u8>().is_ok_and(|m| m < 60);
            if !ok {
                return Err(ValidationError::Invalid {
                    field: "update_window.start".into(),
                    reason: "expected HH:MM".into(),
                });
            }
            validate::range(
                || "update_window.duration_minutes".into(),
                window.duration_minutes,
                1,
                1440,
            )?;
        }
        Ok(())
    }
}

impl AgentConfig {
    /// The same settings with every timing forced into its documented range (what the
    /// agent acts on, whatever it was sent).
    pub fn clamped(&self) -> Self {
        Self {
            poll_interval_seconds: self
                .poll_interval_seconds
                .clamp(MIN_POLL_INTERVAL_SECONDS, MAX_POLL_INTERVAL_SECONDS),
            long_poll_seconds: self.long_poll_seconds.min(MAX_WAIT_SECONDS),
            update_window: self.update_window.clone(),
        }
    }
}
