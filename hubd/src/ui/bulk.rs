//! The host page's bulk volume table (decision 0090): each guest's bulk volumes, where each is
//! placed, the target the signed plan archives it to (or that nothing does), its newest
//! archive and its newest failure. Every word is the agent's: maud escapes it.

use bosun_proto::admin::HostDetail;
use bosun_proto::desired::BulkBackup;
use bosun_proto::report::BulkVolumeReport;
use jiff::Timestamp;
use maud::{Markup, html};

use super::backups::{guest_name, size, target_label};
use super::layout;

/// One row per bulk volume the host reports.
pub(crate) fn section(host: &HostDetail, now: Timestamp) -> Markup {
    let rows: Vec<&BulkVolumeReport> = host
        .last_report
        .as_ref()
        .map(|r| r.bulk_volumes.iter().collect())
        .unwrap_or_default();
    html! {
        @if rows.is_empty() {
            p class="empty" id="bulk-volumes" { "No bulk volumes reported." }
        } @else {
            div class="scroll" {
                table class="stack" id="bulk-volumes" {
                    thead { tr {
                        th { "Guest" } th { "Volume" } th { "Placed on" } th { "Backup" }
                        th { "Newest archive" } th { "Newest failure" }
                    } }
                    tbody {
                        @for v in &rows {
                            tr {
                                td data-label="Guest" { (guest_name(host, v.guest_id)) }
                                td data-label="Volume" { (v.name) " " span class="mono" { (v.path) } }
                                td data-label="Placed on" { (placed(host, v)) }
                                td data-label="Backup" { (backup(host, v)) }
                                td data-label="Newest archive" {
                                    @if let Some(a) = &v.last_archive {
                                        (layout::moment(Some(a.at), now)) ", " (size(a.size_bytes))
                                        br; span class="mono" { (a.name) }
                                    } @else { "-" }
                                }
                                td data-label="Newest failure" class="detail" {
                                    @if let Some(error) = &v.last_error {
                                        (layout::badge("failed", "danger")) " " (error)
                                    } @else { "-" }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The `bulk-data` target it is on, or why it has none.
fn placed(host: &HostDetail, v: &BulkVolumeReport) -> Markup {
    html! {
        @if let Some(target) = &v.target {
            span title=(target) { (target_label(host, target)) }
        } @else if let (Some(refusal), Some(class)) = (v.refused, v.class) {
            (layout::badge("not placed", "danger")) " " (refusal.describe(class))
        } @else {
            (layout::badge("not placed", "warn"))
        }
    }
}

/// The target the signed plan archives it to, or why nothing does.
fn backup(host: &HostDetail, v: &BulkVolumeReport) -> Markup {
    if let Some(why) = v.not_archived {
        return html! {
            (layout::badge("not archived", "danger")) " " (not_archived(why))
        };
    }
    html! {
        @match (&v.signed_target, &v.backup) {
            (Some(target), _) => span title=(target) { (target_label(host, target)) },
            (None, BulkBackup::Target { target }) => {
                (layout::badge("no signed target: not backed up", "danger"))
                " desired state asks for " (target_label(host, target))
                "; sign a plan whose " code { "bulk_backups" } " names it"
            },
            (None, BulkBackup::None { acknowledged_by }) => {
                "none (acknowledged by " (acknowledged_by) ")"
            },
        }
    }
}

/// Why no archive of a volume is taken, in words (decision 0124).
fn not_archived(why: bosun_proto::report::BulkNotArchived) -> &'static str {
    match why {
        bosun_proto::report::BulkNotArchived::VmDisk => {
            "a VM's disk (backup=0): Bosun archives only containers' bulk volumes, and the VM's own backups leave it out"
        }
        bosun_proto::report::BulkNotArchived::Unknown => "a reason this hub does not know",
    }
}
