//! Break-glass (DESIGN §12): an operator-signed `break-glass-enable` job opens an emergency
//! SSH door for the dedicated account [`BREAK_GLASS_ACCOUNT`] for at most
//! [`MAX_BREAK_GLASS_SECONDS`]; `break-glass-disable` closes it early.
//!
//! The helper writes the operator's key as one `authorized_keys` line carrying OpenSSH's
//! `expiry-time=` option ([`authorized_keys_line`]), so sshd stops accepting it at the
//! deadline even if nothing of Bosun runs any more. The key is parsed and written back in
//! canonical form ([`SshPublicKey`]): nothing the operator (or a hub replaying a document)
//! sends can add options, a second key or a second line.

use jiff::Timestamp;

pub use crate::ssh_public_key::{MAX_PUBLIC_KEY_BYTES, SshPublicKey};
use crate::validate::ValidationError;

/// The account the door opens (created by the package; sshd maps it to the helper's file).
pub const BREAK_GLASS_ACCOUNT: &str = "bosun-breakglass";
/// Longest a door may stay open.
pub const MAX_BREAK_GLASS_SECONDS: u64 = 24 * 3600;
/// Shortest door worth opening.
pub const MIN_BREAK_GLASS_SECONDS: u64 = 60;
/// Longest reason kept, in characters.
pub const MAX_REASON_CHARS: usize = 500;
/// The comment every line the helper writes starts with (followed by the job id).
pub const LINE_COMMENT: &str = "bosun-break-glass";
/// The support shell every session through the door runs (decision 0035): the line forces
/// it, so the account runs its closed command set and nothing else.
pub const SUPPORT_SHELL: &str = "/usr/libexec/bosun/bosun-support";

/// The parameters of a `break-glass-enable` job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakGlassParams {
    /// The operator's key.
    pub ssh_public_key: SshPublicKey,
    /// How long the door stays open, in seconds.
    pub duration_seconds: u64,
    /// Why, for the audit trail.
    pub reason: String,
}

impl BreakGlassParams {
    /// Reads and checks `params` of a `break-glass-enable` job: `ssh_public_key` (one
    /// OpenSSH public key), `duration_seconds` (60 to 86 400, a number or its decimal
    /// text) and a non-empty `reason`; nothing else.
    pub fn from_params(
        params: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Self, ValidationError> {
        let invalid = |field: &str, reason: String| ValidationError::Invalid {
            field: format!("params.{field}"),
            reason,
        };
        if let Some(unknown) = params
            .keys()
            .find(|k| !matches!(k.as_str(), "ssh_public_key" | "duration_seconds" | "reason"))
        {
            return Err(invalid(
                &unknown.chars().take(64).collect::<String>(),
                "unknown parameter".into(),
            ));
        }
        let key = params
            .get("ssh_public_key")
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| invalid("ssh_public_key", "needs a string".into()))?;
        let ssh_public_key =
            SshPublicKey::new(key).map_err(|e| invalid("ssh_public_key", e.to_string()))?;
        // A number, or its decimal text (`bosunctl job new --param` writes strings).
        let duration_seconds = params
            .get("duration_seconds")
            .and_then(|v| v.as_u64().or_else(|| v.as_str()?.parse().ok()))
            .ok_or_else(|| invalid("duration_seconds", "needs a whole number".into()))?;
        if !(MIN_BREAK_GLASS_SECONDS..=MAX_BREAK_GLASS_SECONDS).contains(&duration_seconds) {
            return Err(invalid(
                "duration_seconds",
                format!(
                    "must lie between {MIN_BREAK_GLASS_SECONDS} and {MAX_BREAK_GLASS_SECONDS} (24 h)"
                ),
            ));
        }
        let reason = params
            .get("reason")
            .and_then(serde_json::Value::as_str)
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .ok_or_else(|| invalid("reason", "needs a non-empty string".into()))?;
        if reason.chars().count() > MAX_REASON_CHARS || reason.chars().any(crate::inert::is_control)
        {
            return Err(invalid(
                "reason",
                format!("at most {MAX_REASON_CHARS} characters, no control characters"),
            ));
        }
        Ok(Self {
            ssh_public_key,
            duration_seconds,
            reason: reason.to_owned(),
        })
    }
}

/// OpenSSH's `expiry-time` value for `at`: `YYYYMMDDHHMMSSZ` in UTC (sshd(8), AUTHORIZED_KEYS
/// FILE FORMAT: a `YYYYMMDDHHMM[SS]` time, read as UTC with the `Z` suffix).
pub fn openssh_expiry(at: Timestamp) -> String {
    at.strftime("%Y%m%d%H%M%SZ").to_string()
}

/// The one `authorized_keys` line that opens the door for `key` until `expires_at`:
/// `expiry-time="…",restrict,pty,command="<support shell> --session <job_id>" <key>
/// bosun-break-glass <job_id>`. `restrict` turns off forwarding, X11, agent forwarding and
/// `~/.ssh/rc`; `pty` gives the operator a terminal; `command=` runs the support shell
/// whatever the client asks (the client's command reaches it as `SSH_ORIGINAL_COMMAND`),
/// named after the door so every command it records says which door it came through.
pub fn authorized_keys_line(
    key: &SshPublicKey,
    expires_at: Timestamp,
    job_id: uuid::Uuid,
) -> String {
    format!(
        "expiry-time=\"{}\",restrict,pty,command=\"{SUPPORT_SHELL} --session {job_id}\" {} {LINE_COMMENT} {job_id}\n",
        openssh_expiry(expires_at),
        key.as_str()
    )
}

#[cfg(test)]
mod tests;
