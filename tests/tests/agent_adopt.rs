//! Adopting containers that were on the node before Bosun (decision 0073), through the real
//! hub and `bosunctl job new|sign|submit`, against the simulator: the adopted container gets
//! the agent's identity (its own tags kept), a bootstrap when the job asks, and is a guest
//! from then on (desired state runs it, its controller and a signed job back it up under the
//! plan); a container nobody adopts is never written to, and its `guest_orphaned` alert
//! is silenced for that guest alone. A hostile hub cannot adopt what the operator did not
//! sign (a stranger's signature, a tampered document, a config that changed since it was
//! signed, another hostname, a guest Bosun holds already), and a lost answer to the identity's
//! write is judged by the tag. Killed at every step of the job, the agent finishes it after
//! the restart with one identity written, or none.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::crash::*;
use agent_support::hostile_hub::HostileHub;
use agent_support::jobs::{job_result, submit};
use agent_support::signing::{OperatorKey, envelope, job_doc};
use agent_support::*;
use bosun_proto::job::JobOutcome;
use bosun_pvesim::{EndpointFault, FaultConfig, SimConfig, SimHandle};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

/// The Debian template the simulated node carries, as an administrator creates from.
const TEMPLATE: &str = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst";

/// Creates and starts a container outside Bosun, as root on the node does.
async fn legacy_container(sim: &SimHandle, vmid: u32, hostname: &str) {
    let id = vmid.to_string();
    let created = sim
        .cli(
            "pct",
            &[
                "create",
                &id,
                TEMPLATE,
                "--hostname",
                hostname,
                "--rootfs",
                "local-lvm:4",
                "--cores",
                "2",
                "--memory",
                "1024",
                "--tags",
                "prod;web",
                "--unprivileged",
                "1",
            ],
            None,
        )
        .await
        .unwrap();
    assert_eq!(created.exit, 0, "{created:?}");
    let started = sim.cli("pct", &["start", &id], None).await.unwrap();
    assert_eq!(started.exit, 0, "{started:?}");
}

/// The container's config digest, as `pvesh get /nodes/pve/lxc/VMID/config` shows it.
async fn config_digest(sim: &SimHandle, vmid: u32) -> String {
    use bosun_pve::Pve as _;
    root_client(sim)
        .ct_config(bosun_pve::Vmid::new(vmid).unwrap())
        .await
        .unwrap()
        .digest
}

/// Every request that changed something of `vmid` in Proxmox.
fn writes_to(sim: &SimHandle, vmid: u32) -> Vec<bosun_pvesim::LoggedRequest> {
    let at = format!("/lxc/{vmid}");
    mutations(sim)
        .into_iter()
        .filter(|r| {
            r.path.ends_with(&at)
                || r.path.contains(&format!("{at}/"))
                || r.params
                    .iter()
                    .any(|(k, v)| k == "vmid" && *v == vmid.to_string())
        })
        .collect()
}

/// The container's tags.
fn tags(sim: &SimHandle, vmid: u32) -> Vec<String> {
    sim.guest_config(vmid)
        .and_then(|c| c.get("tags").cloned())
        .unwrap_or_default()
        .split([';', ',', ' '])
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

/// What the hub's stored report says of `vmid`: `(status, guest id)`.
async fn hub_guest(hub: &RealHub, host: Uuid, vmid: u32) -> Option<(String, Value)> {
    let detail = hub.host(host).await;
    detail["last_report"]["guests"]
        .as_array()?
        .iter()
        .find(|g| g["vmid"] == vmid)
        .map(|g| {
            (
                g["status"].as_str().unwrap_or_default().to_owned(),
                g["guest_id"].clone(),
            )
        })
}

/// The adopt arguments of `bosunctl job new` for `vmid` on `host`.
fn adopt_args(host: &str, vmid: &str, hostname: &str, digest: &str) -> Vec<String> {
    [
        "--kind",
        "adopt",
        "--host",
        host,
        "--vmid",
        vmid,
        "--param",
        &format!("hostname={hostname}"),
        "--param",
        &format!("config_digest={digest}"),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adopted_container_is_a_guest_from_then_on_and_the_others_stay_untouched() {
    let (sim, hub, files) = enrolled_stack().await;
    files.use_local_api(0, "");
    let operator = files.trusted_operator();
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    legacy_container(&sim, 120, "legacy-web").await;
    legacy_container(&sim, 121, "legacy-db").await;
    hub.put_desired(host, &desired(&sim, &[], "running")).await;
    eventually(Duration::from_secs(30), "both reported orphaned", || {
        let hub = &hub;
        async move {
            hub_guest(hub, host, 120).await.map(|g| g.0) == Some("orphaned".into())
                && hub_guest(hub, host, 121).await.map(|g| g.0) == Some("orphaned".into())
        }
    })
    .await;
    let digest = config_digest(&sim, 120).await;
    sim.clear_requests();

    // The operator adopts 120 with a bootstrap for its customer.
    let host_s = host.to_string();
    let mut args = adopt_args(&host_s, "120", "legacy-web", &digest);
    for param in [
        "bootstrap=true",
        "customer_id=acme",
        "customer_name=Acme Ltd",
    ] {
        args.extend(["--param".to_owned(), param.to_owned()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let adopt = submit(&hub, &operator, files.dir.path(), &args).await;
    let result = job_result(&hub, host, adopt).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    let guest: Uuid = result["output"]["guest_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let identity = result["output"]["identity"].as_str().unwrap().to_owned();
    assert_eq!(result["output"]["bootstrap"], true, "{result}");
    assert_eq!(tags(&sim, 120), ["prod", "web", identity.as_str()]);
    // One write reached Proxmox: the identity, on the config the operator signed.
    let writes = writes_to(&sim, 120);
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(writes[0].method, "PUT");
    assert!(
        writes[0]
            .params
            .iter()
            .any(|(k, v)| k == "digest" && *v == digest),
        "{writes:?}"
    );
    let bootstrap = files.helper.read_bootstrap(120);
    assert_eq!(bootstrap.guest_id, guest);
    assert_eq!(bootstrap.customer.customer_id, "acme");
    let token = agent
        .handles
        .journal
        .token_of_guest(guest.to_string())
        .await
        .unwrap();
    assert_eq!(token.map(|t| t.vmid), Some(120), "its token is journaled");

    // Desired state names it: it runs as a guest, backed up by the plan and by a signed job.
    let mut wanted = desired(&sim, &[(guest, "legacy-web")], "running");
    wanted["guests"][0]["vmid"] = json!(120);
    wanted["guests"][0]["resources"] = json!({ "cores": 2, "memory_mib": 1024, "rootfs_gib": 4 });
    hub.put_desired(host, &wanted).await;
    eventually(Duration::from_secs(30), "the hub shows it running", || {
        let hub = &hub;
        async move {
            hub_guest(hub, host, 120).await == Some(("running".into(), json!(guest.to_string())))
        }
    })
    .await;
    // Its controller, with the bootstrap the job pushed, backs it up under the plan.
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let run = local_backup(
        &client,
        &bootstrap.local_api.url,
        bootstrap.local_api.token.expose(),
    )
    .await;
    assert_eq!(run["phase"], "done", "{run}");
    assert!(
        mutations(&sim).iter().any(|r| r.path.ends_with("/vzdump")
            && r.params.iter().any(|(k, v)| k == "vmid" && v == "120")),
        "no vzdump of 120"
    );
    let vmid_s = "120".to_owned();
    let guest_s = guest.to_string();
    let backup = submit(
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
    let result = job_result(&hub, host, backup).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");

    // 121 was never adopted: never written to; its orphan alert is silenced for it alone.
    assert!(
        writes_to(&sim, 121).is_empty(),
        "{:?}",
        writes_to(&sim, 121)
    );
    assert_eq!(sim.guest_running(121), Some(true));
    let (status, silence) = hub
        .admin(
            Method::POST,
            "/v1/admin/alerts/silences",
            Some(json!({
                "host_id": host,
                "kind": "guest_orphaned",
                "subject": "vmid:121",
                "duration_seconds": 86_400,
                "reason": "a customer's own container, left alone",
            })),
        )
        .await;
    assert_eq!(status, 201, "{silence}");
    let (_, alerts) = hub.admin(Method::GET, "/v1/admin/alerts/open", None).await;
    let orphaned: Vec<&Value> = alerts
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == "guest_orphaned")
        .collect();
    let of = |subject: &str| orphaned.iter().find(|a| a["subject"] == subject).copied();
    assert_eq!(
        of("vmid:121").map(|a| a["silenced_by"].clone()),
        Some(silence["id"].clone()),
        "{alerts}"
    );
    assert!(
        of("vmid:120").is_none(),
        "the adopted guest is no orphan: {alerts}"
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

fn pins(hostname: &str, digest: &str) -> Value {
    json!({ "hostname": hostname, "config_digest": digest })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_hub_cannot_adopt_what_the_operator_did_not_sign() {
    let sim = start_sim(SimConfig::fast()).await;
    let hub = HostileHub::start().await;
    let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some("hostile-adopt"));
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
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = hub.host_id;
    let customer = Uuid::new_v4();
    hub.set_desired(desired(&sim, &[(customer, "customer")], "running"));
    let status = agent.handles.reconcile.clone();
    let bosun_vmid = running_vmid(&status, customer).await;
    legacy_container(&sim, 130, "legacy-web").await;
    let signed_digest = config_digest(&sim, 130).await;
    // The administrator changes 130 after the operator read its digest.
    let changed = sim
        .cli("pct", &["set", "130", "--memory", "2048"], None)
        .await
        .unwrap();
    assert_eq!(changed.exit, 0, "{changed:?}");
    let digest = config_digest(&sim, 130).await;
    assert_ne!(digest, signed_digest);
    tokio::time::sleep(Duration::from_secs(2)).await;
    sim.clear_requests();

    let fresh = Uuid::new_v4;
    let good = job_doc("adopt", host, fresh(), 130, pins("legacy-web", &digest), 1);
    let by_stranger = job_doc("adopt", host, fresh(), 130, pins("legacy-web", &digest), 1);
    let unsigned = job_doc("adopt", host, fresh(), 130, pins("legacy-web", &digest), 1);
    let stale = job_doc(
        "adopt",
        host,
        fresh(),
        130,
        pins("legacy-web", &signed_digest),
        1,
    );
    let renamed = job_doc("adopt", host, fresh(), 130, pins("other-web", &digest), 1);
    let bosuns = job_doc(
        "adopt",
        host,
        fresh(),
        bosun_vmid,
        pins("customer", &digest),
        1,
    );
    let taken_id = job_doc("adopt", host, customer, 130, pins("legacy-web", &digest), 1);
    // "Unsigned": the operator's signature of another document under this one.
    let unsigned_env = {
        let bytes = serde_json::to_vec(&unsigned).unwrap();
        let other = serde_json::to_vec(&good).unwrap();
        envelope(&bytes, &operator.sign(&other, "bosun-job@v1"))
    };
    let refused: Vec<(&Value, Value, &str, JobOutcome)> = vec![
        (
            &by_stranger,
            signed(&stranger, &by_stranger),
            "unknown_signer",
            JobOutcome::Rejected,
        ),
        (
            &unsigned,
            unsigned_env,
            "bad_signature",
            JobOutcome::Rejected,
        ),
        (
            &bosuns,
            signed(&operator, &bosuns),
            "already_a_guest",
            JobOutcome::Rejected,
        ),
        (
            &taken_id,
            signed(&operator, &taken_id),
            "guest_id_in_use",
            JobOutcome::Rejected,
        ),
        (
            &stale,
            signed(&operator, &stale),
            "config_changed",
            JobOutcome::Failed,
        ),
        (
            &renamed,
            signed(&operator, &renamed),
            "hostname_mismatch",
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
    // Nothing of any of them reached Proxmox: no write to either container, no tag anywhere.
    assert!(
        writes_to(&sim, 130).is_empty(),
        "{:?}",
        writes_to(&sim, 130)
    );
    assert!(
        writes_to(&sim, bosun_vmid).is_empty(),
        "{:?}",
        writes_to(&sim, bosun_vmid)
    );
    assert_eq!(tags(&sim, 130), ["prod", "web"]);
    assert!(
        agent
            .handles
            .journal
            .provenance(130)
            .await
            .unwrap()
            .is_none()
    );

    // The operator's own job, its answer lost: judged by the tag, written once; replayed by
    // the hub, refused as run.
    sim.set_faults(FaultConfig {
        endpoints: vec![EndpointFault {
            method: Some("PUT".into()),
            path: "/nodes/{node}/lxc/{vmid}/config".into(),
            drop_after_rate: 1.0,
            ..EndpointFault::default()
        }],
        ..FaultConfig::default()
    });
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
    sim.set_faults(FaultConfig::default());
    let identity = tags(&sim, 130)
        .into_iter()
        .filter(|t| t.starts_with("bosun-op-"))
        .collect::<Vec<_>>();
    assert_eq!(identity.len(), 1, "{:?}", tags(&sim, 130));
    let record = agent
        .handles
        .journal
        .provenance(130)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.identity(), identity[0]);
    assert_eq!(record.guest_id(), good["target"]["guest_id"].as_str());
    // The hub keeps sending it: it never runs again, and its result stands.
    let tag_writes = || {
        writes_to(&sim, 130)
            .into_iter()
            .filter(|r| r.params.iter().any(|(k, _)| k == "tags"))
            .count()
    };
    let after = tag_writes();
    assert!(after >= 1, "the identity was written");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(tag_writes(), after, "the adoption ran again");
    assert!(
        !hub.results()
            .iter()
            .any(|r| r.job_id == id_of(&good) && r.outcome != JobOutcome::Succeeded),
        "a replay must not overwrite the adoption's result"
    );
    assert_eq!(
        tags(&sim, 130)
            .iter()
            .filter(|t| t.starts_with("bosun-op-"))
            .count(),
        1
    );
    agent.stop().await;
    hub.shutdown();
    sim.shutdown().await;
}

/// Where the agent is killed, and how the job ends once it runs again.
pub(crate) const ADOPT_POINTS: &[(&str, &str)] = &[
    // Killed as the step is written: the run goes on or ends `interrupted before acceptance`.
    ("adopt_job.accepted.intent", "either"),
    ("adopt_job.accepted.done", "succeeded"),
    ("adopt_job.adopt_check.intent", "succeeded"),
    ("adopt_job.adopt_check.done", "succeeded"),
    ("adopt_job.record_adopted.intent", "succeeded"),
    ("adopt_job.record_adopted.done", "succeeded"),
    ("adopt_job.tag_identity.intent", "succeeded"),
    ("adopt_job.tag_identity.done", "succeeded"),
    ("job.result.queued", "succeeded"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_every_adopt_step_it_ends_with_one_identity_or_none() {
    let (sim, hub, files) = enrolled_stack().await;
    let operator = files.trusted_operator();
    let mut child = spawn_agent(&files.config_path, None);
    let host = host_id(&files.state_dir).await;
    hub.put_desired(host, &desired(&sim, &[], "running")).await;
    let host_s = host.to_string();
    for (n, (point, want)) in ADOPT_POINTS.iter().enumerate() {
        let vmid = 140 + u32::try_from(n).unwrap();
        legacy_container(&sim, vmid, "legacy-web").await;
        let digest = config_digest(&sim, vmid).await;
        kill(&mut child);
        child = spawn_agent(&files.config_path, Some(point));
        let vmid_s = vmid.to_string();
        let args = adopt_args(&host_s, &vmid_s, "legacy-web", &digest);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let job = submit(&hub, &operator, files.dir.path(), &args).await;
        assert_tripped(&mut child, &files.config_path, point).await;
        child = spawn_agent(&files.config_path, None);
        let result = job_result(&hub, host, job).await;
        let outcome = result["outcome"].as_str().unwrap_or_default();
        assert!(*want == "either" || outcome == *want, "{point}: {result}");
        journal_settles(&files.state_dir).await;
        assert_no_unfinished(&files.state_dir, point);
        let identities: Vec<String> = tags(&sim, vmid)
            .into_iter()
            .filter(|t| t.starts_with("bosun-op-"))
            .collect();
        let record = journal(&files.state_dir).provenance(vmid).unwrap();
        if outcome == "succeeded" {
            assert_eq!(identities.len(), 1, "{point}: {:?}", tags(&sim, vmid));
            let record = record.unwrap_or_else(|| panic!("{point}: no record"));
            assert_eq!(record.identity(), identities[0], "{point}");
        } else {
            assert!(identities.is_empty(), "{point}: {identities:?}");
            assert!(record.is_none(), "{point}: {record:?}");
        }
        assert_eq!(sim.guest_running(vmid), Some(true), "{point}");
    }
    kill(&mut child);
    hub.stop().await;
    sim.shutdown().await;
}
