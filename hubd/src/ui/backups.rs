//! The host page's data-protection tables: the last backup of every guest on every tier with
//! its age (the hub remembers the last good one even after failures), the last restore test
//! per guest and tier, and the storage targets.

use bosun_proto::admin::HostDetail;
pub(crate) use bosun_proto::host_view::guest_name;
use bosun_proto::host_view::{self, RestoreVerdict};
use bosun_proto::report::{BackupReport, RestoreTestReport, StateReport, TargetStatus};
use jiff::Timestamp;
use maud::{Markup, html};

use super::layout;

/// One backup line: which tier it belongs to (its number and its target as the operator
/// named it, the target's whole identity apart for the cell's title), and the run.
struct BackupLine<'a> {
    tier: String,
    target: String,
    schedule: Option<&'a str>,
    run: &'a BackupReport,
}

/// The report's backups, each placed on its tier (by the tier number the agent tagged, else by
/// target), in tier order; backups of no known tier come last under their target. A tier
/// names its target by label ([`target_label`]), never by a whole PBS identity whose
/// fingerprint would take the table's width.
fn backup_lines<'a>(host: &HostDetail, report: &'a StateReport) -> Vec<BackupLine<'a>> {
    let mut lines: Vec<BackupLine<'_>> = report
        .last_backups
        .iter()
        .map(|run| {
            let tier = report.tiers.iter().find(|t| match run.tier {
                Some(n) => t.tier == n,
                None => run.target == t.target || run.target == t.storage_id,
            });
            BackupLine {
                tier: tier.map_or_else(
                    || format!("{} (no tier)", target_label(host, &run.target)),
                    |t| format!("{} · {}", t.tier, target_label(host, &t.target)),
                ),
                target: tier.map_or_else(|| run.target.clone(), |t| t.target.clone()),
                schedule: tier.map(|t| t.schedule.as_str()),
                run,
            }
        })
        .collect();
    lines.sort_by(|a, b| a.tier.cmp(&b.tier));
    lines
}

/// A storage target as the operator named it: the label desired state gives it, else its
/// identity without a PBS certificate fingerprint (`…#aa:bb:…`, 95 characters of it); the whole
/// identity goes in the cell's title.
pub(crate) fn target_label(host: &HostDetail, durable_id: &str) -> String {
    host.desired
        .iter()
        .flat_map(|d| &d.storage)
        .find(|t| t.durable_id == durable_id)
        .and_then(|t| t.label.clone())
        .unwrap_or_else(|| {
            durable_id
                .split_once('#')
                .map_or(durable_id, |(id, _)| id)
                .to_owned()
        })
}

/// Backups per tier and guest: last good with its age, and the newest run when it failed.
pub(crate) fn tiers(host: &HostDetail, now: Timestamp) -> Markup {
    let lines = host
        .last_report
        .as_ref()
        .map(|report| backup_lines(host, report))
        .unwrap_or_default();
    html! {
        @if lines.is_empty() {
            p class="empty" id="backups" { "No backups reported." }
        } @else {
            div class="scroll" {
                table class="stack" id="backups" {
                    thead { tr {
                        th { "Tier" } th { "Guest" } th { "Last good" } th { "Newest run" }
                        th { "Size" } th { "Schedule" }
                    } }
                    tbody {
                        @for line in &lines {
                            @let run = line.run;
                            @let good = run.ok.then_some(run.finished_at).max(run.last_ok_at);
                            tr {
                                td data-label="Tier" title=(line.target) { (line.tier) }
                                td data-label="Guest" class="name" { (guest_name(host, run.guest_id)) }
                                td data-label="Last good" {
                                    @if let Some(at) = good {
                                        (layout::moment(Some(at), now))
                                    } @else {
                                        (layout::badge("never", "danger"))
                                    }
                                }
                                td data-label="Newest run" class="detail" {
                                    @if run.ok {
                                        (layout::badge("ok", "ok"))
                                    } @else {
                                        (layout::badge("failed", "danger")) " "
                                        (layout::moment(Some(run.finished_at), now))
                                        @if let Some(error) = &run.error { ": " (error) }
                                    }
                                }
                                td data-label="Size" {
                                    @if let Some(bytes) = run.size_bytes { (size(bytes)) } @else { "-" }
                                }
                                td data-label="Schedule" { (line.schedule.unwrap_or("-")) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `1.5 GiB`, `300 MiB`, `12 KiB`.
pub(crate) fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes;
    let mut tenths = 0;
    let mut unit = 0;
    while value >= 1024 && unit + 1 < UNITS.len() {
        tenths = (value % 1024) * 10 / 1024;
        value /= 1024;
        unit += 1;
    }
    if unit == 0 || value >= 10 {
        format!("{value} {}", UNITS[unit])
    } else {
        format!("{value}.{tenths} {}", UNITS[unit])
    }
}

/// The last restore test per guest and tier.
pub(crate) fn restore_tests(host: &HostDetail, now: Timestamp) -> Markup {
    let mut tests: Vec<&RestoreTestReport> = host
        .last_report
        .as_ref()
        .map(|r| host_view::restore_tests(r).iter().collect())
        .unwrap_or_default();
    tests.sort_by_key(|t| std::cmp::Reverse(t.finished_at));
    html! {
        @if tests.is_empty() {
            p class="empty" id="restore-tests" { "No restore tests reported." }
        } @else {
            div class="scroll" {
                table class="stack" id="restore-tests" {
                    thead { tr {
                        th { "Guest" } th { "Tier" } th { "Outcome" } th { "Finished" }
                        th { "Took" } th { "Last passed" } th { "Detail" }
                    } }
                    tbody {
                        @for t in &tests {
                            @let verdict = RestoreVerdict::of(t);
                            @let last_passed = verdict.passed().then_some(t.finished_at).max(t.last_passed_at);
                            tr {
                                td data-label="Guest" class="name" { (guest_name(host, t.guest_id)) }
                                td data-label="Tier" { (t.tier.as_deref().unwrap_or("-")) }
                                td data-label="Outcome" {
                                    @let class = match verdict {
                                        RestoreVerdict::Passed => "ok",
                                        RestoreVerdict::NotChecked => "warn",
                                        RestoreVerdict::Failed | RestoreVerdict::Interrupted => "danger",
                                    };
                                    (layout::badge(verdict.word(), class))
                                }
                                td data-label="Finished" { (layout::moment(Some(t.finished_at), now)) }
                                td data-label="Took" { (layout::took(t.duration_seconds)) }
                                td data-label="Last passed" { (layout::moment(last_passed, now)) }
                                td data-label="Detail" class="detail" { (t.detail) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The signed data plan the host holds its storage to, and the storage targets it reports.
pub(crate) fn storage(host: &HostDetail) -> Markup {
    let targets = host
        .last_report
        .as_ref()
        .map_or(&[][..], |r| r.storage.as_slice());
    let plan = host.last_report.as_ref().and_then(|r| r.data_plan.as_ref());
    let plan_targets = host_view::plan_targets(host).join(", ");
    html! {
        @if let Some(plan) = plan {
            p id="data-plan" {
                "Data plan serial " (plan.serial) ", signed by " code { (plan.signer) }
                " (issued " (plan.issued_at) "): " (plan.targets.len()) " target(s), "
                "backups at least " (plan.min_interval_seconds) " s apart."
            }
            p { "Plan targets: " span id="plan-targets" { (plan_targets) } }
        } @else {
            p id="data-plan" class="empty" {
                "No signed data plan: the host uses no storage target."
            }
        }
        @if targets.is_empty() {
            p class="empty" id="storage" { "No storage targets reported." }
        } @else {
            div class="scroll" {
                table class="stack" id="storage" {
                    thead { tr {
                        th { "Target" } th { "Type" } th { "Role" } th { "Status" } th { "Free" }
                    } }
                    tbody {
                        @for t in targets {
                            @let class = match t.status {
                                TargetStatus::Mounted => "ok",
                                TargetStatus::Detached | TargetStatus::Decommissioned => "muted",
                                _ => "danger",
                            };
                            tr {
                                td data-label="Target" title=(t.durable_id) { (target_label(host, &t.durable_id)) }
                                td data-label="Type" { (layout::wire(t.kind.as_ref())) }
                                td data-label="Role" { (layout::wire(t.role.as_ref())) }
                                td data-label="Status" class="detail" {
                                    (layout::badge(&layout::wire(Some(&t.status)), class))
                                    @if let (false, Some(why)) = (t.status == TargetStatus::Mounted, t.why()) {
                                        " " (why)
                                    }
                                }
                                td data-label="Free" {
                                    @if let Some(free) = t.free_gib { (free) " GiB" } @else { "-" }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::size;

    #[test]
    fn sizes_read_naturally() {
        assert_eq!(size(512), "512 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(300 * 1024 * 1024), "300 MiB");
        assert_eq!(size(3 * 1024 * 1024 * 1024 / 2), "1.5 GiB");
    }
}
