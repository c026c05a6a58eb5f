//! The dead-man's switch as a pure function: from the hosts' liveness and "now" to the
//! transitions and alerts of one sweep. The store applies the plan in one transaction; the
//! sweeper task runs it periodically.
//!
//! Rules:
//! - An active host that has polled before becomes `overdue` once it has been silent for
//!   longer than `grace_factor` × its poll interval.
//! - Its alert is held for `silence_window`: if, meanwhile, more than half of the monitored
//!   hosts (and at least `mass_min_hosts`) went overdue within one window, the hub suspects its
//!   own connectivity and raises one `hub_connectivity_suspected` alert instead of one per
//!   host. While the suspicion is open, per-host overdue alerts are suppressed. A hub that
//!   monitors fewer than `mass_min_hosts` hosts can never see a mass silence, so it does not
//!   hold the alert.
//! - The suspicion closes (one `hub_connectivity_restored` alert) when the overdue hosts are
//!   no longer a majority; hosts still overdue then get their own alert.
//! - A host whose overdue alert went out raises one `host_recovered` alert when it polls again
//!   (recorded with the poll, see [`crate::store::Store::record_polls`]).

use std::time::Duration;

use bosun_proto::admin::AlertKind;
use uuid::Uuid;

/// Dead-man's switch settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadManConfig {
    /// A host is overdue after `grace_factor` × its poll interval of silence.
    pub grace_factor: u32,
    /// How long a host's overdue alert is held to tell one silent host from a mass silence;
    /// also the window in which silences count as simultaneous.
    pub silence_window: Duration,
    /// A mass silence needs at least this many hosts.
    pub mass_min_hosts: usize,
    /// How often the sweeper runs; `None` disables it (tests call `sweep_once`).
    pub sweep_interval: Option<Duration>,
}

impl Default for DeadManConfig {
    fn default() -> Self {
        Self {
            grace_factor: 3,
            silence_window: Duration::from_secs(30),
            mass_min_hosts: 5,
            sweep_interval: Some(Duration::from_secs(5)),
        }
    }
}

/// Where a host's overdue alert stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertState {
    /// Not overdue.
    None,
    /// Overdue, alert held.
    Pending,
    /// Overdue, alert sent.
    Sent,
    /// Overdue during a mass silence, covered by the hub-connectivity alert.
    Suppressed,
}

impl AlertState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Pending => "pending",
            Self::Sent => "sent",
            Self::Suppressed => "suppressed",
        }
    }

    /// Parses the stored name.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "none" => Some(Self::None),
            "pending" => Some(Self::Pending),
            "sent" => Some(Self::Sent),
            "suppressed" => Some(Self::Suppressed),
            _ => None,
        }
    }
}

/// Liveness of one active host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LivenessRow {
    /// The host.
    pub host_id: Uuid,
    /// Its name.
    pub hostname: String,
    /// Its poll interval.
    pub poll_interval_s: u32,
    /// Last poll, Unix ms (`None`: never polled, not monitored yet).
    pub last_seen_ms: Option<i64>,
    /// Since when it is overdue, Unix ms.
    pub overdue_since_ms: Option<i64>,
    /// Its alert state.
    pub alert_state: AlertState,
}

/// A change to one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostChange {
    /// The host.
    pub host_id: Uuid,
    /// New overdue-since value.
    pub overdue_since_ms: Option<i64>,
    /// New alert state.
    pub alert_state: AlertState,
    /// It went overdue in this sweep (an `overdue` event is logged).
    pub newly_overdue: bool,
}

/// An alert to raise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedAlert {
    /// Kind.
    pub kind: AlertKind,
    /// Host, for host alerts.
    pub host_id: Option<Uuid>,
    /// Host name, for host alerts.
    pub hostname: Option<String>,
    /// Human text.
    pub message: String,
}

/// The outcome of one sweep.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SweepPlan {
    /// Host changes.
    pub changes: Vec<HostChange>,
    /// Alerts to raise, in order.
    pub alerts: Vec<PlannedAlert>,
    /// Whether a connectivity suspicion is open after this sweep.
    pub suspicion_open: bool,
}

/// Plans one sweep.
///
/// `rows` must hold every active host that is overdue or may have become overdue (it may hold
/// all of them); `monitored` counts all active hosts that have polled at least once, so the
/// store need not load the silent-free majority on every sweep.
pub fn plan_sweep(
    rows: &[LivenessRow],
    monitored: usize,
    suspicion_open: bool,
    now_ms: i64,
    config: &DeadManConfig,
) -> SweepPlan {
    let window_ms = i64::try_from(config.silence_window.as_millis()).unwrap_or(i64::MAX);
    let mut hosts: Vec<(&LivenessRow, Option<i64>, AlertState, bool)> = rows
        .iter()
        .filter(|row| row.last_seen_ms.is_some())
        .map(|row| {
            let grace_ms = i64::from(config.grace_factor) * i64::from(row.poll_interval_s) * 1000;
            let silent_ms = now_ms - row.last_seen_ms.unwrap_or(now_ms);
            if row.overdue_since_ms.is_none() && silent_ms > grace_ms {
                (row, Some(now_ms), AlertState::Pending, true)
            } else {
                (row, row.overdue_since_ms, row.alert_state, false)
            }
        })
        .collect();
    let monitored = monitored.max(hosts.len());
    let is_mass = |count: usize| count >= config.mass_min_hosts && count * 2 > monitored;
    let recent = hosts
        .iter()
        .filter(|(_, since, _, _)| since.is_some_and(|s| s >= now_ms.saturating_sub(window_ms)))
        .count();
    let overdue = hosts
        .iter()
        .filter(|(_, since, _, _)| since.is_some())
        .count();

    let mut plan = SweepPlan {
        suspicion_open,
        ..SweepPlan::default()
    };
    if !suspicion_open && is_mass(recent) {
        plan.suspicion_open = true;
        plan.alerts.push(PlannedAlert {
            kind: AlertKind::HubConnectivitySuspected,
            host_id: None,
            hostname: None,
            message: format!(
                "{recent} of {monitored} hosts went silent within {}s; suspecting the hub's own connectivity",
                config.silence_window.as_secs()
            ),
        });
    } else if suspicion_open && !is_mass(overdue) {
        plan.suspicion_open = false;
        plan.alerts.push(PlannedAlert {
            kind: AlertKind::HubConnectivityRestored,
            host_id: None,
            hostname: None,
            message: format!(
                "{overdue} of {monitored} hosts overdue; hub connectivity looks restored"
            ),
        });
        for (_, _, state, _) in &mut hosts {
            if *state == AlertState::Suppressed {
                *state = AlertState::Pending;
            }
        }
    }

    for (row, since, state, newly) in &mut hosts {
        if *state == AlertState::Pending {
            if plan.suspicion_open {
                *state = AlertState::Suppressed;
            } else if monitored < config.mass_min_hosts
                || since.is_some_and(|s| s.saturating_add(window_ms) <= now_ms)
            {
                *state = AlertState::Sent;
                let silent_s = (now_ms - row.last_seen_ms.unwrap_or(now_ms)) / 1000;
                plan.alerts.push(PlannedAlert {
                    kind: AlertKind::HostOverdue,
                    host_id: Some(row.host_id),
                    hostname: Some(row.hostname.clone()),
                    message: format!(
                        "host {} is overdue: silent for {silent_s}s (poll interval {}s)",
                        row.hostname, row.poll_interval_s
                    ),
                });
            }
        }
        if *since != row.overdue_since_ms || *state != row.alert_state {
            plan.changes.push(HostChange {
                host_id: row.host_id,
                overdue_since_ms: *since,
                alert_state: *state,
                newly_overdue: *newly,
            });
        }
    }
    plan
}

#[cfg(test)]
mod tests;
