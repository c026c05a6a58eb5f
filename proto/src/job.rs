//! Operator-signed one-shot jobs: the `bosun.job/v1` document, the `bosun.signed-job/v1`
//! envelope that carries it with its SSH signature, and the `bosun.job-result/v1` report.
//!
//! The operator signs the document bytes with `ssh-keygen -Y sign -n bosun-job@v1`. Those
//! bytes travel base64-encoded inside the envelope so they arrive byte-exact: the hub stores
//! and forwards them and never re-serializes the document. Verifying the signature is the
//! agent's job.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::validate::{self, ValidationError};

/// The schema name of [`JobDocument`].
pub const DOCUMENT_SCHEMA: &str = "bosun.job/v1";
/// The schema name of [`SignedJob`].
pub use crate::schema_ids::JOB_ENVELOPE as ENVELOPE_SCHEMA;
/// The schema name of [`JobResult`].
pub use crate::schema_ids::JOB_RESULT as RESULT_SCHEMA;
/// The SSH signature namespace (`ssh-keygen -Y sign -n`).
pub const SIGNATURE_NAMESPACE: &str = "bosun-job@v1";
/// Largest accepted signed document.
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024;
/// Largest accepted armored signature.
pub const MAX_SIGNATURE_BYTES: usize = 8 * 1024;
/// Longest validity window a job may declare.
pub const MAX_VALIDITY_HOURS: i64 = 7 * 24;
/// Shortest timeout a job may declare, seconds.
pub const MIN_TIMEOUT_S: u32 = 10;
/// Longest timeout a job may declare, seconds (a day).
pub const MAX_TIMEOUT_S: u32 = 24 * 3600;
/// Lowest and highest priority a job may declare; queued jobs of one host go highest first.
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i32> = -100..=100;
/// Longest reason a result gives for being (or not being) retriable.
pub const MAX_RETRIABLE_REASON: usize = 256;

/// The parameter of `restore-bulk` naming the volume.
pub const RESTORE_BULK_VOLUME: &str = "volume";
/// The parameter of `restore-bulk` naming the archive (optional).
pub const RESTORE_BULK_ARCHIVE: &str = "archive";

const ARMOR_BEGIN: &str = "-----BEGIN SSH SIGNATURE-----";
const ARMOR_END: &str = "-----END SSH SIGNATURE-----";

/// The job document the operator signs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct JobDocument {
    /// Always [`DOCUMENT_SCHEMA`].
    pub schema: String,
    /// Idempotency key: a job runs at most once.
    pub job_id: Uuid,
    /// What to do.
    pub kind: JobKind,
    /// Where to do it.
    pub target: JobTarget,
    /// Kind-specific parameters (a JSON object).
    #[serde(default)]
    pub params: serde_json::Map<String, serde_json::Value>,
    /// Random value the agent remembers forever, 16..=128 bytes of `[A-Za-z0-9._-]`.
    pub nonce: String,
    /// Not valid before this instant.
    pub not_before: Timestamp,
    /// Not valid after this instant.
    pub expires_at: Timestamp,
    /// How long the job may run once the agent accepts it, seconds
    /// ([`MIN_TIMEOUT_S`]..=[`MAX_TIMEOUT_S`]): no step starts after it (decision 0072).
    /// Signed, like everything that decides whether a destructive job runs to its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<u32>,
    /// Where the job queues among the host's jobs: higher first, equal in submission order
    /// (within [`PRIORITY_RANGE`], default 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i32,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// Operator actions that need a signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum JobKind {
    /// Restore a guest from a backup over its current state.
    RestoreNow,
    /// Destroy a guest and its data.
    Decommission,
    /// Detach a storage target: its Proxmox storage removed, the data left on the target.
    StorageDetach,
    /// Back up a guest now.
    ForceBackup,
    /// Open the break-glass support path.
    BreakGlassEnable,
    /// Update the agent to a given version.
    AgentUpdate,
    /// Have one guest's controller run the image `params.digest` (snapshot first, roll back
    /// when it does not report healthy in time).
    ControllerUpdate,
    /// Close the break-glass support path before its expiry.
    BreakGlassDisable,
    /// Bring a container that was on the node before Bosun under Bosun: it gets a guest id
    /// and the agent's identity, and is a provisioned guest from then on
    /// ([`crate::adopt::AdoptParams`] says what the signature pins).
    Adopt,
    /// Wipe a storage target: delete the archives this host recorded writing to it (and
    /// nothing else on it) before the target is detached.
    StorageWipe,
    /// Put one bulk volume's archive back into the volume (decision 0108): `params.volume`,
    /// optionally `params.archive` (default: the newest the host's journal recorded). The
    /// archive's path, size and SHA-256 are the journal's, never the job's.
    RestoreBulk,
}

impl JobKind {
    /// Every kind, in the order `bosunctl` lists them.
    pub const ALL: [JobKind; 11] = [
        Self::RestoreNow,
        Self::Decommission,
        Self::StorageDetach,
        Self::StorageWipe,
        Self::ForceBackup,
        Self::BreakGlassEnable,
        Self::BreakGlassDisable,
        Self::AgentUpdate,
        Self::ControllerUpdate,
        Self::Adopt,
        Self::RestoreBulk,
    ];

    /// The kind named `name` on the wire (`restore-now`, …).
    pub fn from_wire(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == name)
    }

    /// The wire name, e.g. `restore-now`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RestoreNow => "restore-now",
            Self::Decommission => "decommission",
            Self::StorageDetach => "storage-detach",
            Self::ForceBackup => "force-backup",
            Self::BreakGlassEnable => "break-glass-enable",
            Self::AgentUpdate => "agent-update",
            Self::ControllerUpdate => "controller-update",
            Self::BreakGlassDisable => "break-glass-disable",
            Self::Adopt => "adopt",
            Self::StorageWipe => "storage-wipe",
            Self::RestoreBulk => "restore-bulk",
        }
    }

    /// Whether the job acts on one guest (and so needs `target.guest_id`).
    pub fn needs_guest(self) -> bool {
        matches!(
            self,
            Self::RestoreNow
                | Self::RestoreBulk
                | Self::Decommission
                | Self::ForceBackup
                | Self::ControllerUpdate
                | Self::Adopt
        )
    }

    /// The parameter this kind cannot do without, if any.
    pub fn required_param(self) -> Option<&'static str> {
        match self {
            Self::StorageDetach | Self::StorageWipe => Some("durable_id"),
            Self::AgentUpdate => Some("version"),
            Self::ControllerUpdate => Some(crate::controller::DIGEST_PARAM),
            Self::Adopt => Some(crate::adopt::HOSTNAME_PARAM),
            Self::RestoreBulk => Some(RESTORE_BULK_VOLUME),
            Self::RestoreNow
            | Self::Decommission
            | Self::ForceBackup
            | Self::BreakGlassEnable
            | Self::BreakGlassDisable => None,
        }
    }
}

/// The host (and guest) a job is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct JobTarget {
    /// The host, as enrolled at the hub.
    pub host_id: Uuid,
    /// The guest, for guest jobs.
    #[serde(default)]
    pub guest_id: Option<Uuid>,
    /// The guest's VMID, which the agent cross-checks against `guest_id`.
    #[serde(default)]
    pub vmid: Option<u32>,
}

impl JobDocument {
    /// Checks shape and kind/target consistency (not the signature, not the clock).
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::schema(&self.schema, DOCUMENT_SCHEMA)?;
        if self.job_id.is_nil() {
            return Err(ValidationError::Invalid {
                field: "job_id".into(),
                reason: "the nil UUID is not a job id".into(),
            });
        }
        if self.target.host_id.is_nil() {
            return Err(ValidationError::Invalid {
                field: "target.host_id".into(),
                reason: "the nil UUID is not a host id".into(),
            });
        }
        match (
            self.kind.needs_guest(),
            self.target.guest_id,
            self.target.vmid,
        ) {
            (true, None, _) => {
                return Err(ValidationError::Invalid {
                    field: "target.guest_id".into(),
                    reason: format!("`{}` needs a guest", self.kind.as_str()),
                });
            }
            (true, Some(_), None) => {
                return Err(ValidationError::Invalid {
                    field: "target.vmid".into(),
                    reason: format!("`{}` needs the guest's vmid", self.kind.as_str()),
                });
            }
            (false, Some(_), _) | (false, _, Some(_)) => {
                return Err(ValidationError::Invalid {
                    field: "target.guest_id".into(),
                    reason: format!("`{}` acts on the host, not a guest", self.kind.as_str()),
                });
            }
            _ => {}
        }
        if let Some(vmid) = self.target.vmid {
            validate::range(|| "target.vmid".into(), vmid, 100, 999_999_999)?;
        }
        // `restore-now` without `backup` restores the fastest surviving tier's newest backup;
        // one that names it must name something.
        let optional = (self.kind == JobKind::RestoreNow && self.params.get("backup").is_some())
            .then_some("backup");
        if let Some(param) = self.kind.required_param().or(optional) {
            let present = self
                .params
                .get(param)
                .and_then(serde_json::Value::as_str)
                .is_some_and(|v| !v.trim().is_empty());
            if !present {
                return Err(ValidationError::Invalid {
                    field: format!("params.{param}"),
                    reason: format!("`{}` needs a non-empty string", self.kind.as_str()),
                });
            }
        }
        if self.kind == JobKind::ControllerUpdate {
            let digest = self
                .params
                .get(crate::controller::DIGEST_PARAM)
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default();
            crate::controller::validate_digest("params.digest", digest)?;
        }
        if self.kind == JobKind::BreakGlassEnable {
            crate::break_glass::BreakGlassParams::from_params(&self.params)?;
        }
        if self.kind == JobKind::AgentUpdate {
            crate::update::AgentUpdateParams::from_params(&self.params)?;
        }
        if self.kind == JobKind::Adopt {
            crate::adopt::AdoptParams::from_params(&self.params)?;
        }
        if self.kind == JobKind::RestoreBulk {
            RestoreBulkParams::from_params(&self.params)?;
        }
        validate::ident(|| "nonce".into(), &self.nonce, 128)?;
        if self.nonce.len() < 16 {
            return Err(ValidationError::Invalid {
                field: "nonce".into(),
                reason: "must be at least 16 characters".into(),
            });
        }
        if self.expires_at <= self.not_before {
            return Err(ValidationError::Invalid {
                field: "expires_at".into(),
                reason: "must be after not_before".into(),
            });
        }
        if let Some(timeout) = self.timeout_s {
            validate::range(|| "timeout_s".into(), timeout, MIN_TIMEOUT_S, MAX_TIMEOUT_S)?;
        }
        validate::range(
            || "priority".into(),
            self.priority,
            *PRIORITY_RANGE.start(),
            *PRIORITY_RANGE.end(),
        )?;
        let window = self.expires_at.as_second() - self.not_before.as_second();
        if window > MAX_VALIDITY_HOURS * 3600 {
            return Err(ValidationError::Invalid {
                field: "expires_at".into(),
                reason: format!("validity window exceeds {MAX_VALIDITY_HOURS} hours"),
            });
        }
        Ok(())
    }
}

/// What a `restore-bulk` job names (decision 0108): the volume, and the archive when not
/// the newest the host recorded. Only names: where the archive lies, its size and its
/// SHA-256 come from the agent's own journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreBulkParams {
    /// The guest's bulk volume.
    pub volume: String,
    /// The archive's file name (`bulk-<volume>-<YYYY_MM_DD-HH_MM_SS>.tar`); `None` for the
    /// newest.
    pub archive: Option<String>,
}

impl RestoreBulkParams {
    /// Reads and checks the job's parameters: a volume name, and an archive name of that
    /// volume's shape when one is given; nothing else.
    pub fn from_params(
        params: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Self, ValidationError> {
        if let Some(other) = params
            .keys()
            .find(|k| *k != RESTORE_BULK_VOLUME && *k != RESTORE_BULK_ARCHIVE)
        {
            return Err(ValidationError::Invalid {
                field: format!("params.{other}"),
                reason: "`restore-bulk` takes only `volume` and `archive`".into(),
            });
        }
        let text = |name: &str| match params.get(name) {
            None => Ok(None),
            Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(ValidationError::Invalid {
                field: format!("params.{name}"),
                reason: "expected a string".into(),
            }),
        };
        let volume = text(RESTORE_BULK_VOLUME)?.unwrap_or_default();
        crate::desired::check_volume_name(&volume, &|| "params.volume".into())?;
        let archive = text(RESTORE_BULK_ARCHIVE)?;
        if let Some(name) = &archive
            && !crate::helper::is_bulk_archive_name(&volume, name)
        {
            return Err(ValidationError::Invalid {
                field: "params.archive".into(),
                reason: format!(
                    "not an archive name of volume {volume:?} (bulk-{volume}-<YYYY_MM_DD-HH_MM_SS>.tar)"
                ),
            });
        }
        Ok(Self { volume, archive })
    }
}

/// A signed job as it travels: the exact signed bytes and the armored SSH signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SignedJob {
    /// Always [`ENVELOPE_SCHEMA`].
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::openapi::job_envelope))]
    pub schema: String,
    /// The signed document bytes, standard base64.
    pub document: String,
    /// The armored signature (`-----BEGIN SSH SIGNATURE-----` ...).
    pub signature: String,
}

impl SignedJob {
    /// Wraps the exact bytes that were signed and their armored signature.
    pub fn new(document: &[u8], signature: &str) -> Self {
        Self {
            schema: ENVELOPE_SCHEMA.to_owned(),
            document: STANDARD.encode(document),
            signature: signature.to_owned(),
        }
    }

    /// The exact signed bytes.
    pub fn document_bytes(&self) -> Result<Vec<u8>, ValidationError> {
        let bytes =
            STANDARD
                .decode(self.document.as_bytes())
                .map_err(|e| ValidationError::Invalid {
                    field: "document".into(),
                    reason: format!("not standard base64: {e}"),
                })?;
        if bytes.len() > MAX_DOCUMENT_BYTES {
            return Err(ValidationError::TooLong {
                field: "document".into(),
                len: bytes.len(),
                max: MAX_DOCUMENT_BYTES,
            });
        }
        Ok(bytes)
    }

    /// Decodes and validates the signed document. This does **not** verify the signature.
    pub fn parse_document(&self) -> Result<JobDocument, ValidationError> {
        let bytes = self.document_bytes()?;
        let doc: JobDocument =
            serde_json::from_slice(&bytes).map_err(|e| ValidationError::Invalid {
                field: "document".into(),
                reason: format!("not a bosun.job/v1 document: {e}"),
            })?;
        doc.validate()
            .map_err(|e| crate::validate::prefix("document", e))?;
        Ok(doc)
    }

    /// Checks the envelope and the document's shape (not the signature).
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::schema(&self.schema, ENVELOPE_SCHEMA)?;
        if self.signature.len() > MAX_SIGNATURE_BYTES {
            return Err(ValidationError::TooLong {
                field: "signature".into(),
                len: self.signature.len(),
                max: MAX_SIGNATURE_BYTES,
            });
        }
        let armored = self.signature.trim();
        if !(armored.starts_with(ARMOR_BEGIN) && armored.ends_with(ARMOR_END)) {
            return Err(ValidationError::Invalid {
                field: "signature".into(),
                reason: "expected an armored SSH signature (ssh-keygen -Y sign)".into(),
            });
        }
        self.parse_document().map(|_| ())
    }
}

/// How a job ended on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum JobOutcome {
    /// Ran and succeeded.
    Succeeded,
    /// Ran and failed.
    Failed,
    /// Refused before running (bad signature, expired, replayed, wrong host...).
    Rejected,
}

/// The agent's report on a job (tolerant of unknown fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobResult {
    /// Always [`RESULT_SCHEMA`].
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::openapi::job_result))]
    pub schema: String,
    /// The job.
    pub job_id: Uuid,
    /// How it ended.
    pub outcome: JobOutcome,
    /// When it ended.
    pub finished_at: Timestamp,
    /// Short human detail (rejection reason, error).
    #[serde(default)]
    pub detail: String,
    /// Structured output, if any.
    #[serde(default)]
    pub output: serde_json::Value,
    /// When the agent began the job (its claim); absent for a job refused before it ran and
    /// from agents that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    /// How long it ran, milliseconds, from `started_at` to `finished_at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Whether the same action, signed again as a new job, may succeed without anything
    /// changing first (a transient failure, a timeout); `retriable_reason` says why or why not.
    #[serde(default)]
    pub retriable: bool,
    /// Why the job is (or is not) worth retrying, in a few words.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub retriable_reason: String,
    /// Whether it ended because its timeout passed (`outcome` is then `failed`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
    /// The last lines of what the job did (its journaled steps), bounded, inert and redacted
    /// ([`crate::job_log`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log_tail: Vec<String>,
}

impl JobResult {
    /// Checks the result.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::schema(&self.schema, RESULT_SCHEMA)?;
        validate::count("detail", self.detail.len(), 4_096)?;
        validate::count(
            "retriable_reason",
            self.retriable_reason.len(),
            MAX_RETRIABLE_REASON,
        )?;
        if !crate::job_log::within_bounds(&self.log_tail) {
            return Err(ValidationError::Invalid {
                field: "log_tail".into(),
                reason: format!(
                    "more than {} lines, {} characters a line or {} bytes, or control characters",
                    crate::job_log::MAX_LINES,
                    crate::job_log::MAX_LINE_CHARS,
                    crate::job_log::MAX_TAIL_BYTES
                ),
            });
        }
        Ok(())
    }

    /// The result with what the agent said bounded again, for a reader that does not trust
    /// the agent's sizes (the hub, before it checks and stores it): the log tail
    /// ([`crate::job_log::bound_tail`]), the retriable reason cut, escaped and redacted, and
    /// a duration that disagrees with `started_at`..`finished_at` dropped.
    pub fn bound(&mut self) {
        self.log_tail = crate::job_log::bound_tail(&self.log_tail);
        let mut reason = crate::job_log::bound_line(&self.retriable_reason);
        while reason.len() > MAX_RETRIABLE_REASON {
            reason.pop();
        }
        self.retriable_reason = reason;
        let span = self
            .started_at
            .map(|start| self.finished_at.as_millisecond() - start.as_millisecond());
        match span {
            Some(ms) if ms >= 0 => {
                self.duration_ms = u64::try_from(ms).ok();
            }
            _ => {
                self.started_at = None;
                self.duration_ms = None;
            }
        }
    }
}
