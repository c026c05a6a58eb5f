use super::*;

const S: i64 = 1000;

fn config() -> DeadManConfig {
    DeadManConfig {
        grace_factor: 3,
        stopped_grace: DEFAULT_STOPPED_GRACE,
        silence_window: Duration::from_secs(30),
        mass_min_hosts: 5,
        sweep_interval: None,
    }
}

fn host(n: u128, last_seen_s: Option<i64>) -> LivenessRow {
    LivenessRow {
        host_id: Uuid::from_u128(n),
        hostname: format!("pve{n}"),
        poll_interval_s: 30,
        last_seen_ms: last_seen_s.map(|s| s * S),
        overdue_since_ms: None,
        stopped_since_ms: None,
        alert_state: AlertState::None,
    }
}

/// A host whose last poll, at `stopped_s`, said it was stopping on purpose.
fn stopped(n: u128, stopped_s: i64) -> LivenessRow {
    LivenessRow {
        stopped_since_ms: Some(stopped_s * S),
        ..host(n, Some(stopped_s))
    }
}

/// Plans with every row loaded.
fn plan_all(rows: &[LivenessRow], open: bool, now_ms: i64, cfg: &DeadManConfig) -> SweepPlan {
    let monitored = rows.iter().filter(|r| r.last_seen_ms.is_some()).count();
    plan_sweep(rows, monitored, open, now_ms, cfg)
}

/// Applies a plan to the rows, like the store does.
fn apply(rows: &mut [LivenessRow], plan: &SweepPlan) {
    for change in &plan.changes {
        let row = rows
            .iter_mut()
            .find(|r| r.host_id == change.host_id)
            .unwrap();
        row.overdue_since_ms = change.overdue_since_ms;
        row.alert_state = change.alert_state;
    }
}

fn kinds(plan: &SweepPlan) -> Vec<AlertKind> {
    plan.alerts.iter().map(|a| a.kind).collect()
}

#[test]
fn a_single_silent_host_alerts_once_after_grace_and_hold() {
    let mut rows: Vec<_> = (0..10).map(|n| host(n, Some(0))).collect();
    let cfg = config();
    // Everyone but host 0 keeps polling.
    let mut open = false;
    let mut alerts = Vec::new();
    for now_s in (1..=200).step_by(1) {
        for row in rows.iter_mut().skip(1) {
            row.last_seen_ms = Some(now_s * S);
        }
        let plan = plan_all(&rows, open, now_s * S, &cfg);
        apply(&mut rows, &plan);
        open = plan.suspicion_open;
        alerts.extend(plan.alerts.into_iter().map(|a| (now_s, a.kind, a.host_id)));
    }
    // Overdue at 91 s (grace 90 s), alerted after the 30 s hold.
    assert_eq!(
        alerts,
        vec![(121, AlertKind::HostOverdue, Some(Uuid::from_u128(0)))]
    );
    assert_eq!(rows[0].alert_state, AlertState::Sent);
    assert_eq!(rows[0].overdue_since_ms, Some(91 * S));
}

#[test]
fn a_hub_too_small_for_a_mass_silence_alerts_without_holding() {
    // Four hosts (fewer than mass_min_hosts = 5): a silence can only be the host's own.
    let mut rows: Vec<_> = (0..4).map(|n| host(n, Some(0))).collect();
    let cfg = config();
    let mut alerts = Vec::new();
    for now_s in 1..=200 {
        for row in rows.iter_mut().skip(1) {
            row.last_seen_ms = Some(now_s * S);
        }
        let plan = plan_all(&rows, false, now_s * S, &cfg);
        assert!(!plan.suspicion_open);
        apply(&mut rows, &plan);
        alerts.extend(plan.alerts.into_iter().map(|a| (now_s, a.kind, a.host_id)));
    }
    // Overdue at 91 s (grace 90 s) and alerted in the same sweep.
    assert_eq!(
        alerts,
        vec![(91, AlertKind::HostOverdue, Some(Uuid::from_u128(0)))]
    );
}

#[test]
fn hosts_that_never_polled_are_not_monitored() {
    let rows = vec![host(1, None)];
    let plan = plan_all(&rows, false, 10_000 * S, &config());
    assert_eq!(plan, SweepPlan::default());
}

#[test]
fn a_mass_silence_spread_over_one_interval_raises_one_alert() {
    // 10 hosts last polled spread over 30 s, then the hub's network dies.
    let mut rows: Vec<_> = (0..10)
        .map(|n| host(n, Some(i64::try_from(n).unwrap() * 3)))
        .collect();
    let cfg = config();
    let mut open = false;
    let mut all = Vec::new();
    for now_s in 0..400 {
        let plan = plan_all(&rows, open, now_s * S, &cfg);
        apply(&mut rows, &plan);
        open = plan.suspicion_open;
        all.extend(kinds(&plan));
    }
    assert_eq!(all, vec![AlertKind::HubConnectivitySuspected]);
    assert!(open);
    assert!(rows.iter().all(|r| r.alert_state == AlertState::Suppressed));
}

#[test]
fn a_minority_silence_still_alerts_per_host() {
    // 4 of 10 silent: below half, so per-host alerts.
    let mut rows: Vec<_> = (0..10).map(|n| host(n, Some(0))).collect();
    let cfg = config();
    let mut all = Vec::new();
    for now_s in 1..300 {
        for row in rows.iter_mut().skip(4) {
            row.last_seen_ms = Some(now_s * S);
        }
        let plan = plan_all(&rows, false, now_s * S, &cfg);
        apply(&mut rows, &plan);
        all.extend(kinds(&plan));
    }
    assert_eq!(all, vec![AlertKind::HostOverdue; 4]);
}

#[test]
fn small_fleets_need_five_silent_hosts_for_the_guard() {
    // 4 of 4 silent: a majority but fewer than 5, so per-host alerts.
    let mut rows: Vec<_> = (0..4).map(|n| host(n, Some(0))).collect();
    let mut all = Vec::new();
    for now_s in 1..300 {
        let plan = plan_all(&rows, false, now_s * S, &config());
        apply(&mut rows, &plan);
        all.extend(kinds(&plan));
    }
    assert_eq!(all, vec![AlertKind::HostOverdue; 4]);
}

#[test]
fn suspicion_closes_when_hosts_return_and_stragglers_alert() {
    let mut rows: Vec<_> = (0..10).map(|n| host(n, Some(0))).collect();
    let cfg = config();
    let plan = plan_all(&rows, false, 100 * S, &cfg);
    assert_eq!(kinds(&plan), vec![AlertKind::HubConnectivitySuspected]);
    apply(&mut rows, &plan);
    // 8 hosts come back (recovery clears their overdue state at poll time).
    for row in rows.iter_mut().skip(2) {
        row.last_seen_ms = Some(200 * S);
        row.overdue_since_ms = None;
        row.alert_state = AlertState::None;
    }
    let plan = plan_all(&rows, true, 201 * S, &cfg);
    // Restored; the two still silent have been overdue longer than the hold: they alert now.
    assert_eq!(
        kinds(&plan),
        vec![
            AlertKind::HubConnectivityRestored,
            AlertKind::HostOverdue,
            AlertKind::HostOverdue
        ]
    );
    assert!(!plan.suspicion_open);
}

#[test]
fn alert_state_names_round_trip() {
    for state in [
        AlertState::None,
        AlertState::Pending,
        AlertState::Sent,
        AlertState::Suppressed,
    ] {
        assert_eq!(AlertState::parse(state.as_str()), Some(state));
    }
    assert_eq!(AlertState::parse("bogus"), None);
}

#[test]
fn planning_from_the_interesting_rows_only_gives_the_same_plan() {
    let cfg = config();
    // 10 hosts: 6 silent since 0 s, 4 polling recently.
    let mut rows: Vec<_> = (0..10).map(|n| host(n, Some(0))).collect();
    for row in rows.iter_mut().skip(6) {
        row.last_seen_ms = Some(95 * S);
    }
    for now_s in [91, 100, 125] {
        let full = plan_all(&rows, false, now_s * S, &cfg);
        let grace_ms = 90 * S;
        let interesting: Vec<_> = rows
            .iter()
            .filter(|r| {
                r.overdue_since_ms.is_some()
                    || r.last_seen_ms.is_some_and(|l| l < now_s * S - grace_ms)
            })
            .cloned()
            .collect();
        assert_eq!(interesting.len(), 6);
        assert_eq!(
            plan_sweep(&interesting, 10, false, now_s * S, &cfg),
            full,
            "at {now_s} s"
        );
        // Without the count, six silent hosts would look like all of them.
        assert_eq!(kinds(&full), vec![AlertKind::HubConnectivitySuspected]);
    }
}

#[test]
fn the_default_stop_bound_is_thirty_minutes() {
    assert_eq!(DEFAULT_STOPPED_GRACE, Duration::from_secs(30 * 60));
    assert_eq!(
        DeadManConfig::default().stopped_grace,
        DEFAULT_STOPPED_GRACE
    );
}

#[test]
fn a_planned_stop_is_paged_only_past_its_bound_with_its_own_message() {
    // Host 0 stops on purpose at 0 s; the other nine keep polling.
    let mut rows: Vec<_> = (0..10).map(|n| host(n, Some(0))).collect();
    rows[0] = stopped(0, 0);
    let cfg = config();
    let mut open = false;
    let mut alerts = Vec::new();
    let bound_s = 30 * 60;
    for now_s in (10..=bound_s + 100).step_by(10) {
        for row in rows.iter_mut().skip(1) {
            row.last_seen_ms = Some(now_s * S);
        }
        let plan = plan_all(&rows, open, now_s * S, &cfg);
        apply(&mut rows, &plan);
        open = plan.suspicion_open;
        if now_s <= bound_s {
            assert_eq!(rows[0].overdue_since_ms, None, "overdue at {now_s} s");
        }
        alerts.extend(plan.alerts.into_iter().map(|a| (now_s, a)));
    }
    // Not at 91 s like a silent host: once, at the first sweep past the bound, without the
    // silence-window hold, with a message that says what happened.
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    let (at, alert) = &alerts[0];
    assert_eq!(*at, bound_s + 10);
    assert_eq!(alert.kind, AlertKind::HostOverdue);
    assert_eq!(alert.host_id, Some(Uuid::from_u128(0)));
    assert!(
        alert.message.contains("stopped on purpose") && alert.message.contains("not come back"),
        "{}",
        alert.message
    );
    assert!(
        alert.message.contains("(stop bound 1800s)"),
        "{}",
        alert.message
    );
    assert_eq!(rows[0].alert_state, AlertState::Sent);
}

#[test]
fn the_stop_bound_is_configurable_and_never_shorter_than_the_grace_window() {
    let bound = |stopped_grace: Duration| {
        let cfg = DeadManConfig {
            stopped_grace,
            ..config()
        };
        let row = stopped(0, 0);
        let first = (1..100_000)
            .find(|now_s| {
                !plan_all(std::slice::from_ref(&row), false, now_s * S, &cfg)
                    .alerts
                    .is_empty()
            })
            .unwrap();
        (silence_bound_ms(&row, &cfg), first)
    };
    assert_eq!(bound(Duration::from_secs(600)), (600 * S, 601));
    // Shorter than the grace window (3 × 30 s): the grace window holds.
    assert_eq!(bound(Duration::from_secs(5)), (90 * S, 91));
    // A host that did not say it was stopping keeps its grace window whatever the stop bound.
    let cfg = DeadManConfig {
        stopped_grace: Duration::from_secs(600),
        ..config()
    };
    assert_eq!(silence_bound_ms(&host(0, Some(0)), &cfg), 90 * S);
}

#[test]
fn stopped_hosts_are_not_a_mass_silence() {
    // Six of ten hosts stop on purpose together (a maintenance window) and do not come back.
    let mut rows: Vec<_> = (0..10).map(|n| host(n, Some(0))).collect();
    for row in rows.iter_mut().take(6) {
        *row = stopped(row.host_id.as_u128(), 0);
    }
    let cfg = DeadManConfig {
        stopped_grace: Duration::from_secs(600),
        ..config()
    };
    let mut open = false;
    let mut all = Vec::new();
    for now_s in 1..700 {
        for row in rows.iter_mut().skip(6) {
            row.last_seen_ms = Some(now_s * S);
        }
        let plan = plan_all(&rows, open, now_s * S, &cfg);
        apply(&mut rows, &plan);
        open = plan.suspicion_open;
        all.extend(kinds(&plan));
    }
    // Each is paged for itself; the hub does not suspect its own network.
    assert_eq!(all, vec![AlertKind::HostOverdue; 6]);
    assert!(!open);
}

#[test]
fn a_stop_past_its_bound_is_covered_by_an_open_suspicion() {
    // Six hosts went silent together and the hub suspects itself; a seventh stopped on purpose
    // at 0 s, and its bound passes while the suspicion is open.
    let now_s = 3_600;
    let mut rows: Vec<_> = (0..10).map(|n| host(n, Some(now_s))).collect();
    for row in rows.iter_mut().take(6) {
        row.last_seen_ms = Some(0);
        row.overdue_since_ms = Some(91 * S);
        row.alert_state = AlertState::Suppressed;
    }
    rows[6] = stopped(6, 0);
    let plan = plan_all(&rows, true, now_s * S, &config());
    assert!(plan.suspicion_open);
    assert!(plan.alerts.is_empty(), "{:?}", plan.alerts);
    assert_eq!(plan.changes.len(), 1, "{:?}", plan.changes);
    let change = &plan.changes[0];
    assert_eq!(change.host_id, Uuid::from_u128(6));
    assert_eq!(change.alert_state, AlertState::Suppressed);
    assert!(change.newly_overdue && change.after_stop);
    // The others come back: the suspicion closes and the stopped host is paged for itself.
    apply(&mut rows, &plan);
    for row in rows.iter_mut().take(6) {
        row.last_seen_ms = Some((now_s + 1) * S);
        row.overdue_since_ms = None;
        row.alert_state = AlertState::None;
    }
    let plan = plan_all(&rows, true, (now_s + 2) * S, &config());
    assert_eq!(
        kinds(&plan),
        vec![AlertKind::HubConnectivityRestored, AlertKind::HostOverdue]
    );
    assert!(plan.alerts[1].message.contains("stopped on purpose"));
}
