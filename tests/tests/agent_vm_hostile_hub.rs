//! A hostile hub against a customer's VM, with an operator's VM beside it in pool `bosun` —
//! the worst place for a neighbour, since the agent's token holds `VM.GuestAgent.*` on the
//! pool. The hub forges and redirects jobs, shrinks the VM, calls it a container, drops it
//! from desired state and calls it scratch. Asserted from the simulator's request log:
//! nothing destroyed or stopped, no guest-agent call and no write ever reaching the
//! neighbour, the customer's VM running with its bootstrap; and from what the agent
//! reported (each refused job `rejected` and audited with its code).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::hostile_hub::HostileHub;
use agent_support::signing::{OperatorKey, envelope, job_doc};
use agent_support::vm::{
    BOOTSTRAP, POOL, append_config, desired_of, foreign_vm, join_bosun_pool, vm_golden,
};
use agent_support::*;
use bosun_proto::desired::GuestKind;
use bosun_proto::job::JobOutcome;
use bosun_proto::report::GuestStatus;
use bosun_pvesim::SimConfig;
use serde_json::{Value, json};
use uuid::Uuid;

/// The operator's own VM, in pool `bosun`, never Bosun's.
const NEIGHBOUR: u32 = 4400;

fn signed(key: &OperatorKey, doc: &Value, namespace: &str) -> Value {
    let bytes = serde_json::to_vec(doc).unwrap();
    envelope(&bytes, &key.sign(&bytes, namespace))
}

fn id_of(doc: &Value) -> String {
    doc["job_id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_hub_cannot_destroy_a_vm_or_reach_into_the_vm_beside_it() {
    let sim = start_sim(SimConfig::fast()).await;
    sim.set_datacenter_firewall(true);
    let hub = HostileHub::start().await;
    let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some("hostile-vm-hub"));
    append_config(&files, POOL);
    files.use_local_api(0, "");
    let operator = OperatorKey::new("op@example");
    let stranger = OperatorKey::new("stranger@example");
    std::fs::write(
        &files.signers_path,
        format!(
            "{}{}\n",
            agent_support::signing::harness_signer_lines(),
            operator.allowed_line("op@example")
        ),
    )
    .unwrap();
    let (volid, _sha, golden) = vm_golden(&sim, &files);
    foreign_vm(&sim, &volid, NEIGHBOUR).await;
    let (status, message) = join_bosun_pool(&sim, &sim.endpoint().tokens.root, NEIGHBOUR).await;
    assert_eq!(status, 200, "root puts its VM in pool bosun: {message}");
    let neighbour_before = sim.vm_config(NEIGHBOUR).unwrap();

    let agent = InProcessAgent::start(&files.config_path).await;
    let host = hub.host_id;
    let guest = Uuid::new_v4();
    let wanted = desired_of(&[(guest, "vm-shop", GuestKind::Qemu, golden)]);
    hub.set_desired(wanted.clone());
    let vmid = running_vmid(&agent.handles.reconcile, guest).await;
    assert_ne!(vmid, NEIGHBOUR);
    eventually(Duration::from_secs(30), "the vm's bootstrap", || {
        let sim = &sim;
        async move { sim.vm_file(vmid, BOOTSTRAP).is_some() }
    })
    .await;
    let bootstrap = sim.vm_file(vmid, BOOTSTRAP).unwrap();

    // 1. Jobs the hub forges or points at the neighbour: each rejected with its code.
    let job = |kind: &str, vmid: u32| job_doc(kind, host, guest, vmid, json!({}), 1);
    let cases: Vec<(&str, Value, Value)> = {
        let forged = job("decommission", vmid);
        let redirected = job("decommission", NEIGHBOUR);
        let backed_up_elsewhere = job("force-backup", NEIGHBOUR);
        // A valid signature over a force-backup, presented as a decommission.
        let benign = job("force-backup", vmid);
        let signature = operator.sign(&serde_json::to_vec(&benign).unwrap(), "bosun-job@v1");
        let mut doc = benign.clone();
        doc["kind"] = json!("decommission");
        let rekinded = envelope(&serde_json::to_vec(&doc).unwrap(), &signature);
        vec![
            (
                "unknown_signer",
                signed(&stranger, &forged, "bosun-job@v1"),
                forged,
            ),
            (
                "target_mismatch",
                signed(&operator, &redirected, "bosun-job@v1"),
                redirected,
            ),
            (
                "target_mismatch",
                signed(&operator, &backed_up_elsewhere, "bosun-job@v1"),
                backed_up_elsewhere,
            ),
            ("bad_signature", rekinded, doc),
        ]
    };
    hub.set_jobs(
        cases
            .iter()
            .map(|(_, envelope, _)| envelope.clone())
            .collect(),
    );
    for (code, _, doc) in &cases {
        let id = id_of(doc);
        eventually(Duration::from_secs(30), &format!("{code} refused"), || {
            let hub = hub.clone();
            let id = id.clone();
            async move {
                hub.results()
                    .iter()
                    .any(|r| r.job_id.to_string() == id && r.outcome == JobOutcome::Rejected)
                    && hub.audit().iter().any(|(action, d)| {
                        action == "job.refused"
                            && d["job_id"] == id.as_str()
                            && d["detail"]["code"] == *code
                    })
            }
        })
        .await;
    }
    hub.set_jobs(vec![]);

    // 2. Desired state shrinks the VM's disk and calls it a container: nothing shrinks, and
    // nothing is asked of a container at its vmid.
    let mut relabelled = wanted.clone();
    relabelled["guests"][0]["resources"]["rootfs_gib"] = json!(4);
    relabelled["guests"][0]["kind"] = json!("lxc");
    hub.set_desired(relabelled);
    eventually(Duration::from_secs(30), "the shrink refused", || {
        let hub = hub.clone();
        async move {
            hub.audit()
                .iter()
                .any(|(action, _)| action == "guest.shrink_refused")
        }
    })
    .await;

    // 3. Desired state drops the VM: it is orphaned and left alone.
    hub.set_desired(desired_of(&[]));
    eventually(Duration::from_secs(30), "the vm reported orphaned", || {
        let hub = hub.clone();
        async move {
            hub.last_poll().is_some_and(|p| {
                p.report.is_some_and(|r| {
                    r.guests
                        .iter()
                        .any(|g| g.vmid == vmid && g.status == GuestStatus::Orphaned)
                })
            })
        }
    })
    .await;

    // 4. Desired state calls the VM scratch (what a restore test destroys): refused.
    let mut scratch = wanted.clone();
    scratch["guests"][0]["scratch"] = json!(true);
    hub.set_desired(scratch);
    eventually(Duration::from_secs(30), "the relabel refused", || {
        let hub = hub.clone();
        async move {
            hub.audit()
                .iter()
                .any(|(action, _)| action == "desired.refused")
        }
    })
    .await;
    // A pass after the refusal, for anything it would have sent.
    let passes = agent.handles.reconcile.borrow().passes;
    eventually(Duration::from_secs(30), "two more passes", || {
        let status = agent.handles.reconcile.clone();
        async move { status.borrow().passes >= passes + 2 }
    })
    .await;

    let requests = sim.requests();
    let destroyed = destructive(&sim);
    assert!(destroyed.is_empty(), "destructive calls: {destroyed:?}");
    let stopped: Vec<_> = mutations(&sim)
        .into_iter()
        .filter(|r| r.path.contains("/status/stop") || r.path.contains("/status/shutdown"))
        .collect();
    assert!(stopped.is_empty(), "a VM was stopped: {stopped:?}");
    let shrunk: Vec<_> = requests
        .iter()
        .filter(|r| r.method == "PUT" && r.path.ends_with("/resize"))
        .collect();
    assert!(shrunk.is_empty(), "a disk was resized: {shrunk:?}");
    let as_container: Vec<_> = requests
        .iter()
        .filter(|r| r.path.contains(&format!("/lxc/{vmid}")))
        .collect();
    assert!(
        as_container.is_empty(),
        "the VM was asked as a container: {as_container:?}"
    );
    let neighbour = format!("/qemu/{NEIGHBOUR}/");
    let reached: Vec<_> = requests
        .iter()
        .filter(|r| {
            r.path.contains(&neighbour) && (r.method != "GET" || r.path.contains("/agent/"))
        })
        .collect();
    assert!(reached.is_empty(), "the neighbour was reached: {reached:?}");
    assert_eq!(sim.vm_config(NEIGHBOUR).unwrap(), neighbour_before);
    assert_eq!(sim.vm_running(NEIGHBOUR), Some(true));
    assert_eq!(sim.vm_running(vmid), Some(true), "the customer's VM runs");
    assert_eq!(
        sim.vm_file(vmid, BOOTSTRAP).unwrap(),
        bootstrap,
        "its bootstrap is the one it was given"
    );
    agent.stop().await;
    hub.shutdown();
    sim.shutdown().await;
}
