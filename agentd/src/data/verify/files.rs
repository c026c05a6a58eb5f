//! The lighter check on file tiers (DESIGN §8, decision 0103): the local storage, a local
//! directory, a USB disk, an NFS or CIFS share. On the same cadence as PBS's verify, the helper
//! re-reads each archive this agent's backups wrote for a guest on the tier (the newest
//! [`MAX_ARCHIVES`] still listed) and its SHA-256 and size are compared with what the helper
//! recorded when the backup ended ([`ArchiveProver::check`], the check every restore makes).
//!
//! ```text
//!  (guest, file tier) most overdue ─► its journaled archives on the tier's storage
//!    ─► listed by the storage? (an older one pruned: skipped; the newest gone: failed)
//!    ─► hash_archive, paced (MiB/s), one archive at a time on the host
//!    ─► every one matches: ok | one changed or gone: failed | could not read: error
//! ```
//!
//! One file verification runs at a time on the host, and the helper reads it at the pace
//! the agent's configuration sets, so a large archive re-hashed leaves the disk to the guests
//! beside it. The helper reads only beneath its own backup roots.

use std::collections::BTreeSet;
use std::sync::Arc;

use bosun_errchain::error_chain;
use bosun_proto::desired::StorageType;
use bosun_proto::verify::VerifyOutcome;
use bosun_pve::{ContentFilter, ContentType, Pve, PveClient};
use tokio::sync::watch;

use crate::data::backup::proof::{ArchiveProver, ProofError};
use crate::data::backup::tiers::{Tier, TierPlan};
use crate::ops::journal::{JournalError, JournalHandle, Verification};

/// Most archives of one guest on one tier one verification re-hashes (newest first).
pub const MAX_ARCHIVES: u32 = 32;

/// What the file tiers' check needs.
#[derive(Debug, Clone)]
pub struct FileTiers {
    /// Lists what each storage holds.
    pub pve: Arc<PveClient>,
    /// Checks each archive against its recorded proof (paced: [`ArchiveProver::paced`]).
    pub prover: ArchiveProver,
    /// The tiers backups run on.
    pub tiers: watch::Receiver<TierPlan>,
    /// The journal: which archives were written, and their proofs.
    pub journal: JournalHandle,
}

/// Whether a tier's archives are files the helper can re-read: every tier but PBS.
pub fn is_file_tier(tier: &Tier) -> bool {
    tier.kind != Some(StorageType::Pbs)
}

/// Why a file verification found damage or could not run: `Display` is the reported detail.
#[derive(Debug, thiserror::Error)]
pub enum FileVerifyError {
    /// An archive's bytes are not those the backup wrote (or the file cannot be found where
    /// the storage lists it).
    #[error("{archive}")]
    Damaged {
        /// The archive's volid.
        archive: String,
        /// What the check found.
        #[source]
        reason: ProofError,
    },
    /// The newest archive the journal records on the tier is gone from its storage (never
    /// pruned by retention, which keeps the newest).
    #[error("{archive}: the newest backup on the tier is gone from its storage")]
    NewestGone {
        /// The archive's volid.
        archive: String,
    },
    /// The storage could not be listed.
    #[error("the storage {storage} cannot be listed")]
    Listing {
        /// The Proxmox storage.
        storage: String,
        /// Proxmox's error.
        #[source]
        source: bosun_pve::PveError,
    },
    /// An archive could not be read (helper, Proxmox): nothing judged.
    #[error("{archive}: could not be read")]
    Unreadable {
        /// The archive's volid.
        archive: String,
        /// Why.
        #[source]
        reason: ProofError,
    },
    /// The journal could not be read.
    #[error("the journal is unreadable")]
    Journal(#[from] JournalError),
}

impl FileVerifyError {
    /// Whether the error judges the archives (damage found) rather than failing to run.
    fn judged(&self) -> bool {
        matches!(self, Self::Damaged { .. } | Self::NewestGone { .. })
    }
}

impl FileTiers {
    /// The file tiers backups run on now.
    pub fn current(&self) -> Vec<Tier> {
        let plan = self.tiers.borrow();
        plan.tiers
            .iter()
            .filter(|t| is_file_tier(t))
            .cloned()
            .collect()
    }

    /// The guests with an archive to check on `tier`.
    pub async fn guests_on(&self, tier: &Tier) -> Result<BTreeSet<String>, JournalError> {
        self.journal
            .guests_with_archives(tier.storage.as_str().to_owned())
            .await
    }

    /// Re-hashes `guest_id`'s archives on `tier` and says how it went.
    pub async fn verify(&self, guest_id: String, tier: Tier) -> Verification {
        let started = tokio::time::Instant::now();
        let (outcome, detail) = match self.check(&guest_id, &tier).await {
            Ok(n) => (
                VerifyOutcome::Ok,
                format!("{n} archive(s) match the SHA-256 recorded at backup"),
            ),
            Err(e) => {
                let judged = e.judged();
                let detail = error_chain(&e);
                tracing::warn!(guest_id = %guest_id, tier = tier.report_key(), judged, error = %detail, "file verification did not pass");
                let outcome = if judged {
                    VerifyOutcome::Failed
                } else {
                    VerifyOutcome::Error
                };
                (outcome, detail)
            }
        };
        Verification {
            guest_id,
            tier: tier.report_key().to_owned(),
            outcome,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            detail: super::bounded(&detail),
        }
    }

    /// Checks each recorded archive still listed, newest first; how many matched.
    async fn check(&self, guest_id: &str, tier: &Tier) -> Result<usize, FileVerifyError> {
        let storage = tier.storage.as_str().to_owned();
        let recorded = self
            .journal
            .good_archives(guest_id.to_owned(), storage.clone(), MAX_ARCHIVES)
            .await?;
        let filter = ContentFilter {
            content: Some(ContentType::Backup),
            vmid: None,
        };
        let listed = self
            .pve
            .list_content(&tier.storage, filter)
            .await
            .map_err(|source| FileVerifyError::Listing {
                storage: storage.clone(),
                source,
            })?;
        let mut matched = 0;
        for (i, good) in recorded.iter().enumerate() {
            let Some(item) = listed.iter().find(|item| item.volid == good.archive) else {
                if i == 0 {
                    return Err(FileVerifyError::NewestGone {
                        archive: good.archive.clone(),
                    });
                }
                // Pruned by the tier's retention.
                continue;
            };
            if good.proof.is_none() {
                // Written before proofs were recorded: nothing to compare with.
                continue;
            }
            // An integrity check, not a restore: the archive is checked as the kind its name
            // says (the config inside must agree on PBS).
            let kind = crate::data::backup::content::archive_kind(&item.volid)
                .unwrap_or(bosun_proto::desired::GuestKind::Lxc);
            match self
                .prover
                .check_as(guest_id, kind, item, good.proof.as_ref())
                .await
            {
                Ok(_) => matched += 1,
                Err(reason @ ProofError::BytesChanged { .. }) => {
                    return Err(FileVerifyError::Damaged {
                        archive: good.archive.clone(),
                        reason,
                    });
                }
                Err(reason) => {
                    return Err(FileVerifyError::Unreadable {
                        archive: good.archive.clone(),
                        reason,
                    });
                }
            }
        }
        Ok(matched)
    }
}
