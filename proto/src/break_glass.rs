//! Break-glass (DESIGN §12): an operator-signed `break-glass-enable` job opens an emergency
//! SSH door for the dedicated account [`BREAK_GLASS_ACCOUNT`] for at most
//! [`MAX_BREAK_GLASS_SECONDS`]; `break-glass-disable` closes it early.
//!
//! The helper writes the operator's key as one `authorized_keys` line carrying OpenSSH's
//! `expiry-time=` option ([`authorized_keys_line`]), so sshd stops accepting it at the
//! deadline even if nothing of Bosun runs any more. The key is parsed and written back in
//! canonical form ([`SshPublicKey`]): nothing the operator (or a hub replaying a document)
//! sends can add options, a second key or a second line.

use std::fmt;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::helper::InvalidArgument;
use crate::validate::ValidationError;

/// The account the door opens (created by the package; sshd maps it to the helper's file).
pub const BREAK_GLASS_ACCOUNT: &str = "bosun-breakglass";
/// Longest a door may stay open.
pub const MAX_BREAK_GLASS_SECONDS: u64 = 24 * 3600;
/// Shortest door worth opening.
pub const MIN_BREAK_GLASS_SECONDS: u64 = 60;
/// Longest reason kept, in characters.
pub const MAX_REASON_CHARS: usize = 500;
/// Longest public key line accepted, in bytes (an RSA 16384 key is about 2.8 KiB).
pub const MAX_PUBLIC_KEY_BYTES: usize = 4096;
/// The comment every line the helper writes starts with (followed by the job id).
pub const LINE_COMMENT: &str = "bosun-break-glass";
/// The support shell every session through the door runs (decision 0035): the line forces
/// it, so the account runs its closed command set and nothing else.
pub const SUPPORT_SHELL: &str = "/usr/libexec/bosun/bosun-support";

/// One OpenSSH public key (`<algorithm> <base64>`), parsed and re-serialized without its
/// comment. A line with options, two keys, control characters or an algorithm other than
/// Ed25519, ECDSA, RSA (2048 bits or more) or their security-key forms is refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(try_from = "String", into = "String")]
pub struct SshPublicKey {
    canonical: String,
    fingerprint: String,
}

impl SshPublicKey {
    /// Parses `text` (`<algorithm> <base64> [comment]`) and keeps its canonical form.
    pub fn new(text: &str) -> Result<Self, InvalidArgument> {
        let bad = |reason| InvalidArgument {
            what: "ssh public key",
            value: text.chars().take(80).collect(),
            reason,
        };
        if text.len() > MAX_PUBLIC_KEY_BYTES {
            return Err(bad("longer than 4096 bytes"));
        }
        if text.chars().any(crate::inert::is_control) {
            return Err(bad("contains a newline or another control character"));
        }
        let trimmed = text.trim();
        let mut words = trimmed.split(' ').filter(|w| !w.is_empty());
        let (Some(algorithm), Some(_)) = (words.next(), words.next()) else {
            return Err(bad("expected `<algorithm> <base64> [comment]`"));
        };
        // Options come before the algorithm in an authorized_keys line: the first word must
        // be the algorithm itself.
        if algorithm.contains(['=', ',', '"']) {
            return Err(bad("options are not accepted, only the key"));
        }
        let key = ssh_key::PublicKey::from_openssh(trimmed)
            .map_err(|_| bad("not an OpenSSH public key"))?;
        use ssh_key::public::KeyData;
        match key.key_data() {
            KeyData::Ed25519(_) | KeyData::Ecdsa(_) | KeyData::SkEd25519(_) => {}
            KeyData::SkEcdsaSha2NistP256(_) => {}
            KeyData::Rsa(rsa) => {
                let bits = rsa.n.as_positive_bytes().map_or(0, |n| n.len() * 8);
                if bits < 2048 {
                    return Err(bad("an RSA key needs at least 2048 bits"));
                }
            }
            _ => return Err(bad("unsupported key algorithm")),
        }
        let mut bare = key.clone();
        bare.set_comment("");
        let canonical = bare
            .to_openssh()
            .map_err(|_| bad("cannot be written back"))?
            .trim()
            .to_owned();
        if canonical.contains(['\n', '\r']) || canonical.split(' ').count() != 2 {
            return Err(bad("does not re-serialize as one key"));
        }
        let fingerprint = key.fingerprint(ssh_key::HashAlg::Sha256).to_string();
        Ok(Self {
            canonical,
            fingerprint,
        })
    }

    /// `<algorithm> <base64>`, no comment.
    pub fn as_str(&self) -> &str {
        &self.canonical
    }

    /// `SHA256:…`, as `ssh-keygen -l` prints it.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
}

impl TryFrom<String> for SshPublicKey {
    type Error = InvalidArgument;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(&value)
    }
}

impl From<SshPublicKey> for String {
    fn from(value: SshPublicKey) -> String {
        value.canonical
    }
}

impl fmt::Display for SshPublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical)
    }
}

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
