//! The one health roll-up of a host ([`bosun_proto::rollup`]): computed here, from the host's
//! open alerts (with their acknowledgements and silences), its liveness, its guests' states and
//! the checks of its last report, and served on every host the admin API returns; the
//! dashboard and `/metrics` read the same value (decision 0064).
//!
//! A condition the hub holds an alert for (a lost guest, a storage target gone or refused, a
//! failed backup or restore test, a missing escrow, an overdue host, …) counts through that
//! alert only, so its acknowledgement and silences apply: acknowledged, it counts as a warning
//! at most; silenced, it does not raise the level. What the hub raises no alert for (a guest or
//! target in an unknown state, a restore test that booted but checked nothing, a planned stop,
//! a host never polled or waiting for approval, credentials to reseal) counts from the host's
//! record and report directly.

use std::collections::BTreeMap;

use bosun_proto::admin::{AlertKind, HostDetail, HostStatus, Liveness, OpenAlert};
use bosun_proto::report::{GuestStatus, RestoreTestOutcome, StateReport, TargetStatus};
use bosun_proto::rollup::{HealthLevel, HealthReason, HostRollup};

use crate::store::dashboard::DashboardQuery;
use crate::store::{HostStore, Store, StoreError, StoreResult};

/// Rolls up `host` from `open`, the open alerts (those of other hosts are skipped). A revoked
/// host is locked out on purpose and counts as `ok` whatever stayed open.
pub fn roll_up(host: &HostDetail, open: &[OpenAlert]) -> HostRollup {
    let summary = &host.summary;
    if summary.status == HostStatus::Revoked {
        return HostRollup::default();
    }
    let report = host.last_report.as_ref();
    let mut mine: Vec<&OpenAlert> = open
        .iter()
        .filter(|a| a.host_id == summary.host_id)
        .collect();
    // Oldest first, whichever order the caller's list has (the admin API lists newest first).
    mine.sort_by(|a, b| {
        (a.since, a.kind.as_str(), &a.subject).cmp(&(b.since, b.kind.as_str(), &b.subject))
    });
    let mut reasons: Vec<HealthReason> = mine.iter().map(|a| alert_reason(a, report)).collect();
    if summary.status == HostStatus::PendingApproval {
        reasons.push(plain(
            HealthLevel::Warning,
            "waiting for approval".to_owned(),
        ));
    }
    let overdue_open = mine.iter().any(|a| a.kind == AlertKind::HostOverdue);
    match summary.liveness {
        Liveness::Ok => {}
        Liveness::Overdue if overdue_open => {}
        Liveness::Overdue => reasons.push(plain(HealthLevel::Critical, "overdue (silent)".into())),
        Liveness::Never => reasons.push(plain(HealthLevel::Warning, "never polled".into())),
        Liveness::Stopped => reasons.push(plain(HealthLevel::Warning, "stopped (planned)".into())),
        Liveness::Unknown => reasons.push(plain(HealthLevel::Warning, "liveness unknown".into())),
    }
    if host.reseal_required_since.is_some() {
        reasons.push(plain(
            HealthLevel::Warning,
            "storage credentials to reseal".into(),
        ));
    }
    if let Some(report) = report {
        report_reasons(report, &mut reasons);
    }
    HostRollup::of(reasons)
}

/// Every host with its details, its `health` filled in, and the open alerts it was computed
/// from, read in one go (the hosts list, the dashboard and `/metrics` read this).
pub fn fleet(store: &dyn Store, now_ms: i64) -> StoreResult<(Vec<HostDetail>, Vec<OpenAlert>)> {
    let open = store
        .dashboard_facts(DashboardQuery {
            host_id: None,
            alert_limit: 0,
            now_ms,
        })?
        .open_alerts;
    let mut details = Vec::new();
    for host in store.list_hosts()? {
        match store.host_detail(host.host_id) {
            Ok(mut detail) => {
                detail.summary.health = Some(roll_up(&detail, &open));
                details.push(detail);
            }
            // Hosts are removed only once revoked; one gone between the two reads is left out.
            Err(StoreError::UnknownHost { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok((details, open))
}

/// One host's details with its `health` filled in, and its open alerts.
pub fn host(
    store: &dyn Store,
    host_id: uuid::Uuid,
    now_ms: i64,
) -> StoreResult<(HostDetail, Vec<OpenAlert>)> {
    let mut detail = HostStore::host_detail(store, host_id)?;
    let open = store
        .dashboard_facts(DashboardQuery {
            host_id: Some(host_id),
            alert_limit: 0,
            now_ms,
        })?
        .open_alerts;
    detail.summary.health = Some(roll_up(&detail, &open));
    Ok((detail, open))
}

fn plain(level: HealthLevel, text: String) -> HealthReason {
    HealthReason {
        level,
        text,
        alert: None,
        acknowledged: false,
        silenced: false,
    }
}

/// An open alert as a reason: its kind's level, a warning at most once acknowledged, no level
/// while silenced.
fn alert_reason(alert: &OpenAlert, report: Option<&StateReport>) -> HealthReason {
    let raised = HealthLevel::of_alert(alert.kind).unwrap_or(HealthLevel::Warning);
    let acknowledged = alert.acknowledged.is_some();
    let silenced = alert.silenced_by.is_some();
    let level = if silenced {
        HealthLevel::Ok
    } else if acknowledged {
        raised.min(HealthLevel::Warning)
    } else {
        raised
    };
    let text = if alert.kind == AlertKind::HostOverdue {
        "overdue (silent)".to_owned()
    } else {
        format!(
            "{} {}",
            alert.kind.as_str(),
            subject_text(report, &alert.subject)
        )
    };
    HealthReason {
        level,
        text,
        alert: Some(alert.kind),
        acknowledged,
        silenced,
    }
}

/// An alert's subject with each guest id it holds replaced by the guest's reported hostname.
fn subject_text(report: Option<&StateReport>, subject: &str) -> String {
    let mut text = subject.to_owned();
    for guest in report.iter().flat_map(|r| &r.guests) {
        if let Some(id) = guest.guest_id {
            text = text.replace(&id.to_string(), &guest.hostname);
        }
    }
    text
}

/// What the report shows that the hub raises no alert for.
fn report_reasons(report: &StateReport, reasons: &mut Vec<HealthReason>) {
    for guest in &report.guests {
        if guest.status == GuestStatus::Unknown {
            reasons.push(plain(
                HealthLevel::Warning,
                format!("guest {} in an unknown state", guest.hostname),
            ));
        }
    }
    for target in &report.storage {
        if target.status == TargetStatus::Unknown {
            reasons.push(plain(
                HealthLevel::Warning,
                format!("storage {} in an unknown state", target.durable_id),
            ));
        }
    }
    let mut newest = BTreeMap::new();
    for test in report.restore_tests.iter().chain(&report.last_restore_test) {
        let slot = newest.entry(test.guest_id).or_insert(test);
        if test.finished_at > slot.finished_at {
            *slot = test;
        }
    }
    for (guest, test) in newest {
        let name = report
            .guests
            .iter()
            .find(|g| g.guest_id == Some(guest))
            .map_or_else(|| guest.to_string(), |g| g.hostname.clone());
        // A failed or interrupted one is `restore_test_failed`, an open alert.
        let text = match test.outcome {
            Some(RestoreTestOutcome::NotChecked) => {
                format!("restore test of {name} booted, not checked")
            }
            Some(RestoreTestOutcome::Unknown) => {
                format!("restore test of {name} in an unknown state")
            }
            Some(
                RestoreTestOutcome::Passed
                | RestoreTestOutcome::Failed
                | RestoreTestOutcome::Interrupted,
            )
            | None => continue,
        };
        reasons.push(plain(HealthLevel::Warning, text));
    }
}

#[cfg(test)]
mod tests;
