//! A host's health as the hub rolls it up ([`bosun_proto::rollup`]): `bosunctl status` prints it
//! per host, `hosts list` in its HEALTH column, and `status --check` answers with the worst of
//! them in the monitoring-plugin convention (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN). The hub
//! computes it (from the host's open alerts with their acknowledgements and silences, its
//! liveness and its report), so every view says the same; bosunctl only prints it.

use bosun_proto::admin::{HostDetail, HostStatus};
use bosun_proto::rollup::{HealthLevel, HostRollup};

/// The monitoring-plugin exit status when the answer is unknown: the hub could not be read,
/// the command line or the config is wrong, or the hub serves no roll-up.
pub const PLUGIN_UNKNOWN: u8 = 3;

/// The `health` line of `status`: `ok`, `critical: overdue (silent); guest_lost web`.
pub fn summary(host: &HostDetail) -> String {
    match &host.summary.health {
        Some(rollup) => rollup.summary(),
        None => {
            "unknown: the hub serves no health roll-up (a hub older than this bosunctl)".to_owned()
        }
    }
}

/// The roll-up `status --check` counts for `host`: none for a revoked host (locked out on
/// purpose); `Err(())` when the hub served none.
fn counted(host: &HostDetail) -> Result<Option<&HostRollup>, ()> {
    if host.summary.status == HostStatus::Revoked {
        return Ok(None);
    }
    host.summary.health.as_ref().map(Some).ok_or(())
}

/// The `--check` answer: the exit status and one line naming what is wrong, e.g.
/// `BOSUN CRITICAL - pve-a: overdue (silent) | hosts=2 critical=1 warning=0`. What a host put
/// into it is escaped where it is printed (`outln!`), as in every view.
pub fn check_line(hosts: &[HostDetail]) -> (u8, String) {
    let mut worst = HealthLevel::Ok;
    let (mut critical, mut warning) = (0, 0);
    let mut problems = Vec::new();
    for host in hosts {
        let rollup = match counted(host) {
            Ok(Some(rollup)) => rollup,
            Ok(None) => continue,
            Err(()) => {
                return (
                    PLUGIN_UNKNOWN,
                    format!(
                        "BOSUN UNKNOWN - the hub serves no health roll-up for {} (upgrade the hub)",
                        host.summary
                            .hostname
                            .replace(bosun_proto::inert::is_control, " ")
                    ),
                );
            }
        };
        worst = worst.max(rollup.level);
        match rollup.level {
            HealthLevel::Critical => critical += 1,
            HealthLevel::Warning => warning += 1,
            HealthLevel::Ok => continue,
        }
        // A reason names its subject whole (a PBS target with its certificate's fingerprint):
        // its start says which.
        let counting: Vec<String> = rollup
            .reasons
            .iter()
            .filter(|r| r.level != HealthLevel::Ok)
            .map(|r| crate::width::elide(&r.text, REASON_COLUMNS))
            .collect();
        problems.push(format!(
            "{}: {}",
            host.summary.hostname,
            counting.join(", ")
        ));
    }
    let text = if problems.is_empty() {
        format!("{} hosts ok", hosts.len())
    } else {
        problems.join("; ")
    };
    // The performance data is kept whole; the text is cut so the line stays within what a
    // plugin's parser keeps.
    let head = format!("BOSUN {} - ", worst.plugin_word());
    let perf = format!(
        " | hosts={} critical={critical} warning={warning}",
        hosts.len()
    );
    let room = crate::width::MONITORING_LINE
        .saturating_sub(crate::width::len(&head) + crate::width::len(&perf));
    let line = format!("{head}{}{perf}", crate::width::elide(&text, room));
    (worst.plugin_exit(), line)
}

/// The most columns one reason takes on the `--check` line.
const REASON_COLUMNS: usize = 60;
