//! The recovery code R: 12 words of the English BIP39 list, 128 random bits and a 4-bit
//! checksum.
//!
//! The code is read back by a person from paper, so [`RecoveryCode::parse`] is forgiving
//! where it can be without guessing: case and spacing do not matter, and a word may be
//! typed by its first four letters (every word of the list is unique in those). Where it
//! cannot be forgiving it says what it can: the position of a word that is not on the list,
//! with the word it most likely was; a checksum that does not fit (a mistyped word that
//! happens to be on the list, or two words swapped) cannot point at a position, and says so.
//!
//! The words are a secret. They live in [`Zeroizing`] buffers, `Debug` does not print them,
//! and [`CodeError`] carries positions and suggestions, never what was typed.

use std::fmt;

use bip39::{Language, Mnemonic};
use rand::TryRngCore as _;
use zeroize::Zeroizing;

/// How many words a recovery code has.
pub const WORDS: usize = 12;

/// How many leading letters make a word unique in the BIP39 English list.
const UNIQUE_PREFIX: usize = 4;

/// Longest input accepted for a code (12 words of at most 8 letters, generous spacing).
const MAX_INPUT: usize = 1024;

/// A recovery code; zeroized when dropped.
pub struct RecoveryCode {
    entropy: Zeroizing<[u8; 16]>,
}

impl fmt::Debug for RecoveryCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RecoveryCode([REDACTED])")
    }
}

/// Why typed words are not a recovery code. Carries positions (1-based) and suggestions,
/// never the words typed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodeError {
    /// Not 12 words.
    #[error("a recovery code has 12 words; {found} were given")]
    WordCount {
        /// Words found.
        found: usize,
    },
    /// A word that is not on the list.
    #[error(
        "word {position} is not a recovery-code word{}",
        suggestion_text(suggestions)
    )]
    UnknownWord {
        /// 1-based position.
        position: usize,
        /// Likely intended words.
        suggestions: Vec<&'static str>,
    },
    /// A prefix shorter than four letters that fits several words.
    #[error(
        "word {position} is too short to tell which word it is{}",
        suggestion_text(candidates)
    )]
    Ambiguous {
        /// 1-based position.
        position: usize,
        /// The words it could be (at most a handful).
        candidates: Vec<&'static str>,
    },
    /// Every word is on the list but they do not fit together.
    #[error(
        "the words do not fit together (their checksum is wrong): one word is mistyped as \
         another word of the list, or two words are swapped; check each word against the sheet"
    )]
    Checksum,
    /// Too much input to be a code.
    #[error("the input is longer than any recovery code")]
    TooLong,
    /// The random source failed while making a code.
    #[error("the random source failed")]
    Random,
}

fn suggestion_text(words: &[&str]) -> String {
    match words {
        [] => String::new(),
        [one] => format!("; did you mean \"{one}\"?"),
        many => format!("; did you mean one of: {}?", many.join(", ")),
    }
}

impl RecoveryCode {
    /// A new code from the operating system's random source.
    pub fn generate() -> Result<Self, CodeError> {
        let mut entropy = Zeroizing::new([0u8; 16]);
        rand::rngs::OsRng
            .try_fill_bytes(&mut *entropy)
            .map_err(|_| CodeError::Random)?;
        Ok(Self { entropy })
    }

    /// Reads a code typed by a person: 12 words separated by spaces, commas, newlines
    /// or numbers from the sheet's grid ("1. abandon 2. ability …" works too).
    pub fn parse(input: &str) -> Result<Self, CodeError> {
        if input.len() > MAX_INPUT {
            return Err(CodeError::TooLong);
        }
        let list = Language::English.word_list();
        let lowered = Zeroizing::new(input.to_ascii_lowercase());
        let typed: Vec<&str> = lowered
            .split(|c: char| !c.is_ascii_alphabetic())
            .filter(|w| !w.is_empty())
            .collect();
        if typed.len() != WORDS {
            return Err(CodeError::WordCount { found: typed.len() });
        }
        let mut indices = Zeroizing::new([0u16; WORDS]);
        for (i, word) in typed.iter().enumerate() {
            indices[i] = resolve(list, word, i + 1)?;
        }
        let mut phrase = Zeroizing::new(String::with_capacity(WORDS * 9));
        for (i, &index) in indices.iter().enumerate() {
            if i > 0 {
                phrase.push(' ');
            }
            phrase.push_str(list[usize::from(index)]);
        }
        let mnemonic = Mnemonic::parse_in_normalized(Language::English, &phrase)
            .map_err(|_| CodeError::Checksum)?;
        let (bytes, len) = mnemonic.to_entropy_array();
        let bytes = Zeroizing::new(bytes);
        drop(mnemonic);
        if len != 16 {
            return Err(CodeError::WordCount { found: WORDS });
        }
        let mut entropy = Zeroizing::new([0u8; 16]);
        entropy.copy_from_slice(&bytes[..16]);
        Ok(Self { entropy })
    }

    /// The 12 words, in order.
    pub fn words(&self) -> Zeroizing<Vec<String>> {
        let mut out = Zeroizing::new(Vec::with_capacity(WORDS));
        if let Ok(mnemonic) = Mnemonic::from_entropy_in(Language::English, self.entropy.as_slice())
        {
            out.extend(mnemonic.words().map(str::to_owned));
        }
        out
    }

    /// The words joined by single spaces: the passphrase the escrow is wrapped under.
    pub fn phrase(&self) -> Zeroizing<String> {
        let words = self.words();
        Zeroizing::new(words.join(" "))
    }
}

/// The list index of a typed word: the word itself, or a prefix of at least four letters
/// (unique in the list), or a prefix shorter than that which fits exactly one word.
fn resolve(
    list: &'static [&'static str; 2048],
    word: &str,
    position: usize,
) -> Result<u16, CodeError> {
    if let Ok(i) = list.binary_search(&word) {
        return u16::try_from(i).map_err(|_| CodeError::Checksum);
    }
    let fits: Vec<&'static str> = Language::English.words_by_prefix_iter(word).collect();
    match fits.as_slice() {
        [one] => {
            let i = list.binary_search(one).map_err(|_| CodeError::Checksum)?;
            u16::try_from(i).map_err(|_| CodeError::Checksum)
        }
        [] => Err(CodeError::UnknownWord {
            position,
            suggestions: suggest(list, word),
        }),
        many if word.len() < UNIQUE_PREFIX => Err(CodeError::Ambiguous {
            position,
            candidates: many.iter().take(6).copied().collect(),
        }),
        // Unreachable for the English list (four letters are unique), kept total.
        many => Err(CodeError::Ambiguous {
            position,
            candidates: many.iter().take(6).copied().collect(),
        }),
    }
}

/// The words a mistyped word most likely was: those sharing its first four letters, else
/// those at the smallest edit distance (at most 2).
fn suggest(list: &'static [&'static str; 2048], word: &str) -> Vec<&'static str> {
    if word.len() >= UNIQUE_PREFIX {
        let by_prefix: Vec<&'static str> = Language::English
            .words_by_prefix_iter(&word[..UNIQUE_PREFIX])
            .take(3)
            .collect();
        if !by_prefix.is_empty() {
            return by_prefix;
        }
    }
    let mut best = usize::MAX;
    let mut out = Vec::new();
    for candidate in list.iter().copied() {
        let d = edit_distance(word, candidate);
        if d < best {
            best = d;
            out.clear();
        }
        if d == best {
            out.push(candidate);
        }
    }
    if best > 2 {
        return Vec::new();
    }
    out.truncate(3);
    out
}

/// Levenshtein distance over bytes (the words are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BIP39 test vector (entropy 0x80 repeated).
    const KNOWN: &str =
        "letter advice cage absurd amount doctor acoustic avoid letter advice cage above";

    #[test]
    fn a_generated_code_reads_back_from_its_words() {
        let code = RecoveryCode::generate().unwrap();
        let words = code.words();
        assert_eq!(words.len(), WORDS);
        let again = RecoveryCode::parse(&words.join(" ")).unwrap();
        assert_eq!(*again.entropy, *code.entropy);
        assert_eq!(again.phrase(), code.phrase());
        assert_ne!(
            *RecoveryCode::generate().unwrap().entropy,
            *code.entropy,
            "fresh randomness each time"
        );
        assert_eq!(format!("{code:?}"), "RecoveryCode([REDACTED])");
    }

    #[test]
    fn case_spacing_grid_numbers_and_four_letter_prefixes_are_accepted() {
        let exact = RecoveryCode::parse(KNOWN).unwrap();
        let sloppy = RecoveryCode::parse(
            " 1. LETTER  2. advi\n3. cage, 4. absu 5. amou 6. doct 7. acou 8. avoi 9. lett 10. advi 11. cage 12. abov\n",
        )
        .unwrap();
        assert_eq!(exact.phrase(), sloppy.phrase());
        assert_eq!(exact.phrase().as_str(), KNOWN);
    }

    #[test]
    fn a_word_off_the_list_is_named_by_position_with_the_likely_word() {
        let typo = KNOWN.replace("doctor", "doktor");
        match RecoveryCode::parse(&typo) {
            Err(CodeError::UnknownWord {
                position,
                suggestions,
            }) => {
                assert_eq!(position, 6);
                assert!(suggestions.contains(&"doctor"), "{suggestions:?}");
            }
            other => panic!("{other:?}"),
        }
        let far = KNOWN.replace("acoustic", "zzzzzzzz");
        let err = RecoveryCode::parse(&far).unwrap_err();
        assert!(
            matches!(err, CodeError::UnknownWord { position: 7, .. }),
            "{err:?}"
        );
        // The message never repeats what was typed.
        assert!(!err.to_string().contains("zzzz"), "{err}");
        assert!(
            RecoveryCode::parse(&typo)
                .unwrap_err()
                .to_string()
                .contains("word 6")
        );
    }

    #[test]
    fn a_short_prefix_that_fits_several_words_asks_for_more() {
        let short = KNOWN.replace("acoustic", "ac");
        assert!(matches!(
            RecoveryCode::parse(&short),
            Err(CodeError::Ambiguous { position: 7, .. })
        ));
    }

    #[test]
    fn swapped_words_and_a_wrong_list_word_fail_the_checksum() {
        let swapped = KNOWN.replace("absurd amount", "amount absurd");
        assert_eq!(
            RecoveryCode::parse(&swapped).unwrap_err(),
            CodeError::Checksum
        );
        let mut words: Vec<&str> = KNOWN.split(' ').collect();
        words[11] = "zoo";
        assert_eq!(
            RecoveryCode::parse(&words.join(" ")).unwrap_err(),
            CodeError::Checksum
        );
    }

    #[test]
    fn wrong_counts_and_huge_input_are_refused() {
        assert_eq!(
            RecoveryCode::parse("abandon ability").unwrap_err(),
            CodeError::WordCount { found: 2 }
        );
        assert_eq!(
            RecoveryCode::parse(&format!("{KNOWN} abandon")).unwrap_err(),
            CodeError::WordCount { found: 13 }
        );
        assert_eq!(
            RecoveryCode::parse(&"a".repeat(5000)).unwrap_err(),
            CodeError::TooLong
        );
        assert_eq!(
            RecoveryCode::parse("").unwrap_err(),
            CodeError::WordCount { found: 0 }
        );
    }

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("absant", "absent"), 1);
        assert_eq!(edit_distance("abc", "abc"), 0);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
