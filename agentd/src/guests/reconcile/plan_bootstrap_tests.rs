//! The one planner action of the guest's bootstrap: a running guest this agent provisioned
//! that holds no token gets its bootstrap delivered.

use bosun_proto::desired::{DesiredState, GuestSpec};
use serde_json::json;

use super::*;

fn desired(power: &str) -> DesiredState {
    serde_json::from_value(json!({
        "schema": "bosun.desired/v1",
        "guests": [{
            "guest_id": Uuid::from_u128(1),
            "hostname": "g1",
            "customer": {"customer_id": "c", "display_name": "C"},
            "resources": {"cores": 2, "memory_mib": 1024, "rootfs_gib": 8},
            "power": power,
            "golden": {
                "volid": "local:backup/vzdump-lxc-9000-2026_01_01-00_00_00.tar.zst",
                "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".to_owned(),
            },
        }],
        "storage": [],
        "backup_policy": {"schedule": "daily", "retention": {}, "quiesce_grace_minutes": 0},
        "restore_test_policy": {"enabled": false, "interval_days": 7, "timeout_minutes": 30},
    }))
    .expect("a valid desired state")
}

fn seen(guest_id: Option<Uuid>, power: ObservedPower) -> ObservedGuest {
    ObservedGuest {
        vmid: 101,
        guest_id,
        power,
        hostname: Some("g1".into()),
        cores: Some(2),
        memory_mib: Some(1024),
        rootfs_gib: Some(8),
        locked: false,
        unguarded: false,
        addresses: Vec::new(),
        share: Default::default(),
        startup: None,
    }
}

fn tokenless() -> Facts {
    Facts {
        restart_limit: 5,
        tokenless: [Uuid::from_u128(1)].into(),
        ..Facts::default()
    }
}

#[test]
fn a_running_provisioned_guest_without_a_token_gets_its_bootstrap() {
    let g1 = Uuid::from_u128(1);
    let state = desired("running");
    let got = plan(
        &state,
        &[seen(Some(g1), ObservedPower::Running)],
        &tokenless(),
    );
    let spec: &GuestSpec = &state.guests[0];
    assert_eq!(
        got.actions,
        vec![Action::DeliverBootstrap {
            spec: Box::new(spec.clone()),
            vmid: 101
        }]
    );
    assert_eq!(got.actions[0].name(), "deliver_bootstrap");
    assert_eq!(got.actions[0].guest_id(), g1);
}

#[test]
fn no_bootstrap_before_the_guest_runs_once_it_has_a_token_or_for_an_adopted_guest() {
    let g1 = Uuid::from_u128(1);
    // Stopped but wanted running: start first; the push needs a running guest.
    let got = plan(
        &desired("running"),
        &[seen(Some(g1), ObservedPower::Stopped)],
        &tokenless(),
    );
    assert_eq!(
        got.actions.iter().map(Action::name).collect::<Vec<_>>(),
        vec!["start"]
    );
    // Wanted stopped: nothing to push into.
    let got = plan(
        &desired("stopped"),
        &[seen(Some(g1), ObservedPower::Stopped)],
        &tokenless(),
    );
    assert!(got.actions.is_empty(), "{:?}", got.actions);
    // Has a token.
    let facts = Facts {
        restart_limit: 5,
        ..Facts::default()
    };
    let got = plan(
        &desired("running"),
        &[seen(Some(g1), ObservedPower::Running)],
        &facts,
    );
    assert!(got.actions.is_empty(), "{:?}", got.actions);
    // A guest the agent did not create (adopted by a pinned vmid) is not bootstrapped.
    let mut state = desired("running");
    state.guests[0].vmid = Some(101);
    let got = plan(&state, &[seen(None, ObservedPower::Running)], &tokenless());
    assert!(got.actions.is_empty(), "{:?}", got.actions);
}

/// A guest holding a token whose bootstrap carries other keys than the signed plan trusts
/// for it (decision 0107) gets its bootstrap delivered again, once it runs.
#[test]
fn a_guest_whose_keys_changed_in_the_signed_plan_gets_its_bootstrap_again() {
    let g1 = Uuid::from_u128(1);
    let facts = Facts {
        restart_limit: 5,
        access_stale: [g1].into(),
        ..Facts::default()
    };
    let state = desired("running");
    let got = plan(&state, &[seen(Some(g1), ObservedPower::Running)], &facts);
    assert_eq!(
        got.actions,
        vec![Action::DeliverBootstrap {
            spec: Box::new(state.guests[0].clone()),
            vmid: 101
        }]
    );
    let got = plan(&state, &[seen(Some(g1), ObservedPower::Stopped)], &facts);
    assert_eq!(
        got.actions.iter().map(Action::name).collect::<Vec<_>>(),
        vec!["start"]
    );
}

#[test]
fn keys_count_as_changed_only_when_they_differ_from_the_ones_delivered() {
    use crate::guests::credentials::bootstrap::delivered_differs;
    let key = bosun_proto::break_glass::SshPublicKey::new(
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMJ9ICvzuRFQSTsuN1n1uZmou1NEzhm7SDmBZQBvv5uX",
    )
    .expect("a key");
    let keys = vec![key];
    let sha = bosun_proto::guest_access::keys_sha256(&keys);
    let none = bosun_proto::guest_access::keys_sha256(&[]);
    // No record: no key was given. A guest from before keys, with none in the plan, stays.
    assert!(!delivered_differs(None, &[]));
    assert!(delivered_differs(None, &keys));
    assert!(!delivered_differs(Some(&sha), &keys));
    assert!(delivered_differs(Some(&sha), &[]), "a key the plan dropped");
    assert!(!delivered_differs(Some(&none), &[]));
}
