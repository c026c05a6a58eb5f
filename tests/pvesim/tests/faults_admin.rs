//! Fault injection (seeded), the admin endpoint and the TOML configuration.

use crate::common;

use std::time::{Duration, Instant};

use bosun_pvesim::{EndpointFault, FaultConfig, SimConfig, StaleLock};
use common::{start, start_with};

fn rule(method: &str, path: &str) -> EndpointFault {
    EndpointFault {
        method: Some(method.to_owned()),
        path: path.to_owned(),
        ..EndpointFault::default()
    }
}

#[tokio::test]
async fn dropped_connection_on_task_status_mid_wait_really_closes_the_connection() {
    let sim = start().await;
    sim.restore_golden(101).await;
    let upid = sim
        .call("POST", "/nodes/pve/lxc/101/status/start", &[])
        .await
        .upid();
    sim.handle.set_faults(FaultConfig {
        endpoints: vec![EndpointFault {
            latency: Duration::from_millis(150),
            drop_rate: 1.0,
            ..rule("GET", "/nodes/{node}/tasks/{upid}/status")
        }],
        ..FaultConfig::default()
    });
    sim.handle.clear_requests();
    let started = Instant::now();
    let err = sim
        .client
        .get(sim.url(&format!("/nodes/pve/tasks/{upid}/status")))
        .header("Authorization", sim.agent().header_value())
        .send()
        .await
        .expect_err("the connection is dropped without a response");
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "dropped after the latency"
    );
    assert!(
        err.status().is_none(),
        "no HTTP status was received: {err:?}"
    );
    let log = sim.handle.requests();
    assert!(!log.is_empty());
    assert!(log.iter().all(|l| l.status == 0), "{log:?}");
    // other endpoints are unaffected
    assert_eq!(sim.call("GET", "/version", &[]).await.status, 200);
    sim.handle.set_faults(FaultConfig::default());
    let r = sim
        .call("GET", &format!("/nodes/pve/tasks/{upid}/status"), &[])
        .await;
    assert_eq!(r.data()["status"], "stopped");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn busy_596_and_injected_500() {
    let sim = start().await;
    sim.handle.set_faults(FaultConfig {
        endpoints: vec![
            EndpointFault {
                busy_rate: 1.0,
                ..rule("GET", "/version")
            },
            EndpointFault {
                error_rate: 1.0,
                error_message: "unable to read node status".to_owned(),
                ..rule("GET", "/nodes")
            },
        ],
        ..FaultConfig::default()
    });
    assert_eq!(sim.call("GET", "/version", &[]).await.status, 596);
    let r = sim.call("GET", "/nodes", &[]).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.message(), "unable to read node status\n");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn fault_rolls_are_deterministic_for_a_seed() {
    async fn statuses(seed: u64) -> Vec<u16> {
        let sim = start_with(SimConfig {
            time_scale: 0.0,
            auth_failure_delay: Duration::ZERO,
            seed,
            faults: FaultConfig {
                endpoints: vec![EndpointFault {
                    error_rate: 0.5,
                    ..rule("GET", "/version")
                }],
                ..FaultConfig::default()
            },
            ..SimConfig::default()
        })
        .await;
        let mut out = Vec::new();
        for _ in 0..24 {
            out.push(sim.call("GET", "/version", &[]).await.status);
        }
        sim.handle.shutdown().await;
        out
    }
    let a = statuses(7).await;
    let b = statuses(7).await;
    assert_eq!(a, b);
    assert!(a.contains(&200) && a.contains(&500), "{a:?}");
}

#[tokio::test]
async fn failed_task_rate_fails_tasks_of_the_chosen_type() {
    let sim = start().await;
    sim.restore_golden(101).await;
    sim.handle.set_faults(FaultConfig {
        failed_task_rate: 1.0,
        failed_task_types: vec!["vzstart".to_owned()],
        ..FaultConfig::default()
    });
    let upid = sim
        .call("POST", "/nodes/pve/lxc/101/status/start", &[])
        .await
        .upid();
    assert_eq!(sim.wait(&upid).await, "startup for container '101' failed");
    assert_eq!(sim.handle.guest_running(101), Some(false));
    let log = sim.handle.task_log(&upid).expect("log");
    assert_eq!(
        log.last().map(String::as_str),
        Some("TASK ERROR: startup for container '101' failed")
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn stale_lock_blocks_changes_and_no_token_call_clears_it() {
    let sim = start().await;
    sim.restore_golden(101).await;
    sim.handle.set_faults(FaultConfig {
        stale_locks: vec![StaleLock {
            vmid: 101,
            lock: "backup".to_owned(),
        }],
        ..FaultConfig::default()
    });
    let conf = sim.call("GET", "/nodes/pve/lxc/101/config", &[]).await;
    assert_eq!(conf.data()["lock"], "backup");
    let r = sim
        .call_as(
            &sim.root(),
            "PUT",
            "/nodes/pve/lxc/101/config",
            &[("delete", "lock")],
        )
        .await;
    assert_eq!(r.message(), "CT is locked (backup)\n");
    let r = sim.call("DELETE", "/nodes/pve/lxc/101", &[]).await;
    assert_eq!(r.message(), "CT is locked (backup)\n");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn admin_endpoint_needs_the_admin_token_and_serves_log_and_faults() {
    let sim = start().await;
    let ep = sim.handle.endpoint().clone();
    sim.call("GET", "/version", &[]).await;
    let r = sim
        .client
        .get(format!("{}/requests", ep.admin_url))
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status().as_u16(), 401);
    let r = sim
        .client
        .get(format!("{}/requests", ep.admin_url))
        .bearer_auth(&ep.admin_token)
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status().as_u16(), 200);
    let log: Vec<bosun_pvesim::LoggedRequest> = r.json().await.expect("json");
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].path, "/version");
    let faults = FaultConfig {
        endpoints: vec![EndpointFault {
            busy_rate: 1.0,
            ..rule("GET", "/version")
        }],
        ..FaultConfig::default()
    };
    let r = sim
        .client
        .post(format!("{}/faults", ep.admin_url))
        .bearer_auth(&ep.admin_token)
        .json(&faults)
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(sim.handle.faults(), faults);
    assert_eq!(sim.call("GET", "/version", &[]).await.status, 596);
    let r = sim
        .client
        .delete(format!("{}/requests", ep.admin_url))
        .bearer_auth(&ep.admin_token)
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status().as_u16(), 204);
    assert!(sim.handle.requests().is_empty());
    sim.handle.shutdown().await;
}

#[test]
fn config_file_is_toml_with_millisecond_durations() {
    let text = r#"
        node = "pve1"
        time_scale = 0.5
        auth_failure_delay = 10
        seed = 42

        [durations]
        vzdump = 1500

        [faults]
        failed_task_rate = 0.25

        [[faults.endpoints]]
        method = "GET"
        path = "/nodes/{node}/tasks/{upid}/status"
        drop_rate = 0.1
        latency = 200

        [[faults.stale_locks]]
        vmid = 100
        lock = "backup"
    "#;
    let config: SimConfig = toml::from_str(text).expect("parses");
    assert_eq!(config.node, "pve1");
    assert_eq!(config.auth_failure_delay, Duration::from_millis(10));
    assert_eq!(config.durations.vzdump, Duration::from_millis(1500));
    assert_eq!(
        config.durations.vzstart,
        Duration::from_secs(3),
        "defaults fill the rest"
    );
    assert_eq!(
        config.faults.endpoints[0].latency,
        Duration::from_millis(200)
    );
    assert_eq!(config.faults.stale_locks[0].lock, "backup");
    assert!(
        toml::from_str::<SimConfig>("bogus = 1").is_err(),
        "unknown keys are rejected"
    );
}

#[tokio::test]
async fn drop_after_carries_the_request_out_then_closes_the_connection() {
    let sim = start().await;
    sim.restore_golden(101).await;
    sim.handle.set_faults(FaultConfig {
        endpoints: vec![EndpointFault {
            drop_after_rate: 1.0,
            ..rule("DELETE", "/nodes/{node}/lxc/{vmid}")
        }],
        ..FaultConfig::default()
    });
    sim.handle.clear_requests();
    let err = sim
        .client
        .delete(sim.url("/nodes/pve/lxc/101"))
        .header("Authorization", sim.agent().header_value())
        .send()
        .await
        .expect_err("the answer is dropped");
    assert!(err.status().is_none(), "no HTTP status: {err:?}");
    sim.handle.set_faults(FaultConfig::default());
    // The destroy task was started all the same: the guest disappears.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = sim.call("GET", "/nodes/pve/lxc/101/config", &[]).await;
        if r.status != 200 {
            assert!(r.message().contains("does not exist"), "{}", r.message());
            break;
        }
        assert!(Instant::now() < deadline, "the destroy never happened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let tasks = sim
        .call("GET", "/nodes/pve/tasks", &[("vmid", "101")])
        .await;
    let types: Vec<&str> = tasks
        .data()
        .as_array()
        .expect("task list")
        .iter()
        .filter_map(|t| t["type"].as_str())
        .collect();
    assert!(types.contains(&"vzdestroy"), "{types:?}");
    let log = sim.handle.requests();
    assert_eq!(log[0].method, "DELETE");
    assert_eq!(log[0].status, 0, "logged as dropped");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn a_request_whose_client_gave_up_during_latency_is_still_carried_out() {
    let sim = start().await;
    sim.restore_golden(101).await;
    sim.handle.set_faults(FaultConfig {
        endpoints: vec![EndpointFault {
            latency: Duration::from_millis(400),
            ..rule("DELETE", "/nodes/{node}/lxc/{vmid}")
        }],
        ..FaultConfig::default()
    });
    let err = sim
        .client
        .delete(sim.url("/nodes/pve/lxc/101"))
        .header("Authorization", sim.agent().header_value())
        .timeout(Duration::from_millis(100))
        .send()
        .await
        .expect_err("the client times out first");
    assert!(err.is_timeout(), "{err:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = sim.call("GET", "/nodes/pve/lxc/101/config", &[]).await;
        if r.status != 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the abandoned destroy was never carried out"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sim.handle.shutdown().await;
}
