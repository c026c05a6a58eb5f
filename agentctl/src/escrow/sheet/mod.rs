//! The printed recovery sheet: the one place the recovery code R is ever shown.
//!
//! [`render_pdf`] lays a [`SheetContent`] out on one A4 page and writes it as a PDF with
//! krilla, in the agent's own process: no browser and no other program runs, and the three
//! DejaVu fonts it sets the page in are built into the binary and embedded (subset) in the
//! PDF, so the host needs no font package either (decision 0037). [`print_sheet`] puts
//! that PDF in a directory.
//!
//! The words are a secret, and so is the paper key when it is asked for:
//!
//! - The PDF is handed back in a [`Zeroizing`] buffer; the texts the layout builds around
//!   a word are dropped before it returns. (krilla's own working buffers are freed, not
//!   wiped: the words pass through them within this one call.)
//! - No copy is ever written anywhere but the destination: the PDF is created 0600 under a
//!   temporary name in the destination directory, synced, and renamed into place.
//! - Errors and logs name word positions, never words.

mod page;
mod pen;
mod print;
#[cfg(test)]
mod tests;

use std::fmt;
use std::path::PathBuf;

use zeroize::Zeroizing;

pub use print::print_sheet;

/// How many words a recovery code has (BIP39, 128 bits of entropy).
pub const WORD_COUNT: usize = 12;

/// The longest host name a sheet shows (a DNS name's limit).
pub const MAX_HOSTNAME_CHARS: usize = 253;

/// The longest wrapped blob a sheet shows; a real one is about 600–700 characters.
pub const MAX_WRAPPED_BLOB_CHARS: usize = 1024;

/// The longest customer name, operator name or operator contact a sheet shows.
pub const MAX_PARTY_CHARS: usize = 64;

/// The most older keys a sheet lists: a keyring's keys but the current one.
pub const MAX_OLDER_KEYS: usize = bosun_agentd::trust::keys::pbs_key::keyring::MAX_KEYS - 1;

/// The most older keys a sheet lists next to the wrapped blob: a blob of more keys is longer
/// than [`MAX_WRAPPED_BLOB_CHARS`] (each key adds about 170 characters), and the page holds
/// either the blob or a long list.
pub const MAX_OLDER_KEYS_WITH_BLOB: usize = 2;

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
    /// Opt-in extra: K itself, as [`super::paper_key::encode`] writes it.
    pub paper_key: Option<&'a str>,
    /// The customer the server belongs to; a line to fill in by hand when absent.
    pub customer: Option<&'a str>,
    /// The hoster running the server, named in the header and the steps; lines to fill in
    /// by hand when absent.
    pub operator: Option<&'a str>,
    /// How to reach the operator (a phone number, an address).
    pub operator_contact: Option<&'a str>,
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
            .field("customer", &self.customer)
            .field("operator", &self.operator)
            .field("operator_contact", &self.operator_contact)
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
    /// The paper key is not 14 groups of 4 base32 characters with a fitting checksum.
    #[error("the paper key is not 14 groups of 4 base32 characters with a fitting checksum")]
    PaperKey,
    /// A customer or operator field is empty, too long or holds control characters.
    #[error(
        "the {field} is empty, longer than {MAX_PARTY_CHARS} characters or holds control characters"
    )]
    Party {
        /// Which field.
        field: &'static str,
    },
    /// The content does not fit on one page (only possible with the extras at their limits).
    #[error(
        "the sheet's content does not fit on one A4 page (it ends {over:.0} points too low); \
         leave out an extra"
    )]
    TooLong {
        /// How far below the page's last line the content ends.
        over: f32,
    },
    /// A built-in font could not be read.
    #[error("the built-in font {name} could not be read")]
    Font {
        /// The font.
        name: &'static str,
    },
    /// krilla could not write the PDF.
    #[error("writing the PDF: {reason}")]
    Pdf {
        /// krilla's error, which holds no text of the page.
        reason: String,
    },
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
}

/// Checks the content and renders the sheet as a one-page A4 PDF.
///
/// # Errors
///
/// A validation variant of [`SheetError`] when the content is unfit for a sheet,
/// [`SheetError::TooLong`] when it does not fit on the page.
pub fn render_pdf(content: &SheetContent<'_>) -> Result<Zeroizing<Vec<u8>>, SheetError> {
    validate(content)?;
    let fonts = pen::Fonts::load()?;
    let scale = fitting_scale(content, &fonts)?;
    let mut document = krilla::Document::new();
    document.set_metadata(
        krilla::metadata::Metadata::new()
            .title(format!("Recovery code for {}", content.hostname))
            .creator("bosun-agentd".to_owned()),
    );
    let (end, footer) = draw_page(&mut document, content, &fonts, scale)?;
    if end > footer {
        return Err(SheetError::TooLong { over: end - footer });
    }
    let pdf = document.finish().map_err(|e| SheetError::Pdf {
        reason: format!("{e:?}"),
    })?;
    Ok(Zeroizing::new(pdf))
}

/// The largest scale the sheet is set at: its type and boxes at most this much larger than
/// at scale 1 (body text of 7.6 points).
const MAX_SCALE: f32 = 1.4;
/// The smallest: the largest content the input limits allow (the longest names, the blob
/// and the most older keys beside it) fits at it, its body text still above 7 points.
const MIN_SCALE: f32 = 0.94;
/// The steps the scale is tried in, from [`MAX_SCALE`] down to [`MIN_SCALE`].
const SCALE_STEP: f32 = 0.02;

/// The largest scale, from [`MAX_SCALE`] down to [`MIN_SCALE`], at which `content` ends above the
/// footer: a sheet with little on it is set larger and fills its page. Each scale is tried
/// on a scratch page that shows neither the words nor the paper key (blanks of the same
/// shape: the layout does not depend on them), so no copy of them is made here.
fn fitting_scale(content: &SheetContent<'_>, fonts: &pen::Fonts) -> Result<f32, SheetError> {
    let blank_words: Vec<String> = vec!["word".to_owned(); content.words.len()];
    let blank_key: Option<String> = content.paper_key.map(|key| {
        key.chars()
            .map(|c| if c == ' ' { ' ' } else { 'W' })
            .collect()
    });
    let scratch = SheetContent {
        words: &blank_words,
        paper_key: blank_key.as_deref(),
        ..*content
    };
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a small positive count of steps"
    )]
    let steps = ((MAX_SCALE - MIN_SCALE) / SCALE_STEP).round() as u16;
    for step in (0..=steps).rev() {
        let scale = MIN_SCALE + f32::from(step) * SCALE_STEP;
        let (end, footer) = draw_page(&mut krilla::Document::new(), &scratch, fonts, scale)?;
        if end <= footer {
            return Ok(scale);
        }
        if step == 0 {
            return Err(SheetError::TooLong { over: end - footer });
        }
    }
    Ok(MIN_SCALE)
}

/// Draws `content` on a new A4 page of `document` at `scale`; gives where the content ends
/// and where the footer begins, in the page's coordinates at that scale.
fn draw_page(
    document: &mut krilla::Document,
    content: &SheetContent<'_>,
    fonts: &pen::Fonts,
    scale: f32,
) -> Result<(f32, f32), SheetError> {
    let settings = krilla::page::PageSettings::from_wh(pen::PAGE_WIDTH, pen::PAGE_HEIGHT)
        .ok_or_else(|| SheetError::Pdf {
            reason: "the A4 page size".to_owned(),
        })?;
    let mut page = document.start_page_with(settings);
    let mut surface = page.surface();
    surface.push_transform(&krilla::geom::Transform::from_scale(scale, scale));
    let ends = {
        let mut pen = pen::Pen::new(&mut surface, fonts, scale);
        let end = page::draw(&mut pen, content);
        (end, page::footer_top(&pen))
    };
    surface.pop();
    surface.finish();
    page.finish();
    Ok(ends)
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
        || content.hostname.chars().any(bosun_proto::inert::is_control)
    {
        return Err(SheetError::Hostname);
    }
    if let Some(blob) = content.wrapped_blob
        && !is_armored_age(blob)
    {
        return Err(SheetError::WrappedBlob);
    }
    if let Some(key) = content.paper_key
        && !super::paper_key::is_encoded(key)
    {
        return Err(SheetError::PaperKey);
    }
    for (field, value) in [
        ("customer", content.customer),
        ("operator's name", content.operator),
        ("operator's contact", content.operator_contact),
    ] {
        if let Some(value) = value
            && !is_party(value)
        {
            return Err(SheetError::Party { field });
        }
    }
    Ok(())
}

/// Whether `text` fits a customer or operator field: 1 to [`MAX_PARTY_CHARS`] characters,
/// not all blank, no control characters.
pub fn is_party(text: &str) -> bool {
    let chars = text.chars().count();
    (1..=MAX_PARTY_CHARS).contains(&chars)
        && !text.trim().is_empty()
        && !text.chars().any(bosun_proto::inert::is_control)
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
