//! `bosun-agentctl escrow create | rotate | recover | status`: run by the operator on the
//! host, with the customer present.
//!
//! - **create** makes R, wraps the host's keys under it, unwraps its own copy to prove the
//!   words open it, prints the recovery sheet (the only place R ever appears), stores the
//!   blob at the hub and records that the escrow exists. It refuses to run a second time:
//!   that is `rotate` ([`super::rotate`]), which makes a new K for future backups too.
//! - **recover** takes the blob (from the hub, or a file copied off a sheet), reads the 12
//!   words, unwraps, checks the fingerprint and installs every key the blob holds. It never
//!   replaces a key that is not among them.
//!
//! Order matters for what a failure leaves behind. The sheet is printed before anything
//! leaves the box, so a blob the hub holds always has a sheet; when storing it at the hub
//! fails, the sheet is deleted again and nothing is recorded, so the command can simply be
//! run again.

use std::path::PathBuf;

use bosun_proto::escrow::EscrowBlob;
use jiff::Timestamp;

use super::code::{CodeError, RecoveryCode};
use super::record::{self, EscrowRecord, RecordError};
use super::sheet::{self, OlderKey, SheetContent, SheetError};
use super::wrap::{self, WrapError};
use bosun_agentd::config::AgentConfig;
use bosun_agentd::links::hub_client::client::HubClient;
use bosun_agentd::links::hub_client::client::HubClientError;
use bosun_agentd::links::hub_client::identity::{HostIdentity, IdentityError};
use bosun_agentd::links::hub_client::pins::{HubPins, PinsError};
use bosun_agentd::trust::keys::pbs_key::keyring::MAX_KEYS;
use bosun_agentd::trust::keys::pbs_key::{PbsKeyError, PbsKeyring};

/// What `create` and `rotate` are asked to put on the sheet.
#[derive(Debug, Clone)]
pub struct SheetOptions {
    /// Where the PDF goes.
    pub dir: PathBuf,
    /// Print the wrapped blob on the sheet, so recovery works without the hub.
    pub include_blob: bool,
    /// Print K itself on the sheet (single-factor, unrevocable).
    pub paper_key: bool,
    /// The customer the server belongs to.
    pub customer: Option<String>,
    /// The hoster's name, in the sheet's header and steps.
    pub operator: Option<String>,
    /// How to reach the hoster.
    pub operator_contact: Option<String>,
    /// The scrypt work factor (tests lower it).
    pub work_factor: u8,
}

/// Why an escrow command failed. No variant carries the words or the key.
#[derive(Debug, thiserror::Error)]
pub enum EscrowError {
    /// The box has not enrolled.
    #[error(
        "this host has not enrolled at a hub yet: start bosun-agentd once with an enrollment token"
    )]
    NotEnrolled,
    /// Reading the host identity failed.
    #[error("reading the host identity")]
    Identity(#[source] IdentityError),
    /// An escrow exists already.
    #[error(
        "an escrow for key {fingerprint} exists since {created_at}; a new recovery code is made by \
         `bosun-agentctl escrow rotate`"
    )]
    Exists {
        /// The wrapped key's fingerprint.
        fingerprint: String,
        /// When it was made.
        created_at: Timestamp,
    },
    /// `rotate` without an escrow.
    #[error("there is no escrow to rotate: run `bosun-agentctl escrow create` first")]
    NothingToRotate,
    /// K is missing.
    #[error(
        "this host has no PBS encryption key yet{}",
        if *restore_mode { ": it took over a lost host; recover the key with `bosun-agentctl escrow recover`" } else { " (the agent makes it on its first start)" }
    )]
    NoKey {
        /// The box is a replacement.
        restore_mode: bool,
    },
    /// K could not be read or installed.
    #[error("the PBS encryption key")]
    Key(#[source] PbsKeyError),
    /// The words are not a code.
    #[error(transparent)]
    Code(CodeError),
    /// The typed paper key is not one.
    #[error(transparent)]
    PaperKey(super::paper_key::PaperKeyError),
    /// Wrapping or unwrapping failed.
    #[error(transparent)]
    Wrap(WrapError),
    /// The escrow did not open with the words just made: nothing was stored.
    #[error("the new escrow did not unwrap to the same keys; nothing was stored")]
    SelfCheck(#[source] WrapError),
    /// The sheet could not be made: nothing was stored.
    #[error("printing the recovery sheet failed; nothing was stored")]
    Sheet(#[source] SheetError),
    /// The hub call failed.
    #[error("the hub")]
    Hub(#[source] HubClientError),
    /// Storing the new blob at the hub failed: its sheet was deleted, nothing recorded.
    #[error(
        "storing the escrow at the hub failed, so its sheet was deleted and nothing was recorded; \
         run the command again once the hub answers"
    )]
    Store(#[source] HubClientError),
    /// Another K is installed: it is never replaced.
    #[error(
        "{path} already holds another PBS encryption key ({existing}); it is not replaced, and \
         the escrowed key ({offered}) was not installed"
    )]
    KeyInPlace {
        /// The key file.
        path: PathBuf,
        /// The installed key's fingerprint.
        existing: String,
        /// The escrowed key's fingerprint.
        offered: String,
    },
    /// The hub holds no blob.
    #[error(
        "the hub holds no escrow for this host; use the blob printed on the recovery sheet (`--blob FILE`)"
    )]
    NoBlob,
    /// The blob file is unusable.
    #[error("{path}: {reason}")]
    BlobFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The escrow record.
    #[error("the escrow record")]
    Record(#[source] RecordError),
    /// Reading the words failed.
    #[error("reading the recovery code")]
    Input(#[source] std::io::Error),
    /// The agent configuration is unusable for the hub.
    #[error("the hub client")]
    Setup(#[source] HubClientError),
    /// The signed hub pins the agent journaled could not be read.
    #[error("the hub pins the agent holds")]
    Pins(#[source] PinsError),
    /// The wrapped keys are too long to print on the sheet: nothing was stored.
    #[error(
        "the wrapped keys ({keys} of them, {chars} characters) are too long to print on the \
         sheet, so nothing was stored; run the command without --include-blob (recovery then \
         reads the hub's copy, or a copy of it kept as a file)"
    )]
    BlobTooLong {
        /// How many keys are wrapped.
        keys: usize,
        /// The armored block's length.
        chars: usize,
    },
    /// The keyring is full: no rotation can add a key.
    #[error(
        "this host's keyring holds {MAX_KEYS} keys, the most an escrow holds; no further \
         rotation is possible"
    )]
    KeyringFull,
    /// The hub holds the rotated escrow, but switching this host to the new key failed.
    #[error(
        "the hub holds the new escrow, but this host could not switch to the new key; backups \
         stay encrypted with the current key, which the new escrow holds too. Keep the sheet \
         {} until `bosun-agentctl escrow rotate` succeeds",
        sheet.display()
    )]
    Switch {
        /// The new sheet: its words open the hub's blob.
        sheet: PathBuf,
        /// Cause.
        #[source]
        source: PbsKeyError,
    },
}

impl EscrowError {
    /// The process exit code: 65 (EX_DATAERR) for words or a blob that do not fit, 69
    /// (EX_UNAVAILABLE) when the hub cannot be reached, 75 (EX_TEMPFAIL) for a state that
    /// another command changes, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Code(_) | Self::PaperKey(_) | Self::Wrap(_) | Self::BlobFile { .. } => 65,
            Self::Hub(_) | Self::Store(_) | Self::Setup(_) => 69,
            Self::Exists { .. } | Self::NothingToRotate | Self::NotEnrolled | Self::KeyringFull => {
                75
            }
            _ => 1,
        }
    }
}

/// What `create` did.
#[derive(Debug)]
pub struct Created {
    /// The sheet's PDF.
    pub sheet: PathBuf,
    /// K's fingerprint.
    pub fingerprint: String,
}

pub(super) fn identity(config: &AgentConfig) -> Result<HostIdentity, EscrowError> {
    HostIdentity::load(&config.state_dir)
        .map_err(EscrowError::Identity)?
        .ok_or(EscrowError::NotEnrolled)
}

/// The hub, trusted by the pins the agent trusts: `agent.toml`'s and the operator's signed set
/// the agent journaled (so a hub key rotation the agent followed does not lock this out).
pub(super) fn hub(config: &AgentConfig) -> Result<HubClient, EscrowError> {
    let client = HubClient::with_trust(config.hub.url.clone(), &config.hub.trust)
        .map_err(EscrowError::Setup)?;
    HubPins::for_client(&client, config, Timestamp::now()).map_err(EscrowError::Pins)?;
    Ok(client)
}

/// The host's keyring, or why there is none.
pub(super) fn keyring(
    config: &AgentConfig,
    identity: &HostIdentity,
) -> Result<PbsKeyring, EscrowError> {
    PbsKeyring::load(&config.state_dir)
        .map_err(EscrowError::Key)?
        .ok_or(EscrowError::NoKey {
            restore_mode: identity.replaces.is_some(),
        })
}

/// `escrow create`.
pub async fn create(
    config: &AgentConfig,
    options: &SheetOptions,
    hostname: &str,
) -> Result<Created, EscrowError> {
    let identity = identity(config)?;
    if let Some(r) = record::load(&config.state_dir).map_err(EscrowError::Record)? {
        return Err(EscrowError::Exists {
            fingerprint: r.key_fingerprint.clone(),
            created_at: r.created_at,
        });
    }
    let ring = keyring(config, &identity)?;
    let hub = hub(config)?;
    let now = Timestamp::now();
    let sealed = seal(&ring, &identity, options, hostname, now, false).await?;
    store_or_discard(&hub, &identity, &sealed).await?;
    let record = EscrowRecord {
        host_id: identity.host_id,
        key_fingerprint: sealed.blob.key_fingerprint.clone(),
        created_at: now,
        code_made_at: now,
        rotations: 0,
    };
    record::store(&config.state_dir, &record).map_err(EscrowError::Record)?;
    tracing::info!(
        host_id = %identity.host_id,
        fingerprint = %sealed.blob.key_fingerprint,
        "escrow stored at the hub"
    );
    Ok(Created {
        sheet: sealed.sheet,
        fingerprint: sealed.blob.key_fingerprint,
    })
}

/// A new code's blob and its printed sheet, not yet stored.
pub(super) struct Sealed {
    pub(super) blob: EscrowBlob,
    pub(super) sheet: PathBuf,
}

/// Makes a new code R, wraps `ring` under it, opens the blob again from the words as
/// printed (every key must come back), and prints the sheet. Nothing has left the box.
pub(super) async fn seal(
    ring: &PbsKeyring,
    identity: &HostIdentity,
    options: &SheetOptions,
    hostname: &str,
    now: Timestamp,
    rotated: bool,
) -> Result<Sealed, EscrowError> {
    let code = RecoveryCode::generate().map_err(EscrowError::Code)?;
    let blob = wrap::wrap(ring, identity.host_id, &code, options.work_factor, now)
        .map_err(EscrowError::Wrap)?;
    if options.include_blob && blob.ciphertext.trim_end().len() > sheet::MAX_WRAPPED_BLOB_CHARS {
        return Err(EscrowError::BlobTooLong {
            keys: ring.len(),
            chars: blob.ciphertext.trim_end().len(),
        });
    }
    // An escrow you have not recovered is not an escrow: open it the way a recovery
    // would, from the words as printed.
    let words = code.words();
    let reread = RecoveryCode::parse(&words.join(" ")).map_err(EscrowError::Code)?;
    let opened = wrap::unwrap(&blob, &reread, identity.host_id).map_err(EscrowError::SelfCheck)?;
    if opened.fingerprints() != ring.fingerprints() {
        return Err(EscrowError::SelfCheck(WrapError::Fingerprint {
            stated: ring.fingerprints().join(", "),
            computed: opened.fingerprints().join(", "),
        }));
    }
    drop(opened);

    // Rendered off the async threads, with owned copies (the words and the paper key
    // zeroized when the task ends).
    let paper_key = match options.paper_key {
        true => Some(paper_key_text(ring.current())?),
        false => None,
    };
    let older: Vec<OlderKey> = ring
        .retired()
        .iter()
        .map(|r| OlderKey {
            fingerprint: r.key.fingerprint(),
            retired_at: r.retired_at,
        })
        .collect();
    let printing = {
        let dir = options.dir.clone();
        let people = options.clone();
        let hostname = hostname.to_owned();
        let host_id = identity.host_id;
        let fingerprint = blob.key_fingerprint.clone();
        let wrapped = options.include_blob.then(|| blob.ciphertext.clone());
        tokio::task::spawn_blocking(move || {
            let content = SheetContent {
                hostname: &hostname,
                host_id,
                created_at: now,
                words: &words,
                key_fingerprint: &fingerprint,
                rotated,
                older_keys: &older,
                wrapped_blob: wrapped.as_deref(),
                paper_key: paper_key.as_ref().map(|k| k.as_str()),
                customer: people.customer.as_deref(),
                operator: people.operator.as_deref(),
                operator_contact: people.operator_contact.as_deref(),
            };
            sheet::print_sheet(&dir, &content)
        })
    };
    let pdf = printing
        .await
        .map_err(|e| {
            EscrowError::Sheet(SheetError::Io {
                what: "printing (the task stopped)",
                path: options.dir.clone(),
                source: std::io::Error::other(e.to_string()),
            })
        })?
        .map_err(EscrowError::Sheet)?;
    drop(code);
    drop(reread);
    Ok(Sealed { blob, sheet: pdf })
}

/// K as the paper key the sheet prints.
fn paper_key_text(
    key: &bosun_agentd::trust::keys::pbs_key::PbsKey,
) -> Result<zeroize::Zeroizing<String>, EscrowError> {
    use base64::Engine as _;
    let data = key.data_base64();
    let mut bytes = zeroize::Zeroizing::new([0u8; super::paper_key::KEY_BYTES]);
    match base64::engine::general_purpose::STANDARD.decode_slice(data.as_bytes(), &mut *bytes) {
        Ok(super::paper_key::KEY_BYTES) => Ok(super::paper_key::encode(&bytes)),
        _ => Err(EscrowError::Key(
            bosun_agentd::trust::keys::pbs_key::PbsKeyError::Malformed {
                path: PathBuf::from("the installed key"),
                field: "data",
                problem: "is not 32 bytes of base64",
            },
        )),
    }
}

/// Stores the sealed blob at the hub; when that fails, its sheet is deleted (its code
/// protects nothing the hub holds) and the error given back.
pub(super) async fn store_or_discard(
    hub: &HubClient,
    identity: &HostIdentity,
    sealed: &Sealed,
) -> Result<(), EscrowError> {
    let Err(e) = store_at_hub(hub, identity, &sealed.blob).await else {
        return Ok(());
    };
    if let Err(removal) = std::fs::remove_file(&sealed.sheet) {
        tracing::error!(
            pdf = %sealed.sheet.display(),
            error = %removal,
            "the sheet of an escrow the hub did not store was not deleted: delete it by hand"
        );
    }
    Err(EscrowError::Store(e))
}

/// Stores `blob` at the hub. When the answer is lost after the request went out, the hub is
/// asked what it holds: if it is this blob, it was stored (and its sheet must be kept).
async fn store_at_hub(
    hub: &HubClient,
    identity: &HostIdentity,
    blob: &EscrowBlob,
) -> Result<(), HubClientError> {
    match hub
        .put_escrow(identity.host_id, &identity.host_key.presented(), blob)
        .await
    {
        Ok(()) => Ok(()),
        Err(e @ HubClientError::OutcomeUnknown { .. }) => {
            match hub
                .escrow(identity.host_id, &identity.host_key.presented())
                .await
            {
                Ok(Some(held)) if held.ciphertext == blob.ciphertext => Ok(()),
                _ => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

pub use super::recover::{Recovered, WordSource, recover, recover_paper_key};

/// What `escrow status` shows.
#[derive(Debug)]
pub struct EscrowStatus {
    /// The escrow as last made on this box.
    pub record: Option<EscrowRecord>,
    /// The key backups are encrypted with now.
    pub current: Option<String>,
    /// The keys rotations retired, newest first.
    pub older: Vec<String>,
}

/// `escrow status`: the record, if any, and the keys on the box.
pub fn status(config: &AgentConfig) -> Result<EscrowStatus, EscrowError> {
    let record = record::load(&config.state_dir).map_err(EscrowError::Record)?;
    let ring = PbsKeyring::load(&config.state_dir).map_err(EscrowError::Key)?;
    let mut keys = ring.map(|r| r.fingerprints()).unwrap_or_default();
    let current = (!keys.is_empty()).then(|| keys.remove(0));
    Ok(EscrowStatus {
        record,
        current,
        older: keys,
    })
}
