//! What of a generation the host will not apply, as the report names it
//! ([`bosun_proto::refused`]): the planner's refusals (a root disk asked smaller than the
//! guest's, a bulk volume with no target of its class, a hot volume on a storage not classed
//! `fast`, a requirement refused by the guests' order), the data-plan gate's (a storage
//! target or tier the signed plan does not allow, [`crate::data::desired::plan_gate`]) and a
//! bulk volume whose backup desired state puts on another target than the signed plan does
//! ([`crate::data::bulk`]).
//!
//! A pass that leaves any of them is not converged: the generation is not reported applied
//! while part of it is refused (decision 0065).

use bosun_proto::data_plan::DataPlan;
use bosun_proto::desired::{GuestSpec, StorageClass};
use bosun_proto::refused::{MAX_REFUSED, Refused, RefusedKind};
use bosun_proto::report::TargetReason;

use super::plan::Finding;
use crate::data::plan::Refusal;

/// The refusals of one pass: the planner's `findings` about the desired `guests`, the bulk
/// backups desired state puts elsewhere than the verified `plan`, then the gate's `gate`
/// refusals, at most [`MAX_REFUSED`].
pub fn of(
    guests: &[GuestSpec],
    findings: &[Finding],
    gate: &[Refusal],
    plan: Option<&DataPlan>,
) -> Vec<Refused> {
    let hostname = |id: uuid::Uuid| {
        guests
            .iter()
            .find(|g| g.guest_id == id)
            .map_or_else(|| id.to_string(), |g| g.hostname.clone())
    };
    let planner = findings.iter().filter_map(|f| match f {
        Finding::ShrinkRefused {
            guest_id,
            have_gib,
            want_gib,
            ..
        } => Some(Refused {
            kind: RefusedKind::GuestField,
            name: hostname(*guest_id),
            guest_id: Some(*guest_id),
            field: Some("rootfs_gib".to_owned()),
            reason: format!(
                "the root disk is {have_gib} GiB and is never shrunk to the {want_gib} GiB asked: \
                 ask for {have_gib} GiB or more"
            ),
        }),
        Finding::PlacementRefused {
            guest_id,
            volume,
            class,
            reason,
        } => Some(Refused {
            kind: RefusedKind::GuestField,
            name: hostname(*guest_id),
            guest_id: Some(*guest_id),
            field: Some(format!("bulk_volumes.{volume}")),
            reason: reason.describe(*class),
        }),
        Finding::HotRefused {
            guest_id,
            volume,
            storage,
            reason,
        } => Some(Refused {
            kind: RefusedKind::GuestField,
            name: hostname(*guest_id),
            guest_id: Some(*guest_id),
            field: Some(format!("hot_volumes.{volume}")),
            reason: format!(
                "a hot volume goes only on a fast storage, and {storage} is not one: {}",
                reason.describe(StorageClass::Fast)
            ),
        }),
        Finding::ShareRefused { guest_id, refusal } => Some(Refused {
            kind: RefusedKind::GuestField,
            name: hostname(*guest_id),
            guest_id: Some(*guest_id),
            field: Some(format!("share_class.{}", refusal.field)),
            reason: refusal.describe(),
        }),
        Finding::OrderRefused {
            guest_id,
            requirement,
            reason,
            ..
        } => Some(Refused {
            kind: RefusedKind::GuestField,
            name: hostname(*guest_id),
            guest_id: Some(*guest_id),
            field: Some(format!("requires.{requirement}")),
            reason: reason.clone(),
        }),
        Finding::AddressRefused {
            guest_id,
            want,
            have,
            ..
        } => Some(Refused {
            kind: RefusedKind::GuestField,
            name: hostname(*guest_id),
            guest_id: Some(*guest_id),
            field: Some("network".to_owned()),
            reason: format!(
                "the guest exists with {}; {want} is never given to it by desired state \
                 (an address moves only by the operator's hand, decision 0101)",
                if have.is_empty() {
                    "no static address".to_owned()
                } else {
                    have.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ),
        }),
        _ => None,
    });
    let gated = gate.iter().map(|r| Refused {
        kind: if r.tier {
            RefusedKind::Tier
        } else {
            RefusedKind::StorageTarget
        },
        name: r.durable_id.clone(),
        guest_id: None,
        field: None,
        reason: gate_reason(r),
    });
    planner
        .chain(bulk_elsewhere(guests, plan))
        .chain(gated)
        .take(MAX_REFUSED)
        .collect()
}

/// A bulk volume whose desired decision names another target than the signed plan archives
/// it to: only the plan's is used (decision 0090).
fn bulk_elsewhere<'a>(
    guests: &'a [GuestSpec],
    plan: Option<&'a DataPlan>,
) -> impl Iterator<Item = Refused> + 'a {
    guests.iter().flat_map(move |guest| {
        guest.bulk_volumes.iter().filter_map(move |volume| {
            let signed = plan
                .and_then(|p| p.bulk_backup(guest.guest_id, &volume.name))
                .map(|b| b.target.as_str());
            let asked = crate::data::bulk::disagreeing_target(&volume.backup, signed)?;
            Some(Refused {
                kind: RefusedKind::GuestField,
                name: guest.hostname.clone(),
                guest_id: Some(guest.guest_id),
                field: Some(format!("bulk_volumes.{}.backup", volume.name)),
                reason: format!(
                    "the signed data plan archives this volume to {}, not to {asked}: only the \
                     plan's target is used",
                    signed.unwrap_or_default()
                ),
            })
        })
    })
}

/// The gate's refusal in words.
fn gate_reason(r: &Refusal) -> String {
    match r.reason {
        TargetReason::IdentityMismatch => format!(
            "the signed data plan names this target with another {}: it is never registered, \
             mounted, written or read",
            if r.fields.is_empty() {
                "identity".to_owned()
            } else {
                r.fields.join(", ")
            }
        ),
        TargetReason::NotInPlan if r.tier => {
            "the tier names a target the signed data plan does not allow: it never runs".to_owned()
        }
        _ => "the signed data plan does not name this target: it is never registered, mounted, \
              written or read (sign a plan that names it: `bosunctl policy sign-plan`)"
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bosun_proto::desired::StorageType;

    #[test]
    fn a_shrink_and_a_refused_target_are_both_named_with_why() {
        let guest = uuid::Uuid::from_u128(9);
        let findings = [Finding::ShrinkRefused {
            guest_id: guest,
            vmid: 100,
            have_gib: 10,
            want_gib: 6,
        }];
        let gate = [Refusal {
            durable_id: "nfs-demo".to_owned(),
            kind: Some(StorageType::Nfs),
            reason: TargetReason::NotInPlan,
            fields: Vec::new(),
            tier: false,
        }];
        let all = of(&[], &findings, &gate, None);
        assert_eq!(all.len(), 2, "{all:?}");
        assert_eq!(all[0].field.as_deref(), Some("rootfs_gib"));
        assert_eq!(all[0].name, guest.to_string());
        assert!(all[0].reason.contains("never shrunk"), "{all:?}");
        assert_eq!(all[1].kind, RefusedKind::StorageTarget);
        assert_eq!(all[1].name, "nfs-demo");
        assert!(all[1].reason.contains("does not name"), "{all:?}");
        for r in &all {
            assert!(bosun_proto::refused::check("refused", std::slice::from_ref(r)).is_ok());
        }
        assert!(of(&[], &[], &[], None).is_empty());
    }
}
