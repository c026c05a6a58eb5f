//! Signed jobs through the real hub, authored with `bosunctl job new|sign`
//! (stock `ssh-keygen -Y sign`) and submitted with `bosunctl job submit`:
//! force-backup, restore-now over the guest from that backup, and
//! decommission of a guest removed from desired state. `bosun-agentctl explain`
//! reads the restore's journal steps. The decommissioned guest leaves the
//! hub's stored report through a change-only report (a removed guest).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::jobs::{job_result, submit};
use agent_support::signing::OperatorKey;
use agent_support::*;
use uuid::Uuid;

/// A simulator, a hub and an enrolled agent trusting one operator key, with one
/// customer guest provisioned and running.
struct OneGuest {
    sim: bosun_pvesim::SimHandle,
    hub: RealHub,
    files: AgentFiles,
    operator: OperatorKey,
    agent: InProcessAgent,
    host: Uuid,
    guest: Uuid,
    vmid: u32,
}

impl OneGuest {
    async fn start() -> Self {
        let (sim, hub, files) = enrolled_stack().await;
        let operator = files.trusted_operator();
        let agent = InProcessAgent::start(&files.config_path).await;
        let host = agent.handles.host_id;
        let guest = Uuid::new_v4();
        hub.put_desired(host, &desired(&sim, &[(guest, "customer")], "running"))
            .await;
        let status = agent.handles.reconcile.clone();
        let vmid = running_vmid(&status, guest).await;
        Self {
            sim,
            hub,
            files,
            operator,
            agent,
            host,
            guest,
            vmid,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_and_restore_by_signed_jobs() {
    let OneGuest {
        sim,
        hub,
        files,
        operator,
        agent,
        host,
        guest,
        vmid,
    } = OneGuest::start().await;
    let (host_s, guest_s, vmid_s) = (host.to_string(), guest.to_string(), vmid.to_string());
    let target = ["--host", &host_s, "--guest", &guest_s, "--vmid", &vmid_s];

    // force-backup
    let mut args = vec!["--kind", "force-backup"];
    args.extend_from_slice(&target);
    let backup = submit(&hub, &operator, files.dir.path(), &args).await;
    let result = job_result(&hub, host, backup).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    let volid = result["output"]["volid"].as_str().unwrap().to_owned();

    // restore-now over the guest from that backup: one overwrite, guest running again.
    sim.clear_requests();
    let param = format!("backup={volid}");
    let mut args = vec!["--kind", "restore-now", "--param", &param];
    args.extend_from_slice(&target);
    let restore = submit(&hub, &operator, files.dir.path(), &args).await;
    let result = job_result(&hub, host, restore).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    let overwrites: Vec<_> = destructive(&sim);
    assert_eq!(overwrites.len(), 1, "{overwrites:?}");
    assert!(
        overwrites[0]
            .params
            .iter()
            .any(|(k, v)| k == "vmid" && *v == vmid_s)
    );
    assert_eq!(sim.guest_running(vmid), Some(true));

    // explain the restore's operation from the journal.
    let audit = agent.handles.journal.audit_since(0, 1000).await.unwrap();
    let op_id = audit
        .iter()
        .find(|e| {
            e.event.event == "job.finished"
                && e.event.job_id.as_deref() == Some(&restore.to_string())
        })
        .and_then(|e| e.event.op_id)
        .expect("the restore's operation is audited");
    let steps = agent.handles.journal.steps(op_id).await.unwrap();
    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    // `check_bootstrap`: the restored filesystem holds the backup's bootstrap (decision 0008).
    assert_eq!(
        names,
        [
            "accepted",
            "stop",
            "check_bootstrap",
            "restore_overwrite",
            "start"
        ]
    );
    // `bosun-agentctl explain` reads the same steps from the journal on the host.
    let wanted = bosun_agentctl::explain::Wanted::Op(op_id);
    let text = bosun_agentctl::explain::explain(&files.state_dir, &wanted, false).unwrap();
    assert!(text.starts_with(&format!("operation {op_id} (")), "{text}");
    for step in names {
        assert!(
            text.contains(&format!(". {step}")),
            "{step} missing:\n{text}"
        );
    }

    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decommission_of_an_orphaned_guest_by_signed_job() {
    let OneGuest {
        sim,
        hub,
        files,
        operator,
        agent,
        host,
        guest,
        vmid,
    } = OneGuest::start().await;
    let (host_s, guest_s, vmid_s) = (host.to_string(), guest.to_string(), vmid.to_string());
    hub.put_desired(host, &desired(&sim, &[], "running")).await;
    eventually(Duration::from_secs(30), "the hub shows it orphaned", || {
        let hub = &hub;
        async move { hub_guest_status(hub, host, vmid).await == ["orphaned"] }
    })
    .await;
    let fulls = agent.handles.hub.borrow().full_reports;
    let args = [
        "--kind",
        "decommission",
        "--host",
        &host_s,
        "--guest",
        &guest_s,
        "--vmid",
        &vmid_s,
    ];
    let decommission = submit(&hub, &operator, files.dir.path(), &args).await;
    let result = job_result(&hub, host, decommission).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        sim.guest_ids().is_empty(),
        "not destroyed, or re-provisioned: {:?}",
        sim.guest_ids()
    );
    eventually(Duration::from_secs(30), "the hub drops the guest", || {
        let hub = &hub;
        async move { hub_guest_status(hub, host, vmid).await.is_empty() }
    })
    .await;
    assert_eq!(
        agent.handles.hub.borrow().full_reports,
        fulls,
        "the removal went out as a delta"
    );
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

/// The statuses the hub's stored report gives `vmid` (none once it is gone).
async fn hub_guest_status(hub: &RealHub, host: Uuid, vmid: u32) -> Vec<String> {
    let detail = hub.host(host).await;
    detail["last_report"]["guests"]
        .as_array()
        .map(|g| {
            g.iter()
                .filter(|g| g["vmid"] == vmid)
                .map(|g| g["status"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}
