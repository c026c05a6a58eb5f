//! The node's disks and pools through Proxmox's own disk API, with no configuration: every
//! disk of `disks/list` with its SMART data (`disks/smart`) judged into a [`DiskHealth`], and
//! every LVM thin pool and ZFS pool (`disks/lvmthin`, `disks/zfs`) as a [`PoolHealth`] whose data
//! and metadata fill go through the same [`Gauge`] hysteresis as the host's gauges, against the
//! `[health]` pool thresholds.
//!
//! A disk is `failing` when its health says FAILED or an attribute is failing now; `worn` when
//! its wear used (100 less Proxmox's `wearout`, the life left) is at or above `wear_percent`;
//! `unreadable` when there is no verdict (USB and virtual disks often have none: reported, not
//! alerted). Every text from Proxmox is cleaned of control characters and cut to the report's
//! bounds here.

use std::collections::BTreeMap;

use bosun_proto::hardware::{
    DiskHealth, MAX_DISKS, MAX_FAILING_ATTRIBUTES, MAX_NAME_LEN, MAX_POOLS, PoolHealth, PoolKind,
};
use bosun_proto::health::SmartState;
use bosun_pve::{NodeDisk, SmartAttribute, SmartData, ThinPool, ZfsPool};
use jiff::Timestamp;

use super::gauge::{Gauge, Transition};
use super::smart::clean;
use crate::config::health::Thresholds;

/// `text` cleaned ([`clean`]) and cut to [`MAX_NAME_LEN`] bytes; empty stays empty.
fn name(text: &str) -> String {
    let mut out = clean(text.trim());
    if out.len() > MAX_NAME_LEN {
        let mut end = MAX_NAME_LEN;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
    }
    out
}

/// A JSON number or numeric string as text (`value`, `threshold` of an attribute).
fn number(v: Option<&serde_json::Value>) -> String {
    match v {
        Some(serde_json::Value::Number(n)) => n.to_string(),
        Some(serde_json::Value::String(s)) => name(s),
        _ => "?".to_owned(),
    }
}

/// The first integer of an attribute's raw value (`34 (Min/Max 20/45)` → 34).
fn leading_integer(raw: &str) -> Option<f64> {
    let digits: String = raw
        .trim()
        .chars()
        .take_while(char::is_ascii_digit)
        .take(6)
        .collect();
    digits.parse::<u32>().ok().map(f64::from)
}

/// The drive's temperature: ATA attribute 194 or 190, or NVMe's `Temperature: N Celsius`.
fn temperature(smart: &SmartData) -> Option<f64> {
    let id = |a: &SmartAttribute| match &a.id {
        Some(serde_json::Value::Number(n)) => n.as_u64(),
        Some(serde_json::Value::String(s)) => s.trim().parse().ok(),
        _ => None,
    };
    let from_attribute = [194, 190].into_iter().find_map(|want| {
        smart
            .attributes
            .iter()
            .find(|a| id(a) == Some(want))
            .and_then(|a| leading_integer(a.raw.as_deref().unwrap_or_default()))
    });
    let from_text = || {
        let text = smart.text.as_deref()?;
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with("Temperature:"))?;
        leading_integer(line.split_once(':')?.1)
    };
    from_attribute
        .or_else(from_text)
        .filter(|t| (-100.0..=1000.0).contains(t))
}

/// The attributes SMART marks failing (now or in the past), as short text, and whether any
/// fails now.
fn failing_attributes(smart: &SmartData) -> (Vec<String>, bool) {
    let mut now = false;
    let list = smart
        .attributes
        .iter()
        .filter_map(|a| {
            let fail = a.fail.as_deref().map(str::trim).unwrap_or_default();
            if fail.is_empty() || fail == "-" {
                return None;
            }
            now |= fail.eq_ignore_ascii_case("FAILING_NOW");
            Some(clean(&format!(
                "{} {}: {} (value {}, threshold {})",
                number(a.id.as_ref()),
                name(a.name.as_deref().unwrap_or("?")),
                name(fail),
                number(a.value.as_ref()),
                number(a.threshold.as_ref()),
            )))
        })
        .take(MAX_FAILING_ATTRIBUTES)
        .collect();
    (list, now)
}

/// Judges one disk of the list with its SMART data (`None`: unread).
pub fn judge_disk(
    disk: &NodeDisk,
    smart: Option<&SmartData>,
    wear_percent: u8,
    now: Timestamp,
) -> DiskHealth {
    let health_word = smart
        .and_then(|s| s.health.as_deref())
        .or(disk.health.as_deref())
        .map(name)
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "UNKNOWN".to_owned());
    let (failing, failing_now) = smart.map(failing_attributes).unwrap_or_default();
    let upper = health_word.to_ascii_uppercase();
    let state = if upper.starts_with("FAIL") || failing_now {
        SmartState::Failing
    } else if upper == "PASSED" || upper == "OK" {
        SmartState::Passed
    } else {
        SmartState::Unreadable
    };
    let wear_used_percent = disk.life_left_percent().map(|left| 100 - left);
    DiskHealth {
        device: name(&disk.devpath),
        model: name(disk.model.as_deref().unwrap_or_default()),
        kind: name(disk.kind.as_deref().unwrap_or_default()),
        health: health_word,
        state,
        wear_used_percent,
        worn: wear_used_percent.is_some_and(|w| w >= wear_percent),
        failing_attributes: failing,
        temperature_c: smart.and_then(temperature),
        checked_at: now,
    }
}

/// The disks of a list worth reading: at most [`MAX_DISKS`], each device once, with a name.
pub fn disks_to_read(list: Vec<NodeDisk>) -> Vec<NodeDisk> {
    let mut seen = std::collections::BTreeSet::new();
    list.into_iter()
        .filter(|d| !name(&d.devpath).is_empty() && seen.insert(name(&d.devpath)))
        .take(MAX_DISKS)
        .collect()
}

/// One pool's gauges and last figures.
#[derive(Debug)]
struct Pool {
    data: Gauge,
    metadata: Gauge,
    last: Option<PoolHealth>,
}

/// Every pool's gauges, kept between samples.
#[derive(Debug)]
pub struct PoolGauges {
    thresholds: Thresholds,
    samples: u32,
    pools: BTreeMap<(&'static str, String), Pool>,
}

/// One pool as read this sample.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PoolReading {
    kind: PoolKind,
    name: String,
    size: u64,
    used: u64,
    metadata: Option<(u64, u64)>,
    state: Option<String>,
}

fn thin_readings(pools: &[ThinPool]) -> Vec<PoolReading> {
    pools
        .iter()
        .filter_map(|p| {
            let lv = name(&p.lv);
            let full = match p.vg.as_deref().map(name) {
                Some(vg) if !vg.is_empty() => name(&format!("{vg}/{lv}")),
                _ => lv,
            };
            let size = p.lv_size.filter(|s| *s > 0)?;
            let metadata = match (p.metadata_size, p.metadata_used) {
                (Some(size), Some(used)) if size > 0 => Some((size, used.min(size))),
                _ => None,
            };
            (!full.is_empty()).then(|| PoolReading {
                kind: PoolKind::Lvmthin,
                name: full,
                size,
                used: p.used.unwrap_or(0).min(size),
                metadata,
                state: None,
            })
        })
        .collect()
}

fn zfs_readings(pools: &[ZfsPool]) -> Vec<PoolReading> {
    pools
        .iter()
        .filter_map(|p| {
            let size = p.size.filter(|s| *s > 0)?;
            let used = p
                .alloc
                .or_else(|| p.free.map(|f| size.saturating_sub(f)))
                .unwrap_or(0);
            let pool_name = name(&p.name);
            (!pool_name.is_empty()).then(|| PoolReading {
                kind: PoolKind::Zfs,
                name: pool_name,
                size,
                used: used.min(size),
                metadata: None,
                state: p.health.as_deref().map(name).filter(|h| !h.is_empty()),
            })
        })
        .collect()
}

/// `used / size` as a share (sizes far below 2^53 bytes: exact enough for a threshold).
#[allow(clippy::cast_precision_loss)]
fn fill(used: u64, size: u64) -> f64 {
    used as f64 / size as f64
}

impl PoolGauges {
    /// No pool read yet.
    pub fn new(thresholds: Thresholds, samples: u32) -> Self {
        Self {
            thresholds,
            samples,
            pools: BTreeMap::new(),
        }
    }

    /// Takes one sample. A list that could not be read (`None`) keeps that kind's pools as
    /// they were; a pool gone from a list that was read is dropped.
    pub fn observe(&mut self, thin: Option<&[ThinPool]>, zfs: Option<&[ZfsPool]>, now: Timestamp) {
        for (kind, read) in [
            (PoolKind::Lvmthin, thin.map(thin_readings)),
            (PoolKind::Zfs, zfs.map(zfs_readings)),
        ] {
            let Some(mut read) = read else { continue };
            read.truncate(MAX_POOLS);
            self.pools
                .retain(|(k, n), _| *k != kind.as_str() || read.iter().any(|r| &r.name == n));
            for r in read {
                let pool = self
                    .pools
                    .entry((kind.as_str(), r.name.clone()))
                    .or_insert_with(|| Pool {
                        data: Gauge::new(self.thresholds, self.samples),
                        metadata: Gauge::new(self.thresholds, self.samples),
                        last: None,
                    });
                log(
                    &r.name,
                    "data",
                    pool.data.observe(fill(r.used, r.size), now),
                );
                if let Some((size, used)) = r.metadata {
                    log(
                        &r.name,
                        "metadata",
                        pool.metadata.observe(fill(used, size), now),
                    );
                }
                let Some(data) = pool.data.report() else {
                    continue;
                };
                pool.last = Some(PoolHealth {
                    name: r.name,
                    kind: r.kind,
                    size: r.size,
                    used: r.used,
                    metadata_size: r.metadata.map(|m| m.0),
                    metadata_used: r.metadata.map(|m| m.1),
                    data,
                    metadata: r.metadata.and_then(|_| pool.metadata.report()),
                    state: r.state,
                });
            }
        }
    }

    /// The report's view, at most [`MAX_POOLS`].
    pub fn report(&self) -> Vec<PoolHealth> {
        self.pools
            .values()
            .filter_map(|p| p.last.clone())
            .take(MAX_POOLS)
            .collect()
    }
}

fn log(pool: &str, part: &str, t: Option<Transition>) {
    match t {
        Some(Transition::Raised) => tracing::warn!(pool, part, "pool fill raised"),
        Some(Transition::Cleared) => tracing::info!(pool, part, "pool fill cleared"),
        None => {}
    }
}

#[cfg(test)]
#[path = "hardware_tests.rs"]
mod tests;
