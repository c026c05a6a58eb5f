//! Which parts of a report the hub judges, so a delta that changes none of them (a live host's
//! CPU and memory figures, its versions, a bulk volume's size or newest good archive) is stored
//! without judging the host again: it cannot open or resolve a guest, storage, backup,
//! restore-test, verification, escrow, health or bulk-backup alert. Time-driven alerts (overdue backups and restore tests) are
//! the backup sweep's, as for a heartbeat.

use bosun_proto::delta::ReportDelta;
use bosun_proto::report::StateReport;

use super::health;

/// Whether merging `delta` into `base` (giving `merged`) may change what [`super::plan`] reads
/// of the stored report: the guests, storage, backups, restore
/// tests, tiers, or the host's health, tunnel and bulk volumes. Health and tunnel figures move
/// on almost every poll of a live host; they count only when what raises or clears
/// `host_*_high`, `smart_failing`, `tunnel_down`, `bulk_unprotected` or `bulk_backup_failed`
/// differs ([`health::verdict`]).
pub fn delta_is_judged(delta: &ReportDelta, base: &StateReport, merged: &StateReport) -> bool {
    // Destructured whole: a new report field must be sorted into one side or the other.
    let ReportDelta {
        schema: _,
        seq: _,
        base_seq: _,
        host: _,
        host_unread: _,
        versions: _,
        // Shown, never judged: what the plan refuses arrives as audit entries.
        data_plan: _,
        // Shown, never judged: the host's sync state, not a condition of its own.
        refused: _,
        // Shown, never judged: a failed verification is alerted from its audit entry.
        golden: _,
        // Audit entries are judged one by one as they arrive, whatever the delta holds.
        audit: _,
        guests,
        removed_guests,
        storage,
        last_backups,
        last_restore_test,
        tiers,
        restore_tests,
        verifications,
        tunnel,
        host_health,
        bulk_volumes,
    } = delta;
    !guests.is_empty()
        || !removed_guests.is_empty()
        || storage.is_some()
        || !last_backups.is_empty()
        || last_restore_test.is_some()
        || tiers.is_some()
        || restore_tests.is_some()
        || verifications.is_some()
        || ((tunnel.is_some() || host_health.is_some() || bulk_volumes.is_some())
            && health::verdict(base) != health::verdict(merged))
}

/// Whether `delta` changes nothing but what the hub keeps apart from a report's base (the
/// host's figures and health, versions, tunnel, bulk volumes, data plan; audit entries are not
/// state): a live host's usual delta.
pub fn delta_is_live_only(delta: &ReportDelta) -> bool {
    // Destructured whole: a new report field must be sorted into one side or the other.
    let ReportDelta {
        schema: _,
        seq: _,
        base_seq: _,
        host: _,
        host_unread: _,
        versions: _,
        bulk_volumes: _,
        data_plan: _,
        tunnel: _,
        host_health: _,
        audit: _,
        guests,
        removed_guests,
        storage,
        last_backups,
        last_restore_test,
        tiers,
        restore_tests,
        verifications,
        refused,
        golden,
    } = delta;
    guests.is_empty()
        && refused.is_none()
        && golden.is_none()
        && removed_guests.is_empty()
        && storage.is_none()
        && last_backups.is_empty()
        && last_restore_test.is_none()
        && tiers.is_none()
        && restore_tests.is_none()
        && verifications.is_none()
}

#[cfg(test)]
mod tests {
    use super::delta_is_judged;
    use bosun_proto::delta::ReportDelta;
    use bosun_proto::health::{GaugeHealth, HostHealth, SmartReading, SmartState};
    use bosun_proto::report::{StateReport, TunnelHealth};

    fn example() -> StateReport {
        serde_json::from_str(include_str!("../../../docs/proto/report.json")).unwrap()
    }

    /// Whether the delta from `base` to `base` with `change` applied is judged; the delta
    /// must change something.
    fn judged_after(base: &StateReport, change: impl FnOnce(&mut StateReport)) -> bool {
        let mut current = base.clone();
        change(&mut current);
        let delta = ReportDelta::between(base, 1, &current, 2);
        assert!(
            !delta.changes_nothing(),
            "the test's change changed nothing"
        );
        let mut merged = base.clone();
        merged.apply(&delta);
        delta_is_judged(&delta, base, &merged)
    }

    fn gauge(usage: f64, raised: bool) -> GaugeHealth {
        GaugeHealth {
            usage,
            high: 0.9,
            low: 0.7,
            raised,
            since: None,
        }
    }

    /// `example()` with host health: CPU at `cpu`, raised or not, one disk passing.
    fn with_health(cpu: f64, raised: bool) -> StateReport {
        let mut report = example();
        report.host_health = Some(HostHealth {
            cpu: Some(gauge(cpu, raised)),
            memory: Some(gauge(0.4, false)),
            smart: vec![SmartReading {
                device: "/dev/sda".into(),
                state: SmartState::Passed,
                detail: String::new(),
                checked_at: "2026-11-23T10:00:00Z".parse().unwrap(),
            }],
            ..HostHealth::default()
        });
        report.tunnel = Some(TunnelHealth {
            healthy: true,
            detail: "ready".into(),
            down_since: None,
            raised: false,
            managed: None,
        });
        report
    }

    #[test]
    fn host_figures_and_versions_are_not_judged() {
        assert!(!judged_after(&example(), |r| {
            r.host.as_mut().unwrap().cpu_usage = 0.93;
            r.host.as_mut().unwrap().memory_used_mib += 1;
            r.versions.controller = Some("9.9.9".into());
        }));
    }

    #[test]
    fn health_readings_that_raise_or_clear_nothing_are_not_judged() {
        for raised in [false, true] {
            let base = with_health(0.5, raised);
            assert!(!judged_after(&base, |r| {
                let health = r.host_health.as_mut().unwrap();
                health.cpu = Some(gauge(0.85, raised));
                health.load_avg = Some([1.0, 2.0, 3.0]);
                health.smart[0].checked_at = "2026-11-23T11:00:00Z".parse().unwrap();
                r.tunnel.as_mut().unwrap().detail = "ready again".into();
            }));
        }
        // Health reported for the first time with nothing raised opens nothing either.
        assert!(!judged_after(&example(), |r| {
            r.host_health = Some(HostHealth::default());
        }));
    }

    #[test]
    fn health_changes_that_raise_or_clear_are_judged() {
        type Change = Box<dyn FnOnce(&mut StateReport)>;
        let changes: Vec<(&str, Change)> = vec![
            (
                "gauge raised",
                Box::new(|r| r.host_health.as_mut().unwrap().cpu = Some(gauge(0.95, true))),
            ),
            (
                "gauge no longer reported",
                Box::new(|r| r.host_health.as_mut().unwrap().memory = None),
            ),
            (
                "disk failing",
                Box::new(|r| r.host_health.as_mut().unwrap().smart[0].state = SmartState::Failing),
            ),
            (
                "disk no longer watched",
                Box::new(|r| r.host_health.as_mut().unwrap().smart.clear()),
            ),
            (
                "tunnel raised",
                Box::new(|r| {
                    let tunnel = r.tunnel.as_mut().unwrap();
                    tunnel.healthy = false;
                    tunnel.raised = true;
                }),
            ),
        ];
        for (what, change) in changes {
            assert!(
                judged_after(&with_health(0.5, false), change),
                "{what} must be judged"
            );
        }
        assert!(
            judged_after(&with_health(0.95, true), |r| {
                r.host_health.as_mut().unwrap().cpu = Some(gauge(0.6, false));
            }),
            "a gauge cleared must be judged"
        );
    }

    #[test]
    fn every_judged_part_is_judged() {
        type Change = Box<dyn FnOnce(&mut StateReport)>;
        let changes: Vec<(&str, Change)> = vec![
            ("guest", Box::new(|r| r.guests[0].hostname.push('x'))),
            ("removed guest", Box::new(|r| drop(r.guests.pop()))),
            ("storage", Box::new(|r| r.storage[0].free_gib = Some(1))),
            ("backup", Box::new(|r| r.last_backups[0].ok = false)),
            (
                "last restore test",
                Box::new(|r| {
                    if let Some(t) = r.last_restore_test.as_mut() {
                        t.passed = false;
                    }
                }),
            ),
            (
                "restore tests",
                Box::new(|r| r.restore_tests[0].passed = false),
            ),
            (
                "tiers",
                Box::new(|r| {
                    r.tiers.push(bosun_proto::report::TierReport {
                        tier: 0,
                        target: "backup-nfs".into(),
                        storage_id: "backup-nfs".into(),
                        schedule: "daily".into(),
                        extra_schedule: None,
                        desired: bosun_proto::desired::Retention::default(),
                        applied: bosun_proto::desired::Retention::default(),
                        held: None,
                    });
                }),
            ),
        ];
        for (what, change) in changes {
            assert!(judged_after(&example(), change), "{what} must be judged");
        }
    }

    /// `example()` with one bulk volume archived to the target the plan signs for it.
    fn with_bulk() -> StateReport {
        let mut report = example();
        report.bulk_volumes = vec![bosun_proto::report::BulkVolumeReport {
            guest_id: uuid::Uuid::from_u128(0xb1),
            name: "media".into(),
            path: "/srv/media".into(),
            size_gib: 100,
            class: None,
            target: Some("nas-media".into()),
            storage_id: None,
            refused: None,
            backup: bosun_proto::desired::BulkBackup::Target {
                target: "usb1".into(),
            },
            signed_target: Some("usb1".into()),
            last_archive: None,
            last_error: None,
            not_archived: None,
        }];
        report
    }

    #[test]
    fn bulk_volumes_are_judged_when_they_raise_or_clear() {
        assert!(!judged_after(&with_bulk(), |r| r.bulk_volumes[0].size_gib = 200));
        assert!(
            judged_after(&with_bulk(), |r| r.bulk_volumes[0].last_error =
                Some("tar".into())),
            "a failed attempt must be judged"
        );
        assert!(
            judged_after(&with_bulk(), |r| r.bulk_volumes[0].signed_target = None),
            "a signed target gone must be judged"
        );
        assert!(
            judged_after(&with_bulk(), |r| drop(r.bulk_volumes.pop())),
            "a volume gone must be judged"
        );
    }
}
