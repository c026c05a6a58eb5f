//! The PVE client against a server that answers like PVE 8.2 and older: an error's text is
//! only in the HTTP reason phrase and the body is `{"data":null}`. Lock waiting, the next-id
//! race and missing-guest detection must work from the reason phrase alone.

use crate::pve_support;

use std::time::Duration;

use bosun_pve::{ConfigUpdate, CtOptions, Op, Pve, PveError, RestoreRequest, RetryPolicy};
use bosun_pvesim::{EndpointFault, FaultConfig, PveVersion, SimConfig};
use pve_support::{bounded, client_for, golden, local_lvm, restore_golden, start, vmid};

fn pve_8_2() -> SimConfig {
    SimConfig {
        pve_version: PveVersion::V8_2,
        ..SimConfig::fast()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_speaks_8_2() {
    bounded(async {
        let rig = start(pve_8_2()).await;
        let v = rig.client.version().await.unwrap();
        assert_eq!(v.release, "8.2");
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_guest_is_recognised_from_the_reason_phrase() {
    bounded(async {
        let rig = start(pve_8_2()).await;
        let err = rig.client.ct_config(vmid(999)).await.unwrap_err();
        match &err {
            PveError::Api {
                status: 500,
                message,
                ..
            } => assert_eq!(
                message,
                "Configuration file 'nodes/pve/lxc/999.conf' does not exist"
            ),
            other => panic!("expected a 500 naming the missing config, got {other:?}"),
        }
        assert!(err.is_missing(), "{err}");
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_lock_is_waited_out_on_8_2() {
    bounded(async {
        let rig = start(pve_8_2()).await;
        restore_golden(&rig, 210).await;
        assert!(rig.sim.set_guest_lock(210, Some("backup")));
        let sim = rig.sim.clone();
        let release = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            sim.set_guest_lock(210, None);
        });
        rig.sim.clear_requests();
        let update = ConfigUpdate {
            set: CtOptions {
                cores: Some(3),
                ..Default::default()
            },
            ..Default::default()
        };
        rig.client
            .update_ct_config(vmid(210), &update)
            .await
            .expect("the lock is recognised from the reason phrase and waited out");
        release.await.unwrap();
        let statuses: Vec<u16> = rig
            .sim
            .requests()
            .into_iter()
            .filter(|r| r.method == "PUT")
            .map(|r| r.status)
            .collect();
        assert!(
            statuses.contains(&500),
            "refused while locked: {statuses:?}"
        );
        assert_eq!(statuses.last(), Some(&200));
        assert_eq!(
            rig.sim
                .guest_config(210)
                .unwrap()
                .get("cores")
                .map(String::as_str),
            Some("3")
        );
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_restores_onto_the_next_id_both_succeed_on_8_2() {
    bounded(async {
        let rig = start(pve_8_2()).await;
        rig.sim.set_faults(FaultConfig {
            endpoints: vec![EndpointFault {
                method: Some("POST".into()),
                path: "/nodes/{node}/lxc".into(),
                latency: Duration::from_millis(400),
                ..Default::default()
            }],
            ..Default::default()
        });
        let req = RestoreRequest::new(vmid(100), golden(&rig.sim), local_lvm());
        let other = client_for(
            &rig.sim,
            &rig.sim.endpoint().tokens.agent.clone(),
            RetryPolicy::fast(),
        );
        let (a, b) = tokio::join!(
            rig.client.restore_ct_next_id(&req),
            other.restore_ct_next_id(&req)
        );
        let ((ida, upa), (idb, upb)) = (a.unwrap(), b.unwrap());
        assert_ne!(ida, idb);
        rig.client.wait_task(Op::RestoreCt, &upa).await.unwrap();
        rig.client.wait_task(Op::RestoreCt, &upb).await.unwrap();
        let mut ids = rig.sim.guest_ids();
        ids.sort_unstable();
        let mut expected = vec![ida.get(), idb.get()];
        expected.sort_unstable();
        assert_eq!(ids, expected);
        rig.sim.shutdown().await;
    })
    .await;
}
