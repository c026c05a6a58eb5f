//! An OpenSSH `allowed_signers` file: who may sign (the agent's, or an operator's copy that
//! `bosunctl job submit` checks against first).
//!
//! One signer per line, as `ssh-keygen(1)` describes it:
//!
//! ```text
//! # comment
//! ops@example.com namespaces="bosun-job@v1",valid-before="20270101Z" ssh-ed25519 AAAA… laptop
//! "alice@example.com,bob@example.com" sk-ssh-ed25519@openssh.com AAAA…
//! ```
//!
//! - principals: a comma-separated pattern list, optionally in double quotes;
//! - options (optional, comma-separated): `namespaces="…"` (a pattern list the
//!   signature's namespace must match), `valid-after="…"`, `valid-before="…"`
//!   (`YYYYMMDD[HHMM[SS]]`, UTC with a trailing `Z`, the system's local time
//!   without). `cert-authority` is refused: Bosun trusts keys, not
//!   certificates. Any other option is refused, as OpenSSH does;
//! - the key: `ssh-ed25519`, `ecdsa-sha2-nistp256`,
//!   `sk-ssh-ed25519@openssh.com` or `sk-ecdsa-sha2-nistp256@openssh.com`.
//!   Other types (RSA, DSA, larger ECDSA curves, certificates) are refused with
//!   the line number, rather than silently never matching.

use std::path::{Path, PathBuf};

use jiff::tz::TimeZone;
use jiff::{Timestamp, civil};
use ssh_key::{Algorithm, EcdsaCurve, HashAlg, PublicKey};

/// A parsed `allowed_signers` file.
#[derive(Debug, Clone)]
pub struct AllowedSigners {
    entries: Vec<AllowedSigner>,
}

/// One line of the file.
#[derive(Debug, Clone)]
pub struct AllowedSigner {
    pub(super) line: usize,
    pub(super) principals: String,
    pub(super) namespaces: Option<String>,
    pub(super) valid_after: Option<Timestamp>,
    pub(super) valid_before: Option<Timestamp>,
    pub(super) key: PublicKey,
}

impl AllowedSigner {
    /// The line number in the file (from 1).
    pub fn line(&self) -> usize {
        self.line
    }

    /// The principals pattern list, as written (without quotes).
    pub fn principals(&self) -> &str {
        &self.principals
    }

    /// The `namespaces=` pattern list, if restricted.
    pub fn namespaces(&self) -> Option<&str> {
        self.namespaces.as_deref()
    }

    /// The `valid-after=` instant, if any.
    pub fn valid_after(&self) -> Option<Timestamp> {
        self.valid_after
    }

    /// The `valid-before=` instant, if any.
    pub fn valid_before(&self) -> Option<Timestamp> {
        self.valid_before
    }

    /// The public key.
    pub fn key(&self) -> &PublicKey {
        &self.key
    }

    /// The key's `SHA256:…` fingerprint.
    pub fn fingerprint(&self) -> String {
        self.key.fingerprint(HashAlg::Sha256).to_string()
    }

    /// Whether this line allows signatures in `namespace`.
    pub fn allows_namespace(&self, namespace: &str) -> bool {
        self.namespaces
            .as_deref()
            .is_none_or(|list| match_pattern_list(namespace, list))
    }
}

/// Why the file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum AllowedSignersError {
    /// The file could not be read.
    #[error("failed to read the allowed signers file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A line has no key after its principals (and options).
    #[error("allowed signers line {line}: missing key")]
    MissingKey {
        /// Line number.
        line: usize,
    },
    /// A quoted field is not closed.
    #[error("allowed signers line {line}: unterminated quote")]
    UnterminatedQuote {
        /// Line number.
        line: usize,
    },
    /// The key does not parse.
    #[error("allowed signers line {line}: invalid public key")]
    InvalidKey {
        /// Line number.
        line: usize,
        /// The cause.
        #[source]
        source: ssh_key::Error,
    },
    /// The key type cannot verify job signatures here.
    #[error(
        "allowed signers line {line}: key type {key_type} is not supported for job signatures \
         (use ssh-ed25519, ecdsa-sha2-nistp256 or their sk- variants)"
    )]
    UnsupportedKeyType {
        /// Line number.
        line: usize,
        /// The key type found.
        key_type: String,
    },
    /// `cert-authority` lines are not supported.
    #[error("allowed signers line {line}: cert-authority is not supported; list the signer's key")]
    CertAuthorityUnsupported {
        /// Line number.
        line: usize,
    },
    /// An option this parser does not know.
    #[error("allowed signers line {line}: unknown option {option:?}")]
    UnknownOption {
        /// Line number.
        line: usize,
        /// The option as written.
        option: String,
    },
    /// An option given twice.
    #[error("allowed signers line {line}: option {option} given twice")]
    DuplicateOption {
        /// Line number.
        line: usize,
        /// The option name.
        option: &'static str,
    },
    /// An option that needs a value has none (or an empty one).
    #[error("allowed signers line {line}: option {option} needs a value")]
    MissingOptionValue {
        /// Line number.
        line: usize,
        /// The option name.
        option: &'static str,
    },
    /// A `valid-after`/`valid-before` value that is not a timestamp.
    #[error("allowed signers line {line}: {option}={value:?} is not YYYYMMDD[HHMM[SS]][Z]")]
    BadTime {
        /// Line number.
        line: usize,
        /// The option name.
        option: &'static str,
        /// The value found.
        value: String,
    },
}

/// Every key type whose name may start the key field.
fn is_key_type(token: &str) -> bool {
    token.starts_with("ssh-")
        || token.starts_with("ecdsa-sha2-")
        || token.starts_with("sk-ssh-")
        || token.starts_with("sk-ecdsa-sha2-")
}

fn supported(algorithm: &Algorithm) -> bool {
    matches!(
        algorithm,
        Algorithm::Ed25519
            | Algorithm::SkEd25519
            | Algorithm::SkEcdsaSha2NistP256
            | Algorithm::Ecdsa {
                curve: EcdsaCurve::NistP256
            }
    )
}

/// Splits off the first field: up to whitespace, where double quotes protect
/// whitespace. Returns (field, rest).
fn split_field(text: &str, line: usize) -> Result<(&str, &str), AllowedSignersError> {
    let mut in_quotes = false;
    for (i, c) in text.char_indices() {
        match c {
            '"' => in_quotes = !in_quotes,
            c if c.is_ascii_whitespace() && !in_quotes => {
                return Ok((&text[..i], text[i..].trim_start()));
            }
            _ => {}
        }
    }
    if in_quotes {
        return Err(AllowedSignersError::UnterminatedQuote { line });
    }
    Ok((text, ""))
}

fn unquote(value: &str) -> &str {
    value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value)
}

/// Splits an options field on commas outside quotes.
fn split_options(field: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut in_quotes = false;
    let mut start = 0;
    for (i, c) in field.char_indices() {
        match c {
            '"' => in_quotes = !in_quotes,
            ',' if !in_quotes => {
                parts.push(&field[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&field[start..]);
    parts
}

/// Parses `YYYYMMDD`, `YYYYMMDDHHMM` or `YYYYMMDDHHMMSS`, with an optional
/// trailing `Z` for UTC; without it the time is in `local`.
fn parse_time(value: &str, local: &TimeZone) -> Option<Timestamp> {
    let (digits, tz) = match value.strip_suffix(['Z', 'z']) {
        Some(digits) => (digits, &TimeZone::UTC),
        None => (value, local),
    };
    if !digits.bytes().all(|b| b.is_ascii_digit()) || ![8, 12, 14].contains(&digits.len()) {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i16> {
        digits.get(range).unwrap_or("0").parse().ok()
    };
    let year = num(0..4)?;
    let month = i8::try_from(num(4..6)?).ok()?;
    let day = i8::try_from(num(6..8)?).ok()?;
    let (hour, minute) = if digits.len() >= 12 {
        (
            i8::try_from(num(8..10)?).ok()?,
            i8::try_from(num(10..12)?).ok()?,
        )
    } else {
        (0, 0)
    };
    let second = if digits.len() == 14 {
        i8::try_from(num(12..14)?).ok()?
    } else {
        0
    };
    let datetime = civil::DateTime::new(year, month, day, hour, minute, second, 0).ok()?;
    datetime.to_zoned(tz.clone()).ok().map(|z| z.timestamp())
}

/// OpenSSH's wildcard match: `*` any run, `?` any one character.
pub fn match_pattern(text: &str, pattern: &str) -> bool {
    let text: Vec<char> = text.chars().collect();
    let pattern: Vec<char> = pattern.chars().collect();
    let (mut t, mut p) = (0, 0);
    let mut backtrack: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some('*') => {
                backtrack = Some((p, t));
                p += 1;
            }
            Some(&c) if c == '?' || c == text[t] => {
                t += 1;
                p += 1;
            }
            _ => match backtrack {
                Some((bp, bt)) => {
                    p = bp + 1;
                    t = bt + 1;
                    backtrack = Some((bp, bt + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

/// OpenSSH's pattern-list match: true when some pattern matches and no
/// negated (`!`) pattern does.
pub fn match_pattern_list(text: &str, list: &str) -> bool {
    let mut matched = false;
    for pattern in list.split(',') {
        let pattern = pattern.trim();
        if let Some(negated) = pattern.strip_prefix('!') {
            if match_pattern(text, negated) {
                return false;
            }
        } else if !pattern.is_empty() && match_pattern(text, pattern) {
            matched = true;
        }
    }
    matched
}

impl AllowedSigners {
    /// Reads and parses the file at `path` (local times in the system zone).
    pub fn load(path: &Path) -> Result<Self, AllowedSignersError> {
        let text = std::fs::read_to_string(path).map_err(|source| AllowedSignersError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text)
    }

    /// Parses the file's text (local times in the system zone).
    pub fn parse(text: &str) -> Result<Self, AllowedSignersError> {
        Self::parse_in(text, &TimeZone::system())
    }

    /// Parses the file's text, reading times without `Z` in `local`.
    pub fn parse_in(text: &str, local: &TimeZone) -> Result<Self, AllowedSignersError> {
        let mut entries = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            entries.push(parse_line(trimmed, line, local)?);
        }
        Ok(Self { entries })
    }

    /// The lines, in file order.
    pub fn entries(&self) -> &[AllowedSigner] {
        &self.entries
    }

    /// Whether the file lists no signer.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

fn parse_line(
    text: &str,
    line: usize,
    local: &TimeZone,
) -> Result<AllowedSigner, AllowedSignersError> {
    let (principals, rest) = split_field(text, line)?;
    let principals = unquote(principals).to_owned();
    if rest.is_empty() {
        return Err(AllowedSignersError::MissingKey { line });
    }
    let (first, after_first) = split_field(rest, line)?;
    let (options, key_text) = if is_key_type(first) {
        (None, rest)
    } else {
        (Some(first), after_first)
    };
    if key_text.is_empty() {
        return Err(AllowedSignersError::MissingKey { line });
    }
    let mut signer = AllowedSigner {
        line,
        principals,
        namespaces: None,
        valid_after: None,
        valid_before: None,
        key: parse_key(key_text, line)?,
    };
    if let Some(options) = options {
        apply_options(&mut signer, options, local)?;
    }
    Ok(signer)
}

fn parse_key(key_text: &str, line: usize) -> Result<PublicKey, AllowedSignersError> {
    let key_type = key_text.split_ascii_whitespace().next().unwrap_or_default();
    if key_type.ends_with("-cert-v01@openssh.com") {
        return Err(AllowedSignersError::UnsupportedKeyType {
            line,
            key_type: key_type.to_owned(),
        });
    }
    let key = PublicKey::from_openssh(key_text).map_err(|source| match source {
        ssh_key::Error::AlgorithmUnknown | ssh_key::Error::AlgorithmUnsupported { .. } => {
            AllowedSignersError::UnsupportedKeyType {
                line,
                key_type: key_type.to_owned(),
            }
        }
        source => AllowedSignersError::InvalidKey { line, source },
    })?;
    if !supported(&key.algorithm()) {
        return Err(AllowedSignersError::UnsupportedKeyType {
            line,
            key_type: key.algorithm().as_str().to_owned(),
        });
    }
    Ok(key)
}

fn apply_options(
    signer: &mut AllowedSigner,
    options: &str,
    local: &TimeZone,
) -> Result<(), AllowedSignersError> {
    let line = signer.line;
    for option in split_options(options) {
        let (name, value) = match option.split_once('=') {
            Some((name, value)) => (name, Some(unquote(value))),
            None => (option, None),
        };
        let lower = name.to_ascii_lowercase();
        let need = |option: &'static str| -> Result<&str, AllowedSignersError> {
            value
                .filter(|v| !v.is_empty())
                .ok_or(AllowedSignersError::MissingOptionValue { line, option })
        };
        let time = |option: &'static str| -> Result<Timestamp, AllowedSignersError> {
            let value = need(option)?;
            parse_time(value, local).ok_or_else(|| AllowedSignersError::BadTime {
                line,
                option,
                value: value.to_owned(),
            })
        };
        match lower.as_str() {
            "cert-authority" => return Err(AllowedSignersError::CertAuthorityUnsupported { line }),
            "namespaces" => {
                if signer.namespaces.is_some() {
                    return Err(AllowedSignersError::DuplicateOption {
                        line,
                        option: "namespaces",
                    });
                }
                signer.namespaces = Some(need("namespaces")?.to_owned());
            }
            "valid-after" => {
                if signer.valid_after.is_some() {
                    return Err(AllowedSignersError::DuplicateOption {
                        line,
                        option: "valid-after",
                    });
                }
                signer.valid_after = Some(time("valid-after")?);
            }
            "valid-before" => {
                if signer.valid_before.is_some() {
                    return Err(AllowedSignersError::DuplicateOption {
                        line,
                        option: "valid-before",
                    });
                }
                signer.valid_before = Some(time("valid-before")?);
            }
            _ => {
                return Err(AllowedSignersError::UnknownOption {
                    line,
                    option: option.to_owned(),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "allowed_signers_tests.rs"]
mod tests;
