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
//!   (recorded with the poll, see [`crate::store::Store::record_polls`](crate::store::PollStore::record_polls)).
//! - A planned stop is not an outage: a host whose last poll said it was stopping (SIGTERM) is
//!   `stopped`, not overdue, for `stopped_grace` (default [`DEFAULT_STOPPED_GRACE`], 30 minutes;
//!   never less than its grace window) after that poll. Past it, it goes overdue and is paged at
//!   once with its own message (stopped on purpose, not back): its silence is explained by the
//!   stop, so it is neither held for the silence window nor counted towards a mass silence
//!   (it is still covered while a connectivity suspicion is open). Its next poll clears the stop.

use std::time::Duration;

use bosun_proto::admin::AlertKind;
use uuid::Uuid;

/// How long a host that announced a planned stop may stay silent before it is paged, when the
/// config names no other bound (`[alerts] stopped_grace_secs`): long enough for a reboot or a
/// package upgrade, short enough that a box that never came back is noticed the same hour.
pub const DEFAULT_STOPPED_GRACE: Duration = Duration::from_secs(30 * 60);

/// Dead-man's switch settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadManConfig {
    /// A host is overdue after `grace_factor` × its poll interval of silence.
    pub grace_factor: u32,
    /// A host that said it was stopping is overdue after this much silence (at least its
    /// grace window).
    pub stopped_grace: Duration,
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
            stopped_grace: DEFAULT_STOPPED_GRACE,
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
    /// When its last poll said it was stopping on purpose, Unix ms (`None`: it did not).
    pub stopped_since_ms: Option<i64>,
    /// Its alert state.
    pub alert_state: AlertState,
}

/// A change to one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostChange {
    /// The host.
    pub host_id: Uuid,
    /// Its last poll as the plan saw it: the change applies only while that is still its
    /// last (a poll landing meanwhile wins).
    pub last_seen_ms: Option<i64>,
    /// New overdue-since value.
    pub overdue_since_ms: Option<i64>,
    /// New alert state.
    pub alert_state: AlertState,
    /// It went overdue in this sweep (an `overdue` event is logged).
    pub newly_overdue: bool,
    /// It went overdue after a planned stop (its stop bound passed).
    pub after_stop: bool,
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
    /// What it is about, as open alerts name it (the host id for a host's liveness; none for
    /// a hub-wide alert): a silence naming a subject matches on it.
    pub subject: Option<String>,
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
    let window_ms = millis(config.silence_window);
    let mut hosts: Vec<(&LivenessRow, Option<i64>, AlertState, bool)> = rows
        .iter()
        .filter(|row| row.last_seen_ms.is_some())
        .map(|row| {
            if row.overdue_since_ms.is_none() && past_bound(row, now_ms, config) {
                (row, Some(now_ms), AlertState::Pending, true)
            } else {
                (row, row.overdue_since_ms, row.alert_state, false)
            }
        })
        .collect();
    let monitored = monitored.max(hosts.len());
    let is_mass = |count: usize| count >= config.mass_min_hosts && count * 2 > monitored;
    // A host that stopped on purpose says nothing about the hub's own connectivity.
    let unexplained = |row: &LivenessRow| row.stopped_since_ms.is_none();
    let recent = hosts
        .iter()
        .filter(|(row, since, _, _)| {
            unexplained(row) && since.is_some_and(|s| s >= now_ms.saturating_sub(window_ms))
        })
        .count();
    let overdue = hosts
        .iter()
        .filter(|(row, since, _, _)| unexplained(row) && since.is_some())
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
            subject: None,
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
            subject: None,
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
            } else if !unexplained(row)
                || monitored < config.mass_min_hosts
                || since.is_some_and(|s| s.saturating_add(window_ms) <= now_ms)
            {
                *state = AlertState::Sent;
                plan.alerts.push(PlannedAlert {
                    kind: AlertKind::HostOverdue,
                    host_id: Some(row.host_id),
                    hostname: Some(row.hostname.clone()),
                    subject: Some(row.host_id.to_string()),
                    message: overdue_message(row, now_ms, config),
                });
            }
        }
        if *since != row.overdue_since_ms || *state != row.alert_state {
            plan.changes.push(HostChange {
                host_id: row.host_id,
                last_seen_ms: row.last_seen_ms,
                overdue_since_ms: *since,
                alert_state: *state,
                newly_overdue: *newly,
                after_stop: *newly && !unexplained(row),
            });
        }
    }
    plan
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// How long `row`'s host may stay silent: its grace window, or after a planned stop its stop
/// bound (never shorter than the grace window).
pub fn silence_bound_ms(row: &LivenessRow, config: &DeadManConfig) -> i64 {
    let grace_ms = i64::from(config.grace_factor)
        .saturating_mul(i64::from(row.poll_interval_s))
        .saturating_mul(1000);
    match row.stopped_since_ms {
        Some(_) => grace_ms.max(millis(config.stopped_grace)),
        None => grace_ms,
    }
}

/// Whether `row`'s host has been silent past its bound at `now_ms`.
fn past_bound(row: &LivenessRow, now_ms: i64, config: &DeadManConfig) -> bool {
    let Some(last_seen) = row.last_seen_ms else {
        return false;
    };
    // The stop was announced by the last poll: both count from it.
    let since = row.stopped_since_ms.unwrap_or(last_seen).max(last_seen);
    now_ms.saturating_sub(since) > silence_bound_ms(row, config)
}

/// The text of a host's overdue alert: a silent host, or one that stopped on purpose and did
/// not come back.
fn overdue_message(row: &LivenessRow, now_ms: i64, config: &DeadManConfig) -> String {
    let silent_s = (now_ms - row.last_seen_ms.unwrap_or(now_ms)) / 1000;
    match row.stopped_since_ms {
        Some(stopped) => format!(
            "host {} was stopped on purpose {}s ago and has not come back (stop bound {}s)",
            row.hostname,
            (now_ms - stopped) / 1000,
            silence_bound_ms(row, config) / 1000
        ),
        None => format!(
            "host {} is overdue: silent for {silent_s}s (poll interval {}s)",
            row.hostname, row.poll_interval_s
        ),
    }
}

#[cfg(test)]
mod tests;
