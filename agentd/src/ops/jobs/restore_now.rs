//! What a signed `restore-now` restores from when it names no archive, and how it brings
//! back a guest that is lost: the same DR restore reconcile runs under the `auto` policy
//! (`Provisioner::recover`), started by the operator's signature, for hosts whose DR policy
//! is `manual` or whose automatic attempts gave up.

use std::sync::Arc;

use bosun_pve::{Pve, VolumeId};
use serde_json::{Value, json};
use tokio::sync::watch;
use uuid::Uuid;

use super::error::JobError;
use super::guest_accepted::GuestAccepted;
use crate::data::backup::ArchiveProver;
use crate::data::backup::tiers::TierPlan;
use crate::data::desired::DesiredSnapshot;
use crate::data::recovery::{BackupSource, named_archive_as, newest_surviving_as};
use crate::guests::reconcile::provision::{Provisioner, Recovery};
use crate::ops::journal::JournalHandle;
use crate::ops::operation::OpJournal;
use crate::ops::operation::StepName;
use bosun_proto::desired::GuestKind;

/// The parts a `restore-now` needs beyond Proxmox and the journal.
#[derive(Debug)]
pub struct RestoreContext<P: Pve> {
    provisioner: Provisioner<P>,
    tiers: watch::Receiver<TierPlan>,
    desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
    prover: ArchiveProver,
}

impl<P: Pve + 'static> RestoreContext<P> {
    /// Restores lost guests with `provisioner`, from `tiers`, as `desired` describes them,
    /// checking every archive with `prover` first.
    pub fn new(
        provisioner: Provisioner<P>,
        tiers: watch::Receiver<TierPlan>,
        desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
        prover: ArchiveProver,
    ) -> Self {
        Self {
            provisioner,
            tiers,
            desired,
            prover,
        }
    }

    /// What proves archives (the job's own backups are proven with it).
    pub(super) fn prover(&self) -> &ArchiveProver {
        &self.prover
    }

    /// The archive the job restores: the one it names (when it is one of the guest's
    /// journaled backups and passes its proof), else the guest's newest verified backup
    /// across the tiers.
    pub(super) async fn source(
        &self,
        pve: &P,
        journal: &JournalHandle,
        job: &GuestAccepted,
    ) -> Result<BackupSource, JobError> {
        self.source_as(pve, journal, job, GuestKind::Lxc).await
    }

    /// [`Self::source`] for a restore into a guest of `kind`: only an archive of that kind
    /// passes its proof (`ArchiveProver::check_as`).
    pub(super) async fn source_as(
        &self,
        pve: &P,
        journal: &JournalHandle,
        job: &GuestAccepted,
        kind: GuestKind,
    ) -> Result<BackupSource, JobError> {
        let plan = self.tiers.borrow().clone();
        let guest_id = job.guest_id.to_string();
        let Some(named) = &job.backup else {
            return newest_surviving_as(pve, journal, &self.prover, (&guest_id, kind), &plan)
                .await
                .map_err(|reason| JobError::NoBackup { reason });
        };
        let archive = VolumeId::new(named.clone())?;
        let tier = plan
            .tiers
            .iter()
            .find(|t| t.storage.as_str() == archive.storage())
            .map_or(0, |t| t.index);
        self.proven(pve, journal, job, &archive, tier, kind).await
    }

    /// Archive `archive` (on the plan's tier `tier`) checked again as one of the job's guest's
    /// own journaled backups of `kind` that passes its proof.
    pub(super) async fn proven(
        &self,
        pve: &P,
        journal: &JournalHandle,
        job: &GuestAccepted,
        archive: &VolumeId,
        tier: u32,
        kind: GuestKind,
    ) -> Result<BackupSource, JobError> {
        let guest_id = job.guest_id.to_string();
        named_archive_as(pve, journal, &self.prover, &guest_id, archive, tier, kind)
            .await
            .map_err(|reason| JobError::ArchiveRefused { reason })
    }

    /// Brings lost guest `job.guest_id` (last at `lost_vmid`, lost since `lost_since`) back
    /// from `source` as its own DR operation, as desired state describes the guest.
    pub(super) async fn recover(
        &self,
        op: &OpJournal,
        job: &GuestAccepted,
        lost_vmid: u32,
        lost_since: jiff::Timestamp,
        source: BackupSource,
    ) -> Result<Value, JobError> {
        let spec = self
            .desired
            .borrow()
            .as_ref()
            .and_then(|d| {
                d.state
                    .guests
                    .iter()
                    .find(|g| g.guest_id == job.guest_id)
                    .cloned()
            })
            .ok_or(JobError::NotDesired {
                guest_id: job.guest_id,
            })?;
        let detail = json!({
            "guest_id": job.guest_id,
            "lost_vmid": lost_vmid,
            "archive": source.archive.to_string(),
            "storage": source.storage.as_str(),
        });
        let archive = source.archive.to_string();
        let recovery = Recovery {
            lost_vmid,
            source,
            lost_since,
            trigger: "job",
        };
        let vmid = op
            .local_typed(
                StepName::DrRestore,
                detail,
                self.provisioner.recover(&spec, recovery, None),
            )
            .await?;
        Ok(
            json!({ "vmid": vmid.get(), "lost_vmid": lost_vmid, "backup": archive, "restored": "lost guest" }),
        )
    }
}

/// The lost-guest note of `guest_id`, if the journal holds one: its last vmid and since when.
pub(super) async fn lost_note(
    journal: &JournalHandle,
    guest_id: Uuid,
) -> Result<Option<(u32, jiff::Timestamp)>, JobError> {
    let guest = guest_id.to_string();
    Ok(journal
        .lost_guests()
        .await
        .map_err(JobError::journal("reading the lost guests"))?
        .into_iter()
        .find(|(g, _, _)| *g == guest)
        .map(|(_, vmid, since)| (vmid, since)))
}
