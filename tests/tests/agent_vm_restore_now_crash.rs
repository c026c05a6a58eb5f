//! Crash safety of a signed `restore-now` over a VM (decision 0123), as `agent_crash` holds a
//! container's: the agent runs as a child process with a failpoint armed at one journal step of
//! the job, which aborts it on the spot (what SIGKILL leaves). After each restart the job
//! reports success once, and the VM is the guest's, restored exactly once from the signed
//! archive (the data it held at the backup, not what was written after), running, unlocked,
//! with the MAC and the tags it had: nothing left unfinished in the journal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_crash::RESTORE_POINTS;
use crate::agent_support;

use std::time::Duration;

use agent_support::crash::*;
use agent_support::jobs::{job_result, submit};
use agent_support::vm::{POOL, append_config, desired_of, vm_golden, vm_mac};
use agent_support::*;
use bosun_proto::desired::GuestKind;
use bosun_pve::{AgentFileWrite, PveQemu as _, Vmid};
use bosun_pvesim::SimHandle;
use uuid::Uuid;

/// A file of the customer's inside the VM.
const MARKER: &str = "/root/bosun-restore-marker";

/// The `qmrestore force=1` requests that reached Proxmox: `(vmid, archive)`.
fn overwrites(sim: &SimHandle) -> Vec<(String, String)> {
    sim.requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/nodes/pve/qemu")
        .map(|r| {
            let get = |key: &str| {
                r.params
                    .iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            (get("vmid"), get("archive"))
        })
        .collect()
}

/// Writes `text` into the VM's marker file, as its customer would.
async fn mark(sim: &SimHandle, vmid: u32, text: &str) {
    root_client(sim)
        .agent_file_write(
            Vmid::new(vmid).unwrap(),
            &AgentFileWrite {
                path: MARKER.to_owned(),
                content: text.as_bytes().to_vec(),
            },
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_every_vm_restore_now_step_it_restores_once_and_runs_as_before() {
    let (sim, hub, files) = enrolled_stack().await;
    append_config(&files, POOL);
    let operator = files.trusted_operator();
    let (_, _, golden) = vm_golden(&sim, &files);
    let mut child = spawn_agent(&files.config_path, None);
    let host = host_id(&files.state_dir).await;
    let guest = Uuid::new_v4();
    hub.put_desired(
        host,
        &desired_of(&[(guest, "vm-shop", GuestKind::Qemu, golden)]),
    )
    .await;
    eventually(Duration::from_secs(60), "the vm runs", || {
        let ids = sim.vm_ids();
        let running = ids.len() == 1 && sim.vm_running(ids[0]) == Some(true);
        async move { running }
    })
    .await;
    let vmid = sim.vm_ids()[0];
    let (host_s, guest_s, vmid_s) = (host.to_string(), guest.to_string(), vmid.to_string());

    // The data at the backup, a signed force-backup, and the VM as it is then.
    mark(&sim, vmid, "at the backup").await;
    let args = [
        "--kind",
        "force-backup",
        "--host",
        &host_s,
        "--guest",
        &guest_s,
        "--vmid",
        &vmid_s,
    ];
    let job = submit(&hub, &operator, files.dir.path(), &args).await;
    let result = job_result(&hub, host, job).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    let archive = result["output"]["volid"].as_str().unwrap().to_owned();
    assert!(
        archive.contains(&format!("vzdump-qemu-{vmid}-")),
        "{archive}"
    );
    let mac = vm_mac(&sim, vmid).expect("its MAC");
    let tags = sim.vm_config(vmid).unwrap()["tags"].clone();
    assert!(
        tags.contains("bosun-op-") && tags.contains("bosun-guest-"),
        "{tags}"
    );
    let backup_param = format!("backup={archive}");

    for point in RESTORE_POINTS {
        mark(&sim, vmid, "after the backup").await;
        kill(&mut child);
        sim.clear_requests();
        child = spawn_agent(&files.config_path, Some(point));
        let args = [
            "--kind",
            "restore-now",
            "--host",
            &host_s,
            "--guest",
            &guest_s,
            "--vmid",
            &vmid_s,
            "--param",
            &backup_param,
        ];
        let job = submit(&hub, &operator, files.dir.path(), &args).await;
        assert_tripped(&mut child, &files.config_path, point).await;
        child = spawn_agent(&files.config_path, None);
        let result = job_result(&hub, host, job).await;
        if result["outcome"] != "succeeded" {
            // What the journal audited of the VM says which pass took it for what.
            let audit = journal(&files.state_dir).audit_since(0, 5000).unwrap();
            for e in audit.iter().filter(|e| e.event.vmid == Some(vmid)) {
                eprintln!(
                    "{point}: audit of vm {vmid}: {} {:?} {}",
                    e.event.event, e.event.op_id, e.event.detail
                );
            }
        }
        assert_eq!(
            result["outcome"],
            "succeeded",
            "{point}: {result}; the agent's log ends:\n{}",
            log_tail(&files.config_path, 60)
        );
        journal_settles(&files.state_dir).await;
        assert_no_unfinished(&files.state_dir, point);
        // Once, from the signed archive, at its own vmid.
        assert_eq!(
            overwrites(&sim),
            vec![(vmid_s.clone(), archive.clone())],
            "{point}"
        );
        assert_eq!(sim.vm_ids(), vec![vmid], "{point}: the vm was replaced");
        assert_eq!(
            sim.vm_file(vmid, MARKER).map(|f| f.content),
            Some(b"at the backup".to_vec()),
            "{point}: not the archive's data"
        );
        // Running again, unlocked, the same MAC and tags, in Bosun's pool.
        eventually(Duration::from_secs(30), "the vm runs again", || {
            let running = sim.vm_running(vmid) == Some(true);
            async move { running }
        })
        .await;
        let config = sim.vm_config(vmid).unwrap();
        assert!(!config.contains_key("lock"), "{point}: {config:?}");
        assert_eq!(config["tags"], tags, "{point}");
        assert_eq!(vm_mac(&sim, vmid).as_deref(), Some(mac.as_str()), "{point}");
        assert!(sim.pool_members("bosun").contains(&vmid), "{point}");
        let run = journal(&files.state_dir)
            .job_run(&job.to_string())
            .unwrap()
            .expect("claimed once");
        assert_eq!(
            run.outcome,
            Some(bosun_agentd::ops::journal::JobOutcome::Succeeded),
            "{point}"
        );
    }
    kill(&mut child);
    hub.stop().await;
    sim.shutdown().await;
}
