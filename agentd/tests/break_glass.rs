//! The break-glass door on the agent's side, with the helper's real verbs writing the real
//! file beneath a temp root: opening writes the expiring line and journals the door with
//! its audit row; the expiry task removes the line at the deadline on the clock seam (days
//! of clock in milliseconds), also for a door that expired while the agent was down; a
//! newer door replaces the older one, and a disable closes it early. The real support shell
//! (`bosun-support`) records what is run through the door, and the agent turns it into audit
//! rows a guest of the host can read.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

#[allow(dead_code, reason = "the shared fake serves other suites too")]
use crate::localapi_support::fake_helper;

use std::time::Duration;

use bosun_agentd::clock::ManualClock;
use bosun_agentd::links::helper::HelperClient;
use bosun_agentd::ops::journal::{DoorClosed, JournalHandle};
use bosun_agentd::trust::break_glass::expiry_task::ExpiryTask;
use bosun_agentd::trust::break_glass::{BreakGlass, BreakGlassError, DoorRequest};
use bosun_proto::break_glass::SshPublicKey;
use fake_helper::FakeHelper;
use jiff::{SignedDuration, Timestamp};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFrAsKmOJHqtIFg4iUWCxW/iCF63k3IM0oiEv25WH7JH op@desk";
const OTHER: &str = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBBftrSouNFZNaVGtlqbFlaQr6YFtzRNQyz4OFozvK0nJmIerLiUV1/c6SlhuHU9bRufFIweit7sLaBeTDXeOfBc=";

struct Door {
    _dir: tempfile::TempDir,
    helper: FakeHelper,
    clock: ManualClock,
    journal: JournalHandle,
    door: BreakGlass,
}

impl Door {
    async fn start() -> Door {
        let dir = tempfile::tempdir().unwrap();
        let helper = FakeHelper::start(dir.path());
        // The helper checks the deadline against the real clock: start there, whole seconds.
        let now = Timestamp::from_second(Timestamp::now().as_second()).unwrap();
        let clock = ManualClock::new(now);
        let journal = JournalHandle::open(&dir.path().join("journal.db"), clock.shared())
            .await
            .unwrap();
        let door = BreakGlass::new(
            HelperClient::socket(&helper.socket),
            journal.clone(),
            clock.shared(),
        );
        Door {
            _dir: dir,
            helper,
            clock,
            journal,
            door,
        }
    }

    fn request(&self, key: &str, hours: i64) -> DoorRequest {
        DoorRequest {
            job_id: Uuid::new_v4(),
            key: SshPublicKey::new(key).unwrap(),
            expires_at: self.clock_now() + SignedDuration::from_hours(hours),
            reason: "the poll loop is wedged".into(),
            signer: "SHA256:operator".into(),
        }
    }

    fn clock_now(&self) -> Timestamp {
        use bosun_agentd::clock::Clock;
        self.clock.now()
    }

    async fn audit_actions(&self) -> Vec<(String, serde_json::Value)> {
        self.journal
            .audit_since(0, 1000)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.event.event.starts_with("break_glass."))
            .map(|e| (e.event.event, e.event.detail))
            .collect()
    }
}

async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_door_opens_with_an_expiring_line_and_closes_itself_at_the_deadline() {
    let t = Door::start().await;
    let cancel = CancellationToken::new();
    let task = tokio::spawn(ExpiryTask::new(t.door.clone()).run(cancel.clone()));
    let request = t.request(KEY, 2);
    let output = t.door.open(&request).await.unwrap();
    let expiry = request.expires_at.strftime("%Y%m%d%H%M%SZ").to_string();
    assert_eq!(output["expiry_time"], expiry.as_str());
    assert_eq!(output["account"], "bosun-breakglass");
    let line = t.helper.break_glass_keys().expect("the door is open");
    assert_eq!(
        line,
        format!(
            "expiry-time=\"{expiry}\",restrict,pty,command=\"{} --session {}\" {} bosun-break-glass {}\n",
            bosun_proto::break_glass::SUPPORT_SHELL,
            request.job_id,
            request.key.as_str(),
            request.job_id
        )
    );
    let open = t.journal.open_door().await.unwrap().unwrap();
    assert_eq!(open.job_id, request.job_id.to_string());
    assert_eq!(open.expires_at, request.expires_at);
    let audit = t.audit_actions().await;
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0].0, "break_glass.opened");
    assert_eq!(audit[0].1["fingerprint"], request.key.fingerprint());
    assert_eq!(audit[0].1["reason"], "the poll loop is wedged");

    // An hour on: still open.
    t.clock.advance(Duration::from_secs(3600));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(t.helper.break_glass_keys().is_some());
    // Past the deadline: the task removes the line and journals the close.
    t.clock.advance(Duration::from_secs(3601));
    eventually("the expired door closes", async || {
        t.helper.break_glass_keys().is_none()
    })
    .await;
    eventually("the close is journaled", async || {
        t.journal.open_door().await.unwrap().is_none()
    })
    .await;
    let audit = t.audit_actions().await;
    assert_eq!(audit.len(), 2, "{audit:?}");
    assert_eq!(audit[1].0, "break_glass.closed");
    assert_eq!(audit[1].1["closed_by"], "expiry");
    assert_eq!(audit[1].1["job_id"], request.job_id.to_string().as_str());
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn a_door_that_expired_while_the_agent_was_down_is_closed_at_start() {
    let t = Door::start().await;
    let request = t.request(KEY, 1);
    t.door.open(&request).await.unwrap();
    // The agent is down (no task) while the deadline passes.
    t.clock.advance(Duration::from_secs(2 * 3600));
    assert!(t.helper.break_glass_keys().is_some());
    let cancel = CancellationToken::new();
    let task = tokio::spawn(ExpiryTask::new(t.door.clone()).run(cancel.clone()));
    eventually("the stale door closes at start", async || {
        t.helper.break_glass_keys().is_none() && t.journal.open_door().await.unwrap().is_none()
    })
    .await;
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn a_newer_door_replaces_the_older_and_a_disable_closes_it_early() {
    let t = Door::start().await;
    let cancel = CancellationToken::new();
    let task = tokio::spawn(ExpiryTask::new(t.door.clone()).run(cancel.clone()));
    let first = t.request(KEY, 1);
    t.door.open(&first).await.unwrap();
    let second = t.request(OTHER, 4);
    t.door.open(&second).await.unwrap();
    let line = t.helper.break_glass_keys().unwrap();
    assert_eq!(line.lines().count(), 1);
    assert!(
        line.contains(OTHER) && !line.contains(first.key.as_str()),
        "{line}"
    );
    // The first door's deadline passing does not close the second.
    t.clock.advance(Duration::from_secs(2 * 3600));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(t.helper.break_glass_keys().is_some());
    let open = t.journal.open_door().await.unwrap().unwrap();
    assert_eq!(open.job_id, second.job_id.to_string());

    let disable = Uuid::new_v4();
    let output = t
        .door
        .close(DoorClosed::Disable, Some(disable))
        .await
        .unwrap();
    assert_eq!(output["removed"], true);
    assert_eq!(output["closed_job_id"], second.job_id.to_string().as_str());
    assert!(t.helper.break_glass_keys().is_none());
    let closes: Vec<_> = t
        .audit_actions()
        .await
        .into_iter()
        .filter(|(a, _)| a == "break_glass.closed")
        .map(|(_, d)| d["closed_by"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(closes, ["replaced", "disable"]);
    // Closing a closed door removes nothing and journals nothing.
    let again = t
        .door
        .close(DoorClosed::Disable, Some(disable))
        .await
        .unwrap();
    assert_eq!(again["removed"], false);
    assert_eq!(t.audit_actions().await.len(), 4);
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn a_deadline_already_past_opens_nothing() {
    let t = Door::start().await;
    let mut request = t.request(KEY, 1);
    request.expires_at = t.clock_now() - SignedDuration::from_secs(1);
    let err = t.door.open(&request).await.unwrap_err();
    assert!(
        matches!(err, BreakGlassError::AlreadyExpired { .. }),
        "{err}"
    );
    assert!(t.helper.break_glass_keys().is_none());
    assert!(!t.helper.verbs().contains(&"break_glass_open"));
}

/// The workspace's `bosun-support`, built beside this test (`make test` builds every binary
/// first).
fn support_shell() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let built = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test runs from target/<profile>/deps")
        .join("bosun-support");
    assert!(
        built.is_file(),
        "{} is missing: build the workspace's binaries first (`cargo build --workspace --bins`)",
        built.display()
    );
    built
}

/// Runs the support shell as the door's forced command does, with `asked` as the client's
/// command, a stand-in for sudo that answers `sudo_exit`, and the spool at `spool`.
fn run_support(dir: &std::path::Path, session: Uuid, asked: &str, sudo_exit: u8) -> i32 {
    use std::os::unix::fs::PermissionsExt;
    let sudo = dir.join("sudo");
    // `pct config VMID` shows guest VMID carrying the identity `bosun-op-g<VMID>`.
    let script = format!(
        "#!/bin/sh\n[ \"$3 $4\" = '/usr/sbin/pct config' ] && echo \"tags: bosun-op-g$5\"\nexit {sudo_exit}\n"
    );
    std::fs::write(&sudo, script).unwrap();
    std::fs::set_permissions(&sudo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = std::process::Command::new(support_shell())
        .arg("--session")
        .arg(session.to_string())
        .arg("--spool")
        .arg(dir.join("commands.jsonl"))
        .arg("--consent")
        .arg(dir.join("consent.json"))
        .arg("--sudo")
        .arg(&sudo)
        .env("SSH_ORIGINAL_COMMAND", asked)
        .output()
        .unwrap();
    out.status.code().unwrap()
}

/// What the support shell records becomes one audit row per command, once, with the door's
/// job id; a guest of the host sees each command's kind and exit status, never its
/// arguments (a `guest-config` names another guest).
#[tokio::test]
async fn commands_run_through_the_door_reach_the_audit_trail_once() {
    use bosun_agentd::trust::break_glass::spool::SpoolTask;

    let t = Door::start().await;
    let request = t.request(KEY, 2);
    t.door.open(&request).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("commands.jsonl");
    assert_eq!(run_support(dir.path(), request.job_id, "status", 0), 0);
    assert_eq!(
        run_support(dir.path(), request.job_id, "restart agent", 1),
        1
    );
    // Guest 205 consents (decision 0080), as the agent would write it.
    let consent = bosun_support::consent::ConsentFile {
        consents: vec![bosun_support::consent::Consent {
            vmid: 205,
            guest_id: "guest-205".into(),
            identity: "bosun-op-g205".into(),
            expires_at: u64::try_from(jiff::Timestamp::now().as_second()).unwrap() + 3600,
        }],
    };
    std::fs::write(dir.path().join("consent.json"), consent.render()).unwrap();
    assert_eq!(
        run_support(dir.path(), request.job_id, "guest-config 205", 0),
        0
    );
    assert_eq!(
        run_support(dir.path(), request.job_id, "cat /var/lib/vz/secret", 0),
        2
    );
    let task = SpoolTask::new(t.journal.clone(), spool.clone(), Duration::from_secs(1));
    assert!(!task.pass().await.unwrap());

    let commands: Vec<serde_json::Value> = t
        .audit_actions()
        .await
        .into_iter()
        .filter(|(event, _)| event == "break_glass.command")
        .map(|(_, detail)| detail)
        .collect();
    let seen: Vec<(&str, &str, serde_json::Value)> = commands
        .iter()
        .map(|d| {
            (
                d["command"].as_str().unwrap(),
                d["kind"].as_str().unwrap(),
                d["status"].clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("status", "status", 0.into()),
            ("restart agent", "restart", 1.into()),
            ("guest-config 205", "guest-config", 0.into()),
            ("refused", "refused", serde_json::Value::Null),
        ]
    );
    let rows = t.journal.audit_since(0, 1000).await.unwrap();
    assert!(
        rows.iter()
            .filter(|r| r.event.event == "break_glass.command")
            .all(|r| r.event.job_id.as_deref() == Some(request.job_id.to_string().as_str())),
        "every row names the door"
    );

    // A second pass adds nothing; a command run later adds one row.
    assert!(!task.pass().await.unwrap());
    assert_eq!(
        count(&t, "break_glass.command").await,
        4,
        "a command is recorded once"
    );
    assert_eq!(run_support(dir.path(), request.job_id, "guests", 0), 0);
    task.pass().await.unwrap();
    assert_eq!(count(&t, "break_glass.command").await, 5);

    // Any guest of the host reads the commands, with their kind and status only.
    let page = t
        .journal
        .guest_audit(Uuid::new_v4().to_string(), None, 100)
        .await
        .unwrap();
    let shown: Vec<&serde_json::Value> = page
        .iter()
        .filter(|r| r.event == "break_glass.command")
        .map(|r| &r.detail)
        .collect();
    assert_eq!(shown.len(), 5);
    assert!(
        page.iter()
            .filter(|r| r.event == "break_glass.command")
            .all(|r| r.host_wide)
    );
    assert_eq!(
        shown[2],
        &serde_json::json!({"account": "bosun-breakglass", "kind": "guest-config", "status": 0})
    );
}

async fn count(t: &Door, event: &str) -> usize {
    t.audit_actions()
        .await
        .iter()
        .filter(|(e, _)| e == event)
        .count()
}
