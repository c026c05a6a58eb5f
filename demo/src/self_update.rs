//! Step 14: the agent updates itself (DESIGN §11, decision 0018), rolled out by label
//! (decision 0086). The agent moves under a stand-in for systemd ([`super::unit`]) running
//! `<slots>/current/bosun-agentd` from the helper's slots; the operator uploads this build's
//! `bosun-agentd` to the hub; a job the hub forged (signed by a key the host does not trust) is
//! refused and nothing is staged. The operator labels the host `ring=canary` and runs `bosunctl
//! fleet rollout --label ring=canary`, which signs one job for the host in its canary wave; the
//! job is downloaded, checked and staged by the real helper into slot b, `current` flips, and
//! the real `bosun-update-gate` restarts the agent there and commits it after a clean window.
//! The hub records `agent_update_committed`, and the rollout reads the gate's verdict from the
//! host's audit trail and ends with the host done.
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bosun_proto::update::{UpdatePhase, UpdateRecord};
use serde_json::{Value, json};
use uuid::Uuid;

use super::children::{Children, RunAs};
use super::helper::HelperInstall;
use super::scenario::{CONVERGE, check, converge_job, ignore_plain_output};
use super::stack::{self, AgentFiles, program};
use super::unit::{FakeSystemd, UnitSpec, systemctl_script};
use super::{DemoError, Narrator};
use bosunctl::client::HubClient;

/// The gate's windows in the demo (production: 120 s, ready in 60 s, a poll in 90 s).
const WINDOW_MS: u64 = 3_000;

/// The label the operator's rollout selects the host by.
const RING: &str = "ring=canary";

/// How long the rollout may take, its health gate included.
const ROLLOUT_WAIT: Duration = Duration::from_secs(120);

/// What step 14 established.
#[derive(Debug, Clone, Default)]
pub struct SelfUpdateOutcome {
    /// The forged job's result at the hub (`rejected`).
    pub forged: Value,
    /// The signed job's result (`succeeded`: staged).
    pub signed: Value,
    /// `bosunctl fleet rollout`'s report (`--json`): the host done in wave 1.
    pub rollout: Value,
    /// The update record after the gate ran (`committed`).
    pub phase: Option<String>,
    /// Staging to the gate's commit, milliseconds.
    pub staged_to_committed_ms: Option<i64>,
}

fn artifact(path: &Path) -> impl FnOnce(std::io::Error) -> DemoError + '_ {
    move |source| DemoError::Artifact {
        path: path.to_owned(),
        source,
    }
}

fn absolute(path: &Path) -> Result<PathBuf, DemoError> {
    std::path::absolute(path).map_err(artifact(path))
}

fn record(slots: &Path) -> Option<UpdateRecord> {
    let text = std::fs::read(slots.join(bosun_proto::update::RECORD_FILE)).ok()?;
    serde_json::from_slice(&text).ok()
}

fn current(slots: &Path) -> String {
    std::fs::read_link(slots.join(bosun_proto::update::CURRENT_LINK))
        .map(|t| t.display().to_string())
        .unwrap_or_default()
}

/// The gate under the helper's prefix, with a `systemctl` that reaches the stand-in.
fn install_gate(bins: &Path, prefix: &Path, state_dir: &Path) -> Result<PathBuf, DemoError> {
    let unit_dir = prefix.join("unit");
    std::fs::create_dir_all(&unit_dir).map_err(artifact(&unit_dir))?;
    std::fs::set_permissions(&unit_dir, std::fs::Permissions::from_mode(0o755))
        .map_err(artifact(&unit_dir))?;
    let gate = prefix.join("usr/libexec/bosun/bosun-update-gate");
    std::fs::copy(program(bins, "bosun-update-gate")?, &gate).map_err(artifact(&gate))?;
    std::fs::set_permissions(&gate, std::fs::Permissions::from_mode(0o755))
        .map_err(artifact(&gate))?;
    let systemctl = prefix.join("bin/systemctl");
    let script = format!("#!/bin/sh\n{}\n", systemctl_script(&unit_dir));
    std::fs::write(&systemctl, script).map_err(artifact(&systemctl))?;
    std::fs::set_permissions(&systemctl, std::fs::Permissions::from_mode(0o755))
        .map_err(artifact(&systemctl))?;
    let config = json!({
        "slots_root": prefix.join("slots"),
        "systemctl": systemctl,
        "poll_mark": absolute(&state_dir.join("update/poll-ok.json"))?,
        "health_window_ms": WINDOW_MS,
        "ready_timeout_ms": WINDOW_MS,
        "poll_timeout_ms": WINDOW_MS,
        "max_restarts": 2,
        "check_interval_ms": 100,
    });
    let path = prefix.join("etc/bosun/update-gate.json");
    stack::write(&path, &config.to_string())?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))
        .map_err(artifact(&path))?;
    Ok(gate)
}

/// Authors an `agent-update` for `sha256`, signs it with `key` and submits it; gives its id.
async fn submit(
    (bins, out): (&Path, &Path),
    host: &str,
    sha256: &str,
    key: &Path,
    name: &str,
) -> Result<Value, DemoError> {
    let doc = out.join(format!("operator/{name}.json"));
    let doc_arg = doc.display().to_string();
    let sha_param = format!("sha256={sha256}");
    stack::ctl(
        bins,
        out,
        &[
            "job",
            "new",
            "--kind",
            "agent-update",
            "--host",
            host,
            "--param",
            "version=0.1.0+demo",
            "--param",
            &sha_param,
            "--param",
            "override_window=true",
            "--valid-hours",
            "1",
            "-o",
            &doc_arg,
        ],
    )
    .await
    .or_else(ignore_plain_output)?;
    let key_arg = key.display().to_string();
    stack::ctl(bins, out, &["job", "sign", &doc_arg, "-f", &key_arg])
        .await
        .or_else(ignore_plain_output)?;
    let sig_arg = format!("{doc_arg}.sig");
    let submitted = stack::ctl(bins, out, &["job", "submit", &doc_arg, &sig_arg]).await?;
    Ok(submitted["job_id"].clone())
}

/// `bosunctl fleet rollout` running while the demo plays the systemd path unit that starts
/// the update gate.
struct Rollout {
    child: tokio::process::Child,
    program: PathBuf,
}

impl Rollout {
    /// Starts the rollout of this build's agent to the hosts labeled [`RING`], one job each,
    /// signed with the operator's `key`, for `host` only: the operator names its canary
    /// (decision 0093), there is no terminal to confirm it on.
    fn start(
        (bins, out): (&Path, &Path),
        sha256: &str,
        key: &Path,
        host: &str,
    ) -> Result<Self, DemoError> {
        let program = program(bins, "bosunctl")?;
        let config = out.join("operator/ctl.json");
        let log = out.join("logs/fleet-rollout.log");
        let stderr = std::fs::File::create(&log).map_err(artifact(&log))?;
        let child = tokio::process::Command::new(&program)
            .arg("--config")
            .arg(&config)
            .args(["--json", "fleet", "rollout", "--kind", "agent-update"])
            .args([
                "--label",
                RING,
                "--hosts",
                host,
                "--param",
                "version=0.1.0+demo",
            ])
            .arg("--param")
            .arg(format!("sha256={sha256}"))
            .args(["--param", "override_window=true", "--valid-hours", "1"])
            .args(["--wait", "2m", "--deadline", "10m", "-f"])
            .arg(key)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| DemoError::Spawn {
                program: program.clone(),
                source,
            })?;
        Ok(Self { child, program })
    }

    /// Fails when the rollout already ended: it cannot have succeeded before the gate ran.
    fn still_running(&mut self) -> Result<(), DemoError> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(DemoError::Check(format!(
                "`bosunctl fleet rollout` ended ({status}) before the update was committed; see logs/fleet-rollout.log"
            ))),
            Err(source) => Err(DemoError::Spawn {
                program: self.program.clone(),
                source,
            }),
        }
    }

    /// Waits for the rollout's verdict; gives its report.
    async fn finish(self) -> Result<Value, DemoError> {
        let program = self.program;
        let output = tokio::time::timeout(ROLLOUT_WAIT, self.child.wait_with_output())
            .await
            .map_err(|_| DemoError::Timeout {
                what: "`bosunctl fleet rollout` to end".into(),
                after: ROLLOUT_WAIT,
            })?
            .map_err(|source| DemoError::Spawn {
                program: program.clone(),
                source,
            })?;
        if !output.status.success() {
            return Err(DemoError::Check(format!(
                "`bosunctl fleet rollout` exited {}; see logs/fleet-rollout.log",
                output.status
            )));
        }
        serde_json::from_slice(&output.stdout).map_err(|err| {
            DemoError::Check(format!("`bosunctl fleet rollout` printed no report: {err}"))
        })
    }
}

/// The result of the `agent-update` the rollout queued for `host` (any but `forged_id`), once
/// the agent finished it.
async fn staged_job(
    children: &mut Children,
    (bins, out): (&Path, &Path),
    host: &str,
    forged_id: &Value,
    rollout: &mut Rollout,
) -> Result<Value, DemoError> {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let jobs = stack::ctl(bins, out, &["job", "list", "--host", host]).await?;
        let result = jobs
            .as_array()
            .into_iter()
            .flatten()
            .filter(|j| j["kind"] == json!("agent-update") && &j["job_id"] != forged_id)
            .map(|j| j["result"].clone())
            .find(|r| !r.is_null());
        if let Some(result) = result {
            return Ok(result);
        }
        children.check_alive()?;
        rollout.still_running()?;
        if Instant::now() >= deadline {
            return Err(DemoError::Timeout {
                what: "the rollout's agent-update job to finish".into(),
                after: CONVERGE,
            });
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Step 14.
#[expect(
    clippy::too_many_arguments,
    reason = "the demo's stage: its children, client, paths, helper, agent and host"
)]
pub async fn self_update(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    (bins, out): (&Path, &Path),
    helper: &HelperInstall,
    agent: &AgentFiles,
    run_as: Option<RunAs>,
    host_id: Uuid,
) -> Result<(FakeSystemd, SelfUpdateOutcome), DemoError> {
    let host = host_id.to_string();
    let slots = helper.prefix.join("slots");
    let gate = install_gate(bins, &helper.prefix, &agent.state_dir)?;
    let mut config = std::fs::read_to_string(&agent.config).map_err(artifact(&agent.config))?;
    config.push_str(&format!("\n[update]\nslots_root = {slots:?}\n"));
    std::fs::write(&agent.config, config).map_err(artifact(&agent.config))?;

    children
        .stop("bosun-agentd", Duration::from_secs(10))
        .await?;
    let unit = FakeSystemd::start(
        &helper.prefix.join("unit"),
        UnitSpec {
            exec: slots.join("current/bosun-agentd"),
            args: vec!["--config".into(), absolute(&agent.config)?.into()],
            env: vec![("RUST_LOG".into(), "info".into())],
            restart_sec: Duration::from_millis(500),
            log: absolute(&out.join("logs/agentd.log"))?,
            run_as,
        },
    )?;
    unit.until(
        "the agent to be ready under the unit stand-in",
        |s| s.contains("ActiveState=active"),
        Duration::from_secs(30),
    )
    .await?;
    n.detail(format!(
        "bosun-agentd now runs from {}/current/bosun-agentd (current → a), Type=notify under a systemd stand-in",
        slots.display()
    ));

    let agent_bin = program(bins, "bosun-agentd")?.display().to_string();
    let uploaded = stack::ctl(bins, out, &["artifact", "upload", &agent_bin]).await?;
    let sha256 = uploaded["sha256"]
        .as_str()
        .ok_or_else(|| DemoError::Check(format!("artifact upload answered {uploaded}")))?
        .to_owned();
    n.detail(format!(
        "$ bosunctl artifact upload bosun-agentd   → {} bytes, sha256 {}…",
        uploaded["size"],
        &sha256[..16]
    ));

    // The hub forges a job with a key of its own: the host trusts only the operator's.
    let forger = out.join("hostile/id_ed25519");
    stack::create_dir(&out.join("hostile"))?;
    let forger_arg = forger.display().to_string();
    stack::run_captured(
        Path::new("ssh-keygen"),
        &[
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "hub@forged",
            "-f",
            &forger_arg,
        ],
        &[],
        None,
    )
    .await?;
    let forged_id = submit((bins, out), &host, &sha256, &forger, "update-forged").await?;
    let forged = converge_job(children, bins, out, &host, &forged_id).await?;
    check(
        forged["outcome"] == json!("rejected")
            && forged["detail"]
                .as_str()
                .is_some_and(|d| d.contains("unknown_signer")),
        || format!("the forged update ended {forged}"),
    )?;
    check(record(&slots).is_none() && current(&slots) == "a", || {
        "the forged update staged something".to_owned()
    })?;
    n.detail("a job signed by a key the host does not trust (what a compromised hub can make): rejected, unknown_signer; nothing staged");

    // The operator's own update goes out the way a fleet's does: the host carries a label and
    // `fleet rollout` signs one job for each host the label selects, canary first.
    let labeled = stack::ctl(bins, out, &["hosts", "label", &host, RING]).await?;
    check(labeled["labels"]["ring"] == json!("canary"), || {
        format!("`hosts label` answered {labeled}")
    })?;
    let key = out.join("operator/id_ed25519");
    let mut rollout = Rollout::start((bins, out), &sha256, &key, &host)?;
    n.detail(format!(
        "$ bosunctl hosts label {host} {RING}; bosunctl fleet rollout --kind agent-update --label {RING} --hosts {host} --param version=0.1.0+demo --param sha256=… --param override_window=true -f operator key"
    ));
    let signed = staged_job(children, (bins, out), &host, &forged_id, &mut rollout).await?;
    check(signed["outcome"] == json!("succeeded"), || {
        format!("the signed update ended {signed}")
    })?;
    check(current(&slots) == "b", || {
        format!("current names {} after staging", current(&slots))
    })?;
    n.detail(format!(
        "wave 1 (the canary): the job signed for this host; agent: downloaded, sha256 checked; bosun-helper stage_agent_update → slot {}, current → b",
        signed["output"]["slot"].as_str().unwrap_or("?")
    ));

    // What bosun-update-gate.path does when the record changes.
    let started = Instant::now();
    let status = tokio::process::Command::new(&gate)
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(out.join("logs/update-gate.log"))
                .map_err(artifact(&out.join("logs/update-gate.log")))?,
        ))
        .status();
    let status = tokio::time::timeout(Duration::from_secs(60), status)
        .await
        .map_err(|_| DemoError::Timeout {
            what: "the update gate's verdict".into(),
            after: Duration::from_secs(60),
        })?
        .map_err(|source| DemoError::Spawn {
            program: gate.clone(),
            source,
        })?;
    let verdict = record(&slots);
    check(
        status.success()
            && verdict
                .as_ref()
                .is_some_and(|r| r.phase == UpdatePhase::Committed),
        || format!("the gate ended {status} with {verdict:?}"),
    )?;
    let staged_to_committed_ms = verdict
        .as_ref()
        .and_then(|r| Some(r.decided_at_ms? - r.staged_at_ms));
    n.detail(format!(
        "bosun-update-gate: restarted the agent into slot b, ready and polling for the {} s window → committed ({:.1} s)",
        WINDOW_MS / 1000,
        started.elapsed().as_secs_f64()
    ));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let events = client.get("/v1/admin/events?limit=200").await?;
        let seen = events
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["kind"] == json!("agent_update_committed"));
        if seen {
            break;
        }
        children.check_alive()?;
        if Instant::now() > deadline {
            return Err(DemoError::Timeout {
                what: "the hub's agent_update_committed event".into(),
                after: Duration::from_secs(30),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    n.detail(
        "hub: event agent_update_committed (the new agent read the gate's verdict and reported it)",
    );
    let report = rollout.finish().await?;
    let line = &report["hosts"][0];
    check(
        report["stopped"] == json!(false)
            && report["hosts"].as_array().map(Vec::len) == Some(1)
            && line["outcome"] == json!("done")
            && line["wave"] == json!(1),
        || format!("the rollout reported {report}"),
    )?;
    n.detail(format!(
        "fleet rollout: {} done in wave 1, its verdict agent_update.committed read from the host's audit trail; exit 0",
        line["hostname"].as_str().unwrap_or_default()
    ));
    Ok((
        unit,
        SelfUpdateOutcome {
            forged,
            signed,
            rollout: report,
            phase: verdict.map(|r| r.phase.as_str().to_owned()),
            staged_to_committed_ms,
        },
    ))
}
