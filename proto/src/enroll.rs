//! Enrollment: `bosun.enroll/v1` (agent → hub, `POST /v1/enroll`) and `bosun.enrolled/v1`.
//!
//! A restore-mode token (`CreateEnrollToken::restore_host`) enrolls the new box as an existing,
//! revoked host: the answer keeps that host's id, carries a new key, and names the replaced box
//! in [`EnrollResponse::replaces`].

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::admin::HostStatus;
use crate::poll::AgentConfig;
use crate::secret::SecretToken;
use crate::validate::{self, ValidationError};

/// The schema name of [`EnrollRequest`].
pub use crate::schema_ids::ENROLL_REQUEST as REQUEST_SCHEMA;
/// The schema name of [`EnrollResponse`].
pub use crate::schema_ids::ENROLL_RESPONSE as RESPONSE_SCHEMA;

/// An agent presenting a one-time enrollment token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EnrollRequest {
    /// Always [`REQUEST_SCHEMA`].
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::openapi::enroll_request))]
    pub schema: String,
    /// The enrollment token the operator created: not blank, at most 256 bytes, no control
    /// characters (the schema's pattern admits the printable-ASCII subset; a token the hub
    /// issued is one).
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = String, min_length = 1, max_length = 256, pattern = "^ *[!-~][ -~]*$")
    )]
    pub token: SecretToken,
    /// The host's name: not blank, at most 253 bytes, no control characters.
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 253, pattern = "^ *[!-~][ -~]*$")
    )]
    pub hostname: String,
    /// `bosun-agentd` version: not blank, at most 64 bytes, no control characters.
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 64, pattern = "^ *[!-~][ -~]*$")
    )]
    pub agent_version: String,
    /// Proxmox VE version, if known: not blank, at most 64 bytes, no control characters.
    #[serde(default)]
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 64, pattern = "^ *[!-~][ -~]*$")
    )]
    pub pve_version: Option<String>,
}

/// The hub's answer: the host's identity and its API key, shown once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EnrollResponse {
    /// Always [`RESPONSE_SCHEMA`].
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::openapi::enroll_response))]
    pub schema: String,
    /// The host's id from now on.
    pub host_id: Uuid,
    /// The host API key (`Authorization: Bearer`); the hub keeps only its hash.
    pub host_key: SecretToken,
    /// `pending_approval` until an operator approves, when the token required approval.
    pub status: HostStatus,
    /// Initial agent settings.
    pub config: AgentConfig,
    /// Present when the token was a restore-mode token: this box took over the identity of
    /// a lost host (`host_id` is that host's). Its desired state, storage manifest, jobs and
    /// escrow blob (`GET /v1/hosts/{host_id}/escrow`) are now this box's; the PBS key K must
    /// come from the escrow (the customer's recovery code), not be generated anew.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<ReplacedHost>,
}

/// The lost host a restore-mode enrollment replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReplacedHost {
    /// The lost box's hostname.
    pub hostname: String,
    /// When the host identity was first enrolled.
    pub enrolled_at: Timestamp,
}

impl EnrollRequest {
    /// Checks the request.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::schema(&self.schema, REQUEST_SCHEMA)?;
        validate::text(|| "token".into(), self.token.expose(), 256)?;
        validate::text(|| "hostname".into(), &self.hostname, 253)?;
        validate::text(|| "agent_version".into(), &self.agent_version, 64)?;
        if let Some(pve) = &self.pve_version {
            validate::text(|| "pve_version".into(), pve, 64)?;
        }
        Ok(())
    }
}
