//! Guests in trouble: `guest_lost`, `guest_broken`, `guest_orphaned` and `guest_migrated`, one
//! alert per guest while the report shows it `lost`, `broken`, `orphaned` or `migrated`. The subject is the guest's id, or
//! `vmid:<vmid>` for a guest Bosun does not manage (only an orphan may be one).
//!
//! Each resolves as recovered (`guest_recovered`) when the report shows the guest running or
//! stopped again, and as `<kind>_cleared` otherwise: the guest is gone from the report (a
//! signed decommission removed an orphan), or it is in another state now (a broken guest
//! turned lost opens `guest_lost` and clears `guest_broken`).

use bosun_proto::report::{GuestReport, GuestStatus, StateReport};

use super::{Condition, OpenWatch, WatchKind, bounded, wire};

/// Most characters of a guest's hostname an alert repeats.
const MAX_NAME: usize = 253;

/// The watch kind of a guest status, for the statuses that are alerted.
fn kind_of(status: GuestStatus) -> Option<WatchKind> {
    match status {
        GuestStatus::Lost => Some(WatchKind::GuestLost),
        GuestStatus::Broken => Some(WatchKind::GuestBroken),
        GuestStatus::Orphaned => Some(WatchKind::GuestOrphaned),
        GuestStatus::Migrated => Some(WatchKind::GuestMigrated),
        GuestStatus::Running
        | GuestStatus::Stopped
        | GuestStatus::Provisioning
        | GuestStatus::Unknown => None,
    }
}

/// The subject of a guest's alerts.
pub fn guest_subject(guest: &GuestReport) -> String {
    match guest.guest_id {
        Some(id) => id.to_string(),
        None => format!("vmid:{}", guest.vmid),
    }
}

/// The guest an alert's subject names in `report`, if it is still reported.
pub(super) fn find<'a>(report: &'a StateReport, subject: &str) -> Option<&'a GuestReport> {
    match subject.strip_prefix("vmid:") {
        Some(vmid) => {
            let vmid: u32 = vmid.parse().ok()?;
            report.guests.iter().find(|g| g.vmid == vmid)
        }
        None => report
            .guests
            .iter()
            .find(|g| g.guest_id.is_some_and(|id| id.to_string() == subject)),
    }
}

/// How a message names a guest: its hostname when reported, its id when managed, its vmid.
pub(super) fn label(guest: &GuestReport) -> String {
    let name = bounded(guest.hostname.trim(), MAX_NAME);
    match (guest.guest_id, name.is_empty()) {
        (Some(id), true) => format!("{id} (vmid {})", guest.vmid),
        (Some(id), false) => format!("{name} ({id}, vmid {})", guest.vmid),
        (None, true) => format!("vmid {}", guest.vmid),
        (None, false) => format!("{name} (vmid {})", guest.vmid),
    }
}

/// The `guest_lost`, `guest_broken` and `guest_orphaned` conditions: one per guest reported so.
pub(super) fn conditions(hostname: &str, report: &StateReport) -> Vec<Condition> {
    let mut out = Vec::new();
    for guest in &report.guests {
        let Some(kind) = kind_of(guest.status) else {
            continue;
        };
        let what = match kind {
            WatchKind::GuestLost => "lost: gone from Proxmox; restore it from a backup",
            WatchKind::GuestMigrated => {
                "migrated: another node of the Proxmox cluster holds it now; Bosun leaves it alone there and never restores a second copy here"
            }
            WatchKind::GuestBroken => {
                "broken: it failed to start the bounded number of times and is not started again until desired state changes"
            }
            _ => {
                "orphaned: on the host but absent from desired state; left alone until a signed decommission arrives"
            }
        };
        out.push(Condition {
            kind,
            subject: guest_subject(guest),
            message: format!("guest {} on host {hostname} is {what}", label(guest)),
            detail: serde_json::json!({
                "guest_id": guest.guest_id,
                "vmid": guest.vmid,
                "hostname": bounded(&guest.hostname, MAX_NAME),
                "status": wire(&guest.status),
            }),
        });
    }
    out
}

/// Whether an open guest alert recovered (else it stopped applying for another reason), and
/// the message saying which.
pub(super) fn resolution(hostname: &str, open: &OpenWatch, report: &StateReport) -> (bool, String) {
    let kind = open.kind.as_str();
    match find(report, &open.subject) {
        Some(guest) if matches!(guest.status, GuestStatus::Running | GuestStatus::Stopped) => (
            true,
            format!(
                "guest {} on host {hostname} is {} again ({kind} resolved)",
                label(guest),
                wire(&guest.status)
            ),
        ),
        Some(guest) => (
            false,
            format!(
                "guest {} on host {hostname} is {} now; no longer alerted as {kind}",
                label(guest),
                wire(&guest.status)
            ),
        ),
        None => (
            false,
            format!(
                "guest {} is no longer reported by host {hostname}; no longer alerted as {kind}",
                open.subject
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use bosun_proto::report::{GuestReport, GuestStatus, StateReport};
    use jiff::Timestamp;
    use uuid::Uuid;

    use super::super::{HubRecords, OpenWatch, WatchKind, WatchPlan, plan};

    const GUEST: Uuid = Uuid::from_u128(0x0190_f5a6_0000_7000_8000_0000_0000_000b);

    fn now() -> Timestamp {
        "2026-11-23T10:00:00Z".parse().unwrap()
    }

    fn guest(guest_id: Option<Uuid>, vmid: u32, status: GuestStatus) -> GuestReport {
        GuestReport {
            guest_id,
            vmid,
            kind: bosun_proto::desired::GuestKind::Lxc,
            hostname: "acme-app".into(),
            status,
            resources: None,
            controller_digest: None,
            controller_expected: None,
            addresses: Vec::new(),
        }
    }

    fn report(guests: Vec<GuestReport>) -> StateReport {
        let mut report: StateReport =
            serde_json::from_str(include_str!("../../../docs/proto/report.json")).unwrap();
        report.guests = guests;
        report.storage.clear();
        report.last_backups.clear();
        report.last_restore_test = None;
        report.restore_tests.clear();
        report.tiers.clear();
        report.host_health = None;
        report.tunnel = None;
        report.pbs_key_fingerprint = None;
        report
    }

    /// Plans against `open`, then returns the plan and what is open afterwards.
    fn judge(open: &[OpenWatch], report: &StateReport) -> (WatchPlan, Vec<OpenWatch>) {
        let plan = plan("pve1", open, report, &HubRecords::default(), now());
        let mut after: Vec<OpenWatch> = open
            .iter()
            .filter(|o| {
                !plan
                    .resolve
                    .iter()
                    .any(|r| r.open.kind == o.kind && r.open.subject == o.subject)
            })
            .cloned()
            .collect();
        after.extend(plan.raise.iter().map(|c| OpenWatch {
            kind: c.kind,
            subject: c.subject.clone(),
            opened_at: now(),
        }));
        (plan, after)
    }

    #[test]
    fn each_troubled_guest_opens_one_alert_until_it_runs_again() {
        for (status, kind) in [
            (GuestStatus::Lost, WatchKind::GuestLost),
            (GuestStatus::Broken, WatchKind::GuestBroken),
            (GuestStatus::Orphaned, WatchKind::GuestOrphaned),
        ] {
            let troubled = report(vec![guest(Some(GUEST), 101, status)]);
            let (raised, open) = judge(&[], &troubled);
            assert_eq!(raised.raise.len(), 1, "{status:?}: {raised:?}");
            assert_eq!(raised.raise[0].kind, kind);
            assert_eq!(raised.raise[0].subject, GUEST.to_string());
            assert!(
                raised.raise[0].message.contains(&GUEST.to_string()),
                "{}",
                raised.raise[0].message
            );
            // The same report again opens nothing more.
            let (again, open) = judge(&open, &troubled);
            assert!(again.is_empty(), "{status:?}: {again:?}");
            // Running again (a restored guest may have a new vmid): recovered.
            let running = report(vec![guest(Some(GUEST), 104, GuestStatus::Running)]);
            let (recovered, open) = judge(&open, &running);
            assert!(recovered.raise.is_empty());
            assert_eq!(recovered.resolve.len(), 1, "{status:?}: {recovered:?}");
            assert!(recovered.resolve[0].recovered);
            assert_eq!(recovered.resolve[0].event_kind(), "guest_recovered");
            assert_eq!(
                recovered.resolve[0].alert_kind(),
                Some(bosun_proto::admin::AlertKind::GuestRecovered)
            );
            assert!(open.is_empty());
        }
    }

    #[test]
    fn a_guest_that_changes_trouble_or_leaves_the_report_is_cleared_not_recovered() {
        let broken = report(vec![guest(Some(GUEST), 101, GuestStatus::Broken)]);
        let (_, open) = judge(&[], &broken);
        let lost = report(vec![guest(Some(GUEST), 101, GuestStatus::Lost)]);
        let (changed, open) = judge(&open, &lost);
        assert_eq!(changed.raise.len(), 1);
        assert_eq!(changed.raise[0].kind, WatchKind::GuestLost);
        assert_eq!(changed.resolve.len(), 1);
        assert!(!changed.resolve[0].recovered);
        assert_eq!(changed.resolve[0].event_kind(), "guest_broken_cleared");
        assert_eq!(changed.resolve[0].alert_kind(), None);
        // Decommissioned: gone from the report.
        let (gone, open) = judge(&open, &report(Vec::new()));
        assert_eq!(gone.resolve.len(), 1);
        assert_eq!(gone.resolve[0].event_kind(), "guest_lost_cleared");
        assert!(open.is_empty());
    }

    #[test]
    fn an_unmanaged_orphan_is_alerted_by_its_vmid() {
        let orphan = report(vec![
            guest(None, 230, GuestStatus::Orphaned),
            guest(Some(GUEST), 101, GuestStatus::Running),
        ]);
        let (raised, open) = judge(&[], &orphan);
        assert_eq!(raised.raise.len(), 1, "{raised:?}");
        assert_eq!(raised.raise[0].kind, WatchKind::GuestOrphaned);
        assert_eq!(raised.raise[0].subject, "vmid:230");
        assert!(
            raised.raise[0].message.contains("acme-app (vmid 230)"),
            "{}",
            raised.raise[0].message
        );
        // Adopted under a guest id, running: the vmid's alert recovers.
        let adopted = report(vec![guest(
            Some(Uuid::from_u128(7)),
            230,
            GuestStatus::Running,
        )]);
        let (recovered, _) = judge(&open, &adopted);
        assert_eq!(recovered.resolve.len(), 1, "{recovered:?}");
        assert!(recovered.resolve[0].recovered);
    }

    #[test]
    fn healthy_and_passing_states_open_nothing() {
        let calm = report(vec![
            guest(Some(GUEST), 101, GuestStatus::Running),
            guest(Some(Uuid::from_u128(2)), 102, GuestStatus::Stopped),
            guest(Some(Uuid::from_u128(3)), 103, GuestStatus::Provisioning),
            guest(Some(Uuid::from_u128(4)), 104, GuestStatus::Unknown),
        ]);
        assert!(judge(&[], &calm).0.is_empty());
    }
}
