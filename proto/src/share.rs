//! A fair share for every guest (decision 0100): the CPU weight, CPU time limit and network
//! rate Proxmox sets on a container (`cpuunits`, `cpulimit`, `rate=` on each `netN`).
//!
//! Desired state names share classes ([`ShareClass`]) and which one each guest takes; the
//! operator's signed data plan may bound them ([`ShareBounds`], `guest_share`), and where it
//! says nothing the agent's own bounds hold. [`resolve`] gives what the agent applies: a value
//! desired state asks for below a floor (a starved guest) or above a ceiling (a guest let loose
//! on its neighbours) is not applied; the bound is, and the refusal is reported.
//!
//! Disk IO has no Proxmox API setting for containers (only a root-only raw `lxc.cgroup2.*`
//! line in the config file): decision 0100 says why the agent does not write one.

use serde::{Deserialize, Serialize};

use crate::validate::{self, ValidationError};

/// Most share classes one desired-state document may name.
pub const MAX_SHARE_CLASSES: usize = 32;
/// The class a guest that names none takes, when desired state has one of this name.
pub const DEFAULT_CLASS: &str = "default";

/// Proxmox's default CPU weight on cgroup v2 (what a container without `cpuunits` gets).
pub const DEFAULT_CPU_WEIGHT: u32 = 100;
/// The weights cgroup v2 honours (Proxmox clamps `cpuunits` into them).
pub const CPU_WEIGHT_RANGE: (u32, u32) = (1, 10_000);
/// CPU time limits accepted, in thousandths of a core (Proxmox: `cpulimit` 0.001..=8192).
pub const CPU_LIMIT_RANGE: (u32, u32) = (10, 8_192_000);
/// Network rates accepted, in MB/s (Proxmox's `rate=`).
pub const NET_RATE_RANGE: (u32, u32) = (1, 100_000);

/// The agent's own bounds where the signed plan names none: a weight within a tenth and ten
/// times the default, at least a quarter of a core, at least 1 MB/s, no ceiling on CPU time
/// or rate (a guest is held to its `cores` anyway, and the agent cannot know the host's link).
pub const BUILT_IN_BOUNDS: ResolvedBounds = ResolvedBounds {
    cpu_weight: (10, 1_000),
    cpu_limit_millicores: (250, None),
    net_rate_mbytes_per_s: (1, None),
};

/// One share class of desired state: the limits every guest of the class gets. A limit left
/// out is the bound's default: the default weight, and no CPU-time or rate limit unless the
/// signed plan sets a ceiling.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ShareClass {
    /// The class's name (`[A-Za-z0-9._-]`, at most 32 bytes), unique; a guest naming no class
    /// takes the one named `default`, if there is one.
    pub name: String,
    /// CPU weight (Proxmox `cpuunits`), 1..=10000: a guest's share of contended CPU is its
    /// weight over the sum of the running guests' weights. Proxmox's default is 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 10_000))]
    pub cpu_weight: Option<u32>,
    /// CPU time limit in thousandths of a core (Proxmox `cpulimit`; 1500 is 1.5 cores),
    /// 10..=8192000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 10, maximum = 8_192_000))]
    pub cpu_limit_millicores: Option<u32>,
    /// Network rate limit of every interface in MB/s (Proxmox `rate=` on each `netN`),
    /// 1..=100000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 100_000))]
    pub net_rate_mbytes_per_s: Option<u32>,
}

impl ShareClass {
    /// Checks every field; errors name `prefix.<field>`.
    pub fn validate(&self, prefix: &str) -> Result<(), ValidationError> {
        let at = |f: &str| format!("{prefix}.{f}");
        validate::ident(|| at("name"), &self.name, 32)?;
        if let Some(w) = self.cpu_weight {
            validate::range(
                || at("cpu_weight"),
                w,
                CPU_WEIGHT_RANGE.0,
                CPU_WEIGHT_RANGE.1,
            )?;
        }
        if let Some(m) = self.cpu_limit_millicores {
            validate::range(
                || at("cpu_limit_millicores"),
                m,
                CPU_LIMIT_RANGE.0,
                CPU_LIMIT_RANGE.1,
            )?;
        }
        if let Some(r) = self.net_rate_mbytes_per_s {
            validate::range(
                || at("net_rate_mbytes_per_s"),
                r,
                NET_RATE_RANGE.0,
                NET_RATE_RANGE.1,
            )?;
        }
        Ok(())
    }
}

/// The operator's bounds on every guest's share, in the signed data plan (`guest_share`).
/// Each bound left out is the agent's own ([`BUILT_IN_BOUNDS`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ShareBounds {
    /// The least CPU weight desired state may give a guest (1..=10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_weight_min: Option<u32>,
    /// The greatest CPU weight desired state may give a guest (1..=10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_weight_max: Option<u32>,
    /// The least CPU time limit, in thousandths of a core.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_limit_min_millicores: Option<u32>,
    /// The greatest CPU time limit, in thousandths of a core: with it, every guest is limited
    /// to at most this much, whatever desired state says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_limit_max_millicores: Option<u32>,
    /// The least network rate limit, in MB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net_rate_min_mbytes_per_s: Option<u32>,
    /// The greatest network rate limit, in MB/s: with it, every guest's interfaces are limited
    /// to at most this rate, whatever desired state says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net_rate_max_mbytes_per_s: Option<u32>,
}

/// Bounds with the agent's own filled in: `(floor, ceiling)`, a ceiling of `None` being none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResolvedBounds {
    /// CPU weight.
    pub cpu_weight: (u32, u32),
    /// CPU time limit, thousandths of a core.
    pub cpu_limit_millicores: (u32, Option<u32>),
    /// Network rate, MB/s.
    pub net_rate_mbytes_per_s: (u32, Option<u32>),
}

impl ShareBounds {
    /// Each bound in its range and every floor at or below its ceiling; errors name
    /// `prefix.<field>`.
    pub fn validate(&self, prefix: &str) -> Result<(), ValidationError> {
        let at = |f: &str| format!("{prefix}.{f}");
        let checks = [
            ("cpu_weight_min", self.cpu_weight_min, CPU_WEIGHT_RANGE),
            ("cpu_weight_max", self.cpu_weight_max, CPU_WEIGHT_RANGE),
            (
                "cpu_limit_min_millicores",
                self.cpu_limit_min_millicores,
                CPU_LIMIT_RANGE,
            ),
            (
                "cpu_limit_max_millicores",
                self.cpu_limit_max_millicores,
                CPU_LIMIT_RANGE,
            ),
            (
                "net_rate_min_mbytes_per_s",
                self.net_rate_min_mbytes_per_s,
                NET_RATE_RANGE,
            ),
            (
                "net_rate_max_mbytes_per_s",
                self.net_rate_max_mbytes_per_s,
                NET_RATE_RANGE,
            ),
        ];
        for (field, value, (lo, hi)) in checks {
            if let Some(v) = value {
                validate::range(|| at(field), v, lo, hi)?;
            }
        }
        let b = self.resolved();
        let crossed = [
            ("cpu_weight_max", b.cpu_weight.0 > b.cpu_weight.1),
            (
                "cpu_limit_max_millicores",
                b.cpu_limit_millicores
                    .1
                    .is_some_and(|max| b.cpu_limit_millicores.0 > max),
            ),
            (
                "net_rate_max_mbytes_per_s",
                b.net_rate_mbytes_per_s
                    .1
                    .is_some_and(|max| b.net_rate_mbytes_per_s.0 > max),
            ),
        ];
        for (field, crossed) in crossed {
            if crossed {
                return Err(ValidationError::Invalid {
                    field: at(field),
                    reason: "below its floor (a bound left out is the agent's own)".into(),
                });
            }
        }
        Ok(())
    }

    /// The bounds with the agent's own where these name none.
    pub fn resolved(&self) -> ResolvedBounds {
        let d = BUILT_IN_BOUNDS;
        ResolvedBounds {
            cpu_weight: (
                self.cpu_weight_min.unwrap_or(d.cpu_weight.0),
                self.cpu_weight_max.unwrap_or(d.cpu_weight.1),
            ),
            cpu_limit_millicores: (
                self.cpu_limit_min_millicores
                    .unwrap_or(d.cpu_limit_millicores.0),
                self.cpu_limit_max_millicores.or(d.cpu_limit_millicores.1),
            ),
            net_rate_mbytes_per_s: (
                self.net_rate_min_mbytes_per_s
                    .unwrap_or(d.net_rate_mbytes_per_s.0),
                self.net_rate_max_mbytes_per_s.or(d.net_rate_mbytes_per_s.1),
            ),
        }
    }
}

/// What the agent applies to one guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    /// `cpuunits`.
    pub cpu_weight: u32,
    /// `cpulimit` in thousandths of a core; `None`: no limit.
    pub cpu_limit_millicores: Option<u32>,
    /// `rate=` on every interface, MB/s; `None`: no limit.
    pub net_rate_mbytes_per_s: Option<u32>,
}

/// Which bound a refused value crossed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crossed {
    /// Tighter than the floor: the guest would be starved.
    Floor,
    /// Looser than the ceiling: the guest would be let loose on its neighbours.
    Ceiling,
}

/// A share value desired state asked for that is not applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareRefusal {
    /// The class field (`cpu_weight`, `cpu_limit_millicores`, `net_rate_mbytes_per_s`).
    pub field: &'static str,
    /// What was asked (`None`: no limit).
    pub asked: Option<u32>,
    /// What is applied instead.
    pub applied: u32,
    /// The bound it crossed.
    pub crossed: Crossed,
}

impl ShareRefusal {
    /// The refusal in words.
    pub fn describe(&self) -> String {
        let asked = self
            .asked
            .map_or_else(|| "no limit".to_owned(), |v| v.to_string());
        match self.crossed {
            Crossed::Floor => format!(
                "{} {asked} is below the floor {} the signed plan (or the agent) sets; {} is applied",
                self.field, self.applied, self.applied
            ),
            Crossed::Ceiling => format!(
                "{} {asked} is above the ceiling {} the signed plan sets; {} is applied",
                self.field, self.applied, self.applied
            ),
        }
    }
}

/// The share a guest of `class` (none: no class) gets within `bounds`, and each value asked
/// for that is not applied.
pub fn resolve(class: Option<&ShareClass>, bounds: &ShareBounds) -> (Share, Vec<ShareRefusal>) {
    let b = bounds.resolved();
    let mut refused = Vec::new();
    let asked_weight = class.and_then(|c| c.cpu_weight);
    let cpu_weight = match asked_weight {
        Some(w) => bounded(
            "cpu_weight",
            Some(w),
            b.cpu_weight.0,
            Some(b.cpu_weight.1),
            &mut refused,
        )
        .unwrap_or(w),
        None => DEFAULT_CPU_WEIGHT.clamp(b.cpu_weight.0, b.cpu_weight.1),
    };
    let cpu_limit_millicores = bounded(
        "cpu_limit_millicores",
        class.and_then(|c| c.cpu_limit_millicores),
        b.cpu_limit_millicores.0,
        b.cpu_limit_millicores.1,
        &mut refused,
    );
    let net_rate_mbytes_per_s = bounded(
        "net_rate_mbytes_per_s",
        class.and_then(|c| c.net_rate_mbytes_per_s),
        b.net_rate_mbytes_per_s.0,
        b.net_rate_mbytes_per_s.1,
        &mut refused,
    );
    let share = Share {
        cpu_weight,
        cpu_limit_millicores,
        net_rate_mbytes_per_s,
    };
    (share, refused)
}

/// `asked` (`None`: no limit) held to `floor..=ceiling`; a value asked outside it is refused.
/// No limit asked under a ceiling is the ceiling, not a refusal: the class said nothing.
fn bounded(
    field: &'static str,
    asked: Option<u32>,
    floor: u32,
    ceiling: Option<u32>,
    refused: &mut Vec<ShareRefusal>,
) -> Option<u32> {
    let Some(value) = asked else {
        return ceiling;
    };
    if value < floor {
        refused.push(ShareRefusal {
            field,
            asked,
            applied: floor,
            crossed: Crossed::Floor,
        });
        return Some(floor);
    }
    match ceiling {
        Some(max) if value > max => {
            refused.push(ShareRefusal {
                field,
                asked,
                applied: max,
                crossed: Crossed::Ceiling,
            });
            Some(max)
        }
        _ => Some(value),
    }
}

#[cfg(test)]
mod tests;
