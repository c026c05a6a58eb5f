//! The node's access for Bosun, as an operator sets it up and checks it (decision 0115): the
//! real `bosunctl pve setup` with an administrator's token given for the run, against the
//! simulated node, then the real `bosunctl pve check` on the agent's own token. The demo's
//! node already holds what the agent has used all along (the simulator starts with Bosun's
//! roles, user, token, pool and ACLs), so setup finds nothing to write and says so; the check
//! passes, its `guest-reach` holding the guest agent's privileges on Bosun's pool and on no
//! other path (decision 0113).

use std::path::{Path, PathBuf};

use secrecy::ExposeSecret as _;
use serde_json::Value;

use super::scenario::check;
use super::sim::{SimEndpoint, SimToken};
use super::stack::{program, run_captured};
use super::{DemoError, Narrator};

/// What the step established.
#[derive(Debug, Clone)]
pub struct PveAccessOutcome {
    /// What `pve setup` printed.
    pub setup: String,
    /// `pve check --json`'s report.
    pub check: Value,
}

/// Writes `token` as `ID=SECRET` to `path`, created 0600: the operator's file, never printed.
fn token_file(path: &Path, token: &SimToken) -> Result<(), DemoError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let artifact = |source| DemoError::Artifact {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(artifact)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(artifact)?;
    write!(file, "{}={}", token.id, token.secret.expose_secret()).map_err(artifact)
}

/// The step: `pve setup` (nothing to change), then `pve check` passing.
pub(super) async fn setup_and_check(
    n: &mut Narrator,
    (bins, out): (&Path, &Path),
    sim: &SimEndpoint,
) -> Result<PveAccessOutcome, DemoError> {
    let bosunctl = program(bins, "bosunctl")?;
    let admin: PathBuf = out.join("operator/pve-admin-token");
    token_file(&admin, &sim.tokens.root)?;
    let admin_arg = admin.display().to_string();
    let setup = run_captured(
        &bosunctl,
        &[
            "pve",
            "setup",
            "--url",
            &sim.url,
            "--fingerprint",
            &sim.fingerprint,
            "--admin-token-file",
            &admin_arg,
        ],
        &[],
        None,
    )
    .await?;
    n.detail("$ bosunctl pve setup --url … --fingerprint … --admin-token-file pve-admin-token   (a root@pam token, for this run only)");
    for line in setup.lines() {
        n.detail(format!("  {line}"));
    }
    check(
        setup.contains("nothing changed")
            && !setup.contains(sim.tokens.root.secret.expose_secret()),
        || {
            format!(
                "pve setup on a node holding Bosun's access wrote something or printed the administrator's secret:\n{setup}"
            )
        },
    )?;
    // The administrator's token was for the run only.
    std::fs::remove_file(&admin).map_err(|source| DemoError::Artifact {
        path: admin.clone(),
        source,
    })?;

    let agent = out.join("operator/pve-token");
    token_file(&agent, &sim.tokens.agent)?;
    let agent_arg = agent.display().to_string();
    let printed = run_captured(
        &bosunctl,
        &[
            "pve",
            "check",
            "--url",
            &sim.url,
            "--fingerprint",
            &sim.fingerprint,
            "--token-file",
            &agent_arg,
            "--cloudflared",
            "/nonexistent/cloudflared",
            "--json",
        ],
        &[],
        None,
    )
    .await?;
    let report: Value = serde_json::from_str(&printed)
        .map_err(|e| DemoError::Check(format!("pve check printed no JSON ({e}): {printed}")))?;
    n.detail(
        "$ bosunctl pve check --url … --fingerprint … --token-file pve-token   (the agent's token)",
    );
    let checks = report["checks"].as_array().cloned().unwrap_or_default();
    for c in &checks {
        n.detail(format!(
            "  {:<5} {:<16} {}",
            c["status"].as_str().unwrap_or("?"),
            c["name"].as_str().unwrap_or("?"),
            c["detail"].as_str().unwrap_or("")
        ));
    }
    let status_of = |name: &str| {
        checks
            .iter()
            .find(|c| c["name"] == name)
            .and_then(|c| c["status"].as_str())
            .unwrap_or("absent")
            .to_owned()
    };
    check(
        report["passed"] == true
            && status_of("least-privilege") == "ok"
            && status_of("guest-reach") == "ok",
        || {
            format!(
                "pve check did not pass with the guest agent's reach on pool bosun alone: {report}"
            )
        },
    )?;
    Ok(PveAccessOutcome {
        setup,
        check: report,
    })
}
