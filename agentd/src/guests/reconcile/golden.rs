//! Provenance of what is restored (DESIGN §5): before every restore, the desired golden
//! archive must be one this host journaled (built by its helper, or named in an
//! operator-signed document), the desired hash must be the journaled one, and the file
//! must still hash to it when the helper reads it now. Anything else is refused, so a hub
//! cannot point a new guest at another customer's backup.
//!
//! An operator names a golden archive by signing a `bosun.golden/v1` document (volid and
//! SHA-256, optionally bound to one host and ending at an expiry) that travels in the
//! desired state ([`bosun_proto::golden`]); the first restore that meets it checks the
//! signature against `allowed_signers` (namespace `bosun-golden@v1`), has the helper hash
//! the file, and journals the archive as signed, with the signed bytes and its signer
//! ([`signed`]). Every later use verifies that signature again against `allowed_signers`
//! as it is then, and the document's host and expiry against this host and the clock: an
//! operator removed from the file, or a document that expired, seeds no further guest.
//! Golden documents and recipes carry a serial that only rises (decision 0092): once this
//! host used a document (or accepted a recipe) with a serial, an older one seeds no further
//! guest — neither a signed archive nor a build of an older recipe — and the highest serial
//! is journaled, so a restart forgets nothing.
//! [`GoldenCheck`] runs all of this before every provisioning restore and audits a refusal
//! once (`golden.refused`, which the hub turns into a `golden_refused` alert). A guest may
//! name a golden *version* instead of a volid: it maps to this host's newest build of that
//! version ([`crate::guests::golden_build`]), and a version never built here is refused.

use std::collections::HashSet;
use std::path::PathBuf;

use bosun_proto::desired::{GoldenArchive, GuestKind};
use bosun_proto::golden::{GoldenScopeError, Superseded, check_serial};
use bosun_proto::helper::{ArchiveName, HashArchive, Output, Request};
use parking_lot::Mutex;
use uuid::Uuid;

use crate::clock::SharedClock;
use crate::data::backup::proof::archive_name;
use crate::links::helper::{HelperClient, HelperClientError};
use crate::ops::journal::{
    AuditEvent, GoldenRecord, GoldenSerialKind, GoldenSource, JournalError, JournalHandle,
};
use crate::trust::signing::{AllowedSigners, AllowedSignersError, SignatureError};

mod pending;
pub mod signed;

pub use pending::PendingBuild;
pub use signed::{GoldenUse, admit_signed};

/// Why a golden archive may not be restored.
#[derive(Debug, thiserror::Error)]
pub enum GoldenRefusal {
    /// The volid is not a backup archive under a storage's dump directory.
    #[error("golden volid {volid:?} is not a backup archive")]
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
    /// A build of this host whose boot test has not passed (not yet, or it failed).
    #[error("golden archive {volid} was built here but has not passed its boot test")]
    Unverified {
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
    /// The signed document in the desired state is malformed or names another archive.
    #[error("golden archive {volid}: the signed document is not usable: {reason}")]
    BadSignedDocument {
        /// The desired volid.
        volid: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The agent's `allowed_signers` file could not be read.
    #[error("golden archive {volid}: reading the allowed signers")]
    Signers {
        /// The desired volid.
        volid: String,
        /// Cause.
        #[source]
        source: AllowedSignersError,
    },
    /// The signature is not an allowed operator's over this document.
    #[error("golden archive {volid}: the signature is refused")]
    Signature {
        /// The desired volid.
        volid: String,
        /// Cause.
        #[source]
        source: SignatureError,
    },
    /// The signed archive was admitted, but its signature no longer verifies against
    /// `allowed_signers` as it is now: the signer was removed, narrowed to other namespaces
    /// or is outside its validity window.
    #[error(
        "golden archive {volid}: its signer {fingerprint} ({principals}) is no longer trusted for golden archives"
    )]
    SignerRevoked {
        /// The desired volid.
        volid: String,
        /// The signing key's fingerprint, as journaled.
        fingerprint: String,
        /// Its principals when it was admitted.
        principals: String,
        /// Why the signature is refused now (boxed: the refusal stays small).
        #[source]
        source: Box<SignatureError>,
    },
    /// The signed document is bound to another host, or has expired.
    #[error("golden archive {volid}: the signed document does not cover this use")]
    OutOfScope {
        /// The desired volid.
        volid: String,
        /// Which limit it is outside.
        #[source]
        source: GoldenScopeError,
    },
    /// The signed document (or the recipe a golden version was built for) has a lower serial
    /// than one this host already holds: the operator has since signed a newer choice.
    #[error("{volid}: the operator has since signed a newer choice")]
    Superseded {
        /// The desired volid, or `golden version …`.
        volid: String,
        /// The serials.
        #[source]
        source: Superseded,
    },
    /// The desired golden version has no build on this host.
    #[error("golden version {version} was never built by this host's helper")]
    UnknownVersion {
        /// The desired version.
        version: String,
    },
    /// The archive seeds guests of another kind than the guest's: a container base named for
    /// a VM, or a VM base for a container (decision 0114). The kind is the signed document's
    /// (a build of this host's helper is a container base), and the archive's file name must
    /// say the same.
    #[error("golden archive {volid} is a {archive} base, not a {guest} one")]
    WrongKind {
        /// The desired volid.
        volid: String,
        /// The kind the archive was signed (or built) for.
        archive: GuestKind,
        /// The guest's kind.
        guest: GuestKind,
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

impl GoldenRefusal {
    /// A short name for the audit record and the hub's alert.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotAnArchive { .. } => "not_an_archive",
            Self::UnknownProvenance { .. } => "unknown_provenance",
            Self::Unverified { .. } => "unverified",
            Self::HashNotJournaled { .. } => "hash_not_journaled",
            Self::Changed { .. } => "changed",
            Self::NoHelper { .. } => "no_helper",
            Self::Hash { .. } | Self::UnexpectedOutput { .. } => "unhashable",
            Self::BadSignedDocument { .. } => "bad_signed_document",
            Self::Signers { .. } => "signers_unreadable",
            Self::Signature { .. } => "bad_signature",
            Self::SignerRevoked { .. } => "signer_revoked",
            Self::OutOfScope {
                source: GoldenScopeError::OtherHost { .. },
                ..
            } => "other_host",
            Self::OutOfScope {
                source: GoldenScopeError::Expired { .. },
                ..
            } => "expired",
            Self::Journal { .. } => "journal",
            Self::UnknownVersion { .. } => "unknown_version",
            Self::Superseded { .. } => "superseded",
            Self::WrongKind { .. } => "wrong_kind",
        }
    }
}

/// The kind of guest `record`'s archive seeds: a signed document's `kind` (the bytes the
/// signature was verified over), a build of this host's helper a container; and the archive's
/// file name (`vzdump-lxc-…`, `vzdump-qemu-…`) must agree. Anything but `kind` is refused
/// before anything is restored (decision 0114).
pub fn check_kind(record: &GoldenRecord, kind: GuestKind) -> Result<(), GoldenRefusal> {
    let signed = match &record.source {
        GoldenSource::Built => GuestKind::Lxc,
        GoldenSource::Signed(signature) => {
            serde_json::from_slice::<bosun_proto::golden::GoldenDocument>(&signature.document)
                .map_err(|e| GoldenRefusal::BadSignedDocument {
                    volid: record.volid.clone(),
                    reason: e.to_string(),
                })?
                .kind
        }
    };
    let name = record
        .volid
        .split_once(':')
        .map(|(_, path)| path.rsplit('/').next().unwrap_or(path))
        .unwrap_or_default();
    let named = if name.starts_with("vzdump-qemu-") {
        Some(GuestKind::Qemu)
    } else if name.starts_with("vzdump-lxc-") {
        Some(GuestKind::Lxc)
    } else {
        None
    };
    let refused = |archive| GoldenRefusal::WrongKind {
        volid: record.volid.clone(),
        archive,
        guest: kind,
    };
    if signed != kind {
        return Err(refused(signed));
    }
    match named {
        Some(named) if named != kind => Err(refused(named)),
        None => Err(GoldenRefusal::NotAnArchive {
            volid: record.volid.clone(),
        }),
        Some(_) => Ok(()),
    }
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
            dir: None,
            rate_mib_s: None,
        });
        match self.call(&request).await.map_err(HashFailure::Helper)? {
            Output::ArchiveHashed { sha256, .. } => Ok(sha256),
            other => Err(HashFailure::Unexpected(format!("{other:?}"))),
        }
    }
}

/// Checks `golden` right before a restore; gives its journal record when it may be
/// restored. A signed archive's journaled signature is verified again first, against
/// `signers` (read only for a signed archive) and `at` ([`signed::still_covers`]); a
/// built archive needs no signer. A signed archive that passes raises the journaled
/// highest golden serial to its document's: from then on older documents are refused.
pub async fn verify<H: ArchiveHasher>(
    journal: &JournalHandle,
    hasher: Option<&H>,
    signers: impl FnOnce() -> Result<AllowedSigners, AllowedSignersError>,
    at: GoldenUse,
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
    if record.source == GoldenSource::Built && record.verified_at.is_none() {
        // A build whose boot test has not passed is the refresh's candidate, never a base:
        // named by volid and hash (both in its audit row) it is refused all the same.
        return Err(GoldenRefusal::Unverified { volid });
    }
    if !golden.sha256.eq_ignore_ascii_case(&record.sha256) {
        return Err(GoldenRefusal::HashNotJournaled {
            volid,
            desired: golden.sha256.clone(),
            journaled: record.sha256,
        });
    }
    let serial = match &record.source {
        GoldenSource::Signed(signature) => {
            let covered = signed::still_covers(&record, signature, signers, at)?;
            tracing::debug!(volid, signer = %covered.signer.fingerprint(), principals = covered.signer.principals(), serial = covered.serial, "signed golden archive still trusted");
            Some(covered.serial)
        }
        GoldenSource::Built => None,
    };
    let hasher = hasher.ok_or_else(|| GoldenRefusal::NoHelper {
        volid: volid.clone(),
    })?;
    let found = fresh_hash(hasher, &name, &volid).await?;
    if found != record.sha256 {
        return Err(GoldenRefusal::Changed {
            volid,
            found,
            journaled: record.sha256,
        });
    }
    if let Some(serial) = serial
        && serial > at.golden_serial
    {
        let rose = journal
            .raise_golden_serial(GoldenSerialKind::Golden, serial)
            .await
            .map_err(|source| GoldenRefusal::Journal {
                volid: volid.clone(),
                source,
            })?;
        if rose {
            tracing::info!(
                volid,
                serial,
                "golden documents below this serial are refused from now on"
            );
        }
    }
    Ok(record)
}

/// `golden` itself when it names a volid; for a golden version, this host's newest build of
/// that version (its volid and the hash the helper computed when it was built), unless it
/// was built for a recipe whose serial is below `held_recipe`, the highest this host holds.
pub async fn resolve_version(
    journal: &JournalHandle,
    held_recipe: u64,
    golden: &GoldenArchive,
) -> Result<GoldenArchive, GoldenRefusal> {
    let Some(version) = &golden.version else {
        return Ok(golden.clone());
    };
    let build = journal
        .golden_build(version.clone(), None)
        .await
        .map_err(|source| GoldenRefusal::Journal {
            volid: format!("golden version {version}"),
            source,
        })?
        .ok_or_else(|| GoldenRefusal::UnknownVersion {
            version: version.clone(),
        })?;
    check_serial(build.recipe_serial, held_recipe).map_err(|source| GoldenRefusal::Superseded {
        volid: format!("golden version {version}"),
        source,
    })?;
    Ok(GoldenArchive {
        volid: build.volid,
        sha256: build.sha256,
        signed: None,
        version: None,
    })
}

pub(super) async fn fresh_hash<H: ArchiveHasher>(
    hasher: &H,
    name: &ArchiveName,
    volid: &str,
) -> Result<String, GoldenRefusal> {
    hasher.hash(name).await.map_err(|e| match e {
        HashFailure::Helper(source) => GoldenRefusal::Hash {
            volid: volid.to_owned(),
            source,
        },
        HashFailure::Unexpected(output) => GoldenRefusal::UnexpectedOutput {
            volid: volid.to_owned(),
            output,
        },
    })
}

/// How many refused (archive, hash, reason) triples are remembered so each is audited once.
const MAX_REPORTED_REFUSALS: usize = 1024;

/// The check every provisioning restore passes first: a signed document admitted
/// ([`admit_signed`]), then [`verify`]. A refusal is logged and audited once per archive,
/// hash and reason, not on every reconcile pass.
#[derive(Debug)]
pub struct GoldenCheck {
    journal: JournalHandle,
    hasher: Option<HelperClient>,
    signers_path: PathBuf,
    host_id: Uuid,
    clock: SharedClock,
    reported: Mutex<HashSet<(String, String, &'static str)>>,
    /// The golden version the build task is building (not reported while it builds).
    pending: PendingBuild,
}

impl GoldenCheck {
    /// A check for host `host_id`, reading `allowed_signers` at `signers_path` (afresh on
    /// each check that needs it, so an edit to the file counts from the next check) and
    /// hashing through `hasher`.
    pub fn new(
        journal: JournalHandle,
        hasher: Option<HelperClient>,
        signers_path: PathBuf,
        host_id: Uuid,
        clock: SharedClock,
    ) -> Self {
        Self {
            journal,
            hasher,
            signers_path,
            host_id,
            clock,
            reported: Mutex::new(HashSet::new()),
            pending: PendingBuild::default(),
        }
    }

    /// The same check, treating a version `pending` is building as not yet there rather
    /// than refused: the guest waits for the build (it is refused all the same, but not
    /// audited or alerted until the build has ended without it).
    #[must_use]
    pub fn with_pending(mut self, pending: PendingBuild) -> Self {
        self.pending = pending;
        self
    }

    /// Whether `golden` may be restored now; gives its journal record. A golden version is
    /// first mapped to this host's newest build of it ([`resolve_version`]).
    pub async fn check(
        &self,
        golden: &GoldenArchive,
        kind: GuestKind,
    ) -> Result<GoldenRecord, GoldenRefusal> {
        let signers = || AllowedSigners::load(&self.signers_path);
        let checked = async {
            let held = |kind| async move {
                self.journal
                    .golden_serial(kind)
                    .await
                    .map_err(|source| GoldenRefusal::Journal {
                        volid: golden.volid.clone(),
                        source,
                    })
            };
            let at = GoldenUse {
                host_id: self.host_id,
                now: self.clock.now(),
                golden_serial: held(GoldenSerialKind::Golden).await?,
                recipe_serial: held(GoldenSerialKind::Recipe).await?,
            };
            let golden = resolve_version(&self.journal, at.recipe_serial, golden).await?;
            admit_signed(&self.journal, self.hasher.as_ref(), signers, at, &golden).await?;
            let record = verify(&self.journal, self.hasher.as_ref(), signers, at, &golden).await?;
            check_kind(&record, kind)?;
            Ok(record)
        }
        .await;
        if let Err(refusal) = &checked {
            self.report(golden, refusal).await;
        }
        checked
    }

    async fn report(&self, golden: &GoldenArchive, refusal: &GoldenRefusal) {
        if let GoldenRefusal::UnknownVersion { version } = refusal
            && self.pending.is(version)
        {
            tracing::info!(
                version,
                "golden version still building; the guest waits for it"
            );
            return;
        }
        let named = match &golden.version {
            Some(version) => format!("golden version {version}"),
            None => golden.volid.clone(),
        };
        let golden = &GoldenArchive {
            volid: named,
            ..golden.clone()
        };
        let key = (
            golden.volid.clone(),
            golden.sha256.clone(),
            refusal.reason(),
        );
        {
            let mut reported = self.reported.lock();
            if reported.contains(&key) {
                return;
            }
            // A hub naming ever new archives must not grow this without bound: forgetting
            // costs at most one repeated audit row per archive.
            if reported.len() >= MAX_REPORTED_REFUSALS {
                reported.clear();
            }
            reported.insert(key);
        }
        let text = bosun_errchain::error_chain(refusal);
        tracing::error!(volid = %golden.volid, reason = refusal.reason(), error = %text, "golden archive refused; no guest is provisioned from it");
        let mut event = AuditEvent::new("golden.refused");
        event.detail = serde_json::json!({
            "volid": golden.volid.chars().take(255).collect::<String>(),
            "sha256": golden.sha256,
            "reason": refusal.reason(),
            "error": text,
        });
        if let Err(e) = self.journal.append_audit(event).await {
            tracing::error!(error = %bosun_errchain::error_chain(&e), "could not audit a golden refusal");
        }
    }
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
