//! The demo's stage around the simulated node (`sim.rs`): a hub on SQLite and the agent, each
//! the real binary of this build started as a child with its log under `out/logs`, plus the
//! operator's own tools (`bosunctl` run as a program, `ssh-keygen`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use secrecy::{ExposeSecret as _, SecretString};
use serde_json::Value;

use super::DemoError;
use super::children::{Children, RunAs, Site};
use super::sim::SimEndpoint;

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
/// poll interval and stop bound (a host stopped on purpose is paged after 5 s, not 30 min).
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
            "--stopped-grace",
            "5",
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
pub(super) async fn wait_for_log_field(
    log: &Path,
    marker: &str,
    field: &str,
    children: &mut Children,
) -> Result<String, DemoError> {
    let limit = Duration::from_secs(20);
    let deadline = Instant::now() + limit;
    loop {
        let text = without_colours(&std::fs::read_to_string(log).unwrap_or_default());
        // The newest line: a restarted child logs its new address after the old one.
        let found = text
            .lines()
            .rev()
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

/// `text` without terminal colour sequences (`ESC [ … m`), which a child whose log is not a
/// terminal may still write.
pub(super) fn without_colours(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
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

/// Seals a secret file to a host with `bosunctl secret seal ARGS…`; gives the armored text,
/// checked to be age's armor and not to hold `secret` in the clear.
pub async fn seal(
    bins: &Path,
    out: &Path,
    args: &[&str],
    secret: &str,
) -> Result<String, DemoError> {
    let key = operator_key_path(out).display().to_string();
    let mut full = vec!["secret", "seal", "--key", &key];
    full.extend_from_slice(args);
    let sealed = ctl_text(bins, out, &full).await?;
    let sealed = sealed.trim().to_owned();
    if sealed.starts_with("-----BEGIN AGE ENCRYPTED FILE-----") && !sealed.contains(secret) {
        Ok(sealed)
    } else {
        Err(DemoError::Check(format!(
            "`bosunctl secret seal {}` printed {sealed:?}",
            args.join(" ")
        )))
    }
}

/// Runs `bosunctl` like [`ctl`] for a command that must report a refusal: exit 11
/// (`NOT_APPLIED`, the diff of a host that refuses part of desired state); gives its JSON.
pub async fn ctl_refused(bins: &Path, out: &Path, args: &[&str]) -> Result<Value, DemoError> {
    let config = out.join("operator/ctl.json");
    let program = program(bins, "bosunctl")?;
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(&program)
            .args(["--config", &config.display().to_string(), "--json"])
            .args(args)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .map_err(|_| DemoError::Timeout {
        what: format!("{} to finish", program.display()),
        after: Duration::from_secs(60),
    })?
    .map_err(|source| DemoError::Spawn {
        program: program.clone(),
        source,
    })?;
    if output.status.code() != Some(11) {
        return Err(DemoError::Check(format!(
            "bosunctl {args:?} exited {} where a refusal exits 11: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    serde_json::from_slice(&output.stdout)
        .map_err(|err| DemoError::Check(format!("bosunctl {args:?} printed no JSON: {err}")))
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
    /// Its `state_dir`.
    pub state_dir: PathBuf,
    /// The box the agent runs for: names its child process and its log.
    pub site: Site,
    /// Where the break-glass support shell records commands for the agent to read.
    pub break_glass_spool: PathBuf,
    /// Where the agent writes the guests' break-glass consents for the support shell.
    pub break_glass_consent: PathBuf,
}

/// Writes the agent's config for `sim` and `hub` in `out/agent[-site]`, with the operator's
/// signer line.
#[expect(
    clippy::too_many_arguments,
    reason = "the agent's settings, each a part of the demo's stage"
)]
pub fn write_agent_files(
    out: &Path,
    site: Site,
    sim: &SimEndpoint,
    hub: &HubInfo,
    enrollment_token: &str,
    allowed_signers: &str,
    run_as: Option<RunAs>,
    helper_socket: Option<&Path>,
) -> Result<AgentFiles, DemoError> {
    let dir = out.join(site.name("agent"));
    let state_dir = dir.join("state");
    create_dir(&state_dir)?;
    let signers = dir.join("allowed_signers");
    write(&signers, allowed_signers)?;
    let pve_token = dir.join("pve-token");
    write(&pve_token, sim.tokens.agent.secret.expose_secret())?;
    let enroll = dir.join("enroll-token");
    write(&enroll, enrollment_token)?;
    // Made here, so it belongs to the agent's user, who reads what the support shell appends.
    let spool = dir.join("break-glass-commands.jsonl");
    write(&spool, "")?;
    // The agent writes it (in its own directory) when a guest consents.
    let consent = dir.join("break-glass-consent.json");
    // A fixed port, as in production (8443): the bootstraps pushed into guests name it, so
    // it must stay the same when the agent restarts (steps 7 and 14).
    let local_api_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| DemoError::Check(format!("no free loopback port for the local api: {e}")))?;
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
port = {local_api_port}
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
# An hour of the verify interval lasts a second (the verify step's plan asks hourly).
verify_hour_ms = 1000

[metrics]
listen = "127.0.0.1:0"

# The controller step: controllers report every second, a silent one is restarted in place
# after 2.5 s, and a new golden build's boot test keeps its scratch guest up for a second.
[controller]
report_interval_ms = 1000
heal_after_ms = 2500
max_restarts = 3

[golden]
storage = {golden_storage:?}
boot_stay_up_seconds = 1

# Every guest's address comes from this pool (the last step looks at them).
{pool}

[health]
interval_ms = {health_interval}
samples = {health_samples}
cpu_high_percent = {cpu_high}
cpu_low_percent = {cpu_low}
smart_interval_ms = {health_interval}

[break_glass]
spool = {spool:?}
consent = {consent:?}
scan_interval_seconds = 1
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
        health_interval = super::host_health::INTERVAL_MS,
        health_samples = super::host_health::SAMPLES,
        cpu_high = super::host_health::CPU_HIGH_PERCENT,
        cpu_low = super::host_health::CPU_LOW_PERCENT,
        golden_storage = super::helper::GOLDEN_STORAGE,
        pool = super::addresses::POOL,
    );
    let config = dir.join("agent.toml");
    write(&config, &text)?;
    if let Some(user) = run_as {
        for path in [
            &dir, &state_dir, &signers, &pve_token, &enroll, &spool, &config,
        ] {
            std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid)).map_err(|source| {
                DemoError::Artifact {
                    path: path.clone(),
                    source,
                }
            })?;
        }
    }
    Ok(AgentFiles {
        config,
        state_dir,
        site,
        break_glass_spool: spool,
        break_glass_consent: consent,
    })
}

/// Starts the agent as `run_as` (when the demo runs as root) with its log appended to
/// `logs/agentd[-site].log`; the child is `bosun-agentd[-site]`.
pub fn start_agent(
    children: &mut Children,
    bins: &Path,
    out: &Path,
    files: &AgentFiles,
    run_as: Option<RunAs>,
) -> Result<(), DemoError> {
    let config = files.config.display().to_string();
    let name = files.site.name("agentd");
    children.spawn(
        &format!("bosun-{name}"),
        &program(bins, "bosun-agentd")?,
        &["--config", &config],
        &out.join(format!("logs/{name}.log")),
        run_as,
    )
}

/// Where [`operator_key`] keeps the operator's private key.
pub fn operator_key_path(out: &Path) -> PathBuf {
    out.join("operator/id_ed25519")
}

/// A fresh operator key made with the stock `ssh-keygen`; gives its `allowed_signers` line.
pub async fn operator_key(out: &Path) -> Result<(PathBuf, String), DemoError> {
    let dir = out.join("operator");
    create_dir(&dir)?;
    let key = operator_key_path(out);
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

pub(super) fn create_dir(path: &Path) -> Result<(), DemoError> {
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
