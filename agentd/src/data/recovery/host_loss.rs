//! Host loss: a box that took over a lost host (restore mode) brings the host's guests back
//! from PBS.
//!
//! The new box's journal knows none of the guests, so the rule "only archives the journal
//! records as the guest's own" cannot hold. What the box knows instead is K, and every key
//! a rotation retired, recovered from the escrow with the customer's words: an archive on
//! PBS encrypted with one of them was written by this host's agent (nobody else holds them,
//! the hub included), and the agent binds each backup to its guest in the backup's notes
//! with a MAC under a key derived from the key it was encrypted with ([`crate::data::backup::proof`]). A guest is restored from the newest such archive whose binding
//! verifies for it; notes that merely name a guest prove nothing, and archives of other keys
//! are never looked at.
//!
//! A guest comes back as the kind its archive is, never as the kind desired state calls it:
//! on this box no journal says what the guest was, and desired state is unsigned. The archive
//! says it twice — its name (`ct/…`, `vzdump-lxc-…` or `vm/…`, `vzdump-qemu-…`) and the config
//! inside it, both proven by [`ArchiveProver::check_unrecorded_as`] as that kind — and the
//! restore takes the kind from the source's archive (`reconcile::apply`), so a hub that
//! relabels a lost guest gets it back as what it was, and an archive is never restored as the
//! other kind.
//!
//! Until K is back and the PBS storage reads, the host's desired guests wait: they are
//! neither restored nor provisioned blank. Once PBS reads, a desired guest with no archive
//! there is provisioned as new (it had never been backed up).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bosun_errchain::error_chain;
use bosun_proto::desired::{DesiredState, StorageType};
use bosun_pve::{ContentFilter, ContentItem, ContentType, Pve, VolumeId};
use jiff::Timestamp;
use tokio::sync::watch;
use uuid::Uuid;

use super::source::BackupSource;
use crate::data::backup::content::archive_kind;
use crate::data::backup::notes::guest_of_notes;
use crate::data::backup::proof::ArchiveProver;
use crate::data::backup::tiers::{Tier, TierPlan};
use crate::ops::journal::JournalHandle;
use crate::trust::keys::pbs_key::{PbsKeySource, PbsKeyring};

/// One pass's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostLossView {
    /// Guests to restore, with the vmid their newest archive encrypted with K was taken
    /// of, and that archive.
    pub sources: BTreeMap<Uuid, (u32, BackupSource)>,
    /// Guests that wait (K not back, or PBS not readable yet): neither restored nor
    /// provisioned.
    pub waiting: BTreeSet<Uuid>,
    /// Why they wait.
    pub reason: Option<String>,
}

/// Looks for the host's guests on PBS, once per reconcile pass while some are missing.
#[derive(Debug, Clone)]
pub struct HostLossSearch<P> {
    pve: Arc<P>,
    journal: JournalHandle,
    key: PbsKeySource,
    tiers: watch::Receiver<TierPlan>,
    since: Timestamp,
    prover: ArchiveProver,
}

impl<P: Pve> HostLossSearch<P> {
    /// A search with K from `key` over the PBS tiers of `tiers`, checking each archive's
    /// binding with `prover`; the guests count as lost `since` (when this box enrolled in
    /// restore mode: the start of their RTO).
    pub fn new(
        pve: Arc<P>,
        journal: JournalHandle,
        key: PbsKeySource,
        tiers: watch::Receiver<TierPlan>,
        since: Timestamp,
        prover: ArchiveProver,
    ) -> Self {
        Self {
            pve,
            journal,
            key,
            tiers,
            since,
            prover,
        }
    }

    /// The desired guests this box never held (no record in its journal, not decommissioned)
    /// and where each comes back from. A guest found on PBS is noted lost in the journal
    /// (its RTO counted from the restore-mode enrollment), so it stays lost, never
    /// provisioned blank, until restored.
    pub async fn look(&self, desired: &DesiredState, gone: &BTreeSet<Uuid>) -> HostLossView {
        let candidates = match self.candidates(desired, gone).await {
            Ok(candidates) => candidates,
            Err(reason) => return waiting(desired.guests.iter().map(|g| g.guest_id), reason),
        };
        if candidates.is_empty() {
            return HostLossView::default();
        }
        match self.newest(&candidates).await {
            Ok(newest) => self.note(newest).await,
            Err(reason) => waiting(candidates.iter().copied(), reason),
        }
    }

    /// The desired guests the journal has no record of and no tombstone for.
    async fn candidates(
        &self,
        desired: &DesiredState,
        gone: &BTreeSet<Uuid>,
    ) -> Result<Vec<Uuid>, String> {
        let known: BTreeSet<Uuid> = match self.journal.all_provenance().await {
            Ok(records) => records
                .iter()
                .filter_map(|r| r.guest_id().and_then(|g| Uuid::parse_str(g).ok()))
                .collect(),
            Err(e) => return Err(format!("the journal: {}", error_chain(&e))),
        };
        // Containers and VMs alike, whatever kind desired state gives them: each archive is
        // proven as the kind it is (its name, then its config).
        Ok(desired
            .guests
            .iter()
            .map(|g| g.guest_id)
            .filter(|g| !known.contains(g) && !gone.contains(g))
            .collect())
    }

    /// Each candidate's newest archive on the PBS tiers that K (or a key a rotation retired)
    /// encrypted and whose binding verifies for it; or why the candidates wait.
    async fn newest(
        &self,
        candidates: &[Uuid],
    ) -> Result<BTreeMap<Uuid, (u32, BackupSource)>, String> {
        let ring = match self.key.ring() {
            Ok(Some(ring)) => ring,
            Ok(None) => {
                return Err(
                    "this box took over a lost host and waits for its PBS encryption key: run \
                     `bosun-agentctl escrow recover` with the customer's recovery code"
                        .into(),
                );
            }
            Err(e) => {
                return Err(format!(
                    "this host's PBS encryption keys: {}",
                    error_chain(&e)
                ));
            }
        };
        let plan = self.tiers.borrow().clone();
        let pbs: Vec<_> = plan
            .tiers
            .iter()
            .filter(|t| t.kind == Some(StorageType::Pbs))
            .collect();
        if pbs.is_empty() {
            return Err(
                "this box took over a lost host and waits for the desired state's PBS tier".into(),
            );
        }
        let filter = ContentFilter {
            content: Some(ContentType::Backup),
            vmid: None,
        };
        let mut newest: BTreeMap<Uuid, (u32, BackupSource)> = BTreeMap::new();
        for tier in pbs {
            let items = self
                .pve
                .list_content(&tier.storage, filter)
                .await
                .map_err(|e| {
                    format!(
                        "this box took over a lost host and waits for PBS storage {} to read \
                         (are its credentials sealed to this host?): {}",
                        tier.storage,
                        error_chain(&e)
                    )
                })?;
            for item in items {
                self.consider(&ring, candidates, tier, item, &mut newest)
                    .await;
            }
        }
        Ok(newest)
    }

    /// Keeps `item` in `newest` when it is an archive of K's (or a retired key's) of a
    /// candidate, newer than the one kept so far, its binding verifies for the guest and it is,
    /// by its name and by its config, a backup of the kind its name says.
    async fn consider(
        &self,
        ring: &PbsKeyring,
        candidates: &[Uuid],
        tier: &Tier,
        item: ContentItem,
        newest: &mut BTreeMap<Uuid, (u32, BackupSource)>,
    ) {
        // K's archives, and those of the keys rotations retired.
        let ours = item
            .encrypted
            .as_deref()
            .is_some_and(|f| ring.key(f).is_some());
        let Some(guest_id) = item.notes.as_deref().and_then(guest_of_notes) else {
            return;
        };
        if !ours || !candidates.contains(&guest_id) {
            return;
        }
        let guest = guest_id.to_string();
        // The kind the archive's name says; proven below by the config inside it.
        let Some(kind) = archive_kind(&item.volid) else {
            self.prover
                .reject(
                    &guest,
                    &item.volid,
                    &crate::data::backup::content::ContentError::UnknownKind.into(),
                )
                .await;
            return;
        };
        let Ok(archive) = VolumeId::new(item.volid.clone()) else {
            return;
        };
        let Some(vmid) = item.vmid.and_then(|v| u32::try_from(v).ok()) else {
            return;
        };
        let Some(taken_at) = item
            .ctime
            .and_then(|s| i64::try_from(s).ok())
            .and_then(|s| Timestamp::from_second(s).ok())
        else {
            return;
        };
        if newest
            .get(&guest_id)
            .is_some_and(|(_, have)| have.taken_at >= taken_at)
        {
            return;
        }
        let verified = match self.prover.check_unrecorded_as(&guest, kind, &item).await {
            Ok(verified) => verified,
            Err(reason) => {
                self.prover.reject(&guest, &item.volid, &reason).await;
                return;
            }
        };
        let source = BackupSource {
            tier: tier.index,
            storage: tier.storage.clone(),
            archive,
            taken_at,
            retired_key: verified.retired_key,
        };
        newest.insert(guest_id, (vmid, source));
    }

    /// The view of the guests found: each noted lost since the restore-mode enrollment
    /// (once), and a guest whose note fails waits.
    async fn note(&self, newest: BTreeMap<Uuid, (u32, BackupSource)>) -> HostLossView {
        let mut view = HostLossView::default();
        let noted: BTreeSet<Uuid> = self
            .journal
            .lost_guests()
            .await
            .map(|rows| {
                rows.iter()
                    .filter_map(|(g, _, _)| Uuid::parse_str(g).ok())
                    .collect()
            })
            .unwrap_or_default();
        for (guest_id, (vmid, source)) in newest {
            if !noted.contains(&guest_id) {
                if let Err(e) = self
                    .journal
                    .note_lost_since(guest_id.to_string(), vmid, self.since)
                    .await
                {
                    tracing::warn!(%guest_id, error = %error_chain(&e), "could not note the guest lost; restoring waits");
                    view.waiting.insert(guest_id);
                    continue;
                }
                tracing::info!(%guest_id, vmid, archive = %source.archive, "host loss: the guest comes back from PBS");
            }
            view.sources.insert(guest_id, (vmid, source));
        }
        view
    }
}

/// A view where `guests` wait, for `reason`.
fn waiting(guests: impl Iterator<Item = Uuid>, reason: String) -> HostLossView {
    HostLossView {
        sources: BTreeMap::new(),
        waiting: guests.collect(),
        reason: Some(reason),
    }
}
