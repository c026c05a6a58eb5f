//! A VM's bulk volumes (decision 0124): a VM's bulk volume is a `backup=0` disk, which the
//! helper cannot archive from inside the guest as it does a container's mount point, and which
//! the VM's own vzdump leaves out. Nothing archives it, and that is said, never skipped in
//! silence: the report marks each such volume `not_archived: vm_disk`, and the scheduler
//! audits it once (`bulk.not_archived`) per volume while the agent runs.

use std::collections::BTreeSet;

use bosun_errchain::error_chain;
use bosun_proto::desired::GuestKind;
use bosun_proto::report::BulkNotArchived;
use uuid::Uuid;

use crate::data::desired::DesiredSnapshot;
use crate::ops::journal::{AuditEvent, GuestProvenance, JournalHandle};

/// The guests the journal records as VMs (scratch guests left out): whose bulk volumes are
/// disks nothing archives. The kind is the journal's, never desired state's (decision 0123).
pub fn vm_guests(rows: &[GuestProvenance]) -> BTreeSet<Uuid> {
    rows.iter()
        .filter(|p| !p.is_scratch() && p.kind() == GuestKind::Qemu)
        .filter_map(|p| p.guest_id().and_then(|g| g.parse().ok()))
        .collect()
}

/// Audits `bulk.not_archived` for each bulk volume of a journaled VM in `snapshot` that
/// `noted` does not hold yet, and adds it there.
pub(super) async fn note(
    journal: &JournalHandle,
    snapshot: &DesiredSnapshot,
    noted: &mut BTreeSet<(Uuid, String)>,
) {
    let with_volumes = snapshot.state.guests.iter().any(|g| {
        g.bulk_volumes
            .iter()
            .any(|v| !noted.contains(&(g.guest_id, v.name.clone())))
    });
    if !with_volumes {
        return;
    }
    let vms = match journal.all_provenance().await {
        Ok(rows) => vm_guests(&rows),
        Err(e) => {
            tracing::warn!(error = %error_chain(&e), "bulk archives: the guests' kinds are unreadable");
            return;
        }
    };
    let plan = snapshot.plan.as_ref().map(|p| &p.plan);
    for guest in snapshot
        .state
        .guests
        .iter()
        .filter(|g| vms.contains(&g.guest_id))
    {
        for volume in &guest.bulk_volumes {
            if !noted.insert((guest.guest_id, volume.name.clone())) {
                continue;
            }
            let signed_target = plan
                .and_then(|p| p.bulk_backup(guest.guest_id, &volume.name))
                .map(|b| b.target.clone());
            tracing::warn!(guest_id = %guest.guest_id, volume = %volume.name, signed_target = ?signed_target, "a vm's bulk volume is not archived: nothing archives a vm's disk");
            let mut event = AuditEvent::new("bulk.not_archived");
            event.guest_id = Some(guest.guest_id.to_string());
            event.detail = serde_json::json!({
                "volume": volume.name,
                "reason": BulkNotArchived::VmDisk.as_str(),
                "signed_target": signed_target,
            });
            if let Err(e) = journal.append_audit(event).await {
                // Tried again on a later pass.
                noted.remove(&(guest.guest_id, volume.name.clone()));
                tracing::warn!(error = %error_chain(&e), "could not audit a vm's bulk volume");
            }
        }
    }
}
