//! Which parts of a report the hub judges, so a delta that changes none of them (a live host's
//! CPU and memory figures, its versions, the bulk volumes) is stored without judging the host
//! again: it cannot open or resolve a storage, backup, restore-test, escrow or health alert,
//! nor lose a guest. Time-driven alerts (overdue backups and restore tests) are
//! the backup sweep's, as for a heartbeat.

use bosun_proto::delta::ReportDelta;

/// Whether merging `delta` may change what [`super::plan`] or the lost-guest check read of the
/// stored report: the guests, storage, backups, restore tests, tiers, or the host's health and
/// tunnel (which raise and clear `host_*_high`, `smart_failing` and `tunnel_down`).
pub fn delta_is_judged(delta: &ReportDelta) -> bool {
    // Destructured whole: a new report field must be sorted into one side or the other.
    let ReportDelta {
        schema: _,
        seq: _,
        base_seq: _,
        host: _,
        versions: _,
        bulk_volumes: _,
        // Audit entries are judged one by one as they arrive, whatever the delta holds.
        audit: _,
        guests,
        removed_guests,
        storage,
        last_backups,
        last_restore_test,
        tiers,
        restore_tests,
        tunnel,
        host_health,
    } = delta;
    !guests.is_empty()
        || !removed_guests.is_empty()
        || storage.is_some()
        || !last_backups.is_empty()
        || last_restore_test.is_some()
        || tiers.is_some()
        || restore_tests.is_some()
        || tunnel.is_some()
        || host_health.is_some()
}

#[cfg(test)]
mod tests {
    use super::delta_is_judged;
    use bosun_proto::delta::ReportDelta;
    use bosun_proto::report::StateReport;

    /// The delta from `docs/proto/report.json` to the same report with `change` applied.
    fn delta_after(change: impl FnOnce(&mut StateReport)) -> ReportDelta {
        let base: StateReport =
            serde_json::from_str(include_str!("../../../docs/proto/report.json")).unwrap();
        let mut current = base.clone();
        change(&mut current);
        ReportDelta::between(&base, 1, &current, 2)
    }

    #[test]
    fn host_figures_and_versions_are_not_judged() {
        let delta = delta_after(|r| {
            r.host.cpu_usage = 0.93;
            r.host.memory_used_mib += 1;
            r.versions.controller = Some("9.9.9".into());
        });
        assert!(delta.host.is_some() && delta.versions.is_some());
        assert!(!delta_is_judged(&delta));
        assert!(!delta_is_judged(&delta_after(|_| {})));
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
                "tunnel",
                Box::new(|r| {
                    if let Some(t) = r.tunnel.as_mut() {
                        t.healthy = false;
                    }
                }),
            ),
            (
                "host health",
                Box::new(|r| r.host_health = Some(bosun_proto::health::HostHealth::default())),
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
                        desired: bosun_proto::desired::Retention::default(),
                        applied: bosun_proto::desired::Retention::default(),
                        held: None,
                    });
                }),
            ),
        ];
        for (what, change) in changes {
            let delta = delta_after(change);
            assert!(
                !delta.changes_nothing(),
                "{what}: the test's change changed nothing"
            );
            assert!(delta_is_judged(&delta), "{what} must be judged");
        }
    }
}
