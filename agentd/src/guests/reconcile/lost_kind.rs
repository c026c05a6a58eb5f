//! Which kind a lost guest is recovered as, never desired state's alone: desired state is
//! unsigned, and naming a lost VM a container (or the reverse) would hold its DR back, every
//! archive failing its proof as the other kind.
//!
//! - A guest this host's journal knows: the kind the journal recorded when the guest was
//!   made, recovered or adopted (decision 0123).
//! - A guest lost with its host (no journal here knows it): the kind of the archive found for
//!   it, which the host-loss search proved by its name and by the config inside it
//!   (`data::recovery::host_loss`, decision 0126).

use bosun_errchain::error_chain;
use bosun_proto::desired::GuestSpec;

use crate::data::recovery::BackupSource;
use crate::ops::journal::JournalHandle;

/// `spec` with the kind it is recovered as: the archive's for a host loss (`known`), the
/// journal's otherwise; `None` when the archive found names no kind of guest.
pub(super) async fn kind_to_recover(
    journal: &JournalHandle,
    spec: &GuestSpec,
    lost_vmid: u32,
    known: Option<&BackupSource>,
) -> Option<GuestSpec> {
    let Some(source) = known else {
        return Some(as_recorded(journal, spec, lost_vmid).await);
    };
    let kind = source.kind()?;
    if kind != spec.kind {
        tracing::warn!(guest_id = %spec.guest_id, lost_vmid, desired = ?spec.kind, archive = ?kind, "desired state names a guest lost with its host as the other kind; it comes back as its archive's");
    }
    Some(GuestSpec {
        kind,
        ..spec.clone()
    })
}

/// `spec` with the kind the journal recorded for the guest at `lost_vmid`; desired state's
/// where the journal holds no record of that guest there (or cannot be read). A mismatch is
/// logged and the journal's kind kept.
async fn as_recorded(journal: &JournalHandle, spec: &GuestSpec, lost_vmid: u32) -> GuestSpec {
    let guest_id = spec.guest_id.to_string();
    let recorded = match journal.provenance(lost_vmid).await {
        Ok(p) => p
            .filter(|p| p.guest_id() == Some(guest_id.as_str()))
            .map(|p| p.kind()),
        Err(e) => {
            tracing::warn!(%guest_id, lost_vmid, error = %error_chain(&e), "the journal's kind of a lost guest could not be read; desired state's is used");
            None
        }
    };
    let mut spec = spec.clone();
    if let Some(kind) = recorded
        && kind != spec.kind
    {
        tracing::warn!(%guest_id, lost_vmid, desired = ?spec.kind, recorded = ?kind, "desired state names a lost guest as the other kind; it is recovered as the kind the journal recorded");
        spec.kind = kind;
    }
    spec
}
