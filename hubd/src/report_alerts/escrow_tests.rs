#![allow(clippy::unwrap_used)]

use bosun_proto::desired::{Retention, StorageRole, StorageType};
use bosun_proto::report::{
    HostMetrics, StateReport, TargetReport, TargetStatus, TierReport, Versions,
};
use jiff::Timestamp;

use super::super::{HubRecords, WatchKind, plan};
use super::{SUBJECT, pbs_in_use, verified};

const KEY: &str = "aa:bb:cc:dd:ee:ff:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22:33:44:55:66:77:88:99";
const OTHER: &str = "00:bb:cc:dd:ee:ff:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22:33:44:55:66:77:88:99";

fn report() -> StateReport {
    StateReport {
        schema: bosun_proto::report::SCHEMA.to_owned(),
        seq: 1,
        host: Some(HostMetrics::default()),
        guests: Vec::new(),
        storage: Vec::new(),
        last_backups: Vec::new(),
        last_restore_test: None,
        restore_tests: Vec::new(),
        verifications: Vec::new(),
        tunnel: None,
        versions: Versions::default(),
        audit: Vec::new(),
        storage_recipient: None,
        pbs_key_fingerprint: Some(KEY.to_owned()),
        tiers: Vec::new(),
        bulk_volumes: Vec::new(),
        host_health: None,
        data_plan: None,
        refused: Vec::new(),
        golden: None,
    }
}

fn tier(storage_id: &str, target: &str) -> TierReport {
    TierReport {
        tier: 1,
        target: target.to_owned(),
        storage_id: storage_id.to_owned(),
        schedule: "daily".into(),
        extra_schedule: None,
        desired: Retention::default(),
        applied: Retention::default(),
        held: None,
    }
}

fn target(
    kind: Option<StorageType>,
    role: Option<StorageRole>,
    status: TargetStatus,
) -> TargetReport {
    TargetReport {
        durable_id: "backup@pbs!bosun@pbs.example:store1".into(),
        status,
        free_gib: None,
        kind,
        class: None,
        role,
        storage_id: Some("pbs-main".into()),
        total_bytes: None,
        used_bytes: None,
        reason: None,
        detail: None,
        since: None,
    }
}

fn now() -> Timestamp {
    "2026-11-20T12:00:00Z".parse().unwrap()
}

fn escrow(fingerprint: Option<&str>) -> HubRecords<'_> {
    HubRecords {
        escrow_fingerprint: fingerprint,
        ..HubRecords::default()
    }
}

#[test]
fn verified_needs_both_fingerprints_and_equality() {
    assert!(verified(Some(KEY), Some(KEY)));
    assert!(verified(Some(&KEY.to_ascii_uppercase()), Some(KEY)));
    assert!(!verified(Some(OTHER), Some(KEY)));
    assert!(!verified(None, Some(KEY)));
    assert!(!verified(Some(KEY), None));
    assert!(!verified(Some(""), Some("")));
}

#[test]
fn pbs_shows_up_as_a_tier_or_a_target() {
    let cases: Vec<(&str, StateReport, usize)> = vec![
        ("nothing", report(), 0),
        (
            "a tier on the agent's PBS storage",
            StateReport {
                tiers: vec![tier("bosun-pbs-1a2b3c4d", "pbs-offsite")],
                ..report()
            },
            1,
        ),
        (
            "a local tier",
            StateReport {
                tiers: vec![tier("local", "local"), tier("bosun-dir-1a2b3c4d", "/srv")],
                ..report()
            },
            0,
        ),
        (
            "a PBS-looking name that is not the agent's",
            StateReport {
                tiers: vec![tier("bosun-pbs", "pbs"), tier("bosun-pbs-xyz", "pbs")],
                ..report()
            },
            0,
        ),
        (
            "a PBS target and the tier writing to it",
            StateReport {
                storage: vec![target(Some(StorageType::Pbs), None, TargetStatus::Mounted)],
                tiers: vec![tier("pbs-main", "elsewhere")],
                ..report()
            },
            2,
        ),
        (
            "a pbs-offsite target of unknown type",
            StateReport {
                storage: vec![target(
                    None,
                    Some(StorageRole::PbsOffsite),
                    TargetStatus::Unreachable,
                )],
                ..report()
            },
            1,
        ),
        (
            "a retired PBS target",
            StateReport {
                storage: vec![target(
                    Some(StorageType::Pbs),
                    None,
                    TargetStatus::Decommissioned,
                )],
                ..report()
            },
            0,
        ),
    ];
    for (name, report, uses) in cases {
        assert_eq!(
            pbs_in_use(&report).len(),
            uses,
            "{name}: {:?}",
            pbs_in_use(&report)
        );
    }
}

#[test]
fn escrow_missing_opens_once_and_resolves_as_verified_or_cleared() {
    let pbs = StateReport {
        tiers: vec![tier("bosun-pbs-1a2b3c4d", "pbs-offsite")],
        ..report()
    };
    let first = plan("pve1", &[], &pbs, &escrow(None), now());
    assert_eq!(first.raise.len(), 1, "{first:?}");
    let condition = &first.raise[0];
    assert_eq!(condition.kind, WatchKind::EscrowMissing);
    assert_eq!(condition.subject, SUBJECT);
    assert!(condition.message.contains("pve1"), "{}", condition.message);
    assert!(
        condition.message.contains("tier 1 (pbs-offsite)"),
        "{}",
        condition.message
    );
    let open = vec![super::super::OpenWatch {
        kind: WatchKind::EscrowMissing,
        subject: SUBJECT.to_owned(),
        opened_at: now(),
    }];
    // Still missing, or a blob of another key: nothing new.
    assert!(plan("pve1", &open, &pbs, &escrow(None), now()).is_empty());
    assert!(plan("pve1", &open, &pbs, &escrow(Some(OTHER)), now()).is_empty());
    // The matching blob: recovered, raised as escrow_verified.
    let good = plan("pve1", &open, &pbs, &escrow(Some(KEY)), now());
    assert!(good.raise.is_empty());
    assert_eq!(good.resolve.len(), 1);
    assert_eq!(good.resolve[0].event_kind(), "escrow_verified");
    assert_eq!(
        good.resolve[0].alert_kind(),
        Some(bosun_proto::admin::AlertKind::EscrowVerified)
    );
    // PBS gone: cleared, no alert.
    let gone = plan("pve1", &open, &report(), &escrow(None), now());
    assert_eq!(gone.resolve[0].event_kind(), "escrow_missing_cleared");
    assert_eq!(gone.resolve[0].alert_kind(), None);
    // A verified escrow never opens one; a host reporting no key cannot be verified.
    assert!(plan("pve1", &[], &pbs, &escrow(Some(KEY)), now()).is_empty());
    let unkeyed = StateReport {
        pbs_key_fingerprint: None,
        ..pbs.clone()
    };
    let blind = plan("pve1", &[], &unkeyed, &escrow(Some(KEY)), now());
    assert_eq!(blind.raise.len(), 1);
    assert!(
        blind.raise[0]
            .message
            .contains("reports no PBS key fingerprint")
    );
}
