//! `bosunctl` errors and the one place that maps them to exit codes.

use std::path::PathBuf;

pub use crate::exit;

/// What went wrong in a `bosunctl` command.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// A required setting is missing.
    #[error("no {setting} configured: pass {flag}, set {env}, or run `bosunctl hub init`")]
    MissingSetting {
        /// The setting.
        setting: &'static str,
        /// Its flag.
        flag: &'static str,
        /// Its environment variable.
        env: &'static str,
    },
    /// The hub's pin is neither a certificate's SHA-256 nor a key pin.
    #[error(
        "fingerprint `{value}` is not a pin: a certificate's SHA-256 (64 hex digits, colons allowed) or a key pin (spki: and 64 hex digits)"
    )]
    BadFingerprint {
        /// What was given.
        value: String,
    },
    /// The hub URL is not https.
    #[error("hub URL `{url}` must start with https://")]
    BadUrl {
        /// What was given.
        url: String,
    },
    /// The config file could not be read or written.
    #[error("config file {path}")]
    ConfigFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file holding an operator token can be read by its group or by others.
    #[error(
        "{what} {} holds an operator token and is readable by others (mode {mode:04o}); \
         run `chmod 600 {}`",
        path.display(),
        path.display()
    )]
    InsecureFile {
        /// `token file` or `config file`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The config file is not valid JSON.
    #[error("config file {path} is not valid")]
    ConfigSyntax {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// A command-line value is invalid.
    #[error("{what}: {reason}")]
    BadArgument {
        /// Which argument.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// An input file could not be read.
    #[error("reading {path}")]
    ReadInput {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An output file could not be written.
    #[error("writing {path}")]
    WriteOutput {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An input file is not the expected JSON.
    #[error("{path} is not a valid {document}")]
    ParseInput {
        /// The file.
        path: PathBuf,
        /// Expected document.
        document: &'static str,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// An input file failed validation.
    #[error("{path} is not a valid {document}")]
    InvalidInput {
        /// The file.
        path: PathBuf,
        /// Expected document.
        document: &'static str,
        /// Which field and why.
        #[source]
        source: bosun_proto::ValidationError,
    },
    /// The request never reached the hub (safe to retry).
    #[error("could not reach the hub at {url} (request not sent)")]
    NotSent {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: reqwest::Error,
    },
    /// The request may have reached the hub but no answer came (look before retrying).
    #[error("no answer from the hub at {url} (request sent, outcome unknown)")]
    OutcomeUnknown {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: reqwest::Error,
    },
    /// The hub answered with an error.
    #[error("hub refused ({status} {code}): {message}{}", request_id.as_ref().map(|id| format!(" [request {id}]")).unwrap_or_default())]
    Hub {
        /// HTTP status.
        status: u16,
        /// The hub's error code.
        code: String,
        /// The hub's message.
        message: String,
        /// The request id, to find it in the hub's log.
        request_id: Option<String>,
    },
    /// The hub's answer could not be decoded.
    #[error("unreadable answer from the hub for {what}")]
    Decode {
        /// What was requested.
        what: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// Writing to stdout failed.
    #[error("writing output")]
    Output(#[source] std::io::Error),
    /// A completion script or man page could not be written.
    #[error("writing the command-line documentation")]
    Docs(#[source] bosun_clidoc::ClidocError),
    /// A rollout names an artifact the hub does not hold: every agent would fail to fetch it.
    #[error(
        "the hub holds no artifact with SHA-256 {sha256}: upload the binary first (`bosunctl artifact upload FILE`) and sign the digest it prints"
    )]
    MissingArtifact {
        /// The digest the rollout's `--param sha256=` names.
        sha256: String,
    },
    /// No host (or guest) has the name given.
    #[error("no {kind} named {name:?} (give its id, or see {})", kind.listing())]
    UnknownName {
        /// What it names.
        kind: NameKind,
        /// The name given.
        name: String,
    },
    /// More than one host (or guest, or job) has the name given, or an id starting with it.
    #[error("{kind} name or id prefix {name:?} is ambiguous: give one of the ids: {candidates}")]
    AmbiguousName {
        /// What it names.
        kind: NameKind,
        /// The name given.
        name: String,
        /// Every match, `id (name)`, comma-separated.
        candidates: String,
    },
    /// A host or guest argument is neither an id nor a possible name.
    #[error("bad {kind}: {reason}")]
    BadName {
        /// What it names.
        kind: NameKind,
        /// Why.
        reason: String,
    },
    /// `desired set --wait`: the host did not apply the generation; `desired diff`: the host
    /// refuses part of it.
    #[error("host {host} did not apply generation {generation}: {reason}")]
    NotApplied {
        /// The host.
        host: uuid::Uuid,
        /// The generation waited for.
        generation: u64,
        /// Timeout or failure, with each guest not applied and the agent's reason.
        reason: String,
    },
    /// `fleet rollout`: a wave failed, so the hosts after it were not touched.
    #[error("rollout stopped: {failed} failed, {skipped} not reached")]
    RolloutStopped {
        /// The hosts that failed, with why.
        failed: String,
        /// How many matching hosts were not reached.
        skipped: usize,
    },
    /// `fleet rollout`: the hub's answer to the selector is not what the operator approved
    /// (more hosts than the bound, a host outside `--hosts`), or the hosts shown were not
    /// confirmed; nothing was signed.
    #[error("rollout not approved, nothing signed: {reason}")]
    NotApproved {
        /// Why.
        reason: String,
    },
    /// `job submit`: the job would be refused (by the hub or the agent), so it was not sent.
    #[error("job not submitted ({reason}): {detail}")]
    JobRefused {
        /// `signature`, `expired` or `target`.
        reason: &'static str,
        /// What exactly, for the operator.
        detail: String,
    },
    /// `status --check` found a host in warning or critical (or could not read the hub): its
    /// line on stdout says which; the exit status is the monitoring-plugin one.
    #[error("status check not ok")]
    CheckNotOk {
        /// 1 WARNING, 2 CRITICAL, 3 UNKNOWN.
        exit: u8,
    },
    /// The file of pinned host recipients could not be read or written.
    #[error("pinned host recipients {path}")]
    KnownRecipients {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `secret seal`: no recipient is pinned for the host; nothing was sealed.
    #[error(
        "no sealing recipient is pinned for host {host}{}: run `sudo -u bosun bosun-agentctl \
         status` on the node's console and pin the recipient it prints with `bosunctl hosts \
         pin-recipient {host} --recipient age1…` (or seal with --recipient); nothing was sealed",
        reported.as_ref().map(|r| format!(" (the hub reports {r}, which alone is not trusted)")).unwrap_or_default()
    )]
    RecipientNotPinned {
        /// The host.
        host: uuid::Uuid,
        /// What the hub reports, if anything.
        reported: Option<String>,
    },
    /// `secret seal`: the hub reports another recipient than the pinned one; nothing was
    /// sealed.
    #[error(
        "host {host}'s sealing recipient changed: pinned {pinned}, but the hub reports \
         {reported}. A box that took over the host has a new one, and so does a hub that lies: \
         compare with `sudo -u bosun bosun-agentctl status` on the node's console, then confirm \
         it with `bosunctl hosts pin-recipient {host} --recipient age1…`; nothing was sealed"
    )]
    RecipientChanged {
        /// The host.
        host: uuid::Uuid,
        /// The recipient the operator pinned.
        pinned: String,
        /// The recipient the hub reports.
        reported: String,
    },
    /// `bosunctl pve check` was given options it cannot use.
    #[error("pve check")]
    PveCheckUsage(#[from] crate::pve_check::PveCheckError),
    /// `bosunctl pve setup` stopped; stdout says what it did before.
    #[error("pve setup")]
    PveSetup(#[from] crate::pve_setup::PveSetupError),
    /// `bosunctl pve check` did not pass; the report on stdout says why and how to fix it.
    #[error("pve check: {summary}")]
    PveCheck {
        /// The exit code ([`crate::pve_check::exit`]).
        exit: u8,
        /// What went wrong, in one line.
        summary: String,
    },
}

impl CtlError {
    /// Whether this is stdout's reader going away (`bosunctl … | head -1`): the command
    /// stops writing and exits 0 without a message, as `cat` or `ls` would in a pipeline.
    pub fn is_closed_pipe(&self) -> bool {
        match self {
            Self::Output(e) => e.kind() == std::io::ErrorKind::BrokenPipe,
            Self::Docs(e) => e.is_closed_pipe(),
            _ => false,
        }
    }

    /// Whether the command already said what went wrong on stdout (`status --check`'s one
    /// line), so nothing more is printed.
    pub fn already_reported(&self) -> bool {
        matches!(self, Self::CheckNotOk { .. })
    }

    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        if self.is_closed_pipe() {
            return exit::OK;
        }
        match self {
            Self::MissingSetting { .. }
            | Self::BadFingerprint { .. }
            | Self::BadUrl { .. }
            | Self::ConfigFile { .. }
            | Self::InsecureFile { .. }
            | Self::ConfigSyntax { .. }
            | Self::KnownRecipients { .. } => exit::CONFIG,
            Self::BadArgument { .. }
            | Self::AmbiguousName { .. }
            | Self::BadName { .. }
            | Self::ReadInput { .. }
            | Self::WriteOutput { .. }
            | Self::Docs(_)
            | Self::ParseInput { .. }
            | Self::InvalidInput { .. }
            | Self::JobRefused { .. }
            | Self::NotApproved { .. } => exit::INPUT,
            Self::NotSent { .. } | Self::OutcomeUnknown { .. } => exit::UNREACHABLE,
            Self::Hub {
                status: 409, code, ..
            } if code == "ambiguous_id" => exit::INPUT,
            Self::Hub { status: 401, .. } => exit::UNAUTHORIZED,
            Self::Hub { status: 404, .. }
            | Self::UnknownName { .. }
            | Self::MissingArtifact { .. } => exit::NOT_FOUND,
            Self::Hub { status, .. } if *status >= 500 => exit::HUB_ERROR,
            Self::Hub { .. } => exit::REFUSED,
            Self::Decode { .. } | Self::Output(_) => exit::HUB_ERROR,
            Self::PveCheckUsage(err) => err.exit_code(),
            Self::PveSetup(err) => err.exit_code(),
            Self::PveCheck { exit, .. } => *exit,
            Self::NotApplied { .. } => exit::NOT_APPLIED,
            Self::RolloutStopped { .. } => exit::ROLLOUT_STOPPED,
            Self::CheckNotOk { exit } => *exit,
            Self::RecipientNotPinned { .. } | Self::RecipientChanged { .. } => {
                exit::RECIPIENT_UNCONFIRMED
            }
        }
    }
}

/// What a command line names by id or name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    /// An enrolled host.
    Host,
    /// A guest of one host.
    Guest,
    /// A job of one host.
    Job,
}

impl NameKind {
    /// The kind as messages name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::Guest => "guest",
            Self::Job => "job",
        }
    }

    /// The command that lists the things of this kind with their ids.
    pub fn listing(self) -> &'static str {
        match self {
            Self::Host => "`bosunctl hosts list`",
            Self::Guest => "the host's guests: `bosunctl desired get HOST`",
            Self::Job => "the host's jobs: `bosunctl job list --host HOST`",
        }
    }
}

impl std::fmt::Display for NameKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
