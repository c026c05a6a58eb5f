//! Bulk volumes' own backups, as the operator signs them (decision 0090): which bulk volume
//! of which guest is archived to which of the plan's targets, how often and how many
//! archives are kept. A bulk volume is left out of its guest's vzdump (`backup=0`), so its
//! archive decides where customer data goes: desired state may name a target for it, but
//! only the plan's entry is acted on.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::desired::{StorageRole, StorageTarget, StorageType};
use crate::validate::{self, ValidationError};

/// Most bulk backups one plan names (eight volumes of 32 guests).
pub const MAX_BULK_BACKUPS: usize = 256;
/// Most archives of one volume a plan may keep.
pub const MAX_BULK_KEEP: u32 = 365;

/// One bulk volume's own backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PlanBulkBackup {
    /// The guest the volume belongs to.
    pub guest_id: Uuid,
    /// The volume's name in the guest's `bulk_volumes`.
    pub volume: String,
    /// Where the volume is mounted in the guest: what is archived, signed so that desired
    /// state can neither point the archive at another of the guest's mount points nor stop
    /// it by dropping the volume from its list.
    pub path: String,
    /// Where its archives go: the `durable_id` of a plan target of role `vzdump-target` that
    /// the host reaches as a directory (local directory, USB disk, NFS or CIFS share; not a
    /// PBS datastore).
    pub target: String,
    /// When it is archived: a Proxmox calendar event.
    pub schedule: String,
    /// How many of its archives are kept on the target (1..=365); older ones are removed
    /// when a new one is written.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 365))]
    pub keep_last: u32,
}

/// Checks the plan's bulk backups against its `targets`.
pub(super) fn validate(
    entries: &[PlanBulkBackup],
    targets: &[StorageTarget],
) -> Result<(), ValidationError> {
    validate::count("bulk_backups", entries.len(), MAX_BULK_BACKUPS)?;
    let mut seen = HashSet::new();
    for (i, entry) in entries.iter().enumerate() {
        let at = |f: &str| format!("bulk_backups[{i}].{f}");
        if entry.guest_id.is_nil() {
            return Err(ValidationError::Invalid {
                field: at("guest_id"),
                reason: "the nil UUID is not a guest id".into(),
            });
        }
        crate::desired::check_volume_name(&entry.volume, &|| at("volume"))?;
        crate::desired::check_volume_path(&entry.path, &|| at("path"))?;
        if !seen.insert((entry.guest_id, entry.volume.as_str())) {
            return Err(ValidationError::Duplicate {
                field: at("volume"),
                value: format!("{} {}", entry.guest_id, entry.volume),
            });
        }
        let Some(target) = targets.iter().find(|t| t.durable_id == entry.target) else {
            return Err(ValidationError::Invalid {
                field: at("target"),
                reason: format!("the plan has no target {:?}", entry.target),
            });
        };
        if target.role != StorageRole::VzdumpTarget || target.kind == StorageType::Pbs {
            return Err(ValidationError::Invalid {
                field: at("target"),
                reason: "a bulk volume is archived to a vzdump-target the host reaches as a \
                         directory (local-dir, usb, nfs or cifs)"
                    .into(),
            });
        }
        validate::calendar_event(|| at("schedule"), &entry.schedule)?;
        validate::range(|| at("keep_last"), entry.keep_last, 1, MAX_BULK_KEEP)?;
    }
    Ok(())
}
