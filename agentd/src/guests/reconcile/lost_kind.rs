//! Which kind a lost guest is recovered as: the kind the journal recorded when the guest was
//! made, recovered or adopted (decision 0123), never desired state's alone. Desired state is
//! unsigned, and naming a lost VM a container (or the reverse) would hold its DR back, every
//! archive failing its proof as the other kind.

use bosun_errchain::error_chain;
use bosun_proto::desired::GuestSpec;

use crate::ops::journal::JournalHandle;

/// `spec` with the kind the journal recorded for the guest at `lost_vmid`; desired state's
/// where the journal holds no record of that guest there (or cannot be read). A mismatch is
/// logged and the journal's kind kept.
pub(super) async fn as_recorded(
    journal: &JournalHandle,
    spec: &GuestSpec,
    lost_vmid: u32,
) -> GuestSpec {
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
