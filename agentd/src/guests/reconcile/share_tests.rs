use bosun_proto::desired::DesiredState;
use bosun_proto::share::{BUILT_IN_BOUNDS, ShareBounds};
use serde_json::json;
use uuid::Uuid;

use super::*;
use crate::guests::reconcile::plan::{Action, Facts, Finding, ObservedGuest, ObservedPower, plan};

fn config(pairs: &[(&str, serde_json::Value)]) -> CtConfig {
    let mut values: serde_json::Map<String, serde_json::Value> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    values.insert("digest".into(), json!("d"));
    serde_json::from_value(serde_json::Value::Object(values)).unwrap()
}

fn share(weight: u32, cpu: Option<u32>, rate: Option<u32>) -> Share {
    Share {
        cpu_weight: weight,
        cpu_limit_millicores: cpu,
        net_rate_mbytes_per_s: rate,
    }
}

#[test]
fn proxmox_defaults_read_as_the_default_share_and_need_no_write() {
    let have = observed(&config(&[(
        "net0",
        json!("name=eth0,bridge=vmbr0,firewall=1"),
    )]));
    assert_eq!(have.cpu_weight, None);
    assert_eq!(have.cpu_limit, Some(Thousandths(0)));
    assert_eq!(have.net_rates, [Some(Thousandths(0))]);
    assert_eq!(change(&share(DEFAULT_CPU_WEIGHT, None, None), &have), None);
}

#[test]
fn what_proxmox_stores_is_read_as_it_sends_it() {
    // cpuunits comes back a number, cpulimit a string (a Perl `number`), rate inside net0.
    let have = observed(&config(&[
        ("cpuunits", json!(250)),
        ("cpulimit", json!("1.5")),
        ("net0", json!("name=eth0,bridge=vmbr0,rate=12.5")),
        ("net1", json!("name=eth1,bridge=vmbr1")),
    ]));
    assert_eq!(have.cpu_weight, Some(250));
    assert_eq!(have.cpu_limit, Some(Thousandths(1500)));
    assert_eq!(
        have.net_rates,
        [Some(Thousandths(12_500)), Some(Thousandths(0))]
    );
    // Matching CPU, and a rate every interface must carry: only the rate changes.
    let want = share(250, Some(1500), Some(12));
    assert_eq!(
        change(&want, &have),
        Some(ShareChange {
            cpu_weight: None,
            cpu_limit: None,
            net_rate: Some(Limit::To(Thousandths(12_000))),
        })
    );
}

#[test]
fn drift_either_way_is_corrected_and_a_lifted_limit_is_deleted() {
    let have = observed(&config(&[
        ("cpuunits", json!(5000)),
        ("cpulimit", json!("0.05")),
        ("net0", json!("name=eth0,bridge=vmbr0,rate=1")),
    ]));
    let got = change(&share(100, None, None), &have).unwrap();
    assert_eq!(got.cpu_weight, Some(100));
    assert_eq!(got.cpu_limit, Some(Limit::Lifted));
    assert_eq!(got.net_rate, Some(Limit::Lifted));
    let mut update = ConfigUpdate::default();
    put_cpu(&got, &mut update);
    assert_eq!(update.set.cpuunits, Some(100));
    assert_eq!(update.set.cpulimit, None);
    assert_eq!(update.delete, ["cpulimit"]);
}

#[test]
fn an_unreadable_value_is_drift_not_a_match() {
    let have = observed(&config(&[
        ("cpulimit", json!("lots")),
        ("net0", json!("name=eth0,bridge=vmbr0,rate=-3")),
    ]));
    assert_eq!(have.cpu_limit, None);
    let got = change(&share(100, None, None), &have).unwrap();
    assert_eq!(got.cpu_limit, Some(Limit::Lifted));
    assert_eq!(got.net_rate, Some(Limit::Lifted));
}

fn desired(classes: serde_json::Value, class: Option<&str>) -> DesiredState {
    let mut guest = json!({
        "guest_id": Uuid::from_u128(1),
        "hostname": "g1",
        "customer": { "customer_id": "c", "display_name": "C" },
        "resources": { "cores": 2, "memory_mib": 1024, "rootfs_gib": 8 },
        "power": "running",
        "golden": {
            "volid": "local:backup/vzdump-lxc-9000-2026_01_01-00_00_00.tar.zst",
            "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
        }
    });
    if let Some(class) = class {
        guest["share_class"] = class.into();
    }
    let state: DesiredState = serde_json::from_value(json!({
        "schema": "bosun.desired/v1",
        "guests": [guest],
        "backup_policy": { "schedule": "daily", "retention": {} },
        "restore_test_policy": { "enabled": false, "interval_days": 7, "timeout_minutes": 30 },
        "share_classes": classes,
    }))
    .unwrap();
    state.validate().unwrap();
    state
}

fn seen(share: ObservedShare) -> ObservedGuest {
    ObservedGuest {
        vmid: 101,
        guest_id: Some(Uuid::from_u128(1)),
        power: ObservedPower::Running,
        hostname: Some("g1".into()),
        cores: Some(2),
        memory_mib: Some(1024),
        rootfs_gib: Some(8),
        locked: false,
        unguarded: false,
        addresses: Vec::new(),
        share,
        startup: None,
    }
}

fn facts(bounds: ShareBounds) -> Facts {
    Facts {
        restart_limit: 5,
        share_bounds: bounds,
        ..Facts::default()
    }
}

fn one_interface() -> ObservedShare {
    ObservedShare {
        net_rates: vec![Some(Thousandths(0))],
        ..ObservedShare::default()
    }
}

#[test]
fn the_planner_writes_a_guests_class_and_nothing_once_it_holds() {
    let state = desired(
        json!([{ "name": "gold", "cpu_weight": 400, "cpu_limit_millicores": 1500, "net_rate_mbytes_per_s": 20 }]),
        Some("gold"),
    );
    let got = plan(
        &state,
        &[seen(one_interface())],
        &facts(ShareBounds::default()),
    );
    let Some(Action::SetSpec { share, cores, .. }) = got.actions.first() else {
        panic!("{got:?}");
    };
    assert_eq!(*cores, None);
    assert_eq!(
        *share,
        Some(ShareChange {
            cpu_weight: Some(400),
            cpu_limit: Some(Limit::To(Thousandths(1500))),
            net_rate: Some(Limit::To(Thousandths(20_000))),
        })
    );
    let held = ObservedShare {
        cpu_weight: Some(400),
        cpu_limit: Some(Thousandths(1500)),
        net_rates: vec![Some(Thousandths(20_000))],
    };
    let got = plan(&state, &[seen(held)], &facts(ShareBounds::default()));
    assert!(got.actions.is_empty() && got.is_converged(), "{got:?}");
}

#[test]
fn the_default_class_holds_for_a_guest_naming_none() {
    let state = desired(
        json!([{ "name": "default", "net_rate_mbytes_per_s": 7 }]),
        None,
    );
    let got = plan(
        &state,
        &[seen(one_interface())],
        &facts(ShareBounds::default()),
    );
    assert!(
        matches!(
            got.actions.first(),
            Some(Action::SetSpec {
                share: Some(ShareChange {
                    net_rate: Some(Limit::To(Thousandths(7000))),
                    cpu_weight: None,
                    cpu_limit: None
                }),
                ..
            })
        ),
        "{got:?}"
    );
}

#[test]
fn a_hostile_class_is_held_at_the_bounds_and_reported() {
    // The hub starves the guest: the smallest weight, a hundredth of a core, 1 MB/s under a
    // plan whose floor is 5 MB/s.
    let state = desired(
        json!([{ "name": "starve", "cpu_weight": 1, "cpu_limit_millicores": 10, "net_rate_mbytes_per_s": 1 }]),
        Some("starve"),
    );
    let bounds = ShareBounds {
        net_rate_min_mbytes_per_s: Some(5),
        ..ShareBounds::default()
    };
    let got = plan(&state, &[seen(one_interface())], &facts(bounds));
    let Some(Action::SetSpec {
        share: Some(share), ..
    }) = got.actions.first()
    else {
        panic!("{got:?}");
    };
    assert_eq!(share.cpu_weight, Some(BUILT_IN_BOUNDS.cpu_weight.0));
    assert_eq!(
        share.cpu_limit,
        Some(Limit::To(Thousandths(u64::from(
            BUILT_IN_BOUNDS.cpu_limit_millicores.0
        ))))
    );
    assert_eq!(share.net_rate, Some(Limit::To(Thousandths(5000))));
    let refused: Vec<_> = got
        .findings
        .iter()
        .filter_map(|f| match f {
            Finding::ShareRefused { refusal, .. } => Some(refusal.field),
            _ => None,
        })
        .collect();
    assert_eq!(
        refused,
        [
            "cpu_weight",
            "cpu_limit_millicores",
            "net_rate_mbytes_per_s"
        ]
    );
    // Loosened past the plan's ceiling: held at it.
    let state = desired(
        json!([{ "name": "loose", "cpu_weight": 10000, "cpu_limit_millicores": 8000000 }]),
        Some("loose"),
    );
    let bounds = ShareBounds {
        cpu_limit_max_millicores: Some(2000),
        net_rate_max_mbytes_per_s: Some(50),
        ..ShareBounds::default()
    };
    let got = plan(&state, &[seen(one_interface())], &facts(bounds));
    let Some(Action::SetSpec {
        share: Some(share), ..
    }) = got.actions.first()
    else {
        panic!("{got:?}");
    };
    assert_eq!(share.cpu_weight, Some(BUILT_IN_BOUNDS.cpu_weight.1));
    assert_eq!(share.cpu_limit, Some(Limit::To(Thousandths(2000))));
    // No rate asked under a ceiling is the ceiling.
    assert_eq!(share.net_rate, Some(Limit::To(Thousandths(50_000))));
}
