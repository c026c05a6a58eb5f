//! The helper's one error type and its mapping to a [`Response`].

use std::io;
use std::path::PathBuf;

use bosun_errchain::error_chain;
use bosun_proto::helper::{Refusal, Response};

use crate::config::ConfigError;

/// Everything that can stop a helper call.
#[derive(Debug, thiserror::Error)]
pub enum HelperError {
    /// The command line is not `--socket` or one verb name.
    #[error("usage: bosun-helper --socket | bosun-helper <verb> (got {args:?})")]
    Usage {
        /// The arguments after the program name.
        args: Vec<String>,
    },
    /// The helper is not running as root.
    #[error("the helper must run as root (euid {euid})")]
    NotRoot {
        /// Effective uid found.
        euid: u32,
    },
    /// The configuration could not be loaded.
    #[error("loading the helper configuration")]
    Config {
        /// Cause.
        #[source]
        source: ConfigError,
    },
    /// The caller's identity could not be established.
    #[error("identifying the caller over {transport}")]
    CallerUnknown {
        /// `socket` or `sudo`.
        transport: &'static str,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// The caller is not the agent user.
    #[error("caller uid {uid} over {transport} is not the agent user (uid {expected})")]
    CallerRejected {
        /// `socket` or `sudo`.
        transport: &'static str,
        /// The caller's uid.
        uid: u32,
        /// The agent's uid.
        expected: u32,
    },
    /// The request did not fit the size limit.
    #[error("request exceeds {limit} bytes")]
    Oversized {
        /// The limit.
        limit: usize,
    },
    /// Reading the request failed.
    #[error("reading the request")]
    ReadRequest {
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// The request is not one valid JSON request.
    #[error("parsing the request")]
    ParseRequest {
        /// Cause.
        #[source]
        source: serde_json::Error,
    },
    /// Bytes followed the request's terminating newline.
    #[error("trailing data after the request")]
    TrailingData,
    /// The sudo transport's verb and the request's verb differ.
    #[error("request verb {request} does not match the command-line verb {argv}")]
    VerbMismatch {
        /// Verb in the JSON.
        request: &'static str,
        /// Verb on the command line.
        argv: &'static str,
    },
    /// The request's verb (first) belongs to another socket unit than the one it arrived at
    /// (second).
    #[error("verb {0} does not run under {1}@.service (decision 0071)")]
    WrongUnit(&'static str, &'static str),
    /// Two mount options contradict each other.
    #[error("mount options {first} and {second} exclude each other")]
    ConflictingOptions {
        /// One option.
        first: &'static str,
        /// The other.
        second: &'static str,
    },
    /// Dropping to the verb's capabilities failed.
    #[error("dropping capabilities for {verb}")]
    DropCaps {
        /// The verb.
        verb: &'static str,
        /// Cause.
        #[source]
        source: caps::errors::CapsError,
    },
    /// A step of the fixed call sequence failed (closing descriptors, `no_new_privs`,
    /// reading our own status, writing the answer).
    #[error("{step}")]
    Setup {
        /// Which step.
        step: &'static str,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// A path has a symlink component, leaves its root or has the wrong type.
    #[error("unsafe path {path}")]
    UnsafePath {
        /// The path.
        path: PathBuf,
        /// Cause (`ELOOP`, `EXDEV`, `ENOTDIR`, ...).
        #[source]
        source: io::Error,
    },
    /// Something the request names does not exist.
    #[error("{what} {name} not found")]
    NotFound {
        /// Kind of thing.
        what: &'static str,
        /// Its name or path.
        name: String,
    },
    /// A UUID matches more than one block device.
    #[error("uuid {uuid} matches several devices: {devices:?}")]
    AmbiguousUuid {
        /// The UUID.
        uuid: String,
        /// All matches.
        devices: Vec<String>,
    },
    /// The device holds another filesystem than requested.
    #[error("device {device} holds {found:?}, not {expected}")]
    FsTypeMismatch {
        /// The device.
        device: String,
        /// What blkid reported.
        found: Option<String>,
        /// What was requested.
        expected: &'static str,
    },
    /// The device holding the filesystem is not a disk `mount_by_uuid` may use.
    #[error("device {device} is not allowed: {reason}")]
    DeviceNotAllowed {
        /// The device.
        device: String,
        /// Which check it failed.
        reason: String,
    },
    /// A mount target is already a mount point, or an unmount target is not one.
    #[error("{path} is {state}")]
    MountState {
        /// The target.
        path: PathBuf,
        /// `already a mount point` or `not a mount point`.
        state: &'static str,
    },
    /// A filesystem operation failed.
    #[error("{op} {path}")]
    Io {
        /// What we were doing.
        op: &'static str,
        /// On what.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// A program could not be started.
    #[error("starting {program}")]
    Spawn {
        /// Absolute path.
        program: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// A program could not be run or waited for.
    #[error("running a program")]
    Exec {
        /// Cause.
        #[source]
        source: bosun_boundexec::ExecError,
    },
    /// A program ran and failed.
    #[error("{program} {args:?} exited with {status}: {stderr}")]
    ProgramFailed {
        /// Absolute path.
        program: PathBuf,
        /// Its arguments.
        args: Vec<String>,
        /// Exit status text.
        status: String,
        /// Last part of its stderr.
        stderr: String,
    },
    /// A program's output could not be understood.
    #[error("unexpected output from {program}: {detail}")]
    ProgramOutput {
        /// Absolute path.
        program: PathBuf,
        /// What was wrong.
        detail: String,
    },
    /// A golden-image step failed (the builder was torn down).
    #[error("golden image step {step} failed")]
    GoldenStep {
        /// Step name.
        step: &'static str,
        /// Cause.
        #[source]
        source: Box<HelperError>,
    },
    /// A break-glass deadline in the past or more than 24 hours ahead.
    #[error("break-glass expiry {expires_at} is not within 24 hours after now (unix {now})")]
    BreakGlassExpiry {
        /// The requested deadline.
        expires_at: String,
        /// The helper's clock, unix seconds.
        now: u64,
    },
    /// The file in the update inbox is not one the helper stages (not a regular file of
    /// the agent user with one link, or too large).
    #[error("update artifact {path}: {reason}")]
    ArtifactRejected {
        /// The inbox file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// A file's bytes do not hash to the digest an operator signed.
    #[error("{what} hashes to {found}, not the signed {expected}")]
    DigestMismatch {
        /// The file (`update artifact`, `controller image archive`).
        what: &'static str,
        /// The digest asked for.
        expected: String,
        /// The digest of the bytes read.
        found: String,
    },
    /// A guest-entering verb on a guest without this host's valid stamp, or `push_bootstrap`
    /// of another guest's document (decision 0048).
    #[error("guest {vmid} is not one the helper may enter: {reason}")]
    NotOurGuest {
        /// The guest.
        vmid: u32,
        /// What is missing or wrong.
        reason: String,
    },
    /// Another update is on trial (the gate has not decided), or the slots are not laid out.
    #[error("agent update: {detail}")]
    UpdateConflict {
        /// What stands in the way.
        detail: String,
    },
}

/// A `map_err` adapter: filesystem call `op` on `path` failed.
pub fn io_error<E: Into<io::Error>>(
    op: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(E) -> HelperError {
    let path = path.into();
    move |e| HelperError::Io {
        op,
        path,
        source: e.into(),
    }
}

impl HelperError {
    /// Wraps a path-resolution error: symlinks, escapes and wrong types become
    /// [`HelperError::UnsafePath`], a missing entry [`HelperError::NotFound`].
    pub fn resolve(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        let path = path.into();
        match source.raw_os_error() {
            Some(libc::ELOOP | libc::EXDEV | libc::ENOTDIR) => Self::UnsafePath { path, source },
            Some(libc::ENOENT) => Self::NotFound {
                what: "path",
                name: path.display().to_string(),
            },
            _ => Self::Io { op, path, source },
        }
    }

    /// The refusal category, or `None` when the verb started and failed.
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            Self::CallerUnknown { .. } | Self::CallerRejected { .. } => Some(Refusal::Caller),
            Self::Oversized { .. } => Some(Refusal::Oversized),
            Self::Usage { .. }
            | Self::ReadRequest { .. }
            | Self::ParseRequest { .. }
            | Self::TrailingData
            | Self::VerbMismatch { .. }
            | Self::WrongUnit(..)
            | Self::ConflictingOptions { .. }
            | Self::BreakGlassExpiry { .. } => Some(Refusal::Malformed),
            Self::UnsafePath { .. } => Some(Refusal::UnsafePath),
            Self::DeviceNotAllowed { .. } => Some(Refusal::DeviceNotAllowed),
            Self::NotFound { .. } => Some(Refusal::NotFound),
            Self::AmbiguousUuid { .. }
            | Self::FsTypeMismatch { .. }
            | Self::MountState { .. }
            | Self::ArtifactRejected { .. }
            | Self::DigestMismatch { .. }
            | Self::NotOurGuest { .. }
            | Self::UpdateConflict { .. } => Some(Refusal::Conflict),
            _ => None,
        }
    }

    /// The response the caller gets.
    pub fn to_response(&self) -> Response {
        let message = error_chain(self);
        match self.refusal() {
            Some(reason) => Response::Refused { reason, message },
            None => Response::Failed { message },
        }
    }
}
