use bosun_proto::admin::AlertKind;
use bosun_proto::health::{GaugeHealth, HostHealth, SmartReading, SmartState};
use bosun_proto::report::{HostMetrics, TunnelHealth, Versions};
use jiff::Timestamp;

use super::super::{HubRecords, OpenWatch, WatchKind, WatchPlan, plan};
use super::*;

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn report(health: Option<HostHealth>, tunnel: Option<TunnelHealth>) -> StateReport {
    StateReport {
        schema: bosun_proto::report::SCHEMA.to_owned(),
        seq: 1,
        host: Some(HostMetrics::default()),
        guests: Vec::new(),
        storage: Vec::new(),
        last_backups: Vec::new(),
        last_restore_test: None,
        tunnel,
        versions: Versions::default(),
        audit: Vec::new(),
        storage_recipient: None,
        pbs_key_fingerprint: None,
        tiers: Vec::new(),
        bulk_volumes: Vec::new(),
        restore_tests: Vec::new(),
        verifications: Vec::new(),
        host_health: health,
        data_plan: None,
        refused: Vec::new(),
        golden: None,
    }
}

fn gauge(usage: f64, raised: bool) -> GaugeHealth {
    GaugeHealth {
        usage,
        high: 0.9,
        low: 0.7,
        raised,
        since: raised.then(|| at("2026-03-01T10:00:00Z")),
    }
}

fn smart(device: &str, state: SmartState) -> SmartReading {
    SmartReading {
        device: device.into(),
        state,
        detail: match state {
            SmartState::Passed => String::new(),
            _ => "reallocated sectors past threshold".into(),
        },
        checked_at: at("2026-03-01T10:00:00Z"),
    }
}

fn tunnel(raised: bool) -> TunnelHealth {
    TunnelHealth {
        healthy: !raised,
        detail: if raised {
            "connection refused".into()
        } else {
            "ready".into()
        },
        down_since: raised.then(|| at("2026-03-01T09:58:00Z")),
        raised,
        managed: None,
    }
}

fn judge(open: &[OpenWatch], report: &StateReport) -> WatchPlan {
    plan(
        "pve1",
        open,
        report,
        &HubRecords::default(),
        at("2026-03-01T10:05:00Z"),
    )
}

/// The plan applied: what stays open afterwards.
fn after(open: &[OpenWatch], plan: &WatchPlan) -> Vec<OpenWatch> {
    let mut next: Vec<OpenWatch> = open
        .iter()
        .filter(|o| {
            !plan
                .resolve
                .iter()
                .any(|r| r.open.kind == o.kind && r.open.subject == o.subject)
        })
        .cloned()
        .collect();
    next.extend(plan.raise.iter().map(|c| OpenWatch {
        kind: c.kind,
        subject: c.subject.clone(),
        opened_at: at("2026-03-01T10:05:00Z"),
    }));
    next
}

#[test]
fn a_raised_gauge_opens_one_alert_that_holds_until_the_agent_clears_it() {
    let high = report(
        Some(HostHealth {
            cpu: Some(gauge(0.95, true)),
            memory: Some(gauge(0.95, false)),
            disk: Some(gauge(0.5, false)),
            ..HostHealth::default()
        }),
        None,
    );
    let first = judge(&[], &high);
    assert_eq!(first.raise.len(), 1, "{first:?}");
    assert_eq!(first.raise[0].kind, WatchKind::HostCpuHigh);
    assert_eq!(first.raise[0].subject, "cpu");
    assert!(
        first.raise[0].message.contains("95%"),
        "{}",
        first.raise[0].message
    );
    assert_eq!(first.raise[0].kind.alert_kind(), AlertKind::HostCpuHigh);
    // Memory at 95% but not raised: the agent has not seen enough samples yet.
    let open = after(&[], &first);
    // The same report again, and a reading between the thresholds: no second alert, no
    // resolution.
    assert!(judge(&open, &high).is_empty());
    let between = report(
        Some(HostHealth {
            cpu: Some(gauge(0.8, true)),
            ..HostHealth::default()
        }),
        None,
    );
    assert!(judge(&open, &between).is_empty());
    // The agent cleared it: recovered.
    let low = report(
        Some(HostHealth {
            cpu: Some(gauge(0.6, false)),
            ..HostHealth::default()
        }),
        None,
    );
    let cleared = judge(&open, &low);
    assert!(cleared.raise.is_empty());
    assert_eq!(cleared.resolve.len(), 1);
    assert!(cleared.resolve[0].recovered);
    assert_eq!(cleared.resolve[0].event_kind(), "host_usage_recovered");
    assert_eq!(
        cleared.resolve[0].alert_kind(),
        Some(AlertKind::HostUsageRecovered)
    );
}

#[test]
fn each_gauge_is_its_own_condition() {
    let all = report(
        Some(HostHealth {
            cpu: Some(gauge(0.95, true)),
            memory: Some(gauge(0.95, true)),
            disk: Some(gauge(0.95, true)),
            ..HostHealth::default()
        }),
        None,
    );
    let plan = judge(&[], &all);
    let kinds: Vec<_> = plan.raise.iter().map(|c| c.kind.as_str()).collect();
    assert_eq!(
        kinds,
        ["host_cpu_high", "host_memory_high", "host_disk_high"]
    );
    // The agent stops reporting health (its config changed): cleared, not recovered.
    let open = after(&[], &plan);
    let gone = judge(&open, &report(None, None));
    assert_eq!(gone.resolve.len(), 3);
    assert!(gone.resolve.iter().all(|r| !r.recovered));
    assert!(gone.resolve.iter().all(|r| r.alert_kind().is_none()));
    assert_eq!(gone.resolve[0].event_kind(), "host_cpu_high_cleared");
}

#[test]
fn a_failing_or_unreadable_disk_is_alerted_once_per_disk() {
    let failing = report(
        Some(HostHealth {
            smart: vec![
                smart("/dev/sda", SmartState::Failing),
                smart("/dev/sdb", SmartState::Passed),
                smart("/dev/sdc", SmartState::Unreadable),
            ],
            ..HostHealth::default()
        }),
        None,
    );
    let plan = judge(&[], &failing);
    let subjects: Vec<_> = plan.raise.iter().map(|c| c.subject.as_str()).collect();
    assert_eq!(subjects, ["/dev/sda", "/dev/sdc"]);
    assert!(plan.raise[0].message.contains("fails its SMART check"));
    assert!(plan.raise[1].message.contains("has no SMART reading"));
    let open = after(&[], &plan);
    assert!(judge(&open, &failing).is_empty(), "one alert per disk");
    // sda failing → unreadable keeps its one alert; sdc passes; sdb is no longer watched.
    let later = report(
        Some(HostHealth {
            smart: vec![
                smart("/dev/sda", SmartState::Unreadable),
                smart("/dev/sdc", SmartState::Passed),
            ],
            ..HostHealth::default()
        }),
        None,
    );
    let plan = judge(&open, &later);
    assert!(plan.raise.is_empty());
    assert_eq!(plan.resolve.len(), 1);
    assert_eq!(plan.resolve[0].open.subject, "/dev/sdc");
    assert_eq!(
        plan.resolve[0].alert_kind(),
        Some(AlertKind::SmartRecovered)
    );
    // sda leaves the watch list: cleared, not recovered.
    let open = after(&open, &plan);
    let plan = judge(&open, &report(Some(HostHealth::default()), None));
    assert_eq!(plan.resolve.len(), 1);
    assert_eq!(plan.resolve[0].event_kind(), "smart_failing_cleared");
}

#[test]
fn the_tunnel_is_alerted_while_raised_and_recovers_when_ready() {
    // Down, but not yet for longer than the agent's bound: nothing.
    let briefly = TunnelHealth {
        raised: false,
        ..tunnel(true)
    };
    assert!(judge(&[], &report(None, Some(briefly))).is_empty());
    let down = report(None, Some(tunnel(true)));
    let plan = judge(&[], &down);
    assert_eq!(plan.raise.len(), 1);
    assert_eq!(plan.raise[0].kind, WatchKind::TunnelDown);
    assert!(
        plan.raise[0].message.contains("connection refused")
            && plan.raise[0].message.contains("2026-03-01T09:58:00Z"),
        "{}",
        plan.raise[0].message
    );
    let open = after(&[], &plan);
    assert!(judge(&open, &down).is_empty());
    let up = judge(&open, &report(None, Some(tunnel(false))));
    assert_eq!(up.resolve.len(), 1);
    assert_eq!(up.resolve[0].alert_kind(), Some(AlertKind::TunnelRecovered));
    let unwatched = judge(&open, &report(None, None));
    assert_eq!(unwatched.resolve[0].event_kind(), "tunnel_down_cleared");
}

#[test]
fn an_agent_s_long_text_is_bounded_in_the_alert() {
    let long = "x".repeat(1000);
    let mut reading = smart("/dev/sda", SmartState::Failing);
    reading.detail = long.clone();
    let plan = judge(
        &[],
        &report(
            Some(HostHealth {
                smart: vec![reading],
                ..HostHealth::default()
            }),
            None,
        ),
    );
    assert!(
        plan.raise[0].message.len() < 400,
        "{}",
        plan.raise[0].message
    );
}

#[test]
fn every_kind_round_trips_its_stored_name() {
    for kind in WatchKind::ALL {
        assert_eq!(WatchKind::parse(kind.as_str()), Some(kind));
    }
}
