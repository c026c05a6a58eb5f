use super::*;
use crate::health::HostHealth;

fn gauge(usage: f64) -> GaugeHealth {
    GaugeHealth {
        usage,
        high: 0.9,
        low: 0.8,
        raised: false,
        since: None,
    }
}

fn disk(device: &str) -> DiskHealth {
    DiskHealth {
        device: device.into(),
        model: "Samsung SSD 870".into(),
        kind: "ssd".into(),
        health: "PASSED".into(),
        state: SmartState::Passed,
        wear_used_percent: Some(3),
        worn: false,
        failing_attributes: Vec::new(),
        temperature_c: Some(31.0),
        checked_at: Timestamp::UNIX_EPOCH,
    }
}

fn pool(name: &str) -> PoolHealth {
    PoolHealth {
        name: name.into(),
        kind: PoolKind::Lvmthin,
        size: 100,
        used: 50,
        metadata_size: Some(10),
        metadata_used: Some(1),
        data: gauge(0.5),
        metadata: Some(gauge(0.1)),
        state: None,
    }
}

fn health(change: impl FnOnce(&mut HostHealth)) -> HostHealth {
    let mut h = HostHealth::default();
    change(&mut h);
    h
}

#[test]
fn a_full_hardware_report_passes() {
    let h = health(|h| {
        h.guests = vec![GuestHealth {
            guest_id: Uuid::from_u128(1),
            vmid: 100,
            cpu: Some(gauge(0.2)),
            memory: None,
            disk: Some(gauge(0.95)),
        }];
        h.disks = vec![disk("/dev/sda"), disk("/dev/nvme0n1")];
        h.pools = vec![pool("pve/data")];
        h.temperatures = vec![Temperature {
            sensor: "coretemp/Package id 0".into(),
            celsius: 48.0,
            crit: Some(100.0),
            max: Some(90.0),
            judged: Some(TemperatureBand {
                high: 90.0,
                low: 85.0,
                raised: false,
                since: None,
            }),
        }];
    });
    assert_eq!(h.validate(), Ok(()));
}

#[test]
fn hostile_values_are_refused_by_field() {
    let table: Vec<(HostHealth, &str)> = vec![
        (
            health(|h| h.disks = vec![disk("/dev/sda\u{1b}[2J")]),
            "host_health.disks[0].device",
        ),
        (
            health(|h| {
                let mut d = disk("/dev/sda");
                d.model = "x".repeat(MAX_NAME_LEN + 1);
                h.disks = vec![d];
            }),
            "host_health.disks[0].model",
        ),
        (
            health(|h| {
                let mut d = disk("/dev/sda");
                d.wear_used_percent = Some(101);
                h.disks = vec![d];
            }),
            "host_health.disks[0].wear_used_percent",
        ),
        (
            health(|h| {
                let mut d = disk("/dev/sda");
                d.failing_attributes = vec!["a".into(); MAX_FAILING_ATTRIBUTES + 1];
                h.disks = vec![d];
            }),
            "host_health.disks[0].failing_attributes",
        ),
        (
            health(|h| {
                let mut d = disk("/dev/sda");
                d.temperature_c = Some(f64::NAN);
                h.disks = vec![d];
            }),
            "host_health.disks[0].temperature_c",
        ),
        (
            health(|h| h.disks = vec![disk("/dev/sda"), disk("/dev/sda")]),
            "host_health.disks",
        ),
        (
            health(|h| {
                h.disks = (0..=MAX_DISKS)
                    .map(|i| disk(&format!("/dev/sd{i}")))
                    .collect()
            }),
            "host_health.disks",
        ),
        (
            health(|h| {
                let mut p = pool("pve/data");
                p.data = gauge(1.5);
                h.pools = vec![p];
            }),
            "host_health.pools[0].data.usage",
        ),
        (
            health(|h| h.pools = vec![pool("pve/data"), pool("pve/data")]),
            "host_health.pools",
        ),
        (
            health(|h| {
                h.guests = vec![GuestHealth {
                    guest_id: Uuid::from_u128(1),
                    vmid: 100,
                    cpu: Some(gauge(-1.0)),
                    memory: None,
                    disk: None,
                }];
            }),
            "host_health.guests[0].cpu.usage",
        ),
        (
            health(|h| {
                h.temperatures = vec![Temperature {
                    sensor: String::new(),
                    celsius: 40.0,
                    crit: None,
                    max: None,
                    judged: None,
                }];
            }),
            "host_health.temperatures[0].sensor",
        ),
        (
            health(|h| {
                h.temperatures = vec![Temperature {
                    sensor: "nvme/Composite".into(),
                    celsius: 40.0,
                    crit: None,
                    max: None,
                    judged: Some(TemperatureBand {
                        high: 70.0,
                        low: 70.0,
                        raised: false,
                        since: None,
                    }),
                }];
            }),
            "host_health.temperatures[0].judged.low",
        ),
        (
            health(|h| {
                let sensor = Temperature {
                    sensor: "nvme/Composite".into(),
                    celsius: 40.0,
                    crit: None,
                    max: None,
                    judged: None,
                };
                h.temperatures = vec![sensor.clone(), sensor];
            }),
            "host_health.temperatures",
        ),
    ];
    for (h, field) in table {
        let err = h.validate().unwrap_err();
        assert_eq!(err.field(), field, "{err}");
    }
}

#[test]
fn an_older_agents_health_decodes_without_the_new_lists() {
    let h: HostHealth = serde_json::from_str(r#"{"smart":[]}"#).unwrap();
    assert!(h.guests.is_empty() && h.disks.is_empty() && h.pools.is_empty());
    let p: PoolHealth = serde_json::from_str(
        r#"{"name":"tank","kind":"btrfs","size":1,"used":0,"data":{"usage":0.0,"high":0.9,"low":0.8,"raised":false}}"#,
    )
    .unwrap();
    assert_eq!(p.kind, PoolKind::Unknown);
}
