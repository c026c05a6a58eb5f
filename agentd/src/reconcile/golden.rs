//! Provenance of what is restored (DESIGN §5): before every restore, the desired golden
//! archive must be one this host journaled (built by its helper, or named in an
//! operator-signed document), the desired hash must be the journaled one, and the file
//! must still hash to it when the helper reads it now. Anything else is refused, so a hub
//! cannot point a new guest at another customer's backup.

use bosun_proto::desired::GoldenArchive;
use bosun_proto::helper::{ArchiveName, HashArchive, Output, Request};

use crate::helper_client::{HelperClient, HelperClientError};
use crate::journal::{GoldenRecord, GoldenSource, JournalError, JournalHandle};

/// Why a golden archive may not be restored.
#[derive(Debug, thiserror::Error)]
pub enum GoldenRefusal {
    /// The volid is not a backup archive under a storage's dump directory.
    #[error("golden volid {volid:?} is not a container backup archive")]
    NotAnArchive {
        /// The desired volid.
        volid: String,
    },
    /// Nothing of known provenance has this volid (never built here, never signed).
    #[error(
        "golden archive {volid} was neither built by this host's helper nor named in a signed document"
    )]
    UnknownProvenance {
        /// The desired volid.
        volid: String,
    },
    /// The hub's hash is not the one journaled for this archive.
    #[error("golden archive {volid}: desired sha256 {desired} is not the journaled {journaled}")]
    HashNotJournaled {
        /// The desired volid.
        volid: String,
        /// What the hub sent.
        desired: String,
        /// What the journal holds.
        journaled: String,
    },
    /// The file no longer hashes to what was journaled: it changed after it was recorded.
    #[error(
        "golden archive {volid} changed since it was journaled: sha256 is now {found}, journaled {journaled}"
    )]
    Changed {
        /// The desired volid.
        volid: String,
        /// What the helper read now.
        found: String,
        /// What the journal holds.
        journaled: String,
    },
    /// No helper is configured, so the archive cannot be read and checked.
    #[error("golden archive {volid} cannot be verified: no helper is configured")]
    NoHelper {
        /// The desired volid.
        volid: String,
    },
    /// The helper could not hash the archive.
    #[error("hashing golden archive {volid} through the helper")]
    Hash {
        /// The desired volid.
        volid: String,
        /// Cause.
        #[source]
        source: HelperClientError,
    },
    /// The helper answered something other than a hash.
    #[error("the helper answered hash_archive for {volid} with {output}")]
    UnexpectedOutput {
        /// The desired volid.
        volid: String,
        /// The answer's kind.
        output: String,
    },
    /// The journal could not be read.
    #[error("reading the golden archive record of {volid}")]
    Journal {
        /// The desired volid.
        volid: String,
        /// Cause.
        #[source]
        source: JournalError,
    },
}

/// Reads an archive's bytes now and gives their SHA-256 (lowercase hex).
pub trait ArchiveHasher {
    /// Hashes the archive `name` in the golden storage's dump directory.
    fn hash(
        &self,
        name: &ArchiveName,
    ) -> impl std::future::Future<Output = Result<String, HashFailure>> + Send;
}

/// Why an [`ArchiveHasher`] gave no hash.
#[derive(Debug)]
pub enum HashFailure {
    /// The helper call failed.
    Helper(HelperClientError),
    /// The helper answered with another output.
    Unexpected(String),
}

impl ArchiveHasher for HelperClient {
    async fn hash(&self, name: &ArchiveName) -> Result<String, HashFailure> {
        let request = Request::HashArchive(HashArchive {
            archive: name.clone(),
        });
        match self.call(&request).await.map_err(HashFailure::Helper)? {
            Output::ArchiveHashed { sha256, .. } => Ok(sha256),
            other => Err(HashFailure::Unexpected(format!("{other:?}"))),
        }
    }
}

/// The archive's file name in a `<storage>:backup/<file>` volid.
pub fn archive_name(volid: &str) -> Option<ArchiveName> {
    let (_, rest) = volid.split_once(':')?;
    ArchiveName::new(rest.strip_prefix("backup/")?).ok()
}

/// Checks `golden` right before a restore; gives its journal record when it may be
/// restored.
pub async fn verify<H: ArchiveHasher>(
    journal: &JournalHandle,
    hasher: Option<&H>,
    golden: &GoldenArchive,
) -> Result<GoldenRecord, GoldenRefusal> {
    let volid = golden.volid.clone();
    let name = archive_name(&volid).ok_or_else(|| GoldenRefusal::NotAnArchive {
        volid: volid.clone(),
    })?;
    let record = journal
        .golden(volid.clone())
        .await
        .map_err(|source| GoldenRefusal::Journal {
            volid: volid.clone(),
            source,
        })?
        .ok_or_else(|| GoldenRefusal::UnknownProvenance {
            volid: volid.clone(),
        })?;
    if !golden.sha256.eq_ignore_ascii_case(&record.sha256) {
        return Err(GoldenRefusal::HashNotJournaled {
            volid,
            desired: golden.sha256.clone(),
            journaled: record.sha256,
        });
    }
    let hasher = hasher.ok_or_else(|| GoldenRefusal::NoHelper {
        volid: volid.clone(),
    })?;
    let found = hasher.hash(&name).await.map_err(|e| match e {
        HashFailure::Helper(source) => GoldenRefusal::Hash {
            volid: volid.clone(),
            source,
        },
        HashFailure::Unexpected(output) => GoldenRefusal::UnexpectedOutput {
            volid: volid.clone(),
            output,
        },
    })?;
    if found != record.sha256 {
        return Err(GoldenRefusal::Changed {
            volid,
            found,
            journaled: record.sha256,
        });
    }
    Ok(record)
}

/// Why a finished golden build was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum GoldenRecordError {
    /// The helper's answer was not a golden build.
    #[error("the helper answered build_golden with {output}")]
    UnexpectedOutput {
        /// The answer's kind.
        output: String,
    },
    /// The helper named no archive, or one it could not hash (not under its dump root):
    /// nothing of known provenance was built.
    #[error("the golden build left no archive the helper could hash (archive {archive:?})")]
    Unverifiable {
        /// The archive path the helper reported, if any.
        archive: Option<String>,
    },
    /// Journaling the archive failed.
    #[error("journaling golden archive {volid}")]
    Journal {
        /// The archive's volid.
        volid: String,
        /// Cause.
        #[source]
        source: JournalError,
    },
}

/// Journals the archive a `build_golden` call produced, on `storage`, with the SHA-256 the
/// helper computed by reading the file. Gives the record.
pub async fn record_build(
    journal: &JournalHandle,
    storage: &str,
    output: Output,
) -> Result<GoldenRecord, GoldenRecordError> {
    let Output::GoldenBuilt {
        archive, sha256, ..
    } = output
    else {
        return Err(GoldenRecordError::UnexpectedOutput {
            output: format!("{output:?}"),
        });
    };
    let file = archive
        .as_deref()
        .and_then(|a| std::path::Path::new(a).file_name())
        .and_then(|f| f.to_str())
        .and_then(|f| ArchiveName::new(f).ok());
    let (Some(file), Some(sha256)) = (file, sha256) else {
        return Err(GoldenRecordError::Unverifiable { archive });
    };
    let volid = format!("{storage}:backup/{}", file.as_str());
    let journal_err = |source| GoldenRecordError::Journal {
        volid: volid.clone(),
        source,
    };
    journal
        .record_golden(volid.clone(), sha256, GoldenSource::Built)
        .await
        .map_err(journal_err)?;
    let record = journal.golden(volid.clone()).await.map_err(journal_err)?;
    tracing::info!(volid, "golden archive journaled with the helper's hash");
    record.ok_or(GoldenRecordError::Unverifiable { archive })
}

#[cfg(test)]
mod tests;
