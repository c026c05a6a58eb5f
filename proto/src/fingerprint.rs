//! TLS certificate fingerprints as pinned by agents, controllers and `bosunctl`.

use sha2::{Digest, Sha256};

/// The SHA-256 of a DER certificate as 64 lowercase hex digits.
pub fn cert_sha256(der: &[u8]) -> String {
    hex::encode(Sha256::digest(der))
}

/// Normalizes a fingerprint given by a human: accepts upper or lower case, with or without `:`
/// separators and an optional `sha256:` prefix. Returns 64 lowercase hex digits or `None`.
pub fn normalize(input: &str) -> Option<String> {
    let trimmed = input.trim();
    let body = trimmed
        .strip_prefix("sha256:")
        .or_else(|| trimmed.strip_prefix("SHA256:"))
        .unwrap_or(trimmed);
    let hex: String = body
        .chars()
        .filter(|c| *c != ':')
        .collect::<String>()
        .to_ascii_lowercase();
    (hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit())).then_some(hex)
}
