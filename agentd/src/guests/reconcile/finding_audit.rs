//! The audit entry each reconcile finding is recorded as, once (orphans, refused shrinks,
//! broken, lost or migrated guests, refused placements, shares, orders and addresses), with the key that
//! says it was recorded already.

use bosun_proto::desired::StorageClass;
use serde_json::json;

use super::plan::Finding;
use crate::ops::journal::AuditEvent;

/// The key and the audit entry of `finding`; `None` for a finding that is not audited (a
/// deferred or waiting guest: it is shown, not recorded).
pub(super) fn audit_of(finding: &Finding) -> Option<(String, AuditEvent)> {
    guest_state(finding).or_else(|| refused(finding))
}

/// A guest found in a state Bosun did not put it in.
fn guest_state(finding: &Finding) -> Option<(String, AuditEvent)> {
    Some(match finding {
        Finding::Orphaned { vmid, guest_id } => {
            let mut e = AuditEvent::new("guest.orphaned");
            e.vmid = Some(*vmid);
            e.guest_id = guest_id.map(|g| g.to_string());
            (format!("orphan:{vmid}"), e)
        }
        Finding::ShrinkRefused {
            guest_id,
            vmid,
            have_gib,
            want_gib,
        } => {
            let mut e = AuditEvent::new("guest.shrink_refused");
            e.vmid = Some(*vmid);
            e.guest_id = Some(guest_id.to_string());
            e.detail = json!({ "have_gib": have_gib, "want_gib": want_gib });
            (format!("shrink:{vmid}:{want_gib}"), e)
        }
        Finding::Broken {
            guest_id,
            vmid,
            failures,
        } => {
            let mut e = AuditEvent::new("guest.broken");
            e.vmid = Some(*vmid);
            e.guest_id = Some(guest_id.to_string());
            e.detail = json!({ "failed_starts": failures });
            (format!("broken:{vmid}"), e)
        }
        Finding::VmidTaken { guest_id, vmid } => {
            let mut e = AuditEvent::new("guest.vmid_taken");
            e.vmid = Some(*vmid);
            e.guest_id = Some(guest_id.to_string());
            (format!("taken:{guest_id}:{vmid}"), e)
        }
        Finding::Lost { guest_id, vmid } => {
            let mut e = AuditEvent::new("guest.lost");
            e.vmid = Some(*vmid);
            e.guest_id = Some(guest_id.to_string());
            (format!("lost:{guest_id}"), e)
        }
        Finding::Migrated {
            guest_id,
            vmid,
            node,
        } => {
            let mut e = AuditEvent::new("guest.migrated");
            e.vmid = Some(*vmid);
            e.guest_id = Some(guest_id.to_string());
            e.detail = json!({ "node": node });
            (format!("migrated:{guest_id}:{node}"), e)
        }
        Finding::Decommissioned { guest_id } => {
            let mut e = AuditEvent::new("guest.decommissioned_but_desired");
            e.guest_id = Some(guest_id.to_string());
            (format!("gone:{guest_id}"), e)
        }
        Finding::AddressRefused {
            guest_id,
            vmid,
            want,
            have,
        } => {
            let mut e = AuditEvent::new("guest.address_refused");
            e.guest_id = Some(guest_id.to_string());
            e.vmid = Some(*vmid);
            e.detail = json!({ "want": want, "have": have });
            (format!("address:{guest_id}:{want}"), e)
        }
        _ => return None,
    })
}

/// Something desired state asked that the agent refused.
fn refused(finding: &Finding) -> Option<(String, AuditEvent)> {
    Some(match finding {
        Finding::PlacementRefused {
            guest_id,
            volume,
            class,
            reason,
        } => {
            let mut e = AuditEvent::new("guest.placement_refused");
            e.guest_id = Some(guest_id.to_string());
            e.detail = json!({
                "volume": volume,
                "class": class,
                "reason": reason.as_str(),
                "why": reason.describe(*class),
            });
            (
                format!("placement:{guest_id}:{volume}:{}", reason.as_str()),
                e,
            )
        }
        Finding::HotRefused {
            guest_id,
            volume,
            storage,
            reason,
        } => {
            let mut e = AuditEvent::new("guest.placement_refused");
            e.guest_id = Some(guest_id.to_string());
            e.detail = json!({
                "volume": volume,
                "hot": true,
                "class": StorageClass::Fast,
                "storage": storage,
                "reason": reason.as_str(),
                "why": reason.describe(StorageClass::Fast),
            });
            (
                format!(
                    "placement:{guest_id}:{volume}:{storage}:{}",
                    reason.as_str()
                ),
                e,
            )
        }
        Finding::ShareRefused { guest_id, refusal } => {
            let mut e = AuditEvent::new("guest.share_refused");
            e.guest_id = Some(guest_id.to_string());
            e.detail = json!({
                "field": refusal.field,
                "asked": refusal.asked,
                "applied": refusal.applied,
                "why": refusal.describe(),
            });
            (
                format!(
                    "share:{guest_id}:{}:{:?}:{}",
                    refusal.field, refusal.asked, refusal.applied
                ),
                e,
            )
        }
        Finding::OrderRefused {
            guest_id,
            requirement,
            refusal,
            reason,
        } => {
            let mut e = AuditEvent::new("guest.order_refused");
            e.guest_id = Some(guest_id.to_string());
            e.detail = json!({
                "requirement": requirement,
                "refusal": refusal,
                "why": reason,
            });
            (format!("order:{guest_id}:{requirement}:{reason}"), e)
        }
        _ => return None,
    })
}
