//! The last backup per (guest, target) reaches the hub from the agent's journal: a backup
//! the in-guest controller asks for on the local API shows up at the hub at once as `ok`,
//! a later signed `force-backup` job whose vzdump fails (a simulator fault) replaces it as
//! failed, and an agent started again reports the same from its journal in its first,
//! full report. Backups a stop interrupted (a vzdump sent, or only intended) are ended at
//! the next start and reported like any other.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;
use crate::guest_check;

#[allow(dead_code)] // shared with other suites
use std::time::Duration;

use agent_support::jobs::{job_result, submit};
use agent_support::*;
use bosun_agentd::ops::journal::{JournalHandle, NewOperation};
use bosun_proto::report::{BackupReport, GuestStatus, StateReport};
use bosun_pve::{Pve, StorageId, Vmid, VzdumpRequest};
use bosun_pvesim::FaultConfig;
use serde_json::{Value, json};
use uuid::Uuid;

/// The report the hub holds for `host`, if any.
async fn stored_report(hub: &RealHub, host: Uuid) -> Option<StateReport> {
    let detail = hub.host(host).await;
    serde_json::from_value(detail["last_report"].clone()).ok()
}

/// The hub's last backup of `guest`, once it has one for which `accept` holds.
async fn hub_backup(
    hub: &RealHub,
    host: Uuid,
    guest: Uuid,
    limit: Duration,
    accept: impl Fn(&BackupReport) -> bool,
) -> BackupReport {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let found = stored_report(hub, host).await.and_then(|r| {
            r.last_backups
                .into_iter()
                .find(|b| b.guest_id == guest && accept(b))
        });
        if let Some(backup) = found {
            return backup;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the hub shows no such backup of {guest} within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_backups_reach_the_hub_at_once_and_survive_an_agent_restart() {
    let (sim, hub, files) = enrolled_stack().await;
    let operator = files.trusted_operator();
    let helper = files.helper.clone();
    files.use_local_api(0, "[backup]\nstorage = \"local\"\n");

    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let guest = Uuid::new_v4();
    hub.put_desired(host, &desired(&sim, &[(guest, "alpha")], "running"))
        .await;
    let status = agent.handles.reconcile.clone();
    let vmid = running_vmid(&status, guest).await;
    eventually(Duration::from_secs(30), "the bootstrap is pushed", || {
        let path = helper.bootstrap_path(vmid);
        async move { path.exists() }
    })
    .await;
    let doc = helper.read_bootstrap(vmid);
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let report = stored_report(&hub, host).await.expect("the host reported");
    assert!(report.last_backups.is_empty(), "no backup yet: {report:?}");

    // 1. A backup through the local API: the hub has it at once (the hub holds an idle
    //    poll for 5 s, so waiting for the next regular poll would take longer).
    let run = local_backup(&client, &doc.local_api.url, doc.local_api.token.expose()).await;
    assert_eq!(run["phase"], "done", "{run}");
    let archive = run["archive"].as_str().unwrap().to_owned();
    let first = hub_backup(&hub, host, guest, Duration::from_millis(2_500), |b| b.ok).await;
    assert_eq!(first.target, "local");
    assert!(sim.storage_volumes("local").contains(&archive), "{archive}");
    assert!(
        first.size_bytes.is_some_and(|s| s > 0),
        "the archive's size is reported: {first:?}"
    );

    // 2. A signed force-backup job whose vzdump fails: the hub's entry turns failed.
    sim.set_faults(FaultConfig {
        failed_task_rate: 1.0,
        failed_task_types: vec!["vzdump".into()],
        ..FaultConfig::default()
    });
    let (host_s, guest_s, vmid_s) = (host.to_string(), guest.to_string(), vmid.to_string());
    let job = submit(
        &hub,
        &operator,
        files.dir.path(),
        &[
            "--kind",
            "force-backup",
            "--host",
            &host_s,
            "--guest",
            &guest_s,
            "--vmid",
            &vmid_s,
        ],
    )
    .await;
    let result = job_result(&hub, host, job).await;
    assert_eq!(result["outcome"], "failed", "{result}");
    let second = hub_backup(&hub, host, guest, Duration::from_secs(10), |b| !b.ok).await;
    assert_eq!(second.target, "local");
    assert!(second.finished_at > first.finished_at);
    assert_eq!(second.size_bytes, None);
    let before = stored_report(&hub, host).await.unwrap();
    assert_eq!(
        before.last_backups,
        vec![second.clone()],
        "one entry per (guest, target)"
    );
    sim.set_faults(FaultConfig::default());

    // 3. The agent restarts: its first report is full and carries the same, from the journal.
    agent.stop().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let hub_status = agent.handles.hub.clone();
    eventually(
        Duration::from_secs(30),
        "a full report after the restart",
        || {
            let hub_status = hub_status.clone();
            async move { hub_status.borrow().full_reports >= 1 }
        },
    )
    .await;
    let after = stored_report(&hub, host).await.unwrap();
    assert!(
        after.seq > before.seq,
        "the report after the restart replaced the one before ({} then {})",
        before.seq,
        after.seq
    );
    assert_eq!(after.last_backups, vec![second]);
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

async fn assert_no_backup_running(agent: &InProcessAgent) {
    let unfinished = agent.handles.journal.unfinished_operations().await.unwrap();
    assert!(
        unfinished.iter().all(|u| u.operation.kind != "backup"),
        "no backup is left running"
    );
}

/// Where a stop left a backup's `vzdump` step.
#[derive(Clone, Copy)]
enum StoppedAt<'a> {
    /// Only intended: nothing reached Proxmox.
    Intended,
    /// Sent: Proxmox runs task `upid`.
    Sent(&'a str),
    /// Task `upid` finished and the step says so, but the run was never recorded.
    Finished(&'a str),
}

/// Journals a backup of `guest` whose `vzdump` step (`detail`) a stop left at `at`.
async fn interrupted(
    journal: &JournalHandle,
    guest: Uuid,
    vmid: u32,
    at: StoppedAt<'_>,
    detail: Value,
) {
    let op = journal
        .begin_operation(NewOperation {
            kind: bosun_agentd::ops::operation::OpKind::Backup,
            guest_id: Some(guest.to_string()),
            vmid: Some(vmid),
            job_id: None,
            request_id: None,
        })
        .await
        .unwrap();
    let seq = journal.step_intent(op, "vzdump", detail).await.unwrap();
    if let StoppedAt::Sent(upid) | StoppedAt::Finished(upid) = at {
        journal
            .step_sent(op, seq, Some(upid.to_owned()))
            .await
            .unwrap();
        if let StoppedAt::Finished(_) = at {
            journal
                .step_finished(
                    op,
                    seq,
                    bosun_agentd::ops::journal::StepOutcome::Ok { warnings: 0 },
                )
                .await
                .unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backups_a_stop_interrupted_end_at_the_next_start_and_reach_the_hub() {
    let (sim, hub, files) = enrolled_stack().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let (sent, intended) = (Uuid::new_v4(), Uuid::new_v4());
    hub.put_desired(
        host,
        &desired(&sim, &[(sent, "sent"), (intended, "intended")], "running"),
    )
    .await;
    let status = agent.handles.reconcile.clone();
    eventually(Duration::from_secs(60), "both guests run", || {
        let status = status.clone();
        async move {
            status
                .borrow()
                .guests
                .iter()
                .filter(|g| g.status == GuestStatus::Running)
                .count()
                == 2
        }
    })
    .await;
    let vmid_of = |guest: Uuid| {
        status
            .borrow()
            .guests
            .iter()
            .find(|g| g.guest_id == Some(guest))
            .map(|g| g.vmid)
            .unwrap()
    };
    let (sent_vmid, intended_vmid) = (vmid_of(sent), vmid_of(intended));
    agent.stop().await;

    // While the agent is down: one vzdump reached Proxmox (and runs on), one never did.
    let upid = root_client(&sim)
        .vzdump(&VzdumpRequest::new(
            Vmid::new(sent_vmid).unwrap(),
            StorageId::new("local".to_owned()).unwrap(),
        ))
        .await
        .unwrap()
        .to_string();
    let journal = JournalHandle::open(
        &files.state_dir.join("journal.sqlite"),
        bosun_agentd::clock::SystemClock::shared(),
    )
    .await
    .unwrap();
    let local = |vmid: u32| json!({ "vmid": vmid, "storage": "local", "mode": "snapshot" });
    let sent_at = StoppedAt::Sent(&upid);
    interrupted(&journal, sent, sent_vmid, sent_at, local(sent_vmid)).await;
    let intended_at = StoppedAt::Intended;
    interrupted(
        &journal,
        intended,
        intended_vmid,
        intended_at,
        local(intended_vmid),
    )
    .await;
    journal.close().await.unwrap();

    let agent = InProcessAgent::start(&files.config_path).await;
    let ok = hub_backup(&hub, host, sent, Duration::from_secs(30), |b| b.ok).await;
    assert_eq!(ok.target, "local");
    assert!(ok.size_bytes.is_some_and(|s| s > 0), "{ok:?}");
    let failed = hub_backup(&hub, host, intended, Duration::from_secs(30), |b| !b.ok).await;
    assert_eq!(failed.target, "local");
    assert_no_backup_running(&agent).await;
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

/// A later tier's run a stop interrupted ends at the next start under its own tier and
/// target, whichever step the stop hit: only intended (ends failed), sent (the PBS archive
/// it wrote is found) or finished but not yet recorded (found too). Each is reported under
/// the target's durable id and tier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_offsite_run_ends_under_its_tier_and_target_at_every_step() {
    const DURABLE: &str = "backup@pbs@pbs.example:store1";
    let (sim, hub, files) = enrolled_stack().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let (intended, sent, finished) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let guests = [
        (intended, "intended"),
        (sent, "sent"),
        (finished, "finished"),
    ];
    hub.put_desired(host, &desired(&sim, &guests, "running"))
        .await;
    let mut vmids = Vec::new();
    for (guest, _) in guests {
        vmids.push(running_vmid(&agent.handles.reconcile, guest).await);
    }
    agent.stop().await;
    let root = root_client(&sim);
    let offsite = StorageId::new("offsite".to_owned()).unwrap();
    // Encrypted with the host's K, as the agent registers PBS: only such archives are proven.
    let k = bosun_agentd::trust::keys::pbs_key::PbsKeySource::new(&files.state_dir, false)
        .load()
        .unwrap()
        .expect("the agent made K");
    root.create_storage(&bosun_pve::StorageCreate {
        storage: offsite.clone(),
        kind: bosun_pve::StorageKind::Pbs {
            server: "pbs.example".into(),
            datastore: "store1".into(),
            username: "backup@pbs".into(),
            password: secrecy::SecretString::from("pw".to_owned()),
            fingerprint: None,
            namespace: None,
            port: None,
            encryption_key: Some(secrecy::SecretString::from(k.key_file_json().to_string())),
        },
    })
    .await
    .unwrap();
    let vzdump = |guest: Uuid, vmid: u32| {
        let (root, offsite) = (&root, offsite.clone());
        async move {
            // Every run tags the guest's config before its vzdump, so the archive names it.
            let tag = bosun_agentd::data::backup::content::guest_tag(&guest.to_string()).unwrap();
            let update = bosun_pve::ConfigUpdate {
                set: bosun_pve::CtOptions {
                    tags: vec![tag],
                    ..Default::default()
                },
                ..Default::default()
            };
            root.update_ct_config(Vmid::new(vmid).unwrap(), &update)
                .await
                .unwrap();
            let upid = root
                .vzdump(&VzdumpRequest::new(Vmid::new(vmid).unwrap(), offsite))
                .await
                .unwrap();
            root.wait_task(bosun_pve::Op::Vzdump, &upid).await.unwrap();
            upid.to_string()
        }
    };
    let (sent_upid, finished_upid) = (
        vzdump(sent, vmids[1]).await,
        vzdump(finished, vmids[2]).await,
    );
    let journal = JournalHandle::open(
        &files.state_dir.join("journal.sqlite"),
        bosun_agentd::clock::SystemClock::shared(),
    )
    .await
    .unwrap();
    let detail = |vmid: u32| {
        json!({
            "vmid": vmid, "storage": "offsite", "tier": 1, "target": DURABLE, "mode": "snapshot",
        })
    };
    let stops = [
        (intended, vmids[0], StoppedAt::Intended),
        (sent, vmids[1], StoppedAt::Sent(&sent_upid)),
        (finished, vmids[2], StoppedAt::Finished(&finished_upid)),
    ];
    for (guest, vmid, at) in stops {
        interrupted(&journal, guest, vmid, at, detail(vmid)).await;
    }
    journal.close().await.unwrap();

    let agent = InProcessAgent::start(&files.config_path).await;
    let failed = hub_backup(&hub, host, intended, Duration::from_secs(30), |b| !b.ok).await;
    assert_eq!((failed.target.as_str(), failed.tier), (DURABLE, Some(1)));
    for guest in [sent, finished] {
        let ok = hub_backup(&hub, host, guest, Duration::from_secs(30), |b| b.ok).await;
        assert_eq!((ok.target.as_str(), ok.tier), (DURABLE, Some(1)));
        assert!(
            ok.archive
                .as_deref()
                .is_some_and(|a| a.starts_with("offsite:backup/ct/")),
            "{ok:?}"
        );
    }
    assert_no_backup_running(&agent).await;
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

/// The local API's answer to `GET /v1/restore-test/status` for the guest holding `token`.
async fn restore_test_status(client: &reqwest::Client, url: &str, token: &str) -> Value {
    let answer = client
        .get(format!("{url}/v1/restore-test/status"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    answer.json().await.unwrap()
}

/// A restore test the agent really runs (its policy switched on by the desired state, the
/// guest's own backup restored into a scratch guest that is started, checked by the guest's
/// own restore check through the helper, and destroyed) reaches
/// the guest's controller through the local API and the operator through the hub, with the
/// same archive; an agent started again still answers it, from its journal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_restore_test_reaches_the_controller_and_the_hub_and_survives_a_restart() {
    let (sim, hub, files) = enrolled_stack().await;
    let helper = files.helper.clone();
    files.use_local_api(
        0,
        "[backup]\nstorage = \"local\"\nrestore_test_stay_up_ms = 1000\nrestore_test_minute_ms = 1000\n",
    );
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let guest = Uuid::new_v4();
    let mut document = desired(&sim, &[(guest, "alpha")], "running");
    hub.put_desired(host, &document).await;
    let vmid = running_vmid(&agent.handles.reconcile.clone(), guest).await;
    eventually(Duration::from_secs(30), "the bootstrap is pushed", || {
        let path = helper.bootstrap_path(vmid);
        async move { path.exists() }
    })
    .await;
    let doc = helper.read_bootstrap(vmid);
    let (url, token) = (doc.local_api.url.clone(), doc.local_api.token.expose());
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let before = restore_test_status(&client, &url, token).await;
    assert_eq!(before["state"], "never_run", "{before}");
    // The guest's controller installs its restore check; the helper runs it with root's `pct`.
    files.use_sim_pct(&sim);
    guest_check::install(&sim, vmid).await;

    let run = local_backup(&client, &url, token).await;
    assert_eq!(run["phase"], "done", "{run}");
    let archive = run["archive"].as_str().unwrap().to_owned();
    let guests_before = sim.guest_ids();
    document["restore_test_policy"] =
        json!({ "enabled": true, "interval_days": 1, "timeout_minutes": 10 });
    hub.put_desired(host, &document).await;

    // The operator's view: the hub's report of the host carries the finished test.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let reported = loop {
        let found = stored_report(&hub, host).await.and_then(|r| {
            r.restore_tests
                .into_iter()
                .find(|t| t.guest_id == guest && t.outcome.is_some())
        });
        if let Some(test) = found {
            break test;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the hub shows no finished restore test of {guest}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        reported.outcome,
        Some(bosun_proto::report::RestoreTestOutcome::Passed),
        "{reported:?}"
    );
    assert_eq!(reported.archive.as_deref(), Some(archive.as_str()));
    assert_eq!(
        sim.guest_ids(),
        guests_before,
        "the scratch guest is destroyed"
    );
    // It passed because the guest's own check ran, in the scratch guest, and passed.
    let checked = helper.restore_checks();
    assert_eq!(checked.len(), 1, "{checked:?}");
    assert!(!guests_before.contains(&checked[0]), "{checked:?}");

    // The controller's view: the same test, through the local API.
    let status = restore_test_status(&client, &url, token).await;
    assert_eq!(status["state"], "passed", "{status}");
    assert_eq!(status["last"]["archive"], archive.as_str(), "{status}");
    agent.stop().await;

    let agent = InProcessAgent::start(&files.config_path).await;
    // A new process binds a new port (the configured one is 0): asked where it now listens.
    let endpoint = agent
        .handles
        .local_api
        .clone()
        .expect("the local api is served");
    let url = format!("https://{}", endpoint.addr);
    eventually(
        Duration::from_secs(30),
        "the restarted agent answers the journaled result",
        || {
            let (client, url, token) = (client.clone(), url.clone(), token.to_owned());
            let archive = archive.clone();
            async move {
                let status = restore_test_status(&client, &url, &token).await;
                status["state"] == "passed" && status["last"]["archive"] == archive.as_str()
            }
        },
    )
    .await;
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

/// A scheduler pass that could not read a guest's backups (the storage's listing failed, as
/// while a storage is still being activated) looks again within seconds: the guest's first
/// scheduled backup does not wait out the scheduler's longest sleep, a minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_backup_listing_is_read_again_within_seconds() {
    let (sim, hub, files) = enrolled_stack().await;
    sim.set_faults(FaultConfig {
        endpoints: vec![bosun_pvesim::EndpointFault {
            method: Some("GET".into()),
            path: "/nodes/{node}/storage/{storage}/content".into(),
            error_rate: 1.0,
            error_message: "storage 'local' is not online".into(),
            ..bosun_pvesim::EndpointFault::default()
        }],
        ..FaultConfig::default()
    });
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let guest = Uuid::new_v4();
    let mut document = desired(&sim, &[(guest, "alpha")], "running");
    hub.put_desired(host, &document).await;
    let vmid = running_vmid(&agent.handles.reconcile, guest).await;
    // A plan backing the guest up every 5 s: the new generation wakes the scheduler, whose
    // first look at the running guest reads its backups.
    document["backup_policy"]["schedule"] = json!("*:*:0/5");
    document["data_plan"] =
        agent_support::signing::signed_plan(&agent_support::signing::plan_of(&document, host));
    hub.put_desired_unplanned(host, &document).await;
    let refused = |sim: &bosun_pvesim::SimHandle| {
        sim.requests().iter().any(|r| {
            r.method == "GET"
                && r.path.ends_with("/content")
                && r.status == 500
                && r.params
                    .iter()
                    .any(|(k, v)| k == "vmid" && *v == vmid.to_string())
        })
    };
    eventually(
        Duration::from_secs(60),
        "the scheduler's listing of the guest's backups fails",
        || std::future::ready(refused(&sim)),
    )
    .await;
    let healed = std::time::Instant::now();
    sim.set_faults(FaultConfig::default());
    let backups = |sim: &bosun_pvesim::SimHandle| {
        sim.requests()
            .iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/vzdump"))
            .count()
    };
    eventually(
        Duration::from_secs(90),
        "the guest's first scheduled backup",
        || std::future::ready(backups(&sim) > 0),
    )
    .await;
    let waited = healed.elapsed();
    eprintln!("first scheduled backup {waited:?} after the storage answered again");
    assert!(
        waited < Duration::from_secs(30),
        "the scheduler left a failed listing {waited:?}"
    );
    agent.stop().await;
    hub.stop().await;
}
