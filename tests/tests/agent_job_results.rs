//! Job results an operator can act on, through the real hub and `bosunctl`: a job says when it
//! began, how long it ran, whether signing it again may help and the tail of its steps; its
//! signed priority reaches the hub's queue. A decommission whose signed timeout passes while
//! the guest is locked ends `failed`, timed out and retriable, and destroys nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::jobs::{ctl, job_result, submit};
use agent_support::*;
use reqwest::Method;
use uuid::Uuid;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_says_when_the_job_ran_what_it_did_and_whether_to_retry() {
    let (sim, hub, files) = enrolled_stack().await;
    let operator = files.trusted_operator();
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let guest = Uuid::new_v4();
    hub.put_desired(host, &desired(&sim, &[(guest, "customer")], "running"))
        .await;
    let vmid = running_vmid(&agent.handles.reconcile, guest).await;
    let (host_s, guest_s, vmid_s) = (host.to_string(), guest.to_string(), vmid.to_string());
    let target = ["--host", &host_s, "--guest", &guest_s, "--vmid", &vmid_s];

    let mut args = vec![
        "--kind",
        "force-backup",
        "--timeout",
        "10m",
        "--priority",
        "7",
    ];
    args.extend_from_slice(&target);
    let backup = submit(&hub, &operator, files.dir.path(), &args).await;
    let result = job_result(&hub, host, backup).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    let started: jiff::Timestamp = result["started_at"].as_str().unwrap().parse().unwrap();
    let finished: jiff::Timestamp = result["finished_at"].as_str().unwrap().parse().unwrap();
    assert!(started <= finished, "{result}");
    let took = u64::try_from(finished.as_millisecond() - started.as_millisecond()).unwrap();
    assert_eq!(result["duration_ms"], took, "{result}");
    assert_eq!(result["retriable"], false, "{result}");
    assert!(result.get("timed_out").is_none(), "{result}");
    let tail: Vec<&str> = result["log_tail"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(tail.iter().any(|l| l.contains(" accepted ok")), "{tail:?}");
    assert!(tail.iter().any(|l| l.contains(" backup ok")), "{tail:?}");
    let (_, jobs) = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}/jobs"), None)
        .await;
    assert_eq!(jobs[0]["priority"], 7, "{jobs}");
    // `bosunctl job show` reads it back (by a prefix of its id).
    let prefix = backup.simple().to_string()[..12].to_owned();
    ctl(&hub, &["job", "show", "--host", &host_s, &prefix]).await;
    ctl(&hub, &["job", "list", "--host", &host_s]).await;

    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decommission_over_its_timeout_ends_timed_out_and_destroys_nothing() {
    let (sim, hub, files) = enrolled_stack().await;
    let operator = files.trusted_operator();
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let guest = Uuid::new_v4();
    hub.put_desired(host, &desired(&sim, &[(guest, "customer")], "running"))
        .await;
    let vmid = running_vmid(&agent.handles.reconcile, guest).await;
    // Orphaned, so the reconciler leaves it alone; locked, as by a backup that never ends.
    hub.put_desired(host, &desired(&sim, &[], "running")).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(sim.set_guest_lock(vmid, Some("backup")));
    let (host_s, guest_s, vmid_s) = (host.to_string(), guest.to_string(), vmid.to_string());
    let args = [
        "--kind",
        "decommission",
        "--timeout",
        "10s",
        "--host",
        &host_s,
        "--guest",
        &guest_s,
        "--vmid",
        &vmid_s,
    ];
    let decommission = submit(&hub, &operator, files.dir.path(), &args).await;
    let result = job_result(&hub, host, decommission).await;
    assert_eq!(result["outcome"], "failed", "{result}");
    assert_eq!(result["timed_out"], true, "{result}");
    assert_eq!(result["retriable"], true, "{result}");
    assert!(
        result["retriable_reason"]
            .as_str()
            .unwrap()
            .contains("timed out"),
        "{result}"
    );
    assert!(result["duration_ms"].as_u64().unwrap() >= 9_000, "{result}");
    assert_eq!(sim.guest_ids(), [vmid], "nothing destroyed");
    let destroys = sim
        .requests()
        .iter()
        .filter(|r| r.method == "DELETE")
        .count();
    assert_eq!(destroys, 0);
    // The journal closed the job: a later poll does not run it again.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(sim.guest_ids(), [vmid]);

    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
