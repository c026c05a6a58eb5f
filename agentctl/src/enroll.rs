//! `bosun-agentctl enroll`: enrolling the box at the hub and making the escrow of its PBS key
//! in one command, run before the agent's first start with the customer present (DESIGN §8a:
//! the recovery code is surfaced to the customer exactly once, at enrollment; decision 0075).
//!
//! ```text
//!  state lock (the agent must not run) ─► enrolled? ─no─► enroll with the token ─┐
//!                                          │yes                                  │
//!                                          ▼◄────────────────────────────────────┘
//!  sealing identity and K made (not on a box taking over a lost host: recover K instead)
//!       ─► an escrow recorded? ─yes─► done; the code is never shown again
//!              │no
//!              ├─ --escrow-later ─► done, deferred: the hub alerts `escrow_missing`
//!              ▼
//!  the hub answers for the host (waits out its approval) ─► `escrow create` ─► the sheet
//! ```
//!
//! Every step is idempotent, so a run that stopped (the hub unreachable, approval not given in
//! time) is finished by running the same command again: it enrolls once and prints a code
//! once.

use std::path::PathBuf;
use std::time::Duration;

use bosun_agentd::AgentError;
use bosun_agentd::config::AgentConfig;
use bosun_agentd::links::hub_client::client::HubClientError;
use bosun_agentd::links::hub_client::identity::{HostIdentity, IdentityError};
use bosun_agentd::runtime::state_lock::{LockError, StateLock};
use bosun_agentd::trust::keys::pbs_key::{PbsKeyError, PbsKeySource};
use bosun_agentd::trust::keys::sealing::{SealingError, StorageIdentity};
use jiff::Timestamp;
use uuid::Uuid;

use crate::escrow::command::{self, EscrowError, SheetOptions};
use crate::escrow::record;

/// How often the hub is asked again while the host waits for approval.
const APPROVAL_POLL: Duration = Duration::from_secs(2);

/// What `enroll` is asked to do.
#[derive(Debug, Clone)]
pub struct EnrollOptions {
    /// The sheet to print (`None`: `--escrow-later`, no escrow now).
    pub sheet: Option<SheetOptions>,
    /// How long to wait for an operator to approve the host before the escrow can be stored.
    pub approval_wait: Duration,
}

/// What the escrow stands at when `enroll` ends.
#[derive(Debug)]
pub enum EscrowOutcome {
    /// Made now: the sheet holds the code.
    Made {
        /// The sheet's PDF.
        sheet: PathBuf,
        /// K's fingerprint.
        fingerprint: String,
    },
    /// Made before (an earlier run, or `escrow create`): its code is not shown again.
    Exists {
        /// The wrapped key's fingerprint.
        fingerprint: String,
        /// When it was made.
        created_at: Timestamp,
    },
    /// `--escrow-later`: none yet.
    Deferred,
    /// The box took over a lost host: K comes back with `escrow recover`.
    RestoreMode {
        /// The lost host's name.
        replaces: String,
    },
}

/// What `enroll` did.
#[derive(Debug)]
pub struct Enrolled {
    /// The host's id at the hub.
    pub host_id: Uuid,
    /// Whether this run enrolled it (else it was enrolled before).
    pub enrolled_now: bool,
    /// What operators seal to (`bosunctl hosts approve --recipient`).
    pub recipient: String,
    /// Where the escrow stands.
    pub escrow: EscrowOutcome,
}

/// Why `enroll` did not finish. Running it again resumes.
#[derive(Debug, thiserror::Error)]
pub enum EnrollError {
    /// The agent (or another command) holds the state directory.
    #[error(
        "the agent runs (or another bosun-agentctl command): stop bosun-agentd, enroll, then start it"
    )]
    Locked(#[source] LockError),
    /// The state directory could not be made or locked.
    #[error("the state directory {path}")]
    StateDir {
        /// The directory.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Reading the host identity failed.
    #[error("reading the host identity")]
    Identity(#[source] IdentityError),
    /// Enrolling at the hub failed.
    #[error("enrolling at the hub")]
    Enroll(#[source] Box<AgentError>),
    /// The sealing identity could not be made.
    #[error("making the host's sealing identity")]
    Sealing(#[source] SealingError),
    /// K could not be made.
    #[error("making the PBS encryption key")]
    Key(#[source] PbsKeyError),
    /// The hub could not be asked about the host.
    #[error("the host {host_id} is enrolled; asking the hub whether it is approved failed")]
    Hub {
        /// The host.
        host_id: Uuid,
        /// Cause.
        #[source]
        source: HubClientError,
    },
    /// The host was not approved in time.
    #[error(
        "the host {host_id} is enrolled but waits for approval (`bosunctl hosts approve {host_id} \
         --recipient {recipient}`); the escrow is stored once it is approved: run \
         `bosun-agentctl enroll` again then"
    )]
    PendingApproval {
        /// The host.
        host_id: Uuid,
        /// Its sealing recipient.
        recipient: String,
    },
    /// Making the escrow failed.
    #[error(
        "the host {host_id} is enrolled but its escrow was not made; run `bosun-agentctl enroll` \
         again to finish"
    )]
    Escrow {
        /// The host.
        host_id: Uuid,
        /// Cause (boxed: the error stays small).
        #[source]
        source: Box<EscrowError>,
    },
}

impl EnrollError {
    /// The process exit code: 75 (EX_TEMPFAIL) while the agent runs or the host waits for
    /// approval, 69 (EX_UNAVAILABLE) when the hub cannot be reached, the escrow's own codes,
    /// 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Locked(_) | Self::PendingApproval { .. } => 75,
            Self::Hub { .. } => 69,
            Self::Escrow { source, .. } => source.exit_code(),
            _ => 1,
        }
    }
}

/// `enroll`.
pub async fn enroll(
    config: &AgentConfig,
    options: &EnrollOptions,
    hostname: &str,
) -> Result<Enrolled, EnrollError> {
    let _lock = lock(&config.state_dir)?;
    let (identity, enrolled_now) =
        match HostIdentity::load(&config.state_dir).map_err(EnrollError::Identity)? {
            Some(identity) => (identity, false),
            None => (
                bosun_agentd::runtime::enroll_host(config)
                    .await
                    .map_err(|e| EnrollError::Enroll(Box::new(e)))?,
                true,
            ),
        };
    let recipient = StorageIdentity::load_or_create(&config.state_dir)
        .map_err(EnrollError::Sealing)?
        .recipient();
    PbsKeySource::new(&config.state_dir, identity.replaces.is_none())
        .load()
        .map_err(EnrollError::Key)?;
    let enrolled = |escrow| Enrolled {
        host_id: identity.host_id,
        enrolled_now,
        recipient: recipient.clone(),
        escrow,
    };
    if let Some(replaces) = &identity.replaces {
        return Ok(enrolled(EscrowOutcome::RestoreMode {
            replaces: replaces.clone(),
        }));
    }
    let escrow_err = |source| EnrollError::Escrow {
        host_id: identity.host_id,
        source: Box::new(source),
    };
    if let Some(r) =
        record::load(&config.state_dir).map_err(|e| escrow_err(EscrowError::Record(e)))?
    {
        return Ok(enrolled(EscrowOutcome::Exists {
            fingerprint: r.key_fingerprint,
            created_at: r.created_at,
        }));
    }
    let Some(sheet) = &options.sheet else {
        return Ok(enrolled(EscrowOutcome::Deferred));
    };
    approved(config, &identity, &recipient, options.approval_wait).await?;
    let created = command::create(config, sheet, hostname)
        .await
        .map_err(escrow_err)?;
    Ok(enrolled(EscrowOutcome::Made {
        sheet: created.sheet,
        fingerprint: created.fingerprint,
    }))
}

/// The state directory (made 0700 when missing, as the daemon does), locked.
fn lock(state_dir: &std::path::Path) -> Result<StateLock, EnrollError> {
    use std::os::unix::fs::DirBuilderExt as _;
    let dir_err = |source| EnrollError::StateDir {
        path: state_dir.to_owned(),
        source,
    };
    if !state_dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(state_dir)
            .map_err(dir_err)?;
    }
    StateLock::exclusive(state_dir).map_err(|e| match e {
        LockError::Held { .. } => EnrollError::Locked(e),
        LockError::Open { source, .. } => dir_err(source),
    })
}

/// Waits until the hub answers for the host (it stores an escrow only for an approved host),
/// at most `wait`.
async fn approved(
    config: &AgentConfig,
    identity: &HostIdentity,
    recipient: &str,
    wait: Duration,
) -> Result<(), EnrollError> {
    let hub_err = |source| EnrollError::Hub {
        host_id: identity.host_id,
        source,
    };
    let hub = bosun_agentd::links::hub_client::client::HubClient::with_trust(
        config.hub.url.clone(),
        &config.hub.trust,
    )
    .map_err(hub_err)?;
    let deadline = tokio::time::Instant::now() + wait;
    let mut told = false;
    loop {
        match hub
            .escrow(identity.host_id, &identity.host_key.presented())
            .await
        {
            Ok(_) => return Ok(()),
            Err(HubClientError::Status { status: 403, .. }) => {}
            Err(e) => return Err(hub_err(e)),
        }
        if tokio::time::Instant::now() + APPROVAL_POLL > deadline {
            return Err(EnrollError::PendingApproval {
                host_id: identity.host_id,
                recipient: recipient.to_owned(),
            });
        }
        if !told {
            told = true;
            eprintln!(
                "waiting for approval: bosunctl hosts approve {} --recipient {recipient}",
                identity.host_id
            );
        }
        tokio::time::sleep(APPROVAL_POLL).await;
    }
}
