//! Adopting a virtual machine that was on the node before Bosun (decision 0122), the way an
//! operator and a hostile hub run it: the real hub, jobs authored with `bosunctl job
//! new|sign|submit` (or signed envelopes a hostile hub queues), the agent against the
//! simulator's QEMU guests, and the simulator's request log counting what reached each vmid.
//!
//! The agent's token cannot put a VM in pool `bosun` (Proxmox refuses its `PUT /pools`), so a
//! VM is adopted only once the operator, as root, put it there and signed for it; the adopted
//! VM carries the identity, is reported as the agent's `qemu` guest, and the VM beside it is
//! never written to. Killed at every step of the job, the agent ends with one identity written,
//! or none. Asked for a bootstrap, the job writes it through the VM's guest agent into that VM
//! alone, once it carries the identity; a VM whose agent is silent is left as it was.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_adopt::ADOPT_POINTS;
use crate::agent_support;

use std::time::Duration;

use agent_support::crash::*;
use agent_support::hostile_hub::HostileHub;
use agent_support::jobs::{job_result, submit};
use agent_support::signing::{OperatorKey, envelope, job_doc};
use agent_support::vm::{
    BOOTSTRAP, POOL, append_config, desired_of, foreign_vm, join_bosun_pool, vm_golden,
};
use agent_support::*;
use bosun_proto::desired::GuestKind;
use bosun_proto::job::JobOutcome;
use bosun_pve::{PveQemu as _, VmConfigUpdate, VmOptions, Vmid};
use bosun_pvesim::{SimConfig, SimHandle};
use serde_json::{Value, json};
use uuid::Uuid;

/// Restores a VM outside Bosun at `vmid`, named `name` with the tags `prod;vm`, as an
/// administrator does.
async fn legacy_vm(sim: &SimHandle, volid: &str, vmid: u32, name: &str) {
    foreign_vm(sim, volid, vmid).await;
    let update = VmConfigUpdate {
        set: VmOptions {
            name: Some(name.to_owned()),
            tags: vec!["prod".into(), "vm".into()],
            ..VmOptions::default()
        },
        ..VmConfigUpdate::default()
    };
    root_client(sim)
        .update_vm_config(Vmid::new(vmid).unwrap(), &update)
        .await
        .unwrap();
}

/// The operator's `pveum pool modify bosun --vms VMID`, as root.
async fn operator_joins_pool(sim: &SimHandle, vmid: u32) {
    let (status, message) = join_bosun_pool(sim, &sim.endpoint().tokens.root, vmid).await;
    assert_eq!(status, 200, "{message}");
    assert!(sim.pool_members("bosun").contains(&vmid));
}

/// The VM's config digest, as `pvesh get /nodes/pve/qemu/VMID/config` shows it.
async fn vm_digest(sim: &SimHandle, vmid: u32) -> String {
    root_client(sim)
        .vm_config(Vmid::new(vmid).unwrap())
        .await
        .unwrap()
        .digest
}

/// Every request that reached Proxmox naming VM `vmid` in its path.
fn requests_to(sim: &SimHandle, vmid: u32) -> Vec<bosun_pvesim::LoggedRequest> {
    let at = format!("/qemu/{vmid}");
    sim.requests()
        .into_iter()
        .filter(|r| r.path.ends_with(&at) || r.path.contains(&format!("{at}/")))
        .collect()
}

/// The requests that changed something of VM `vmid`.
fn writes_to(sim: &SimHandle, vmid: u32) -> Vec<bosun_pvesim::LoggedRequest> {
    requests_to(sim, vmid)
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect()
}

/// The VM's tags.
fn tags(sim: &SimHandle, vmid: u32) -> Vec<String> {
    sim.vm_config(vmid)
        .and_then(|c| c.get("tags").cloned())
        .unwrap_or_default()
        .split([';', ',', ' '])
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The identities Bosun wrote into VM `vmid`.
fn identities(sim: &SimHandle, vmid: u32) -> Vec<String> {
    tags(sim, vmid)
        .into_iter()
        .filter(|t| t.starts_with("bosun-op-"))
        .collect()
}

/// The adopt arguments of `bosunctl job new` for VM `vmid` on `host`.
fn adopt_vm_args(host: &str, vmid: &str, name: &str, digest: &str) -> Vec<String> {
    [
        "--kind",
        "adopt",
        "--host",
        host,
        "--vmid",
        vmid,
        "--param",
        "guest_kind=qemu",
        "--param",
        &format!("hostname={name}"),
        "--param",
        &format!("config_digest={digest}"),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// [`adopt_vm_args`] asking for a bootstrap for customer `acme`.
fn adopt_vm_bootstrap_args(host: &str, vmid: &str, name: &str, digest: &str) -> Vec<String> {
    let mut args = adopt_vm_args(host, vmid, name, digest);
    for param in [
        "bootstrap=true",
        "customer_id=acme",
        "customer_name=Acme Ltd",
    ] {
        args.extend(["--param".to_owned(), param.to_owned()]);
    }
    args
}

/// The guest-agent requests that reached VM `vmid`, in order: `(method, path)`.
fn agent_calls(sim: &SimHandle, vmid: u32) -> Vec<(String, String)> {
    let prefix = format!("/nodes/pve/qemu/{vmid}/agent/");
    sim.requests()
        .into_iter()
        .filter(|r| r.path.starts_with(&prefix))
        .map(|r| (r.method, r.path))
        .collect()
}

/// What the hub's stored report says of `vmid`.
async fn hub_guest(hub: &RealHub, host: Uuid, vmid: u32) -> Option<Value> {
    let detail = hub.host(host).await;
    detail["last_report"]["guests"]
        .as_array()?
        .iter()
        .find(|g| g["vmid"] == vmid)
        .cloned()
}

/// The adopted VM.
const ADOPTED: u32 = 4321;
/// The VM beside it, never adopted.
const NEIGHBOUR: u32 = 4322;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adopted_vm_is_a_qemu_guest_from_then_on_and_its_neighbour_stays_untouched() {
    let (sim, hub, files) = enrolled_stack().await;
    append_config(&files, POOL);
    let operator = files.trusted_operator();
    let (volid, _sha, golden) = vm_golden(&sim, &files);
    legacy_vm(&sim, &volid, ADOPTED, "legacy-vm").await;
    legacy_vm(&sim, &volid, NEIGHBOUR, "legacy-db").await;
    let neighbour_before = sim.vm_config(NEIGHBOUR).unwrap();
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    hub.put_desired(host, &desired_of(&[])).await;
    // Neither VM is the agent's: the hub hears of no guest of its at either vmid.
    eventually(Duration::from_secs(30), "the first report", || {
        let hub = &hub;
        async move { !hub.host(host).await["last_report"].is_null() }
    })
    .await;
    for vmid in [ADOPTED, NEIGHBOUR] {
        assert!(
            hub_guest(&hub, host, vmid)
                .await
                .is_none_or(|g| g["guest_id"].is_null()),
            "{vmid}"
        );
    }

    // The agent's token cannot put a VM in Bosun's pool: Proxmox refuses it.
    let (status, message) = join_bosun_pool(&sim, &sim.endpoint().tokens.agent, ADOPTED).await;
    assert_eq!(status, 403, "{message}");
    assert_eq!(
        message,
        "Permission check failed (/pool/bosun, Pool.Allocate)\n"
    );
    assert!(sim.pool_members("bosun").is_empty());

    // Signed before the operator put it in the pool: refused, with what to do.
    let host_s = host.to_string();
    let digest = vm_digest(&sim, ADOPTED).await;
    sim.clear_requests();
    let args = adopt_vm_args(&host_s, "4321", "legacy-vm", &digest);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let early = submit(&hub, &operator, files.dir.path(), &args).await;
    let result = job_result(&hub, host, early).await;
    assert_eq!(result["outcome"], "failed", "{result}");
    let detail = result["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("not_in_pool"), "{result}");
    assert!(
        detail.contains("pveum pool modify bosun --vms 4321"),
        "{result}"
    );
    assert!(writes_to(&sim, ADOPTED).is_empty());
    assert!(identities(&sim, ADOPTED).is_empty());

    // The operator, as root, puts it in the pool (its config and digest do not change), and
    // signs again.
    operator_joins_pool(&sim, ADOPTED).await;
    assert_eq!(vm_digest(&sim, ADOPTED).await, digest);
    sim.clear_requests();
    let job = submit(&hub, &operator, files.dir.path(), &args).await;
    let result = job_result(&hub, host, job).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert_eq!(result["output"]["kind"], "qemu", "{result}");
    let guest: Uuid = result["output"]["guest_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let identity = result["output"]["identity"].as_str().unwrap().to_owned();
    assert_eq!(tags(&sim, ADOPTED), ["prod", "vm", identity.as_str()]);
    // One write reached the VM: its identity, on the config the operator signed.
    let writes = writes_to(&sim, ADOPTED);
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(writes[0].method, "PUT");
    assert_eq!(writes[0].path, "/nodes/pve/qemu/4321/config");
    assert!(
        writes[0]
            .params
            .iter()
            .any(|(k, v)| k == "digest" && *v == digest),
        "{writes:?}"
    );
    // The agent changed no pool membership.
    assert!(
        !sim.requests().iter().any(|r| r.path.starts_with("/pools")),
        "{:?}",
        sim.requests()
    );
    let record = agent
        .handles
        .journal
        .provenance(ADOPTED)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.identity(), identity);
    // Recorded as a VM: the tiers back it up and DR restores it as one (decision 0123).
    assert_eq!(record.kind(), GuestKind::Qemu);

    // Desired state names it: the agent reports it as its own qemu guest, running.
    let mut wanted = desired_of(&[(guest, "legacy-vm", GuestKind::Qemu, golden)]);
    wanted["guests"][0]["vmid"] = json!(ADOPTED);
    hub.put_desired(host, &wanted).await;
    eventually(
        Duration::from_secs(30),
        "the hub shows it as Bosun's",
        || {
            let hub = &hub;
            async move {
                hub_guest(hub, host, ADOPTED).await.is_some_and(|g| {
                    g["status"] == "running"
                        && g["kind"] == "qemu"
                        && g["guest_id"] == guest.to_string().as_str()
                })
            }
        },
    )
    .await;
    // It was not provisioned again beside the adopted VM.
    assert!(
        !sim.requests()
            .iter()
            .any(|r| r.method == "POST" && r.path == "/nodes/pve/qemu"),
        "a VM was restored"
    );
    assert_eq!(sim.vm_ids(), vec![ADOPTED, NEIGHBOUR]);

    // The neighbour: never written to, its config as it was, still running, not Bosun's.
    assert!(
        writes_to(&sim, NEIGHBOUR).is_empty(),
        "{:?}",
        writes_to(&sim, NEIGHBOUR)
    );
    assert!(
        !requests_to(&sim, NEIGHBOUR)
            .iter()
            .any(|r| r.path.contains("/agent/")),
        "the agent reached inside the neighbour"
    );
    assert_eq!(sim.vm_config(NEIGHBOUR).unwrap(), neighbour_before);
    assert_eq!(sim.vm_running(NEIGHBOUR), Some(true));
    assert!(!sim.pool_members("bosun").contains(&NEIGHBOUR));
    assert!(
        hub_guest(&hub, host, NEIGHBOUR)
            .await
            .is_none_or(|g| g["guest_id"].is_null()),
        "the neighbour is not Bosun's"
    );
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

/// Signs `doc` with `key` in the job namespace; the envelope the hub would queue.
fn signed(key: &OperatorKey, doc: &Value) -> Value {
    let bytes = serde_json::to_vec(doc).unwrap();
    envelope(&bytes, &key.sign(&bytes, "bosun-job@v1"))
}

fn id_of(doc: &Value) -> Uuid {
    doc["job_id"].as_str().unwrap().parse().unwrap()
}

fn vm_pins(name: &str, digest: &str) -> Value {
    json!({ "guest_kind": "qemu", "hostname": name, "config_digest": digest })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_hub_cannot_adopt_a_vm_the_operator_did_not_sign_for() {
    let sim = start_sim(SimConfig::fast()).await;
    let hub = HostileHub::start().await;
    let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some("hostile-vm-adopt"));
    let operator = OperatorKey::new("op@example");
    std::fs::write(
        &files.signers_path,
        format!(
            "{}{}\n",
            agent_support::signing::harness_signer_lines(),
            operator.allowed_line("op@example")
        ),
    )
    .unwrap();
    let (volid, _sha, _golden) = vm_golden(&sim, &files);
    // 150: the one the operator looked at; 151 beside it; 152 another agent's guest; 153 a
    // template. Every one is in pool `bosun`, so each refusal is for what the job names.
    for (vmid, name) in [
        (150, "legacy-vm"),
        (151, "legacy-db"),
        (152, "theirs"),
        (153, "base"),
    ] {
        legacy_vm(&sim, &volid, vmid, name).await;
        operator_joins_pool(&sim, vmid).await;
    }
    let tagged = VmConfigUpdate {
        set: VmOptions {
            tags: vec!["bosun-op-0000000000000000000000000000beef".into()],
            ..VmOptions::default()
        },
        ..VmConfigUpdate::default()
    };
    let root = root_client(&sim);
    root.update_vm_config(Vmid::new(152).unwrap(), &tagged)
        .await
        .unwrap();
    let upid = root.stop_vm(Vmid::new(153).unwrap()).await.unwrap();
    bosun_pve::Pve::wait_task(&root, bosun_pve::Op::StopVm, &upid)
        .await
        .unwrap();
    assert!(sim.make_vm_template(153));
    let digests = [
        vm_digest(&sim, 150).await,
        vm_digest(&sim, 151).await,
        vm_digest(&sim, 152).await,
        vm_digest(&sim, 153).await,
    ];
    let before: Vec<_> = (150..=153).map(|v| sim.vm_config(v).unwrap()).collect();
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = hub.host_id;
    tokio::time::sleep(Duration::from_secs(2)).await;
    sim.clear_requests();

    let fresh = Uuid::new_v4;
    let good = job_doc(
        "adopt",
        host,
        fresh(),
        150,
        vm_pins("legacy-vm", &digests[0]),
        1,
    );
    let unsigned = job_doc(
        "adopt",
        host,
        fresh(),
        150,
        vm_pins("legacy-vm", &digests[0]),
        1,
    );
    // The pins of 150 under 151's vmid; 151's own name under its vmid with 150's digest.
    let other_vmid = job_doc(
        "adopt",
        host,
        fresh(),
        151,
        vm_pins("legacy-vm", &digests[0]),
        1,
    );
    let other_digest = job_doc(
        "adopt",
        host,
        fresh(),
        151,
        vm_pins("legacy-db", &digests[0]),
        1,
    );
    // Signed for a container at a VM's vmid.
    let as_container = job_doc(
        "adopt",
        host,
        fresh(),
        150,
        json!({ "hostname": "legacy-vm", "config_digest": digests[0] }),
        1,
    );
    let carries_identity = job_doc(
        "adopt",
        host,
        fresh(),
        152,
        vm_pins("theirs", &digests[2]),
        1,
    );
    let template = job_doc("adopt", host, fresh(), 153, vm_pins("base", &digests[3]), 1);
    let unsigned_env = {
        let bytes = serde_json::to_vec(&unsigned).unwrap();
        let other = serde_json::to_vec(&good).unwrap();
        envelope(&bytes, &operator.sign(&other, "bosun-job@v1"))
    };
    let refused: Vec<(&Value, Value, &str, JobOutcome)> = vec![
        (
            &unsigned,
            unsigned_env,
            "bad_signature",
            JobOutcome::Rejected,
        ),
        (
            &other_vmid,
            signed(&operator, &other_vmid),
            "hostname_mismatch",
            JobOutcome::Failed,
        ),
        (
            &other_digest,
            signed(&operator, &other_digest),
            "config_changed",
            JobOutcome::Failed,
        ),
        (
            &as_container,
            signed(&operator, &as_container),
            "no_container",
            JobOutcome::Failed,
        ),
        (
            &carries_identity,
            signed(&operator, &carries_identity),
            "bosun_guest",
            JobOutcome::Failed,
        ),
        (
            &template,
            signed(&operator, &template),
            "not_a_guest",
            JobOutcome::Failed,
        ),
    ];
    hub.set_jobs(refused.iter().map(|(_, env, _, _)| env.clone()).collect());
    eventually(Duration::from_secs(60), "every refusal reported", || {
        let hub = hub.clone();
        let ids: Vec<Uuid> = refused.iter().map(|(doc, ..)| id_of(doc)).collect();
        async move {
            let results = hub.results();
            ids.iter().all(|id| results.iter().any(|r| r.job_id == *id))
        }
    })
    .await;
    let results = hub.results();
    for (doc, _, code, outcome) in &refused {
        let result = results.iter().find(|r| r.job_id == id_of(doc)).unwrap();
        assert_eq!(result.outcome, *outcome, "{code}: {result:?}");
        assert!(result.detail.contains(code), "{code}: {}", result.detail);
    }
    // Nothing of any of them reached a VM: no write, no tag, no record.
    for (n, vmid) in (150..=153).enumerate() {
        assert!(
            writes_to(&sim, vmid).is_empty(),
            "{vmid}: {:?}",
            writes_to(&sim, vmid)
        );
        assert_eq!(sim.vm_config(vmid).unwrap(), before[n], "{vmid}");
        assert!(
            agent
                .handles
                .journal
                .provenance(vmid)
                .await
                .unwrap()
                .is_none(),
            "{vmid}"
        );
    }

    // The operator's own job adopts 150, and 150 alone.
    hub.set_jobs(vec![signed(&operator, &good)]);
    eventually(Duration::from_secs(60), "the adoption succeeded", || {
        let hub = hub.clone();
        let id = id_of(&good);
        async move {
            hub.results()
                .iter()
                .any(|r| r.job_id == id && r.outcome == JobOutcome::Succeeded)
        }
    })
    .await;
    assert_eq!(identities(&sim, 150).len(), 1, "{:?}", tags(&sim, 150));
    assert_eq!(writes_to(&sim, 150).len(), 1, "{:?}", writes_to(&sim, 150));
    for (n, vmid) in (151..=153).enumerate() {
        assert!(writes_to(&sim, vmid).is_empty(), "{vmid}");
        assert_eq!(sim.vm_config(vmid).unwrap(), before[n + 1], "{vmid}");
    }
    agent.stop().await;
    hub.shutdown();
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_every_vm_adopt_step_it_ends_with_one_identity_or_none() {
    let (sim, hub, files) = enrolled_stack().await;
    let operator = files.trusted_operator();
    let (volid, _sha, _golden) = vm_golden(&sim, &files);
    let mut child = spawn_agent(&files.config_path, None);
    let host = host_id(&files.state_dir).await;
    hub.put_desired(host, &desired_of(&[])).await;
    let host_s = host.to_string();
    for (n, (point, want)) in ADOPT_POINTS.iter().enumerate() {
        let vmid = 160 + u32::try_from(n).unwrap();
        legacy_vm(&sim, &volid, vmid, "legacy-vm").await;
        operator_joins_pool(&sim, vmid).await;
        let digest = vm_digest(&sim, vmid).await;
        kill(&mut child);
        child = spawn_agent(&files.config_path, Some(point));
        let vmid_s = vmid.to_string();
        let args = adopt_vm_args(&host_s, &vmid_s, "legacy-vm", &digest);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let job = submit(&hub, &operator, files.dir.path(), &args).await;
        assert_tripped(&mut child, &files.config_path, point).await;
        child = spawn_agent(&files.config_path, None);
        let result = job_result(&hub, host, job).await;
        let outcome = result["outcome"].as_str().unwrap_or_default();
        assert!(*want == "either" || outcome == *want, "{point}: {result}");
        journal_settles(&files.state_dir).await;
        assert_no_unfinished(&files.state_dir, point);
        let identities = identities(&sim, vmid);
        let record = journal(&files.state_dir).provenance(vmid).unwrap();
        if outcome == "succeeded" {
            assert_eq!(identities.len(), 1, "{point}: {:?}", tags(&sim, vmid));
            let record = record.unwrap_or_else(|| panic!("{point}: no record"));
            assert_eq!(record.identity(), identities[0], "{point}");
            let tag_writes = writes_to(&sim, vmid)
                .into_iter()
                .filter(|r| r.params.iter().any(|(k, _)| k == "tags"))
                .count();
            assert!(tag_writes >= 1, "{point}");
        } else {
            assert!(identities.is_empty(), "{point}: {identities:?}");
            assert!(record.is_none(), "{point}: {record:?}");
        }
        assert_eq!(sim.vm_running(vmid), Some(true), "{point}");
        assert!(sim.pool_members("bosun").contains(&vmid), "{point}");
    }
    kill(&mut child);
    hub.stop().await;
    sim.shutdown().await;
}

/// The VM adopted with a bootstrap.
const BOOTED: u32 = 4331;
/// The VM beside it, in pool `bosun` too, never signed for.
const BOOTED_NEIGHBOUR: u32 = 4332;
/// A VM whose guest agent does not answer.
const SILENT: u32 = 4333;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_adopted_with_a_bootstrap_gets_it_through_its_agent_and_its_controller_reaches_the_local_api()
 {
    let (sim, hub, files) = enrolled_stack().await;
    append_config(&files, POOL);
    files.use_local_api(0, "");
    let operator = files.trusted_operator();
    let (volid, _sha, golden) = vm_golden(&sim, &files);
    legacy_vm(&sim, &volid, BOOTED, "legacy-app").await;
    legacy_vm(&sim, &volid, BOOTED_NEIGHBOUR, "legacy-cache").await;
    // Both are in Bosun's pool, so the token could reach either: only the signature chooses.
    operator_joins_pool(&sim, BOOTED).await;
    operator_joins_pool(&sim, BOOTED_NEIGHBOUR).await;
    let neighbour_before = sim.vm_config(BOOTED_NEIGHBOUR).unwrap();
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    hub.put_desired(host, &desired_of(&[])).await;
    let digest = vm_digest(&sim, BOOTED).await;
    sim.clear_requests();

    let host_s = host.to_string();
    let args = adopt_vm_bootstrap_args(&host_s, &BOOTED.to_string(), "legacy-app", &digest);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let job = submit(&hub, &operator, files.dir.path(), &args).await;
    let result = job_result(&hub, host, job).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert_eq!(result["output"]["kind"], "qemu", "{result}");
    assert_eq!(result["output"]["bootstrap"], true, "{result}");
    let guest: Uuid = result["output"]["guest_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let identity = result["output"]["identity"].as_str().unwrap().to_owned();
    assert_eq!(tags(&sim, BOOTED), ["prod", "vm", identity.as_str()]);

    // The bootstrap, through the guest agent, at the fixed path, 0600, naming this guest.
    let file = sim.vm_file(BOOTED, BOOTSTRAP).expect("the bootstrap");
    assert_eq!(file.mode, 0o600);
    let bootstrap: Value = serde_json::from_slice(&file.content).unwrap();
    assert_eq!(bootstrap["schema"], "bosun.bootstrap/v1");
    assert_eq!(bootstrap["guest_id"], guest.to_string());
    assert_eq!(bootstrap["customer"]["customer_id"], "acme");
    // Written once, and only after the identity landed: the tag write comes first.
    let order: Vec<(String, String)> = requests_to(&sim, BOOTED)
        .into_iter()
        .filter(|r| r.method != "GET")
        .map(|r| (r.method, r.path))
        .collect();
    let tag_at = order
        .iter()
        .position(|(m, p)| m == "PUT" && p.ends_with("/config"))
        .unwrap_or_else(|| panic!("no tag write: {order:?}"));
    let file_writes: Vec<usize> = order
        .iter()
        .enumerate()
        .filter(|(_, (_, p))| p.ends_with("/agent/file-write"))
        .map(|(n, _)| n)
        .collect();
    assert_eq!(file_writes.len(), 1, "{order:?}");
    assert!(file_writes[0] > tag_at, "{order:?}");
    let token = agent
        .handles
        .journal
        .token_of_guest(guest.to_string())
        .await
        .unwrap();
    assert_eq!(
        token.map(|t| t.vmid),
        Some(BOOTED),
        "its token is journaled"
    );
    // Nothing reached inside the neighbour, which is as it was.
    assert!(
        agent_calls(&sim, BOOTED_NEIGHBOUR).is_empty(),
        "{:?}",
        agent_calls(&sim, BOOTED_NEIGHBOUR)
    );
    assert!(sim.vm_file(BOOTED_NEIGHBOUR, BOOTSTRAP).is_none());
    assert!(writes_to(&sim, BOOTED_NEIGHBOUR).is_empty());
    assert_eq!(sim.vm_config(BOOTED_NEIGHBOUR).unwrap(), neighbour_before);

    // Desired state names it; its controller, with the token the job wrote, backs it up as a
    // VM through the local API.
    let mut wanted = desired_of(&[(guest, "legacy-app", GuestKind::Qemu, golden)]);
    wanted["guests"][0]["vmid"] = json!(BOOTED);
    hub.put_desired(host, &wanted).await;
    eventually(
        Duration::from_secs(30),
        "the hub shows it as Bosun's",
        || {
            let hub = &hub;
            async move {
                hub_guest(hub, host, BOOTED).await.is_some_and(|g| {
                    g["status"] == "running" && g["guest_id"] == guest.to_string().as_str()
                })
            }
        },
    )
    .await;
    let url = bootstrap["local_api"]["url"].as_str().unwrap().to_owned();
    let token = bootstrap["local_api"]["token"].as_str().unwrap().to_owned();
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let wrong = client
        .get(format!("{url}/v1/backup/status"))
        .bearer_auth("x".repeat(token.len()))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401, "a token the job did not write");
    let run = agent_support::local_backup(&client, &url, &token).await;
    assert_eq!(run["phase"], "done", "{run}");
    let archive = run["archive"].as_str().unwrap_or_default();
    assert!(archive.contains(&format!("vzdump-qemu-{BOOTED}-")), "{run}");
    // Later passes keep the token: nothing more is written into the VM.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let writes = agent_calls(&sim, BOOTED)
        .into_iter()
        .filter(|(_, p)| p.ends_with("/agent/file-write"))
        .count();
    assert_eq!(writes, 1, "the bootstrap is written once");
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_whose_agent_does_not_answer_is_not_adopted_and_stays_as_it_was() {
    let (sim, hub, files) = enrolled_stack().await;
    append_config(&files, POOL);
    files.use_local_api(0, "");
    let operator = files.trusted_operator();
    let (volid, _sha, _golden) = vm_golden(&sim, &files);
    legacy_vm(&sim, &volid, SILENT, "legacy-mail").await;
    operator_joins_pool(&sim, SILENT).await;
    assert!(sim.set_vm_agent(SILENT, false));
    let before = sim.vm_config(SILENT).unwrap();
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    hub.put_desired(host, &desired_of(&[])).await;
    let digest = vm_digest(&sim, SILENT).await;
    sim.clear_requests();

    let host_s = host.to_string();
    let args = adopt_vm_bootstrap_args(&host_s, &SILENT.to_string(), "legacy-mail", &digest);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = std::time::Instant::now();
    let job = submit(&hub, &operator, files.dir.path(), &args).await;
    let result = job_result(&hub, host, job).await;
    assert_eq!(result["outcome"], "failed", "{result}");
    let detail = result["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(&format!(
            "the guest agent of vm {SILENT} did not answer within 10 s"
        )),
        "{result}"
    );
    assert!(started.elapsed() < Duration::from_secs(60), "bounded");
    // Pinged (a POST that changes nothing), and nothing else: no write, no tag, no record, no
    // token, no file.
    let changes: Vec<_> = writes_to(&sim, SILENT)
        .into_iter()
        .filter(|r| !r.path.ends_with("/agent/ping"))
        .collect();
    assert!(changes.is_empty(), "{changes:?}");
    let pings = agent_calls(&sim, SILENT);
    assert!(!pings.is_empty(), "its agent was never asked");
    assert!(
        pings.iter().all(|(_, p)| p.ends_with("/agent/ping")),
        "{pings:?}"
    );
    assert_eq!(sim.vm_config(SILENT).unwrap(), before);
    assert!(identities(&sim, SILENT).is_empty());
    assert!(sim.vm_file(SILENT, BOOTSTRAP).is_none());
    assert!(
        agent
            .handles
            .journal
            .provenance(SILENT)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(sim.vm_running(SILENT), Some(true));

    // Once its agent answers, the same signed pins adopt it, with its bootstrap.
    assert!(sim.set_vm_agent(SILENT, true));
    let job = submit(&hub, &operator, files.dir.path(), &args).await;
    let result = job_result(&hub, host, job).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert_eq!(identities(&sim, SILENT).len(), 1);
    let file = sim.vm_file(SILENT, BOOTSTRAP).expect("the bootstrap");
    let bootstrap: Value = serde_json::from_slice(&file.content).unwrap();
    assert_eq!(bootstrap["guest_id"], result["output"]["guest_id"]);
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}
