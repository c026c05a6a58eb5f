//! Alerts and events from the audit entries a host sends. The store keeps an entry once (by
//! its sequence number) and judges it only then, so each is raised once:
//!
//! | action | alert | event |
//! |---|---|---|
//! | `golden.refused` | `golden_refused` | — |
//! | `golden.verify_failed` | `golden_verify_failed`, with the reason (the previous verified build stays in use) | — |
//! | `guest.placement_refused` | `placement_refused`, with the guest, the volume, its storage (a hot volume's) and why: nothing of the guest is built until it has a place (the agent audits each refusal once) | — |
//! | `storage.refused` | — (stored only: the refused target is in the report, where `storage_refused` stays open while it is refused, [`super`]) | — |
//! | `archive.rejected` | `archive_rejected`, with the archive, the guest and the reason | — |
//! | `guest.restored` | `guest_restored`, with RPO and RTO in human form | `guest_restored`, with the numbers |
//! | `restore_test.skipped` | — | `restore_test_skipped`, with the reason |
//! | `controller.rolled_back` | `controller_rolled_back` | — |
//! | `controller.broken` | `controller_broken`; after a rollout's silence (`cause` `rollout_silent`) it says the guest was not rolled back and names the snapshot kept | — |
//! | `controller.committed` | — | `controller_committed`, with the digest |
//! | `controller.restarted` | — | `controller_restarted`, with the attempt |
//! | `controller.recovered` | — | `controller_recovered` |
//! | `break_glass.opened` | `break_glass_open`, with the key, deadline and reason | — |
//! | `break_glass.closed` | `break_glass_closed`, with how it closed | — |
//! | `agent_update.failed` | `agent_update_failed`, with the version and why | `agent_update_failed` |
//! | `agent_update.committed` | — | `agent_update_committed`, with the version |
//! | `operation.finished` of a rollback, signed restore, decommission, storage detach or storage wipe carried out (`done`) | `destructive_operation`, naming the guest and what was done | — |
//!
//! The agent's facts are under the entry's `detail.detail` (the outer object holds the
//! journal's own fields, whose `guest_id` and `vmid` stand in when the inner ones are
//! missing). Every string taken from them is cut to [`MAX_TEXT`] characters.

use bosun_proto::admin::AlertKind;
use bosun_proto::report::StateReport;
use serde_json::Value;
use uuid::Uuid;

use super::{bounded, guest_name};

/// The agent's audit action for a refused golden archive.
pub const GOLDEN_REFUSED_ACTION: &str = "golden.refused";
/// The agent's audit action for a golden build that failed its verification.
pub const GOLDEN_VERIFY_FAILED_ACTION: &str = "golden.verify_failed";
/// The agent's audit action for a guest it does not build: a volume has no place of its class.
pub const PLACEMENT_REFUSED_ACTION: &str = "guest.placement_refused";
/// The agent's audit action for a storage target or tier it refused (not in the signed data
/// plan, another identity, credentials sealed for another target).
pub const STORAGE_REFUSED_ACTION: &str = "storage.refused";
/// The agent's audit action for an archive it refused to restore (it failed its proof).
pub const ARCHIVE_REJECTED_ACTION: &str = "archive.rejected";
/// The agent's audit action for a lost guest restored by disaster recovery.
pub const GUEST_RESTORED_ACTION: &str = "guest.restored";
/// The agent's audit action for a restore test it did not run.
pub const RESTORE_TEST_SKIPPED_ACTION: &str = "restore_test.skipped";

/// The agent's audit action for a controller rollout rolled back to its snapshot.
pub const CONTROLLER_ROLLED_BACK_ACTION: &str = "controller.rolled_back";
/// The agent's audit action for a controller given up on after its in-place restarts.
pub const CONTROLLER_BROKEN_ACTION: &str = "controller.broken";
/// The `cause` of a `controller.broken` entry whose controller stayed silent through a
/// rollout's window: reverted and restarted in place, the guest not rolled back.
pub const CONTROLLER_ROLLOUT_SILENT_CAUSE: &str = "rollout_silent";
/// The agent's audit action for a committed controller rollout.
pub const CONTROLLER_COMMITTED_ACTION: &str = "controller.committed";
/// The agent's audit action for one in-place controller restart.
pub const CONTROLLER_RESTARTED_ACTION: &str = "controller.restarted";
/// The agent's audit action for a broken controller reporting healthy again.
pub const CONTROLLER_RECOVERED_ACTION: &str = "controller.recovered";
/// The agent's audit action for an opened break-glass door.
pub const BREAK_GLASS_OPENED_ACTION: &str = "break_glass.opened";
/// The agent's audit action for a closed break-glass door.
pub const BREAK_GLASS_CLOSED_ACTION: &str = "break_glass.closed";
/// The agent's audit action for a self-update its health gate rolled back (or that could not
/// be staged).
pub const AGENT_UPDATE_FAILED_ACTION: &str = "agent_update.failed";
/// The agent's audit action for a self-update its health gate committed.
pub const AGENT_UPDATE_COMMITTED_ACTION: &str = "agent_update.committed";

/// The agent's audit action for an operation done to a guest that ended (the row its
/// customer's controller also reads).
pub const OPERATION_FINISHED_ACTION: &str = "operation.finished";

/// The operation kinds whose end replaced or removed a guest's data, as the operator hears
/// of them (a DR restore raises `guest_restored` instead).
const DESTRUCTIVE_KINDS: [(&str, &str); 5] = [
    (
        "localapi.rollback",
        "rolled back to a snapshot by its controller",
    ),
    ("restore_job", "restored from a backup by a signed job"),
    ("decommission_job", "decommissioned by a signed job"),
    (
        "storage_detach_job",
        "cut off from a storage target a signed job detached",
    ),
    (
        "storage_wipe_job",
        "stripped of its archives on a storage target a signed job wiped",
    ),
];

/// Most characters of one string from an audit entry the hub repeats.
pub const MAX_TEXT: usize = 255;

/// What one audit entry raises.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditFinding {
    /// The alert, with its message.
    pub alert: Option<(AlertKind, String)>,
    /// The event recorded for it, with its detail.
    pub event: Option<(&'static str, Value)>,
}

/// What the audit entry `action` with `detail` raises on host `hostname`, whose merged report
/// (this poll's included) is `report`; `None` for an action the hub only stores.
pub fn judge(
    hostname: &str,
    report: Option<&StateReport>,
    action: &str,
    detail: &Value,
) -> Option<AuditFinding> {
    let facts = Facts::of(detail);
    match action {
        GOLDEN_REFUSED_ACTION => Some(golden_refused(hostname, &facts)),
        PLACEMENT_REFUSED_ACTION => Some(placement_refused(hostname, &facts)),
        GOLDEN_VERIFY_FAILED_ACTION => Some(golden_verify_failed(hostname, &facts)),
        ARCHIVE_REJECTED_ACTION => Some(archive_rejected(hostname, &facts)),
        GUEST_RESTORED_ACTION => Some(guest_restored(hostname, report, &facts)),
        OPERATION_FINISHED_ACTION => destructive(hostname, report, &facts),
        BREAK_GLASS_OPENED_ACTION => Some(break_glass_opened(hostname, &facts)),
        BREAK_GLASS_CLOSED_ACTION => Some(break_glass_closed(hostname, &facts)),
        RESTORE_TEST_SKIPPED_ACTION => Some(restore_test_skipped(&facts)),
        CONTROLLER_ROLLED_BACK_ACTION
        | CONTROLLER_BROKEN_ACTION
        | CONTROLLER_COMMITTED_ACTION
        | CONTROLLER_RESTARTED_ACTION
        | CONTROLLER_RECOVERED_ACTION => Some(controller(hostname, report, action, &facts)),
        AGENT_UPDATE_FAILED_ACTION => Some(agent_update_failed(hostname, &facts)),
        AGENT_UPDATE_COMMITTED_ACTION => Some(agent_update_committed(&facts)),
        _ => None,
    }
}

/// A golden archive the host refused: an alert.
fn golden_refused(hostname: &str, facts: &Facts<'_>) -> AuditFinding {
    AuditFinding {
        alert: Some((
            AlertKind::GoldenRefused,
            format!(
                "host {hostname} refused golden archive {} ({}): no guest is provisioned from it until an operator signs it",
                facts.text("volid").unwrap_or_else(|| "?".to_owned()),
                facts.text("reason").unwrap_or_else(|| "?".to_owned()),
            ),
        )),
        event: None,
    }
}

/// A guest's volume with no place of its class: an alert.
fn placement_refused(hostname: &str, facts: &Facts<'_>) -> AuditFinding {
    let volume = facts.text("volume").unwrap_or_else(|| "?".to_owned());
    let kind = if facts.field("hot").and_then(Value::as_bool) == Some(true) {
        match facts.text("storage") {
            Some(storage) => format!("hot volume {volume} (storage {storage})"),
            None => format!("hot volume {volume}"),
        }
    } else {
        format!("bulk volume {volume}")
    };
    AuditFinding {
        alert: Some((
            AlertKind::PlacementRefused,
            format!(
                "host {hostname} refused to build guest {}: {kind}: {}",
                facts.text("guest_id").unwrap_or_else(|| "?".to_owned()),
                facts.text("why").unwrap_or_else(|| "?".to_owned()),
            ),
        )),
        event: None,
    }
}

/// A new golden build that did not pass its verification: an alert.
fn golden_verify_failed(hostname: &str, facts: &Facts<'_>) -> AuditFinding {
    AuditFinding {
        alert: Some((
            AlertKind::GoldenVerifyFailed,
            format!(
                "host {hostname}: a new golden build failed its verification ({}): guests keep being provisioned from the previous verified build",
                facts.text("reason").unwrap_or_else(|| "?".to_owned()),
            ),
        )),
        event: None,
    }
}

/// An archive the host refused to restore: an alert.
fn archive_rejected(hostname: &str, facts: &Facts<'_>) -> AuditFinding {
    AuditFinding {
        alert: Some((
            AlertKind::ArchiveRejected,
            format!(
                "host {hostname} refused to restore archive {} of guest {}: {}",
                facts.text("archive").unwrap_or_else(|| "?".to_owned()),
                facts.text("guest_id").unwrap_or_else(|| "?".to_owned()),
                facts.text("reason").unwrap_or_else(|| "?".to_owned()),
            ),
        )),
        event: None,
    }
}

/// A break-glass door opened: an alert while it stays open.
fn break_glass_opened(hostname: &str, facts: &Facts<'_>) -> AuditFinding {
    AuditFinding {
        alert: Some((
            AlertKind::BreakGlassOpen,
            format!(
                "host {hostname}: break-glass SSH door open for account {} with key {} until {} (job {}, signed by {}): {}",
                facts.text("account").unwrap_or_else(|| "?".to_owned()),
                facts.text("fingerprint").unwrap_or_else(|| "?".to_owned()),
                facts.text("expires_at").unwrap_or_else(|| "?".to_owned()),
                facts.text("job_id").unwrap_or_else(|| "?".to_owned()),
                facts.text("signer").unwrap_or_else(|| "?".to_owned()),
                facts.text("reason").unwrap_or_else(|| "?".to_owned()),
            ),
        )),
        event: None,
    }
}

/// A break-glass door closed: an alert that says by what.
fn break_glass_closed(hostname: &str, facts: &Facts<'_>) -> AuditFinding {
    AuditFinding {
        alert: Some((
            AlertKind::BreakGlassClosed,
            format!(
                "host {hostname}: break-glass SSH door of job {} (key {}) closed by {}",
                facts.text("job_id").unwrap_or_else(|| "?".to_owned()),
                facts.text("fingerprint").unwrap_or_else(|| "?".to_owned()),
                match facts.text("closed_by").as_deref() {
                    Some("expiry") => "its expiry",
                    Some("disable") => "a signed break-glass-disable",
                    Some("replaced") => "a newer door",
                    _ => "?",
                },
            ),
        )),
        event: None,
    }
}

/// A restore test the host skipped: an event.
fn restore_test_skipped(facts: &Facts<'_>) -> AuditFinding {
    AuditFinding {
        alert: None,
        event: Some((
            "restore_test_skipped",
            serde_json::json!({
                "guest_id": facts.guest_id(),
                "tier": facts.text("tier"),
                "reason": facts.text("reason"),
            }),
        )),
    }
}

/// An agent update that failed and was rolled back: an alert and an event.
fn agent_update_failed(hostname: &str, facts: &Facts<'_>) -> AuditFinding {
    let version = facts.text("version").unwrap_or_else(|| "?".to_owned());
    let failure = facts.text("failure").unwrap_or_else(|| "?".to_owned());
    let detail = facts.text("detail").unwrap_or_default();
    let message = format!(
        "host {hostname}: agent update to {version} failed ({failure}): {detail}; the host runs {} again",
        facts
            .text("running_version")
            .unwrap_or_else(|| "its previous version".to_owned())
    );
    AuditFinding {
        event: Some((
            "agent_update_failed",
            serde_json::json!({
                "update_id": facts.text("update_id"),
                "version": version,
                "failure": failure,
                "detail": detail,
            }),
        )),
        alert: Some((AlertKind::AgentUpdateFailed, message)),
    }
}

/// An agent update the host committed: an event.
fn agent_update_committed(facts: &Facts<'_>) -> AuditFinding {
    AuditFinding {
        alert: None,
        event: Some((
            "agent_update_committed",
            serde_json::json!({
                "update_id": facts.text("update_id"),
                "version": facts.text("version"),
                "seconds_to_commit": facts.number("seconds_to_commit"),
            }),
        )),
    }
}

/// What a controller's audit entry raises: an alert when a rollout rolled back or a controller
/// broke, an event for every other step of its life.
fn controller(
    hostname: &str,
    report: Option<&StateReport>,
    action: &str,
    facts: &Facts<'_>,
) -> AuditFinding {
    let guest = match (facts.guest_id(), report) {
        (Some(id), Some(report)) => guest_name(report, id),
        (Some(id), None) => id.to_string(),
        (None, _) => "?".to_owned(),
    };
    let vmid = facts
        .number("vmid")
        .map_or_else(|| "?".to_owned(), |v| v.to_string());
    let digest = facts.text("digest").unwrap_or_else(|| "?".to_owned());
    let facts_json = serde_json::json!({
        "guest_id": facts.guest_id(),
        "vmid": facts.number("vmid"),
        "digest": facts.text("digest"),
        "snapshot": facts.text("snapshot"),
        "reason": facts.text("reason"),
        "attempt": facts.number("attempt"),
    });
    match action {
        CONTROLLER_ROLLED_BACK_ACTION => {
            let rolled_back = facts.field("rolled_back").and_then(Value::as_bool) != Some(false);
            let message = if rolled_back {
                format!(
                    "controller {digest} on guest {guest} (vmid {vmid}) on host {hostname} did not report healthy ({}): the guest was rolled back to snapshot {}",
                    facts.text("reason").unwrap_or_else(|| "?".to_owned()),
                    facts.text("snapshot").unwrap_or_else(|| "?".to_owned()),
                )
            } else {
                format!(
                    "controller {digest} on guest {guest} (vmid {vmid}) on host {hostname} did not report healthy ({}) and rolling the guest back failed: {}",
                    facts.text("reason").unwrap_or_else(|| "?".to_owned()),
                    facts.text("error").unwrap_or_else(|| "?".to_owned()),
                )
            };
            AuditFinding {
                alert: Some((AlertKind::ControllerRolledBack, message)),
                event: None,
            }
        }
        CONTROLLER_BROKEN_ACTION => {
            let message = if facts.text("cause").as_deref() == Some(CONTROLLER_ROLLOUT_SILENT_CAUSE)
            {
                format!(
                    "controller {digest} on guest {guest} (vmid {vmid}) on host {hostname} stayed silent through its rollout ({}): {} is served again and the controller was restarted in place ({}); the guest was not rolled back, snapshot {} is kept: decide with a signed job",
                    facts.text("reason").unwrap_or_else(|| "?".to_owned()),
                    facts
                        .text("previous_digest")
                        .unwrap_or_else(|| "the previous digest".to_owned()),
                    match facts.field("restarted").and_then(Value::as_bool) {
                        Some(true) => "ok".to_owned(),
                        Some(false) => format!(
                            "failed: {}",
                            facts.text("error").unwrap_or_else(|| "?".to_owned())
                        ),
                        None => "asked before".to_owned(),
                    },
                    facts.text("snapshot").unwrap_or_else(|| "?".to_owned()),
                )
            } else {
                format!(
                    "controller {digest} on guest {guest} (vmid {vmid}) on host {hostname} stayed silent through {} in-place restarts: broken, not restarted again until it reports healthy or a new rollout is signed",
                    facts.number("restarts").unwrap_or(0)
                )
            };
            AuditFinding {
                alert: Some((AlertKind::ControllerBroken, message)),
                event: None,
            }
        }
        CONTROLLER_COMMITTED_ACTION => AuditFinding {
            alert: None,
            event: Some(("controller_committed", facts_json)),
        },
        CONTROLLER_RESTARTED_ACTION => AuditFinding {
            alert: None,
            event: Some(("controller_restarted", facts_json)),
        },
        _ => AuditFinding {
            alert: None,
            event: Some(("controller_recovered", facts_json)),
        },
    }
}

/// A `destructive_operation` alert for an operation of a destructive kind that was carried
/// out; `None` for any other (a refused or failed one is the job's own failed result).
fn destructive(
    hostname: &str,
    report: Option<&StateReport>,
    facts: &Facts<'_>,
) -> Option<AuditFinding> {
    let kind = facts.text("kind")?;
    let (_, what) = DESTRUCTIVE_KINDS.iter().find(|(k, _)| *k == kind)?;
    if facts.text("status")? != "done" {
        return None;
    }
    let guest = match (facts.guest_id(), report) {
        (Some(id), Some(report)) => guest_name(report, id),
        (Some(id), None) => id.to_string(),
        (None, _) => "?".to_owned(),
    };
    let vmid = facts
        .number("vmid")
        .map_or_else(|| "?".to_owned(), |v| v.to_string());
    Some(AuditFinding {
        alert: Some((
            AlertKind::DestructiveOperation,
            format!("guest {guest} (vmid {vmid}) on host {hostname} was {what}"),
        )),
        event: None,
    })
}

fn guest_restored(hostname: &str, report: Option<&StateReport>, facts: &Facts<'_>) -> AuditFinding {
    let guest_id = facts.guest_id();
    let guest = match (guest_id, report) {
        (Some(id), Some(report)) => guest_name(report, id),
        (Some(id), None) => id.to_string(),
        (None, _) => "?".to_owned(),
    };
    let vmid = facts.number("vmid");
    let lost_vmid = facts.number("lost_vmid");
    let archive = facts.text("archive");
    let tier = facts.text("tier");
    let rpo = facts.number("rpo_seconds");
    let rto = facts.number("rto_seconds");
    let trigger = facts.text("trigger");
    let how = match trigger.as_deref() {
        Some("auto") => "by automatic disaster recovery".to_owned(),
        Some("job") => "by a signed restore job".to_owned(),
        Some(other) => format!("(trigger {other})"),
        None => "(trigger not given)".to_owned(),
    };
    let was = match lost_vmid {
        Some(lost) if Some(lost) != vmid => format!(", was {lost}"),
        _ => String::new(),
    };
    let message = format!(
        "guest {guest} (vmid {}{was}) on host {hostname} was restored {how} from archive {} on tier {}: RPO {}, RTO {}",
        vmid.map_or_else(|| "?".to_owned(), |v| v.to_string()),
        archive.as_deref().unwrap_or("?"),
        tier.as_deref().unwrap_or("?"),
        rpo.map_or_else(|| "unknown".to_owned(), span),
        rto.map_or_else(|| "unknown".to_owned(), span),
    );
    AuditFinding {
        event: Some((
            "guest_restored",
            serde_json::json!({
                "guest_id": guest_id,
                "vmid": vmid,
                "lost_vmid": lost_vmid,
                "archive": archive,
                "tier": tier,
                "rpo_seconds": rpo,
                "rto_seconds": rto,
                "trigger": trigger,
                "message": message,
            }),
        )),
        alert: Some((AlertKind::GuestRestored, message)),
    }
}

/// The facts of an audit entry: the agent's event detail, then the journal's fields.
struct Facts<'a> {
    inner: Option<&'a Value>,
    outer: &'a Value,
}

impl<'a> Facts<'a> {
    fn of(detail: &'a Value) -> Self {
        Self {
            inner: detail.get("detail").filter(|d| d.is_object()),
            outer: detail,
        }
    }

    fn field(&self, name: &str) -> Option<&'a Value> {
        self.inner
            .and_then(|d| d.get(name))
            .filter(|v| !v.is_null())
            .or_else(|| self.outer.get(name).filter(|v| !v.is_null()))
    }

    /// A string field, cut to [`MAX_TEXT`] characters.
    fn text(&self, name: &str) -> Option<String> {
        self.field(name)
            .and_then(Value::as_str)
            .map(|s| bounded(s, MAX_TEXT))
    }

    fn number(&self, name: &str) -> Option<u64> {
        self.field(name).and_then(Value::as_u64)
    }

    fn guest_id(&self) -> Option<Uuid> {
        self.field("guest_id")
            .and_then(Value::as_str)
            .and_then(|s| Uuid::parse_str(s).ok())
    }
}

/// A span of seconds in its two largest units: `2 h 3 min`, `48 s`, `1 d 4 h`.
pub fn span(secs: u64) -> String {
    const UNITS: [(u64, &str); 4] = [(86_400, "d"), (3_600, "h"), (60, "min"), (1, "s")];
    let Some(first) = UNITS.iter().position(|(size, _)| secs >= *size) else {
        return "0 s".to_owned();
    };
    let (size, name) = UNITS[first];
    let mut text = format!("{} {name}", secs / size);
    if let Some((next, next_name)) = UNITS.get(first + 1) {
        let rest = secs % size / next;
        if rest > 0 {
            text.push_str(&format!(" {rest} {next_name}"));
        }
    }
    text
}

#[cfg(test)]
#[path = "audit_tests.rs"]
mod tests;
