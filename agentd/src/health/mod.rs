//! Host health: CPU, memory and root-disk use from Proxmox's node status against thresholds
//! with hysteresis ([`gauge`]), the same for each guest with thresholds in desired state
//! ([`guest_gauges`]), every disk of the node and its LVM-thin and ZFS pools through Proxmox's
//! disk API ([`hardware`]), the node's temperature sensors ([`hwmon`]), SMART through the helper
//! on a cadence for the disks the operator lists ([`smart`]), and the
//! tunnel's readiness endpoint with a bound on how long it may be down ([`tunnel`]), sampled by
//! the [`health_task`] and reported to the hub (`host_health` and `tunnel` in the report),
//! which holds one alert open per raised condition.
//!
//! The settings are the `[health]` and `[tunnel]` sections of the agent's config
//! ([`crate::config::health`]); decision 0021 says why they live there and not in the hub's
//! agent config.

pub mod gauge;
pub mod guest_gauges;
pub mod hardware;
pub mod health_task;
pub mod hwmon;
mod node_loops;
pub mod smart;
pub mod temperature;
pub mod tunnel;

use bosun_proto::health::{HostHealth, SmartState};
use bosun_proto::report::TunnelHealth;

pub use crate::config::health::{HealthSettings, Thresholds, TunnelSettings};
pub use health_task::{GuestSources, HealthTask};

/// What the health task publishes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HealthFacts {
    /// The gauges and SMART readings, once sampled.
    pub host: Option<HostHealth>,
    /// The tunnel, once probed (never when none is configured).
    pub tunnel: Option<TunnelHealth>,
}

/// Which conditions are raised: a change is reported at once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Alarms {
    gauges: [bool; 3],
    smart: Vec<(String, SmartState)>,
    tunnel: Option<bool>,
    /// Each watched guest's raised gauges.
    guests: Vec<(uuid::Uuid, [bool; 3])>,
    /// Each disk's verdict and wear.
    disks: Vec<(String, SmartState, bool)>,
    /// Each pool's fill.
    pools: Vec<(String, bool)>,
    /// Each judged sensor's heat.
    temperatures: Vec<(String, bool)>,
}

impl HealthFacts {
    /// The raised conditions, to compare with what was last reported.
    pub fn alarms(&self) -> Alarms {
        let raised = |g: Option<&bosun_proto::health::GaugeHealth>| g.is_some_and(|g| g.raised);
        let host = self.host.as_ref();
        Alarms {
            gauges: [
                raised(host.and_then(|h| h.cpu.as_ref())),
                raised(host.and_then(|h| h.memory.as_ref())),
                raised(host.and_then(|h| h.disk.as_ref())),
            ],
            smart: host
                .iter()
                .flat_map(|h| &h.smart)
                .map(|r| (r.device.clone(), r.state))
                .collect(),
            tunnel: self.tunnel.as_ref().map(|t| t.raised),
            guests: host
                .iter()
                .flat_map(|h| &h.guests)
                .map(|g| (g.guest_id, g.gauges().map(|(_, g)| raised(g))))
                .collect(),
            disks: host
                .iter()
                .flat_map(|h| &h.disks)
                .map(|d| (d.device.clone(), d.state, d.worn))
                .collect(),
            pools: host
                .iter()
                .flat_map(|h| &h.pools)
                .map(|p| (p.name.clone(), p.raised()))
                .collect(),
            temperatures: host
                .iter()
                .flat_map(|h| &h.temperatures)
                .filter(|t| t.judged.is_some())
                .map(|t| (t.sensor.clone(), t.raised()))
                .collect(),
        }
    }
}
