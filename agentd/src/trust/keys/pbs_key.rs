//! The Proxmox Backup Server client encryption key, K.
//!
//! The agent creates K once, when `pbs-encryption-key.json` is absent from its state
//! directory, and hands the file's text to Proxmox VE as the `encryption-key` parameter
//! when it adds the PBS storage. The key lives in memory in [`Zeroizing`] buffers, is
//! never logged and never goes to the hub; only its fingerprint is reported. `escrow
//! rotate` replaces it with a new one and keeps the old one with the keys archives still
//! need ([`keyring`]).
//!
//! # The key file (proxmox-backup, `pbs-key-config/src/lib.rs`, `KeyConfig`)
//!
//! One JSON object, as PBS writes it (`serde_json::to_string`, compact, fields in this
//! order, no trailing newline):
//!
//! - `kdf`: `null` for a key stored in the clear. A password-protected file holds
//!   `{"Scrypt": {…}}` or `{"PBKDF2": {…}}` and `data` is then AES-GCM ciphertext; the
//!   agent has no one to ask for the password, so it refuses such files.
//! - `created`, `modified`: epoch seconds written as RFC 3339 (`proxmox_serde::
//!   epoch_as_rfc3339`). `proxmox_time::parse_rfc3339` accepts exactly
//!   `YYYY-MM-DDTHH:MM:SSZ` or `…SS±HH:MM`, without fractions; PBS itself writes local
//!   time with an offset, this module writes UTC with `Z`.
//! - `data`: the raw 32-byte key, base64 with the standard alphabet and padding
//!   (`proxmox_serde::bytes_as_base64`), 44 characters.
//! - `fingerprint`: optional for PBS, always present here; the 32 fingerprint bytes
//!   as lowercase hex pairs joined by `:` (`pbs-api-types/src/crypto.rs`,
//!   `bytes_as_fingerprint`), 95 characters. PBS's `Display` shows only the first 8
//!   bytes (the short key ID); the full form is what the file, `KeyInfo` and PVE's
//!   `storage.cfg` carry.
//! - `hint`: a password hint, omitted when absent; ignored here.
//!
//! # The fingerprint (proxmox-backup, `pbs-tools/src/crypt_config.rs`, `CryptConfig`)
//!
//! 1. `id_key` = PBKDF2-HMAC-SHA256(password = K, salt = `b"_id_key"`, 10 rounds,
//!    32 bytes).
//! 2. fingerprint = SHA-256(`FINGERPRINT_INPUT` ‖ `id_key`), where `FINGERPRINT_INPUT`
//!    is SHA-256(`b"Proxmox Backup Encryption Key Fingerprint"`).
//!
//! Loading recomputes it and refuses a file whose `fingerprint` disagrees, as
//! `KeyConfig::decrypt` does.
//!
//! # Proxmox VE (pve-storage, `src/PVE/Storage/PBSPlugin.pm`)
//!
//! `encryption-key` takes the key file's JSON text, or `autogen` (which runs
//! `proxmox-backup-client key create --kdf none`); PVE stores the text in
//! `/etc/pve/priv/storage/<storeid>.enc` and the file's `fingerprint` in `storage.cfg`.
//!
//! Error messages carry paths, field names and fingerprints, never key material: a
//! `serde_json` or `base64` error can quote the input, so neither is kept as a cause.

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use jiff::Timestamp;
use rand::TryRngCore as _;
use serde::de::IgnoredAny;
use sha2::{Digest as _, Sha256};
use zeroize::Zeroizing;

/// The key file's name in the state directory.
pub const KEY_FILE: &str = "pbs-encryption-key.json";

/// Where a new key file is written before it is linked into place.
const KEY_FILE_TMP: &str = ".pbs-encryption-key.json.tmp";

/// SHA-256 of `b"Proxmox Backup Encryption Key Fingerprint"`.
const FINGERPRINT_INPUT: [u8; 32] = [
    110, 208, 239, 119, 71, 31, 255, 77, 85, 199, 168, 254, 74, 157, 182, 33, 97, 64, 127, 19, 76,
    114, 93, 223, 48, 153, 45, 37, 236, 69, 237, 38,
];

/// The PBKDF2 salt that derives `id_key` from K.
const ID_KEY_SALT: &[u8] = b"_id_key";

/// The PBKDF2 rounds that derive `id_key` from K.
const ID_KEY_ROUNDS: u32 = 10;

/// A key file is about 250 bytes; anything far larger is not one.
const MAX_FILE_LEN: u64 = 4096;

/// The length of [`PbsKey::key_file_json`]'s text, so its buffer never reallocates.
const JSON_CAPACITY: usize = 256;

/// Why the key could not be loaded or created.
#[derive(Debug, thiserror::Error)]
pub enum PbsKeyError {
    /// Reading or writing the key file failed.
    #[error("{what} {path}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The key file is open to others than its owner.
    #[error("{path} is mode {mode:o}; it must be 0600")]
    Exposed {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The key file is not JSON of the expected shape. The parser's own message is not
    /// kept: it may quote the file's text.
    #[error("{path} is not a PBS key file (JSON error at line {line}, column {column})")]
    Json {
        /// The file.
        path: PathBuf,
        /// Line of the error.
        line: usize,
        /// Column of the error.
        column: usize,
    },
    /// A field of the key file holds an unusable value.
    #[error("{path}: `{field}` {problem}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A timestamp of the key file is not RFC 3339.
    #[error("{path}: `{field}` is not an RFC 3339 time")]
    Timestamp {
        /// The file.
        path: PathBuf,
        /// The field.
        field: &'static str,
        /// Cause.
        #[source]
        source: jiff::Error,
    },
    /// The key file is protected by a password (`kdf` is set), which an unattended
    /// agent cannot supply.
    #[error("{path} is password-protected (`kdf` is set); the agent needs an unprotected key")]
    PasswordProtected {
        /// The file.
        path: PathBuf,
    },
    /// The key does not have the fingerprint the file states.
    #[error("{path} states fingerprint {stated} but its key has fingerprint {computed}")]
    FingerprintMismatch {
        /// The file.
        path: PathBuf,
        /// The file's `fingerprint`.
        stated: String,
        /// The fingerprint of the file's `data`.
        computed: String,
    },
    /// Another key is installed; it is never replaced.
    #[error(
        "{path} already holds a key with fingerprint {existing}; the recovered key has fingerprint {offered} and was not installed"
    )]
    Conflict {
        /// The file.
        path: PathBuf,
        /// The installed key's fingerprint.
        existing: String,
        /// The offered key's fingerprint.
        offered: String,
    },
    /// The operating system's random source failed.
    #[error("generating a key for {path}")]
    Random {
        /// The file the key was for.
        path: PathBuf,
        /// Cause.
        #[source]
        source: rand::rand_core::OsError,
    },
}

/// What the key that binds archives to their guest is derived from K under.
const ARCHIVE_BINDING_LABEL: &[u8] = b"bosun archive binding v1";

/// The PBS client encryption key, zeroized when dropped; `Debug` shows only its
/// fingerprint and timestamps.
pub struct PbsKey {
    key: Zeroizing<[u8; 32]>,
    fingerprint: [u8; 32],
    created: Timestamp,
    modified: Timestamp,
}

impl fmt::Debug for PbsKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PbsKey")
            .field("fingerprint", &self.fingerprint())
            .field("created", &self.created)
            .field("modified", &self.modified)
            .finish_non_exhaustive()
    }
}

/// The key file's fields as read; `data` borrows from the zeroized file text.
#[derive(serde::Deserialize)]
struct KeyFileFields<'a> {
    #[serde(default)]
    kdf: Option<IgnoredAny>,
    created: &'a str,
    modified: &'a str,
    data: &'a str,
    #[serde(default)]
    fingerprint: Option<&'a str>,
}

impl PbsKey {
    /// Loads `state_dir/pbs-encryption-key.json`, creating it (0600) with a new random
    /// key when absent.
    pub fn load_or_create(state_dir: &Path) -> Result<Self, PbsKeyError> {
        let path = state_dir.join(KEY_FILE);
        match File::open(&path) {
            Ok(file) => Self::load(&path, file),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Self::create(state_dir, &path),
            Err(source) => Err(PbsKeyError::Io {
                what: "opening",
                path,
                source,
            }),
        }
    }

    /// The fingerprint as PBS and PVE write it: 32 lowercase hex pairs joined by `:`.
    pub fn fingerprint(&self) -> String {
        format_fingerprint(&self.fingerprint)
    }

    /// The binding a backup of `guest_id` (at `vmid`, taken at `backup_time`, epoch seconds)
    /// carries in its notes: HMAC-SHA256 under a key derived from K, lowercase hex. Only a
    /// holder of K can make one, so notes that name another guest, or an archive moved to
    /// another vmid or time, do not verify.
    pub fn archive_binding(&self, guest_id: &str, vmid: u32, backup_time: i64) -> String {
        use hmac::{Hmac, Mac};
        let derived = {
            // HMAC takes a key of any length: `new_from_slice` cannot fail for it.
            let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(self.key.as_slice())
                .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
            mac.update(ARCHIVE_BINDING_LABEL);
            Zeroizing::new(mac.finalize().into_bytes())
        };
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(derived.as_slice())
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        mac.update(format!("{guest_id}\n{vmid}\n{backup_time}").as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// The key file's text, as PVE's `encryption-key` parameter takes it.
    pub fn key_file_json(&self) -> Zeroizing<String> {
        let mut json = Zeroizing::new(String::with_capacity(JSON_CAPACITY));
        json.push_str(r#"{"kdf":null,"created":""#);
        json.push_str(&format_time(self.created));
        json.push_str(r#"","modified":""#);
        json.push_str(&format_time(self.modified));
        json.push_str(r#"","data":""#);
        BASE64.encode_string(self.key.as_slice(), &mut json);
        json.push_str(r#"","fingerprint":""#);
        json.push_str(&self.fingerprint());
        json.push_str(r#""}"#);
        json
    }

    /// When the key was made.
    pub fn created(&self) -> Timestamp {
        self.created
    }

    /// The raw key, base64 (the key file's `data`): what a keyring escrow wraps
    /// (`bosun-agentctl`'s escrow, outside this crate).
    pub fn data_base64(&self) -> Zeroizing<String> {
        let mut data = Zeroizing::new(String::with_capacity(48));
        BASE64.encode_string(self.key.as_slice(), &mut data);
        data
    }

    /// A key from its raw bytes in base64 (as [`PbsKey::data_base64`] gives them) and the
    /// time it was made; its fingerprint is computed. `origin` names where the bytes came
    /// from in errors.
    pub fn from_data_base64(
        origin: &Path,
        data: &str,
        created: Timestamp,
    ) -> Result<Self, PbsKeyError> {
        let key = decode_key(origin, data)?;
        Ok(Self::new(key, created))
    }

    fn new(key: Zeroizing<[u8; 32]>, now: Timestamp) -> Self {
        let fingerprint = compute_fingerprint(&key);
        let now = whole_seconds(now);
        Self {
            key,
            fingerprint,
            created: now,
            modified: now,
        }
    }

    fn load(path: &Path, mut file: File) -> Result<Self, PbsKeyError> {
        let io = |what, source| PbsKeyError::Io {
            what,
            path: path.to_owned(),
            source,
        };
        let meta = file.metadata().map_err(|e| io("inspecting", e))?;
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(PbsKeyError::Exposed {
                path: path.to_owned(),
                mode,
            });
        }
        if meta.len() > MAX_FILE_LEN {
            return Err(PbsKeyError::Malformed {
                path: path.to_owned(),
                field: "file",
                problem: "is far larger than a key file",
            });
        }
        // Sized up front (the length is bounded above) so that reading leaves no copies
        // of the key in freed buffers.
        let len = usize::try_from(meta.len()).unwrap_or(JSON_CAPACITY);
        let mut text = Zeroizing::new(String::with_capacity(len + 1));
        file.read_to_string(&mut text)
            .map_err(|e| io("reading", e))?;
        Self::parse(path, &text)
    }

    /// Reads a key file's text (as [`PbsKey::key_file_json`] writes it, or PBS does):
    /// what a recovered escrow holds. `origin` names where the text came from in errors.
    pub fn from_key_file_json(origin: &Path, text: &str) -> Result<Self, PbsKeyError> {
        if u64::try_from(text.len()).map_or(true, |len| len > MAX_FILE_LEN) {
            return Err(PbsKeyError::Malformed {
                path: origin.to_owned(),
                field: "file",
                problem: "is far larger than a key file",
            });
        }
        Self::parse(origin, text)
    }

    fn parse(path: &Path, text: &str) -> Result<Self, PbsKeyError> {
        let malformed = |field, problem| PbsKeyError::Malformed {
            path: path.to_owned(),
            field,
            problem,
        };

        let fields: KeyFileFields<'_> =
            serde_json::from_str(text).map_err(|e| PbsKeyError::Json {
                path: path.to_owned(),
                line: e.line(),
                column: e.column(),
            })?;
        if fields.kdf.is_some() {
            return Err(PbsKeyError::PasswordProtected {
                path: path.to_owned(),
            });
        }

        let key = decode_key(path, fields.data)?;

        let stated = fields
            .fingerprint
            .ok_or_else(|| malformed("fingerprint", "is missing"))?;
        let stated_bytes = parse_fingerprint(stated)
            .ok_or_else(|| malformed("fingerprint", "is not 32 hex bytes joined by `:`"))?;
        let fingerprint = compute_fingerprint(&key);
        if stated_bytes != fingerprint {
            return Err(PbsKeyError::FingerprintMismatch {
                path: path.to_owned(),
                stated: stated.to_owned(),
                computed: format_fingerprint(&fingerprint),
            });
        }

        let time = |field, value: &str| {
            value
                .parse::<Timestamp>()
                .map(whole_seconds)
                .map_err(|source| PbsKeyError::Timestamp {
                    path: path.to_owned(),
                    field,
                    source,
                })
        };
        Ok(Self {
            key,
            fingerprint,
            created: time("created", fields.created)?,
            modified: time("modified", fields.modified)?,
        })
    }

    /// Loads `state_dir/pbs-encryption-key.json` when it exists; `None` when it does not
    /// (a replacement host waiting for the customer's recovery code).
    pub fn load_existing(state_dir: &Path) -> Result<Option<Self>, PbsKeyError> {
        let path = state_dir.join(KEY_FILE);
        match File::open(&path) {
            Ok(file) => Self::load(&path, file).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(PbsKeyError::Io {
                what: "opening",
                path,
                source,
            }),
        }
    }

    /// Installs this key (recovered from the escrow) as the host's K. Installing the same
    /// key again is a no-op ([`Installed::AlreadyThere`]); a different key already in place
    /// is never replaced: backups made with it would become unreadable.
    pub fn install(&self, state_dir: &Path) -> Result<Installed, PbsKeyError> {
        let path = state_dir.join(KEY_FILE);
        match Self::write_new(state_dir, &path, self)? {
            None => {
                tracing::info!(fingerprint = %self.fingerprint(), path = %path.display(), "pbs encryption key installed");
                Ok(Installed::New)
            }
            Some(existing) if existing.fingerprint == self.fingerprint => {
                Ok(Installed::AlreadyThere)
            }
            Some(existing) => Err(PbsKeyError::Conflict {
                path,
                existing: existing.fingerprint(),
                offered: self.fingerprint(),
            }),
        }
    }

    /// A new random key for `state_dir`, in memory only: the next K of a rotation
    /// ([`keyring`]), written once its escrow is stored.
    pub fn generate(state_dir: &Path) -> Result<Self, PbsKeyError> {
        let mut key = Zeroizing::new([0u8; 32]);
        rand::rngs::OsRng
            .try_fill_bytes(&mut *key)
            .map_err(|source| PbsKeyError::Random {
                path: state_dir.join(KEY_FILE),
                source,
            })?;
        Ok(Self::new(key, Timestamp::now()))
    }

    /// Makes a new random key and writes it.
    fn create(state_dir: &Path, path: &Path) -> Result<Self, PbsKeyError> {
        let created = Self::generate(state_dir)?;
        match Self::write_new(state_dir, path, &created)? {
            // Another process created the key first: use that one.
            Some(existing) => Ok(existing),
            None => {
                tracing::info!(
                    fingerprint = %created.fingerprint(),
                    path = %path.display(),
                    "pbs encryption key created"
                );
                Ok(created)
            }
        }
    }

    /// Writes `key` to a temporary file, syncs it and links it into place
    /// ([`super::new_file`]), so the key file is never seen half-written and never replaces
    /// one that exists. `Some` is the key that was already there.
    fn write_new(state_dir: &Path, path: &Path, key: &Self) -> Result<Option<Self>, PbsKeyError> {
        let json = key.key_file_json();
        let written =
            super::new_file::write_new(state_dir, KEY_FILE_TMP, KEY_FILE, json.as_bytes())
                .map_err(|e| PbsKeyError::Io {
                    what: e.what,
                    path: e.path,
                    source: e.source,
                })?;
        match written {
            super::new_file::Written::New => Ok(None),
            super::new_file::Written::AlreadyThere => {
                let file = File::open(path).map_err(|source| PbsKeyError::Io {
                    what: "opening",
                    path: path.to_owned(),
                    source,
                })?;
                Self::load(path, file).map(Some)
            }
        }
    }
}

/// Where the running agent gets K: the state directory, and whether it may make K. A box
/// that took over a lost host (restore mode) never makes one; it waits until
/// `bosun-agentctl escrow recover` installs the recovered K, and picks it up then, without a
/// restart. The fingerprint last seen is kept for the report.
#[derive(Debug, Clone)]
pub struct PbsKeySource {
    state_dir: PathBuf,
    may_create: bool,
    fingerprint: std::sync::Arc<parking_lot::Mutex<Option<String>>>,
}

impl PbsKeySource {
    /// K in `state_dir`; made there when absent only if `may_create`.
    pub fn new(state_dir: &Path, may_create: bool) -> Self {
        Self {
            state_dir: state_dir.to_owned(),
            may_create,
            fingerprint: std::sync::Arc::default(),
        }
    }

    /// K, or `None` while a restore-mode box waits for its recovery.
    pub fn load(&self) -> Result<Option<PbsKey>, PbsKeyError> {
        let key = if self.may_create {
            Some(PbsKey::load_or_create(&self.state_dir)?)
        } else {
            PbsKey::load_existing(&self.state_dir)?
        };
        if let Some(key) = &key {
            *self.fingerprint.lock() = Some(key.fingerprint());
        }
        Ok(key)
    }

    /// The whole keyring: K (made when absent only if allowed, as [`PbsKeySource::load`])
    /// and the keys rotations retired; `None` while a restore-mode box waits for its
    /// recovery.
    pub fn ring(&self) -> Result<Option<PbsKeyring>, PbsKeyError> {
        let Some(current) = self.load()? else {
            return Ok(None);
        };
        let retired = keyring::load_retired(&self.state_dir)?;
        Ok(Some(PbsKeyring::new(current, retired)))
    }

    /// K's fingerprint, looked up now (`escrow rotate` replaces K under the running agent),
    /// else as last loaded when the key file cannot be read (the watcher reports why when
    /// it needs K).
    pub fn fingerprint(&self) -> Option<String> {
        match self.load() {
            Ok(key) => key.map(|key| key.fingerprint()),
            Err(_) => self.fingerprint.lock().clone(),
        }
    }
}

/// What [`PbsKey::install`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Installed {
    /// The key file was written.
    New,
    /// The same key was already installed.
    AlreadyThere,
}

/// The 32-byte key a key file's `data` holds (base64).
fn decode_key(path: &Path, data: &str) -> Result<Zeroizing<[u8; 32]>, PbsKeyError> {
    let malformed = |problem| PbsKeyError::Malformed {
        path: path.to_owned(),
        field: "data",
        problem,
    };
    let mut key = Zeroizing::new([0u8; 32]);
    match BASE64.decode_slice(data, &mut *key) {
        Ok(32) => Ok(key),
        Ok(_) | Err(base64::DecodeSliceError::OutputSliceTooSmall) => {
            Err(malformed("does not hold a 32-byte key"))
        }
        Err(base64::DecodeSliceError::DecodeError(_)) => Err(malformed("is not base64")),
    }
}

/// SHA-256 over `FINGERPRINT_INPUT` and the `id_key` derived from `key`.
fn compute_fingerprint(key: &[u8; 32]) -> [u8; 32] {
    let mut id_key = Zeroizing::new([0u8; 32]);
    pbkdf2::pbkdf2_hmac::<Sha256>(key, ID_KEY_SALT, ID_KEY_ROUNDS, &mut *id_key);
    let mut hasher = Sha256::new();
    hasher.update(FINGERPRINT_INPUT);
    hasher.update(id_key.as_slice());
    hasher.finalize().into()
}

fn format_fingerprint(bytes: &[u8; 32]) -> String {
    let pairs: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    pairs.join(":")
}

/// Reads the fingerprint as PBS does: every `:` dropped, then 64 hex digits.
fn parse_fingerprint(text: &str) -> Option<[u8; 32]> {
    let digits: String = text.chars().filter(|&c| c != ':').collect();
    let mut bytes = [0u8; 32];
    hex::decode_to_slice(digits, &mut bytes).ok()?;
    Some(bytes)
}

/// `YYYY-MM-DDTHH:MM:SSZ`: the UTC form `proxmox_time::parse_rfc3339` accepts.
fn format_time(time: Timestamp) -> String {
    time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn whole_seconds(time: Timestamp) -> Timestamp {
    Timestamp::from_second(time.as_second()).unwrap_or(time)
}

pub mod keyring;

pub use keyring::{PbsKeyring, RetiredKey};

#[cfg(test)]
mod tests;
