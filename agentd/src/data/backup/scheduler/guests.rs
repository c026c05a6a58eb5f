//! The guests the agent's scheduler backs up: desired to run, created by this agent (its
//! journal's provenance gives the vmid and the kind) and running on the node now — a
//! container among the node's containers, a VM (decision 0118) among its VMs. The kind is the
//! journal's, never desired state's (decision 0123): a hub naming a VM a container is audited
//! (`guest.kind_refused`) and the VM backed up all the same.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tokio::sync::watch;

use super::GuestSource;
use crate::data::backup::GuestRef;
use crate::data::desired::DesiredSnapshot;
use crate::ops::journal::{AuditEvent, GuestProvenance, JournalError, JournalHandle};
use bosun_errchain::error_chain;
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

/// What the journal recorded of each guest this agent created, recovered or adopted
/// (scratch guests left out), by guest id: its vmid and its kind.
pub fn recorded_of(provenance: &[GuestProvenance]) -> BTreeMap<String, (u32, GuestKind)> {
    provenance
        .iter()
        .filter(|p| !p.is_scratch())
        .filter_map(|p| Some((p.guest_id()?.to_owned(), (p.vmid(), p.kind()))))
        .collect()
}

/// A desired guest whose kind desired state names differently from the kind the journal
/// recorded when the agent created it: refused (audited), and the guest is backed up as
/// what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindMismatch {
    /// The guest.
    pub guest_id: String,
    /// Its vmid.
    pub vmid: u32,
    /// The kind desired state names.
    pub desired: GuestKind,
    /// The kind the journal recorded.
    pub recorded: GuestKind,
}

/// The desired guests that should run, were created by this agent (`recorded`, by guest id:
/// the vmid and kind the journal holds) and run now: a container among `cts`, a VM among
/// `vms` — by the recorded kind, never desired state's (decision 0123: unsigned desired state
/// cannot stop a VM's backups by calling it a container). Each desired guest whose kind
/// disagrees with the record comes back in the second list.
pub fn running_guests(
    desired: &DesiredState,
    recorded: &BTreeMap<String, (u32, GuestKind)>,
    cts: &[CtSummary],
    vms: &[VmSummary],
) -> (Vec<GuestRef>, Vec<KindMismatch>) {
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
    let mut mismatched = Vec::new();
    let mut running = Vec::new();
    for g in &desired.guests {
        let guest_id = g.guest_id.to_string();
        let Some(&(vmid, kind)) = recorded.get(guest_id.as_str()) else {
            continue;
        };
        if g.kind != kind {
            mismatched.push(KindMismatch {
                guest_id: guest_id.clone(),
                vmid,
                desired: g.kind,
                recorded: kind,
            });
        }
        if g.power != Power::Running {
            continue;
        }
        let up = match kind {
            GuestKind::Lxc => &running_cts,
            GuestKind::Qemu => &running_vms,
        };
        if !up.contains(&vmid) {
            continue;
        }
        if let Ok(vmid) = Vmid::new(vmid) {
            running.push(GuestRef {
                guest_id,
                vmid,
                kind,
            });
        }
    }
    (running, mismatched)
}

/// [`GuestSource`] over the desired state, the journal and Proxmox.
#[derive(Debug)]
pub struct DesiredRunningGuests<P> {
    pve: Arc<P>,
    journal: JournalHandle,
    desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
    vms: bool,
    /// The kind mismatches already audited (guest id, the kind desired state named): one
    /// row per change, not one per pass.
    refused: Mutex<BTreeSet<(String, GuestKind)>>,
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
            refused: Mutex::new(BTreeSet::new()),
        }
    }

    /// The running VMs too (for the backup tiers, which back VMs up as containers; the bulk
    /// scheduler, which reads a container's files, takes containers only).
    #[must_use]
    pub fn with_vms(self) -> Self {
        Self { vms: true, ..self }
    }
}

impl<P> DesiredRunningGuests<P> {
    /// Audits each kind mismatch once (`guest.kind_refused`) until it goes away: desired state
    /// naming a guest as the other kind changes nothing the agent does to it.
    async fn refuse(&self, mismatched: &[KindMismatch]) {
        let fresh: Vec<&KindMismatch> = {
            let mut refused = self
                .refused
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            refused.retain(|(guest, kind)| {
                mismatched
                    .iter()
                    .any(|m| m.guest_id == *guest && m.desired == *kind)
            });
            mismatched
                .iter()
                .filter(|m| refused.insert((m.guest_id.clone(), m.desired)))
                .collect()
        };
        for m in fresh {
            tracing::warn!(guest_id = %m.guest_id, vmid = m.vmid, desired = m.desired.as_str(), recorded = m.recorded.as_str(), "desired state names a guest as another kind than the agent created; it is backed up as what it is");
            let mut event = AuditEvent::new("guest.kind_refused");
            event.guest_id = Some(m.guest_id.clone());
            event.vmid = Some(m.vmid);
            event.detail = serde_json::json!({
                "desired": m.desired.as_str(),
                "recorded": m.recorded.as_str(),
                "reason": "a guest's kind is the one recorded when the agent created it",
            });
            if let Err(e) = self.journal.append_audit(event).await {
                tracing::warn!(guest_id = %m.guest_id, error = %error_chain(&e), "could not audit a refused guest kind");
            }
        }
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
            let recorded = recorded_of(&provenance);
            let cts = self.pve.list_cts().await.map_err(GuestSourceError::Pve)?;
            let vms = if recorded.values().any(|(_, k)| *k == GuestKind::Qemu) && self.vms {
                self.pve
                    .list_vms()
                    .await
                    .map_err(GuestSourceError::ListVms)?
            } else {
                Vec::new()
            };
            let (mut running, mismatched) = running_guests(&desired.state, &recorded, &cts, &vms);
            if self.vms {
                // The tiers' scheduler audits a mismatch (the bulk one would say it twice).
                self.refuse(&mismatched).await;
            } else {
                // The bulk scheduler reads a container's files: VMs are not its guests.
                running.retain(|g| g.kind == GuestKind::Lxc);
            }
            Ok(running)
        })
    }
}
