//! The gauges of each guest with thresholds in desired state: CPU, memory and root-disk use
//! from Proxmox's container list, each through the same [`Gauge`] hysteresis as the host's
//! (the host's `samples`), so a guest wavering around its threshold keeps one alert.
//!
//! Which container is which guest comes from the journal's provenance, and only while the
//! container carries the identity tag written when it was created: a stranger at a journaled
//! vmid is never judged against another guest's thresholds.

use std::collections::BTreeMap;

use bosun_proto::desired::DesiredState;
use bosun_proto::guest_thresholds::{Band, GuestThresholds};
use bosun_proto::hardware::GuestHealth;
use bosun_pve::CtSummary;
use jiff::Timestamp;
use uuid::Uuid;

use super::gauge::{Gauge, Transition};
use crate::config::health::Thresholds;
use crate::ops::journal::GuestProvenance;

/// One guest's three gauges (`None`: not watched).
#[derive(Debug, Default)]
struct Watched {
    vmid: u32,
    gauges: [Option<Gauge>; 3],
}

/// Every watched guest's gauges, kept between samples.
#[derive(Debug)]
pub struct GuestGauges {
    samples: u32,
    guests: BTreeMap<Uuid, Watched>,
}

/// A watched guest's container this sample: its vmid and usage shares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GuestUsage {
    /// The vmid.
    pub vmid: u32,
    /// CPU, memory and root-disk shares, where Proxmox gave them.
    pub shares: [Option<f64>; 3],
}

/// The guests desired state gives thresholds, by guest id.
pub fn thresholds_of(desired: &DesiredState) -> BTreeMap<Uuid, GuestThresholds> {
    desired
        .guests
        .iter()
        .filter_map(|g| g.thresholds.map(|t| (g.guest_id, t)))
        .collect()
}

/// The usage of each watched guest's container: its provenance names the guest and the
/// container carries the identity written when it was created.
pub fn usage_of(
    watched: &BTreeMap<Uuid, GuestThresholds>,
    provenance: &[GuestProvenance],
    cts: &[CtSummary],
) -> BTreeMap<Uuid, GuestUsage> {
    let mut out = BTreeMap::new();
    for p in provenance.iter().filter(|p| !p.is_scratch()) {
        let Some(guest_id) = p.guest_id().and_then(|g| Uuid::parse_str(g).ok()) else {
            continue;
        };
        if !watched.contains_key(&guest_id) {
            continue;
        }
        let Some(ct) = cts.iter().find(|c| c.vmid.get() == p.vmid()) else {
            continue;
        };
        if !crate::guests::reconcile::lookup::has_tag(ct.tags.as_deref(), p.identity()) {
            continue;
        }
        out.insert(
            guest_id,
            GuestUsage {
                vmid: p.vmid(),
                shares: shares(ct),
            },
        );
    }
    out
}

/// CPU (already a share of the guest's cores), memory and root disk as shares.
fn shares(ct: &CtSummary) -> [Option<f64>; 3] {
    let share = |used: Option<u64>, total: Option<u64>| {
        let (used, total) = (used?, total?);
        // Byte counts far below 2^53: the ratio is exact enough for a threshold.
        #[allow(clippy::cast_precision_loss)]
        let ratio = used as f64 / total as f64;
        (total > 0).then_some(ratio)
    };
    let running = ct.status == bosun_pve::GuestStatus::Running;
    [
        ct.cpu.filter(|_| running),
        share(ct.mem, ct.maxmem).filter(|_| running),
        share(ct.disk, ct.maxdisk),
    ]
}

fn thresholds(band: Band) -> Thresholds {
    Thresholds {
        high: band.high(),
        low: band.low(),
    }
}

impl GuestGauges {
    /// Nothing watched yet; `samples` readings at or above high raise a gauge.
    pub fn new(samples: u32) -> Self {
        Self {
            samples,
            guests: BTreeMap::new(),
        }
    }

    /// Takes one sample: `watched` is every guest with thresholds now, `usage` what its
    /// container reads. A guest no longer watched is dropped; a gauge whose band changed
    /// starts over. Logs each raise and clear.
    pub fn observe(
        &mut self,
        watched: &BTreeMap<Uuid, GuestThresholds>,
        usage: &BTreeMap<Uuid, GuestUsage>,
        now: Timestamp,
    ) {
        self.guests.retain(|id, _| watched.contains_key(id));
        for (guest_id, t) in watched {
            let entry = self.guests.entry(*guest_id).or_default();
            let read = usage.get(guest_id);
            if let Some(u) = read {
                entry.vmid = u.vmid;
            }
            for (i, (name, band)) in t.bands().into_iter().enumerate() {
                let slot = &mut entry.gauges[i];
                match band {
                    None => *slot = None,
                    Some(band)
                        if slot.as_ref().map(Gauge::thresholds) != Some(thresholds(band)) =>
                    {
                        *slot = Some(Gauge::new(thresholds(band), self.samples));
                    }
                    Some(_) => {}
                }
                let (Some(gauge), Some(reading)) = (slot.as_mut(), read.and_then(|u| u.shares[i]))
                else {
                    continue;
                };
                match gauge.observe(reading, now) {
                    Some(Transition::Raised) => {
                        tracing::warn!(%guest_id, gauge = name, usage = reading, "guest gauge raised")
                    }
                    Some(Transition::Cleared) => {
                        tracing::info!(%guest_id, gauge = name, usage = reading, "guest gauge cleared")
                    }
                    None => {}
                }
            }
        }
    }

    /// The report's view: each watched guest with a reading.
    pub fn report(&self) -> Vec<GuestHealth> {
        self.guests
            .iter()
            .filter(|(_, w)| w.vmid != 0)
            .map(|(guest_id, w)| {
                let [cpu, memory, disk] = w
                    .gauges
                    .each_ref()
                    .map(|g| g.as_ref().and_then(Gauge::report));
                GuestHealth {
                    guest_id: *guest_id,
                    vmid: w.vmid,
                    cpu,
                    memory,
                    disk,
                }
            })
            .filter(|g| g.cpu.is_some() || g.memory.is_some() || g.disk.is_some())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn cpu_band(high: u8, low: u8) -> GuestThresholds {
        GuestThresholds {
            cpu: Some(Band {
                high_percent: high,
                low_percent: low,
            }),
            ..GuestThresholds::default()
        }
    }

    fn usage(cpu: f64) -> BTreeMap<Uuid, GuestUsage> {
        [(
            Uuid::from_u128(1),
            GuestUsage {
                vmid: 101,
                shares: [Some(cpu), Some(0.5), None],
            },
        )]
        .into_iter()
        .collect()
    }

    #[test]
    fn a_guest_gauge_has_the_hosts_hysteresis_and_follows_its_band() {
        let id = Uuid::from_u128(1);
        let mut watched: BTreeMap<Uuid, GuestThresholds> = [(id, cpu_band(90, 70))].into();
        let mut g = GuestGauges::new(2);
        let raised = |g: &GuestGauges| g.report()[0].cpu.unwrap().raised;
        g.observe(&watched, &usage(0.95), t(0));
        assert!(!raised(&g), "one reading of two");
        assert!(g.report()[0].memory.is_none(), "memory is not watched");
        g.observe(&watched, &usage(0.91), t(1));
        assert!(raised(&g), "two in a row");
        assert_eq!(g.report()[0].cpu.unwrap().since, Some(t(1)));
        g.observe(&watched, &usage(0.8), t(2));
        assert!(raised(&g), "between the thresholds it stays raised");
        g.observe(&watched, &BTreeMap::new(), t(3));
        assert!(raised(&g), "a missing reading changes nothing");
        g.observe(&watched, &usage(0.7), t(4));
        assert!(!raised(&g), "at low it clears");
        // A new band starts the gauge over.
        g.observe(&watched, &usage(0.95), t(5));
        watched.insert(id, cpu_band(99, 50));
        g.observe(&watched, &usage(0.95), t(6));
        let r = g.report()[0].cpu.unwrap();
        assert!(!r.raised && (r.high - 0.99).abs() < 1e-9);
        // Thresholds removed: the guest leaves the report.
        g.observe(&BTreeMap::new(), &usage(0.95), t(7));
        assert!(g.report().is_empty());
    }

    #[test]
    fn usage_is_read_only_for_watched_guests_whose_container_carries_its_identity() {
        let cts: Vec<CtSummary> = serde_json::from_value(serde_json::json!([
            {"vmid": 101, "status": "running", "cpu": 0.5, "mem": 256, "maxmem": 1024, "disk": 1, "maxdisk": 4, "tags": "bosun-op-1;x"},
            {"vmid": 102, "status": "stopped", "cpu": 0.0, "mem": 0, "maxmem": 1024, "disk": 3, "maxdisk": 4, "tags": "bosun-op-2"},
        ]))
        .unwrap();
        let cpu = shares(&cts[0]);
        assert_eq!(cpu, [Some(0.5), Some(0.25), Some(0.25)]);
        let stopped = shares(&cts[1]);
        assert_eq!(
            stopped,
            [None, None, Some(0.75)],
            "a stopped guest's disk still counts"
        );
    }
}
