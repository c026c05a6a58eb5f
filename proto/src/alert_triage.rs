//! What an operator does with an open alert (`/v1/admin/alerts/...`): acknowledge it (it stays
//! open and listed, and no longer escalates its host past `warning`), or silence what a host
//! raises for a while (alerts are still stored and listed, marked silenced, but not sent to
//! the webhook).

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::alert_kind::AlertKind;
use crate::validate::{self, ValidationError};

/// Longest acknowledgement note and silence reason, in bytes.
pub const MAX_TRIAGE_TEXT: usize = 500;
/// Longest subject a silence or an acknowledgement names, in bytes.
pub const MAX_SUBJECT: usize = 512;
/// Shortest silence, in seconds.
pub const MIN_SILENCE_SECONDS: u32 = 60;
/// Longest silence, in seconds (30 days): a silence always ends.
pub const MAX_SILENCE_SECONDS: u32 = 30 * 24 * 3600;

/// An acknowledgement of one open alert (`POST /v1/admin/alerts/ack`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AckAlert {
    /// The host.
    pub host_id: Uuid,
    /// The open alert's kind.
    pub kind: AlertKind,
    /// The open alert's subject, as `GET /v1/admin/alerts/open` lists it: not blank, at
    /// most 512 bytes, no control characters (the schema's pattern admits the printable-ASCII
    /// subset).
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 512, pattern = "^ *[!-~][ -~]*$")
    )]
    pub subject: String,
    /// What the operator is doing about it: not blank, at most 500 bytes, no control
    /// characters.
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 500, pattern = "^ *[!-~][ -~]*$")
    )]
    pub note: String,
}

impl AckAlert {
    /// Checks the request.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::text(|| "subject".into(), &self.subject, MAX_SUBJECT)?;
        validate::text(|| "note".into(), &self.note, MAX_TRIAGE_TEXT)
    }
}

/// An open alert's acknowledgement: when, and the operator's note. It holds for this opening
/// only: a condition that resolves and opens again starts unacknowledged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AlertAck {
    /// When it was acknowledged.
    pub at: Timestamp,
    /// The operator's note.
    pub note: String,
}

/// A silence to create (`POST /v1/admin/alerts/silences`): alerts the host raises while it
/// lasts, of `kind` and about `subject` when given, are stored but not sent to the webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateSilence {
    /// The host.
    pub host_id: Uuid,
    /// Only alerts of this kind; every kind when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<AlertKind>,
    /// Only alerts about this subject; every subject when absent. Not blank, at most 512
    /// bytes, no control characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 512, pattern = "^ *[!-~][ -~]*$")
    )]
    pub subject: Option<String>,
    /// How long it lasts, in seconds: 60..=2592000 (30 days).
    #[cfg_attr(feature = "openapi", schema(minimum = 60, maximum = 2_592_000))]
    pub duration_seconds: u32,
    /// Why: not blank, at most 500 bytes, no control characters.
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 500, pattern = "^ *[!-~][ -~]*$")
    )]
    pub reason: String,
}

impl CreateSilence {
    /// Checks the request.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::range(
            || "duration_seconds".into(),
            self.duration_seconds,
            MIN_SILENCE_SECONDS,
            MAX_SILENCE_SECONDS,
        )?;
        if let Some(subject) = &self.subject {
            validate::text(|| "subject".into(), subject, MAX_SUBJECT)?;
        }
        validate::text(|| "reason".into(), &self.reason, MAX_TRIAGE_TEXT)
    }
}

/// A silence (`GET /v1/admin/alerts/silences`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Silence {
    /// Its id (`DELETE /v1/admin/alerts/silences/{id}` ends it early).
    pub id: u64,
    /// The host.
    pub host_id: Uuid,
    /// The host's name.
    pub hostname: String,
    /// Only alerts of this kind; every kind when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<AlertKind>,
    /// Only alerts about this subject; every subject when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it ends.
    pub until: Timestamp,
    /// Why.
    pub reason: String,
    /// When an operator ended it early.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed_at: Option<Timestamp>,
}
