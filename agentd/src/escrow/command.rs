//! `bosun-agentd escrow create | rotate | recover | status`: run by the operator on the
//! host, with the customer present.
//!
//! - **create** makes R, wraps K under it, unwraps its own copy to prove the words open it,
//!   prints the recovery sheet (the only place R ever appears), stores the blob at the hub
//!   and records that the escrow exists. It refuses to run a second time: that is `rotate`.
//! - **rotate** does the same with a new R and replaces the blob at the hub (last write
//!   wins). K does not change, so existing backups stay keyed by it.
//! - **recover** takes the blob (from the hub, or a file copied off a sheet), reads the 12
//!   words, unwraps, checks the fingerprint and installs K. It never replaces a different K.
//!
//! Order matters for what a failure leaves behind. The sheet is printed before anything
//! leaves the box, so a blob the hub holds always has a sheet; when storing it at the hub
//! fails, the sheet is deleted again and nothing is recorded, so the command can simply be
//! run again.

use std::io::{BufRead as _, Read as _, Write as _};
use std::path::{Path, PathBuf};

use bosun_proto::escrow::EscrowBlob;
use jiff::Timestamp;
use zeroize::Zeroizing;

use super::code::{CodeError, RecoveryCode};
use super::record::{self, EscrowRecord, RecordError};
use super::sheet::{self, Printer, SheetContent, SheetError};
use super::wrap::{self, WrapError};
use crate::config::AgentConfig;
use crate::hub::client::HubClient;
use crate::hub::client::HubClientError;
use crate::hub::identity::{HostIdentity, IdentityError};
use crate::pbs_key::{Installed, PbsKey, PbsKeyError};

/// How many times a person may retype the words at a terminal.
const TTY_ATTEMPTS: usize = 3;

/// The largest blob file `recover --blob` reads.
const MAX_BLOB_FILE: u64 = 128 * 1024;

/// The first and last lines of an armored age file.
const ARMOR_BEGIN: &str = "-----BEGIN AGE ENCRYPTED FILE-----";
const ARMOR_END: &str = "-----END AGE ENCRYPTED FILE-----";

/// What `create` and `rotate` are asked to put on the sheet.
#[derive(Debug, Clone)]
pub struct SheetOptions {
    /// Where the PDF goes.
    pub dir: PathBuf,
    /// Print the wrapped blob on the sheet, so recovery works without the hub.
    pub include_blob: bool,
    /// Print K itself on the sheet (single-factor, unrevocable).
    pub paper_key: bool,
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
         `bosun-agentd escrow rotate`"
    )]
    Exists {
        /// The wrapped key's fingerprint.
        fingerprint: String,
        /// When it was made.
        created_at: Timestamp,
    },
    /// `rotate` without an escrow.
    #[error("there is no escrow to rotate: run `bosun-agentd escrow create` first")]
    NothingToRotate,
    /// K is missing.
    #[error(
        "this host has no PBS encryption key yet{}",
        if *restore_mode { ": it took over a lost host; recover the key with `bosun-agentd escrow recover`" } else { " (the agent makes it on its first start)" }
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
    /// Wrapping or unwrapping failed.
    #[error(transparent)]
    Wrap(WrapError),
    /// The escrow did not open with the words just made: nothing was stored.
    #[error("the new escrow did not unwrap to the same key; nothing was stored")]
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
}

impl EscrowError {
    /// The process exit code: 65 (EX_DATAERR) for words or a blob that do not fit, 69
    /// (EX_UNAVAILABLE) when the hub cannot be reached, 75 (EX_TEMPFAIL) for a state that
    /// another command changes, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Code(_) | Self::Wrap(_) | Self::BlobFile { .. } => 65,
            Self::Hub(_) | Self::Store(_) | Self::Setup(_) => 69,
            Self::Exists { .. } | Self::NothingToRotate | Self::NotEnrolled => 75,
            _ => 1,
        }
    }
}

/// What `create` or `rotate` did.
#[derive(Debug)]
pub struct Created {
    /// The sheet's PDF.
    pub sheet: PathBuf,
    /// K's fingerprint.
    pub fingerprint: String,
    /// Whether an earlier code was replaced.
    pub rotated: bool,
}

fn identity(config: &AgentConfig) -> Result<HostIdentity, EscrowError> {
    HostIdentity::load(&config.state_dir)
        .map_err(EscrowError::Identity)?
        .ok_or(EscrowError::NotEnrolled)
}

fn hub(config: &AgentConfig) -> Result<HubClient, EscrowError> {
    HubClient::new(config.hub.url.clone(), &config.hub.fingerprint).map_err(EscrowError::Setup)
}

/// `escrow create` (`rotate = false`) or `escrow rotate`.
pub async fn create(
    config: &AgentConfig,
    options: &SheetOptions,
    printer: &Printer,
    hostname: &str,
    rotate: bool,
) -> Result<Created, EscrowError> {
    let identity = identity(config)?;
    let existing = record::load(&config.state_dir).map_err(EscrowError::Record)?;
    match (&existing, rotate) {
        (Some(r), false) => {
            return Err(EscrowError::Exists {
                fingerprint: r.key_fingerprint.clone(),
                created_at: r.created_at,
            });
        }
        (None, true) => return Err(EscrowError::NothingToRotate),
        _ => {}
    }
    let key = PbsKey::load_existing(&config.state_dir)
        .map_err(EscrowError::Key)?
        .ok_or(EscrowError::NoKey {
            restore_mode: identity.replaces.is_some(),
        })?;
    let hub = hub(config)?;
    let now = Timestamp::now();

    let code = RecoveryCode::generate().map_err(EscrowError::Code)?;
    let blob = wrap::wrap(&key, identity.host_id, &code, options.work_factor, now)
        .map_err(EscrowError::Wrap)?;
    // An escrow you have not recovered is not an escrow: open it the way a recovery
    // would, from the words as printed.
    let words = code.words();
    let reread = RecoveryCode::parse(&words.join(" ")).map_err(EscrowError::Code)?;
    let opened = wrap::unwrap(&blob, &reread, identity.host_id).map_err(EscrowError::SelfCheck)?;
    if opened.fingerprint() != key.fingerprint() {
        return Err(EscrowError::SelfCheck(WrapError::Fingerprint {
            stated: key.fingerprint(),
            computed: opened.fingerprint(),
        }));
    }
    drop(opened);

    // Chromium takes about a second: printed off the async threads, with owned copies
    // (the words and K's text zeroized when the task ends).
    let paper_key = options.paper_key.then(|| key.key_file_json());
    let printing = {
        let dir = options.dir.clone();
        let printer = printer.clone();
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
                rotated: rotate,
                wrapped_blob: wrapped.as_deref(),
                paper_key: paper_key.as_ref().map(|k| k.as_str()),
            };
            sheet::print_sheet(&dir, &content, &printer)
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

    if let Err(e) = store_at_hub(&hub, &identity, &blob).await {
        // The sheet's code protects nothing the hub holds: it must not be kept.
        if let Err(removal) = std::fs::remove_file(&pdf) {
            tracing::error!(
                pdf = %pdf.display(),
                error = %removal,
                "the sheet of an escrow the hub did not store was not deleted: delete it by hand"
            );
        }
        return Err(EscrowError::Store(e));
    }
    let record = EscrowRecord {
        host_id: identity.host_id,
        key_fingerprint: blob.key_fingerprint.clone(),
        created_at: existing.as_ref().map_or(now, |r| r.created_at),
        code_made_at: now,
        rotations: existing
            .as_ref()
            .map_or(0, |r| r.rotations.saturating_add(1)),
    };
    record::store(&config.state_dir, &record).map_err(EscrowError::Record)?;
    tracing::info!(
        host_id = %identity.host_id,
        fingerprint = %blob.key_fingerprint,
        rotated = rotate,
        "escrow stored at the hub"
    );
    Ok(Created {
        sheet: pdf,
        fingerprint: blob.key_fingerprint,
        rotated: rotate,
    })
}

/// Stores `blob` at the hub. When the answer is lost after the request went out, the hub is
/// asked what it holds: if it is this blob, it was stored (and its sheet must be kept).
async fn store_at_hub(
    hub: &HubClient,
    identity: &HostIdentity,
    blob: &EscrowBlob,
) -> Result<(), HubClientError> {
    match hub
        .put_escrow(identity.host_id, &identity.host_key, blob)
        .await
    {
        Ok(()) => Ok(()),
        Err(e @ HubClientError::OutcomeUnknown { .. }) => {
            match hub.escrow(identity.host_id, &identity.host_key).await {
                Ok(Some(held)) if held.ciphertext == blob.ciphertext => Ok(()),
                _ => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// Where `recover` reads the words.
pub enum WordSource<'a> {
    /// A terminal: prompted for, without echo, with retries.
    Terminal,
    /// A reader (a script's stdin): read once.
    Reader(&'a mut dyn std::io::Read),
}

impl std::fmt::Debug for WordSource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Terminal => "Terminal",
            Self::Reader(_) => "Reader",
        })
    }
}

/// What `recover` did.
#[derive(Debug)]
pub struct Recovered {
    /// K's fingerprint.
    pub fingerprint: String,
    /// Whether K was installed now or was already there.
    pub installed: Installed,
}

/// `escrow recover`: the blob from `blob_file` or the hub, the words from `words`.
pub async fn recover(
    config: &AgentConfig,
    blob_file: Option<&Path>,
    words: WordSource<'_>,
) -> Result<Recovered, EscrowError> {
    let identity = identity(config)?;
    let blob = match blob_file {
        Some(path) => read_blob_file(path)?,
        None => BlobInput::Document(
            hub(config)?
                .escrow(identity.host_id, &identity.host_key)
                .await
                .map_err(EscrowError::Hub)?
                .ok_or(EscrowError::NoBlob)?,
        ),
    };
    let blob_error = |reason: String| EscrowError::BlobFile {
        path: blob_file.map_or_else(|| PathBuf::from("the hub's escrow"), Path::to_owned),
        reason,
    };
    if let BlobInput::Document(document) = &blob {
        document.validate().map_err(|e| blob_error(e.to_string()))?;
    }
    // A block cut short (copied off a sheet, or a file truncated) would otherwise only
    // fail once the right words opened its header, and read as words that do not fit.
    if !armor_is_complete(blob.armored()) {
        return Err(blob_error(format!(
            "the escrow blob is malformed: its armored block does not end with `{ARMOR_END}` \
             (cut short?)"
        )));
    }
    if let Some(installed) = PbsKey::load_existing(&config.state_dir).map_err(EscrowError::Key)? {
        if let BlobInput::Document(document) = &blob
            && installed.fingerprint() != document.key_fingerprint
        {
            return Err(EscrowError::KeyInPlace {
                path: config.state_dir.join(crate::pbs_key::KEY_FILE),
                existing: installed.fingerprint(),
                offered: document.key_fingerprint.clone(),
            });
        }
        if let BlobInput::Document(_) = &blob {
            return Ok(Recovered {
                fingerprint: installed.fingerprint(),
                installed: Installed::AlreadyThere,
            });
        }
    }
    let open = |code: &RecoveryCode| match &blob {
        BlobInput::Document(document) => wrap::unwrap(document, code, identity.host_id),
        BlobInput::Armored(armored) => wrap::unwrap_armored(armored, code, identity.host_id),
    };
    let key = match words {
        WordSource::Reader(reader) => {
            let code = read_code(reader)?;
            open(&code).map_err(EscrowError::Wrap)?
        }
        WordSource::Terminal => unwrap_at_terminal(&open)?,
    };
    let installed = key.install(&config.state_dir).map_err(|e| match e {
        PbsKeyError::Conflict {
            path,
            existing,
            offered,
        } => EscrowError::KeyInPlace {
            path,
            existing,
            offered,
        },
        other => EscrowError::Key(other),
    })?;
    let now = Timestamp::now();
    // The box knows its escrow from now on: `create` refuses, `rotate` makes a new code.
    if record::load(&config.state_dir)
        .map_err(EscrowError::Record)?
        .is_none()
    {
        record::store(
            &config.state_dir,
            &EscrowRecord {
                host_id: identity.host_id,
                key_fingerprint: key.fingerprint(),
                created_at: blob.created_at().unwrap_or(now),
                code_made_at: blob.created_at().unwrap_or(now),
                rotations: 0,
            },
        )
        .map_err(EscrowError::Record)?;
    }
    tracing::info!(host_id = %identity.host_id, fingerprint = %key.fingerprint(), at = %now, "pbs encryption key recovered from the escrow");
    Ok(Recovered {
        fingerprint: key.fingerprint(),
        installed,
    })
}

/// A blob to recover from.
enum BlobInput {
    /// The hub's `bosun.escrow/v1` document.
    Document(EscrowBlob),
    /// The bare armored block printed on a sheet: its host and key are checked inside.
    Armored(String),
}

impl BlobInput {
    /// The armored age block.
    fn armored(&self) -> &str {
        match self {
            Self::Document(document) => &document.ciphertext,
            Self::Armored(armored) => armored,
        }
    }

    fn created_at(&self) -> Option<Timestamp> {
        match self {
            Self::Document(document) => Some(document.created_at),
            Self::Armored(_) => None,
        }
    }
}

/// A blob file: the hub's JSON document, or the bare armored block from a sheet.
fn read_blob_file(path: &Path) -> Result<BlobInput, EscrowError> {
    let bad = |reason: String| EscrowError::BlobFile {
        path: path.to_owned(),
        reason,
    };
    let file = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
    let mut text = String::new();
    file.take(MAX_BLOB_FILE + 1)
        .read_to_string(&mut text)
        .map_err(|e| bad(e.to_string()))?;
    if text.len() as u64 > MAX_BLOB_FILE {
        return Err(bad("larger than any escrow blob".into()));
    }
    let trimmed = text.trim();
    if trimmed.starts_with('{') {
        return serde_json::from_str(trimmed)
            .map(BlobInput::Document)
            .map_err(|e| {
                bad(format!(
                    "the escrow blob is malformed: not a bosun.escrow/v1 document ({e})"
                ))
            });
    }
    if trimmed.starts_with(ARMOR_BEGIN) {
        return Ok(BlobInput::Armored(format!("{trimmed}\n")));
    }
    Err(bad(
        "neither a bosun.escrow/v1 document nor an armored age block".into(),
    ))
}

/// Whether an armored block runs from its BEGIN line to its END line.
fn armor_is_complete(armored: &str) -> bool {
    let armored = armored.trim();
    armored.starts_with(ARMOR_BEGIN) && armored.ends_with(ARMOR_END)
}

/// Reads the 12 words from a script (at most a few KiB).
fn read_code(reader: &mut dyn std::io::Read) -> Result<RecoveryCode, EscrowError> {
    let mut text = Zeroizing::new(String::with_capacity(256));
    reader
        .take(4096)
        .read_to_string(&mut text)
        .map_err(EscrowError::Input)?;
    RecoveryCode::parse(&text).map_err(EscrowError::Code)
}

/// Prompts for the words on the terminal without echo; a mistyped word or a checksum that
/// does not fit is explained and asked for again.
fn unwrap_at_terminal(
    open: &dyn Fn(&RecoveryCode) -> Result<PbsKey, WrapError>,
) -> Result<PbsKey, EscrowError> {
    // Echo goes off before the first prompt is shown and stays off until the last answer is
    // read: nothing typed after a prompt appears, however fast, reaches the screen.
    let _quiet = EchoOff::new().map_err(EscrowError::Input)?;
    let mut last = None;
    for attempt in 1..=TTY_ATTEMPTS {
        eprint!(
            "Type the 12 words of the recovery code, separated by spaces (input is not shown; \
             attempt {attempt} of {TTY_ATTEMPTS}): "
        );
        let _ = std::io::stderr().flush();
        let mut line = Zeroizing::new(String::with_capacity(256));
        std::io::stdin()
            .lock()
            .take(4096)
            .read_line(&mut line)
            .map_err(EscrowError::Input)?;
        eprintln!();
        match RecoveryCode::parse(&line) {
            Ok(code) => match open(&code) {
                Ok(key) => return Ok(key),
                Err(WrapError::WrongCode) => {
                    eprintln!("{}", WrapError::WrongCode);
                    last = Some(EscrowError::Wrap(WrapError::WrongCode));
                }
                Err(other) => return Err(EscrowError::Wrap(other)),
            },
            Err(e) => {
                eprintln!("{e}");
                last = Some(EscrowError::Code(e));
            }
        }
    }
    Err(last.unwrap_or(EscrowError::Code(CodeError::WordCount { found: 0 })))
}

/// The terminal on stdin with echo off (a newline still shows), restored when dropped —
/// on every way out.
struct EchoOff {
    saved: rustix::termios::Termios,
}

impl EchoOff {
    fn new() -> std::io::Result<Self> {
        use rustix::termios::{LocalModes, OptionalActions, tcgetattr, tcsetattr};
        let stdin = std::io::stdin();
        let saved = tcgetattr(&stdin)?;
        let mut quiet = saved.clone();
        quiet.local_modes.remove(LocalModes::ECHO);
        quiet.local_modes.insert(LocalModes::ECHONL);
        tcsetattr(&stdin, OptionalActions::Now, &quiet)?;
        Ok(Self { saved })
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        use rustix::termios::{OptionalActions, tcsetattr};
        let _ = tcsetattr(std::io::stdin(), OptionalActions::Now, &self.saved);
    }
}

/// `escrow status`: the record, if any.
pub fn status(config: &AgentConfig) -> Result<Option<EscrowRecord>, EscrowError> {
    record::load(&config.state_dir).map_err(EscrowError::Record)
}
