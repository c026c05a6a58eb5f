//! The guests the agent's scheduler backs up: desired to run, created by this agent (its
//! journal's provenance gives the vmid) and running on the node now — a container among the
//! node's containers, a VM (decision 0118) among its VMs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::watch;

use super::GuestSource;
use crate::data::backup::GuestRef;
use crate::data::desired::DesiredSnapshot;
use crate::ops::journal::{GuestProvenance, JournalError, JournalHandle};
use bosun_proto::desired::{DesiredState, GuestKind, Power};
use bosun_pve::{CtSummary, GuestStatus, PveError, PveQemu, VmSummary, Vmid};

/// Why the guests could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum GuestSourceError {
    /// Reading the journal's provenance failed.
    #[error("failed to read guest provenance from the journal")]
    Journal(#[source] JournalError),
    /// Listing the node's containers failed.
    #[error("failed to list containers")]
    Pve(#[source] PveError),
    /// Listing the node's VMs failed.
    #[error("failed to list virtual machines")]
    ListVms(#[source] PveError),
}

/// The vmid of each guest this agent created (scratch guests left out).
pub fn vmids_of(provenance: &[GuestProvenance]) -> BTreeMap<String, u32> {
    provenance
        .iter()
        .filter(|p| !p.is_scratch())
        .filter_map(|p| Some((p.guest_id()?.to_owned(), p.vmid())))
        .collect()
}

/// The desired guests that should run, have a vmid from this agent (`vmids`, by guest id)
/// and run now: a container among `cts`, a VM among `vms` (a vmid of the other kind is not
/// the guest).
pub fn running_guests(
    desired: &DesiredState,
    vmids: &BTreeMap<String, u32>,
    cts: &[CtSummary],
    vms: &[VmSummary],
) -> Vec<GuestRef> {
    let running_cts: BTreeSet<u32> = cts
        .iter()
        .filter(|c| !c.template && c.status == GuestStatus::Running)
        .map(|c| c.vmid.get())
        .collect();
    let running_vms: BTreeSet<u32> = vms
        .iter()
        .filter(|v| !v.template && v.status == GuestStatus::Running)
        .map(|v| v.vmid.get())
        .collect();
    desired
        .guests
        .iter()
        .filter(|g| g.power == Power::Running)
        .filter_map(|g| {
            let guest_id = g.guest_id.to_string();
            let vmid = *vmids.get(guest_id.as_str())?;
            let running = match g.kind {
                GuestKind::Lxc => &running_cts,
                GuestKind::Qemu => &running_vms,
            };
            if !running.contains(&vmid) {
                return None;
            }
            Some(GuestRef {
                guest_id,
                vmid: Vmid::new(vmid).ok()?,
                kind: g.kind,
            })
        })
        .collect()
}

/// [`GuestSource`] over the desired state, the journal and Proxmox.
#[derive(Debug)]
pub struct DesiredRunningGuests<P> {
    pve: Arc<P>,
    journal: JournalHandle,
    desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
    vms: bool,
}

impl<P> DesiredRunningGuests<P> {
    /// The running containers of the desired state `desired` as `pve` and `journal` see them.
    pub fn new(
        pve: Arc<P>,
        journal: JournalHandle,
        desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
    ) -> Self {
        Self {
            pve,
            journal,
            desired,
            vms: false,
        }
    }

    /// The running VMs too (for the backup tiers, which back VMs up as containers; the bulk
    /// scheduler, which reads a container's files, takes containers only).
    #[must_use]
    pub fn with_vms(self) -> Self {
        Self { vms: true, ..self }
    }
}

impl<P: PveQemu + std::fmt::Debug + 'static> GuestSource for DesiredRunningGuests<P> {
    fn running_guests(&self) -> BoxFuture<'_, Result<Vec<GuestRef>, GuestSourceError>> {
        Box::pin(async move {
            let Some(desired) = self.desired.borrow().clone() else {
                return Ok(Vec::new());
            };
            if !desired
                .state
                .guests
                .iter()
                .any(|g| g.power == Power::Running)
            {
                return Ok(Vec::new());
            }
            let provenance = self
                .journal
                .all_provenance()
                .await
                .map_err(GuestSourceError::Journal)?;
            let cts = self.pve.list_cts().await.map_err(GuestSourceError::Pve)?;
            let vms = if self.vms
                && desired
                    .state
                    .guests
                    .iter()
                    .any(|g| g.kind == GuestKind::Qemu)
            {
                self.pve
                    .list_vms()
                    .await
                    .map_err(GuestSourceError::ListVms)?
            } else {
                Vec::new()
            };
            Ok(running_guests(
                &desired.state,
                &vmids_of(&provenance),
                &cts,
                &vms,
            ))
        })
    }
}
