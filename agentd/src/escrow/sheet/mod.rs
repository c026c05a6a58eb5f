//! The printed recovery sheet: the one place the recovery code R is ever shown.
//!
//! [`render_html`] turns a [`SheetContent`] into one self-contained A4 page (print CSS,
//! no scripts, fonts or other assets; a Content-Security-Policy forbids loading any)
//! and [`print_sheet`] prints that page to PDF with headless Chromium.
//!
//! The words are a secret, and so is the paper key when it is asked for:
//!
//! - The HTML is built in one [`Zeroizing`] buffer whose capacity covers the largest
//!   sheet the input limits allow, so it never reallocates and leaves no copies behind;
//!   a test holds that.
//! - The HTML and Chromium's profile live in a private (0700) scratch directory under
//!   the system's temporary directory, the HTML file itself 0600; the directory is
//!   removed after printing, on success and on error. The page is handed to Chromium
//!   as a `file://` URL, never as a `data:` URL, which `/proc/*/cmdline` would show.
//! - The PDF is created 0600 under a temporary name in the destination directory and
//!   renamed into place once the scratch directory is gone.
//! - Errors and logs name word positions, never words.
//!
//! Chromium runs with a cleared environment (`HOME` in the scratch directory, so it
//! writes nothing to the agent's home), in its own process group so a timeout kills its
//! helpers too, with background networking off, and with `--no-sandbox` only as root,
//! where its sandbox refuses to start. It blocks for about a second; async callers use
//! `spawn_blocking`.

mod page;
mod print;
#[cfg(test)]
mod tests;

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use zeroize::Zeroizing;

pub use print::print_sheet;

/// How many words a recovery code has (BIP39, 128 bits of entropy).
pub const WORD_COUNT: usize = 12;

/// The longest host name a sheet shows (a DNS name's limit).
pub const MAX_HOSTNAME_CHARS: usize = 253;

/// The longest wrapped blob a sheet shows; a real one is about 600–700 characters.
pub const MAX_WRAPPED_BLOB_CHARS: usize = 1024;

/// The longest paper key a sheet shows; a PBS key file is about 250 characters.
pub const MAX_PAPER_KEY_CHARS: usize = 512;

/// The most older keys a sheet lists: a keyring's keys but the current one.
pub const MAX_OLDER_KEYS: usize = crate::pbs_key::keyring::MAX_KEYS - 1;

/// The most older keys a sheet lists next to the wrapped blob: a blob of more keys is longer
/// than [`MAX_WRAPPED_BLOB_CHARS`] (each key adds about 170 characters), and the page holds
/// either the blob or a long list.
pub const MAX_OLDER_KEYS_WITH_BLOB: usize = 2;

/// The environment variable naming the Chromium binary for [`Printer::from_env`].
pub const CHROMIUM_ENV: &str = "BOSUN_CHROMIUM";

/// How long Chromium may take to print before it is killed.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The capacity of the HTML buffer: twice the largest sheet the limits above allow
/// (under 12 KiB with every escapable character escaped), so it never reallocates.
const HTML_CAPACITY: usize = 24 * 1024;

const ARMOR_BEGIN: &str = "-----BEGIN AGE ENCRYPTED FILE-----";
const ARMOR_END: &str = "-----END AGE ENCRYPTED FILE-----";

/// A key a rotation retired, as the sheet lists it (not secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OlderKey {
    /// Its fingerprint: 32 lowercase hex bytes joined by `:`; the sheet shows the short
    /// key ID PBS shows (the first 8 bytes).
    pub fingerprint: String,
    /// When the rotation retired it: the backups it encrypted are older.
    pub retired_at: jiff::Timestamp,
}

/// What the sheet shows. `Debug` shows neither the words nor the paper key.
pub struct SheetContent<'a> {
    /// The host's name, as the operator set it; shown escaped and used, sanitized, in
    /// the PDF's file name.
    pub hostname: &'a str,
    /// The host's id.
    pub host_id: uuid::Uuid,
    /// When the code was made; the sheet shows its UTC date.
    pub created_at: jiff::Timestamp,
    /// The recovery code: exactly [`WORD_COUNT`] words of the BIP39 English list.
    pub words: &'a [String],
    /// K's fingerprint: 32 lowercase hex bytes joined by `:` (95 characters).
    pub key_fingerprint: &'a str,
    /// Whether this code replaces an earlier one.
    pub rotated: bool,
    /// The older keys this code unlocks too, newest first (empty before any rotation).
    pub older_keys: &'a [OlderKey],
    /// Opt-in extra: K wrapped under the code, the armored age file the hub holds.
    pub wrapped_blob: Option<&'a str>,
    /// Opt-in extra: K itself, the PBS key file's text.
    pub paper_key: Option<&'a str>,
}

impl fmt::Debug for SheetContent<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SheetContent")
            .field("hostname", &self.hostname)
            .field("host_id", &self.host_id)
            .field("created_at", &self.created_at)
            .field(
                "words",
                &format_args!("<{} words redacted>", self.words.len()),
            )
            .field("key_fingerprint", &self.key_fingerprint)
            .field("rotated", &self.rotated)
            .field("older_keys", &self.older_keys)
            .field("wrapped_blob", &self.wrapped_blob.is_some())
            .field("paper_key", &self.paper_key.map(|_| "<redacted>"))
            .finish()
    }
}

/// Why a sheet could not be rendered or printed. No variant holds a word or the paper
/// key.
#[derive(Debug, thiserror::Error)]
pub enum SheetError {
    /// The code does not have [`WORD_COUNT`] words.
    #[error("the recovery code has {found} words; a sheet needs exactly {WORD_COUNT}")]
    WordCount {
        /// How many words were given.
        found: usize,
    },
    /// A word is not 3 to 8 lowercase ASCII letters.
    #[error("word {position} of the recovery code is not 3 to 8 lowercase letters")]
    WordShape {
        /// The word's position, from 1.
        position: usize,
    },
    /// A word is not on the BIP39 English list, so it could never be typed back in.
    #[error("word {position} of the recovery code is not on the BIP39 English word list")]
    UnknownWord {
        /// The word's position, from 1.
        position: usize,
    },
    /// The fingerprint is not 32 lowercase hex bytes joined by `:`.
    #[error("the key fingerprint is not 32 lowercase hex bytes joined by ':'")]
    Fingerprint,
    /// More older keys than a sheet lists ([`MAX_OLDER_KEYS`], or
    /// [`MAX_OLDER_KEYS_WITH_BLOB`] next to the wrapped blob), or one whose fingerprint is
    /// malformed.
    #[error(
        "the older keys are more than the sheet lists ({MAX_OLDER_KEYS}, or \
         {MAX_OLDER_KEYS_WITH_BLOB} next to the wrapped blob) or one is not 32 lowercase hex \
         bytes joined by ':'"
    )]
    OlderKeys,
    /// The host name is empty, too long or holds control characters.
    #[error(
        "the host name is empty, longer than {MAX_HOSTNAME_CHARS} characters or holds control characters"
    )]
    Hostname,
    /// The wrapped blob is not an armored age file within the size limit.
    #[error(
        "the wrapped blob is not an armored age file of at most {MAX_WRAPPED_BLOB_CHARS} characters"
    )]
    WrappedBlob,
    /// The paper key is not printable ASCII within the size limit.
    #[error("the paper key is not printable ASCII of at most {MAX_PAPER_KEY_CHARS} characters")]
    PaperKey,
    /// A file or directory operation failed.
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
    /// Chromium could not be started.
    #[error(
        "starting chromium ({binary}); install Debian's `chromium` package or set BOSUN_CHROMIUM"
    )]
    SpawnChromium {
        /// The binary tried.
        binary: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Waiting for Chromium failed.
    #[error("waiting for chromium ({binary})")]
    WaitChromium {
        /// The binary.
        binary: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Chromium did not finish within the printer's timeout and was killed.
    #[error(
        "chromium ({binary}) did not print within {timeout:?} and was killed; stderr: {stderr}"
    )]
    ChromiumTimeout {
        /// The binary.
        binary: PathBuf,
        /// The timeout.
        timeout: Duration,
        /// The last lines of its stderr.
        stderr: String,
    },
    /// Chromium exited unsuccessfully.
    #[error("chromium ({binary}) failed with {status}; stderr: {stderr}")]
    ChromiumFailed {
        /// The binary.
        binary: PathBuf,
        /// Its exit status.
        status: ExitStatus,
        /// The last lines of its stderr, D-Bus complaints left out.
        stderr: String,
    },
    /// Chromium exited successfully without writing a PDF.
    #[error("chromium ({binary}) exited successfully but left no PDF at {path}")]
    NoPdf {
        /// The binary.
        binary: PathBuf,
        /// Where the PDF was expected.
        path: PathBuf,
    },
}

/// Checks the content and renders the sheet as one self-contained HTML page.
///
/// # Errors
///
/// A validation variant of [`SheetError`] when the content is unfit for a sheet.
pub fn render_html(content: &SheetContent<'_>) -> Result<Zeroizing<String>, SheetError> {
    validate(content)?;
    let mut html = Zeroizing::new(String::with_capacity(HTML_CAPACITY));
    page::write_page(&mut html, content);
    Ok(html)
}

/// Where and how the sheet is printed: a Chromium binary and a time limit.
#[derive(Debug, Clone)]
pub struct Printer {
    binary: PathBuf,
    timeout: Duration,
    scratch_parent: Option<PathBuf>,
}

impl Printer {
    /// The Chromium named by `BOSUN_CHROMIUM`, else `chromium` on `PATH`.
    pub fn from_env() -> Self {
        let binary = std::env::var_os(CHROMIUM_ENV)
            .filter(|value| !value.is_empty())
            .map(PathBuf::from)
            .or_else(|| print::find_on_path("chromium"))
            .unwrap_or_else(|| PathBuf::from("chromium"));
        Self::new(binary)
    }

    /// The Chromium at `binary`, with the [`DEFAULT_TIMEOUT`].
    pub fn new(binary: PathBuf) -> Self {
        Self {
            binary,
            timeout: DEFAULT_TIMEOUT,
            scratch_parent: None,
        }
    }

    /// Kills Chromium when it has not printed after `timeout`.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Creates the private scratch directory in `dir` instead of the system's
    /// temporary directory.
    #[must_use]
    pub fn with_scratch_parent(mut self, dir: PathBuf) -> Self {
        self.scratch_parent = Some(dir);
        self
    }

    /// The Chromium binary this printer runs.
    pub fn binary(&self) -> &Path {
        &self.binary
    }
}

fn validate(content: &SheetContent<'_>) -> Result<(), SheetError> {
    if content.words.len() != WORD_COUNT {
        return Err(SheetError::WordCount {
            found: content.words.len(),
        });
    }
    for (index, word) in content.words.iter().enumerate() {
        let position = index + 1;
        if !(3..=8).contains(&word.len()) || !word.bytes().all(|b| b.is_ascii_lowercase()) {
            return Err(SheetError::WordShape { position });
        }
        if bip39::Language::English.find_word(word).is_none() {
            return Err(SheetError::UnknownWord { position });
        }
    }
    if !is_fingerprint(content.key_fingerprint) {
        return Err(SheetError::Fingerprint);
    }
    let most = if content.wrapped_blob.is_some() {
        MAX_OLDER_KEYS_WITH_BLOB
    } else {
        MAX_OLDER_KEYS
    };
    if content.older_keys.len() > most
        || content
            .older_keys
            .iter()
            .any(|k| !is_fingerprint(&k.fingerprint))
    {
        return Err(SheetError::OlderKeys);
    }
    let hostname_chars = content.hostname.chars().count();
    if hostname_chars == 0
        || hostname_chars > MAX_HOSTNAME_CHARS
        || content.hostname.chars().any(char::is_control)
    {
        return Err(SheetError::Hostname);
    }
    if let Some(blob) = content.wrapped_blob
        && !is_armored_age(blob)
    {
        return Err(SheetError::WrappedBlob);
    }
    if let Some(key) = content.paper_key
        && (key.trim().is_empty()
            || key.len() > MAX_PAPER_KEY_CHARS
            || !key
                .bytes()
                .all(|b| b == b'\n' || (b' '..=b'~').contains(&b)))
    {
        return Err(SheetError::PaperKey);
    }
    Ok(())
}

fn is_fingerprint(text: &str) -> bool {
    text.len() == 95
        && text.split(':').count() == 32
        && text.split(':').all(|pair| {
            pair.len() == 2
                && pair
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
}

fn is_armored_age(blob: &str) -> bool {
    let blob = blob.trim_end();
    let mut lines = blob.lines();
    blob.len() <= MAX_WRAPPED_BLOB_CHARS
        && lines.next() == Some(ARMOR_BEGIN)
        && lines.next_back() == Some(ARMOR_END)
        && lines.clone().next().is_some()
        && lines.all(|line| {
            !line.is_empty()
                && line.len() <= 64
                && line
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
        })
}
