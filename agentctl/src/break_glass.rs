//! `bosun-agentctl break-glass open --file JOB`: the operator's signed `break-glass-enable`,
//! opened from the node's console when the agent's poll loop is wedged (DESIGN §12, decision
//! 0104). The job file and its signature (`JOB.sig`, as `bosunctl job sign` writes it) are read
//! bounded, and handed to the agent's own job runner
//! ([`bosun_agentd::trust::break_glass::console`]): the same signature, expiry, host, nonce and
//! replay checks and the same audit as the job the hub delivers.

use std::io::Read;
use std::path::{Path, PathBuf};

use bosun_agentd::config::AgentConfig;
use bosun_agentd::trust::break_glass::console::{ConsoleError, open_from_console};
use bosun_proto::job::{JobOutcome, JobResult, MAX_DOCUMENT_BYTES, MAX_SIGNATURE_BYTES, SignedJob};

/// `break-glass open`'s arguments.
#[derive(Debug, clap::Args)]
pub struct OpenArgs {
    /// The signed job document (`bosunctl job new --kind break-glass-enable`, then `job sign`).
    #[arg(long, value_name = "JOB")]
    pub file: PathBuf,
    /// Its SSH signature; default: the job file's name with `.sig` added.
    #[arg(long, value_name = "SIG")]
    pub signature: Option<PathBuf>,
}

/// Why the door was not opened.
#[derive(Debug, thiserror::Error)]
pub enum BreakGlassError {
    /// A file could not be read, or is larger than a signed job may be.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The signature file is not text.
    #[error("{path} is not an armored SSH signature (not UTF-8)")]
    NotText {
        /// The file.
        path: PathBuf,
    },
    /// The job could not be handed over.
    #[error(transparent)]
    Console(#[from] ConsoleError),
    /// The agent's checks refused the job (journaled and audited as the hub's refusals are).
    #[error("the job was refused: {detail}")]
    Refused {
        /// The refusal's code and reason.
        detail: String,
    },
    /// The job ran and failed (the helper could not write the door, the deadline passed).
    #[error("opening the door failed: {detail}")]
    Failed {
        /// Why.
        detail: String,
    },
}

impl BreakGlassError {
    /// The exit status: 66 a file unreadable, 64 not a break-glass job, 77 refused by the
    /// checks, 78 the configuration lacks the helper or a valid storage, 75 not enrolled or
    /// the journal busy, 1 the door could not be written.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Read { .. } | Self::NotText { .. } => 66,
            Self::Console(ConsoleError::NotBreakGlass { .. }) => 64,
            Self::Refused { .. } | Self::Console(ConsoleError::AlreadyRun { .. }) => 77,
            Self::Console(
                ConsoleError::NoHelper | ConsoleError::Value { .. } | ConsoleError::Pve(_),
            ) => 78,
            Self::Console(
                ConsoleError::NotEnrolled | ConsoleError::Identity(_) | ConsoleError::Journal(_),
            ) => 75,
            Self::Console(ConsoleError::NoResult) | Self::Failed { .. } => 1,
        }
    }
}

/// Reads the job and its signature and opens the door; gives the job's result when it
/// succeeded.
pub async fn open(config: &AgentConfig, args: &OpenArgs) -> Result<JobResult, BreakGlassError> {
    let document = read_bounded(&args.file, MAX_DOCUMENT_BYTES)?;
    let sig_path = args.signature.clone().unwrap_or_else(|| {
        let mut name = args.file.clone().into_os_string();
        name.push(".sig");
        PathBuf::from(name)
    });
    let signature =
        String::from_utf8(read_bounded(&sig_path, MAX_SIGNATURE_BYTES)?).map_err(|_| {
            BreakGlassError::NotText {
                path: sig_path.clone(),
            }
        })?;
    let signed = SignedJob::new(&document, &signature);
    let handed: std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send + '_>> =
        Box::pin(open_from_console(config, &signed));
    let result = handed.await?;
    match result.outcome {
        JobOutcome::Succeeded => Ok(result),
        JobOutcome::Rejected => Err(BreakGlassError::Refused {
            detail: result.detail,
        }),
        JobOutcome::Failed => Err(BreakGlassError::Failed {
            detail: result.detail,
        }),
    }
}

/// The lines `open` prints for an open door: the account, the key and the deadline.
pub fn describe(result: &JobResult) -> Vec<String> {
    let field = |name: &str| {
        result.output[name]
            .as_str()
            .map(|text| bosun_proto::inert::escape(text).into_owned())
            .unwrap_or_default()
    };
    vec![
        format!("break-glass door open for job {}", result.job_id),
        format!("account: {}", field("account")),
        format!("key: {}", field("fingerprint")),
        format!("closes: {}", field("expires_at")),
    ]
}

/// The file's bytes, at most `max` (a larger file is refused, never read whole).
fn read_bounded(path: &Path, max: usize) -> Result<Vec<u8>, BreakGlassError> {
    let error = |source| BreakGlassError::Read {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(error)?;
    let mut bytes = Vec::new();
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    file.take(limit).read_to_end(&mut bytes).map_err(error)?;
    if bytes.len() > max {
        return Err(error(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {max} bytes"),
        )));
    }
    Ok(bytes)
}
