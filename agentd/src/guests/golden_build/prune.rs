//! Old golden archives are removed (decision 0083): every refresh writes a new archive into the
//! golden storage, and the storage keeps this host's newest build (verified, or waiting for its
//! verification) and the newest *verified* one, which guests are provisioned from until the new
//! one passes. A version a desired guest names keeps its newest verified build too. Everything
//! older goes, through the Proxmox API (`DELETE …/storage/{storage}/content/{volume}`, which the
//! agent's token may call on backups it owns, see `pve check`).
//!
//! Never removed: an archive an unfinished operation names, and none at all while a guest is
//! being provisioned or restored (it may have picked its archive and not yet journaled the
//! restore). A removal that fails is journaled with its error, reported, and tried again at the
//! next pass; it never fails the build task.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bosun_errchain::error_chain;
use bosun_pve::{Op, Pve, PveError, VolumeId};

use crate::ops::journal::{JournalError, JournalHandle, KeptArchive};

/// A future an [`ArchiveRemover`] gives.
pub type RemoveFuture<'a> = Pin<Box<dyn Future<Output = Result<(), RemoveError>> + Send + 'a>>;

/// Why an archive was not removed.
#[derive(Debug, thiserror::Error)]
pub enum RemoveError {
    /// The journal's volid is not a volume id.
    #[error("golden archive {volid:?} is not a Proxmox volume id")]
    BadVolid {
        /// The volid.
        volid: String,
    },
    /// Proxmox refused or failed the delete.
    #[error("deleting golden archive {volid} through Proxmox")]
    Pve {
        /// The volid.
        volid: String,
        /// Cause.
        #[source]
        source: PveError,
    },
}

/// What removes an archive (a trait so the builder need not name the Proxmox client's type).
pub trait ArchiveRemover: Send + Sync + std::fmt::Debug {
    /// Deletes `volid` from its storage and waits for Proxmox's task.
    fn remove<'a>(&'a self, volid: &'a str) -> RemoveFuture<'a>;
}

/// Removes archives through `pve`.
pub struct PveRemover<P: Pve>(pub Arc<P>);

impl<P: Pve> std::fmt::Debug for PveRemover<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PveRemover").finish_non_exhaustive()
    }
}

impl<P: Pve + Send + Sync + 'static> ArchiveRemover for PveRemover<P> {
    fn remove<'a>(&'a self, volid: &'a str) -> RemoveFuture<'a> {
        Box::pin(async move {
            let volume = VolumeId::new(volid.to_owned()).map_err(|_| RemoveError::BadVolid {
                volid: volid.to_owned(),
            })?;
            let failed = |source| RemoveError::Pve {
                volid: volid.to_owned(),
                source,
            };
            match self.0.delete_volume(&volume).await {
                Ok(Some(upid)) => self
                    .0
                    .wait_task(Op::DeleteVolume, &upid)
                    .await
                    .map(drop)
                    .map_err(failed),
                Ok(None) => Ok(()),
                // Already gone: what the removal wanted.
                Err(e) if e.is_missing() => Ok(()),
                Err(e) => Err(failed(e)),
            }
        })
    }
}

/// The archives of `kept` (newest first) that may go: all but the newest build, the newest
/// verified build, and the newest verified build of each version in `named`.
pub fn to_prune<'a>(kept: &'a [KeptArchive], named: &BTreeSet<String>) -> Vec<&'a KeptArchive> {
    let mut keep: BTreeSet<&str> = BTreeSet::new();
    if let Some(newest) = kept.first() {
        keep.insert(&newest.volid);
    }
    if let Some(current) = kept.iter().find(|k| k.verified_at.is_some()) {
        keep.insert(&current.volid);
    }
    for version in named {
        if let Some(build) = kept
            .iter()
            .find(|k| k.verified_at.is_some() && &k.version == version)
        {
            keep.insert(&build.volid);
        }
    }
    kept.iter()
        .filter(|k| !keep.contains(k.volid.as_str()))
        .collect()
}

/// What one pruning pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PruneOutcome {
    /// Archives removed.
    pub removed: u32,
    /// Archives whose removal failed (tried again next pass).
    pub failed: u32,
    /// Archives left for the next pass because an operation may be restoring from them.
    pub deferred: u32,
}

impl PruneOutcome {
    /// Whether something is left for another pass.
    pub fn left_work(&self) -> bool {
        self.failed > 0 || self.deferred > 0
    }
}

/// One pruning pass over this host's golden archives.
pub async fn prune(
    journal: &JournalHandle,
    remover: &dyn ArchiveRemover,
    named: &BTreeSet<String>,
) -> Result<PruneOutcome, JournalError> {
    let kept = journal.golden_archives().await?;
    let mut outcome = PruneOutcome::default();
    for archive in to_prune(&kept, named) {
        if journal.golden_archive_busy(archive.volid.clone()).await? {
            outcome.deferred += 1;
            continue;
        }
        match remover.remove(&archive.volid).await {
            Ok(()) => {
                journal.mark_golden_removed(archive.volid.clone()).await?;
                tracing::info!(volid = %archive.volid, version = %archive.version, "old golden archive removed");
                outcome.removed += 1;
            }
            Err(e) => {
                let text = error_chain(&e);
                tracing::warn!(volid = %archive.volid, error = %text, "old golden archive not removed; tried again next pass");
                journal
                    .record_golden_prune_failure(archive.volid.clone(), text)
                    .await?;
                outcome.failed += 1;
            }
        }
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(volid: &str, version: &str, verified: bool) -> KeptArchive {
        KeptArchive {
            volid: volid.into(),
            sha256: "a".repeat(64),
            version: version.into(),
            controller_digest: "sha256:x".into(),
            built_at: jiff::Timestamp::UNIX_EPOCH,
            verified_at: verified.then_some(jiff::Timestamp::UNIX_EPOCH),
            verify_ms: None,
            prune_attempts: 0,
            prune_failed: None,
        }
    }

    fn names(pruned: Vec<&KeptArchive>) -> Vec<&str> {
        pruned.iter().map(|k| k.volid.as_str()).collect()
    }

    #[test]
    fn the_newest_and_the_current_base_stay_and_older_builds_go() {
        let none = BTreeSet::new();
        // A new build waiting for its verification: the verified one before it stays.
        let kept = [
            archive("g:4", "v1", false),
            archive("g:3", "v1", true),
            archive("g:2", "v1", false),
            archive("g:1", "v1", true),
        ];
        assert_eq!(names(to_prune(&kept, &none)), ["g:2", "g:1"]);
        // Once it passed, the previous one goes.
        let kept = [archive("g:4", "v1", true), archive("g:3", "v1", true)];
        assert_eq!(names(to_prune(&kept, &none)), ["g:3"]);
        // Nothing verified yet: only the newest stays.
        let kept = [archive("g:2", "v1", false), archive("g:1", "v1", false)];
        assert_eq!(names(to_prune(&kept, &none)), ["g:1"]);
    }

    #[test]
    fn a_version_a_guest_names_keeps_its_newest_verified_build() {
        let named = BTreeSet::from(["v1".to_owned()]);
        let kept = [
            archive("g:3", "v2", true),
            archive("g:2", "v1", true),
            archive("g:1", "v1", true),
        ];
        assert_eq!(names(to_prune(&kept, &named)), ["g:1"]);
    }
}
