//! The network guard against `bosun-pvesim`: a provisioned guest comes up with its firewall on
//! (`firewall=1` on its interface, `enable=1`; no `ipfilter` on DHCP, which would cut it off),
//! and a guest of the agent's own that lost its guard, or got static addresses, is guarded by
//! the reconciler (with `ipfilter` for the static addresses) — a stranger never.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a panic is a failed test with its location"
)]

use crate::localapi_support;

use std::collections::BTreeMap;
use std::net::IpAddr;

use bosun_agentd::guests::reconcile::apply::Applier;
use bosun_agentd::guests::reconcile::config_cache::ConfigCache;
use bosun_agentd::guests::reconcile::observe::observe;
use bosun_agentd::guests::reconcile::plan::{Action, Facts, plan};
use bosun_agentd::guests::reconcile::provision::{ProvisionError, Provisioner};
use bosun_agentd::ops::operation::Origin;
use bosun_proto::desired::{DesiredState, GuestSpec};
use bosun_pve::{
    ConfigUpdate, CtOptions, Ipv4Config, NetConfig, Op, Pve, RestoreRequest, StorageId, Vmid,
    VolumeId,
};
use bosun_pvesim::{EndpointFault, FaultConfig};
use localapi_support::fake_helper::FakeHelper;
use localapi_support::{Harness, Options};
use serde_json::json;

fn desired(h: &Harness, guest_id: &str) -> DesiredState {
    serde_json::from_value(json!({
        "schema": "bosun.desired/v1",
        "guests": [{
            "guest_id": guest_id,
            "hostname": "acme-web",
            "customer": {"customer_id": "acme-01", "display_name": "Acme"},
            "resources": {"cores": 2, "memory_mib": 1024, "rootfs_gib": 8},
            "power": "running",
            "golden": {
                "volid": h.sim.endpoint().golden_volid,
                "sha256": h.sim.endpoint().golden_sha256,
            },
        }],
        "storage": [],
        "backup_policy": {"schedule": "daily", "retention": {}, "quiesce_grace_minutes": 0},
        "restore_test_policy": {"enabled": false, "interval_days": 7, "timeout_minutes": 30},
    }))
    .expect("a valid desired state")
}

fn firewall_puts(h: &Harness, vmid: u32) -> Vec<Vec<(String, String)>> {
    let path = format!("/nodes/pve/lxc/{vmid}/firewall/options");
    h.sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT" && r.path == path)
        .map(|r| r.params)
        .collect()
}

fn options(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provisioned_guests_get_the_guard_and_the_reconciler_keeps_it_on_its_own_only() {
    let h = Harness::start_with(Options {
        guests: 0,
        ..Options::default()
    })
    .await;
    let helper = FakeHelper::start(h.dir.path());
    let provisioner = Provisioner::new(
        h.pve.clone(),
        h.journal.clone(),
        StorageId::new("local-lvm").unwrap(),
        512,
        localapi_support::golden_check(&h, &helper).await,
    );
    let guest_id = "0195a0e0-0000-7000-8000-00000000f1a0";
    let state = desired(&h, guest_id);
    let spec: GuestSpec = state.guests[0].clone();

    // Provisioning from the golden archive (net0 on DHCP): firewall on, no ipfilter.
    let vmid = provisioner.provision(&spec, None).await.unwrap().get();
    let net0 = h.sim.guest_config(vmid).unwrap()["net0"].clone();
    assert!(net0.contains("firewall=1"), "{net0}");
    assert!(net0.contains("hwaddr="), "the fresh MAC stays: {net0}");
    assert!(net0.contains("ip=dhcp"), "{net0}");
    assert_eq!(
        h.sim.guest_firewall(vmid).unwrap(),
        options(&[("enable", "1")]),
        "a DHCP guest is held to its MAC; ipfilter would drop its leased address"
    );
    assert_eq!(
        firewall_puts(&h, vmid),
        vec![vec![("enable".to_owned(), "1".to_owned())]]
    );

    // A stranger on the node without any firewall, and the agent's guest after an operator
    // gave it a static address and switched its firewall off.
    let mut stranger = RestoreRequest::new(
        Vmid::new(150).unwrap(),
        VolumeId::new(h.sim.endpoint().golden_volid.clone()).unwrap(),
        StorageId::new("local-lvm").unwrap(),
    );
    stranger.start = false;
    let upid = h.pve.restore_ct(&stranger).await.unwrap();
    h.pve.wait_task(Op::RestoreCt, &upid).await.unwrap();
    let id = Vmid::new(vmid).unwrap();
    let mut net = NetConfig::parse(&net0).unwrap();
    net.ip = Some(Ipv4Config::Static("10.0.0.5/24".into()));
    net.firewall = Some(false);
    let mut set = CtOptions::default();
    set.net.insert(0, net);
    h.pve
        .update_ct_config(
            id,
            &ConfigUpdate {
                set,
                ..ConfigUpdate::default()
            },
        )
        .await
        .unwrap();
    assert!(h.sim.set_guest_firewall(vmid, BTreeMap::new()));

    let observed = observe(
        &*h.pve,
        &h.journal,
        &mut ConfigCache::default(),
        &mut ConfigCache::default(),
    )
    .await
    .unwrap();
    let ours = observed.guests.iter().find(|o| o.vmid == vmid).unwrap();
    assert!(ours.unguarded);
    assert_eq!(ours.addresses, vec!["10.0.0.5".parse::<IpAddr>().unwrap()]);
    let theirs = observed.guests.iter().find(|o| o.vmid == 150).unwrap();
    assert!(
        !theirs.unguarded,
        "a stranger's firewall is none of the agent's business"
    );
    let facts = Facts {
        restart_limit: 3,
        ..Facts::default()
    };
    let the_plan = plan(&state, &observed.guests, &facts);
    assert_eq!(
        the_plan.actions,
        vec![Action::GuardNetwork {
            guest_id: spec.guest_id,
            vmid,
            kind: bosun_proto::desired::GuestKind::Lxc,
        }]
    );
    let applier = Applier::new(
        h.pve.clone(),
        h.journal.clone(),
        h.queue.clone(),
        provisioner,
    );
    let report = applier.apply(&the_plan, Origin::default()).await;
    assert!(report.all_ok(), "{report:?}");
    assert_eq!(
        h.sim.guest_firewall(vmid).unwrap(),
        options(&[("enable", "1"), ("ipfilter", "1")]),
        "static addresses: ipfilter holds the guest to them"
    );
    assert!(h.sim.guest_config(vmid).unwrap()["net0"].contains("firewall=1"));
    assert!(h.sim.guest_firewall(150).unwrap().is_empty());
    assert!(!h.sim.guest_config(150).unwrap()["net0"].contains("firewall=1"));

    // Guarded: the next pass has nothing to do, and asks for nothing again.
    let puts = firewall_puts(&h, vmid).len();
    let observed = observe(
        &*h.pve,
        &h.journal,
        &mut ConfigCache::default(),
        &mut ConfigCache::default(),
    )
    .await
    .unwrap();
    assert!(plan(&state, &observed.guests, &facts).actions.is_empty());
    assert_eq!(firewall_puts(&h, vmid).len(), puts);
    h.shutdown().await;
}

/// A hiccup answering a step after the restore (the guard's firewall write failed by its
/// handler) runs the steps again in place: the guest is built once, not restored anew. A
/// failure that does not clear is given up after the bounded runs and the guest rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_failed_by_a_hiccup_runs_again_without_a_second_restore() {
    let h = Harness::start_with(Options {
        guests: 0,
        ..Options::default()
    })
    .await;
    let helper = FakeHelper::start(h.dir.path());
    let provisioner = Provisioner::new(
        h.pve.clone(),
        h.journal.clone(),
        StorageId::new("local-lvm").unwrap(),
        512,
        localapi_support::golden_check(&h, &helper).await,
    );
    let failing = || FaultConfig {
        endpoints: vec![EndpointFault {
            method: Some("PUT".into()),
            path: "/nodes/{node}/lxc/{vmid}/firewall/options".into(),
            error_rate: 1.0,
            ..EndpointFault::default()
        }],
        ..FaultConfig::default()
    };
    let count = |method: &str, path: &str| {
        h.sim
            .requests()
            .iter()
            .filter(|r| {
                r.method == method
                    && r.path.trim_end_matches(|c: char| c.is_ascii_digit()) == path
                    && r.status == 200
            })
            .count()
    };
    let failed_puts = |h: &Harness| {
        h.sim
            .requests()
            .iter()
            .filter(|r| {
                r.method == "PUT" && r.path.ends_with("/firewall/options") && r.status == 500
            })
            .count()
    };

    // The hiccup clears while the provision pauses: built once, guarded, nothing destroyed.
    h.sim.set_faults(failing());
    let sim = h.sim.clone();
    let heal = tokio::spawn(async move {
        while !sim
            .requests()
            .iter()
            .any(|r| r.path.ends_with("/firewall/options") && r.status == 500)
        {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        sim.set_faults(FaultConfig::default());
    });
    let spec = desired(&h, "0195a0e0-0000-7000-8000-00000000f1a1").guests[0].clone();
    let vmid = provisioner.provision(&spec, None).await.unwrap().get();
    heal.await.unwrap();
    assert_eq!(count("POST", "/nodes/pve/lxc"), 1, "restored once");
    assert_eq!(count("DELETE", "/nodes/pve/lxc/"), 0, "nothing rolled back");
    assert_eq!(failed_puts(&h), 1);
    assert_eq!(
        h.sim.guest_firewall(vmid).unwrap(),
        options(&[("enable", "1")])
    );

    // A failure that does not clear: the steps run three times in all, then the guest goes.
    h.sim.clear_requests();
    h.sim.set_faults(failing());
    let spec = desired(&h, "0195a0e0-0000-7000-8000-00000000f1a2").guests[0].clone();
    let err = provisioner.provision(&spec, None).await.unwrap_err();
    assert!(matches!(err, ProvisionError::RolledBack { .. }), "{err:?}");
    assert_eq!(count("POST", "/nodes/pve/lxc"), 1, "restored once");
    assert_eq!(failed_puts(&h), 3, "the steps ran three times in all");
    assert_eq!(count("DELETE", "/nodes/pve/lxc/"), 1, "rolled back");
    h.sim.set_faults(FaultConfig::default());
    h.shutdown().await;
}
