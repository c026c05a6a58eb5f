//! Break-glass the customer consents to (DESIGN §12, decision 0080). The operator opens a door
//! again with a signed job; through it a host-level command runs, but `guest-config` of guest
//! alpha is refused until alpha's controller consents through its local API
//! (`POST /v1/break-glass/consent`, bounded: a day at most). Alpha's controller cannot consent
//! for another guest (403). Once alpha consents the command runs; once it revokes, the next one
//! is refused. Alpha's customer reads every command on alpha, run or refused, and its own
//! grant and revoke in `GET /v1/audit`. A signed disable closes the door.

use std::path::Path;

use serde_json::{Value, json};
use uuid::Uuid;

use super::break_glass::signed_job;
use super::children::Children;
use super::guest_steps::{self, GuestBootstrap};
use super::scenario::{check, converge, converge_job, vmid_of};
use super::sim::SimEndpoint;
use super::stack::AgentFiles;
use super::{DemoError, Narrator, stack};
use bosunctl::client::HubClient;

/// What the step established.
#[derive(Debug, Clone, Default)]
pub struct ConsentOutcome {
    /// The support shell's exit status for `guest-config` of alpha: before consent, with it,
    /// after the revoke.
    pub exits: Vec<i32>,
    /// The status alpha's controller got consenting for another guest.
    pub foreign: u16,
    /// `command status refused` of each command on alpha alpha's customer read, newest first.
    pub seen: Vec<String>,
}

/// Runs the support shell as the door's forced command with `asked`; gives its exit status and
/// what it said.
async fn shell(
    bins: &Path,
    (agent, sudo): (&AgentFiles, &Path),
    session: &str,
    asked: &str,
) -> Result<(i32, String), DemoError> {
    let program = stack::program(bins, "bosun-support")?;
    let ran = tokio::process::Command::new(&program)
        .args(["--session", session, "--spool"])
        .arg(&agent.break_glass_spool)
        .arg("--consent")
        .arg(&agent.break_glass_consent)
        .arg("--sudo")
        .arg(sudo)
        .env("SSH_ORIGINAL_COMMAND", asked)
        .output()
        .await
        .map_err(|source| DemoError::Artifact {
            path: program.clone(),
            source,
        })?;
    let code = ran.status.code().unwrap_or(-1);
    let said = String::from_utf8_lossy(if code == 0 { &ran.stdout } else { &ran.stderr })
        .trim()
        .to_owned();
    Ok((code, said))
}

/// The shell's `sudo` here: root's `pct config` answered by the simulator (the shell reads the
/// guest's tags from it before a guest command, to check the consent is that guest's); any
/// other command printed as `sudo -n` would run it.
fn sudo_stand_in(
    bins: &Path,
    out: &Path,
    sim: &SimEndpoint,
) -> Result<std::path::PathBuf, DemoError> {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = out.join("operator");
    let pct = dir.join("consent-pct");
    let beside = dir.join("consent-pct.endpoint.json");
    let sudo = dir.join("consent-sudo");
    let artifact = |path: &Path| {
        let path = path.to_owned();
        move |source| DemoError::Artifact { path, source }
    };
    std::fs::copy(stack::program(bins, "bosun-pvesim-pct")?, &pct).map_err(artifact(&pct))?;
    std::fs::copy(sim.data.join("endpoint.json"), &beside).map_err(artifact(&beside))?;
    std::fs::set_permissions(&beside, std::fs::Permissions::from_mode(0o600))
        .map_err(artifact(&beside))?;
    let script = format!(
        "#!/bin/sh\n# Root's pct config answered by the simulator; anything else printed as sudo -n would run it.\n\
         if [ \"$3 $4\" = '/usr/sbin/pct config' ]; then shift 3; exec '{}' \"$@\"; fi\n\
         shift 2\necho \"sudo would run: $*\"\n",
        pct.display()
    );
    std::fs::write(&sudo, script).map_err(artifact(&sudo))?;
    for program in [&pct, &sudo] {
        std::fs::set_permissions(program, std::fs::Permissions::from_mode(0o755))
            .map_err(artifact(program))?;
    }
    Ok(sudo)
}

/// Alpha's controller asks for consent with `body`; gives the status and answer.
async fn consent(
    boot: &GuestBootstrap,
    method: reqwest::Method,
    query: &str,
    body: Option<Value>,
) -> Result<(u16, Value), DemoError> {
    let path = format!("/v1/break-glass/consent{query}");
    guest_steps::send(boot, method, &path, body).await
}

/// The commands on `vmid` in alpha's audit log, newest first.
async fn seen_by_alpha(boot: &GuestBootstrap, vmid: u32) -> Result<Vec<String>, DemoError> {
    let page = guest_steps::get(boot, "/v1/audit?limit=100").await?;
    let command = format!("guest-config {vmid}");
    Ok(page["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["event"] == "break_glass.command" && e["detail"]["command"] == *command)
        .map(|e| {
            let d = &e["detail"];
            format!(
                "{} status={} {}",
                d["command"].as_str().unwrap_or_default(),
                d["status"],
                d["refused"].as_str().unwrap_or("ran")
            )
        })
        .collect())
}

/// Removes the job documents the break-glass step left under `operator/` for `kind`, so this
/// step authors and signs its own.
fn clear_job_files(out: &Path, kind: &str) -> Result<(), DemoError> {
    for name in [format!("{kind}.json"), format!("{kind}.json.sig")] {
        let path = out.join("operator").join(name);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(DemoError::Artifact { path, source }),
        }
    }
    Ok(())
}

/// The step; see the module documentation.
pub(super) async fn customer_consent(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    (bins, out): (&Path, &Path),
    (sim, agent): (&SimEndpoint, &AgentFiles),
    (host_id, alpha): (Uuid, Uuid),
) -> Result<ConsentOutcome, DemoError> {
    let host = host_id.to_string();
    let fleet = converge(children, client, "alpha and another guest", |f| {
        vmid_of(f, alpha).is_ok()
    })
    .await?;
    let vmid = vmid_of(&fleet, alpha)?;
    let other = fleet
        .hosts
        .first()
        .map(bosunctl::status::guest_lines)
        .into_iter()
        .flatten()
        .filter_map(|g| g.vmid)
        .find(|v| *v != vmid)
        .ok_or_else(|| DemoError::Check("no guest beside alpha on the host".into()))?;
    let boot = guest_steps::bootstrap(sim, out, vmid).await?;
    let sudo = sudo_stand_in(bins, out, sim)?;

    let public_path = out.join("operator/id_ed25519.pub");
    let public = std::fs::read_to_string(&public_path).map_err(|source| DemoError::Artifact {
        path: public_path.clone(),
        source,
    })?;
    let params = [
        format!("ssh_public_key={}", public.trim()),
        "duration_seconds=3600".to_owned(),
        "reason=demo: customer ticket 4711".to_owned(),
    ];
    clear_job_files(out, "break-glass-enable")?;
    let enable = signed_job((bins, out), &host, "break-glass-enable", &params).await?;
    let enabled = converge_job(children, bins, out, &host, &enable).await?;
    check(enabled["outcome"] == json!("succeeded"), || {
        format!("break-glass-enable ended {enabled}")
    })?;
    n.detail("operator: a signed break-glass-enable opens the door again");
    let session = enable.as_str().unwrap_or_default().to_owned();
    let asked = format!("guest-config {vmid}");
    let mut exits = Vec::new();

    let (code, said) = shell(bins, (agent, &sudo), &session, "status").await?;
    check(code == 0, || format!("status exited {code}: {said}"))?;
    n.detail("$ ssh bosun-breakglass@host status   → runs (a host-level command needs no consent)");
    let (code, said) = shell(bins, (agent, &sudo), &session, &asked).await?;
    check(code == 3 && said.contains("has not consented"), || {
        format!("{asked} without consent exited {code}: {said}")
    })?;
    exits.push(code);
    n.detail(format!(
        "$ ssh bosun-breakglass@host {asked:?}   → {said} (exit {code})"
    ));

    let (foreign, answer) = consent(
        &boot,
        reqwest::Method::POST,
        "",
        Some(json!({"duration_seconds": 600, "vmid": other})),
    )
    .await?;
    check(foreign == 403, || {
        format!("consent for guest {other} answered {foreign}: {answer}")
    })?;
    n.detail(format!(
        "alpha's controller: POST /v1/break-glass/consent {{\"vmid\": {other}}} → {foreign} {} (only for itself)",
        answer["code"].as_str().unwrap_or_default()
    ));
    let (status, answer) = consent(
        &boot,
        reqwest::Method::POST,
        "",
        Some(json!({"duration_seconds": 7 * 86_400})),
    )
    .await?;
    check(status == 400, || {
        format!("a week's consent answered {status}: {answer}")
    })?;
    n.detail(format!(
        "alpha's controller: a week's consent → {status}: {}",
        answer["message"].as_str().unwrap_or_default()
    ));
    let (status, answer) = consent(
        &boot,
        reqwest::Method::POST,
        "",
        Some(json!({"duration_seconds": 900, "reason": "support ticket 4711"})),
    )
    .await?;
    check(status == 200 && answer["granted"] == json!(true), || {
        format!("consent answered {status}: {answer}")
    })?;
    n.detail(format!(
        "alpha's controller: POST /v1/break-glass/consent {{\"duration_seconds\": 900}} → granted until {}",
        answer["expires_at"].as_str().unwrap_or_default()
    ));
    let (code, said) = shell(bins, (agent, &sudo), &session, &asked).await?;
    check(code == 0, || {
        format!("{asked} with consent exited {code}: {said}")
    })?;
    exits.push(code);
    let first = said.lines().next().unwrap_or_default();
    n.detail(format!(
        "$ ssh bosun-breakglass@host {asked:?}   → {first} …"
    ));

    let (status, answer) = consent(&boot, reqwest::Method::DELETE, "", None).await?;
    check(status == 200 && answer["granted"] == json!(false), || {
        format!("revoke answered {status}: {answer}")
    })?;
    let (code, said) = shell(bins, (agent, &sudo), &session, &asked).await?;
    check(code == 3, || {
        format!("{asked} after the revoke exited {code}: {said}")
    })?;
    exits.push(code);
    n.detail(format!(
        "alpha's controller: DELETE /v1/break-glass/consent; the next {asked:?} → refused (exit {code})"
    ));

    let deadline = std::time::Instant::now() + super::scenario::CONVERGE;
    let seen = loop {
        let seen = seen_by_alpha(&boot, vmid).await?;
        if seen.len() == 3 {
            break seen;
        }
        children.check_alive()?;
        if std::time::Instant::now() >= deadline {
            return Err(DemoError::Timeout {
                what: "the commands on alpha in alpha's audit log".into(),
                after: super::scenario::CONVERGE,
            });
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    };
    n.detail("GET /v1/audit with alpha's token: every command on alpha, newest first");
    for line in &seen {
        n.detail(format!("  break_glass.command {line}"));
    }
    check(
        seen[0].ends_with("no_consent")
            && seen[1].ends_with("ran")
            && seen[2].ends_with("no_consent"),
        || format!("alpha read {seen:?}"),
    )?;

    clear_job_files(out, "break-glass-disable")?;
    let disable = signed_job((bins, out), &host, "break-glass-disable", &[]).await?;
    let disabled = converge_job(children, bins, out, &host, &disable).await?;
    check(disabled["outcome"] == json!("succeeded"), || {
        format!("break-glass-disable ended {disabled}")
    })?;
    n.detail("operator: a signed break-glass-disable closes the door");
    Ok(ConsentOutcome {
        exits,
        foreign,
        seen,
    })
}
