use serde_json::json;

use super::*;

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

fn disk(value: serde_json::Value) -> NodeDisk {
    serde_json::from_value(value).unwrap()
}

fn smart(value: serde_json::Value) -> SmartData {
    serde_json::from_value(value).unwrap()
}

fn ata(fail: &str) -> SmartData {
    smart(json!({
        "health": "PASSED", "type": "ata",
        "attributes": [
            {"id": "  5", "name": "Reallocated_Sector_Ct", "value": 9, "threshold": 10, "fail": fail, "raw": "812"},
            {"id": "194", "name": "Temperature_Celsius", "value": 66, "threshold": 0, "fail": "-", "raw": "34 (Min/Max 20/45)"}
        ]
    }))
}

#[test]
fn a_disk_is_judged_by_health_failing_attributes_and_wear() {
    let sda = disk(
        json!({"devpath": "/dev/sda", "model": "Samsung SSD", "type": "ssd", "health": "PASSED", "wearout": 97}),
    );
    let ok = judge_disk(&sda, Some(&ata("-")), 80, t(0));
    assert_eq!(ok.state, SmartState::Passed);
    assert_eq!(ok.wear_used_percent, Some(3));
    assert!(!ok.worn && ok.failing_attributes.is_empty());
    assert_eq!(ok.temperature_c, Some(34.0));

    let now = judge_disk(&sda, Some(&ata("FAILING_NOW")), 80, t(0));
    assert_eq!(now.state, SmartState::Failing);
    assert_eq!(
        now.failing_attributes,
        ["5 Reallocated_Sector_Ct: FAILING_NOW (value 9, threshold 10)"]
    );
    let past = judge_disk(&sda, Some(&ata("In_the_past")), 80, t(0));
    assert_eq!(
        past.state,
        SmartState::Passed,
        "a past failure is listed, not failing"
    );
    assert_eq!(past.failing_attributes.len(), 1);

    let failed = judge_disk(&sda, Some(&smart(json!({"health": "FAILED!"}))), 80, t(0));
    assert_eq!(failed.state, SmartState::Failing);

    let worn = disk(json!({"devpath": "/dev/sdb", "health": "PASSED", "wearout": "15"}));
    let w = judge_disk(&worn, None, 80, t(0));
    assert_eq!((w.wear_used_percent, w.worn), (Some(85), true));
    assert_eq!(
        w.state,
        SmartState::Passed,
        "the list's health counts without SMART data"
    );

    let usb = disk(json!({"devpath": "/dev/sdc", "type": "usb", "wearout": "N/A"}));
    let u = judge_disk(&usb, None, 80, t(0));
    assert_eq!(
        (u.state, u.health.as_str(), u.wear_used_percent),
        (SmartState::Unreadable, "UNKNOWN", None)
    );

    let nvme = smart(
        json!({"health": "PASSED", "type": "text", "text": "Critical Warning: 0x00\nTemperature:                        41 Celsius\n"}),
    );
    assert_eq!(
        judge_disk(&sda, Some(&nvme), 80, t(0)).temperature_c,
        Some(41.0)
    );
}

#[test]
fn hostile_texts_are_cleaned_and_bounded() {
    let evil = disk(json!({
        "devpath": "/dev/sda",
        "model": format!("\u{1b}[2J<script>{}", "x".repeat(5000)),
        "health": "PASSED\u{7}",
    }));
    let many: Vec<serde_json::Value> = (0..100)
        .map(|i| json!({"id": i, "name": "\u{1b}]0;pwned\u{7}", "value": 1, "threshold": 2, "fail": "FAILING_NOW"}))
        .collect();
    let d = judge_disk(&evil, Some(&smart(json!({"attributes": many}))), 80, t(0));
    assert!(d.model.len() <= MAX_NAME_LEN && !d.model.chars().any(char::is_control));
    assert!(!d.health.chars().any(char::is_control));
    assert_eq!(d.failing_attributes.len(), MAX_FAILING_ATTRIBUTES);
    assert!(
        d.failing_attributes
            .iter()
            .all(|a| !a.chars().any(char::is_control))
    );
    let report = bosun_proto::health::HostHealth {
        disks: vec![d],
        ..Default::default()
    };
    assert_eq!(
        report.validate(),
        Ok(()),
        "what the agent sends passes the hub's check"
    );
    let list: Vec<NodeDisk> = (0..200)
        .map(|i| disk(json!({"devpath": format!("/dev/sd{i}")})))
        .chain([
            disk(json!({"devpath": "/dev/sd0"})),
            disk(json!({"devpath": "\u{1b}"})),
        ])
        .collect();
    assert_eq!(disks_to_read(list).len(), MAX_DISKS);
}

fn thin(used_gib: u64, meta_used: u64) -> Vec<ThinPool> {
    serde_json::from_value(json!([{
        "vg": "pve", "lv": "data", "lv_size": 100u64 << 30, "used": used_gib << 30,
        "metadata_size": 100, "metadata_used": meta_used
    }]))
    .unwrap()
}

#[test]
fn pool_fill_has_hysteresis_on_data_and_metadata() {
    let th = Thresholds {
        high: 0.9,
        low: 0.8,
    };
    let mut g = PoolGauges::new(th, 2);
    let zfs: Vec<ZfsPool> = serde_json::from_value(
        json!([{"name": "tank", "size": 1000, "alloc": 100, "health": "DEGRADED"}]),
    )
    .unwrap();
    g.observe(Some(&thin(50, 10)), Some(&zfs), t(0));
    let r = g.report();
    assert_eq!(r.len(), 2);
    let data = r.iter().find(|p| p.name == "pve/data").unwrap();
    assert!((data.data.usage - 0.5).abs() < 1e-9 && !data.raised());
    assert_eq!(data.metadata_used, Some(10));
    let tank = r.iter().find(|p| p.name == "tank").unwrap();
    assert_eq!(
        (tank.kind, tank.state.as_deref()),
        (PoolKind::Zfs, Some("DEGRADED"))
    );

    // Metadata fills: two readings at or above 90% raise the pool.
    g.observe(Some(&thin(50, 95)), None, t(1));
    assert!(!g.report().iter().any(PoolHealth::raised));
    g.observe(Some(&thin(50, 95)), None, t(2));
    let data = g
        .report()
        .into_iter()
        .find(|p| p.name == "pve/data")
        .unwrap();
    assert!(data.raised() && data.metadata.unwrap().raised && !data.data.raised);
    assert_eq!(g.report().len(), 2, "an unread zfs list keeps the zfs pool");
    g.observe(Some(&thin(95, 85)), None, t(3));
    assert!(
        g.report().iter().any(PoolHealth::raised),
        "85% is between: still raised"
    );
    g.observe(Some(&thin(95, 80)), None, t(4));
    let data = g
        .report()
        .into_iter()
        .find(|p| p.name == "pve/data")
        .unwrap();
    assert!(!data.metadata.unwrap().raised && data.data.usage > 0.9);
    // Gone from a list that was read: dropped.
    g.observe(Some(&[]), Some(&zfs), t(5));
    assert_eq!(g.report().len(), 1);
}
