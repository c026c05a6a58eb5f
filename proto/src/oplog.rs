//! The agent's operation journal as it travels to the hub: a bounded tail of recent
//! operations with their steps, so `bosunctl explain` works through the hub, not only on the
//! host's own journal file.
//!
//! A poll carries in `operations` the records that changed since the hub last answered (all
//! of the tail after a full report); the hub keeps the newest [`MAX_STORED_PER_HOST`] per
//! host. Everything is bounded: at most [`MAX_PER_POLL`] records per poll, [`MAX_STEPS`]
//! steps per record, [`MAX_TEXT_BYTES`] per text and [`MAX_DETAIL_BYTES`] per step detail.
//! A step's detail holds facts about a Proxmox call (vmid, volid, sizes), never a secret.
//!
//! Operations caused by a desired-state generation carry the `correlation_id` the operator
//! sent with it (`X-Correlation-Id` on `PUT …/desired`, forwarded in the poll answer).

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::validate::{self, ValidationError};

/// Most operation records one poll may carry.
pub const MAX_PER_POLL: usize = 32;
/// Most operation records the hub keeps per host (newest by start time).
pub const MAX_STORED_PER_HOST: usize = 256;
/// Most steps one record may carry (the agent sends the newest, counting the rest).
pub const MAX_STEPS: usize = 64;
/// Longest text field (an error, a name, an id), in bytes.
pub const MAX_TEXT_BYTES: usize = 1024;
/// Largest step detail, as compact JSON, in bytes.
pub const MAX_DETAIL_BYTES: usize = 2048;
/// Longest correlation id.
pub const MAX_CORRELATION_ID: usize = 128;

/// One journaled operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OperationRecord {
    /// The operation's id (a UUIDv7: ids sort by start time).
    pub op_id: Uuid,
    /// Its kind (`provision`, `start_guest`, `backup`, …).
    pub kind: String,
    /// The guest it concerns, if one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_id: Option<String>,
    /// The Proxmox vmid, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmid: Option<u32>,
    /// The signed job that asked for it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// The request that brought the work (a poll, a local-API call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The operator's correlation id of the desired-state generation that caused it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// `running`, `done`, `failed` or `compensated`.
    pub status: String,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When it began.
    pub started_at: Timestamp,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<Timestamp>,
    /// Its steps in order (the newest [`MAX_STEPS`]).
    #[serde(default)]
    pub steps: Vec<OperationStep>,
    /// Older steps left out.
    #[serde(default)]
    pub steps_omitted: u32,
}

/// One step of an operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OperationStep {
    /// Position in the operation, from 1.
    pub seq: u32,
    /// Short name (`restore`, `start`, `vzdump`, …).
    pub name: String,
    /// `intent`, `sent`, `ok` or `failed`.
    pub state: String,
    /// Facts about the call (never a secret); `{"truncated": BYTES}` when it was too large.
    #[serde(default)]
    pub detail: serde_json::Value,
    /// The Proxmox task id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upid: Option<String>,
    /// Warnings the task counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnings: Option<u32>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When its intent was written.
    pub intent_at: Timestamp,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<Timestamp>,
}

impl OperationRecord {
    /// Checks the bounds the hub relies on.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::text(|| "kind".into(), &self.kind, 64)?;
        validate::text(|| "status".into(), &self.status, 32)?;
        for (field, value) in [
            ("guest_id", &self.guest_id),
            ("job_id", &self.job_id),
            ("request_id", &self.request_id),
        ] {
            if let Some(value) = value {
                validate::text(|| field.into(), value, MAX_CORRELATION_ID)?;
            }
        }
        if let Some(id) = &self.correlation_id {
            check_correlation_id("correlation_id", id)?;
        }
        if let Some(error) = &self.error {
            bounded("error", error)?;
        }
        validate::count("steps", self.steps.len(), MAX_STEPS)?;
        for (i, step) in self.steps.iter().enumerate() {
            step.validate()
                .map_err(|e| crate::validate::prefix(&format!("steps[{i}]"), e))?;
        }
        Ok(())
    }

    /// The record as `explain` prints it, one line each: the operation and its outcome, the
    /// ids it carries, when it ran, then one line per step. The lines are raw: a printer
    /// escapes their control characters ([`crate::inert::escape`]).
    pub fn text_lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "operation {} ({}) {}{}",
            self.op_id,
            self.kind,
            self.status,
            self.error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        )];
        let facts = [
            ("guest", self.guest_id.clone()),
            ("vmid", self.vmid.map(|v| v.to_string())),
            ("job", self.job_id.clone()),
            ("request", self.request_id.clone()),
            ("correlation", self.correlation_id.clone()),
        ];
        for (name, value) in facts {
            if let Some(value) = value {
                lines.push(format!("  {name}: {value}"));
            }
        }
        lines.push(format!(
            "  started {}, ended {}",
            self.started_at,
            self.ended_at
                .map_or_else(|| "-".to_owned(), |t| t.to_string())
        ));
        if self.steps_omitted > 0 {
            lines.push(format!(
                "  ({} earlier steps not reported)",
                self.steps_omitted
            ));
        }
        for s in &self.steps {
            lines.push(format!(
                "  {:>2}. {:<20} {:<6} {}{}{}",
                s.seq,
                s.name,
                s.state,
                s.detail,
                s.upid
                    .as_deref()
                    .map(|u| format!(" upid={u}"))
                    .unwrap_or_default(),
                s.error
                    .as_deref()
                    .map(|e| format!(" error={e}"))
                    .unwrap_or_default(),
            ));
        }
        lines
    }
}

impl OperationStep {
    /// Checks the bounds the hub relies on.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::text(|| "name".into(), &self.name, 64)?;
        validate::text(|| "state".into(), &self.state, 32)?;
        if let Some(upid) = &self.upid {
            bounded("upid", upid)?;
        }
        if let Some(error) = &self.error {
            bounded("error", error)?;
        }
        let len = detail_len(&self.detail);
        if len > MAX_DETAIL_BYTES {
            return Err(ValidationError::TooLong {
                field: "detail".into(),
                len,
                max: MAX_DETAIL_BYTES,
            });
        }
        Ok(())
    }
}

/// The size of a detail as compact JSON.
pub fn detail_len(detail: &serde_json::Value) -> usize {
    serde_json::to_string(detail).map_or(usize::MAX, |s| s.len())
}

/// Checks a correlation id: 1..=[`MAX_CORRELATION_ID`] visible ASCII characters (what the
/// hub accepts in `X-Correlation-Id`).
pub fn check_correlation_id(field: &str, id: &str) -> Result<(), ValidationError> {
    if id.is_empty() || id.len() > MAX_CORRELATION_ID || !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ValidationError::Invalid {
            field: field.into(),
            reason: format!("expected 1..={MAX_CORRELATION_ID} visible ASCII characters"),
        });
    }
    Ok(())
}

fn bounded(field: &str, value: &str) -> Result<(), ValidationError> {
    if value.len() > MAX_TEXT_BYTES {
        return Err(ValidationError::TooLong {
            field: field.into(),
            len: value.len(),
            max: MAX_TEXT_BYTES,
        });
    }
    Ok(())
}

/// `text` cut to at most [`MAX_TEXT_BYTES`] on a character boundary, marked with `…` when
/// cut (what an agent sends).
pub fn clip(text: &str) -> String {
    if text.len() <= MAX_TEXT_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_TEXT_BYTES - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> OperationRecord {
        OperationRecord {
            op_id: Uuid::now_v7(),
            kind: "provision".into(),
            guest_id: None,
            vmid: Some(100),
            job_id: None,
            request_id: None,
            correlation_id: Some("op-7".into()),
            status: "done".into(),
            error: None,
            started_at: Timestamp::UNIX_EPOCH,
            ended_at: None,
            steps: vec![OperationStep {
                seq: 1,
                name: "restore".into(),
                state: "ok".into(),
                detail: serde_json::json!({ "vmid": 100 }),
                upid: None,
                warnings: None,
                error: None,
                intent_at: Timestamp::UNIX_EPOCH,
                ended_at: None,
            }],
            steps_omitted: 0,
        }
    }

    #[test]
    fn bounds_are_enforced() {
        assert!(record().validate().is_ok());
        let mut big = record();
        big.steps[0].detail = serde_json::json!({ "x": "y".repeat(MAX_DETAIL_BYTES) });
        assert!(big.validate().is_err());
        let mut many = record();
        many.steps = vec![many.steps[0].clone(); MAX_STEPS + 1];
        assert!(many.validate().is_err());
        let mut long = record();
        long.error = Some("e".repeat(MAX_TEXT_BYTES + 1));
        assert!(long.validate().is_err());
        let mut bad = record();
        bad.correlation_id = Some("has space".into());
        assert!(bad.validate().is_err());
    }

    #[test]
    fn text_lines_name_the_operation_its_ids_and_each_step() {
        let mut op = record();
        op.error = Some("pve said no".into());
        op.steps[0].upid = Some("UPID:pve1:1".into());
        op.steps_omitted = 2;
        let lines = op.text_lines();
        assert_eq!(
            lines[0],
            format!("operation {} (provision) done: pve said no", op.op_id)
        );
        assert_eq!(lines[1], "  vmid: 100");
        assert_eq!(lines[2], "  correlation: op-7");
        assert_eq!(lines[3], "  started 1970-01-01T00:00:00Z, ended -");
        assert_eq!(lines[4], "  (2 earlier steps not reported)");
        assert_eq!(
            lines[5],
            "   1. restore              ok     {\"vmid\":100} upid=UPID:pve1:1"
        );
        assert_eq!(lines.len(), 6);
    }

    #[test]
    fn clip_keeps_short_text_and_cuts_long_text_on_a_boundary() {
        assert_eq!(clip("short"), "short");
        let long = "é".repeat(MAX_TEXT_BYTES);
        let cut = clip(&long);
        assert!(cut.len() <= MAX_TEXT_BYTES);
        assert!(cut.ends_with('…'));
    }
}
