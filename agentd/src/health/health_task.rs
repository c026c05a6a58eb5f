//! The health task: three loops on the clock seam, each on its own cadence, publishing into
//! one `watch<HealthFacts>`:
//!
//! ```text
//!   every health.interval ........ GET /nodes/{node}/status → CPU, memory, root disk gauges
//!   every health.smart_interval .. helper smart_status per configured disk → SMART readings
//!   every tunnel.interval ........ GET readiness_url (loopback) → tunnel watch
//!   every health.interval ........ GET /nodes/{node}/lxc (guests with thresholds only),
//!                                  disks/lvmthin, disks/zfs, /sys/class/hwmon
//!                                  → guest gauges, pool gauges, temperatures
//!   every health.smart_interval .. GET disks/list, then disks/smart per disk → disk health
//! ```
//!
//! A slow SMART read (smartctl on a dying disk can take a while) never holds up the gauges or
//! the tunnel. A failed node-status sample keeps the gauges' last readings and says why in
//! `sample_error`. Every raise and clear is logged; the hub loop reports a change of the
//! alarms at once ([`HealthFacts::alarms`]).

use std::sync::Arc;
use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::health::HostHealth;
use bosun_proto::tunnel::TunnelState;
use bosun_pve::{NodeStatus, Pve};
use jiff::Timestamp;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::gauge::{Gauge, Transition, TunnelWatch};
use super::tunnel::ReadinessProbe;
use super::{HealthFacts, smart};
use crate::clock::SharedClock;
use crate::config::health::{HealthSettings, TunnelSettings};
use crate::data::desired::DesiredSnapshot;
use crate::links::helper::HelperClient;
use crate::ops::journal::JournalHandle;

/// Longest a SMART read may take through the helper.
pub const SMART_TIMEOUT: Duration = Duration::from_secs(60);

/// The three gauges.
#[derive(Debug)]
struct Gauges {
    cpu: Gauge,
    memory: Gauge,
    disk: Gauge,
}

/// Where the task learns which guests have thresholds and which container is which guest.
#[derive(Debug, Clone)]
pub struct GuestSources {
    /// The journal (the provenance of each guest the agent created).
    pub journal: JournalHandle,
    /// Desired state (each guest's thresholds).
    pub desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
}

/// The task.
#[derive(Debug)]
pub struct HealthTask<P> {
    pub(super) pve: Arc<P>,
    helper: Option<HelperClient>,
    pub(super) clock: SharedClock,
    pub(super) settings: HealthSettings,
    tunnel: Option<(TunnelSettings, ReadinessProbe)>,
    pub(super) guests: Option<GuestSources>,
    pub(super) facts: watch::Sender<HealthFacts>,
    managed: Option<watch::Receiver<Option<TunnelState>>>,
}

impl<P: Pve + 'static> HealthTask<P> {
    /// A task and the receiver of what it finds. `tunnel` is the readiness endpoint, if one is
    /// watched; `helper` reads SMART (required when the settings name disks); `guests` lets it
    /// watch the guests desired state gives thresholds.
    pub fn new(
        pve: Arc<P>,
        helper: Option<HelperClient>,
        clock: SharedClock,
        settings: HealthSettings,
        tunnel: Option<(TunnelSettings, ReadinessProbe)>,
        guests: Option<GuestSources>,
    ) -> (Self, watch::Receiver<HealthFacts>) {
        let (facts, rx) = watch::channel(HealthFacts::default());
        let helper = helper.map(|h| h.with_timeout(SMART_TIMEOUT));
        (
            Self {
                pve,
                helper,
                clock,
                settings,
                tunnel,
                guests,
                facts,
                managed: None,
            },
            rx,
        )
    }

    /// Reports what the tunnel task manages of the tunnel (routes, restarts, connections,
    /// version) with the readiness it watches.
    pub fn with_managed_tunnel(mut self, state: watch::Receiver<Option<TunnelState>>) -> Self {
        self.managed = Some(state);
        self
    }

    /// Runs until `cancel`.
    pub async fn run(self, cancel: CancellationToken) {
        tokio::join!(
            self.gauges_loop(&cancel),
            self.smart_loop(&cancel),
            self.tunnel_loop(&cancel),
            Box::pin(self.usage_loop(&cancel)),
            Box::pin(self.disks_loop(&cancel)),
        );
    }

    /// Waits `every` on the clock; false when cancelled meanwhile.
    pub(super) async fn pause(&self, cancel: &CancellationToken, every: Duration) -> bool {
        tokio::select! {
            () = cancel.cancelled() => false,
            () = self.clock.sleep(every) => true,
        }
    }

    async fn gauges_loop(&self, cancel: &CancellationToken) {
        let s = &self.settings;
        let mut gauges = Gauges {
            cpu: Gauge::new(s.cpu, s.samples),
            memory: Gauge::new(s.memory, s.samples),
            disk: Gauge::new(s.disk, s.samples),
        };
        loop {
            let sampled = tokio::select! {
                () = cancel.cancelled() => return,
                sampled = self.pve.node_status() => sampled,
            };
            let now = self.clock.now();
            let (load_avg, sample_error) = match sampled {
                Ok(status) => (observe(&mut gauges, &status, now), None),
                Err(e) => {
                    tracing::warn!(error = %error_chain(&e), "node status unreadable; host health keeps its last readings");
                    (None, Some(smart::clean(&error_chain(&e))))
                }
            };
            self.facts.send_modify(|f| {
                let health = f.host.get_or_insert_with(HostHealth::default);
                health.cpu = gauges.cpu.report();
                health.memory = gauges.memory.report();
                health.disk = gauges.disk.report();
                if sample_error.is_none() {
                    health.load_avg = load_avg;
                }
                health.sample_error = sample_error;
            });
            if !self.pause(cancel, s.interval).await {
                return;
            }
        }
    }

    async fn smart_loop(&self, cancel: &CancellationToken) {
        let Some(helper) = &self.helper else {
            return;
        };
        let devices = &self.settings.smart_devices;
        if devices.is_empty() {
            return;
        }
        loop {
            for device in devices {
                let reading = tokio::select! {
                    () = cancel.cancelled() => return,
                    reading = smart::read(helper, device, self.clock.now()) => reading,
                };
                self.facts.send_modify(|f| {
                    let health = f.host.get_or_insert_with(HostHealth::default);
                    let before = health
                        .smart
                        .iter()
                        .find(|r| r.device == reading.device)
                        .map(|r| r.state);
                    if before != Some(reading.state) {
                        match reading.state {
                            bosun_proto::health::SmartState::Passed => {
                                tracing::info!(device = %reading.device, detail = %reading.detail, "disk passes its SMART check")
                            }
                            state => {
                                tracing::warn!(device = %reading.device, state = state.as_str(), detail = %reading.detail, "disk SMART check not passed")
                            }
                        }
                    }
                    health.smart.retain(|r| r.device != reading.device);
                    health.smart.push(reading);
                    // In the configured order, so the report does not change by order alone.
                    health.smart.sort_by_key(|r| {
                        devices.iter().position(|d| d.as_str() == r.device)
                    });
                });
            }
            if !self.pause(cancel, self.settings.smart_interval).await {
                return;
            }
        }
    }

    async fn tunnel_loop(&self, cancel: &CancellationToken) {
        let Some((settings, probe)) = &self.tunnel else {
            return;
        };
        let mut watch = TunnelWatch::new(settings.down_after);
        loop {
            let outcome = tokio::select! {
                () = cancel.cancelled() => return,
                outcome = probe.check() => outcome,
            };
            match watch.observe(outcome, self.clock.now()) {
                Some(Transition::Raised) => tracing::warn!(
                    url = %settings.readiness_url,
                    detail = watch.report().map(|t| t.detail).unwrap_or_default(),
                    down_after_ms = u64::try_from(settings.down_after.as_millis()).unwrap_or(u64::MAX),
                    "tunnel down past its bound"
                ),
                Some(Transition::Cleared) => {
                    tracing::info!(url = %settings.readiness_url, "tunnel ready again")
                }
                None => {}
            }
            let mut report = watch.report();
            if let (Some(report), Some(managed)) = (report.as_mut(), &self.managed) {
                report.managed = managed.borrow().clone();
            }
            self.facts.send_modify(|f| f.tunnel = report);
            if !self.pause(cancel, settings.interval).await {
                return;
            }
        }
    }
}

/// Feeds one node status into the gauges (logging each raise and clear); gives the load
/// averages when Proxmox sent them.
fn observe(gauges: &mut Gauges, status: &NodeStatus, now: Timestamp) -> Option<[f64; 3]> {
    let share = |usage: Option<bosun_pve::NodeUsage>| {
        let u = usage?;
        let (total, used) = (u.total?, u.used?);
        (total > 0).then(|| used as f64 / total as f64)
    };
    for (name, gauge, reading) in [
        ("cpu", &mut gauges.cpu, status.cpu),
        ("memory", &mut gauges.memory, share(status.memory)),
        ("disk", &mut gauges.disk, share(status.rootfs)),
    ] {
        let Some(reading) = reading else { continue };
        match gauge.observe(reading, now) {
            Some(Transition::Raised) => {
                tracing::warn!(gauge = name, usage = reading, "host gauge raised")
            }
            Some(Transition::Cleared) => {
                tracing::info!(gauge = name, usage = reading, "host gauge cleared")
            }
            None => {}
        }
    }
    let load: Vec<f64> = status
        .loadavg
        .iter()
        .flatten()
        .filter_map(|v| match v {
            serde_json::Value::String(s) => s.trim().parse::<f64>().ok(),
            other => other.as_f64(),
        })
        .filter(|l| l.is_finite() && *l >= 0.0)
        .collect();
    <[f64; 3]>::try_from(load).ok()
}
