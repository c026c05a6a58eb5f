//! The reconciler's failure counts survive what used to reset them: a guest whose start keeps
//! failing reaches `broken` after the bounded attempts (5) though the agent restarts and the
//! hub republishes the same desired state between every two attempts, and it is not started a
//! sixth time. A guest being made is reported `provisioning`, to the hub too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::*;
use bosun_proto::report::GuestStatus;
use bosun_pvesim::{EndpointFault, FaultConfig};
use uuid::Uuid;

fn start_attempts(sim: &bosun_pvesim::SimHandle) -> usize {
    sim.requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/status/start"))
        .count()
}

async fn guest_status_at_hub(hub: &RealHub, host: Uuid, vmid: u32) -> Option<String> {
    let detail = hub.host(host).await;
    detail["last_report"]["guests"]
        .as_array()?
        .iter()
        .find(|g| g["vmid"] == vmid)?["status"]
        .as_str()
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_that_keeps_failing_reaches_broken_across_restarts_and_republishes() {
    let (sim, hub, files) = enrolled_stack().await;
    let mut agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let guest = Uuid::new_v4();
    hub.put_desired(host, &desired(&sim, &[(guest, "fragile")], "stopped"))
        .await;
    eventually(
        Duration::from_secs(60),
        "guest provisioned, stopped",
        || {
            let sim = sim.clone();
            async move {
                let ids = sim.guest_ids();
                ids.len() == 1 && sim.guest_running(ids[0]) == Some(false)
            }
        },
    )
    .await;
    let vmid = sim.guest_ids()[0];
    sim.set_faults(FaultConfig {
        failed_task_rate: 1.0,
        failed_task_types: vec!["vzstart".into()],
        ..FaultConfig::default()
    });
    sim.clear_requests();
    let running = desired(&sim, &[(guest, "fragile")], "running");
    hub.put_desired(host, &running).await;
    // After each failed start, before the next: a restart of the agent, then a republished
    // (identical) desired state, in turn. Either used to give the guest five fresh attempts.
    for attempt in 1..5 {
        eventually(Duration::from_secs(60), "one more failed start", || {
            let sim = sim.clone();
            async move { start_attempts(&sim) >= attempt }
        })
        .await;
        if attempt % 2 == 1 {
            agent.stop().await;
            agent = InProcessAgent::start(&files.config_path).await;
        } else {
            hub.put_desired(host, &running).await;
        }
    }
    eventually(
        Duration::from_secs(90),
        "hub shows the guest broken",
        || {
            let hub = &hub;
            async move { guest_status_at_hub(hub, host, vmid).await.as_deref() == Some("broken") }
        },
    )
    .await;
    assert_eq!(start_attempts(&sim), 5, "five start attempts in all");
    // A republished generation does not buy it more attempts either.
    hub.put_desired(host, &running).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(start_attempts(&sim), 5, "a broken guest is not retried");
    assert_eq!(
        guest_status_at_hub(&hub, host, vmid).await.as_deref(),
        Some("broken")
    );
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_being_made_is_reported_provisioning() {
    let (sim, hub, files) = enrolled_stack().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    // Every task takes a while to be seen ending: provisioning lasts seconds.
    sim.set_faults(FaultConfig {
        endpoints: vec![EndpointFault {
            method: Some("GET".into()),
            path: "/nodes/{node}/tasks/{upid}/status".into(),
            latency: Duration::from_millis(700),
            ..EndpointFault::default()
        }],
        ..FaultConfig::default()
    });
    let guest = Uuid::new_v4();
    let mut status = agent.handles.reconcile.clone();
    hub.put_desired(host, &desired(&sim, &[(guest, "newborn")], "running"))
        .await;
    let provisioning = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let found = status
                .borrow_and_update()
                .guests
                .iter()
                .find(|g| g.guest_id == Some(guest) && g.status == GuestStatus::Provisioning)
                .map(|g| g.vmid);
            if let Some(vmid) = found {
                return vmid;
            }
            status.changed().await.unwrap();
        }
    })
    .await
    .expect("the agent reports the guest provisioning");
    eventually(
        Duration::from_secs(60),
        "the hub shows it provisioning",
        || {
            let hub = &hub;
            async move {
                guest_status_at_hub(hub, host, provisioning)
                    .await
                    .as_deref()
                    == Some("provisioning")
            }
        },
    )
    .await;
    sim.set_faults(FaultConfig::default());
    eventually(Duration::from_secs(60), "then running", || {
        let hub = &hub;
        async move {
            guest_status_at_hub(hub, host, provisioning)
                .await
                .as_deref()
                == Some("running")
        }
    })
    .await;
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
