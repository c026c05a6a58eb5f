//! Requests Proxmox carried out while their answer was lost, and transient
//! failures during signed jobs (DESIGN §9): the agent looks before it retries
//! or reports, forgets a guest only once Proxmox says it is gone, and retries
//! what is retryable within the job's validity window.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::sync::Arc;
use std::time::Duration;

use agent_support::jobs::{job_result, submit};
use agent_support::signing::OperatorKey;
use agent_support::*;
use bosun_agentd::clock::SystemClock;
use bosun_agentd::ops::journal::Store;
use bosun_pvesim::{EndpointFault, FaultConfig, SimHandle};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::util::SubscriberInitExt;
use uuid::Uuid;

/// Log output captured from the in-process agent.
#[derive(Clone, Default)]
struct Captured(Arc<parking_lot::Mutex<Vec<u8>>>);

impl Captured {
    /// Installs a subscriber writing INFO and above here (one per test process).
    fn install() -> Self {
        let captured = Self::default();
        tracing_subscriber::fmt()
            .with_writer(captured.clone())
            .with_ansi(false)
            .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
            .finish()
            .try_init()
            .expect("the test's subscriber is the only one");
        captured
    }

    fn lines_with(&self, text: &str) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock())
            .lines()
            .filter(|l| l.contains(text))
            .map(str::to_owned)
            .collect()
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// A simulator, a hub and an enrolled agent with one customer guest running.
struct OneGuest {
    sim: SimHandle,
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
        let vmid = running_vmid(&agent.handles.reconcile, guest).await;
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

    async fn decommission(&self) -> Uuid {
        let (host, guest, vmid) = (
            self.host.to_string(),
            self.guest.to_string(),
            self.vmid.to_string(),
        );
        let args = [
            "--kind",
            "decommission",
            "--host",
            &host,
            "--guest",
            &guest,
            "--vmid",
            &vmid,
        ];
        submit(&self.hub, &self.operator, self.files.dir.path(), &args).await
    }

    async fn stop(self) -> (SimHandle, AgentFiles) {
        self.agent.stop().await;
        self.hub.stop().await;
        (self.sim, self.files)
    }
}

fn rule(method: &str, path: &str) -> EndpointFault {
    EndpointFault {
        method: Some(method.to_owned()),
        path: path.to_owned(),
        ..EndpointFault::default()
    }
}

/// Guest creations (restores of the golden image) the simulator was asked for.
fn creates(sim: &SimHandle) -> usize {
    sim.requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/nodes/pve/lxc")
        .count()
}

/// The agent's journal, opened beside it (read-only use).
fn journal(files: &AgentFiles) -> Store {
    Store::open(
        &files.state_dir.join("journal.sqlite"),
        SystemClock::shared(),
    )
    .unwrap()
}

fn provenance_rows(files: &AgentFiles) -> Vec<u32> {
    journal(files)
        .all_provenance()
        .unwrap()
        .into_iter()
        .map(|p| p.vmid())
        .collect()
}

/// Item 10: Proxmox destroys the guest but the DELETE's answer is lost. The job
/// looks, finds the guest gone, reports success and forgets the guest; the next
/// guest is provisioned once (no loop on a vmid still recorded as created).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decommission_whose_delete_answer_was_lost_is_done_and_forgets_the_guest() {
    let stack = OneGuest::start().await;
    let (sim, hub, host, vmid) = (&stack.sim, &stack.hub, stack.host, stack.vmid);
    hub.put_desired(host, &desired(sim, &[], "running")).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    sim.set_faults(FaultConfig {
        endpoints: vec![EndpointFault {
            drop_after_rate: 1.0,
            ..rule("DELETE", "/nodes/{node}/lxc/{vmid}")
        }],
        ..FaultConfig::default()
    });
    let job = stack.decommission().await;
    let result = job_result(hub, host, job).await;
    let deletes: Vec<u16> = sim
        .requests()
        .iter()
        .filter(|r| r.method == "DELETE")
        .map(|r| r.status)
        .collect();
    assert_eq!(deletes, [0], "one DELETE, its answer dropped");
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert!(sim.guest_ids().is_empty(), "{:?}", sim.guest_ids());
    sim.set_faults(FaultConfig::default());

    // A new guest takes the freed vmid; it is created exactly once.
    let before = creates(sim);
    let next = Uuid::new_v4();
    hub.put_desired(host, &desired(sim, &[(next, "next")], "running"))
        .await;
    let next_vmid = tokio::time::timeout(
        Duration::from_secs(30),
        running_vmid(&stack.agent.handles.reconcile, next),
    )
    .await
    .expect("the next guest runs");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(creates(sim) - before, 1, "one creation, no provision loop");
    let (sim, files) = stack.stop().await;
    let rows = provenance_rows(&files);
    assert!(
        !rows.contains(&vmid) || next_vmid == vmid,
        "the destroyed guest's provenance stays: {rows:?}"
    );
    assert_eq!(rows, [next_vmid]);
    sim.shutdown().await;
}

/// Item 12: a 500 on a status read, a guest locked by a backup and a 596 on the
/// DELETE, each once, are waited out within the job's validity window. The
/// job's log lines carry its job id, the reconcile pass's its generation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decommission_retries_transient_failures_and_succeeds() {
    let logs = Captured::install();
    let stack = OneGuest::start().await;
    let (sim, hub, host, vmid) = (&stack.sim, &stack.hub, stack.host, stack.vmid);
    hub.put_desired(host, &desired(sim, &[], "running")).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    sim.clear_requests();
    sim.set_faults(FaultConfig {
        endpoints: vec![EndpointFault {
            error_rate: 1.0,
            error_message: "got unexpected error from daemon".to_owned(),
            ..rule("GET", "/nodes/{node}/lxc/{vmid}/status/current")
        }],
        ..FaultConfig::default()
    });
    let status_path = format!("/nodes/pve/lxc/{vmid}/status/current");
    let job = stack.decommission().await;
    // Once the status read failed (the client asks a failed read again, so the decommission
    // sees it only when every attempt failed): lock the guest as a backup would.
    eventually(Duration::from_secs(30), "a failed status read", || async {
        sim.requests()
            .iter()
            .any(|r| r.path == status_path && r.status == 500)
            && !logs.lines_with("looking again").is_empty()
    })
    .await;
    assert!(sim.set_guest_lock(vmid, Some("backup")));
    sim.set_faults(FaultConfig {
        endpoints: vec![EndpointFault {
            busy_rate: 1.0,
            ..rule("DELETE", "/nodes/{node}/lxc/{vmid}")
        }],
        ..FaultConfig::default()
    });
    eventually(
        Duration::from_secs(30),
        "a status read seeing the lock",
        || async {
            sim.requests()
                .iter()
                .any(|r| r.path == status_path && r.status == 200)
        },
    )
    .await;
    assert!(sim.set_guest_lock(vmid, None));
    eventually(Duration::from_secs(30), "a DELETE answered 596", || async {
        sim.requests()
            .iter()
            .any(|r| r.method == "DELETE" && r.status == 596)
    })
    .await;
    sim.set_faults(FaultConfig::default());
    let result = job_result(hub, host, job).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert!(sim.guest_ids().is_empty(), "{:?}", sim.guest_ids());
    let retries = logs.lines_with("looking again");
    assert!(retries.len() >= 3, "{retries:?}");
    let in_span = format!("job{{job_id={job}");
    assert!(retries.iter().all(|l| l.contains(&in_span)), "{retries:?}");
    let acting = logs.lines_with("reconcile pass acting");
    assert!(!acting.is_empty());
    assert!(
        acting.iter().all(|l| l.contains("reconcile{generation=")),
        "{acting:?}"
    );
    let (sim, files) = stack.stop().await;
    assert!(provenance_rows(&files).is_empty());
    sim.shutdown().await;
}

/// Item 10: provisions that fail are retried after a pause that doubles, not in
/// a tight loop; once Proxmox recovers the guest is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_provisions_back_off() {
    let (sim, hub, files) = enrolled_stack().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    sim.set_faults(FaultConfig {
        endpoints: vec![EndpointFault {
            error_rate: 1.0,
            error_message: "unable to create CT - got timeout".to_owned(),
            ..rule("POST", "/nodes/{node}/lxc")
        }],
        ..FaultConfig::default()
    });
    let guest = Uuid::new_v4();
    hub.put_desired(host, &desired(&sim, &[(guest, "customer")], "running"))
        .await;
    eventually(
        Duration::from_secs(30),
        "a first failed creation",
        || async { creates(&sim) > 0 },
    )
    .await;
    // Passes at 0, 1, 3 and 7 s: at most 4 attempts in 6 s (a tight loop makes hundreds).
    tokio::time::sleep(Duration::from_secs(6)).await;
    let attempts = creates(&sim);
    assert!(
        (2..=4).contains(&attempts),
        "{attempts} creation attempts in 6 s"
    );
    sim.set_faults(FaultConfig::default());
    let vmid = tokio::time::timeout(
        Duration::from_secs(30),
        running_vmid(&agent.handles.reconcile, guest),
    )
    .await
    .expect("the guest is created once Proxmox recovers");
    assert_eq!(sim.guest_ids(), [vmid]);
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
}

/// Item 11, without a crash: the provisioning restore's answer is lost while Proxmox
/// carries it out. The agent waits for the restore, sees its own tag and finishes the
/// guest instead of rolling it back and restoring a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provisioning_restore_whose_answer_was_lost_is_finished_not_redone() {
    let mut config = bosun_pvesim::SimConfig::fast();
    config.durations.vzrestore = Duration::from_secs(300);
    let sim = start_sim(config).await;
    let hub = RealHub::start().await;
    let token = hub.enroll_token().await;
    let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some(&token));
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    sim.set_faults(FaultConfig {
        endpoints: vec![EndpointFault {
            drop_after_rate: 1.0,
            ..rule("POST", "/nodes/{node}/lxc")
        }],
        ..FaultConfig::default()
    });
    let guest = Uuid::new_v4();
    hub.put_desired(host, &desired(&sim, &[(guest, "customer")], "running"))
        .await;
    eventually(
        Duration::from_secs(30),
        "the restore's answer dropped",
        || async {
            sim.requests()
                .iter()
                .any(|r| r.method == "POST" && r.path == "/nodes/pve/lxc" && r.status == 0)
        },
    )
    .await;
    sim.set_faults(FaultConfig::default());
    let vmid = tokio::time::timeout(
        Duration::from_secs(60),
        running_vmid(&agent.handles.reconcile, guest),
    )
    .await
    .expect("the guest runs");
    assert_eq!(sim.guest_ids(), [vmid]);
    assert_eq!(creates(&sim), 1, "the lost restore was not redone");
    agent.stop().await;
    hub.stop().await;
    assert_eq!(provenance_rows(&files), [vmid]);
    sim.shutdown().await;
}

/// A stack whose restores (`POST /nodes/{node}/lxc`) are carried out `latency` after they
/// arrive, and one guest desired: the agent, the hub, and the guest's id.
async fn slow_restore(latency: Duration) -> (SimHandle, RealHub, AgentFiles, InProcessAgent, Uuid) {
    let sim = start_sim(bosun_pvesim::SimConfig::fast()).await;
    let hub = RealHub::start().await;
    let token = hub.enroll_token().await;
    let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some(&token));
    let agent = InProcessAgent::start(&files.config_path).await;
    sim.set_faults(FaultConfig {
        endpoints: vec![EndpointFault {
            latency,
            ..rule("POST", "/nodes/{node}/lxc")
        }],
        ..FaultConfig::default()
    });
    let guest = Uuid::new_v4();
    hub.put_desired(
        agent.handles.host_id,
        &desired(&sim, &[(guest, "customer")], "running"),
    )
    .await;
    (sim, hub, files, agent, guest)
}

/// A restore whose request outlasts the client (6.5 s of latency against the agent's 5 s
/// request timeout) is carried out by Proxmox after the agent gave up waiting for its answer.
/// The provisioning stays open while the request may still land, finds the guest carrying
/// its tag and finishes it: one restore, one guest, no stopped leftover that later passes
/// would see as a stranger. Before, one look while the request was still in flight saw the
/// vmid free, closed the provisioning `compensated`, and every later pass left another
/// orphan the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_that_lands_after_the_client_gave_up_is_finished_not_orphaned() {
    let (sim, hub, files, agent, guest) = slow_restore(Duration::from_millis(6500)).await;
    let vmid = tokio::time::timeout(
        Duration::from_secs(90),
        running_vmid(&agent.handles.reconcile, guest),
    )
    .await
    .expect("the guest runs");
    assert_eq!(sim.guest_ids(), [vmid], "no leftover container");
    assert_eq!(creates(&sim), 1, "one restore, carried out once");
    agent.stop().await;
    hub.stop().await;
    assert_eq!(provenance_rows(&files), [vmid]);
    sim.shutdown().await;
}

fn late_landing_rows(files: &AgentFiles) -> Vec<u32> {
    journal(files)
        .late_landings()
        .unwrap()
        .into_iter()
        .map(|l| l.vmid)
        .collect()
}

/// A7, the sweep: a restore whose answer was lost lands only after its landing window (20 s
/// of latency against a 5 s client timeout and a 10 s window). The provisioning closes, the
/// vmid is watched, and when the late restore lands the next pass destroys it through the gate
/// as the sending operation's own creation. (The guest is no longer desired meanwhile, so no
/// later provisioning takes the vmid first: that race ends with Proxmox refusing the late
/// restore, since a restore never overwrites an existing guest.) Before, the late guest stayed
/// behind for ever as a stopped stranger nobody could remove unsigned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_that_lands_after_its_window_is_swept_up_through_the_gate() {
    let (sim, hub, files, agent, _guest) = slow_restore(Duration::from_secs(20)).await;
    let host = agent.handles.host_id;
    eventually(
        Duration::from_secs(60),
        "the lost restore's vmid is watched",
        || async { !late_landing_rows(&files).is_empty() },
    )
    .await;
    hub.put_desired(host, &desired(&sim, &[], "running")).await;
    let watched = late_landing_rows(&files);
    assert_eq!(watched.len(), 1, "{watched:?}");
    let late = watched[0];
    assert!(sim.guest_ids().is_empty(), "nothing has landed yet");
    eventually(
        Duration::from_secs(90),
        "the late restore landed and was swept",
        || async {
            late_landing_rows(&files).is_empty()
                && sim
                    .requests()
                    .iter()
                    .any(|r| r.method == "DELETE" && r.path == format!("/nodes/pve/lxc/{late}"))
        },
    )
    .await;
    assert!(sim.guest_ids().is_empty(), "no leftover container");
    assert_eq!(creates(&sim), 1, "the one late restore");
    let destroyed: Vec<String> = destructive(&sim).into_iter().map(|r| r.path).collect();
    assert_eq!(
        destroyed,
        [format!("/nodes/pve/lxc/{late}")],
        "only the late guest"
    );
    agent.stop().await;
    hub.stop().await;
    assert!(provenance_rows(&files).is_empty());
    let store = journal(&files);
    let audit = store.audit_since(0, 10_000).unwrap();
    let allowed = audit.iter().any(|e| {
        e.event.event == "gate.allowed"
            && e.event.vmid == Some(late)
            && e.event.detail["authority"] == "compensation"
    });
    assert!(allowed, "the destroy went through the gate as compensation");
    let ended = audit.iter().any(|e| {
        e.event.event == "restore.late_landing_ended"
            && e.event.vmid == Some(late)
            && e.event.detail["outcome"] == "destroyed"
    });
    assert!(ended, "the watch ended with the destroy");
    sim.shutdown().await;
}

/// A7, the sweep, the other way round: another guest takes the watched vmid before the late
/// restore lands (an administrator's, without the operation's tag). Proxmox refuses the late
/// restore, since a restore never overwrites an existing guest; the sweep sees a guest without
/// the tag, never touches it, and ends the watch `foreign`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_vmid_taken_by_another_guest_is_never_touched() {
    use bosun_pve::{Pve, RestoreRequest, StorageId, Vmid, VolumeId};
    let (sim, hub, files, agent, _guest) = slow_restore(Duration::from_secs(20)).await;
    let host = agent.handles.host_id;
    eventually(
        Duration::from_secs(60),
        "the lost restore's vmid is watched",
        || async { !late_landing_rows(&files).is_empty() },
    )
    .await;
    hub.put_desired(host, &desired(&sim, &[], "running")).await;
    let late = late_landing_rows(&files)[0];
    sim.set_faults(FaultConfig::default());
    let root = root_client(&sim);
    let request = RestoreRequest::new(
        Vmid::new(late).unwrap(),
        VolumeId::new(sim.endpoint().golden_volid.clone()).unwrap(),
        StorageId::new("local-lvm".to_owned()).unwrap(),
    );
    let upid = root.restore_ct(&request).await.unwrap();
    root.wait_task(bosun_pve::Op::RestoreCt, &upid)
        .await
        .unwrap();
    eventually(Duration::from_secs(90), "the watch ended", || async {
        late_landing_rows(&files).is_empty()
    })
    .await;
    agent.stop().await;
    hub.stop().await;
    assert_eq!(sim.guest_ids(), [late], "the administrator's guest stays");
    assert!(destructive(&sim).is_empty(), "nothing was destroyed");
    let audit = journal(&files).audit_since(0, 10_000).unwrap();
    let ended = audit.iter().any(|e| {
        e.event.event == "restore.late_landing_ended"
            && e.event.vmid == Some(late)
            && e.event.detail["outcome"] == "foreign"
    });
    assert!(ended, "the watch ended as someone else's guest");
    sim.shutdown().await;
}

/// Item 12 for a restore: a 500 on the status read and a 500 refusing the restore
/// itself, each once, are retried within the job's validity window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_now_retries_transient_failures_and_succeeds() {
    let stack = OneGuest::start().await;
    let (sim, hub, host, vmid) = (&stack.sim, &stack.hub, stack.host, stack.vmid);
    let (host_s, guest_s, vmid_s) = (host.to_string(), stack.guest.to_string(), vmid.to_string());
    let target = ["--host", &host_s, "--guest", &guest_s, "--vmid", &vmid_s];
    let mut args = vec!["--kind", "force-backup"];
    args.extend_from_slice(&target);
    let backup = submit(hub, &stack.operator, stack.files.dir.path(), &args).await;
    let result = job_result(hub, host, backup).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    let volid = result["output"]["volid"].as_str().unwrap().to_owned();

    sim.clear_requests();
    sim.set_faults(FaultConfig {
        endpoints: vec![EndpointFault {
            error_rate: 1.0,
            ..rule("GET", "/nodes/{node}/lxc/{vmid}/status/current")
        }],
        ..FaultConfig::default()
    });
    let param = format!("backup={volid}");
    let mut args = vec!["--kind", "restore-now", "--param", &param];
    args.extend_from_slice(&target);
    let restore = submit(hub, &stack.operator, stack.files.dir.path(), &args).await;
    eventually(Duration::from_secs(30), "a failed status read", || async {
        sim.requests()
            .iter()
            .any(|r| r.path.ends_with("/status/current") && r.status == 500)
    })
    .await;
    sim.set_faults(FaultConfig {
        endpoints: vec![EndpointFault {
            error_rate: 1.0,
            ..rule("POST", "/nodes/{node}/lxc")
        }],
        ..FaultConfig::default()
    });
    eventually(Duration::from_secs(30), "a refused restore", || async {
        sim.requests()
            .iter()
            .any(|r| r.method == "POST" && r.path == "/nodes/pve/lxc" && r.status == 500)
    })
    .await;
    sim.set_faults(FaultConfig::default());
    let result = job_result(hub, host, restore).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert_eq!(destructive(sim).len(), 2, "one refused, one carried out");
    assert_eq!(sim.guest_running(vmid), Some(true));
    let (sim, _files) = stack.stop().await;
    sim.shutdown().await;
}

/// D12: a force-backup that meets a guest locked by another backup, and a vzdump the
/// daemon refuses with a 500, is asked again within the job's window and succeeds: the
/// operator does not have to sign a new job for a transient refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_backup_retries_a_locked_guest_and_a_refused_vzdump() {
    let stack = OneGuest::start().await;
    let (sim, hub, host, vmid) = (&stack.sim, &stack.hub, stack.host, stack.vmid);
    let (host_s, guest_s, vmid_s) = (host.to_string(), stack.guest.to_string(), vmid.to_string());
    sim.clear_requests();
    sim.set_faults(FaultConfig {
        endpoints: vec![EndpointFault {
            error_rate: 1.0,
            ..rule("POST", "/nodes/{node}/vzdump")
        }],
        ..FaultConfig::default()
    });
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
    let job = submit(hub, &stack.operator, stack.files.dir.path(), &args).await;
    eventually(Duration::from_secs(30), "a refused vzdump", || async {
        sim.requests()
            .iter()
            .any(|r| r.path == "/nodes/pve/vzdump" && r.status == 500)
    })
    .await;
    assert!(sim.set_guest_lock(vmid, Some("backup")));
    sim.set_faults(FaultConfig::default());
    eventually(
        Duration::from_secs(30),
        "a vzdump meeting the lock",
        || async {
            sim.requests()
                .iter()
                .filter(|r| r.path == "/nodes/pve/vzdump")
                .count()
                >= 2
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(sim.set_guest_lock(vmid, None));
    let result = job_result(hub, host, job).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert!(
        sim.storage_volumes("local")
            .iter()
            .any(|v| v.contains(&format!("vzdump-lxc-{vmid}-"))),
        "the archive exists"
    );
    let (sim, _files) = stack.stop().await;
    sim.shutdown().await;
}
