//! The tunnel's replicas as the demo runs them: `bosun-cloudflared-sim` started as the agent's
//! user, its control API read and driven (`GET /replicas`, `POST /replicas/0/drop`), and the
//! agent given `[tunnel]` and restarted through the unit stand-in.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;

use super::{INTERVAL_MS, RESTART_AFTER, TUNNEL_ID, TunnelOutcome};
use crate::backup_tiers::report;
use crate::children::{Children, RunAs, wait_for_json};
use crate::helper::HelperInstall;
use crate::scenario::{CONVERGE, check, converge};
use crate::stack::{self, AgentFiles, program};
use crate::unit::FakeSystemd;
use crate::{DemoError, Narrator};
use bosunctl::client::HubClient;
use bosunctl::status::{self, FleetStatus};

/// `stand-in.json`, as `bosun-cloudflared-sim` describes itself.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Described {
    pub(super) control: String,
    pub(super) systemctl: String,
    pub(super) replicas: Vec<Replica>,
}

#[derive(Debug, Clone, Deserialize)]
pub(super) struct Replica {
    pub(super) unit: String,
    pub(super) metrics: String,
}

/// The stand-in's `GET /replicas`.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct View {
    pub(super) replicas: Vec<ReplicaView>,
    pub(super) all_down_samples: u32,
    pub(super) now_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub(super) struct ReplicaView {
    pub(super) connections: u32,
    pub(super) routes: BTreeMap<String, String>,
    pub(super) credentials: Option<String>,
    pub(super) restarts_ms: Vec<u64>,
}

/// The running stand-in: where it lives and how to reach its control API.
#[derive(Debug)]
pub(super) struct StandIn {
    pub(super) dir: PathBuf,
    pub(super) described: Described,
    pub(super) http: reqwest::Client,
}

pub(super) fn artifact(path: &Path) -> impl FnOnce(std::io::Error) -> DemoError + '_ {
    move |source| DemoError::Artifact {
        path: path.to_owned(),
        source,
    }
}

fn chown(path: &Path, run_as: Option<RunAs>) -> Result<(), DemoError> {
    match run_as {
        Some(user) => {
            std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid)).map_err(artifact(path))
        }
        None => Ok(()),
    }
}

impl StandIn {
    /// Starts `bosun-cloudflared-sim` (as the agent's user) with two replicas reading
    /// `out/tunnel/config.yml`, first holding only the catch-all.
    pub(super) async fn start(
        children: &mut Children,
        (bins, out): (&Path, &Path),
        run_as: Option<RunAs>,
    ) -> Result<Self, DemoError> {
        let dir = std::path::absolute(out.join("tunnel")).map_err(artifact(out))?;
        stack::create_dir(&dir)?;
        chown(&dir, run_as)?;
        let config = dir.join("config.yml");
        stack::write(
            &config,
            &format!(
                "tunnel: {TUNNEL_ID}\ncredentials-file: \"{}\"\ningress:\n  - service: http_status:404\n",
                dir.join("credentials.json").display()
            ),
        )?;
        chown(&config, run_as)?;
        let (config_arg, dir_arg) = (config.display().to_string(), dir.display().to_string());
        children.spawn(
            "bosun-cloudflared-sim",
            &program(bins, "bosun-cloudflared-sim")?,
            &[
                "--config",
                &config_arg,
                "--dir",
                &dir_arg,
                "--replicas",
                "2",
            ],
            &out.join("logs/cloudflared.log"),
            run_as,
        )?;
        let described: Described = wait_for_json(
            &dir.join("stand-in.json"),
            Duration::from_secs(20),
            children,
        )
        .await?;
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| DemoError::Check(format!("an http client: {e}")))?;
        Ok(Self {
            dir,
            described,
            http,
        })
    }

    pub(super) async fn view(&self) -> Result<View, DemoError> {
        let url = format!("{}/replicas", self.described.control);
        let answer = self.http.get(&url).send().await;
        let answer = match answer {
            Ok(a) => a.json::<View>().await,
            Err(e) => Err(e),
        };
        answer.map_err(|e| DemoError::Check(format!("GET {url}: {e}")))
    }

    /// Reads the stand-in until `done` holds, a child dies, or [`CONVERGE`] passes.
    pub(super) async fn until(
        &self,
        children: &mut Children,
        what: &str,
        done: impl Fn(&View) -> bool,
    ) -> Result<View, DemoError> {
        let deadline = Instant::now() + CONVERGE;
        loop {
            let view = self.view().await?;
            if done(&view) {
                return Ok(view);
            }
            children.check_alive()?;
            if Instant::now() >= deadline {
                return Err(DemoError::Timeout {
                    what: what.to_owned(),
                    after: CONVERGE,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The `[tunnel]` table of the agent's configuration for these replicas.
    fn agent_table(&self) -> String {
        let first = self
            .described
            .replicas
            .first()
            .map(|r| r.metrics.clone())
            .unwrap_or_default();
        let mut text = format!(
            "\n# The tunnel the agent manages (decision 0082): two replicas, restarted after {RESTART_AFTER} failed probes.\n[tunnel]\nreadiness_url = \"{first}/ready\"\ninterval_ms = {INTERVAL_MS}\ntimeout_ms = 500\ndown_after_ms = 5000\nconfig_file = {:?}\ncredentials_file = {:?}\nsystemctl = {:?}\nrestart_after = {RESTART_AFTER}\nrestart_timeout_ms = 5000\n",
            self.dir.join("config.yml").display().to_string(),
            self.dir.join("credentials.json").display().to_string(),
            self.described.systemctl,
        );
        for replica in &self.described.replicas {
            text.push_str(&format!(
                "[[tunnel.replica]]\nunit = {:?}\nmetrics = {:?}\n",
                replica.unit, replica.metrics
            ));
        }
        text
    }
}

/// `X-Starts=` of the unit stand-in's status.
fn starts(status: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix("X-Starts="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Appends `[tunnel]` to the agent's configuration and restarts it through the unit stand-in
/// (`systemctl restart bosun-agent.service`).
pub(super) async fn reconfigure_agent(
    stand_in: &StandIn,
    (helper, agent, unit): (&HelperInstall, &AgentFiles, &FakeSystemd),
) -> Result<(), DemoError> {
    let mut config = std::fs::read_to_string(&agent.config).map_err(artifact(&agent.config))?;
    config.push_str(&stand_in.agent_table());
    std::fs::write(&agent.config, config).map_err(artifact(&agent.config))?;
    let before = unit.starts();
    stack::run_captured(
        &helper.prefix.join("bin/systemctl"),
        &["restart", "bosun-agent.service"],
        &[],
        None,
    )
    .await?;
    unit.until(
        "the agent restarted with [tunnel]",
        |s| starts(s) > before && s.contains("ActiveState=active"),
        Duration::from_secs(30),
    )
    .await
}

/// Replica a hangs: the agent restarts it after [`RESTART_AFTER`] failed probes.
pub(super) async fn fails(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    stand_in: &StandIn,
    outcome: &mut TunnelOutcome,
) -> Result<(), DemoError> {
    let before = stand_in.view().await?;
    let (a_before, b_before) = match before.replicas.as_slice() {
        [a, b] => (a.restarts_ms.len(), b.restarts_ms.len()),
        _ => {
            return Err(DemoError::Check(
                "the stand-in runs no two replicas".to_owned(),
            ));
        }
    };
    let url = format!("{}/replicas/0/drop", stand_in.described.control);
    let dropped: Value = match stand_in.http.post(&url).send().await {
        Ok(a) => a.json().await,
        Err(e) => Err(e),
    }
    .map_err(|e| DemoError::Check(format!("POST {url}: {e}")))?;
    let failed_at = dropped["at_ms"]
        .as_u64()
        .ok_or_else(|| DemoError::Check(format!("POST {url} answered {dropped}")))?;
    let unit = &stand_in.described.replicas[0].unit;
    n.detail(format!(
        "$ curl -X POST …/replicas/0/drop   ({unit} hangs: its /ready answers 503 until it is restarted)"
    ));
    let view = stand_in
        .until(children, "the agent's restart of replica a", |v| {
            v.replicas[0].restarts_ms.len() > a_before
        })
        .await?;
    let restarted_at = view.replicas[0]
        .restarts_ms
        .last()
        .copied()
        .unwrap_or(failed_at);
    outcome.failure_to_restart_ms = restarted_at.saturating_sub(failed_at);
    let view = stand_in
        .until(children, "replica a ready again", |v| {
            v.replicas[0].connections > 0
        })
        .await?;
    outcome.failure_to_ready_ms = view.now_ms.saturating_sub(failed_at);
    outcome.other_restarted = view.replicas[1].restarts_ms.len() - b_before;
    n.detail(format!(
        "agent: {RESTART_AFTER} failed probes ({INTERVAL_MS} ms apart) → systemctl restart {unit}: tunnel failure to restart {} ms, ready again after {} ms; the other replica kept serving and was left alone ({} restarts)",
        outcome.failure_to_restart_ms, outcome.failure_to_ready_ms, outcome.other_restarted
    ));
    check(
        outcome.failure_to_restart_ms >= u64::from(RESTART_AFTER - 1) * INTERVAL_MS
            && outcome.other_restarted == 0,
        || {
            format!(
                "replica a restarted {} ms after its failure, b {} times",
                outcome.failure_to_restart_ms, outcome.other_restarted
            )
        },
    )?;
    let counted = |f: &FleetStatus| {
        report(f)
            .and_then(|r| r.tunnel.as_ref())
            .and_then(|t| t.managed.as_ref().filter(|_| t.healthy))
            .filter(|m| m.restarts > outcome.restarts.0 && m.connections == Some(8))
            .map(|m| m.restarts)
    };
    let fleet = converge(children, client, "the report counting the restart", |f| {
        counted(f).is_some()
    })
    .await?;
    outcome.restarts.1 = counted(&fleet).unwrap_or_default();
    if let Some(line) = status::render(&fleet)
        .into_iter()
        .find(|l| l.trim_start().starts_with("tunnel"))
    {
        n.detail(format!("$ bosunctl status   {}", line.trim()));
    }
    Ok(())
}
