//! Backups through the local API: every phase from the real vzdump log, the suspend-mode
//! fallback, failure by fault injection, one run at a time, and `/v1/backup/due`.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

use crate::localapi_support;

use bosun_pvesim::FaultConfig;
use localapi_support::{Harness, Options, daily_policy};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiesced_backup_walks_every_phase_and_is_journaled() {
    let h = Harness::start().await;
    let (status, run) = h
        .post(
            0,
            "/v1/backup",
            // A whole number written as a float is the integer the document says.
            json!({"quiesced": true, "max_quiesce_s": 120.0}),
        )
        .await;
    assert_eq!(status, 202, "{run}");
    assert_eq!(run["phase"], "queued");
    assert_eq!(run["quiesced"], true);
    assert_eq!(run["max_quiesce_s"], 120);
    assert_eq!(run["mode"], "snapshot");

    // A second request while one runs is refused.
    let (status, body) = h.post(0, "/v1/backup", json!({})).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["code"], "backup_in_progress");

    let (phases, last) = h.follow_backup(0).await;
    assert_eq!(last["phase"], "done", "{last}");
    for p in ["snapshotted", "done"] {
        assert!(
            phases.contains(&p.to_owned()),
            "{p} missing from {phases:?}"
        );
    }
    let pos = |p: &str| phases.iter().position(|x| x == p);
    assert!(pos("snapshotted") < pos("done"));
    if let Some(running) = pos("running") {
        assert!(running < pos("snapshotted").unwrap());
    }
    assert_eq!(last["storage_snapshot"], "taken");
    assert!(last["consistent_at"].is_string());
    let archive = last["archive"].as_str().unwrap();
    assert!(
        archive.starts_with("local:backup/vzdump-lxc-101-"),
        "{archive}"
    );
    assert!(h.sim.storage_volumes("local").iter().any(|v| v == archive));

    // The snapshot line really came before the end of the task.
    let upid = last["upid"].as_str().unwrap();
    let log = h.sim.task_log(upid).unwrap();
    let snap = log
        .iter()
        .position(|l| l.contains("create storage snapshot 'vzdump'"));
    let fin = log
        .iter()
        .position(|l| l.contains("Finished Backup of VM 101"));
    assert!(snap.is_some() && snap < fin, "{log:?}");

    // The vzdump call named only the caller's guest, in snapshot mode.
    let vzdumps: Vec<_> = h
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/vzdump"))
        .collect();
    assert_eq!(vzdumps.len(), 1);
    assert!(
        vzdumps[0]
            .params
            .contains(&("vmid".to_owned(), "101".to_owned()))
    );
    assert!(
        vzdumps[0]
            .params
            .contains(&("mode".to_owned(), "snapshot".to_owned()))
    );

    let op_id: bosun_agentd::ops::journal::OpId = last["run_id"].as_str().unwrap().parse().unwrap();
    let op = h.journal.operation(op_id).await.unwrap().unwrap();
    assert_eq!(op.kind, "backup");
    assert_eq!(op.status, bosun_agentd::ops::journal::OpStatus::Done);
    let steps = h.journal.steps(op_id).await.unwrap();
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].upid.as_deref(), Some(upid));

    // The other guest has no run.
    let (_, other) = h.get(1, "/v1/backup/status").await;
    assert!(other["run"].is_null(), "{other}");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_that_cannot_snapshot_is_consistent_only_when_archived() {
    let h = Harness::start_with(Options {
        guests: 0,
        dir_guests: 1,
        ..Options::default()
    })
    .await;
    let (status, _) = h.post(0, "/v1/backup", json!({"quiesced": true})).await;
    assert_eq!(status, 202);
    let (phases, last) = h.follow_backup(0).await;
    assert_eq!(last["phase"], "done", "{last}");
    assert!(
        !phases.contains(&"snapshotted".to_owned()),
        "no storage snapshot, so no snapshotted phase before the archive: {phases:?}"
    );
    assert_eq!(last["storage_snapshot"], "unavailable");
    let log = h.sim.task_log(last["upid"].as_str().unwrap()).unwrap();
    assert!(
        log.iter()
            .any(|l| l.contains("trying 'suspend' mode instead")),
        "{log:?}"
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_vzdump_ends_failed_with_its_reason() {
    let h = Harness::start().await;
    h.sim.set_faults(FaultConfig {
        failed_task_rate: 1.0,
        failed_task_types: vec!["vzdump".to_owned()],
        ..FaultConfig::default()
    });
    let (status, _) = h.post(0, "/v1/backup", json!({"quiesced": true})).await;
    assert_eq!(status, 202);
    let (phases, last) = h.follow_backup(0).await;
    assert_eq!(last["phase"], "failed", "{phases:?} {last}");
    let error = last["error"].as_str().unwrap();
    assert!(error.contains("vzdump failed"), "{error}");
    let op_id: bosun_agentd::ops::journal::OpId = last["run_id"].as_str().unwrap().parse().unwrap();
    let op = h.journal.operation(op_id).await.unwrap().unwrap();
    assert_eq!(op.status, bosun_agentd::ops::journal::OpStatus::Failed);

    // After a failure a new run may start, and with the fault gone it succeeds.
    h.sim.set_faults(FaultConfig::default());
    let (status, _) = h.post(0, "/v1/backup", json!({})).await;
    assert_eq!(status, 202);
    let (_, last) = h.follow_backup(0).await;
    assert_eq!(last["phase"], "done", "{last}");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_vzdump_call_fails_the_run() {
    let h = Harness::start().await;
    h.sim.set_faults(FaultConfig {
        endpoints: vec![bosun_pvesim::EndpointFault {
            method: Some("POST".to_owned()),
            path: "/nodes/{node}/vzdump".to_owned(),
            error_rate: 1.0,
            error_message: "vzdump is disabled".to_owned(),
            ..Default::default()
        }],
        ..FaultConfig::default()
    });
    let (status, _) = h.post(0, "/v1/backup", json!({})).await;
    assert_eq!(status, 202);
    let (_, last) = h.follow_backup(0).await;
    assert_eq!(last["phase"], "failed");
    assert!(
        last["error"]
            .as_str()
            .unwrap()
            .contains("vzdump was refused"),
        "{last}"
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_due_follows_the_policy_and_the_last_success() {
    let h = Harness::start().await;
    let (status, body) = h.get(0, "/v1/backup/due").await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["code"], "no_backup_policy");

    h.policy.send_replace(Some(daily_policy("funday 01:00", 0)));
    let (status, body) = h.get(0, "/v1/backup/due").await;
    assert_eq!(status, 409);
    assert_eq!(body["code"], "backup_policy_invalid");

    // Every hour: the guest never had a backup, so one is due, with a deadline.
    h.policy.send_replace(Some(daily_policy("hourly", 15)));
    let (status, due) = h.get(0, "/v1/backup/due").await;
    assert_eq!(status, 200, "{due}");
    assert_eq!(due["due"], true, "{due}");
    assert_eq!(due["mode"], "snapshot");
    assert_eq!(due["interval_s"], 3600);
    assert_eq!(due["quiesce_grace_minutes"], 15);
    assert!(due["last_success"].is_null());
    let since: jiff::Timestamp = due["due_since"].as_str().unwrap().parse().unwrap();
    let deadline: jiff::Timestamp = due["deadline"].as_str().unwrap().parse().unwrap();
    assert_eq!(deadline.duration_since(since).as_secs(), 15 * 60);

    let (status, _) = h.post(0, "/v1/backup", json!({"quiesced": true})).await;
    assert_eq!(status, 202);
    let (_, last) = h.follow_backup(0).await;
    assert_eq!(last["phase"], "done");
    let (_, due) = h.get(0, "/v1/backup/due").await;
    assert_eq!(due["due"], false, "{due}");
    assert!(due["deadline"].is_null());
    assert!(due["last_success"].is_string());
    // The other guest is still due.
    let (_, other) = h.get(1, "/v1/backup/due").await;
    assert_eq!(other["due"], true);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_last_success_comes_from_the_backup_storage() {
    let h = Harness::start().await;
    h.policy.send_replace(Some(daily_policy("hourly", 0)));
    let (status, _) = h.post(0, "/v1/backup", json!({})).await;
    assert_eq!(status, 202);
    assert_eq!(h.follow_backup(0).await.1["phase"], "done");
    // A fresh service (as after a restart) knows nothing in memory and reads the storage.
    let fresh = bosun_agentd::data::backup::BackupService::new(
        bosun_pve::PveOps::shared(h.pve.clone()),
        h.journal.clone(),
        h.queue.clone(),
        bosun_agentd::clock::SystemClock::shared(),
        h.backups.config().clone(),
    );
    let guest = bosun_agentd::data::backup::GuestRef {
        guest_id: h.guest(0).guest_id.clone(),
        vmid: bosun_pve::Vmid::new(101).unwrap(),
        kind: bosun_proto::desired::GuestKind::Lxc,
    };
    let last = fresh.last_success(&guest).await.unwrap();
    assert!(last.is_some());
    let other = bosun_agentd::data::backup::GuestRef {
        guest_id: h.guest(1).guest_id.clone(),
        vmid: bosun_pve::Vmid::new(102).unwrap(),
        kind: bosun_proto::desired::GuestKind::Lxc,
    };
    assert_eq!(fresh.last_success(&other).await.unwrap(), None);
    h.shutdown().await;
}
