//! The guests the agent's scheduler backs up: desired to run, created by this agent (its
//! journal's provenance gives the vmid) and running on the node now.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::watch;

use super::GuestSource;
use crate::data::backup::GuestRef;
use crate::data::desired::DesiredSnapshot;
use crate::ops::journal::{GuestProvenance, JournalError, JournalHandle};
use bosun_proto::desired::{DesiredState, Power};
use bosun_pve::{CtSummary, GuestStatus, Pve, PveError, Vmid};

/// Why the guests could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum GuestSourceError {
    /// Reading the journal's provenance failed.
    #[error("failed to read guest provenance from the journal")]
    Journal(#[source] JournalError),
    /// Listing the node's containers failed.
    #[error("failed to list containers")]
    Pve(#[source] PveError),
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
/// and run now.
pub fn running_guests(
    desired: &DesiredState,
    vmids: &BTreeMap<String, u32>,
    cts: &[CtSummary],
) -> Vec<GuestRef> {
    let running: BTreeSet<u32> = cts
        .iter()
        .filter(|c| !c.template && c.status == GuestStatus::Running)
        .map(|c| c.vmid.get())
        .collect();
    desired
        .guests
        .iter()
        .filter(|g| g.power == Power::Running)
        .filter_map(|g| {
            let guest_id = g.guest_id.to_string();
            let vmid = *vmids.get(guest_id.as_str())?;
            if !running.contains(&vmid) {
                return None;
            }
            Some(GuestRef {
                guest_id,
                vmid: Vmid::new(vmid).ok()?,
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
}

impl<P> DesiredRunningGuests<P> {
    /// Guests of the desired state `desired` as `pve` and `journal` see them.
    pub fn new(
        pve: Arc<P>,
        journal: JournalHandle,
        desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
    ) -> Self {
        Self {
            pve,
            journal,
            desired,
        }
    }
}

impl<P: Pve + std::fmt::Debug + 'static> GuestSource for DesiredRunningGuests<P> {
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
            Ok(running_guests(&desired.state, &vmids_of(&provenance), &cts))
        })
    }
}
