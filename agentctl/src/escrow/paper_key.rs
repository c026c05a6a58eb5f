//! The paper key: K itself as 56 characters a person can type back.
//!
//! The 32 key bytes and a 3-byte checksum (the first bytes of SHA-256 over a label and the
//! key) are written in base32 (RFC 4648: `A`–`Z`, `2`–`7`, no padding: 35 bytes are exactly
//! 56 characters), in 14 groups of 4. Reading it back ignores spaces, dashes and case, takes
//! `0`, `1` and `8` for the `O`, `I` and `B` they are mistaken for, and refuses a key whose
//! checksum does not fit, so a typo is caught before anything is installed (one in 16
//! million slips through).
//!
//! Every buffer holding the key or its text is a [`Zeroizing`] one, sized up front.

use sha2::{Digest as _, Sha256};
use zeroize::Zeroizing;

/// How many bytes the key has.
pub const KEY_BYTES: usize = 32;

/// How many characters the paper key has, without the spaces between groups.
pub const PAPER_KEY_CHARS: usize = 56;

/// How many characters one group has.
pub const GROUP_CHARS: usize = 4;

/// The longest text [`parse`] looks at: the key with generous separators.
pub const MAX_INPUT_CHARS: usize = 256;

const CHECKSUM_BYTES: usize = 3;
const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const CHECKSUM_LABEL: &[u8] = b"bosun paper key v1\0";

/// Why a typed paper key was refused; no variant holds a character of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PaperKeyError {
    /// The text is longer than any paper key however it is spaced.
    #[error("the paper key is longer than {MAX_INPUT_CHARS} characters")]
    TooLong,
    /// A character that is not in the paper key's alphabet.
    #[error(
        "character {position} of the paper key is not a letter A-Z or a digit 2-7 (spaces and \
         dashes are ignored)"
    )]
    Character {
        /// The character's position among the key's characters, from 1.
        position: usize,
    },
    /// Too few or too many characters.
    #[error("the paper key has {found} characters; it has {PAPER_KEY_CHARS} (14 groups of 4)")]
    Length {
        /// How many were given.
        found: usize,
    },
    /// The checksum does not fit: a character was mistyped.
    #[error(
        "the paper key's checksum does not fit: a character is mistyped; compare it group by \
         group with the sheet"
    )]
    Checksum,
}

fn checksum(key: &[u8; KEY_BYTES]) -> [u8; CHECKSUM_BYTES] {
    let mut hash = Sha256::new();
    hash.update(CHECKSUM_LABEL);
    hash.update(key);
    let digest = hash.finalize();
    [digest[0], digest[1], digest[2]]
}

/// The paper key of `key`: 14 groups of 4 characters separated by single spaces.
pub fn encode(key: &[u8; KEY_BYTES]) -> Zeroizing<String> {
    let mut bytes = Zeroizing::new([0u8; KEY_BYTES + CHECKSUM_BYTES]);
    bytes[..KEY_BYTES].copy_from_slice(key);
    bytes[KEY_BYTES..].copy_from_slice(&checksum(key));
    let groups = PAPER_KEY_CHARS / GROUP_CHARS;
    let mut text = Zeroizing::new(String::with_capacity(PAPER_KEY_CHARS + groups));
    let mut written = 0;
    // 35 bytes are 7 blocks of 5 bytes, each 8 characters.
    for block in bytes.chunks_exact(5) {
        let mut bits = Zeroizing::new(0u64);
        for byte in block {
            *bits = (*bits << 8) | u64::from(*byte);
        }
        for shift in (0..8).rev() {
            if written > 0 && written % GROUP_CHARS == 0 {
                text.push(' ');
            }
            let index = usize::try_from((*bits >> (shift * 5)) & 31).unwrap_or(0);
            text.push(char::from(ALPHABET[index]));
            written += 1;
        }
    }
    text
}

/// Reads a typed paper key back into the key's bytes.
///
/// # Errors
///
/// [`PaperKeyError`] when the text is not a paper key or its checksum does not fit.
pub fn parse(text: &str) -> Result<Zeroizing<[u8; KEY_BYTES]>, PaperKeyError> {
    if text.chars().count() > MAX_INPUT_CHARS {
        return Err(PaperKeyError::TooLong);
    }
    let mut values = Zeroizing::new([0u8; PAPER_KEY_CHARS]);
    let mut found = 0;
    for c in text.chars() {
        if c.is_whitespace() || c == '-' {
            continue;
        }
        found += 1;
        let value = match c.to_ascii_uppercase() {
            '0' => Some(14), // O
            '1' => Some(8),  // I
            '8' => Some(1),  // B
            c => ALPHABET
                .iter()
                .position(|&a| char::from(a) == c)
                .and_then(|p| u8::try_from(p).ok()),
        };
        let Some(value) = value else {
            return Err(PaperKeyError::Character { position: found });
        };
        if let Some(slot) = values.get_mut(found - 1) {
            *slot = value;
        }
    }
    if found != PAPER_KEY_CHARS {
        return Err(PaperKeyError::Length { found });
    }
    let mut bytes = Zeroizing::new([0u8; KEY_BYTES + CHECKSUM_BYTES]);
    for (block, chars) in bytes.chunks_exact_mut(5).zip(values.chunks_exact(8)) {
        let mut bits = Zeroizing::new(0u64);
        for value in chars {
            *bits = (*bits << 5) | u64::from(*value);
        }
        for (index, byte) in block.iter_mut().enumerate() {
            *byte = ((*bits >> (8 * (4 - index))) & 0xff) as u8;
        }
    }
    let mut key = Zeroizing::new([0u8; KEY_BYTES]);
    key.copy_from_slice(&bytes[..KEY_BYTES]);
    if checksum(&key) != bytes[KEY_BYTES..] {
        return Err(PaperKeyError::Checksum);
    }
    Ok(key)
}

/// Whether `text` is a paper key as [`encode`] writes it (what a sheet accepts).
pub fn is_encoded(text: &str) -> bool {
    text.len() == PAPER_KEY_CHARS + PAPER_KEY_CHARS / GROUP_CHARS - 1
        && text
            .split(' ')
            .all(|group| group.len() == GROUP_CHARS && group.bytes().all(|b| ALPHABET.contains(&b)))
        && parse(text).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seed: u8) -> [u8; KEY_BYTES] {
        let mut key = [0u8; KEY_BYTES];
        for (index, byte) in key.iter_mut().enumerate() {
            *byte = seed
                .wrapping_mul(31)
                .wrapping_add(u8::try_from(index).unwrap_or(0) * 7);
        }
        key
    }

    #[test]
    fn round_trip_with_every_byte_value_and_the_typing_slack() {
        for seed in 0..=255u8 {
            let key = key(seed);
            let text = encode(&key);
            assert!(is_encoded(&text), "{}", text.as_str());
            assert_eq!(text.split(' ').count(), 14);
            assert_eq!(*parse(&text).unwrap(), key);
            // Lower case, dashes, other spacing, and 0/1/8 for O/I/B all read back.
            let sloppy: String = text
                .to_lowercase()
                .replace(' ', " - ")
                .replace('o', "0")
                .replace('i', "1")
                .replace('b', "8");
            assert_eq!(*parse(&format!("  {sloppy}\n")).unwrap(), key);
        }
    }

    #[test]
    fn a_typo_is_refused_by_the_checksum_or_the_alphabet() {
        let key = key(7);
        let text = encode(&key);
        let chars: Vec<char> = text.chars().filter(|c| *c != ' ').collect();
        let mut refused = 0;
        for position in 0..chars.len() {
            for replacement in ALPHABET.iter().map(|&a| char::from(a)) {
                if replacement == chars[position] {
                    continue;
                }
                let mut typo = chars.clone();
                typo[position] = replacement;
                let typo: String = typo.into_iter().collect();
                match parse(&typo) {
                    Err(PaperKeyError::Checksum) => refused += 1,
                    // 35 bytes are exactly 56 characters: no bit is left unused, so every
                    // character changes the key or its checksum.
                    Ok(_) => panic!("a typo at character {position} was accepted"),
                    Err(e) => panic!("unexpected {e}"),
                }
            }
        }
        assert_eq!(refused, 56 * 31);
        assert_eq!(
            parse(&format!("@{}", &text[1..])),
            Err(PaperKeyError::Character { position: 1 })
        );
        assert_eq!(
            parse(&text[..text.len() - 1]),
            Err(PaperKeyError::Length { found: 55 })
        );
        assert_eq!(parse(&"A".repeat(300)), Err(PaperKeyError::TooLong));
        assert!(!is_encoded(&text.to_lowercase()));
    }
}
