//! Step 15: break-glass (DESIGN §12, decision 0020). The operator signs a
//! `break-glass-enable` job for their own demo key with the same `bosunctl job new|sign|submit`
//! path as step 6; the agent (as step 14 left it, under the unit stand-in) has the real
//! helper write the one expiring `authorized_keys` line under its private prefix, and the hub
//! raises `break_glass_open`. The session runs the line's forced command, the support shell:
//! a support command and a refused request both reach the hub's audit trail. A signed
//! `break-glass-disable` removes the file and the hub raises `break_glass_closed`.

use std::path::Path;

use bosun_proto::admin::AlertKind;
use serde_json::{Value, json};
use uuid::Uuid;

use super::children::Children;
use super::helper::HelperInstall;
use super::scenario::{check, converge, converge_job, has_alert, ignore_plain_output};
use super::stack::AgentFiles;
use super::{DemoError, Narrator, stack};
use bosunctl::client::HubClient;

/// How long the demo's door stays open (the agent's bound is 60 s to 24 h).
const DURATION_SECONDS: u64 = 3600;
/// The operator's reason, carried into the hub's alert.
const REASON: &str = "demo: poll loop wedged";

/// What step 15 established.
#[derive(Debug, Clone, Default)]
pub struct BreakGlassOutcome {
    /// The enable job's result (`succeeded`, with `expires_at`).
    pub enabled: Value,
    /// The `authorized_keys` line the helper wrote.
    pub line: String,
    /// The disable job's result (`succeeded`, `removed`).
    pub disabled: Value,
    /// The hub's `break_glass_open` and `break_glass_closed` messages.
    pub alerts: Vec<String>,
}

/// Authors a job of `kind` with `params`, signs it with the operator's key and submits it;
/// gives its id.
pub(super) async fn signed_job(
    (bins, out): (&Path, &Path),
    host: &str,
    kind: &str,
    params: &[String],
) -> Result<Value, DemoError> {
    let doc = out.join(format!("operator/{kind}.json"));
    let doc_arg = doc.display().to_string();
    let mut args = vec!["job", "new", "--kind", kind, "--host", host];
    for param in params {
        args.extend(["--param", param.as_str()]);
    }
    args.extend(["--valid-hours", "1", "-o", &doc_arg]);
    stack::ctl(bins, out, &args)
        .await
        .or_else(ignore_plain_output)?;
    let key_arg = out.join("operator/id_ed25519").display().to_string();
    stack::ctl(bins, out, &["job", "sign", &doc_arg, "-f", &key_arg])
        .await
        .or_else(ignore_plain_output)?;
    let sig_arg = format!("{doc_arg}.sig");
    let submitted = stack::ctl(bins, out, &["job", "submit", &doc_arg, &sig_arg]).await?;
    check(submitted["created"] == json!(true), || {
        format!("submitting {kind} answered {submitted}")
    })?;
    Ok(submitted["job_id"].clone())
}

/// The operator's session through the door: sshd would run the line's forced command, the
/// support shell, with what the client asked. One support command runs (its sudo here a
/// stand-in that prints the fixed command line it was given), one request outside the
/// closed set is refused, and both reach the hub's audit trail naming the door.
async fn support_session(
    n: &mut Narrator,
    children: &mut Children,
    (bins, out): (&Path, &Path),
    agent: &AgentFiles,
    host: &str,
    enable: &Value,
) -> Result<(), DemoError> {
    let shell = stack::program(bins, "bosun-support")?;
    let session = enable.as_str().unwrap_or_default().to_owned();
    let sudo = out.join("operator/sudo-stand-in");
    let script = "#!/bin/sh\n# Prints what sudo -n would run on a real host.\nshift 2\necho \"sudo would run: $*\"\n";
    std::fs::write(&sudo, script).map_err(|source| DemoError::Artifact {
        path: sudo.clone(),
        source,
    })?;
    std::fs::set_permissions(&sudo, std::os::unix::fs::PermissionsExt::from_mode(0o755)).map_err(
        |source| DemoError::Artifact {
            path: sudo.clone(),
            source,
        },
    )?;
    for asked in ["status", "cat /var/lib/vz/images/101/disk.raw"] {
        let ran = tokio::process::Command::new(&shell)
            .args(["--session", &session, "--spool"])
            .arg(&agent.break_glass_spool)
            .arg("--sudo")
            .arg(&sudo)
            .env("SSH_ORIGINAL_COMMAND", asked)
            .output()
            .await
            .map_err(|source| DemoError::Artifact {
                path: shell.clone(),
                source,
            })?;
        let said = String::from_utf8_lossy(if ran.status.success() {
            &ran.stdout
        } else {
            &ran.stderr
        })
        .trim()
        .to_owned();
        n.detail(format!(
            "$ ssh bosun-breakglass@host {asked:?}   → {said} (exit {})",
            ran.status.code().unwrap_or(-1)
        ));
    }
    let deadline = std::time::Instant::now() + super::scenario::CONVERGE;
    let commands = loop {
        let trail = stack::ctl(bins, out, &["audit", "--host", host, "--limit", "100"]).await?;
        let commands: Vec<Value> = trail["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["action"] == "break_glass.command" && e["detail"]["job_id"] == *enable)
            .cloned()
            .collect();
        if commands.len() == 2 {
            break commands;
        }
        children.check_alive()?;
        if std::time::Instant::now() >= deadline {
            return Err(DemoError::Timeout {
                what: "both break-glass commands in the hub's audit trail".into(),
                after: super::scenario::CONVERGE,
            });
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    };
    check(
        commands[1]["detail"]["detail"]["command"] == json!("status")
            && commands[0]["detail"]["detail"]["command"] == json!("refused"),
        || format!("the audit trail holds {commands:?}"),
    )?;
    n.detail(format!(
        "$ bosunctl audit --host {host}   (the session's commands, naming the door)"
    ));
    for entry in commands.iter().rev() {
        n.detail(format!(
            "  {}  {}",
            entry["action"].as_str().unwrap_or_default(),
            bosun_proto::audit_text::one_line(&entry["detail"])
        ));
    }
    Ok(())
}

fn alert_message(fleet: &bosunctl::status::FleetStatus, kind: AlertKind) -> String {
    fleet
        .alerts
        .iter()
        .find(|a| a.kind == kind)
        .map(|a| a.message.clone())
        .unwrap_or_default()
}

/// Step 15.
pub async fn break_glass(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    (bins, out): (&Path, &Path),
    (helper, agent): (&HelperInstall, &AgentFiles),
    host_id: Uuid,
) -> Result<BreakGlassOutcome, DemoError> {
    let host = host_id.to_string();
    let keys = helper.prefix.join("etc/bosun/break-glass/authorized_keys");
    check(!keys.exists(), || {
        format!("{} exists before any door was opened", keys.display())
    })?;
    let public_path = out.join("operator/id_ed25519.pub");
    let public = std::fs::read_to_string(&public_path).map_err(|source| DemoError::Artifact {
        path: public_path.clone(),
        source,
    })?;
    let public = public.trim();
    let key_blob = public
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| DemoError::Check(format!("{} holds no key", public_path.display())))?;

    let enable = signed_job(
        (bins, out),
        &host,
        "break-glass-enable",
        &[
            format!("ssh_public_key={public}"),
            format!("duration_seconds={DURATION_SECONDS}"),
            format!("reason={REASON}"),
        ],
    )
    .await?;
    n.detail(format!(
        "$ bosunctl job new --kind break-glass-enable --param ssh_public_key=\"$(cat id_ed25519.pub)\" --param duration_seconds={DURATION_SECONDS} --param reason=…; job sign; job submit"
    ));
    let enabled = converge_job(children, bins, out, &host, &enable).await?;
    check(enabled["outcome"] == json!("succeeded"), || {
        format!("break-glass-enable ended {enabled}")
    })?;
    let expires_at: jiff::Timestamp = enabled["output"]["expires_at"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| DemoError::Check(format!("break-glass-enable answered {enabled}")))?;
    let expiry = bosun_proto::break_glass::openssh_expiry(expires_at);
    let line = std::fs::read_to_string(&keys).map_err(|source| DemoError::Artifact {
        path: keys.clone(),
        source,
    })?;
    check(
        line.lines().count() == 1
            && line.starts_with(&format!("expiry-time=\"{expiry}\","))
            && expiry.ends_with('Z')
            && line.contains(",restrict,")
            && line.contains(&format!(
                "command=\"{} --session ",
                bosun_proto::break_glass::SUPPORT_SHELL
            ))
            && line.contains(key_blob)
            && !line.contains("operator@demo"),
        || format!("{} holds {line:?}", keys.display()),
    )?;
    n.detail(format!(
        "agent: checked the signature; bosun-helper break_glass_open wrote {}:",
        keys.display()
    ));
    n.detail(format!(
        "  expiry-time=\"{expiry}\",restrict,pty,command=\"{} --session …\" ssh-ed25519 {}… \
         (sshd refuses it after {expires_at}; the session runs only the support shell)",
        bosun_proto::break_glass::SUPPORT_SHELL,
        &key_blob[..key_blob.len().min(16)]
    ));
    let fleet = converge(children, client, "the break_glass_open alert", |f| {
        has_alert(f, AlertKind::BreakGlassOpen)
    })
    .await?;
    let opened = alert_message(&fleet, AlertKind::BreakGlassOpen);
    check(
        opened.contains("SHA256:") && opened.contains(REASON),
        || format!("break_glass_open says {opened:?}"),
    )?;
    n.detail(format!("hub: break_glass_open — {opened}"));
    support_session(n, children, (bins, out), agent, &host, &enable).await?;

    let disable = signed_job((bins, out), &host, "break-glass-disable", &[]).await?;
    n.detail("$ bosunctl job new --kind break-glass-disable; job sign; job submit");
    let disabled = converge_job(children, bins, out, &host, &disable).await?;
    check(
        disabled["outcome"] == json!("succeeded") && disabled["output"]["removed"] == json!(true),
        || format!("break-glass-disable ended {disabled}"),
    )?;
    check(!keys.exists(), || {
        format!("{} is still there after the disable", keys.display())
    })?;
    n.detail("agent: bosun-helper break_glass_close removed the file");
    let fleet = converge(children, client, "the break_glass_closed alert", |f| {
        has_alert(f, AlertKind::BreakGlassClosed)
    })
    .await?;
    let closed = alert_message(&fleet, AlertKind::BreakGlassClosed);
    n.detail(format!("hub: break_glass_closed — {closed}"));
    Ok(BreakGlassOutcome {
        enabled,
        line,
        disabled,
        alerts: vec![opened, closed],
    })
}
