//! `bosun.retention-floor/v1`: the least retention an operator allows on one host, per
//! backup tier. Pruning deletes backups, so the hub alone may only lengthen retention: the
//! agent applies the desired retention raised to this floor, keeps backing up every tier the
//! floor names even when desired state drops it, and without any floor prunes nothing
//! (DESIGN §5). The operator signs the exact document bytes with
//! `ssh-keygen -Y sign -n bosun-policy@v1` (`bosunctl policy sign-floor`); the document
//! travels in the desired state's `backup_policy.floor`.
//!
//! A floor is bound to one host and carries its issue time: the agent keeps the newest floor
//! it has verified and refuses an older one, so a hub replaying an earlier, lower floor
//! lowers nothing.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::desired::{MAX_FURTHER_TIERS, Retention};
use crate::validate::{self, ValidationError};

/// Schema of [`RetentionFloor`].
pub const FLOOR_SCHEMA: &str = "bosun.retention-floor/v1";

/// The SSHSIG namespace of retention floors.
pub const POLICY_NAMESPACE: &str = "bosun-policy@v1";

/// Longest signed floor document accepted (bytes).
pub const MAX_FLOOR_DOCUMENT: usize = 8192;

/// What the operator signs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RetentionFloor {
    /// Always [`FLOOR_SCHEMA`].
    pub schema: String,
    /// The host this floor is for.
    pub host_id: Uuid,
    /// When the operator issued it; a newer floor replaces an older one, never the reverse.
    pub issued_at: Timestamp,
    /// One entry per tier.
    pub tiers: Vec<FloorTier>,
}

/// The floor of one tier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FloorTier {
    /// The tier's target `durable_id`; absent: the first tier on the agent's configured
    /// storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The least retention of the tier.
    pub retention: Retention,
}

impl RetentionFloor {
    /// Checks the schema, the tier count and each retention.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::schema(&self.schema, FLOOR_SCHEMA)?;
        validate::count("floor.tiers", self.tiers.len(), MAX_FURTHER_TIERS + 1)?;
        for (i, tier) in self.tiers.iter().enumerate() {
            if let Some(target) = &tier.target {
                validate::text(|| format!("floor.tiers[{i}].target"), target, 256)?;
            }
            if self.tiers[..i].iter().any(|t| t.target == tier.target) {
                return Err(ValidationError::Duplicate {
                    field: format!("floor.tiers[{i}].target"),
                    value: tier.target.clone().unwrap_or_else(|| "(first tier)".into()),
                });
            }
            tier.retention
                .validate(&format!("floor.tiers[{i}].retention"))?;
        }
        Ok(())
    }

    /// The floor of the tier on `target` (`None`: the first tier on the configured storage).
    pub fn tier(&self, target: Option<&str>) -> Option<&FloorTier> {
        self.tiers.iter().find(|t| t.target.as_deref() == target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keep(last: u32, daily: u32) -> Retention {
        Retention {
            keep_last: last,
            keep_daily: daily,
            ..Retention::default()
        }
    }

    #[test]
    fn a_floor_raises_each_count_and_keep_all_wins() {
        assert_eq!(keep(1, 0).at_least(&keep(3, 7)), keep(3, 7));
        assert_eq!(keep(5, 2).at_least(&keep(3, 7)), keep(5, 7));
        // All zero keeps everything, on either side.
        assert!(keep(1, 0).at_least(&Retention::default()).keeps_all());
        assert!(Retention::default().at_least(&keep(3, 0)).keeps_all());
    }

    #[test]
    fn a_floor_validates_its_tiers() {
        let mut floor = RetentionFloor {
            schema: FLOOR_SCHEMA.into(),
            host_id: Uuid::nil(),
            issued_at: Timestamp::UNIX_EPOCH,
            tiers: vec![
                FloorTier {
                    target: None,
                    retention: keep(3, 0),
                },
                FloorTier {
                    target: Some("pbs@pbs:store".into()),
                    retention: keep(0, 7),
                },
            ],
        };
        floor.validate().unwrap();
        assert_eq!(
            floor.tier(Some("pbs@pbs:store")).unwrap().retention,
            keep(0, 7)
        );
        floor.tiers.push(floor.tiers[0].clone());
        assert_eq!(
            floor.validate().unwrap_err().field(),
            "floor.tiers[2].target"
        );
        floor.tiers.pop();
        floor.tiers[1].retention.keep_daily = crate::desired::MAX_KEEP + 1;
        assert_eq!(
            floor.validate().unwrap_err().field(),
            "floor.tiers[1].retention.keep_daily"
        );
    }
}
