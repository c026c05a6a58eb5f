//! `PveError`: every way a PVE call can fail, classified by what the caller may do next.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;

use super::catalogue::Op;
use super::types::{Upid, ValueError, Vmid};

/// A failed PVE operation.
///
/// The classes that matter for retrying:
/// - [`PveError::NotSent`]: the request never reached the server (connect or TLS failure);
///   retry freely.
/// - [`PveError::OutcomeUnknown`]: the request was sent but no answer came back (timeout,
///   connection lost); look at the guest before retrying a mutation.
/// - everything else: the server answered, and the answer was a refusal or a failure.
#[derive(Debug, thiserror::Error)]
pub enum PveError {
    /// A request parameter was rejected before anything was sent.
    #[error("{op}: invalid request parameter `{field}`")]
    InvalidRequest {
        /// The operation.
        op: Op,
        /// The parameter.
        field: &'static str,
        /// Why it is invalid.
        #[source]
        source: ValueError,
    },
    /// The request never reached the server; it is safe to retry.
    #[error("{op}{}: request not sent", guest(*.vmid))]
    NotSent {
        /// The operation.
        op: Op,
        /// The guest, if the call concerned one.
        vmid: Option<Vmid>,
        /// The transport failure.
        #[source]
        source: reqwest::Error,
    },
    /// The request was sent but the answer was lost; look before retrying a mutation.
    #[error("{op}{}: request sent, outcome unknown", guest(*.vmid))]
    OutcomeUnknown {
        /// The operation.
        op: Op,
        /// The guest, if the call concerned one.
        vmid: Option<Vmid>,
        /// The transport failure.
        #[source]
        source: reqwest::Error,
    },
    /// The answer went on past the client's bound ([`crate::RetryPolicy::max_answer_bytes`]);
    /// the rest was not read. The server did answer: a mutation answered with success took
    /// effect, so its outcome counts as unknown to the caller.
    #[error("{op}{}: answer over {limit} bytes; not read", guest(*.vmid))]
    AnswerTooLarge {
        /// The operation.
        op: Op,
        /// The guest, if the call concerned one.
        vmid: Option<Vmid>,
        /// The bound.
        limit: usize,
        /// The answer's HTTP status.
        status: u16,
    },
    /// 401: the token id or secret was refused.
    #[error("{op}: authentication failed (401)")]
    Unauthorized {
        /// The operation.
        op: Op,
    },
    /// 403: the token lacks a privilege, or the action is reserved to `root@pam`.
    #[error("{op}{}: permission denied: {message}", guest(*.vmid))]
    Forbidden {
        /// The operation.
        op: Op,
        /// The guest, if the call concerned one.
        vmid: Option<Vmid>,
        /// The ACL path named in the message (`/vms/100`), if any.
        path: Option<String>,
        /// The missing privilege named in the message (`VM.PowerMgmt`), if any.
        privilege: Option<String>,
        /// The server's message.
        message: String,
    },
    /// 400: parameter verification failed; `errors` maps each parameter to its problem.
    #[error("{op}{}: parameters refused: {message} {errors:?}", guest(*.vmid))]
    BadRequest {
        /// The operation.
        op: Op,
        /// The guest, if the call concerned one.
        vmid: Option<Vmid>,
        /// The server's message.
        message: String,
        /// Per-parameter messages.
        errors: BTreeMap<String, String>,
    },
    /// 501: the server does not know this path or method (an API mismatch).
    #[error("{op}: not implemented by the server: {message}")]
    NotImplemented {
        /// The operation.
        op: Op,
        /// The server's message.
        message: String,
    },
    /// 596 or 503: the server (or the proxy in front of it) is busy or could not reach the
    /// worker.
    #[error("{op}{}: server busy ({status}): {message}", guest(*.vmid))]
    Busy {
        /// The operation.
        op: Op,
        /// The guest, if the call concerned one.
        vmid: Option<Vmid>,
        /// The HTTP status.
        status: u16,
        /// The server's message or reason phrase.
        message: String,
    },
    /// The guest stayed locked (`CT is locked (…)`, `VM is locked (…)` or a config file lock
    /// timeout) for longer than the retry policy waits.
    #[error("{op}{}: guest stayed locked: {message}", guest(*.vmid))]
    Locked {
        /// The operation.
        op: Op,
        /// The guest.
        vmid: Option<Vmid>,
        /// The `lock` value (`backup`, `snapshot`, …) when PVE named it.
        lock: Option<String>,
        /// The server's message.
        message: String,
    },
    /// Any other error answer (mostly 500 from a handler's precondition check).
    #[error("{op}{}: server error {status}: {message}", guest(*.vmid))]
    Api {
        /// The operation.
        op: Op,
        /// The guest, if the call concerned one.
        vmid: Option<Vmid>,
        /// The HTTP status.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// A 200 answer whose body did not have the expected shape.
    #[error("{op}{}: unexpected answer: {body_excerpt}", guest(*.vmid))]
    Decode {
        /// The operation.
        op: Op,
        /// The guest, if the call concerned one.
        vmid: Option<Vmid>,
        /// The first bytes of the body.
        body_excerpt: String,
        /// The decoding failure.
        #[source]
        source: serde_json::Error,
    },
    /// The task ran and ended with an error status.
    #[error("{op}: task {upid} failed: {exitstatus}")]
    TaskFailed {
        /// The operation the task belongs to.
        op: Op,
        /// The task.
        upid: Upid,
        /// The task's exit status (the error message for a failed task).
        exitstatus: String,
        /// The last lines of the task log.
        log_tail: Vec<String>,
    },
    /// The task was still running (or unreachable) when the wait deadline passed.
    #[error("{op}: gave up waiting for task {upid} after {waited_secs}s")]
    TaskWaitTimedOut {
        /// The operation the task belongs to.
        op: Op,
        /// The task.
        upid: Upid,
        /// How long the client waited.
        waited_secs: u64,
        /// The last error seen while polling, if polling failed.
        #[source]
        last_error: Option<Box<PveError>>,
    },
    /// Every id offered by `cluster/nextid` was taken by the time the restore ran.
    #[error("{op}: no free vmid after {attempts} attempts")]
    NoFreeVmid {
        /// The operation.
        op: Op,
        /// How many ids were tried.
        attempts: u32,
    },
    /// A backup task succeeded but its archive could be found neither in the log nor in the
    /// storage listing.
    #[error("{op}: backup of {vmid} by task {upid} left no archive on storage {storage}")]
    BackupArchiveNotFound {
        /// The operation.
        op: Op,
        /// The backed-up guest.
        vmid: Vmid,
        /// The backup task.
        upid: Upid,
        /// Where the archive was expected.
        storage: String,
    },
    /// The client could not be built (TLS material, fingerprint, URL).
    #[error("building the PVE client: {what}")]
    Setup {
        /// What was wrong.
        what: String,
        /// The underlying cause, if any.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

/// ` for guest N`, or nothing when the call concerned no guest.
fn guest(vmid: Option<Vmid>) -> String {
    vmid.map(|v| format!(" for guest {v}")).unwrap_or_default()
}

static PERM_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^Permission check failed \((/[^,\s]*), ([A-Za-z0-9.]+)\)")
        .expect("constant regex is valid")
});
static LOCKED_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:CT|VM) is locked \(([^)]*)\)").expect("constant regex is valid")
});
static FLOCK_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"can't lock file '[^']*' - got timeout").expect("constant regex is valid")
});

/// Splits a 403 message `Permission check failed (/vms/100, VM.PowerMgmt)` into path and
/// privilege. Root-only refusals (`Permission check failed (… only allowed for root@pam)`)
/// carry neither and give `None`.
pub fn parse_permission_message(message: &str) -> Option<(String, String)> {
    let caps = PERM_RE.captures(message.trim())?;
    Some((caps[1].to_owned(), caps[2].to_owned()))
}

/// Recognises PVE's lock-contention messages; gives the `lock` value when one is named.
pub fn parse_lock_message(message: &str) -> Option<Option<String>> {
    if let Some(caps) = LOCKED_RE.captures(message) {
        return Some(Some(caps[1].to_owned()));
    }
    FLOCK_RE.is_match(message).then_some(None)
}

impl PveError {
    /// Whether the same request may be sent again without looking first: it was never sent,
    /// or it only reads.
    pub fn is_retry_safe(&self) -> bool {
        match self {
            Self::NotSent { .. } => true,
            Self::OutcomeUnknown { op, .. } | Self::Busy { op, .. } => {
                op.endpoint().method.is_read_only()
            }
            _ => false,
        }
    }

    /// Whether the client sends the same request again by itself, within its transient bound:
    /// a transient failure that is retry-safe, or a read a handler failed with a 5xx that does
    /// not say the object is missing (a cluster filesystem or daemon hiccup). A read changes
    /// nothing, so asking again costs only the wait, where giving up can roll a whole
    /// provision back; a missing object is an answer, not a hiccup, and is not asked again.
    pub fn is_worth_asking_again(&self) -> bool {
        if self.is_transient() {
            return self.is_retry_safe();
        }
        matches!(self, Self::Api { op, status, .. }
            if *status >= 500 && op.endpoint().method.is_read_only())
            && !self.is_missing()
    }

    /// Whether the request may have had an effect the caller does not know about.
    pub fn is_outcome_unknown(&self) -> bool {
        match self {
            Self::OutcomeUnknown { .. } => true,
            Self::AnswerTooLarge { op, status, .. } => {
                !op.endpoint().method.is_read_only() && (200..300).contains(status)
            }
            _ => false,
        }
    }

    /// Whether this is a transport or busy failure that may clear up on its own.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::NotSent { .. } | Self::OutcomeUnknown { .. } | Self::Busy { .. }
        )
    }

    /// Whether the failure is lock contention (`CT is locked`, config file lock timeout),
    /// whether answered directly or as a task's exit status.
    pub fn is_lock_contention(&self) -> bool {
        match self {
            Self::Locked { .. } => true,
            Self::TaskFailed { exitstatus, .. } => parse_lock_message(exitstatus).is_some(),
            _ => false,
        }
    }

    /// Whether Proxmox said the guest (or the object asked for) does not exist: its message,
    /// or a 404.
    pub fn is_missing(&self) -> bool {
        let text = self.to_string();
        text.contains("does not exist") || text.contains("not exist") || self.status() == Some(404)
    }

    /// Whether Proxmox said the vmid is taken, in any answer or task status.
    pub fn is_already_exists(&self) -> bool {
        self.to_string().contains("already exists")
    }

    /// The operation that failed, where there is one.
    pub fn op(&self) -> Option<Op> {
        match self {
            Self::InvalidRequest { op, .. }
            | Self::NotSent { op, .. }
            | Self::OutcomeUnknown { op, .. }
            | Self::AnswerTooLarge { op, .. }
            | Self::Unauthorized { op }
            | Self::Forbidden { op, .. }
            | Self::BadRequest { op, .. }
            | Self::NotImplemented { op, .. }
            | Self::Busy { op, .. }
            | Self::Locked { op, .. }
            | Self::Api { op, .. }
            | Self::Decode { op, .. }
            | Self::TaskFailed { op, .. }
            | Self::TaskWaitTimedOut { op, .. }
            | Self::NoFreeVmid { op, .. }
            | Self::BackupArchiveNotFound { op, .. } => Some(*op),
            Self::Setup { .. } => None,
        }
    }

    /// The HTTP status of an error answer, if the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Unauthorized { .. } => Some(401),
            Self::Forbidden { .. } => Some(403),
            Self::BadRequest { .. } => Some(400),
            Self::NotImplemented { .. } => Some(501),
            Self::Busy { status, .. } | Self::Api { status, .. } => Some(*status),
            Self::Locked { .. } => Some(500),
            _ => None,
        }
    }

    /// Classifies a non-2xx answer. `reason` is the HTTP reason phrase, used when the body has
    /// no `message` (older servers, or a proxy error).
    pub(crate) fn from_answer(
        op: Op,
        vmid: Option<Vmid>,
        status: u16,
        reason: &str,
        body: &[u8],
    ) -> Self {
        #[derive(serde::Deserialize, Default)]
        struct ErrorBody {
            #[serde(default)]
            message: Option<String>,
            #[serde(default)]
            errors: Option<BTreeMap<String, serde_json::Value>>,
        }
        let parsed: ErrorBody = serde_json::from_slice(body).unwrap_or_default();
        let message = parsed
            .message
            .map(|m| m.trim_end().to_owned())
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| reason.trim().to_owned());
        let errors: BTreeMap<String, String> = parsed
            .errors
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| {
                let text = match v {
                    serde_json::Value::String(s) => s.trim_end().to_owned(),
                    other => other.to_string(),
                };
                (k, text)
            })
            .collect();
        match status {
            401 => Self::Unauthorized { op },
            403 => {
                let (path, privilege) = parse_permission_message(&message).unzip();
                Self::Forbidden {
                    op,
                    vmid,
                    path,
                    privilege,
                    message,
                }
            }
            400 => Self::BadRequest {
                op,
                vmid,
                message,
                errors,
            },
            501 => Self::NotImplemented { op, message },
            503 | 596 => Self::Busy {
                op,
                vmid,
                status,
                message,
            },
            _ => match parse_lock_message(&message) {
                Some(lock) => Self::Locked {
                    op,
                    vmid,
                    lock,
                    message,
                },
                None => Self::Api {
                    op,
                    vmid,
                    status,
                    message,
                },
            },
        }
    }
}
