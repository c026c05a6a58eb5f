//! The bulk volume lines of `bosunctl status` and `bosunctl hosts show` (decision 0090): each
//! bulk volume of a guest with where it is placed, the target the signed plan archives it to
//! (or that nothing does), its newest archive and its newest failure, from the report's
//! `bulk_volumes`.

use bosun_proto::admin::HostDetail;
use bosun_proto::desired::BulkBackup;
use bosun_proto::report::{BulkNotArchived, BulkVolumeReport, StateReport};
use jiff::Timestamp;
use uuid::Uuid;

use super::backups::target_name;
use crate::table;
use bosun_proto::host_view::guest_name;

/// Most characters of the agent's words (an error, who acknowledged) a line repeats.
const MAX_WORDS: usize = 200;

/// One line per bulk volume of `guest_id`: `bulk media /srv/media  on nas1  backup to usb1,
/// newest archive 2h ago (1.0 GiB)`, with `; newest attempt FAILED: <error>` after a failure.
pub fn guest_lines(host: &HostDetail, guest_id: Uuid, now: Timestamp) -> Vec<String> {
    let Some(report) = &host.last_report else {
        return Vec::new();
    };
    report
        .bulk_volumes
        .iter()
        .filter(|v| v.guest_id == guest_id)
        .map(|v| format!("    {}", describe(host, report, v, now)))
        .collect()
}

/// The `bulk` fields of `hosts show`: one per volume, `guest web1 bulk media …`.
pub fn fields(host: &HostDetail, now: Timestamp) -> Vec<(&'static str, String)> {
    let Some(report) = &host.last_report else {
        return Vec::new();
    };
    report
        .bulk_volumes
        .iter()
        .map(|v| {
            (
                "bulk volume",
                format!(
                    "guest {} {}",
                    plain(&guest_name(host, v.guest_id)),
                    describe(host, report, v, now)
                ),
            )
        })
        .collect()
}

/// The volume's whole line (without indentation).
fn describe(
    host: &HostDetail,
    report: &StateReport,
    v: &BulkVolumeReport,
    now: Timestamp,
) -> String {
    let placed = match (&v.target, v.refused) {
        (Some(target), _) => format!("on {}", plain(&target_name(host, report, target))),
        (None, Some(refusal)) => match v.class {
            Some(class) => format!("NOT PLACED: {}", refusal.describe(class)),
            None => "NOT PLACED".to_owned(),
        },
        (None, None) => "not placed".to_owned(),
    };
    let mut text = format!(
        "bulk {} {}  {placed}  {}",
        plain(&v.name),
        plain(&v.path),
        backup(host, report, v)
    );
    if v.not_archived.is_none() && (v.signed_target.is_some() || v.last_archive.is_some()) {
        match &v.last_archive {
            Some(a) => text.push_str(&format!(
                ", newest archive {} ({})",
                table::ago(a.at, now),
                size(a.size_bytes)
            )),
            None => text.push_str(", no archive yet"),
        }
    }
    if let Some(error) = &v.last_error {
        text.push_str(&format!("; newest attempt FAILED: {}", plain(error)));
    }
    text
}

/// Where the volume's archives go: the plan's signed target, or why there is none.
fn backup(host: &HostDetail, report: &StateReport, v: &BulkVolumeReport) -> String {
    if let Some(why) = v.not_archived {
        return format!("NOT ARCHIVED: {}", not_archived(why));
    }
    match (&v.signed_target, &v.backup) {
        (Some(target), _) => format!("backup to {}", plain(&target_name(host, report, target))),
        (None, BulkBackup::Target { target }) => format!(
            "NO SIGNED TARGET: not backed up (desired state asks for {}; sign a plan whose bulk_backups names it)",
            plain(&target_name(host, report, target))
        ),
        (None, BulkBackup::None { acknowledged_by }) => {
            format!("backup none (acknowledged by {})", plain(acknowledged_by))
        }
    }
}

/// Why no archive of a volume is taken, in words (decision 0124).
pub(crate) fn not_archived(why: BulkNotArchived) -> &'static str {
    match why {
        BulkNotArchived::VmDisk => {
            "a VM's disk (backup=0): Bosun archives only containers' bulk volumes, and the VM's own backups leave it out"
        }
        BulkNotArchived::Unknown => "a reason this bosunctl does not know",
    }
}

/// The agent's text with every control character blanked, at most [`MAX_WORDS`] characters.
fn plain(text: &str) -> String {
    text.chars()
        .map(|c| {
            if bosun_proto::inert::is_control(c) {
                ' '
            } else {
                c
            }
        })
        .take(MAX_WORDS)
        .collect()
}

/// `1.5 GiB`, `20.0 MiB`, `512 B`.
fn size(bytes: u64) -> String {
    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;
    #[allow(clippy::cast_precision_loss)]
    match bytes {
        b if b >= GIB => format!("{:.1} GiB", b as f64 / GIB as f64),
        b if b >= MIB => format!("{:.1} MiB", b as f64 / MIB as f64),
        b => format!("{b} B"),
    }
}

#[cfg(test)]
#[path = "bulk_tests.rs"]
mod tests;
