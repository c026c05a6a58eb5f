//! A hostile hub cannot destroy or overwrite customer data: desired-state
//! removal, a scratch relabel attempt, replayed / expired / not-yet-valid /
//! retargeted / wrongly namespaced / unknown-signer / tampered / re-kinded
//! jobs. Asserted from the simulator's request log (no destructive call) and
//! from what the agent reported (each refusal as a `rejected` result and a
//! `job.refused` audit entry). A guest of a kind the agent does not know is refused
//! alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::hostile_hub::HostileHub;
use agent_support::signing::{OperatorKey, envelope, job_doc};
use agent_support::*;
use bosun_proto::job::JobOutcome;
use bosun_proto::report::GuestStatus;
use bosun_pvesim::SimConfig;
use serde_json::{Value, json};
use uuid::Uuid;

fn sign_doc(key: &OperatorKey, doc: &Value, namespace: &str) -> (Vec<u8>, String) {
    let bytes = serde_json::to_vec(doc).unwrap();
    let sig = key.sign(&bytes, namespace);
    (bytes, sig)
}

fn job_id(doc: &Value) -> Uuid {
    doc["job_id"].as_str().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_hub_cannot_destroy_customer_data() {
    let sim = start_sim(SimConfig::fast()).await;
    let hub = HostileHub::start().await;
    let files = agent_files(
        &sim,
        &hub.url,
        &hub.fingerprint,
        Some("hostile-enroll-token"),
    );
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

    // A customer guest, provisioned from desired state.
    let guest = Uuid::new_v4();
    hub.set_desired(desired(&sim, &[(guest, "customer")], "running"));
    let status = agent.handles.reconcile.clone();
    eventually(Duration::from_secs(60), "guest running", || {
        let status = status.clone();
        async move {
            let s = status.borrow();
            s.guests
                .iter()
                .any(|g| g.guest_id == Some(guest) && g.status == GuestStatus::Running)
        }
    })
    .await;
    let vmid = status
        .borrow()
        .guests
        .iter()
        .find(|g| g.guest_id == Some(guest))
        .unwrap()
        .vmid;

    // 1. A valid force-backup runs once; the hub replaying it gets a refusal.
    let backup = job_doc("force-backup", host, guest, vmid, json!({}), 1);
    let (bytes, sig) = sign_doc(&operator, &backup, "bosun-job@v1");
    hub.set_jobs(vec![envelope(&bytes, &sig)]);
    eventually(Duration::from_secs(60), "backup job succeeded", || {
        let hub = hub.clone();
        let id = job_id(&backup);
        async move {
            hub.results()
                .iter()
                .any(|r| r.job_id == id && r.outcome == JobOutcome::Succeeded)
        }
    })
    .await;
    eventually(
        Duration::from_secs(30),
        "replay refused and audited",
        || {
            let hub = hub.clone();
            let id = job_id(&backup).to_string();
            async move {
                hub.audit().iter().any(|(action, d)| {
                    action == "job.refused"
                        && d["job_id"] == id.as_str()
                        && d["detail"]["code"] == "already_run"
                })
            }
        },
    )
    .await;
    let vzdumps = sim
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/vzdump"))
        .count();
    assert_eq!(vzdumps, 1, "the replayed job ran again");
    assert!(
        !hub.results()
            .iter()
            .any(|r| r.job_id == job_id(&backup) && r.outcome != JobOutcome::Succeeded),
        "a replay must not overwrite the job's reported result"
    );

    // 2. Destructive jobs the hub forges or alters: every one refused.
    sim.clear_requests();
    let mut cases: Vec<(&str, Value, Vec<u8>, String)> = Vec::new();
    let decommission = |host: Uuid, guest: Uuid, vmid: u32| {
        job_doc("decommission", host, guest, vmid, json!({}), 1)
    };
    let mut expired = decommission(host, guest, vmid);
    let now = jiff::Timestamp::now();
    expired["not_before"] = json!(now - jiff::SignedDuration::from_hours(3));
    expired["expires_at"] = json!(now - jiff::SignedDuration::from_hours(2));
    let (b, s) = sign_doc(&operator, &expired, "bosun-job@v1");
    cases.push(("expired", expired, b, s));
    let mut early = decommission(host, guest, vmid);
    early["not_before"] = json!(now + jiff::SignedDuration::from_hours(2));
    early["expires_at"] = json!(now + jiff::SignedDuration::from_hours(3));
    let (b, s) = sign_doc(&operator, &early, "bosun-job@v1");
    cases.push(("not_yet_valid", early, b, s));
    let other_host = decommission(Uuid::new_v4(), guest, vmid);
    let (b, s) = sign_doc(&operator, &other_host, "bosun-job@v1");
    cases.push(("other_host", other_host, b, s));
    let other_guest = decommission(host, Uuid::new_v4(), vmid);
    let (b, s) = sign_doc(&operator, &other_guest, "bosun-job@v1");
    cases.push(("target_mismatch", other_guest, b, s));
    let other_vmid = decommission(host, guest, vmid + 1);
    let (b, s) = sign_doc(&operator, &other_vmid, "bosun-job@v1");
    cases.push(("target_mismatch", other_vmid, b, s));
    let namespace = decommission(host, guest, vmid);
    let (b, s) = sign_doc(&operator, &namespace, "file");
    cases.push(("wrong_namespace", namespace, b, s));
    let unknown = decommission(host, guest, vmid);
    let (b, s) = sign_doc(&stranger, &unknown, "bosun-job@v1");
    cases.push(("unknown_signer", unknown, b, s));
    let tampered = decommission(host, guest, vmid);
    let (mut b, s) = sign_doc(&operator, &tampered, "bosun-job@v1");
    let text = String::from_utf8(b)
        .unwrap()
        .replace("\"nonce\":\"n-", "\"nonce\":\"x-");
    b = text.into_bytes();
    let tampered: Value = serde_json::from_slice(&b).unwrap();
    cases.push(("bad_signature", tampered, b, s));
    // A valid signature over a force-backup, presented with the same job as a decommission.
    let benign = job_doc("force-backup", host, guest, vmid, json!({}), 1);
    let (_, s) = sign_doc(&operator, &benign, "bosun-job@v1");
    let mut rekinded = benign.clone();
    rekinded["kind"] = json!("decommission");
    let b = serde_json::to_vec(&rekinded).unwrap();
    cases.push(("bad_signature", rekinded, b, s));
    // A fresh job id reusing the backup job's nonce.
    let mut reused = decommission(host, guest, vmid);
    reused["nonce"] = backup["nonce"].clone();
    let (b, s) = sign_doc(&operator, &reused, "bosun-job@v1");
    cases.push(("nonce_reused", reused, b, s));

    hub.set_jobs(cases.iter().map(|(_, _, b, s)| envelope(b, s)).collect());
    for (code, doc, _, _) in &cases {
        let id = job_id(doc);
        eventually(
            Duration::from_secs(30),
            &format!("{code} reported rejected"),
            || {
                let hub = hub.clone();
                async move {
                    hub.results()
                        .iter()
                        .any(|r| r.job_id == id && r.outcome == JobOutcome::Rejected)
                }
            },
        )
        .await;
        eventually(Duration::from_secs(30), &format!("{code} audited"), || {
            let hub = hub.clone();
            let code = *code;
            async move {
                hub.audit().iter().any(|(action, d)| {
                    action == "job.refused"
                        && d["job_id"] == id.to_string().as_str()
                        && d["detail"]["code"] == code
                })
            }
        })
        .await;
    }

    // 3. The hub drops the guest from desired state: orphaned, untouched.
    hub.set_jobs(vec![]);
    let mut empty = desired(&sim, &[], "running");
    hub.set_desired(empty.clone());
    eventually(Duration::from_secs(30), "guest reported orphaned", || {
        let hub = hub.clone();
        async move {
            // This hub numbers no reports, so every poll carries a full one.
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
    assert!(
        hub.audit()
            .iter()
            .any(|(a, d)| a == "guest.orphaned" && d["vmid"] == vmid)
    );

    // 4. A scratch relabel attempt: desired state claiming the guest is scratch.
    empty["guests"] = desired(&sim, &[(guest, "customer")], "running")["guests"].clone();
    empty["guests"][0]["scratch"] = json!(true);
    hub.set_desired(empty);
    eventually(
        Duration::from_secs(30),
        "relabel refused and audited",
        || {
            let hub = hub.clone();
            async move { hub.audit().iter().any(|(a, _)| a == "desired.refused") }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    assert_eq!(
        sim.guest_running(vmid),
        Some(true),
        "the customer guest must survive"
    );
    let destroyed = destructive(&sim);
    assert!(
        destroyed.is_empty(),
        "destructive calls were made: {destroyed:?}"
    );
    let stops: Vec<_> = mutations(&sim)
        .into_iter()
        .filter(|r| r.path.contains("/status/stop") || r.path.contains("/status/shutdown"))
        .collect();
    assert!(stops.is_empty(), "the guest was stopped: {stops:?}");
    agent.stop().await;
    hub.shutdown();
    sim.shutdown().await;
}

/// A hub that answers a delta with `full_report: true` (it lost the report the
/// delta builds on) gets a full report at once, then deltas again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_that_lost_the_base_gets_a_full_report_at_once() {
    let sim = start_sim(SimConfig::fast()).await;
    let hub = HostileHub::start().await;
    hub.script.lock().numbered = true;
    let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some("resync-token"));
    let agent = InProcessAgent::start(&files.config_path).await;
    let bodies = |hub: &HostileHub| -> Vec<bool> {
        hub.script
            .lock()
            .polls
            .iter()
            .map(|p| p.report.is_some())
            .collect()
    };
    eventually(
        Duration::from_secs(30),
        "a full report, then deltas",
        || {
            let polls = bodies(&hub);
            // The first poll carries the whole report; once the node's first readings (disks,
            // pools) are in, polls settle into deltas.
            async move { polls.len() >= 3 && polls[0] && polls.iter().rev().take(2).all(|full| !full) }
        },
    )
    .await;
    let before = bodies(&hub).len();
    hub.script.lock().forget_next_delta = true;
    eventually(Duration::from_secs(30), "the resync", || {
        let polls = bodies(&hub);
        async move { polls.len() >= before + 5 }
    })
    .await;
    let polls = bodies(&hub);
    let after: Vec<bool> = polls[before..].to_vec();
    // The delta the hub could not apply, then the full report, then deltas.
    let forgotten = after
        .iter()
        .position(|full| !full)
        .expect("a delta after the switch");
    assert!(
        after[forgotten + 1],
        "the poll after the refused delta carries a full report: {after:?}"
    );
    let waits = hub.script.lock().waits[before..].to_vec();
    assert_eq!(
        waits[forgotten + 1],
        0,
        "the full report goes out at once, not on a held poll: waits {waits:?}"
    );
    assert!(
        waits[forgotten + 2..].iter().any(|w| *w > 0),
        "then held polls again: waits {waits:?}"
    );
    assert!(
        !after[forgotten + 2..].iter().any(|full| *full),
        "then deltas again: {after:?}"
    );
    let status = agent.handles.hub.borrow().clone();
    assert!(
        status.full_reports >= 2 && status.delta_reports >= 3,
        "{status:?}"
    );
    agent.stop().await;
    hub.shutdown();
    sim.shutdown().await;
}

/// A hub naming a guest of a kind the agent does not know (`"kind": "bhyve"`) gets that one
/// guest refused, with why, in the report and the audit trail: nothing reaches Proxmox for it,
/// and every other guest of the same generation still converges (the whole document is not
/// refused for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_of_an_unknown_kind_is_refused_alone() {
    let sim = start_sim(SimConfig::fast()).await;
    let hub = HostileHub::start().await;
    let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some("kind-token"));
    let agent = InProcessAgent::start(&files.config_path).await;
    let status = agent.handles.reconcile.clone();
    let running = |guest: Uuid| {
        let status = status.clone();
        move || {
            let status = status.clone();
            async move {
                status
                    .borrow()
                    .guests
                    .iter()
                    .any(|g| g.guest_id == Some(guest) && g.status == GuestStatus::Running)
            }
        }
    };

    let web = Uuid::new_v4();
    hub.set_desired(desired(&sim, &[(web, "web")], "running"));
    eventually(Duration::from_secs(60), "web running", running(web)).await;
    let first = status.borrow().applied_generation;
    sim.clear_requests();

    // The next generation keeps web, adds db and a guest of a kind no agent knows.
    let (db, odd) = (Uuid::new_v4(), Uuid::new_v4());
    let mut next = desired(
        &sim,
        &[(web, "web"), (db, "db"), (odd, "vm-odd")],
        "running",
    );
    next["guests"][2]["kind"] = json!("bhyve");
    hub.set_desired(next);
    eventually(Duration::from_secs(60), "db running", running(db)).await;
    eventually(Duration::from_secs(30), "vm-odd refused", || {
        let status = status.clone();
        async move {
            status
                .borrow()
                .refused
                .iter()
                .any(|r| r.guest_id == Some(odd) && r.field.as_deref() == Some("kind"))
        }
    })
    .await;
    eventually(Duration::from_secs(30), "the refusal audited", || {
        let hub = hub.clone();
        async move {
            hub.audit().iter().any(|(action, d)| {
                action == "desired.guest_refused"
                    && d["detail"]["guests"][0]["guest_id"] == odd.to_string().as_str()
            })
        }
    })
    .await;

    let s = status.borrow().clone();
    let refusal = s
        .refused
        .iter()
        .find(|r| r.guest_id == Some(odd))
        .expect("refused");
    assert_eq!(refusal.name, "vm-odd");
    assert!(refusal.reason.contains("\"bhyve\""), "{refusal:?}");
    assert_eq!(
        s.refused.len(),
        1,
        "only vm-odd is refused: {:?}",
        s.refused
    );
    assert!(
        !s.guests.iter().any(|g| g.guest_id == Some(odd)),
        "vm-odd is no guest of the host: {:?}",
        s.guests
    );
    assert!(
        s.guests
            .iter()
            .any(|g| g.guest_id == Some(web) && g.status == GuestStatus::Running),
        "web keeps running: {:?}",
        s.guests
    );
    // A generation with a refusal is never reported applied (decision 0065).
    assert!(s.generation > first, "{s:?}");
    assert_eq!(s.applied_generation, first, "{s:?}");

    // Proxmox saw db's restore and nothing of vm-odd.
    let requests = sim.requests();
    let creates: Vec<_> = requests
        .iter()
        .filter(|r| r.method == "POST" && (r.path.ends_with("/lxc") || r.path.ends_with("/qemu")))
        .collect();
    assert_eq!(creates.len(), 1, "only db is created: {creates:?}");
    let odd_id = odd.to_string();
    let about_odd: Vec<_> = requests
        .iter()
        .filter(|r| {
            r.params
                .iter()
                .any(|(_, v)| v.contains("vm-odd") || v.contains(&odd_id))
        })
        .collect();
    assert!(
        about_odd.is_empty(),
        "vm-odd reached Proxmox: {about_odd:?}"
    );

    agent.stop().await;
    hub.shutdown();
    sim.shutdown().await;
}
