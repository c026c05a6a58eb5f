//! The storage and backup-tier lines of `bosunctl status`: each storage target with its
//! status and free space, and each backup tier with the age of every guest's last good
//! backup, its newest failure, and whether the signed floor holds its retention.

use bosun_proto::admin::HostDetail;
use bosun_proto::desired::Retention;
use bosun_proto::report::{BackupReport, StateReport, TargetReport, TargetStatus, TierReport};
use jiff::Timestamp;
use serde::Serialize;

use crate::table;

/// Longest target name printed as is; a longer durable id (a PBS one names server, datastore,
/// namespace and user) is shortened in the middle wherever Proxmox's storage id is unknown.
const NAME_WIDTH: usize = 32;

/// The label the host's desired state gives target `durable_id`, if any.
fn label(host: &HostDetail, durable_id: &str) -> Option<String> {
    host.desired
        .iter()
        .flat_map(|d| &d.storage)
        .find(|t| t.durable_id == durable_id)
        .and_then(|t| t.label.clone())
}

/// How `status` names a target: the label the plan gives it (as the dashboard does), else the
/// Proxmox storage id the agent registered it as (short, and what `pvesm status` shows), else
/// its durable id, shortened past [`NAME_WIDTH`].
pub(crate) fn target_name(host: &HostDetail, report: &StateReport, durable_id: &str) -> String {
    if let Some(label) = label(host, durable_id) {
        return label;
    }
    if let Some(storage) = report
        .storage
        .iter()
        .find(|t| t.durable_id == durable_id)
        .and_then(|t| t.storage_id.as_deref())
    {
        return storage.to_owned();
    }
    let count = durable_id.chars().count();
    if count <= NAME_WIDTH {
        return durable_id.to_owned();
    }
    let head: String = durable_id.chars().take(NAME_WIDTH - 11).collect();
    let tail: String = durable_id.chars().skip(count - 10).collect();
    format!("{head}…{tail}")
}

/// One line per storage target: `storage <name>  <type>  <role>  <status>  free <n> GiB`, and its
/// whole durable id once when the name is not it.
pub fn storage_lines(host: &HostDetail) -> Vec<String> {
    let Some(report) = &host.last_report else {
        return Vec::new();
    };
    let plan = match &report.data_plan {
        Some(plan) => format!(
            "  data plan         serial {}  signed by {}  {} target(s)  least interval {} s  (issued {})",
            plan.serial,
            plan.signer,
            plan.targets.len(),
            plan.min_interval_seconds,
            plan.issued_at,
        ),
        None => "  data plan         none signed (no target is used)".to_owned(),
    };
    let targets = bosun_proto::host_view::plan_targets(host);
    let targets = format!(
        "  plan targets      {}",
        if targets.is_empty() {
            "-".to_owned()
        } else {
            targets.join(", ")
        }
    );
    [plan, targets]
        .into_iter()
        .chain(report.storage.iter().map(|t| {
            let mut line = format!(
                "  storage {}  {}  {}  {}  free {}",
                target_name(host, report, &t.durable_id),
                wire(t.kind.as_ref()),
                wire(t.role.as_ref()),
                target_status(t),
                t.free_gib
                    .map_or_else(|| "?".to_owned(), |f| format!("{f} GiB")),
            );
            if let (false, Some(why)) = (t.status == TargetStatus::Mounted, t.why()) {
                line.push_str(&format!("  ({why})"));
            }
            if target_name(host, report, &t.durable_id) != t.durable_id {
                line.push_str(&format!("  id {}", t.durable_id));
            }
            line
        }))
        .collect()
}

/// One line per backup tier, in restore order (tier 0 is tried first):
/// `tier <n> <role> on <target>: last good <age> (<guest>), …`, then the retention the floor
/// holds, if it holds any. A tier whose target the last report does not list says so.
pub fn tier_lines(host: &HostDetail, now: Timestamp) -> Vec<String> {
    let Some(report) = &host.last_report else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for tier in &report.tiers {
        let role = match report.storage.iter().find(|t| t.durable_id == tier.target) {
            Some(target) => wire(target.role.as_ref()),
            None => "(target not reported)".to_owned(),
        };
        let guests: Vec<String> = tier_backups(report, tier)
            .map(|b| guest_backup(host, b, now))
            .collect();
        let backups = if guests.is_empty() {
            "no backups yet".to_owned()
        } else {
            format!("last good {}", guests.join(", "))
        };
        let name = if tier.storage_id.is_empty() || label(host, &tier.target).is_some() {
            target_name(host, report, &tier.target)
        } else {
            tier.storage_id.clone()
        };
        out.push(format!("  tier {} {role} on {name}: {backups}", tier.tier));
        if let Some(held) = &tier.held {
            out.push(format!(
                "    retention held by the floor: {held} (applies {}, desired {})",
                retention(&tier.applied),
                retention(&tier.desired)
            ));
        }
    }
    out
}

/// The backups of `tier`: those the agent tagged with it, else those to its target.
fn tier_backups<'a>(
    report: &'a StateReport,
    tier: &'a TierReport,
) -> impl Iterator<Item = &'a BackupReport> {
    report.last_backups.iter().filter(move |b| match b.tier {
        Some(t) => t == tier.tier,
        None => b.target == tier.target || b.target == tier.storage_id,
    })
}

/// `3h ago (web1)`, `never (web2)`, with ` FAILED 20m ago` when the newest run failed.
fn guest_backup(host: &HostDetail, b: &BackupReport, now: Timestamp) -> String {
    let good = b.ok.then_some(b.finished_at).max(b.last_ok_at);
    let mut text = format!(
        "{} ({})",
        good.map_or_else(|| "never".to_owned(), |at| table::ago(at, now)),
        bosun_proto::host_view::guest_name(host, b.guest_id)
    );
    if !b.ok {
        text.push_str(&format!(" FAILED {}", table::ago(b.finished_at, now)));
    }
    text
}

fn target_status(target: &TargetReport) -> String {
    let name = wire(Some(&target.status));
    match target.status {
        TargetStatus::Disconnected
        | TargetStatus::Unreachable
        | TargetStatus::Error
        | TargetStatus::Refused => name.to_uppercase(),
        _ => name,
    }
}

/// `keep_last 3, keep_daily 7`, or `keep all`.
fn retention(r: &Retention) -> String {
    let counts: Vec<String> = [
        ("keep_last", r.keep_last),
        ("keep_daily", r.keep_daily),
        ("keep_weekly", r.keep_weekly),
        ("keep_monthly", r.keep_monthly),
    ]
    .iter()
    .filter(|(_, n)| *n > 0)
    .map(|(name, n)| format!("{name} {n}"))
    .collect();
    if counts.is_empty() {
        "keep all".to_owned()
    } else {
        counts.join(", ")
    }
}

/// The wire name of an enum value, or `-`.
fn wire<T: Serialize>(value: Option<&T>) -> String {
    match value.map(serde_json::to_value) {
        Some(Ok(serde_json::Value::String(name))) => name,
        _ => "-".to_owned(),
    }
}
