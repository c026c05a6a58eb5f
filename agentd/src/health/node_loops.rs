//! The health task's loops over the node's hardware and its guests' usage: the usage loop (each
//! `health.interval`: the guests desired state gives thresholds, the LVM-thin and ZFS pools, the
//! temperature sensors against their limits) and the disks loop (each `health.smart_interval`: every disk of
//! Proxmox's disk list with its SMART data). Both keep their last readings when a read fails,
//! and log a failing source once per change of its error, not once per sample.

use std::collections::BTreeMap;

use bosun_errchain::error_chain;
use bosun_proto::health::HostHealth;
use bosun_pve::{Pve, PveError};
use tokio_util::sync::CancellationToken;

use super::guest_gauges::{self, GuestGauges};
use super::hardware::{self, PoolGauges};
use super::health_task::HealthTask;
use super::hwmon;
use super::temperature::TemperatureGauges;

/// The last error of each source read, so a lasting failure is logged once.
#[derive(Debug, Default)]
struct Failures(BTreeMap<&'static str, String>);

impl Failures {
    /// The value, logging an error the first time it differs from the last one.
    fn note<T>(&mut self, source: &'static str, result: Result<T, PveError>) -> Option<T> {
        match result {
            Ok(v) => {
                if self.0.remove(source).is_some() {
                    tracing::info!(source, "node health source readable again");
                }
                Some(v)
            }
            Err(e) => {
                let text = error_chain(&e);
                if self.0.get(source) != Some(&text) {
                    tracing::warn!(source, error = %text, "node health source unreadable; keeping its last readings");
                    self.0.insert(source, text);
                }
                None
            }
        }
    }
}

impl<P: Pve + 'static> HealthTask<P> {
    /// Guests with thresholds, pools and temperatures, every `health.interval`.
    pub(super) async fn usage_loop(&self, cancel: &CancellationToken) {
        let s = &self.settings;
        let mut guests = GuestGauges::new(s.samples);
        let mut pools = PoolGauges::new(s.pool, s.samples);
        let mut heat =
            TemperatureGauges::new(s.samples, s.temperature_high_c, s.temperature_hysteresis_c);
        let mut failures = Failures::default();
        loop {
            let sampled = tokio::select! {
                () = cancel.cancelled() => return,
                sampled = self.sample_usage(&mut guests, &mut pools, &mut failures) => sampled,
            };
            let temperatures = heat.observe(sampled, self.clock.now());
            let (guest_report, pool_report) = (guests.report(), pools.report());
            self.facts.send_modify(|f| {
                let health = f.host.get_or_insert_with(HostHealth::default);
                health.guests = guest_report;
                health.pools = pool_report;
                health.temperatures = temperatures;
            });
            if !self.pause(cancel, s.interval).await {
                return;
            }
        }
    }

    /// One sample of the usage loop; gives the temperatures.
    async fn sample_usage(
        &self,
        guests: &mut GuestGauges,
        pools: &mut PoolGauges,
        failures: &mut Failures,
    ) -> Vec<bosun_proto::hardware::Temperature> {
        let watched = self
            .guests
            .as_ref()
            .and_then(|g| {
                g.desired
                    .borrow()
                    .as_ref()
                    .map(|d| guest_gauges::thresholds_of(&d.state))
            })
            .unwrap_or_default();
        if watched.is_empty() {
            guests.observe(&watched, &BTreeMap::new(), self.clock.now());
        } else if let Some(sources) = &self.guests {
            let cts = failures.note("lxc", self.pve.list_cts().await);
            let provenance = match sources.journal.all_provenance().await {
                Ok(p) => Some(p),
                Err(e) => {
                    tracing::warn!(error = %error_chain(&e), "journal unreadable; guest gauges keep their last readings");
                    None
                }
            };
            if let (Some(cts), Some(provenance)) = (cts, provenance) {
                let usage = guest_gauges::usage_of(&watched, &provenance, &cts);
                guests.observe(&watched, &usage, self.clock.now());
            }
        }
        let thin = failures.note("lvmthin", self.pve.thin_pools().await);
        let zfs = failures.note("zfs", self.pve.zfs_pools().await);
        pools.observe(thin.as_deref(), zfs.as_deref(), self.clock.now());
        let dir = self.settings.hwmon_dir.clone();
        tokio::task::spawn_blocking(move || hwmon::read(&dir))
            .await
            .unwrap_or_default()
    }

    /// Every disk of the node with its SMART data, every `health.smart_interval`.
    pub(super) async fn disks_loop(&self, cancel: &CancellationToken) {
        let mut failures = Failures::default();
        loop {
            let read = tokio::select! {
                () = cancel.cancelled() => return,
                read = self.read_disks(&mut failures) => read,
            };
            if let Some(disks) = read {
                self.facts.send_modify(|f| {
                    let health = f.host.get_or_insert_with(HostHealth::default);
                    for d in &disks {
                        let before = health.disks.iter().find(|b| b.device == d.device);
                        if before.map(|b| (b.state, b.worn)) != Some((d.state, d.worn))
                            && (d.state == bosun_proto::health::SmartState::Failing || d.worn)
                        {
                            tracing::warn!(device = %d.device, state = d.state.as_str(), worn = d.worn, wear_used_percent = d.wear_used_percent, failing = ?d.failing_attributes, "disk health not good");
                        }
                    }
                    health.disks = disks;
                });
            }
            if !self.pause(cancel, self.settings.smart_interval).await {
                return;
            }
        }
    }

    /// The disks with their SMART data; `None` when the list could not be read. A disk
    /// whose SMART data cannot be read is judged by the list's health word alone.
    async fn read_disks(
        &self,
        failures: &mut Failures,
    ) -> Option<Vec<bosun_proto::hardware::DiskHealth>> {
        let list = failures.note("disks", self.pve.list_disks().await)?;
        let mut out = Vec::new();
        for disk in hardware::disks_to_read(list) {
            let smart = match self.pve.disk_smart(&disk.devpath).await {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::debug!(device = %disk.devpath, error = %error_chain(&e), "SMART data unreadable; judged by the disk list's health");
                    None
                }
            };
            out.push(hardware::judge_disk(
                &disk,
                smart.as_ref(),
                self.settings.wear_percent,
                self.clock.now(),
            ));
        }
        Some(out)
    }
}
