//! The zero-knowledge check of the host-loss walk: the hub's data directory (every file, the
//! SQLite database with its WAL) and every log of the demo are searched for the recovery
//! words (the phrase and any two consecutive words) and for K (the `data` of the key file).
//!
//! The needles never leave this module's memory: a hit names the file and what was found,
//! never the bytes. A control needle that must be found (K's fingerprint, which the hub keeps
//! on purpose) shows that the scan reads what the hub stores.

use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

use super::DemoError;

/// What the scan found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanResult {
    /// Files read.
    pub files: usize,
    /// Bytes read.
    pub bytes: u64,
    /// Secret needles searched for (the phrase, its word pairs, K).
    pub needles: usize,
    /// `(file, what)` for each secret found: empty when nothing leaked.
    pub found: Vec<(PathBuf, String)>,
    /// Files holding the control needle (K's public fingerprint).
    pub control_hits: usize,
}

/// A secret to look for, and how a hit is reported.
#[derive(Debug)]
pub struct Needle {
    /// What it is (`the recovery phrase`, `words 3 and 4`, `K`).
    pub what: String,
    /// The bytes.
    pub bytes: Zeroizing<Vec<u8>>,
}

/// The needles of a recovery phrase: the whole phrase and each pair of consecutive words.
pub fn phrase_needles(phrase: &str) -> Vec<Needle> {
    let words: Vec<&str> = phrase.split(' ').collect();
    let mut needles = vec![Needle {
        what: "the recovery phrase".to_owned(),
        bytes: Zeroizing::new(phrase.as_bytes().to_vec()),
    }];
    needles.extend(words.windows(2).enumerate().map(|(i, pair)| Needle {
        what: format!("words {} and {} of the code", i + 1, i + 2),
        bytes: Zeroizing::new(pair.join(" ").into_bytes()),
    }));
    needles
}

/// Reads every file under each of `roots` (a root may be a single file) and looks for each
/// needle, and for `control`.
pub fn scan(roots: &[PathBuf], needles: &[Needle], control: &str) -> Result<ScanResult, DemoError> {
    let mut result = ScanResult {
        needles: needles.len(),
        ..ScanResult::default()
    };
    for path in files_under(roots)? {
        let bytes = Zeroizing::new(std::fs::read(&path).map_err(|source| DemoError::Artifact {
            path: path.clone(),
            source,
        })?);
        result.files += 1;
        result.bytes += u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        for needle in needles {
            if contains(&bytes, &needle.bytes) {
                result.found.push((path.clone(), needle.what.clone()));
            }
        }
        if contains(&bytes, control.as_bytes()) {
            result.control_hits += 1;
        }
    }
    Ok(result)
}

fn files_under(roots: &[PathBuf]) -> Result<Vec<PathBuf>, DemoError> {
    let mut files = Vec::new();
    let mut stack: Vec<PathBuf> = roots.to_vec();
    while let Some(path) = stack.pop() {
        let artifact = |source| DemoError::Artifact {
            path: path.clone(),
            source,
        };
        let meta = std::fs::symlink_metadata(&path).map_err(artifact)?;
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).map_err(artifact)? {
                stack.push(entry.map_err(artifact)?.path());
            }
        } else if meta.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// The `data` field of the PBS key file `path` (K itself, base64).
pub fn key_data(path: &Path) -> Result<Zeroizing<String>, DemoError> {
    let text =
        Zeroizing::new(
            std::fs::read_to_string(path).map_err(|source| DemoError::Artifact {
                path: path.to_owned(),
                source,
            })?,
        );
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|err| DemoError::Check(format!("{}: {err}", path.display())))?;
    let data = value["data"]
        .as_str()
        .filter(|d| d.len() >= 32)
        .ok_or_else(|| DemoError::Check(format!("{} holds no key data", path.display())))?;
    Ok(Zeroizing::new(data.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_of_words_anywhere_is_found_and_named_without_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("logs")).unwrap();
        std::fs::write(dir.path().join("logs/a.log"), "x able about y").unwrap();
        std::fs::write(dir.path().join("hub.db"), "fingerprint aa:bb").unwrap();
        let needles = phrase_needles("abandon ability able about");
        assert_eq!(needles.len(), 4);
        let result = scan(&[dir.path().to_owned()], &needles, "aa:bb").unwrap();
        assert_eq!(result.files, 2);
        assert_eq!(result.control_hits, 1);
        assert_eq!(
            result.found,
            [(
                dir.path().join("logs/a.log"),
                "words 3 and 4 of the code".to_owned()
            )]
        );
    }
}
