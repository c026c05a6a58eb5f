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
    /// (`.0`: the arguments after the program name)
    #[error("usage: bosun-helper --socket | bosun-helper <verb> (got {0:?})")]
    Usage(Vec<String>),
    /// The helper is not running as root.
    /// (`.0`: effective uid found)
    #[error("the helper must run as root (euid {0})")]
    NotRoot(u32),
    /// The configuration could not be loaded.
    #[error("loading the helper configuration")]
    Config(#[source] ConfigError),
    /// The caller's identity could not be established.
    /// (`.0`: `socket` or `sudo`; `.1`: cause)
    #[error("identifying the caller over {0}")]
    CallerUnknown(&'static str, #[source] io::Error),
    /// The caller is not the agent user.
    /// (`.0`: `socket` or `sudo`; `.1`: the caller's uid; `.2`: the agent's uid)
    #[error("caller uid {1} over {0} is not the agent user (uid {2})")]
    CallerRejected(&'static str, u32, u32),
    /// The request did not fit the size limit.
    /// (`.0`: the limit)
    #[error("request exceeds {0} bytes")]
    Oversized(usize),
    /// Reading the request failed.
    #[error("reading the request")]
    ReadRequest(#[source] io::Error),
    /// The request is not one valid JSON request.
    #[error("parsing the request")]
    ParseRequest(#[source] serde_json::Error),
    /// Bytes followed the request's terminating newline.
    #[error("trailing data after the request")]
    TrailingData,
    /// The sudo transport's verb and the request's verb differ.
    /// (`.0`: verb in the JSON; `.1`: verb on the command line)
    #[error("request verb {0} does not match the command-line verb {1}")]
    VerbMismatch(&'static str, &'static str),
    /// The request's verb (first) belongs to another socket unit than the one it arrived at
    /// (second).
    #[error("verb {0} does not run under {1}@.service (decision 0071)")]
    WrongUnit(&'static str, &'static str),
    /// Two mount options contradict each other.
    /// (`.0`: one option; `.1`: the other)
    #[error("mount options {0} and {1} exclude each other")]
    ConflictingOptions(&'static str, &'static str),
    /// Dropping to the verb's capabilities failed.
    /// (`.0`: the verb; `.1`: cause)
    #[error("dropping capabilities for {0}")]
    DropCaps(&'static str, #[source] caps::errors::CapsError),
    /// A step of the fixed call sequence failed (closing descriptors, `no_new_privs`,
    /// reading our own status, writing the answer).
    /// (`.0`: which step; `.1`: cause)
    #[error("{0}")]
    Setup(&'static str, #[source] io::Error),
    /// A path has a symlink component, leaves its root or has the wrong type.
    /// (`.0`: the path; `.1`: cause (`ELOOP`, `EXDEV`, `ENOTDIR`, ...))
    #[error("unsafe path {0}")]
    UnsafePath(PathBuf, #[source] io::Error),
    /// Something the request names does not exist.
    /// (`.0`: kind of thing; `.1`: its name or path)
    #[error("{0} {1} not found")]
    NotFound(&'static str, String),
    /// A UUID matches more than one block device.
    /// (`.0`: the UUID; `.1`: all matches)
    #[error("uuid {0} matches several devices: {1:?}")]
    AmbiguousUuid(String, Vec<String>),
    /// The device holds another filesystem than requested.
    /// (`.0`: the device; `.1`: what blkid reported; `.2`: what was requested)
    #[error("device {0} holds {1:?}, not {2}")]
    FsTypeMismatch(String, Option<String>, &'static str),
    /// The device holding the filesystem is not a disk `mount_by_uuid` may use.
    /// (`.0`: the device; `.1`: which check it failed)
    #[error("device {0} is not allowed: {1}")]
    DeviceNotAllowed(String, String),
    /// A mount target is already a mount point, or an unmount target is not one.
    /// (`.0`: the target; `.1`: `already a mount point` or `not a mount point`)
    #[error("{0} is {1}")]
    MountState(PathBuf, &'static str),
    /// A filesystem operation failed.
    /// (`.0`: what we were doing; `.1`: on what; `.2`: cause)
    #[error("{0} {1}")]
    Io(&'static str, PathBuf, #[source] io::Error),
    /// A program could not be started.
    /// (`.0`: absolute path; `.1`: cause)
    #[error("starting {0}")]
    Spawn(PathBuf, #[source] io::Error),
    /// A program could not be run or waited for.
    #[error("running a program")]
    Exec(#[source] bosun_boundexec::ExecError),
    /// A program ran and failed.
    /// (`.0`: absolute path; `.1`: its arguments; `.2`: exit status text; `.3`: the last part
    /// of its stderr)
    #[error("{0} {1:?} exited with {2}: {3}")]
    ProgramFailed(PathBuf, Vec<String>, String, String),
    /// A program's output could not be understood.
    /// (`.0`: absolute path; `.1`: what was wrong)
    #[error("unexpected output from {0}: {1}")]
    ProgramOutput(PathBuf, String),
    /// A golden-image step failed (the builder was torn down).
    /// (`.0`: step name; `.1`: cause)
    #[error("golden image step {0} failed")]
    GoldenStep(&'static str, #[source] Box<HelperError>),
    /// A break-glass deadline in the past or more than 24 hours ahead.
    /// (`.0`: the requested deadline; `.1`: the helper's clock, unix seconds)
    #[error("break-glass expiry {0} is not within 24 hours after now (unix {1})")]
    BreakGlassExpiry(String, u64),
    /// The file in the update inbox is not one the helper stages (not a regular file of
    /// the agent user with one link, or too large).
    /// (`.0`: the inbox file; `.1`: what was wrong)
    #[error("update artifact {0}: {1}")]
    ArtifactRejected(PathBuf, String),
    /// A file's bytes do not hash to the digest an operator signed.
    /// Fields: `.0`: the file (`update artifact`, `controller image archive`); `.1`: the digest asked for; `.2`: the digest of the bytes read.
    #[error("{0} hashes to {2}, not the signed {1}")]
    DigestMismatch(&'static str, String, String),
    /// A guest-entering verb on a guest without this host's valid stamp, or `push_bootstrap`
    /// of another guest's document (decision 0048).
    /// (`.0`: the guest; `.1`: what is missing or wrong)
    #[error("guest {0} is not one the helper may enter: {1}")]
    NotOurGuest(u32, String),
    /// Another update is on trial (the gate has not decided), or the slots are not laid out.
    /// (`.0`: what stands in the way)
    #[error("agent update: {0}")]
    UpdateConflict(String),
}

/// A `map_err` adapter: filesystem call `op` on `path` failed.
pub fn io_error<E: Into<io::Error>>(
    op: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(E) -> HelperError {
    let path = path.into();
    move |e| HelperError::Io(op, path, e.into())
}

impl HelperError {
    /// [`HelperError::Setup`] at `step`, for `map_err`.
    pub fn setup<E: Into<io::Error>>(step: &'static str) -> impl FnOnce(E) -> Self {
        move |e| Self::Setup(step, e.into())
    }

    /// [`HelperError::NotFound`]: no `what` named `name`.
    pub fn not_found(what: &'static str, name: impl std::fmt::Display) -> Self {
        let name = name.to_string();
        Self::NotFound(what, name)
    }

    /// Wraps a path-resolution error: symlinks, escapes and wrong types become
    /// [`HelperError::UnsafePath`], a missing entry [`HelperError::NotFound`].
    pub fn resolve(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        let path = path.into();
        match source.raw_os_error() {
            Some(libc::ELOOP | libc::EXDEV | libc::ENOTDIR) => Self::UnsafePath(path, source),
            Some(libc::ENOENT) => Self::NotFound("path", path.display().to_string()),
            _ => Self::Io(op, path, source),
        }
    }

    /// The refusal category, or `None` when the verb started and failed.
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            Self::CallerUnknown(..) | Self::CallerRejected(..) => Some(Refusal::Caller),
            Self::Oversized(..) => Some(Refusal::Oversized),
            Self::Usage(..)
            | Self::ReadRequest(_)
            | Self::ParseRequest(_)
            | Self::TrailingData
            | Self::VerbMismatch(..)
            | Self::WrongUnit(..)
            | Self::ConflictingOptions(..)
            | Self::BreakGlassExpiry(..) => Some(Refusal::Malformed),
            Self::UnsafePath(..) => Some(Refusal::UnsafePath),
            Self::DeviceNotAllowed(..) => Some(Refusal::DeviceNotAllowed),
            Self::NotFound(..) => Some(Refusal::NotFound),
            Self::AmbiguousUuid(..)
            | Self::FsTypeMismatch(..)
            | Self::MountState(..)
            | Self::ArtifactRejected(..)
            | Self::DigestMismatch(..)
            | Self::NotOurGuest(..)
            | Self::UpdateConflict(..) => Some(Refusal::Conflict),
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
