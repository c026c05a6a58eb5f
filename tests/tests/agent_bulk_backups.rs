//! Bulk volumes' own backups, end to end (decision 0090): the simulator, a real hub, the agent
//! and the root helper's real `bulk_archive` verb entering the simulated guest through the
//! simulator's `pct`. A volume the signed plan names no target for is reported unprotected
//! and nothing is archived, whatever desired state says; once the operator signs a plan naming
//! a target, the volume's archive lands in that target's directory (`bosun-bulk/<guest>/
//! <volume>/`), its SHA-256 in the report and the audit log. A hub that points desired state
//! at another target moves nothing: the archive still goes where the plan says, and the
//! desired decision is refused. A target the node cannot reach fails the archive, reported
//! with why. A signed `restore-bulk` (decision 0108) puts the volume's recorded archive back,
//! and refuses what the journal does not hold or what no longer hashes as recorded, leaving the
//! guest untouched.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_support::jobs::{job_result, submit};
use agent_support::signing::{plan_of, signed_plan};
use agent_support::*;
use bosun_proto::data_plan::PlanBulkBackup;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use uuid::Uuid;

fn local_dir(path: &Path, role: &str) -> Value {
    json!({
        "type": "local-dir",
        "durable_id": path.display().to_string(),
        "class": "slow",
        "role": role,
        "policy": {},
        "state": "attached",
    })
}

/// The hub's report of `guest`'s bulk volume `media`, once there is one.
async fn media(hub: &RealHub, host: Uuid, guest: Uuid) -> Option<Value> {
    hub.host(host).await["last_report"]["bulk_volumes"]
        .as_array()?
        .iter()
        .find(|v| v["guest_id"] == json!(guest) && v["name"] == "media")
        .cloned()
}

/// The archives written for `guest`'s `media` beneath the target directory `dir`.
fn archives(dir: &Path, guest: Uuid) -> Vec<PathBuf> {
    let at = dir.join("bosun-bulk").join(guest.to_string()).join("media");
    let mut out: Vec<PathBuf> = std::fs::read_dir(at)
        .into_iter()
        .flatten()
        .map(|e| e.unwrap().path())
        .collect();
    out.sort();
    out
}

/// `desired` with a signed plan naming `bulk` as its bulk backups.
fn with_plan(desired: &Value, host: Uuid, bulk: Vec<PlanBulkBackup>) -> Value {
    let mut plan = plan_of(desired, host);
    plan.bulk_backups = bulk;
    let mut out = desired.clone();
    out["data_plan"] = signed_plan(&plan);
    out
}

/// The stack of both tests: an agent with the simulator's `pct` and local directories beneath
/// a new temporary root (the helper's backup roots hold it), looking at bulk archives every
/// second; guest `media-box` with bulk volume `media` on the `bulk-data` target `bulk`, whose
/// desired decision is a backup to `backup`; `targets` more `vzdump-target`s by name. Only
/// the directories named in `made` exist on the node.
struct MediaBox {
    sim: bosun_pvesim::SimHandle,
    hub: RealHub,
    files: AgentFiles,
    agent: InProcessAgent,
    roots: tempfile::TempDir,
    host: Uuid,
    guest: Uuid,
    desired: Value,
    /// The operator the agent trusts for signed jobs.
    operator: agent_support::signing::OperatorKey,
}

impl MediaBox {
    async fn start(targets: &[&str], made: &[&str]) -> Self {
        let (sim, hub, files) = enrolled_stack().await;
        let roots = tempfile::tempdir().unwrap();
        for name in made {
            std::fs::create_dir_all(roots.path().join(name)).unwrap();
        }
        files.allow_local_dirs(&[roots.path().to_str().unwrap()]);
        files.use_sim_pct(&sim);
        let operator = files.trusted_operator();
        // No local API, so no bootstrap binds the guest's stamp: the helper binds it to the
        // guest id at its first archive.
        let mut text = std::fs::read_to_string(&files.config_path).unwrap();
        text.push_str("[backup]\nbulk_check_ms = 1000\n");
        std::fs::write(&files.config_path, text).unwrap();
        let agent = InProcessAgent::start(&files.config_path).await;
        let host = agent.handles.host_id;
        let guest = Uuid::new_v4();
        let mut desired = desired(&sim, &[(guest, "media-box")], "running");
        let mut storage = vec![local_dir(&roots.path().join("bulk"), "bulk-data")];
        storage.extend(
            targets
                .iter()
                .map(|name| local_dir(&roots.path().join(name), "vzdump-target")),
        );
        desired["storage"] = Value::Array(storage);
        desired["guests"][0]["bulk_volumes"] = json!([{
            "name": "media", "size_gib": 1, "path": "/srv/media", "class": "slow",
            "backup": { "kind": "target", "target": roots.path().join("backup").display().to_string() },
        }]);
        Self {
            sim,
            hub,
            files,
            agent,
            roots,
            host,
            guest,
            desired,
            operator,
        }
    }

    /// The directory of target `name`.
    fn dir(&self, name: &str) -> PathBuf {
        self.roots.path().join(name)
    }

    /// The plan entry archiving `media` to target `name`, keeping `keep_last`.
    fn entry(&self, name: &str, keep_last: u32) -> PlanBulkBackup {
        PlanBulkBackup {
            guest_id: self.guest,
            volume: "media".into(),
            path: "/srv/media".into(),
            target: self.dir(name).display().to_string(),
            schedule: "daily".into(),
            keep_last,
        }
    }

    async fn stop(self) {
        self.agent.stop().await;
        self.hub.stop().await;
        self.sim.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_volume_is_archived_only_where_the_signed_plan_says() {
    let stack = MediaBox::start(&["backup", "other"], &["bulk", "backup", "other"]).await;
    let MediaBox {
        ref hub,
        ref files,
        ref agent,
        host,
        guest,
        ref desired,
        ..
    } = stack;
    let mut desired = desired.clone();
    let (backup, other) = (stack.dir("backup"), stack.dir("other"));

    // A plan that names no bulk backup: desired state's wish archives nothing.
    hub.put_desired(host, &with_plan(&desired, host, Vec::new()))
        .await;
    running_vmid(&agent.handles.reconcile, guest).await;
    eventually(
        Duration::from_secs(30),
        "the volume is reported",
        || async { media(hub, host, guest).await.is_some() },
    )
    .await;
    let report = media(hub, host, guest).await.unwrap();
    assert!(report["signed_target"].is_null(), "{report}");
    eventually(
        Duration::from_secs(30),
        "the hub says it is unprotected",
        || async {
            !agent_support::storage::alerts(hub, host, "bulk_unprotected")
                .await
                .is_empty()
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(archives(&backup, guest).is_empty());
    assert!(files.helper.verbs().iter().all(|v| *v != "bulk_archive"));

    // The operator signs the volume's target: its archive lands there.
    let entry = stack.entry("backup", 2);
    let signed_at = std::time::Instant::now();
    hub.put_desired(host, &with_plan(&desired, host, vec![entry.clone()]))
        .await;
    eventually(
        Duration::from_secs(60),
        "the volume is archived",
        || async {
            media(hub, host, guest)
                .await
                .is_some_and(|m| !m["last_archive"].is_null())
        },
    )
    .await;
    eprintln!(
        "bulk archive: from the signed plan at the hub to the archive in the hub's report: {} ms",
        signed_at.elapsed().as_millis()
    );
    let written = archives(&backup, guest);
    assert_eq!(written.len(), 1, "{written:?}");
    let name = written[0].file_name().unwrap().to_str().unwrap().to_owned();
    assert!(
        name.starts_with("bulk-media-") && name.ends_with(".tar"),
        "{name}"
    );
    let report = media(hub, host, guest).await.unwrap();
    assert_eq!(report["signed_target"], json!(backup.display().to_string()));
    let last = &report["last_archive"];
    assert_eq!(last["name"], json!(name), "{report}");
    let bytes = std::fs::read(&written[0]).unwrap();
    assert_eq!(last["size_bytes"], json!(bytes.len()));
    let sha256: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(last["sha256"], json!(sha256));
    let audited = agent.handles.journal.audit_since(0, 10_000).await.unwrap();
    let archived = audited
        .iter()
        .find(|e| e.event.event == "bulk.archived")
        .expect("the archive is audited");
    assert_eq!(archived.event.guest_id, Some(guest.to_string()));
    assert_eq!(archived.event.detail["archive"], json!(name));

    // A hub pointing desired state at another target moves nothing: refused, and the
    // plan's target stays the only one written.
    desired["guests"][0]["bulk_volumes"][0]["backup"]["target"] =
        json!(other.display().to_string());
    hub.put_desired(host, &with_plan(&desired, host, vec![entry]))
        .await;
    eventually(
        Duration::from_secs(30),
        "the other target is refused",
        || async {
            hub.host(host).await["last_report"]["refused"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r["field"] == "bulk_volumes.media.backup"))
        },
    )
    .await;
    assert!(archives(&other, guest).is_empty());
    assert!(!other.join("bosun-bulk").exists());
    let detail = hub.host(host).await;
    assert_ne!(
        detail["applied_generation"], detail["desired_generation"],
        "a refused decision keeps the host out of sync: {detail}"
    );
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_that_cannot_be_written_is_reported_failed_with_why() {
    // The backup target's directory does not exist on the node.
    let stack = MediaBox::start(&["backup"], &["bulk"]).await;
    let MediaBox {
        ref hub,
        ref agent,
        host,
        guest,
        ref desired,
        ..
    } = stack;
    let entry = stack.entry("backup", 1);
    hub.put_desired(host, &with_plan(desired, host, vec![entry]))
        .await;
    eventually(
        Duration::from_secs(60),
        "the failure is reported",
        || async {
            media(hub, host, guest)
                .await
                .is_some_and(|m| m["last_error"].is_string())
        },
    )
    .await;
    let report = media(hub, host, guest).await.unwrap();
    assert!(report["last_archive"].is_null(), "{report}");
    let audited = agent.handles.journal.audit_since(0, 10_000).await.unwrap();
    assert!(
        audited.iter().any(|e| e.event.event == "bulk.failed"),
        "the failure is audited"
    );
    eventually(Duration::from_secs(30), "the hub alerts", || async {
        !agent_support::storage::alerts(hub, host, "bulk_backup_failed")
            .await
            .is_empty()
    })
    .await;
    stack.stop().await;
}

/// Runs `pct` on the simulated node as root (the test's own hands in the guest).
async fn pct(sim: &bosun_pvesim::SimHandle, args: &[&str], input: Option<&[u8]>) {
    let out = sim.cli("pct", args, input).await.unwrap();
    assert_eq!(out.exit, 0, "pct {args:?}: {out:?}");
}

/// Writes `bytes` to `path` in guest `vmid`.
async fn put(sim: &bosun_pvesim::SimHandle, vmid: u32, path: &str, bytes: &[u8]) {
    let vmid = vmid.to_string();
    pct(sim, &["push", &vmid, "/host/file", path], Some(bytes)).await;
}

/// The volume `/srv/media` of guest `vmid`: every path below it, with a file's bytes.
fn volume(sim: &bosun_pvesim::SimHandle, vmid: u32) -> Vec<(String, String, Vec<u8>)> {
    let mut out: Vec<_> = sim
        .guest_paths(vmid, "/srv/media")
        .into_iter()
        .map(|p| {
            let file = sim.guest_file(vmid, &p).unwrap();
            (p, file.kind, file.content)
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_restore_bulk_puts_the_recorded_archive_back_and_refuses_what_it_cannot_vouch_for()
{
    let stack = MediaBox::start(&["backup"], &["bulk", "backup"]).await;
    let MediaBox {
        ref sim,
        ref hub,
        ref files,
        ref agent,
        host,
        guest,
        ref desired,
        ref operator,
        ..
    } = stack;
    let dir = files.dir.path();
    // The guest runs, its volume holds the customer's files; then the plan archives it.
    hub.put_desired(host, &with_plan(desired, host, Vec::new()))
        .await;
    let vmid = running_vmid(&agent.handles.reconcile, guest).await;
    let vmid_s = vmid.to_string();
    pct(
        sim,
        &[
            "exec",
            &vmid_s,
            "--",
            "/usr/bin/mkdir",
            "-p",
            "/srv/media/films",
        ],
        None,
    )
    .await;
    let film: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    put(sim, vmid, "/srv/media/films/a.mkv", &film).await;
    put(sim, vmid, "/srv/media/notes.txt", b"the customer's notes\n").await;
    let archived = volume(sim, vmid);
    hub.put_desired(
        host,
        &with_plan(desired, host, vec![stack.entry("backup", 2)]),
    )
    .await;
    eventually(
        Duration::from_secs(60),
        "the volume is archived",
        || async {
            media(hub, host, guest)
                .await
                .is_some_and(|m| !m["last_archive"].is_null())
        },
    )
    .await;
    let written = archives(&stack.dir("backup"), guest);
    assert_eq!(written.len(), 1, "{written:?}");
    let name = written[0].file_name().unwrap().to_str().unwrap().to_owned();
    // The day before, the scheduler had written the same contents: an older archive the
    // journal recorded, kept beside the newest (keep_last 2).
    let older = "bulk-media-2026_01_01-00_00_00.tar";
    let bytes = std::fs::read(&written[0]).unwrap();
    std::fs::write(written[0].with_file_name(older), &bytes).unwrap();
    let record = |name: &str| bosun_agentd::ops::journal::BulkArchived {
        guest_id: guest.to_string(),
        volume: "media".into(),
        target: stack.dir("backup").display().to_string(),
        name: name.to_owned(),
        size_bytes: bytes.len() as u64,
        sha256: Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
    };
    for name in [older, name.as_str()] {
        agent
            .handles
            .journal
            .record_bulk_archive(record(name), 2)
            .await
            .unwrap();
    }

    // The customer breaks the volume: a file overwritten, one removed, one added.
    put(sim, vmid, "/srv/media/notes.txt", b"overwritten\n").await;
    put(sim, vmid, "/srv/media/stray.txt", b"not in the archive\n").await;
    pct(
        sim,
        &[
            "exec",
            &vmid_s,
            "--",
            "/usr/bin/rm",
            "/srv/media/films/a.mkv",
        ],
        None,
    )
    .await;
    let broken = volume(sim, vmid);
    assert_ne!(broken, archived);

    let (host_s, guest_s) = (host.to_string(), guest.to_string());
    let job = |extra: &[&str]| -> Vec<String> {
        let base = [
            "--kind",
            "restore-bulk",
            "--host",
            &host_s,
            "--guest",
            &guest_s,
        ];
        let base = base.into_iter().chain(["--vmid", &vmid_s]);
        base.chain(extra.iter().copied())
            .map(str::to_owned)
            .collect()
    };
    let run = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let id = submit(hub, operator, dir, &args).await;
        job_result(hub, host, id).await
    };
    // Hostile or mistaken jobs first: an archive the journal does not hold for this guest's
    // volume (a name it never recorded or no longer keeps), and a volume the plan does
    // not archive. Each is rejected, and the guest is not entered.
    for (extra, why) in [
        (
            &[
                "--volume",
                "media",
                "--archive",
                "bulk-media-2020_01_01-00_00_00.tar",
            ][..],
            "holds no archive",
        ),
        (&["--volume", "photos"][..], "holds no archive"),
    ] {
        let result = run(job(extra)).await;
        assert_eq!(result["outcome"], "rejected", "{result}");
        assert!(result["detail"].as_str().unwrap().contains(why), "{result}");
    }
    // A tampered job: the signed document's volume changed after signing.
    let doc = agent_support::signing::job_doc(
        "restore-bulk",
        host,
        guest,
        vmid,
        json!({"volume": "photos"}),
        1,
    );
    let bytes = serde_json::to_vec(&doc).unwrap();
    let signature = operator.sign(&bytes, "bosun-job@v1");
    let tampered = String::from_utf8(bytes).unwrap().replace("photos", "media");
    let (status, body) = hub
        .admin(
            reqwest::Method::POST,
            &format!("/v1/admin/hosts/{host}/jobs"),
            Some(agent_support::signing::envelope(
                tampered.as_bytes(),
                &signature,
            )),
        )
        .await;
    assert!((200..300).contains(&status), "{status} {body}");
    let id: Uuid = doc["job_id"].as_str().unwrap().parse().unwrap();
    let result = job_result(hub, host, id).await;
    assert_eq!(result["outcome"], "rejected", "{result}");
    assert!(
        files.helper.verbs().iter().all(|v| *v != "bulk_restore"),
        "a refused job reached the helper"
    );
    assert_eq!(volume(sim, vmid), broken);

    // The signed restore puts the archive back: exactly what was archived.
    let restored_at = std::time::Instant::now();
    let result = run(job(&["--volume", "media"])).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    eprintln!(
        "bulk restore: from the signed job at the hub to its result: {} ms",
        restored_at.elapsed().as_millis()
    );
    assert_eq!(result["output"]["archive"], json!(name), "{result}");
    assert_eq!(volume(sim, vmid), archived);
    let audited = agent.handles.journal.audit_since(0, 10_000).await.unwrap();
    let restored = audited
        .iter()
        .find(|e| e.event.event == "bulk.restored")
        .expect("the restore is audited");
    assert_eq!(restored.event.guest_id, Some(guest.to_string()));
    assert_eq!(restored.event.detail["archive"], json!(name));

    // The archive altered on the target after the journal recorded it (same size): the helper
    // refuses it before it enters the guest, and the volume stays as the customer left it.
    put(sim, vmid, "/srv/media/notes.txt", b"today's notes\n").await;
    let today = volume(sim, vmid);
    let mut bytes = std::fs::read(&written[0]).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0xff;
    std::fs::write(&written[0], &bytes).unwrap();
    let result = run(job(&["--volume", "media", "--archive", &name])).await;
    assert_eq!(result["outcome"], "failed", "{result}");
    assert!(
        result["detail"].as_str().unwrap().contains("hashes to"),
        "{result}"
    );
    assert_eq!(volume(sim, vmid), today);
    let audited = agent.handles.journal.audit_since(0, 10_000).await.unwrap();
    assert!(
        audited
            .iter()
            .any(|e| e.event.event == "bulk.restore_failed"),
        "the refused restore is audited"
    );

    // The newest archive is damaged: the operator signs a restore of the one before, by name,
    // and gets exactly what it held.
    let result = run(job(&["--volume", "media", "--archive", older])).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert_eq!(result["output"]["archive"], json!(older), "{result}");
    assert_eq!(volume(sim, vmid), archived);
    stack.stop().await;
}
