//! `controller_mismatch`: a guest's controller says (in its health reports through the local
//! API) it runs another image digest than the one the agent's signed record names for it: its
//! golden base's signed controller digest from provisioning on, or the last committed
//! rollout's. Code the operator did not sign may run in a customer's guest, so it is alerted,
//! one alert per guest while it lasts. It resolves as `controller_matched` when the controller
//! reports the recorded digest again, and as `controller_mismatch_cleared` when the guest, its
//! record or its report is gone (a rollout in flight reports no expected digest).

use bosun_proto::report::{GuestReport, StateReport};

use super::guests::{find, guest_subject, label};
use super::{Condition, OpenWatch, WatchKind};

/// The reported and the recorded digest, when they differ.
fn mismatch(guest: &GuestReport) -> Option<(&str, &str)> {
    let running = guest.controller_digest.as_deref()?;
    let expected = guest.controller_expected.as_deref()?;
    (running != expected).then_some((running, expected))
}

/// One condition per guest whose controller runs another digest than its record names.
pub(super) fn mismatches(hostname: &str, report: &StateReport) -> Vec<Condition> {
    report
        .guests
        .iter()
        .filter(|g| g.guest_id.is_some())
        .filter_map(|guest| {
            let (running, expected) = mismatch(guest)?;
            Some(Condition {
                kind: WatchKind::ControllerMismatch,
                subject: guest_subject(guest),
                message: format!(
                    "the controller in guest {} on host {hostname} reports running {running}, \
                     not the signed {expected} its record names",
                    label(guest)
                ),
                detail: serde_json::json!({
                    "guest_id": guest.guest_id,
                    "vmid": guest.vmid,
                    "running": running,
                    "expected": expected,
                }),
            })
        })
        .collect()
}

/// Whether an open mismatch resolved because the controller reports the recorded digest.
pub(super) fn resolution(hostname: &str, open: &OpenWatch, report: &StateReport) -> (bool, String) {
    match find(report, &open.subject) {
        Some(guest)
            if guest.controller_digest.is_some()
                && guest.controller_digest == guest.controller_expected =>
        {
            (
                true,
                format!(
                    "the controller in guest {} on host {hostname} reports the signed digest \
                     of its record again (controller_mismatch resolved)",
                    label(guest)
                ),
            )
        }
        Some(guest) => (
            false,
            format!(
                "guest {} on host {hostname} reports no settled controller digest to compare; \
                 no longer alerted as controller_mismatch",
                label(guest)
            ),
        ),
        None => (
            false,
            format!(
                "guest {} is no longer reported by host {hostname}; no longer alerted as \
                 controller_mismatch",
                open.subject
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use bosun_proto::report::{GuestReport, GuestStatus, StateReport};
    use uuid::Uuid;

    use super::super::{HubRecords, WatchKind, plan};
    use super::*;

    const GUEST: Uuid = Uuid::from_u128(0x0190_f5a6_0000_7000_8000_0000_0000_00c1);

    fn digest(n: u8) -> String {
        format!("sha256:{}", format!("{n:02x}").repeat(32))
    }

    fn report(running: Option<String>, expected: Option<String>) -> StateReport {
        let mut report: StateReport =
            serde_json::from_str(include_str!("../../../docs/proto/report.json")).unwrap();
        report.guests = vec![GuestReport {
            guest_id: Some(GUEST),
            vmid: 101,
            kind: bosun_proto::desired::GuestKind::Lxc,
            hostname: "acme-app".into(),
            status: GuestStatus::Running,
            resources: None,
            controller_digest: running,
            controller_expected: expected,
            addresses: Vec::new(),
        }];
        report
    }

    #[test]
    fn a_controller_running_another_digest_opens_one_alert_until_it_matches() {
        let now = "2026-11-26T10:00:00Z".parse().unwrap();
        let records = HubRecords::default();
        let bad = report(Some(digest(2)), Some(digest(1)));
        let raised = plan("pve1", &[], &bad, &records, now);
        let opened: Vec<_> = raised
            .raise
            .iter()
            .filter(|c| c.kind == WatchKind::ControllerMismatch)
            .collect();
        assert_eq!(opened.len(), 1, "{raised:?}");
        assert_eq!(opened[0].subject, GUEST.to_string());
        assert!(opened[0].message.contains(&digest(2)));
        assert!(opened[0].message.contains(&digest(1)));
        let open = [OpenWatch {
            kind: WatchKind::ControllerMismatch,
            subject: GUEST.to_string(),
            opened_at: now,
        }];
        assert!(
            plan("pve1", &open, &bad, &records, now)
                .raise
                .iter()
                .all(|c| c.kind != WatchKind::ControllerMismatch),
            "one alert while it lasts"
        );
        let good = report(Some(digest(1)), Some(digest(1)));
        let resolved = plan("pve1", &open, &good, &records, now);
        assert_eq!(resolved.resolve.len(), 1, "{resolved:?}");
        assert!(resolved.resolve[0].recovered);
        // Nothing to compare (no report yet, or a rollout in flight): no alert, and an open
        // one clears without a recovery.
        for (running, expected) in [(None, Some(digest(1))), (Some(digest(2)), None)] {
            let quiet = report(running, expected);
            assert!(mismatches("pve1", &quiet).is_empty());
            let cleared = plan("pve1", &open, &quiet, &records, now);
            assert_eq!(cleared.resolve.len(), 1);
            assert!(!cleared.resolve[0].recovered);
        }
    }
}
