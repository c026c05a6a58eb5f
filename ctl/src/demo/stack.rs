//! The demo's stage: a simulated Proxmox node, a hub on SQLite and the agent, each the real
//! binary of this build started as a child with its log under `out/logs`, plus the operator's
//! own tools (`bosunctl` run as a program, `ssh-keygen`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use secrecy::{ExposeSecret as _, SecretString};
use serde::Deserialize;
use serde_json::Value;

use super::DemoError;
use super::children::{Children, RunAs, wait_for_json};

/// The parts of the simulator's `endpoint.json` the demo uses.
#[derive(Debug, Clone, Deserialize)]
pub struct SimEndpoint {
    /// `https://127.0.0.1:PORT/api2/json`.
    pub url: String,
    /// Colon hex, as PVE shows it.
    pub fingerprint: String,
    /// The node name.
    pub node: String,
    /// The seeded golden archive.
    pub golden_volid: String,
    /// SHA-256 of its bytes (its file is `pvesim/dump/<name>`).
    pub golden_sha256: String,
    /// `https://127.0.0.1:PORT/_sim`.
    pub admin_url: String,
    /// Bearer token of the admin endpoint.
    admin_token: SecretString,
    /// The API tokens.
    pub tokens: SimTokens,
}

/// The simulator's tokens.
#[derive(Debug, Clone, Deserialize)]
pub struct SimTokens {
    /// The privilege-separated `BosunAgent` token.
    pub agent: SimToken,
}

/// One API token.
#[derive(Debug, Clone, Deserialize)]
pub struct SimToken {
    /// `user@realm!name`.
    pub id: String,
    /// Its secret.
    pub secret: SecretString,
}

/// One request from the simulator's log.
#[derive(Debug, Clone, Deserialize)]
pub struct SimRequest {
    /// HTTP method.
    pub method: String,
    /// Path under `/api2/json`.
    pub path: String,
}

/// Starts `bosun-pvesim` on a free loopback port; gives its endpoint.
pub async fn start_sim(
    children: &mut Children,
    bins: &Path,
    out: &Path,
    time_scale: f64,
) -> Result<SimEndpoint, DemoError> {
    let data = out.join("pvesim");
    let config = out.join("pvesim.toml");
    write(
        &config,
        &format!("time_scale = {time_scale}\nauth_failure_delay = 3000\n"),
    )?;
    let data_arg = data.display().to_string();
    let config_arg = config.display().to_string();
    children.spawn(
        "bosun-pvesim",
        &program(bins, "bosun-pvesim")?,
        &[
            "--listen",
            "127.0.0.1:0",
            "--data",
            &data_arg,
            "--config",
            &config_arg,
        ],
        &out.join("logs/pvesim.log"),
        None,
    )?;
    wait_for_json(
        &data.join("endpoint.json"),
        Duration::from_secs(20),
        children,
    )
    .await
}

/// One file inside a simulated guest, as `GET /_sim/guests/{vmid}/file` shows it.
#[derive(Debug, Clone, Deserialize)]
pub struct SimGuestFile {
    /// `file`, `dir` or `symlink`.
    pub kind: String,
    /// Permission bits.
    pub mode: u32,
    /// Owner inside the guest.
    pub uid: u32,
    /// Group inside the guest.
    pub gid: u32,
    /// The bytes, hex encoded.
    content: String,
}

impl SimGuestFile {
    /// The file's bytes.
    pub fn content(&self) -> Result<Vec<u8>, DemoError> {
        hex::decode(&self.content).map_err(|e| {
            DemoError::Check(format!("the simulator sent a file that is not hex: {e}"))
        })
    }
}

fn sim_admin_client(sim: &SimEndpoint) -> Result<reqwest::Client, DemoError> {
    reqwest::Client::builder()
        .use_preconfigured_tls(crate::tls::pinned(&sim.fingerprint)?)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|source| DemoError::Http {
            what: "building the simulator admin client",
            source,
        })
}

/// Mutating and reading calls the simulator logged, in order.
pub async fn sim_requests(sim: &SimEndpoint) -> Result<Vec<SimRequest>, DemoError> {
    let response = sim_admin_client(sim)?
        .get(format!("{}/requests", sim.admin_url))
        .bearer_auth(sim.admin_token.expose_secret())
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|source| DemoError::Http {
            what: "GET /_sim/requests",
            source,
        })?;
    response.json().await.map_err(|source| DemoError::Http {
        what: "decoding /_sim/requests",
        source,
    })
}

/// Declares a server the simulated node can reach (`PUT /_sim/remotes/{server}`, `spec` as
/// the simulator's admin API takes it): from then on a storage on it activates only with what
/// `spec` accepts.
pub async fn sim_declare_remote(
    sim: &SimEndpoint,
    server: &str,
    spec: &Value,
) -> Result<(), DemoError> {
    let what = "PUT /_sim/remotes/{server}";
    sim_admin_client(sim)?
        .put(format!("{}/remotes/{server}", sim.admin_url))
        .bearer_auth(sim.admin_token.expose_secret())
        .json(spec)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|source| DemoError::Http { what, source })?;
    Ok(())
}

/// `pct ARGS…` run by root on the simulated node (`POST /_sim/pct`), with `input` as the
/// file `pct push` sends; fails unless it exits 0.
pub async fn sim_pct(
    sim: &SimEndpoint,
    args: &[&str],
    input: Option<&[u8]>,
) -> Result<(), DemoError> {
    let what = "POST /_sim/pct";
    let answer: Value = sim_admin_client(sim)?
        .post(format!("{}/pct", sim.admin_url))
        .bearer_auth(sim.admin_token.expose_secret())
        .json(&serde_json::json!({ "args": args, "input_hex": input.map(hex::encode) }))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|source| DemoError::Http { what, source })?
        .json()
        .await
        .map_err(|source| DemoError::Http { what, source })?;
    if answer["exit"] != 0 {
        return Err(DemoError::Check(format!(
            "pct {}: {answer}",
            args.join(" ")
        )));
    }
    Ok(())
}

/// `path` inside the simulated guest `vmid`, or `None` while it does not exist.
pub async fn sim_guest_file(
    sim: &SimEndpoint,
    vmid: u32,
    path: &str,
) -> Result<Option<SimGuestFile>, DemoError> {
    let what = "GET /_sim/guests/{vmid}/file";
    let response = sim_admin_client(sim)?
        .get(format!("{}/guests/{vmid}/file", sim.admin_url))
        .query(&[("path", path)])
        .bearer_auth(sim.admin_token.expose_secret())
        .send()
        .await
        .map_err(|source| DemoError::Http { what, source })?;
    if response.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    let response = response
        .error_for_status()
        .map_err(|source| DemoError::Http { what, source })?;
    response
        .json()
        .await
        .map(Some)
        .map_err(|source| DemoError::Http { what, source })
}

/// The hub: where it listens, its pin and the admin token `bosun-hubd init` printed once.
#[derive(Debug, Clone)]
pub struct HubInfo {
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// SHA-256 of its certificate.
    pub fingerprint: String,
    /// The admin token.
    pub admin_token: SecretString,
}

/// `bosun-hubd init` then `bosun-hubd serve` on a free loopback port with the demo's short
/// poll interval.
pub async fn start_hub(
    children: &mut Children,
    bins: &Path,
    out: &Path,
) -> Result<HubInfo, DemoError> {
    let hubd = program(bins, "bosun-hubd")?;
    let data = out.join("hub");
    let data_arg = data.display().to_string();
    let printed = run_captured(&hubd, &["init", "--data", &data_arg], &[], None).await?;
    let field = |name: &str| {
        printed
            .lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned()))
            .ok_or_else(|| DemoError::Check(format!("`bosun-hubd init` printed no {name}")))
    };
    let fingerprint = field("fingerprint:")?;
    let admin_token = SecretString::from(field("admin token:")?);
    let log = out.join("logs/hubd.log");
    children.spawn(
        "bosun-hubd",
        &hubd,
        &[
            "serve",
            "--data",
            &data_arg,
            "--listen",
            "127.0.0.1:0",
            "--poll-interval",
            "1",
        ],
        &log,
        None,
    )?;
    let addr = wait_for_log_field(&log, "hub listening", "addr=", children).await?;
    Ok(HubInfo {
        url: format!("https://{addr}"),
        fingerprint,
        admin_token,
    })
}

/// Waits for a line of `log` containing `marker` and gives the value of its `field` (`k=v`).
async fn wait_for_log_field(
    log: &Path,
    marker: &str,
    field: &str,
    children: &mut Children,
) -> Result<String, DemoError> {
    let limit = Duration::from_secs(20);
    let deadline = Instant::now() + limit;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let found = text
            .lines()
            .filter(|l| l.contains(marker))
            .find_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix(field)));
        if let Some(value) = found {
            return Ok(value.to_owned());
        }
        children.check_alive()?;
        if Instant::now() >= deadline {
            return Err(DemoError::Timeout {
                what: format!("`{marker}` in {}", log.display()),
                after: limit,
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs the operator's `bosunctl` (this build) with the demo's config and `--json`; gives the
/// JSON it printed (`Null` when it printed nothing).
pub async fn ctl(bins: &Path, out: &Path, args: &[&str]) -> Result<Value, DemoError> {
    let printed = ctl_text(bins, out, args).await?;
    if printed.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(&printed)
        .map_err(|err| DemoError::Check(format!("bosunctl {args:?} printed no JSON: {err}")))
}

/// Runs the operator's `bosunctl` (this build) with the demo's config and `--json`; gives what
/// it printed as is (`secret seal` prints armored text, `policy sign-floor` a path).
pub async fn ctl_text(bins: &Path, out: &Path, args: &[&str]) -> Result<String, DemoError> {
    let config = out.join("operator/ctl.json");
    let config_arg = config.display().to_string();
    let mut full = vec!["--config", config_arg.as_str(), "--json"];
    full.extend_from_slice(args);
    run_captured(&program(bins, "bosunctl")?, &full, &[], None).await
}

/// Saves the hub connection for `bosunctl` (`bosunctl hub init`, as an operator would).
pub async fn ctl_hub_init(bins: &Path, out: &Path, hub: &HubInfo) -> Result<Value, DemoError> {
    let config = out.join("operator/ctl.json");
    let config_arg = config.display().to_string();
    let printed = run_captured(
        &program(bins, "bosunctl")?,
        &[
            "--config",
            &config_arg,
            "--json",
            "--hub-url",
            &hub.url,
            "--fingerprint",
            &hub.fingerprint,
            "hub",
            "init",
        ],
        &[("BOSUN_ADMIN_TOKEN", hub.admin_token.expose_secret())],
        None,
    )
    .await?;
    serde_json::from_str(&printed)
        .map_err(|err| DemoError::Check(format!("bosunctl hub init printed no JSON: {err}")))
}

/// Runs a program to completion; gives its stdout, or fails with its stderr.
pub async fn run_captured(
    program: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    cwd: Option<&Path>,
) -> Result<String, DemoError> {
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    for (key, value) in env {
        command.env(key, value);
    }
    if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .map_err(|_| DemoError::Timeout {
            what: format!("{} to finish", program.display()),
            after: Duration::from_secs(60),
        })?
        .map_err(|source| DemoError::Spawn {
            program: program.to_owned(),
            source,
        })?;
    if !output.status.success() {
        return Err(DemoError::Command {
            program: program.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The agent's files: config, state, allowed signers, secrets (each 0600, owned by the user
/// the agent runs as).
#[derive(Debug, Clone)]
pub struct AgentFiles {
    /// `agent.toml`.
    pub config: PathBuf,
}

/// Writes the agent's config for `sim` and `hub`, with the operator's signer line.
pub fn write_agent_files(
    out: &Path,
    sim: &SimEndpoint,
    hub: &HubInfo,
    enrollment_token: &str,
    allowed_signers: &str,
    run_as: Option<RunAs>,
    helper_socket: Option<&Path>,
) -> Result<AgentFiles, DemoError> {
    let dir = out.join("agent");
    let state_dir = dir.join("state");
    create_dir(&state_dir)?;
    let signers = dir.join("allowed_signers");
    write(&signers, allowed_signers)?;
    let pve_token = dir.join("pve-token");
    write(&pve_token, sim.tokens.agent.secret.expose_secret())?;
    let enroll = dir.join("enroll-token");
    write(&enroll, enrollment_token)?;
    let text = format!(
        r#"state_dir = {state:?}
allowed_signers = {signers:?}

[hub]
url = {hub_url:?}
fingerprint = {hub_fp:?}
enrollment_token_file = {enroll:?}

[pve]
url = {pve_url:?}
node = {node:?}
token_id = {token_id:?}
token_secret_file = {pve_token:?}
fingerprint = {pve_fp:?}
storage = "local-lvm"
fast_retries = true

[local_api]
bind = "127.0.0.1"
port = 0
{helper}
[poll]
long_poll_seconds = 1
backoff_initial_ms = 100
backoff_max_ms = 1000
report_min_interval_ms = 200

[reconcile]
interval_seconds = 1
max_parallel = 4

[backup]
restore_test_stay_up_ms = 3000
"#,
        state = state_dir,
        hub_url = hub.url,
        hub_fp = hub.fingerprint,
        helper = match helper_socket {
            Some(socket) => format!("\n[helper]\ntransport = \"socket\"\nsocket = {socket:?}\n"),
            None => String::new(),
        },
        pve_url = sim.url,
        node = sim.node,
        token_id = sim.tokens.agent.id,
        pve_fp = sim.fingerprint,
    );
    let config = dir.join("agent.toml");
    write(&config, &text)?;
    if let Some(user) = run_as {
        for path in [&dir, &state_dir, &signers, &pve_token, &enroll, &config] {
            std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid)).map_err(|source| {
                DemoError::Artifact {
                    path: path.clone(),
                    source,
                }
            })?;
        }
    }
    Ok(AgentFiles { config })
}

/// Starts the agent as `run_as` (when the demo runs as root) with its log appended to
/// `logs/agentd.log`.
pub fn start_agent(
    children: &mut Children,
    bins: &Path,
    out: &Path,
    files: &AgentFiles,
    run_as: Option<RunAs>,
) -> Result<(), DemoError> {
    let config = files.config.display().to_string();
    children.spawn(
        "bosun-agentd",
        &program(bins, "bosun-agentd")?,
        &["--config", &config],
        &out.join("logs/agentd.log"),
        run_as,
    )
}

/// A fresh operator key made with the stock `ssh-keygen`; gives its `allowed_signers` line.
pub async fn operator_key(out: &Path) -> Result<(PathBuf, String), DemoError> {
    let dir = out.join("operator");
    create_dir(&dir)?;
    let key = dir.join("id_ed25519");
    let key_arg = key.display().to_string();
    let ssh_keygen = Path::new("ssh-keygen");
    run_captured(
        ssh_keygen,
        &[
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "operator@demo",
            "-f",
            &key_arg,
        ],
        &[],
        None,
    )
    .await?;
    let public_path = key.with_extension("pub");
    let public = std::fs::read_to_string(&public_path).map_err(|source| DemoError::Artifact {
        path: public_path,
        source,
    })?;
    Ok((key, format!("operator@demo {}\n", public.trim())))
}

/// The binary `name` in `bins`.
pub fn program(bins: &Path, name: &str) -> Result<PathBuf, DemoError> {
    let path = bins.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(DemoError::MissingBinary { path })
    }
}

/// Writes a file 0600.
pub fn write(path: &Path, contents: &str) -> Result<(), DemoError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(contents.as_bytes()))
        .map_err(|source| DemoError::Artifact {
            path: path.to_owned(),
            source,
        })
}

fn create_dir(path: &Path) -> Result<(), DemoError> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|source| DemoError::Artifact {
            path: path.to_owned(),
            source,
        })
}

/// The agent's own Proxmox client with the `BosunAgent` token, the certificate pinned (the
/// demo reads guest configs with it to show what provisioning did).
pub fn pve_client(sim: &SimEndpoint) -> Result<bosun_agentd::pve::PveClient, DemoError> {
    use bosun_agentd::pve::{PveClient, PveConfig, RetryPolicy, TlsTrust};
    let config = PveConfig {
        base_url: sim
            .url
            .parse()
            .map_err(|err| DemoError::Check(format!("simulator url {}: {err}", sim.url)))?,
        node: sim
            .node
            .parse()
            .map_err(|err| DemoError::Check(format!("node name: {err}")))?,
        token_id: sim.tokens.agent.id.clone(),
        token_secret: sim.tokens.agent.secret.clone(),
        trust: TlsTrust::PinnedSha256(sim.fingerprint.clone()),
        policy: RetryPolicy::fast(),
    };
    PveClient::new(config).map_err(|source| DemoError::Pve {
        what: "building the client",
        source,
    })
}
