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

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fmt::{self, Write as _};
use std::fs::{File, OpenOptions, Permissions};
use std::io::{BufRead as _, BufReader, Read, Write as _};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use zeroize::Zeroizing;

/// How many words a recovery code has (BIP39, 128 bits of entropy).
pub const WORD_COUNT: usize = 12;

/// The longest host name a sheet shows (a DNS name's limit).
pub const MAX_HOSTNAME_CHARS: usize = 253;

/// The longest wrapped blob a sheet shows; a real one is about 600–700 characters.
pub const MAX_WRAPPED_BLOB_CHARS: usize = 1024;

/// The longest paper key a sheet shows; a PBS key file is about 250 characters.
pub const MAX_PAPER_KEY_CHARS: usize = 512;

/// The environment variable naming the Chromium binary for [`Printer::from_env`].
pub const CHROMIUM_ENV: &str = "BOSUN_CHROMIUM";

/// How long Chromium may take to print before it is killed.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The capacity of the HTML buffer: twice the largest sheet the limits above allow
/// (under 12 KiB with every escapable character escaped), so it never reallocates.
const HTML_CAPACITY: usize = 24 * 1024;

const ARMOR_BEGIN: &str = "-----BEGIN AGE ENCRYPTED FILE-----";
const ARMOR_END: &str = "-----END AGE ENCRYPTED FILE-----";

/// The `PATH` Chromium's launcher script runs with.
const CHILD_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// How many lines of Chromium's stderr an error keeps, and how long each may be.
const STDERR_TAIL_LINES: usize = 8;
const STDERR_LINE_CHARS: usize = 300;

/// How long to wait for Chromium's stderr to close once Chromium itself has exited
/// (its helper processes hold it open for a moment).
const STDERR_GRACE: Duration = Duration::from_secs(5);

const POLL_INTERVAL: Duration = Duration::from_millis(25);

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
    write_page(&mut html, content);
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
            .or_else(|| find_on_path("chromium"))
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

/// Renders the sheet and prints it to `recovery-sheet-<hostname>.pdf` (mode 0600) in
/// `dir`, replacing a file of that name, and returns the PDF's path.
///
/// The host name is reduced to ASCII letters, digits, `-`, `.` and `_` for the file
/// name. The HTML exists only in a private scratch directory that is removed before
/// this returns. Blocks while Chromium runs (about a second).
///
/// # Errors
///
/// A validation variant when the content is unfit, otherwise what failed: the scratch
/// directory, Chromium (with its exit status and the end of its stderr) or the PDF.
pub fn print_sheet(
    dir: &Path,
    content: &SheetContent<'_>,
    printer: &Printer,
) -> Result<PathBuf, SheetError> {
    let html = render_html(content)?;
    let started = Instant::now();
    let destination = dir.join(pdf_file_name(content.hostname));

    let scratch_parent = printer
        .scratch_parent
        .clone()
        .unwrap_or_else(std::env::temp_dir);
    let scratch = tempfile::Builder::new()
        .prefix("bosun-sheet-")
        .permissions(Permissions::from_mode(0o700))
        .tempdir_in(&scratch_parent)
        .map_err(|source| SheetError::Io {
            what: "creating a private scratch directory in",
            path: scratch_parent.clone(),
            source,
        })?;
    let html_path = scratch.path().join("sheet.html");
    let pdf_path = scratch.path().join("sheet.pdf");
    write_private(&html_path, html.as_bytes())?;
    drop(html);

    let printed = run_chromium(printer, scratch.path(), &html_path, &pdf_path)
        .and_then(|()| copy_pdf(&printer.binary, &pdf_path, dir));
    // The scratch directory holds the words twice (HTML and PDF): it goes before the
    // sheet is put in place, so a sheet never exists while its scratch copy does.
    let scratch_path = scratch.path().to_path_buf();
    let removed = scratch.close().map_err(|source| SheetError::Io {
        what: "removing the scratch directory",
        path: scratch_path,
        source,
    });
    let staged = match (printed, removed) {
        (Ok(staged), Ok(())) => staged,
        // Dropping the staged copy removes it.
        (Ok(_), Err(error)) | (Err(error), Ok(())) => return Err(error),
        (Err(error), Err(removal)) => {
            // Only one error goes back; this one means the words may still be on disk.
            tracing::error!(
                error = %bosun_proto::error_chain(&removal),
                "the recovery sheet's scratch directory was not removed"
            );
            return Err(error);
        }
    };
    staged
        .persist(&destination)
        .map_err(|error| SheetError::Io {
            what: "moving the recovery sheet into place at",
            path: destination.clone(),
            source: error.error,
        })?;
    tracing::debug!(
        pdf = %destination.display(),
        elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "recovery sheet printed"
    );
    Ok(destination)
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

/// Appends `text` to `out` with `&`, `<`, `>`, `"` and `'` escaped.
fn push_escaped(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

const STYLE: &str = r#"
@page { size: A4; margin: 12mm 15mm 11mm 15mm; }
* { box-sizing: border-box; }
html, body { margin: 0; padding: 0; }
body { font-family: "DejaVu Sans", "Liberation Sans", Arial, Helvetica, sans-serif;
  font-size: 8.6pt; line-height: 1.32; color: #111; padding-bottom: 14pt;
  -webkit-print-color-adjust: exact; print-color-adjust: exact; }
.mono { font-family: "DejaVu Sans Mono", "Liberation Mono", "Courier New", monospace; }
header { display: flex; justify-content: space-between; align-items: flex-end; gap: 12pt;
  border-bottom: 2.5pt solid #111; padding-bottom: 4pt; margin-bottom: 6pt; }
h1 { font-size: 21pt; line-height: 1.1; margin: 0; }
header .tag { font-size: 8pt; color: #333; text-align: right; }
header .tag b { letter-spacing: 1pt; }
h2 { font-size: 10pt; margin: 0 0 2pt 0; }
p { margin: 0 0 2.5pt 0; }
p:last-child { margin-bottom: 0; }
table.meta { border-collapse: collapse; width: 100%; margin-bottom: 6pt; }
table.meta th { text-align: left; font-weight: normal; color: #555; width: 27mm;
  padding: 1pt 6pt 1pt 0; vertical-align: top; }
table.meta td { padding: 1pt 0; overflow-wrap: anywhere; vertical-align: top; }
table.meta td.host { font-weight: bold; font-size: 10pt; line-height: 1.2; }
table.meta .note { color: #555; font-size: 7.5pt; }
.notice { border: 1.2pt solid #111; background: #e8e8e8; padding: 3pt 7pt;
  margin-bottom: 6pt; font-weight: bold; }
.code { border: 1.5pt solid #111; border-radius: 4pt; padding: 5pt 8pt; margin-bottom: 6pt; }
.words { display: grid; grid-template-columns: repeat(3, 1fr); gap: 4pt 7pt;
  margin: 3pt 0 4pt 0; padding: 0; list-style: none; }
.words li { display: flex; align-items: baseline; margin: 0; border: 0.8pt solid #888;
  border-radius: 3pt; padding: 2.5pt 6pt; }
.words .n { width: 16pt; text-align: right; margin-right: 8pt; color: #555; font-size: 9.5pt; }
.words .w { font-size: 20pt; line-height: 1.15; font-weight: bold; letter-spacing: 0.4pt; }
.code .hint { color: #444; font-size: 7.5pt; }
.cols { display: flex; gap: 12pt; margin-bottom: 6pt; }
.cols section { flex: 1 1 0; }
ul { margin: 0; padding-left: 11pt; }
li { margin-bottom: 1pt; }
.warning { border-left: 4pt solid #111; background: #eee; padding: 4pt 8pt;
  margin-bottom: 6pt; }
.extras { display: flex; gap: 7pt; align-items: stretch; margin-bottom: 6pt; }
.extra { border: 0.8pt dashed #444; padding: 4pt 7pt; flex: 1 1 0; min-width: 0; }
.extra.blob { flex: 0 0 102mm; }
.extra.blob:only-child { flex: 1 1 0; }
.extra.danger { border: 2pt solid #111; }
.extra h2 .opt { font-weight: normal; color: #555; font-size: 8pt; }
.extra .caveat { font-weight: bold; }
pre.block { font-size: 7pt; line-height: 1.18; margin: 3pt 0 0 0;
  white-space: pre-wrap; overflow-wrap: anywhere; word-break: break-all; }
footer { position: fixed; left: 0; right: 0; bottom: 0; border-top: 0.8pt solid #888;
  padding-top: 2pt; color: #555; font-size: 7pt; line-height: 1.2;
  display: flex; justify-content: space-between; gap: 12pt; }
"#;

/// Writes the page into `out`; `content` has been validated.
fn write_page(out: &mut String, content: &SheetContent<'_>) {
    let date = content.created_at.strftime("%Y-%m-%d");
    let fingerprint = content.key_fingerprint;

    out.push_str(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" \
         content=\"default-src 'none'; style-src 'unsafe-inline'\">\n\
         <title>Bosun recovery code</title>\n<style>",
    );
    out.push_str(STYLE);
    out.push_str(
        "</style>\n</head>\n<body>\n\
         <header><h1>Bosun recovery code</h1>\
         <div class=\"tag\"><b>CONFIDENTIAL</b><br>Keep offline. Bosun keeps no copy.</div>\
         </header>\n",
    );

    out.push_str("<table class=\"meta\">\n<tr><th>Host</th><td class=\"host\">");
    push_escaped(out, content.hostname);
    let _ = write!(
        out,
        "</td></tr>\n<tr><th>Host ID</th><td class=\"mono\">{}</td></tr>\n\
         <tr><th>Created</th><td>{date} (UTC)</td></tr>\n",
        content.host_id
    );
    // Two lines of 16 bytes; the first keeps its trailing ':' so the halves join back
    // into the fingerprint when whitespace is removed.
    let _ = write!(
        out,
        "<tr><th>Key fingerprint</th><td><span class=\"mono\">{}<br>{}</span><br>\
         <span class=\"note\">Identifies the backup key this code unlocks. It is not \
         secret.</span></td></tr>\n</table>\n",
        &fingerprint[..48],
        &fingerprint[48..]
    );

    if content.rotated {
        out.push_str(
            "<div class=\"notice\">This code replaces an earlier recovery code for this \
             host. Use this sheet from now on.</div>\n",
        );
    }

    out.push_str(
        "<section class=\"code\"><h2>Your 12 recovery words, in this order</h2>\n\
         <ol class=\"words mono\">\n",
    );
    for (index, word) in content.words.iter().enumerate() {
        let _ = write!(
            out,
            "<li><span class=\"n\">{}</span><span class=\"w\">",
            index + 1
        );
        push_escaped(out, word);
        out.push_str("</span></li>\n");
    }
    out.push_str(
        "</ol>\n<p class=\"hint\">The words are from the standard BIP39 English list; the \
         first four letters of a word are enough to tell it from every other word.</p>\n\
         </section>\n",
    );

    out.push_str(
        "<div class=\"cols\">\n<section><h2>What this code is for</h2>\n\
         <p>The offsite (PBS) backups of this host are encrypted with a key that stays on \
         the host. Bosun keeps a copy of that key, locked with this code. If the host is \
         lost, this code unlocks that copy on a replacement host, and with it the offsite \
         backups.</p>\n\
         <p>Bosun and your operator never store this code: this sheet is the only record \
         of it.</p>\n</section>\n\
         <section><h2>What to do with it</h2>\n<ul>\n\
         <li>Store it offline, on paper: never in e-mail, chat, cloud storage or a \
         photo.</li>\n\
         <li>Make two copies and keep them in different places, for example in a safe at \
         the office and in a safe elsewhere.</li>\n\
         <li>Never type the words into anything but the Bosun recovery prompt on the \
         host.</li>\n\
         </ul>\n</section>\n</div>\n",
    );

    out.push_str(
        "<div class=\"warning\">\n\
         <p><b>If both this code and the host are lost, the offsite backups can be read by \
         nobody: not your operator, not Bosun.</b> There is no reset and no back door.</p>\n\
         <p>Making a new code (rotating it) does not re-encrypt existing backups: they \
         stay encrypted with the same key, and an old sheet together with the old locked \
         copy of the key still unlocks them. Keep old sheets as safe as this one, or \
         destroy them.</p>\n</div>\n",
    );

    if content.wrapped_blob.is_some() || content.paper_key.is_some() {
        out.push_str("<div class=\"extras\">\n");
    }
    if let Some(blob) = content.wrapped_blob {
        out.push_str(
            "<section class=\"extra blob\"><h2>Locked key <span class=\"opt\">(optional \
             extra)</span></h2>\n\
             <p>The backup key locked with the 12 words: the copy Bosun keeps. \
             <span class=\"caveat\">With this block the code works even if the hub is \
             gone; it is useless without the 12 words.</span></p>\n\
             <pre class=\"block mono\">",
        );
        push_escaped(out, blob.trim_end());
        out.push_str("</pre>\n</section>\n");
    }
    if let Some(key) = content.paper_key {
        out.push_str(
            "<section class=\"extra danger\"><h2>Paper key <span class=\"opt\">(optional \
             extra)</span></h2>\n\
             <p class=\"caveat\">This is the key itself: anyone holding this paper can read \
             every backup, with no code needed, and it cannot be revoked. Keep it in a \
             safe.</p>\n<pre class=\"block mono\">",
        );
        push_escaped(out, key.trim_end());
        out.push_str("</pre>\n</section>\n");
    }
    if content.wrapped_blob.is_some() || content.paper_key.is_some() {
        out.push_str("</div>\n");
    }

    let _ = write!(
        out,
        "<footer><span>Bosun recovery code for host {}, created {date}.</span>\
         <span>Page 1 of 1</span></footer>\n</body>\n</html>\n",
        content.host_id
    );
}

/// `recovery-sheet-<hostname>.pdf`, the host name reduced to `[A-Za-z0-9._-]`.
fn pdf_file_name(hostname: &str) -> String {
    let safe: String = hostname
        .chars()
        .take(100)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("recovery-sheet-{safe}.pdf")
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Creates `path` (mode 0600, which must not exist) holding `bytes`.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), SheetError> {
    let io = |source| SheetError::Io {
        what: "writing the sheet's HTML to",
        path: path.to_path_buf(),
        source,
    };
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io)?;
    file.write_all(bytes).map_err(io)
}

/// Runs Chromium on `html`, printing to `pdf`, within the printer's timeout.
fn run_chromium(
    printer: &Printer,
    scratch: &Path,
    html: &Path,
    pdf: &Path,
) -> Result<(), SheetError> {
    let binary = &printer.binary;
    let url = url::Url::from_file_path(html).map_err(|()| SheetError::Io {
        what: "making a file URL of",
        path: html.to_path_buf(),
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    })?;
    let mut command = Command::new(binary);
    command.args([
        "--headless=new",
        "--disable-gpu",
        "--no-pdf-header-footer",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
    ]);
    // Chromium's sandbox refuses to run as root; it is wanted everywhere else.
    if rustix::process::geteuid().is_root() {
        command.arg("--no-sandbox");
    }
    command
        .arg(flag("--user-data-dir=", &scratch.join("profile")))
        .arg(flag("--print-to-pdf=", pdf))
        .arg(url.as_str())
        .env_clear()
        .env("PATH", CHILD_PATH)
        .env("HOME", scratch)
        .env("LANG", "C.UTF-8")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = command
        .spawn()
        .map_err(|source| SheetError::SpawnChromium {
            binary: binary.clone(),
            source,
        })?;

    let (tail_tx, tail_rx) = mpsc::channel();
    if let Some(stderr) = child.stderr.take() {
        let reader = std::thread::Builder::new()
            .name("chromium-stderr".into())
            .spawn(move || {
                let _ = tail_tx.send(stderr_tail(stderr));
            });
        if let Err(source) = reader {
            kill_group(&mut child);
            return Err(SheetError::WaitChromium {
                binary: binary.clone(),
                source,
            });
        }
    }

    let deadline = Instant::now() + printer.timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => {
                kill_group(&mut child);
                break None;
            }
            Ok(None) => std::thread::sleep(POLL_INTERVAL),
            Err(source) => {
                kill_group(&mut child);
                return Err(SheetError::WaitChromium {
                    binary: binary.clone(),
                    source,
                });
            }
        }
    };
    let stderr = tail_rx
        .recv_timeout(STDERR_GRACE)
        .unwrap_or_else(|_| "(stderr still open)".to_owned());

    match status {
        None => Err(SheetError::ChromiumTimeout {
            binary: binary.clone(),
            timeout: printer.timeout,
            stderr,
        }),
        Some(status) if !status.success() => Err(SheetError::ChromiumFailed {
            binary: binary.clone(),
            status,
            stderr,
        }),
        Some(_) => match std::fs::metadata(pdf) {
            Ok(meta) if meta.is_file() && meta.len() > 0 => Ok(()),
            _ => Err(SheetError::NoPdf {
                binary: binary.clone(),
                path: pdf.to_path_buf(),
            }),
        },
    }
}

fn flag(name: &str, path: &Path) -> OsString {
    let mut flag = OsString::from(name);
    flag.push(path);
    flag
}

/// Kills the child's process group (Chromium and its helpers) and reaps the child.
/// The child is not yet reaped, so its pid, the group's id, cannot have been reused.
fn kill_group(child: &mut Child) {
    if let Some(pid) = i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The last lines of Chromium's stderr, without its harmless D-Bus complaints, joined
/// by " | ".
fn stderr_tail(stderr: impl Read) -> String {
    let mut tail = VecDeque::with_capacity(STDERR_TAIL_LINES);
    for line in BufReader::new(stderr).split(b'\n') {
        let Ok(line) = line else { break };
        let line = String::from_utf8_lossy(&line);
        let line = line.trim();
        if line.is_empty() || line.contains(":ERROR:dbus/") {
            continue;
        }
        if tail.len() == STDERR_TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line.chars().take(STDERR_LINE_CHARS).collect::<String>());
    }
    if tail.is_empty() {
        "(empty)".to_owned()
    } else {
        Vec::from(tail).join(" | ")
    }
}

/// Checks that `pdf` is a PDF and copies it into a new 0600 temporary file in `dir`,
/// which the caller renames into place.
fn copy_pdf(binary: &Path, pdf: &Path, dir: &Path) -> Result<tempfile::NamedTempFile, SheetError> {
    let read_err = |source| SheetError::Io {
        what: "reading the printed PDF",
        path: pdf.to_path_buf(),
        source,
    };
    let mut source = File::open(pdf).map_err(read_err)?;
    let mut magic = [0u8; 5];
    source.read_exact(&mut magic).map_err(read_err)?;
    if &magic != b"%PDF-" {
        return Err(SheetError::NoPdf {
            binary: binary.to_path_buf(),
            path: pdf.to_path_buf(),
        });
    }
    let write_err = |source| SheetError::Io {
        what: "writing the recovery sheet into",
        path: dir.to_path_buf(),
        source,
    };
    let mut staged = tempfile::Builder::new()
        .prefix(".recovery-sheet-")
        .suffix(".pdf.tmp")
        .permissions(Permissions::from_mode(0o600))
        .tempfile_in(dir)
        .map_err(write_err)?;
    staged.write_all(&magic).map_err(write_err)?;
    std::io::copy(&mut source, staged.as_file_mut()).map_err(write_err)?;
    staged.as_file().sync_all().map_err(write_err)?;
    Ok(staged)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WORDS: [&str; 12] = [
        "abandon", "ability", "able", "about", "above", "absent", "absorb", "abstract", "absurd",
        "abuse", "access", "accident",
    ];
    const FINGERPRINT: &str = "0e:ab:d4:8e:9a:51:45:02:06:c6:3c:23:c2:1b:cf:8e:\
                               14:a2:0f:6a:59:31:da:d3:e4:5b:91:0c:12:fe:15:9b";
    const BLOB: &str = "-----BEGIN AGE ENCRYPTED FILE-----\n\
        YWdlLWVuY3J5cHRpb24ub3JnL3YxCi0+IHNjcnlwdCBsbXBQYTVjOWx4a3NBZG5H\n\
        TnN1a1FRIDE4ClZ0L2JmZWZ6UzJ0UmRLc0FOY2VFZ2VpOWJ5K0tURTdiVm9qZ3Qw\n\
        -----END AGE ENCRYPTED FILE-----\n";
    const PAPER_KEY: &str = r#"{"kdf":null,"created":"2025-03-01T10:00:00Z","data":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}"#;

    fn words() -> Vec<String> {
        WORDS.iter().map(|w| (*w).to_owned()).collect()
    }

    fn content(words: &[String]) -> SheetContent<'_> {
        SheetContent {
            hostname: "pve-01.example.net",
            host_id: uuid::Uuid::from_u128(0x0196_5f2a_7c1e_7a3b_9d4e_1f2a_3b4c_5d6e),
            created_at: "2025-03-01T23:30:00Z".parse().unwrap(),
            words,
            key_fingerprint: FINGERPRINT,
            rotated: false,
            wrapped_blob: None,
            paper_key: None,
        }
    }

    fn without_whitespace(text: &str) -> String {
        text.chars().filter(|c| !c.is_whitespace()).collect()
    }

    #[test]
    fn html_holds_every_word_numbered_in_order() {
        let words = words();
        let html = render_html(&content(&words)).unwrap();
        let mut from = 0;
        for (index, word) in WORDS.iter().enumerate() {
            let cell = format!(
                "<li><span class=\"n\">{}</span><span class=\"w\">{word}</span></li>",
                index + 1
            );
            let at = html[from..].find(&cell).unwrap_or_else(|| panic!("{cell}"));
            from += at + cell.len();
        }
    }

    #[test]
    fn html_holds_host_date_and_fingerprint() {
        let words = words();
        let html = render_html(&content(&words)).unwrap();
        assert!(html.contains("Bosun recovery code"));
        assert!(html.contains("pve-01.example.net"));
        assert!(html.contains("01965f2a-7c1e-7a3b-9d4e-1f2a3b4c5d6e"));
        assert!(html.contains("2025-03-01 (UTC)"));
        assert!(without_whitespace(&html.replace("<br>", "")).contains(FINGERPRINT));
        assert!(html.contains("can be read by nobody: not your operator, not Bosun"));
        assert!(html.contains("does not re-encrypt existing backups"));
        assert!(!html.contains("replaces an earlier recovery code"));
    }

    #[test]
    fn html_is_self_contained() {
        let words = words();
        let html = render_html(&content(&words)).unwrap();
        assert!(html.contains("@page { size: A4;"));
        assert!(html.contains("default-src 'none'"));
        for outside in [
            "<script", "<link", "<img", "url(", "http:", "https:", "@import",
        ] {
            assert!(!html.contains(outside), "{outside}");
        }
    }

    #[test]
    fn rotated_sheet_says_it_replaces_an_earlier_code() {
        let words = words();
        let html = render_html(&SheetContent {
            rotated: true,
            ..content(&words)
        })
        .unwrap();
        assert!(html.contains("This code replaces an earlier recovery code"));
    }

    #[test]
    fn hostile_hostname_is_escaped() {
        let words = words();
        let hostname = "<script>alert('x')</script>&\"";
        let html = render_html(&SheetContent {
            hostname,
            ..content(&words)
        })
        .unwrap();
        assert!(!html.contains("<script"));
        assert!(!html.contains("alert('x')"));
        assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"));
    }

    #[test]
    fn extras_and_caveats_appear_only_when_asked_for() {
        let words = words();
        let plain = render_html(&content(&words)).unwrap();
        let blob_caveat = "With this block the code works even if the hub is gone; it is \
                           useless without the 12 words.";
        let key_caveat = "This is the key itself: anyone holding this paper can read every \
                          backup, with no code needed, and it cannot be revoked. Keep it in a \
                          safe.";
        for absent in [blob_caveat, key_caveat, ARMOR_BEGIN, "\"kdf\"", "Paper key"] {
            assert!(!plain.contains(absent), "{absent}");
        }

        let with_blob = render_html(&SheetContent {
            wrapped_blob: Some(BLOB),
            ..content(&words)
        })
        .unwrap();
        assert!(with_blob.contains(blob_caveat));
        assert!(with_blob.contains(BLOB.trim_end()));
        assert!(!with_blob.contains(key_caveat));

        let with_key = render_html(&SheetContent {
            paper_key: Some(PAPER_KEY),
            ..content(&words)
        })
        .unwrap();
        assert!(with_key.contains(key_caveat));
        assert!(with_key.contains("{&quot;kdf&quot;:null,"));
        assert!(!with_key.contains(blob_caveat));
    }

    #[test]
    fn word_count_is_checked() {
        let mut words = words();
        words.pop();
        let err = render_html(&content(&words)).unwrap_err();
        assert!(
            matches!(err, SheetError::WordCount { found: 11 }),
            "{err:?}"
        );
        words.extend(["access".to_owned(), "accident".to_owned()]);
        let err = render_html(&content(&words)).unwrap_err();
        assert!(
            matches!(err, SheetError::WordCount { found: 13 }),
            "{err:?}"
        );
    }

    #[test]
    fn bad_words_are_refused_by_position_without_quoting_them() {
        // (word, whether it has the shape of one and is only missing from the list)
        let cases = [
            ("Abandon", false),
            ("ab", false),
            ("abandoned", false),
            ("ab1e", false),
            ("zzzzz", true),
        ];
        for (bad, shaped) in cases {
            let mut words = words();
            words[4] = bad.to_owned();
            let err = render_html(&content(&words)).unwrap_err();
            if shaped {
                assert!(
                    matches!(err, SheetError::UnknownWord { position: 5 }),
                    "{bad}: {err:?}"
                );
            } else {
                assert!(
                    matches!(err, SheetError::WordShape { position: 5 }),
                    "{bad}: {err:?}"
                );
            }
            let shown = format!("{err} {err:?}");
            assert!(
                !shown.contains(bad) && !shown.contains("abandon"),
                "{shown}"
            );
        }
        let mut words = words();
        words[4] = "tiger".to_owned();
        render_html(&content(&words)).expect("any word of the list is accepted");
    }

    #[test]
    fn fingerprint_shape_is_checked() {
        let words = words();
        let upper = FINGERPRINT.to_uppercase();
        let short = &FINGERPRINT[..92];
        let dashes = FINGERPRINT.replace(':', "-");
        let spaced = FINGERPRINT.replacen(":", " ", 1);
        for bad in ["", short, &upper, &dashes, &spaced] {
            let err = render_html(&SheetContent {
                key_fingerprint: bad,
                ..content(&words)
            })
            .unwrap_err();
            assert!(matches!(err, SheetError::Fingerprint), "{bad}: {err:?}");
        }
    }

    #[test]
    fn hostname_and_extras_are_checked() {
        let words = words();
        let long = "a".repeat(MAX_HOSTNAME_CHARS + 1);
        for hostname in ["", "pve\n01", &long] {
            let err = render_html(&SheetContent {
                hostname,
                ..content(&words)
            })
            .unwrap_err();
            assert!(matches!(err, SheetError::Hostname), "{hostname:?}: {err:?}");
        }
        let huge_blob = format!(
            "{ARMOR_BEGIN}\n{}{ARMOR_END}\n",
            format!("{}\n", "A".repeat(64)).repeat(16)
        );
        for blob in [
            "not armored",
            "-----BEGIN AGE ENCRYPTED FILE-----\n<b>\n-----END AGE ENCRYPTED FILE-----",
            &huge_blob,
        ] {
            let err = render_html(&SheetContent {
                wrapped_blob: Some(blob),
                ..content(&words)
            })
            .unwrap_err();
            assert!(matches!(err, SheetError::WrappedBlob), "{err:?}");
        }
        let long_key = "k".repeat(MAX_PAPER_KEY_CHARS + 1);
        for key in ["", "key\u{7}", "clé", &long_key] {
            let err = render_html(&SheetContent {
                paper_key: Some(key),
                ..content(&words)
            })
            .unwrap_err();
            assert!(matches!(err, SheetError::PaperKey), "{err:?}");
            assert!(!format!("{err} {err:?}").contains("key\u{7}"));
        }
    }

    #[test]
    fn largest_sheet_fits_the_buffer_without_reallocating() {
        // The longest words of the list, the widest a grid cell gets.
        let words: Vec<String> = [
            "abstract", "accident", "acoustic", "announce", "artefact", "attitude", "bachelor",
            "broccoli", "business", "category", "champion", "cinnamon",
        ]
        .iter()
        .map(|w| (*w).to_owned())
        .collect();
        let hostname = "<&>\"'".repeat(MAX_HOSTNAME_CHARS / 5);
        let line = format!("{}\n", "Q".repeat(64));
        let body = line.repeat((MAX_WRAPPED_BLOB_CHARS - 80) / 65);
        let blob = format!("{ARMOR_BEGIN}\n{body}{ARMOR_END}");
        let key = "\"<>&'".repeat(MAX_PAPER_KEY_CHARS / 5);
        let html = render_html(&SheetContent {
            hostname: &hostname,
            rotated: true,
            wrapped_blob: Some(&blob),
            paper_key: Some(&key),
            ..content(&words)
        })
        .unwrap();
        assert_eq!(html.capacity(), HTML_CAPACITY, "the buffer reallocated");
        assert!(html.len() < HTML_CAPACITY);
    }

    #[test]
    fn debug_redacts_the_secrets() {
        let words = words();
        let shown = format!(
            "{:?}",
            SheetContent {
                paper_key: Some(PAPER_KEY),
                ..content(&words)
            }
        );
        assert!(shown.contains("pve-01.example.net"));
        assert!(
            !shown.contains("abandon") && !shown.contains("AAECAw"),
            "{shown}"
        );
    }

    #[test]
    fn file_name_keeps_to_safe_characters() {
        assert_eq!(
            pdf_file_name("pve-01.example.net"),
            "recovery-sheet-pve-01.example.net.pdf"
        );
        assert_eq!(
            pdf_file_name("../../etc/x y"),
            "recovery-sheet-.._.._etc_x_y.pdf"
        );
        assert!(pdf_file_name(&"h".repeat(253)).len() < 255);
    }

    /// A printer whose "chromium" is another program, its scratch directory in `dir`.
    fn fake_printer(binary: &str, dir: &Path) -> Printer {
        Printer::new(binary.into()).with_scratch_parent(dir.to_path_buf())
    }

    fn assert_nothing_left(scratch: &Path, out: &Path) {
        let left: Vec<_> = std::fs::read_dir(scratch)
            .unwrap()
            .chain(std::fs::read_dir(out).unwrap())
            .map(|entry| entry.unwrap().path())
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }

    #[test]
    fn failing_chromium_reports_status_and_stderr_and_cleans_up() {
        let scratch = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let words = words();
        // `sh --headless=new …` refuses the option, on stderr, with status 2.
        let err = print_sheet(
            out.path(),
            &content(&words),
            &fake_printer("/bin/sh", scratch.path()),
        )
        .unwrap_err();
        let SheetError::ChromiumFailed { status, stderr, .. } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(status.code(), Some(2));
        assert!(stderr.contains("option"), "{stderr}");
        assert!(err.to_string().contains("exit status: 2"), "{err}");
        assert_nothing_left(scratch.path(), out.path());
    }

    #[test]
    fn chromium_that_prints_nothing_is_an_error() {
        let scratch = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let words = words();
        let err = print_sheet(
            out.path(),
            &content(&words),
            &fake_printer("/bin/true", scratch.path()),
        )
        .unwrap_err();
        assert!(matches!(err, SheetError::NoPdf { .. }), "{err:?}");
        assert_nothing_left(scratch.path(), out.path());
    }

    #[test]
    fn missing_chromium_says_what_to_install() {
        let scratch = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let words = words();
        let printer = fake_printer("/nonexistent/chromium", scratch.path());
        let err = print_sheet(out.path(), &content(&words), &printer).unwrap_err();
        assert!(matches!(err, SheetError::SpawnChromium { .. }), "{err:?}");
        assert!(err.to_string().contains("`chromium` package"), "{err}");
        assert_nothing_left(scratch.path(), out.path());
    }

    #[test]
    fn hanging_chromium_is_killed_at_the_timeout() {
        let scratch = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let bin = tempfile::tempdir().unwrap();
        let fake = bin.path().join("chromium");
        // A "chromium" that hangs and leaves a helper holding its stderr, as Chromium's
        // own helpers would. A shell writes it, so no descriptor of this (threaded)
        // process has it open for writing when it is run (ETXTBSY).
        let written = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg("printf '#!/bin/sh\\nsleep 30 &\\nexec sleep 30\\n' > \"$1\" && chmod 755 \"$1\"")
            .arg("sh")
            .arg(&fake)
            .status()
            .unwrap();
        assert!(written.success());
        let printer = Printer::new(fake)
            .with_scratch_parent(scratch.path().to_path_buf())
            .with_timeout(Duration::from_millis(500));
        let words = words();
        let started = Instant::now();
        let err = print_sheet(out.path(), &content(&words), &printer).unwrap_err();
        let elapsed = started.elapsed();
        assert!(matches!(err, SheetError::ChromiumTimeout { .. }), "{err:?}");
        // Well below STDERR_GRACE: the helper was killed with the group.
        assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
        assert_nothing_left(scratch.path(), out.path());
    }

    #[test]
    fn invalid_content_is_refused_before_anything_runs() {
        let scratch = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let words = words();
        let printer = fake_printer("/nonexistent/chromium", scratch.path());
        let err = print_sheet(
            out.path(),
            &SheetContent {
                key_fingerprint: "nope",
                ..content(&words)
            },
            &printer,
        )
        .unwrap_err();
        assert!(matches!(err, SheetError::Fingerprint), "{err:?}");
        assert_nothing_left(scratch.path(), out.path());
    }
}
