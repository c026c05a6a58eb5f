//! A task that panics stops the agent: the process exits non-zero, for systemd's
//! `Restart=on-failure` to bring it back, instead of running on without the task. The agent
//! is this test binary re-run (`agent_support::crash`) with a failpoint armed: the storage
//! watcher's loop (`storage_watcher.pass.panic`), or a signed job's task
//! (`job.run.panic`). Started again without it, the agent runs, and the job it had not
//! claimed is run once the hub hands it over again. A panic while checking what the hub sent
//! (`job_intake.check.panic`) is not the agent's to die of: the agent runs on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::crash::*;
use agent_support::*;

/// When the hub last heard from `host` (`null` before its first poll).
async fn last_seen(hub: &RealHub, host: uuid::Uuid) -> serde_json::Value {
    let (_, hosts) = hub
        .admin(reqwest::Method::GET, "/v1/admin/hosts", None)
        .await;
    hosts
        .as_array()
        .into_iter()
        .flatten()
        .find(|h| h["host_id"] == host.to_string())
        .map(|h| h["last_seen"].clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_the_storage_watcher_ends_the_agent_with_a_failure() {
    use std::os::unix::process::ExitStatusExt;
    let (sim, hub, files) = enrolled_stack().await;
    let mut child = spawn_agent(&files.config_path, Some("storage_watcher.pass.panic"));
    let status = wait_exit(&mut child, Duration::from_secs(60)).await;
    let log = log_tail(&files.config_path, 400);
    let status = status.unwrap_or_else(|| {
        panic!("the agent runs on after its storage watcher panicked; its log ends:\n{log}")
    });
    // An exit with a failure, not a signal (an abort would be a crash, not a stop).
    assert!(
        status.signal().is_none() && status.code().is_some_and(|c| c != 0),
        "{status:?}; the agent's log ends:\n{log}"
    );
    for line in [
        "task storage_watcher panicked: failpoint storage_watcher.pass.panic tripped",
        "stopping after a task failed",
        // `run` returned the failure (the child unwraps it, as `main` maps it to exit 1).
        r#"TaskFailed(Panicked { task: "storage_watcher""#,
    ] {
        assert!(
            log.contains(line),
            "`{line}` missing; the agent's log ends:\n{log}"
        );
    }
    // It enrolled before the panic; restarted without the failpoint, it polls and stays up.
    let host = host_id(&files.state_dir).await;
    let before = last_seen(&hub, host).await;
    let mut child = spawn_agent(&files.config_path, None);
    eventually(Duration::from_secs(30), "the restarted agent polls", || {
        let (hub, before) = (&hub, before.clone());
        async move { last_seen(hub, host).await != before }
    })
    .await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "the agent exited; its log ends:\n{}",
        log_tail(&files.config_path, 80)
    );
    kill(&mut child);
    hub.stop().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_a_job_ends_the_agent_and_the_job_runs_after_the_restart() {
    use std::os::unix::process::ExitStatusExt;
    let (sim, hub, files) = enrolled_stack().await;
    let operator = files.trusted_operator();
    let mut child = spawn_agent(&files.config_path, Some("job.run.panic"));
    let host = host_id(&files.state_dir).await;
    let guest = uuid::Uuid::new_v4();
    hub.put_desired(host, &desired(&sim, &[(guest, "alpha")], "running"))
        .await;
    eventually(Duration::from_secs(60), "guest alpha runs", || {
        let sim = &sim;
        async move {
            sim.guest_ids()
                .iter()
                .any(|v| sim.guest_running(*v) == Some(true))
        }
    })
    .await;
    let vmid = sim.guest_ids()[0].to_string();
    let (host_s, guest_s) = (host.to_string(), guest.to_string());
    let args = [
        "--kind",
        "force-backup",
        "--host",
        &host_s,
        "--guest",
        &guest_s,
        "--vmid",
        &vmid,
    ];
    let job = jobs::submit(&hub, &operator, files.dir.path(), &args).await;

    let status = wait_exit(&mut child, Duration::from_secs(60)).await;
    let log = log_tail(&files.config_path, 400);
    let status = status.unwrap_or_else(|| {
        panic!("the agent runs on after a job's task panicked; its log ends:\n{log}")
    });
    assert!(
        status.signal().is_none() && status.code().is_some_and(|c| c != 0),
        "{status:?}; the agent's log ends:\n{log}"
    );
    assert!(
        log.contains("task job panicked: failpoint job.run.panic tripped"),
        "the agent's log ends:\n{log}"
    );
    let (_, listed) = hub
        .admin(
            reqwest::Method::GET,
            &format!("/v1/admin/hosts/{host}/jobs"),
            None,
        )
        .await;
    let listed = listed
        .as_array()
        .into_iter()
        .flatten()
        .find(|j| j["job_id"] == job.to_string().as_str())
        .cloned()
        .unwrap_or_default();
    assert!(
        listed["result"].is_null(),
        "the job ended before its task panicked: {listed}"
    );

    // Restarted without the failpoint: the hub hands the job over again and it runs.
    let mut child = spawn_agent(&files.config_path, None);
    let result = jobs::job_result(&hub, host, job).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    kill(&mut child);
    hub.stop().await;
    sim.shutdown().await;
}

/// A panic while checking the jobs the hub sent (before any signature is trusted) fails that
/// batch only: the agent runs on and keeps polling, so a hub cannot stop it by sending the
/// same bytes again and again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_while_checking_the_hubs_jobs_leaves_the_agent_running() {
    let (sim, hub, files) = enrolled_stack().await;
    let operator = files.trusted_operator();
    let mut child = spawn_agent(&files.config_path, Some("job_intake.check.panic"));
    let host = host_id(&files.state_dir).await;
    let (host_s, guest_s) = (host.to_string(), uuid::Uuid::new_v4().to_string());
    let args = [
        "--kind",
        "force-backup",
        "--host",
        &host_s,
        "--guest",
        &guest_s,
        "--vmid",
        "100",
    ];
    jobs::submit(&hub, &operator, files.dir.path(), &args).await;
    let config = files.config_path.clone();
    eventually(
        Duration::from_secs(60),
        "a checked batch panicked twice",
        || {
            let config = config.clone();
            async move {
                log_tail(&config, 2_000)
                    .matches("checking the jobs the hub sent panicked")
                    .count()
                    >= 2
            }
        },
    )
    .await;
    let before = last_seen(&hub, host).await;
    eventually(Duration::from_secs(30), "the agent polls on", || {
        let (hub, before) = (&hub, before.clone());
        async move { last_seen(hub, host).await != before }
    })
    .await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "the agent exited; its log ends:\n{}",
        log_tail(&files.config_path, 80)
    );
    kill(&mut child);
    hub.stop().await;
    sim.shutdown().await;
}
