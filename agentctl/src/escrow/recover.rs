//! `bosun-agentctl escrow recover`: the host's keys back from the escrow, on a box that took
//! over a lost host (or lost its key files).
//!
//! The blob comes from the hub, or from a file copied off a sheet (the hub's JSON document or
//! the bare armored block); the 12 words from a terminal (prompted for without echo, asked
//! again after a typo) or a script's stdin. Every key the blob holds is installed: the
//! retired ones first, then the current one, which never replaces a key that is not among
//! them ([`bosun_agentd::trust::keys::pbs_key::PbsKeyring::install_recovered`]). An old blob opened with an old
//! sheet's words gives back the keys it held then, and nothing made after it.

use std::io::{BufRead as _, Read as _, Write as _};
use std::path::{Path, PathBuf};

use bosun_proto::escrow::EscrowBlob;
use jiff::Timestamp;
use zeroize::Zeroizing;

use super::code::{CodeError, RecoveryCode};
use super::command::{EscrowError, hub, identity};
use super::paper_key;
use super::record::{self, EscrowRecord};
use super::wrap::{self, WrapError};
use bosun_agentd::config::AgentConfig;
use bosun_agentd::trust::keys::pbs_key::{Installed, PbsKey, PbsKeyError, PbsKeyring};

/// How many times a person may retype the words at a terminal.
const TTY_ATTEMPTS: usize = 3;

/// The largest blob file `recover --blob` reads.
const MAX_BLOB_FILE: u64 = 128 * 1024;

/// The first and last lines of an armored age file.
const ARMOR_BEGIN: &str = "-----BEGIN AGE ENCRYPTED FILE-----";
const ARMOR_END: &str = "-----END AGE ENCRYPTED FILE-----";

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
    /// K's fingerprint (the current key).
    pub fingerprint: String,
    /// The fingerprints of the older keys the escrow held too, newest first.
    pub older: Vec<String>,
    /// Whether the keys were installed now or were already there.
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
                .escrow(identity.host_id, &identity.host_key.presented())
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
    if let Some(installed) = PbsKey::load_existing(&config.state_dir).map_err(EscrowError::Key)?
        && let BlobInput::Document(document) = &blob
        && installed.fingerprint() == document.key_fingerprint
    {
        // The keys of this escrow are installed already (the retired ones go in first).
        return Ok(Recovered {
            fingerprint: installed.fingerprint(),
            older: Vec::new(),
            installed: Installed::AlreadyThere,
        });
    }
    let open = |code: &RecoveryCode| match &blob {
        BlobInput::Document(document) => wrap::unwrap(document, code, identity.host_id),
        BlobInput::Armored(armored) => wrap::unwrap_armored(armored, code, identity.host_id),
    };
    let ring = match words {
        WordSource::Reader(reader) => {
            let code = read_code(reader)?;
            open(&code).map_err(EscrowError::Wrap)?
        }
        WordSource::Terminal => unwrap_at_terminal(&open)?,
    };
    let installed = ring
        .install_recovered(&config.state_dir)
        .map_err(|e| match e {
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
    let key = ring.current();
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
    tracing::info!(host_id = %identity.host_id, fingerprint = %key.fingerprint(), keys = ring.len(), at = %now, "pbs encryption keys recovered from the escrow");
    Ok(Recovered {
        fingerprint: key.fingerprint(),
        older: ring.fingerprints().into_iter().skip(1).collect(),
        installed,
    })
}

/// `escrow recover --paper-key`: K from the paper key printed on a sheet, typed at a
/// terminal (without echo, asked again after a typo) or read from a script's stdin. It
/// installs the current key only (the paper key is that one key), never replacing another.
pub fn recover_paper_key(
    config: &AgentConfig,
    source: WordSource<'_>,
) -> Result<Recovered, EscrowError> {
    use base64::Engine as _;
    let identity = identity(config)?;
    let bytes = match source {
        WordSource::Reader(reader) => {
            let mut text = Zeroizing::new(String::with_capacity(4096));
            reader
                .take(4096)
                .read_to_string(&mut text)
                .map_err(EscrowError::Input)?;
            paper_key::parse(&text).map_err(EscrowError::PaperKey)?
        }
        WordSource::Terminal => paper_key_at_terminal()?,
    };
    let mut data = Zeroizing::new(String::with_capacity(48));
    base64::engine::general_purpose::STANDARD.encode_string(bytes.as_slice(), &mut data);
    drop(bytes);
    let now = Timestamp::now();
    let key = PbsKey::from_data_base64(Path::new("the paper key"), &data, now)
        .map_err(EscrowError::Key)?;
    let fingerprint = key.fingerprint();
    let installed = PbsKeyring::new(key, Vec::new())
        .install_recovered(&config.state_dir)
        .map_err(|e| match e {
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
    if record::load(&config.state_dir)
        .map_err(EscrowError::Record)?
        .is_none()
    {
        record::store(
            &config.state_dir,
            &EscrowRecord {
                host_id: identity.host_id,
                key_fingerprint: fingerprint.clone(),
                created_at: now,
                code_made_at: now,
                rotations: 0,
            },
        )
        .map_err(EscrowError::Record)?;
    }
    tracing::info!(host_id = %identity.host_id, fingerprint = %fingerprint, "pbs encryption key recovered from the paper key");
    Ok(Recovered {
        fingerprint,
        older: Vec::new(),
        installed,
    })
}

/// Prompts for the paper key without echo; a key that does not read back is explained and
/// asked for again.
fn paper_key_at_terminal() -> Result<Zeroizing<[u8; paper_key::KEY_BYTES]>, EscrowError> {
    let _quiet = EchoOff::new().map_err(EscrowError::Input)?;
    let mut last = paper_key::PaperKeyError::Length { found: 0 };
    for attempt in 1..=TTY_ATTEMPTS {
        eprint!(
            "Type the paper key, the 14 groups of 4 characters (input is not shown; attempt \
             {attempt} of {TTY_ATTEMPTS}): "
        );
        let _ = std::io::stderr().flush();
        let mut line = Zeroizing::new(String::with_capacity(4096));
        std::io::stdin()
            .lock()
            .take(4096)
            .read_line(&mut line)
            .map_err(EscrowError::Input)?;
        eprintln!();
        match paper_key::parse(&line) {
            Ok(key) => return Ok(key),
            Err(e) => {
                eprintln!("{e}");
                last = e;
            }
        }
    }
    Err(EscrowError::PaperKey(last))
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
    open: &dyn Fn(&RecoveryCode) -> Result<PbsKeyring, WrapError>,
) -> Result<PbsKeyring, EscrowError> {
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
