//! `bosun.data-plan/v1`: where one host's customer data may go, as the operator signed it.
//!
//! Unsigned desired state may add protection, never move data (DESIGN §5). Every storage
//! target that receives, serves or holds guest data, with its whole identity, every backup
//! tier (target, cadence, least retention) and so the order disaster recovery looks in, is
//! this document's to decide. The operator signs the exact bytes with
//! `ssh-keygen -Y sign -n bosun-policy@v1` (`bosunctl policy sign-plan`); the signed document
//! travels in desired state's `data_plan`. The plan is bound to one host and carries a
//! serial that only rises: the agent keeps the newest plan it has verified and refuses an
//! older serial, so a hub replaying an earlier plan moves nothing.
//!
//! Desired state may then only refer to the plan's targets and tiers: keep backups longer,
//! back up more often (never more often than [`PlanBackup::min_interval_seconds`]) and add a
//! target's sealed credentials. A desired-state target the plan does not name, or one that
//! names a plan target's `durable_id` with another identity (another namespace, user or
//! serial), is refused and never registered, mounted, written or read.

use std::collections::HashSet;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::desired::{
    MAX_FURTHER_TIERS, MAX_TARGETS, Retention, StorageClass, StorageTarget, StorageType,
};
use crate::retention::POLICY_NAMESPACE;
use crate::validate::{self, ValidationError};

mod bulk;
pub use bulk::{MAX_BULK_BACKUPS, MAX_BULK_KEEP, PlanBulkBackup};

/// Schema of [`DataPlan`].
pub use crate::schema_ids::DATA_PLAN as PLAN_SCHEMA;

/// The SSHSIG namespace a data plan is signed under (the policy namespace, shared with
/// retention floors).
pub const PLAN_NAMESPACE: &str = POLICY_NAMESPACE;

/// Longest signed plan document accepted (bytes): 64 targets with sealed credentials fit.
pub const MAX_PLAN_DOCUMENT: usize = 1024 * 1024;

/// The shortest `min_interval_seconds` a plan may set.
pub const MIN_INTERVAL_FLOOR: u32 = 1;
/// The longest `min_interval_seconds` a plan may set (a week).
pub const MIN_INTERVAL_CEILING: u32 = 7 * 24 * 3600;

/// What the operator signs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DataPlan {
    /// Always [`PLAN_SCHEMA`].
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::openapi::data_plan))]
    pub schema: String,
    /// The host this plan is for.
    pub host_id: Uuid,
    /// Only rises: a plan with a serial at or below the agent's verified one is not taken.
    pub serial: u64,
    /// When the operator issued it (shown; the serial orders plans).
    pub issued_at: Timestamp,
    /// Every storage target the host may use, with its whole identity. A further tier's
    /// target carries its cadence and least retention in `policy`.
    #[serde(default)]
    pub targets: Vec<StorageTarget>,
    /// The backup tiers.
    pub backup: PlanBackup,
    /// The speed class of the node's own Proxmox storages that hold guest volumes (the root
    /// volume's `local-lvm`, …), which no target names: what a controller's `GET /v1/storage`
    /// reports for a volume there. Bosun's own `bosun-…` storages take their target's class.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_storages: Vec<NodeStorage>,
    /// The tunnel this host runs and which public hostname reaches which of its guests
    /// (decision 0082); absent: the agent writes no tunnel routes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<crate::tunnel::PlanTunnel>,
    /// Bulk volumes' own backups: which volume is archived to which target, how often, how
    /// many kept (decision 0090). A bulk volume no entry names is not backed up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bulk_backups: Vec<PlanBulkBackup>,
    /// The bounds on every guest's CPU weight, CPU time and network rate that desired state's
    /// share classes are held to (decision 0100); absent: the agent's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_share: Option<crate::share::ShareBounds>,
    /// Who may sign in to each guest: the OpenSSH keys its `root` trusts, handed to the
    /// guest in its bootstrap (decision 0107). A guest no entry names trusts no key of
    /// Bosun's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guest_access: Vec<crate::guest_access::GuestAccess>,
}

/// One of the node's own Proxmox storages and its speed class, as the operator signs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NodeStorage {
    /// The Proxmox storage id (`local-lvm`); never a `bosun-…` one.
    pub storage: String,
    /// Its speed class.
    pub class: StorageClass,
}

/// Whether `storage` is a Proxmox storage id (`pve-storage-id`: a letter, then letters,
/// digits, `-`, `_` or `.`, at most 64 bytes in all).
fn is_storage_id(storage: &str) -> bool {
    storage.len() <= 64
        && storage
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
        && storage
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The backup tiers of a plan: tier 0 (the one the in-guest controller quiesces for) and the
/// further tiers in order, which is also the order disaster recovery looks in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PlanBackup {
    /// Tier 0's cadence: a Proxmox calendar event. Desired state may add a more frequent one.
    pub schedule: String,
    /// Tier 0's least retention: desired state may keep more, never less.
    pub retention: Retention,
    /// Tier 0's target (`durable_id` of a plan target); absent: the storage `agent.toml`
    /// names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The further tiers, in order: `durable_id`s of plan targets with a `policy.schedule`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub further_tiers: Vec<String>,
    /// The shortest time between two backups of one guest to one tier, whatever schedule
    /// desired state asks for (1..=604800 seconds).
    pub min_interval_seconds: u32,
    /// The longest a guest goes between restore tests, in days (1..=365), whatever desired
    /// state's restore-test policy says: with it, restore tests run at least this often even
    /// when desired state turns them off or spaces them further (decision 0051). Absent:
    /// desired state's policy decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 365))]
    pub restore_test_days: Option<u32>,
    /// The longest a guest's backup group on a PBS tier goes between two PBS verifications,
    /// in hours (1..=8760), whatever desired state's verify policy says: with it, verification
    /// runs at least this often even when desired state turns it off or spaces it further
    /// (decision 0079). Absent: desired state's policy decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 8760))]
    pub verify_hours: Option<u32>,
}

/// The most days a plan's `restore_test_days` may say.
pub const MAX_RESTORE_TEST_DAYS: u32 = 365;

impl PlanBackup {
    /// The restore-test policy the agent follows: desired state's, held to the plan's
    /// `restore_test_days` when it names one (on, and at least that often). The window and
    /// the timeout stay desired state's: a daily window of at least an hour delays a test by
    /// less than a day, and a timeout ends a test within a day (their validated ranges).
    pub fn restore_test_policy(
        &self,
        desired: crate::desired::RestoreTestPolicy,
    ) -> crate::desired::RestoreTestPolicy {
        let Some(days) = self.restore_test_days else {
            return desired;
        };
        let interval_days = if desired.enabled {
            desired.interval_days.min(days)
        } else {
            days
        };
        crate::desired::RestoreTestPolicy {
            enabled: true,
            interval_days: interval_days.max(1),
            ..desired
        }
    }
}

/// The fields of a target that say where its data goes. Two targets with the same identity
/// are the same place; any difference makes them different places.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TargetIdentity {
    /// Kind of target.
    #[serde(rename = "type")]
    pub kind: StorageType,
    /// The target's `durable_id` (server and export, path, repository with datastore and
    /// certificate fingerprint, or filesystem UUID).
    pub durable_id: String,
    /// The PBS namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The CIFS user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The USB disk's serial number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
}

impl TargetIdentity {
    /// The canonical bytes the identity is hashed and compared as: fields in a fixed order,
    /// each length-prefixed, so no two identities share bytes.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        let kind = serde_json::to_value(self.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let mut out = Vec::with_capacity(128);
        for field in [
            Some(kind.as_str()),
            Some(self.durable_id.as_str()),
            self.namespace.as_deref(),
            self.username.as_deref(),
            self.serial.as_deref(),
        ] {
            match field {
                None => out.push(0),
                Some(value) => {
                    out.push(1);
                    out.extend_from_slice(&(value.len() as u64).to_be_bytes());
                    out.extend_from_slice(value.as_bytes());
                }
            }
        }
        out
    }

    /// The fields in which `other` differs from this identity, by name.
    pub fn differences(&self, other: &TargetIdentity) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.kind != other.kind {
            out.push("type");
        }
        if self.durable_id != other.durable_id {
            out.push("durable_id");
        }
        if self.namespace != other.namespace {
            out.push("namespace");
        }
        if self.username != other.username {
            out.push("username");
        }
        if self.serial != other.serial {
            out.push("serial");
        }
        out
    }
}

impl StorageTarget {
    /// The target's identity: where its data goes.
    pub fn identity(&self) -> TargetIdentity {
        TargetIdentity {
            kind: self.kind,
            durable_id: self.durable_id.clone(),
            namespace: self.namespace.clone(),
            username: self.username.clone(),
            serial: self.serial.clone(),
        }
    }
}

impl DataPlan {
    /// Checks every field; the error names the first field that is wrong.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::schema(&self.schema, PLAN_SCHEMA)?;
        if self.host_id.is_nil() {
            return Err(ValidationError::Invalid {
                field: "host_id".into(),
                reason: "the nil UUID is not a host id".into(),
            });
        }
        if self.serial == 0 {
            return Err(ValidationError::Invalid {
                field: "serial".into(),
                reason: "a plan's serial starts at 1".into(),
            });
        }
        validate::count("targets", self.targets.len(), MAX_TARGETS)?;
        let mut ids = HashSet::new();
        for (i, target) in self.targets.iter().enumerate() {
            target.validate_at(&format!("targets[{i}]"))?;
            if target.kind == StorageType::Usb && target.serial.is_none() {
                return Err(ValidationError::Invalid {
                    field: format!("targets[{i}].serial"),
                    reason: "a plan's usb target names its disk's serial number too".into(),
                });
            }
            if target.kind == StorageType::LocalDir
                && target
                    .durable_id
                    .split('/')
                    .skip(1)
                    .any(|c| c.is_empty() || c == "." || c == "..")
            {
                return Err(ValidationError::Invalid {
                    field: format!("targets[{i}].durable_id"),
                    reason: "expected a normal absolute path (no empty, `.` or `..` part)".into(),
                });
            }
            // One place per (kind, durable_id): a second identity for the same id would let
            // desired state pick between them.
            if !ids.insert((target.kind, target.durable_id.as_str())) {
                return Err(ValidationError::Duplicate {
                    field: format!("targets[{i}].durable_id"),
                    value: target.durable_id.clone(),
                });
            }
        }
        self.validate_node_storages()?;
        crate::guest_access::validate_all(
            "guest_access",
            &self.guest_access,
            crate::desired::MAX_GUESTS,
        )?;
        let backup = &self.backup;
        validate::calendar_event(|| "backup.schedule".into(), &backup.schedule)?;
        backup.retention.validate("backup.retention")?;
        validate::range(
            || "backup.min_interval_seconds".into(),
            backup.min_interval_seconds,
            MIN_INTERVAL_FLOOR,
            MIN_INTERVAL_CEILING,
        )?;
        if let Some(days) = backup.restore_test_days {
            validate::range(
                || "backup.restore_test_days".into(),
                days,
                1,
                MAX_RESTORE_TEST_DAYS,
            )?;
        }
        if let Some(hours) = backup.verify_hours {
            validate::range(
                || "backup.verify_hours".into(),
                hours,
                1,
                crate::verify::MAX_VERIFY_HOURS,
            )?;
        }
        validate::count(
            "backup.further_tiers",
            backup.further_tiers.len(),
            MAX_FURTHER_TIERS,
        )?;
        crate::desired::validate_tier_targets(
            &self.targets,
            "backup",
            backup.target.as_deref(),
            &backup.further_tiers,
        )?;
        bulk::validate(&self.bulk_backups, &self.targets)?;
        if let Some(bounds) = &self.guest_share {
            bounds.validate("guest_share")?;
        }
        self.tunnel
            .as_ref()
            .map_or(Ok(()), |tunnel| tunnel.validate_at("tunnel"))
    }

    /// The bulk backup the plan names for `guest_id`'s volume `volume`, if any.
    pub fn bulk_backup(&self, guest_id: Uuid, volume: &str) -> Option<&PlanBulkBackup> {
        self.bulk_backups
            .iter()
            .find(|b| b.guest_id == guest_id && b.volume == volume)
    }

    fn validate_node_storages(&self) -> Result<(), ValidationError> {
        validate::count("node_storages", self.node_storages.len(), MAX_TARGETS)?;
        let mut seen = HashSet::new();
        for (i, node) in self.node_storages.iter().enumerate() {
            let field = || format!("node_storages[{i}].storage");
            if !is_storage_id(&node.storage) || node.storage.starts_with("bosun-") {
                return Err(ValidationError::Invalid {
                    field: field(),
                    reason: "expected a Proxmox storage id of the node's own (not a bosun- one)"
                        .into(),
                });
            }
            if !seen.insert(node.storage.as_str()) {
                return Err(ValidationError::Duplicate {
                    field: field(),
                    value: node.storage.clone(),
                });
            }
        }
        Ok(())
    }

    /// The class the plan gives the node's own storage `storage`, if it names it.
    pub fn node_class(&self, storage: &str) -> Option<StorageClass> {
        self.node_storages
            .iter()
            .find(|n| n.storage == storage)
            .map(|n| n.class)
    }

    /// The keys the plan trusts for the `root` of guest `guest_id` serving `customer_id`;
    /// none when no entry names both.
    pub fn guest_keys(
        &self,
        guest_id: Uuid,
        customer_id: &str,
    ) -> &[crate::ssh_public_key::SshPublicKey] {
        self.guest_access
            .iter()
            .find(|a| a.guest_id == guest_id && a.customer_id == customer_id)
            .map_or(&[], |a| a.ssh_keys.as_slice())
    }

    /// The plan target with `durable_id`, if any.
    pub fn target(&self, durable_id: &str) -> Option<&StorageTarget> {
        self.targets.iter().find(|t| t.durable_id == durable_id)
    }
}

impl crate::signed::SignedDocument {
    /// Checks sizes and that the document decodes to a valid [`DataPlan`]; gives it. The
    /// signature itself is checked by the agent against its `allowed_signers`.
    pub fn data_plan(&self) -> Result<DataPlan, ValidationError> {
        let plan: DataPlan = self.decode("data_plan", PLAN_SCHEMA, MAX_PLAN_DOCUMENT)?;
        plan.validate()?;
        Ok(plan)
    }
}

#[cfg(test)]
mod tests;
