//! `bosunctl pve setup` against the simulator, run as an operator runs it: the real `bosunctl`
//! binary with an administrator's token in `BOSUN_PVE_ADMIN_TOKEN`, on a node that has none of
//! Bosun's access set up. Then `pve check` passes on the token it made; a second run writes
//! nothing; the token reaches inside no VM outside Bosun's pool; a wider ACL is reported and
//! removed only with `--remove-wider`.

use crate::pve_support;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use bosun_pve::{
    AgentExec, AgentFileWrite, BOSUN_AGENT_PRIVILEGES, BOSUN_GUEST_PRIVILEGES,
    BOSUN_GUEST_PRIVILEGES_PVE8, Op, PoolId, Pve, PveQemu, RetryPolicy, VmConfigUpdate, VmOptions,
    VmRestoreRequest, VolumeId,
};
use bosun_pvesim::{PveVersion, SimConfig, SimHandle, TokenCredential};
use bosunctl::pve_check::{self, PveCheckArgs, Report, Status};
use pve_support::{Rig, bounded, fast_sim, local_lvm, start, vmid};

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn bosunctl() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("bosunctl");
    assert!(
        path.is_file(),
        "{} is missing: build the workspace's binaries first",
        path.display()
    );
    path
}

/// The real `bosunctl pve setup` with the simulator's root token in the environment.
async fn setup(sim: &SimHandle, extra: &[&str]) -> Run {
    let ep = sim.endpoint();
    let root = &ep.tokens.root;
    let home = tempfile::tempdir().unwrap();
    let child = tokio::process::Command::new(bosunctl())
        .args(["pve", "setup", "--url", &ep.url, "--fingerprint"])
        .arg(&ep.fingerprint)
        .args(extra)
        .env_clear()
        .env("HOME", home.path())
        .env(
            "BOSUN_PVE_ADMIN_TOKEN",
            format!("{}={}", root.id, root.secret),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("bosunctl finishes within a minute")
        .unwrap();
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        !run.stdout.contains(&root.secret) && !run.stderr.contains(&root.secret),
        "the administrator's secret is never printed:\n{}\n{}",
        run.stdout,
        run.stderr
    );
    run
}

/// A node with none of Bosun's access: no user, roles, pool or ACL entries.
async fn bare_node(version: PveVersion) -> Rig {
    let rig = start(SimConfig {
        pve_version: version,
        ..fast_sim()
    })
    .await;
    rig.sim.remove_bosun_access();
    assert!(rig.sim.role_privileges("BosunAgent").is_none());
    assert!(
        rig.client.version().await.is_err(),
        "the seeded token is gone"
    );
    rig
}

/// `pve check` with the token in `file` (the secret alone, as setup writes it).
async fn check(sim: &SimHandle, file: &Path) -> Report {
    let ep = sim.endpoint();
    let args = PveCheckArgs {
        url: ep.url.clone(),
        token_file: file.to_owned(),
        token_id: None,
        fingerprint: Some(ep.fingerprint.clone()),
        ca_file: None,
        node: None,
        storage: None,
        backup_storage: None,
        golden: None,
        scratch: false,
        json: false,
        cloudflared: "/nonexistent/cloudflared".into(),
    };
    pve_check::check(&args, RetryPolicy::fast(), std::future::pending())
        .await
        .expect("check runs")
}

fn status_of(report: &Report, name: &str) -> Status {
    report
        .check(name)
        .unwrap_or_else(|| panic!("no {name} check:\n{}", report.render_text()))
        .status
}

/// The token setup wrote, as a credential.
fn token_in(file: &Path) -> TokenCredential {
    let secret = std::fs::read_to_string(file).unwrap().trim().to_owned();
    TokenCredential {
        id: "bosun@pve!agent".into(),
        secret,
    }
}

/// Every request that changed something under `/access` or `/pools`.
fn access_writes(sim: &SimHandle) -> Vec<String> {
    sim.requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .filter(|r| r.path.contains("/access") || r.path.contains("/pools"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_writes_what_check_verifies_and_a_second_run_changes_nothing() {
    bounded(async {
        for (version, guest) in [
            (PveVersion::V9_1, BOSUN_GUEST_PRIVILEGES),
            (PveVersion::V8_4, BOSUN_GUEST_PRIVILEGES_PVE8),
        ] {
            let rig = bare_node(version).await;
            let dir = tempfile::tempdir().unwrap();
            let secret = dir.path().join("pve-token");
            let first = setup(&rig.sim, &["--secret-out", secret.to_str().unwrap()]).await;
            assert_eq!(
                first.code, 0,
                "{version:?}\n{}\n{}",
                first.stdout, first.stderr
            );
            for line in [
                "role BosunAgent: created",
                "role BosunGuest: created",
                "user bosun@pve: created",
                "token bosun@pve!agent: created, privilege-separated",
                "pool bosun: created",
                "acl /pool/bosun bosun@pve!agent BosunGuest: written, propagated",
            ] {
                assert!(first.stdout.contains(line), "{line}:\n{}", first.stdout);
            }
            let mode = std::fs::metadata(&secret).unwrap().permissions().mode();
            assert_eq!(
                mode & 0o777,
                0o600,
                "the secret file is the operator's alone"
            );
            let token = token_in(&secret);
            assert!(
                !first.stdout.contains(&token.secret),
                "the new secret went to the file only"
            );

            // Exactly the release's roles and the four entries.
            let mut agent_role = rig.sim.role_privileges("BosunAgent").unwrap();
            agent_role.sort();
            let mut want: Vec<String> = BOSUN_AGENT_PRIVILEGES
                .iter()
                .map(|p| (*p).to_owned())
                .collect();
            want.sort();
            assert_eq!(agent_role, want);
            let mut guest_role = rig.sim.role_privileges("BosunGuest").unwrap();
            guest_role.sort();
            let mut want: Vec<String> = guest.iter().map(|p| (*p).to_owned()).collect();
            want.sort();
            assert_eq!(guest_role, want, "{version:?}");
            let ours: Vec<_> = rig
                .sim
                .acl_entries()
                .into_iter()
                .filter(|(_, s, _, _)| s.starts_with("bosun@pve"))
                .collect();
            assert_eq!(ours.len(), 4, "{ours:?}");
            assert!(ours.iter().all(|(path, _, role, propagate)| *propagate
                && ((path == "/" && role == "BosunAgent")
                    || (path == "/pool/bosun" && role == "BosunGuest"))));

            let report = check(&rig.sim, &secret).await;
            let text = report.render_text();
            assert_eq!(status_of(&report, "privileges"), Status::Ok, "{text}");
            assert_eq!(status_of(&report, "guest-reach"), Status::Ok, "{text}");
            assert_eq!(report.exit_code, 0, "{version:?}: {text}");

            // Again: nothing written, and a secret file that exists is never overwritten.
            rig.sim.clear_requests();
            let again_file = dir.path().join("unused");
            let second = setup(&rig.sim, &["--secret-out", again_file.to_str().unwrap()]).await;
            assert_eq!(second.code, 0, "{}\n{}", second.stdout, second.stderr);
            assert!(
                second.stdout.contains("nothing changed"),
                "{}",
                second.stdout
            );
            assert_eq!(access_writes(&rig.sim), Vec::<String>::new());
            assert!(!again_file.exists(), "no token was made, no secret written");
            let refused = setup(&rig.sim, &["--secret-out", secret.to_str().unwrap()]).await;
            assert_eq!(refused.code, 2, "{}\n{}", refused.stdout, refused.stderr);
            assert_eq!(access_writes(&rig.sim), Vec::<String>::new());
            assert_eq!(token_in(&secret).secret, token.secret);
            rig.sim.shutdown().await;
        }
    })
    .await;
}

/// Restores the VM golden archive as `vmid` with the root token, in `pool` or in none, and
/// starts it.
async fn running_vm(rig: &Rig, id: u32, pool: Option<&str>) {
    let root = pve_support::client_for(
        &rig.sim,
        &rig.sim.endpoint().tokens.root,
        RetryPolicy::fast(),
    );
    let golden = VolumeId::new(rig.sim.add_vm_golden()).unwrap();
    let mut req = VmRestoreRequest::new(vmid(id), golden, local_lvm());
    req.pool = pool.map(|p| PoolId::new(p).unwrap());
    req.options.agent = Some(true);
    let up = root.restore_vm(&req).await.expect("restore");
    root.wait_task(Op::RestoreVm, &up).await.expect("restored");
    let up = root.start_vm(vmid(id)).await.expect("start");
    root.wait_task(Op::StartVm, &up).await.expect("started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_setup_made_reaches_inside_no_vm_outside_the_pool() {
    bounded(async {
        let rig = bare_node(PveVersion::V9_1).await;
        let first = setup(&rig.sim, &[]).await;
        assert_eq!(first.code, 0, "{}\n{}", first.stdout, first.stderr);
        // Without --secret-out the secret is printed once, in pve check's token-file form.
        let line = first
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("bosun@pve!agent="))
            .expect("the secret line");
        let token = TokenCredential {
            id: "bosun@pve!agent".into(),
            secret: line.to_owned(),
        };
        let agent = pve_support::client_for(&rig.sim, &token, RetryPolicy::fast());
        let again = setup(&rig.sim, &["--output", "json"]).await;
        assert_eq!(again.code, 0, "{}\n{}", again.stdout, again.stderr);
        let doc: serde_json::Value = serde_json::from_str(&again.stdout).unwrap();
        assert_eq!(doc["changed"], false, "{doc}");
        assert_eq!(doc["wider_left"], 0, "{doc}");
        assert!(doc.get("token").is_none(), "no new token, no secret: {doc}");

        running_vm(&rig, 500, None).await;
        running_vm(&rig, 501, Some("bosun")).await;
        let exec = AgentExec {
            argv: vec!["/usr/bin/test".into(), "-d".into(), "/".into()],
            input: None,
        };
        let write = AgentFileWrite {
            path: "/etc/bosun-bootstrap.json".into(),
            content: b"{\"hub\":\"https://attacker.example\"}\n".to_vec(),
        };
        let keys = VmConfigUpdate {
            set: VmOptions {
                sshkeys: vec!["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAttackerKey attacker".into()],
                ..VmOptions::default()
            },
            ..VmConfigUpdate::default()
        };

        // Bosun's own VM: everything the role names works (so the refusals below are the ACL's).
        agent.agent_ping(vmid(501)).await.expect("ping in the pool");
        agent
            .agent_exec(vmid(501), &exec)
            .await
            .expect("exec in the pool");
        agent
            .agent_file_write(vmid(501), &write)
            .await
            .expect("file write in the pool");
        agent
            .update_vm_config(vmid(501), &keys)
            .await
            .expect("cloud-init keys in the pool");

        // A VM Bosun did not create: the agent sees it, and reaches nothing inside it.
        assert!(
            agent.vm_status(vmid(500)).await.is_ok(),
            "VM.Audit on / still lists it"
        );
        for (what, err) in [
            (
                "ping",
                agent.agent_ping(vmid(500)).await.map(drop).unwrap_err(),
            ),
            (
                "exec",
                agent
                    .agent_exec(vmid(500), &exec)
                    .await
                    .map(drop)
                    .unwrap_err(),
            ),
            (
                "file-write",
                agent
                    .agent_file_write(vmid(500), &write)
                    .await
                    .map(drop)
                    .unwrap_err(),
            ),
            (
                "sshkeys",
                agent.update_vm_config(vmid(500), &keys).await.unwrap_err(),
            ),
        ] {
            assert_eq!(err.status(), Some(403), "{what}: {err}");
            assert!(err.to_string().contains("/vms/500"), "{what}: {err}");
        }
        assert!(
            rig.sim.vm_file(501, "/etc/bosun-bootstrap.json").is_some(),
            "the write inside Bosun's VM is seen"
        );
        assert!(
            rig.sim.vm_file(500, "/etc/bosun-bootstrap.json").is_none(),
            "nothing was written inside the foreign VM"
        );
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wider_acl_is_reported_and_removed_only_with_the_flag() {
    bounded(async {
        let rig = bare_node(PveVersion::V9_1).await;
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("pve-token");
        let first = setup(&rig.sim, &["--secret-out", secret.to_str().unwrap()]).await;
        assert_eq!(first.code, 0, "{}\n{}", first.stdout, first.stderr);

        // Someone widened Bosun's reach by hand: the guest role on every VM, and one more
        // guest-agent privilege in the role.
        for subject in ["bosun@pve", "bosun@pve!agent"] {
            rig.sim.grant("/vms", subject, "BosunGuest", true).unwrap();
        }
        let mut widened: Vec<&str> = BOSUN_GUEST_PRIVILEGES.to_vec();
        widened.push("VM.GuestAgent.FileRead");
        rig.sim.add_role("BosunGuest", &widened).unwrap();
        let report = check(&rig.sim, &secret).await;
        assert_eq!(status_of(&report, "guest-reach"), Status::Fail);

        rig.sim.clear_requests();
        let reported = setup(&rig.sim, &[]).await;
        assert_eq!(
            reported.code, 12,
            "{}\n{}",
            reported.stdout, reported.stderr
        );
        for line in [
            "wider: bosun@pve holds BosunGuest on /vms",
            "wider: bosun@pve!agent holds BosunGuest on /vms",
            "wider: role BosunGuest also holds VM.GuestAgent.FileRead",
            "--remove-wider",
        ] {
            assert!(
                reported.stdout.contains(line),
                "{line}:\n{}",
                reported.stdout
            );
        }
        assert_eq!(
            access_writes(&rig.sim),
            Vec::<String>::new(),
            "reported, not removed"
        );
        assert!(
            rig.sim
                .acl_entries()
                .iter()
                .any(|(p, s, r, _)| p == "/vms" && s == "bosun@pve!agent" && r == "BosunGuest")
        );

        let removed = setup(&rig.sim, &["--remove-wider"]).await;
        assert_eq!(removed.code, 0, "{}\n{}", removed.stdout, removed.stderr);
        assert!(
            !rig.sim.acl_entries().iter().any(|(p, _, _, _)| p == "/vms"),
            "{:?}",
            rig.sim.acl_entries()
        );
        let mut guest = rig.sim.role_privileges("BosunGuest").unwrap();
        guest.sort();
        assert_eq!(guest, BOSUN_GUEST_PRIVILEGES);
        let report = check(&rig.sim, &secret).await;
        assert_eq!(report.exit_code, 0, "{}", report.render_text());
        let again = setup(&rig.sim, &[]).await;
        assert_eq!(again.code, 0);
        assert!(again.stdout.contains("nothing changed"), "{}", again.stdout);
        rig.sim.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_administrator_token_short_of_rights_changes_nothing_it_may_not() {
    bounded(async {
        let rig = bare_node(PveVersion::V9_1).await;
        // An auditor's token: it reads, it may not create roles.
        rig.sim.add_user("auditor@pve");
        let auditor = rig.sim.create_token("auditor@pve", "ro", false).unwrap();
        rig.sim
            .grant("/", "auditor@pve", "PVEAuditor", true)
            .unwrap();
        let ep = rig.sim.endpoint();
        let home = tempfile::tempdir().unwrap();
        let out = tokio::process::Command::new(bosunctl())
            .args(["pve", "setup", "--url", &ep.url, "--fingerprint"])
            .arg(&ep.fingerprint)
            .env_clear()
            .env("HOME", home.path())
            .env(
                "BOSUN_PVE_ADMIN_TOKEN",
                format!("{}={}", auditor.id, auditor.secret),
            )
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(5), "{stderr}");
        assert!(stderr.contains("creating role BosunAgent"), "{stderr}");
        assert!(
            stderr.contains("Sys.Modify"),
            "PVE's refusal is shown: {stderr}"
        );
        assert!(!stderr.contains(&auditor.secret));
        assert!(rig.sim.role_privileges("BosunAgent").is_none());
        rig.sim.shutdown().await;
    })
    .await;
}
