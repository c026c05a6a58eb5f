use bosun_proto::admin::AlertKind;
use bosun_proto::hardware::{PoolKind, TemperatureBand};
use bosun_proto::health::HostHealth;
use bosun_proto::report::{HostMetrics, Versions};
use jiff::Timestamp;

use super::super::{HubRecords, WatchPlan, plan};
use super::*;

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn report(health: HostHealth) -> StateReport {
    StateReport {
        schema: bosun_proto::report::SCHEMA.to_owned(),
        seq: 1,
        host: Some(HostMetrics::default()),
        guests: Vec::new(),
        storage: Vec::new(),
        last_backups: Vec::new(),
        last_restore_test: None,
        tunnel: None,
        versions: Versions::default(),
        audit: Vec::new(),
        storage_recipient: None,
        pbs_key_fingerprint: None,
        tiers: Vec::new(),
        bulk_volumes: Vec::new(),
        restore_tests: Vec::new(),
        verifications: Vec::new(),
        host_health: Some(health),
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

fn guest(cpu: Option<GaugeHealth>, disk: Option<GaugeHealth>) -> GuestHealth {
    GuestHealth {
        guest_id: Uuid::from_u128(7),
        vmid: 107,
        cpu,
        memory: None,
        disk,
    }
}

fn disk(state: SmartState, worn: bool) -> DiskHealth {
    DiskHealth {
        device: "/dev/sda".into(),
        model: "<b>Evil</b> SSD".into(),
        kind: "ssd".into(),
        health: if state == SmartState::Failing {
            "FAILED"
        } else {
            "PASSED"
        }
        .into(),
        state,
        wear_used_percent: Some(if worn { 91 } else { 3 }),
        worn,
        failing_attributes: if state == SmartState::Failing {
            vec!["5 Reallocated_Sector_Ct: FAILING_NOW (value 9, threshold 10)".into()]
        } else {
            Vec::new()
        },
        temperature_c: None,
        checked_at: at("2026-03-01T10:00:00Z"),
    }
}

fn pool(data: f64, meta_raised: bool) -> PoolHealth {
    PoolHealth {
        name: "pve/data".into(),
        kind: PoolKind::Lvmthin,
        size: 100,
        used: 50,
        metadata_size: Some(10),
        metadata_used: Some(9),
        data: gauge(data, data >= 0.9),
        metadata: Some(gauge(0.95, meta_raised)),
        state: None,
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

fn opened(plan: &WatchPlan) -> Vec<OpenWatch> {
    plan.raise
        .iter()
        .map(|c| OpenWatch {
            kind: c.kind,
            subject: c.subject.clone(),
            opened_at: at("2026-03-01T10:05:00Z"),
        })
        .collect()
}

#[test]
fn a_guests_raised_gauge_opens_one_alert_per_gauge_until_it_clears() {
    let high = report(HostHealth {
        guests: vec![guest(Some(gauge(0.95, true)), Some(gauge(0.95, false)))],
        ..HostHealth::default()
    });
    let first = judge(&[], &high);
    assert_eq!(first.raise.len(), 1, "{first:?}");
    let c = &first.raise[0];
    assert_eq!(
        (c.kind, c.subject.as_str()),
        (
            WatchKind::GuestCpuHigh,
            "00000000-0000-0000-0000-000000000007"
        )
    );
    assert_eq!(c.kind.alert_kind(), AlertKind::GuestCpuHigh);
    assert!(
        c.message.contains("CPU usage of guest")
            && c.message.contains("95%")
            && c.message.contains("vmid 107"),
        "{}",
        c.message
    );
    let open = opened(&first);
    assert!(judge(&open, &high).is_empty(), "one alert while it holds");
    let between = report(HostHealth {
        guests: vec![guest(Some(gauge(0.8, true)), None)],
        ..HostHealth::default()
    });
    assert!(
        judge(&open, &between).is_empty(),
        "between the thresholds it stays open"
    );
    let cleared = report(HostHealth {
        guests: vec![guest(Some(gauge(0.6, false)), None)],
        ..HostHealth::default()
    });
    let done = judge(&open, &cleared);
    assert_eq!(done.resolve.len(), 1);
    assert!(done.resolve[0].recovered);
    assert_eq!(done.resolve[0].event_kind(), "guest_usage_recovered");
    assert_eq!(
        done.resolve[0].alert_kind(),
        Some(AlertKind::GuestUsageRecovered)
    );
    // Thresholds removed: the guest leaves the report; cleared, not recovered.
    let gone = judge(&open, &report(HostHealth::default()));
    assert_eq!(gone.resolve[0].event_kind(), "guest_cpu_high_cleared");
    assert_eq!(gone.resolve[0].alert_kind(), None);
}

#[test]
fn a_failing_or_worn_disk_opens_its_alerts_and_recovers_when_healthy() {
    let bad = report(HostHealth {
        disks: vec![disk(SmartState::Failing, true)],
        ..HostHealth::default()
    });
    let first = judge(&[], &bad);
    let kinds: Vec<WatchKind> = first.raise.iter().map(|c| c.kind).collect();
    assert_eq!(kinds, [WatchKind::DiskFailing, WatchKind::DiskWorn]);
    assert!(first.raise.iter().all(|c| c.subject == "/dev/sda"));
    assert!(
        first.raise[0].message.contains("Reallocated_Sector_Ct"),
        "{}",
        first.raise[0].message
    );
    assert!(first.raise[1].message.contains("91% of its life used"));
    let open = opened(&first);
    assert!(judge(&open, &bad).is_empty());
    // Unreadable disks (USB, virtual) are reported, never alerted.
    let unreadable = report(HostHealth {
        disks: vec![disk(SmartState::Unreadable, false)],
        ..HostHealth::default()
    });
    assert!(judge(&[], &unreadable).raise.is_empty());
    let healthy = report(HostHealth {
        disks: vec![disk(SmartState::Passed, false)],
        ..HostHealth::default()
    });
    let done = judge(&open, &healthy);
    assert_eq!(done.resolve.len(), 2);
    assert!(
        done.resolve
            .iter()
            .all(|r| r.recovered && r.event_kind() == "disk_recovered")
    );
    let gone = judge(&open, &report(HostHealth::default()));
    assert!(gone.resolve.iter().all(|r| !r.recovered));
}

#[test]
fn a_filling_pool_opens_one_alert_on_data_or_metadata() {
    let meta = report(HostHealth {
        pools: vec![pool(0.5, true)],
        ..HostHealth::default()
    });
    let first = judge(&[], &meta);
    assert_eq!(first.raise.len(), 1);
    assert_eq!(
        (first.raise[0].kind, first.raise[0].subject.as_str()),
        (WatchKind::PoolFillHigh, "lvmthin:pve/data")
    );
    assert!(
        first.raise[0].message.contains("metadata 95%"),
        "{}",
        first.raise[0].message
    );
    let open = opened(&first);
    let both = report(HostHealth {
        pools: vec![pool(0.95, true)],
        ..HostHealth::default()
    });
    assert!(judge(&open, &both).is_empty(), "still one alert");
    let done = judge(
        &open,
        &report(HostHealth {
            pools: vec![pool(0.5, false)],
            ..HostHealth::default()
        }),
    );
    assert_eq!(done.resolve[0].event_kind(), "pool_fill_recovered");
}

fn sensor(celsius: f64, raised: bool) -> Temperature {
    Temperature {
        sensor: "nvme/Composite <b>".into(),
        celsius,
        crit: Some(85.0),
        max: None,
        judged: Some(TemperatureBand {
            high: 80.0,
            low: 75.0,
            raised,
            since: raised.then(|| at("2026-03-01T10:00:00Z")),
        }),
    }
}

#[test]
fn a_hot_sensor_opens_one_alert_until_it_cools_or_is_no_longer_judged() {
    let hot = report(HostHealth {
        temperatures: vec![sensor(83.0, true)],
        ..HostHealth::default()
    });
    let first = judge(&[], &hot);
    assert_eq!(first.raise.len(), 1);
    let raised = &first.raise[0];
    assert_eq!(
        (raised.kind, raised.subject.as_str()),
        (WatchKind::TemperatureHigh, "nvme/Composite <b>")
    );
    assert_eq!(raised.kind.alert_kind(), AlertKind::TemperatureHigh);
    assert!(
        raised.message.contains("reads 83 °C (raised at 80 °C or more, clears at 75 °C or less; the chip's critical point is 85 °C)"),
        "{}",
        raised.message
    );
    let open = opened(&first);
    assert!(judge(&open, &hot).is_empty(), "still one alert");
    // Between low and high the agent keeps it raised: nothing moves.
    assert!(
        judge(
            &open,
            &report(HostHealth {
                temperatures: vec![sensor(78.0, true)],
                ..HostHealth::default()
            })
        )
        .is_empty()
    );
    let cooled = judge(
        &open,
        &report(HostHealth {
            temperatures: vec![sensor(70.0, false)],
            ..HostHealth::default()
        }),
    );
    assert_eq!(cooled.resolve[0].event_kind(), "temperature_recovered");
    assert!(cooled.resolve[0].recovered);
    // A sensor reported but no longer judged (its limit gone) clears, not recovers.
    let mut unjudged = sensor(83.0, false);
    unjudged.judged = None;
    let gone = judge(
        &open,
        &report(HostHealth {
            temperatures: vec![unjudged],
            ..HostHealth::default()
        }),
    );
    assert_eq!(gone.resolve[0].event_kind(), "temperature_high_cleared");
    // A sensor no judge ever raised opens nothing, however hot.
    let mut unjudged = sensor(120.0, false);
    unjudged.judged = None;
    assert!(
        judge(
            &[],
            &report(HostHealth {
                temperatures: vec![unjudged],
                ..HostHealth::default()
            })
        )
        .is_empty()
    );
}

#[test]
fn the_verdict_moves_only_with_what_raises_or_clears() {
    let a = report(HostHealth {
        guests: vec![guest(Some(gauge(0.5, false)), None)],
        disks: vec![disk(SmartState::Passed, false)],
        pools: vec![pool(0.5, false)],
        ..HostHealth::default()
    });
    let mut b = a.clone();
    let h = b.host_health.as_mut().unwrap();
    h.guests[0].cpu = Some(gauge(0.6, false));
    h.pools[0].used = 60;
    assert_eq!(
        super::super::health::verdict(&a),
        super::super::health::verdict(&b)
    );
    b.host_health.as_mut().unwrap().pools[0].data.raised = true;
    assert_ne!(
        super::super::health::verdict(&a),
        super::super::health::verdict(&b)
    );
    let (mut c, mut d) = (a.clone(), a.clone());
    c.host_health.as_mut().unwrap().temperatures = vec![sensor(60.0, false)];
    d.host_health.as_mut().unwrap().temperatures = vec![sensor(70.0, false)];
    assert_eq!(
        super::super::health::verdict(&c),
        super::super::health::verdict(&d),
        "a reading alone moves nothing"
    );
    d.host_health.as_mut().unwrap().temperatures = vec![sensor(83.0, true)];
    assert_ne!(
        super::super::health::verdict(&c),
        super::super::health::verdict(&d)
    );
}
