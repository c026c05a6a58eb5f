//! The quiesce loop against a real local API and simulator: the happy path restarts at
//! `snapshotted`, and every failure path (backup failure, poll failure, the max-quiesce
//! bound, shutdown, a failing stop hook, a killed process) leaves the apps running again.
//! While the apps are stopped for the backup, the guest holds a restore check of their data;
//! once they run again it does not.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

#[path = "../../agentd/tests/localapi_support/mod.rs"]
mod localapi_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use bosun_guest::quiesce::RestartReason;
use bosun_guest::{App, LocalApiClient, QuiesceConfig, QuiesceOutcome, Quiescer, marker};
use bosun_proto::bootstrap::{Bootstrap, LocalApi, PinnedEndpoint};
use bosun_proto::desired::CustomerIdentity;
use bosun_proto::secret::SecretToken;
use bosun_pvesim::{FaultConfig, SimConfig, TaskDurations};
use localapi_support::{Harness, Options, daily_policy};
use sha2::Digest as _;
use tokio_util::sync::CancellationToken;

/// Apps whose "running" state is a file, with every hook call logged in order.
struct Apps {
    dir: PathBuf,
}

impl Apps {
    fn new(dir: &Path) -> Self {
        let dir = dir.join("apps");
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["db", "web"] {
            std::fs::write(dir.join(format!("{name}.running")), "").unwrap();
        }
        Self { dir }
    }

    fn app(&self, name: &str, stop_ok: bool) -> App {
        let running = self.dir.join(format!("{name}.running"));
        let log = self.dir.join("log");
        let sh = |script: String| vec!["sh".to_owned(), "-c".to_owned(), script];
        let stop = if stop_ok {
            sh(format!(
                "rm -f '{}' && echo 'stop {name}' >> '{}'",
                running.display(),
                log.display()
            ))
        } else {
            sh(format!(
                "rm -f '{}' && echo 'stop {name} failed' >> '{}' && exit 3",
                running.display(),
                log.display()
            ))
        };
        App {
            name: name.to_owned(),
            stop,
            start: sh(format!(
                "touch '{}' && echo 'start {name}' >> '{}'",
                running.display(),
                log.display()
            )),
            data: Vec::new(),
        }
    }

    fn all(&self) -> Vec<App> {
        vec![self.app("db", true), self.app("web", true)]
    }

    fn running(&self, name: &str) -> bool {
        self.dir.join(format!("{name}.running")).exists()
    }

    fn log(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

fn bootstrap(h: &Harness, n: usize) -> Bootstrap {
    Bootstrap {
        schema: bosun_proto::bootstrap::SCHEMA.to_owned(),
        guest_id: h.guest(n).guest_id.parse().unwrap(),
        customer: CustomerIdentity {
            customer_id: "acme-01".to_owned(),
            display_name: "Acme".to_owned(),
        },
        hub: PinnedEndpoint {
            url: "https://hub.example.net".to_owned(),
            fingerprint: "ab".repeat(32),
        },
        local_api: LocalApi {
            url: h.base.clone(),
            fingerprint: h.fingerprint.clone(),
            token: SecretToken::new(h.guest(n).token.clone()),
        },
        ssh_authorized_keys: Vec::new(),
    }
}

fn quiescer(h: &Harness, apps: Vec<App>, max_quiesce: Duration) -> Quiescer {
    let client = LocalApiClient::from_bootstrap(&bootstrap(h, 0)).unwrap();
    let mut config = QuiesceConfig::new(h.dir.path().join("quiesce.marker"));
    config.max_quiesce = max_quiesce;
    config.poll_interval = Duration::from_millis(10);
    config.hook_timeout = Duration::from_secs(10);
    Quiescer::new(client, apps, config)
}

/// A harness whose one guest lives on storage that cannot snapshot and whose vzdump takes
/// about three seconds, so the apps must wait for the archive.
async fn slow_harness() -> Harness {
    Harness::start_with(Options {
        guests: 0,
        dir_guests: 1,
        sim: SimConfig {
            durations: TaskDurations {
                vzdump: Duration::from_secs(300),
                ..TaskDurations::default()
            },
            ..SimConfig::fast()
        },
        ..Options::default()
    })
    .await
}

fn unquiesced(outcome: QuiesceOutcome) -> (RestartReason, Option<String>, Vec<String>) {
    match outcome {
        QuiesceOutcome::Unquiesced {
            reason,
            run_id,
            restarted,
        } => (reason, run_id, restarted),
        QuiesceOutcome::NotDue => panic!("expected a quiesce"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_backup_stops_the_apps_and_restarts_them_at_the_snapshot() {
    let h = Harness::start().await;
    h.policy.send_replace(Some(daily_policy("hourly", 10)));
    let apps = Apps::new(h.dir.path());
    let q = quiescer(&h, apps.all(), Duration::from_secs(60));
    let (reason, run_id, restarted) =
        unquiesced(q.run_once(&CancellationToken::new()).await.unwrap());
    assert!(
        matches!(&reason, RestartReason::Consistent { phase } if phase != "failed"),
        "{reason:?}"
    );
    assert_eq!(restarted, ["web", "db"], "reverse stop order");
    assert_eq!(apps.log(), ["stop db", "stop web", "start web", "start db"]);
    assert!(apps.running("db") && apps.running("web"));
    assert!(!h.dir.path().join("quiesce.marker").exists());
    let (_, run) = h.follow_backup(0).await;
    assert_eq!(run["phase"], "done");
    assert_eq!(run["quiesced"], true);
    assert_eq!(Some(run["run_id"].as_str().unwrap().to_owned()), run_id);

    // Once backed up, nothing is due and nothing is stopped.
    assert_eq!(
        q.run_once(&CancellationToken::new()).await.unwrap(),
        QuiesceOutcome::NotDue
    );
    assert_eq!(apps.log().len(), 4);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_backup_restarts_the_apps() {
    let h = Harness::start().await;
    h.policy.send_replace(Some(daily_policy("hourly", 0)));
    h.sim.set_faults(FaultConfig {
        failed_task_rate: 1.0,
        failed_task_types: vec!["vzdump".to_owned()],
        ..FaultConfig::default()
    });
    let apps = Apps::new(h.dir.path());
    let q = quiescer(&h, apps.all(), Duration::from_secs(60));
    let (reason, _, restarted) = unquiesced(q.run_once(&CancellationToken::new()).await.unwrap());
    // The snapshot may already have been taken when the task fails; either way the apps run.
    assert!(
        matches!(
            reason,
            RestartReason::BackupFailed { .. } | RestartReason::Consistent { .. }
        ),
        "{reason:?}"
    );
    assert_eq!(restarted, ["web", "db"]);
    assert!(apps.running("db") && apps.running("web"));
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_storage_snapshot_the_apps_wait_for_the_archive() {
    let h = slow_harness().await;
    h.policy.send_replace(Some(daily_policy("hourly", 0)));
    let apps = Apps::new(h.dir.path());
    let q = quiescer(&h, apps.all(), Duration::from_secs(60));
    let (reason, _, _) = unquiesced(q.run_once(&CancellationToken::new()).await.unwrap());
    match reason {
        RestartReason::Consistent { phase } => {
            assert!(phase == "archived" || phase == "done", "{phase}")
        }
        other => panic!("{other:?}"),
    }
    assert!(apps.running("db") && apps.running("web"));
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_max_quiesce_bound_restarts_the_apps_while_the_backup_goes_on() {
    let h = slow_harness().await;
    h.policy.send_replace(Some(daily_policy("hourly", 0)));
    let apps = Apps::new(h.dir.path());
    let q = quiescer(&h, apps.all(), Duration::from_millis(700));
    let started = std::time::Instant::now();
    let (reason, run_id, _) = unquiesced(q.run_once(&CancellationToken::new()).await.unwrap());
    assert_eq!(reason, RestartReason::BoundReached);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(run_id.is_some());
    assert!(apps.running("db") && apps.running("web"));
    let (_, run) = h.follow_backup(0).await;
    assert_eq!(run["phase"], "done", "the agent finishes the backup");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_mid_quiesce_restarts_the_apps() {
    let h = slow_harness().await;
    h.policy.send_replace(Some(daily_policy("hourly", 0)));
    let apps = Apps::new(h.dir.path());
    let q = quiescer(&h, apps.all(), Duration::from_secs(60));
    let shutdown = CancellationToken::new();
    let pass = {
        let shutdown = shutdown.clone();
        tokio::spawn(async move { q.run_once(&shutdown).await })
    };
    wait_until(|| h.backups.status(&h.guest(0).guest_id).is_some()).await;
    assert!(!apps.running("db"));
    shutdown.cancel();
    let (reason, _, restarted) = unquiesced(pass.await.unwrap().unwrap());
    assert_eq!(reason, RestartReason::Shutdown);
    assert_eq!(restarted, ["web", "db"]);
    assert!(apps.running("db") && apps.running("web"));
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_status_poll_restarts_the_apps() {
    let h = slow_harness().await;
    h.policy.send_replace(Some(daily_policy("hourly", 0)));
    let apps = Apps::new(h.dir.path());
    let q = quiescer(&h, apps.all(), Duration::from_secs(60));
    let pass = tokio::spawn(async move { q.run_once(&CancellationToken::new()).await });
    wait_until(|| h.backups.status(&h.guest(0).guest_id).is_some()).await;
    h.stop_api();
    let (reason, _, _) = unquiesced(pass.await.unwrap().unwrap());
    assert!(
        matches!(reason, RestartReason::PollFailed { .. }),
        "{reason:?}"
    );
    assert!(apps.running("db") && apps.running("web"));
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_stop_hook_restarts_what_was_stopped_and_asks_for_no_backup() {
    let h = Harness::start().await;
    h.policy.send_replace(Some(daily_policy("hourly", 0)));
    let apps = Apps::new(h.dir.path());
    let q = quiescer(
        &h,
        vec![apps.app("db", true), apps.app("web", false)],
        Duration::from_secs(60),
    );
    let (reason, run_id, restarted) =
        unquiesced(q.run_once(&CancellationToken::new()).await.unwrap());
    assert!(
        matches!(reason, RestartReason::StopFailed { .. }),
        "{reason:?}"
    );
    assert_eq!(run_id, None);
    assert_eq!(
        restarted,
        ["web", "db"],
        "the half-stopped app is started too"
    );
    assert!(apps.running("db") && apps.running("web"));
    assert!(
        h.backups.status(&h.guest(0).guest_id).is_none(),
        "no backup was asked for"
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_client_leaves_a_marker_and_the_next_start_restarts_the_apps() {
    let h = slow_harness().await;
    h.policy.send_replace(Some(daily_policy("hourly", 0)));
    let apps = Apps::new(h.dir.path());
    let bootstrap_path = h.dir.path().join("bootstrap.json");
    std::fs::write(
        &bootstrap_path,
        serde_json::to_vec(&bootstrap(&h, 0)).unwrap(),
    )
    .unwrap();
    let apps_path = h.dir.path().join("apps.json");
    std::fs::write(&apps_path, serde_json::to_vec(&apps.all()).unwrap()).unwrap();
    let marker_path = h.dir.path().join("quiesce.marker");
    let bin = env!("CARGO_BIN_EXE_bosun-guest");
    let args = |cmd: &str| {
        vec![
            "--bootstrap".to_owned(),
            bootstrap_path.display().to_string(),
            "--apps".to_owned(),
            apps_path.display().to_string(),
            "--marker".to_owned(),
            marker_path.display().to_string(),
            "--poll-ms".to_owned(),
            "10".to_owned(),
            cmd.to_owned(),
        ]
    };
    let mut child = tokio::process::Command::new(bin)
        .args(args("once"))
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Mid-quiesce: both apps stopped, the backup running.
    wait_until(|| {
        marker::read(&marker_path)
            .ok()
            .flatten()
            .is_some_and(|m| m.stopped.len() == 2)
            && h.backups.status(&h.guest(0).guest_id).is_some()
    })
    .await;
    child.start_kill().unwrap();
    let status = child.wait().await.unwrap();
    assert!(!status.success());
    assert!(
        !apps.running("db") && !apps.running("web"),
        "the crash left them stopped"
    );
    let left = marker::read(&marker_path).unwrap().unwrap();
    assert_eq!(left.to_restart(), ["db", "web"]);

    // The restart as the controller image runs it: the bootstrap and the apps named in the
    // environment (the golden unit's `BOSUN_BOOTSTRAP`, the image's `BOSUN_GUEST_APPS`).
    let out = tokio::process::Command::new(bin)
        .env("BOSUN_BOOTSTRAP", &bootstrap_path)
        .env("BOSUN_GUEST_APPS", &apps_path)
        .args([
            "--marker".as_ref(),
            marker_path.as_os_str(),
            "recover".as_ref(),
        ])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        apps.running("db") && apps.running("web"),
        "the restart brought them back"
    );
    assert!(!marker_path.exists());
    assert_eq!(&apps.log()[2..], ["start web", "start db"]);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_recovers_a_left_marker_before_anything_else() {
    let h = Harness::start().await;
    let apps = Apps::new(h.dir.path());
    std::fs::remove_file(h.dir.path().join("apps/web.running")).unwrap();
    marker::write(
        &h.dir.path().join("quiesce.marker"),
        &bosun_guest::Marker {
            pid: 1,
            stopped: Vec::new(),
            stopping: Some("web".to_owned()),
        },
    )
    .unwrap();
    // No policy: the due check fails, but only after the recovery ran.
    let q = quiescer(&h, apps.all(), Duration::from_secs(60));
    let err = q.run_once(&CancellationToken::new()).await.unwrap_err();
    assert!(err.to_string().contains("due"), "{err}");
    assert!(apps.running("web"));
    assert_eq!(apps.log(), ["start web"], "only what the marker listed");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_pin_is_refused() {
    let h = Harness::start().await;
    h.policy.send_replace(Some(daily_policy("hourly", 0)));
    let mut doc = bootstrap(&h, 0);
    doc.local_api.fingerprint = "00".repeat(32);
    let client = LocalApiClient::from_bootstrap(&doc).unwrap();
    let err = client.backup_due().await.unwrap_err();
    assert!(
        matches!(err, bosun_guest::ClientError::Transport { .. }),
        "{err:?}"
    );
    let good = LocalApiClient::from_bootstrap(&bootstrap(&h, 0)).unwrap();
    assert!(good.backup_due().await.unwrap().due);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backup_taken_while_the_apps_are_stopped_holds_a_restore_check_of_their_data() {
    let h = slow_harness().await;
    h.policy.send_replace(Some(daily_policy("hourly", 0)));
    let apps = Apps::new(h.dir.path());
    let data = h.dir.path().join("srv/shop");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("orders.db"), "order 1: 3 chairs\n").unwrap();
    let check = bosun_guest::RestoreCheck {
        script: h.dir.path().join("etc/bosun/restore-check"),
        checksums: h
            .dir
            .path()
            .join("var/lib/bosun-guest/restore-check.sha256"),
        ..bosun_guest::RestoreCheck::default()
    };
    let mut db = apps.app("db", true);
    db.data = vec![data.clone()];
    let mut config = QuiesceConfig::new(h.dir.path().join("quiesce.marker"));
    config.poll_interval = Duration::from_millis(10);
    config.hook_timeout = Duration::from_secs(10);
    config.restore_check = check.clone();
    let q = Quiescer::new(
        LocalApiClient::from_bootstrap(&bootstrap(&h, 0)).unwrap(),
        vec![db, apps.app("web", true)],
        config,
    );
    let pass = tokio::spawn(async move { q.run_once(&CancellationToken::new()).await });
    // The backup is asked for once the apps are stopped and the check is written.
    wait_until(|| h.backups.status(&h.guest(0).guest_id).is_some()).await;
    assert!(!apps.running("db") && !apps.running("web"));
    let listed = std::fs::read_to_string(&check.checksums).unwrap();
    assert_eq!(
        listed,
        format!(
            "{}  {}\n",
            hex::encode(sha2::Sha256::digest(b"order 1: 3 chairs\n")),
            data.join("orders.db").display()
        )
    );
    let ran = std::process::Command::new(&check.script).output().unwrap();
    assert!(ran.status.success(), "{ran:?}");

    let (reason, _, restarted) = unquiesced(pass.await.unwrap().unwrap());
    assert!(
        matches!(reason, RestartReason::Consistent { .. }),
        "{reason:?}"
    );
    assert_eq!(restarted, ["web", "db"]);
    // Running again, the apps change their data: the live guest holds no check.
    assert!(!check.script.exists() && !check.checksums.exists());
    assert!(apps.running("db") && apps.running("web"));
    h.shutdown().await;
}

async fn wait_until(mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition never held"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
