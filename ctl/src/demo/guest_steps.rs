//! Steps 3 and 4 of the demo: what a controller inside a guest sees of the agent's local
//! API, through the bootstrap the provisioning back half wrote via the helper.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::helper::HelperInstall;
use super::stack::{self, SimEndpoint};
use super::{DemoError, Narrator};

/// Proxmox's answer to a snapshot of a container with a bind mount point.
pub const BIND_MOUNT_REFUSAL: &str = "snapshot feature is not available";

/// What step 3 saw.
#[derive(Debug, Clone, Default)]
pub struct GuestClientOutcome {
    /// Mounts `GET /v1/storage` listed.
    pub mounts: usize,
    /// The snapshot `POST /v1/snapshot` took.
    pub snapshot: Option<String>,
    /// Why Proxmox refused the snapshot, when it did.
    pub snapshot_refused: Option<String>,
    /// Whether `GET /v1/backup/due` said a backup is due.
    pub backup_due: bool,
    /// The backup phase after the quiesce pass.
    pub backup_phase: String,
    /// Whether the demo app was running again after the pass.
    pub app_restarted: bool,
}

/// The parts of a bootstrap the demo uses.
#[derive(Debug, Clone)]
pub struct GuestBootstrap {
    /// Where it lies (host side of the read-only mount).
    pub path: PathBuf,
    /// Local API base URL.
    pub url: String,
    /// The pinned leaf's SHA-256.
    pub fingerprint: String,
    /// The guest's bearer token.
    token: String,
}

fn field(doc: &Value, pointer: &str, path: &Path) -> Result<String, DemoError> {
    doc.pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| DemoError::Check(format!("{} has no {pointer}", path.display())))
}

/// Waits for `vmid`'s bootstrap and reads it.
pub async fn bootstrap(helper: &HelperInstall, vmid: u32) -> Result<GuestBootstrap, DemoError> {
    let path = helper.bootstrap_path(vmid);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        if Instant::now() > deadline {
            return Err(DemoError::Timeout {
                what: format!("the bootstrap {}", path.display()),
                after: Duration::from_secs(30),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let text = std::fs::read_to_string(&path).map_err(|source| DemoError::Artifact {
        path: path.clone(),
        source,
    })?;
    let doc: Value = serde_json::from_str(&text)
        .map_err(|e| DemoError::Check(format!("{} is not JSON: {e}", path.display())))?;
    Ok(GuestBootstrap {
        url: field(&doc, "/local_api/url", &path)?,
        fingerprint: field(&doc, "/local_api/fingerprint", &path)?,
        token: field(&doc, "/local_api/token", &path)?,
        path,
    })
}

fn pinned_client(boot: &GuestBootstrap) -> Result<reqwest::Client, DemoError> {
    reqwest::Client::builder()
        .use_preconfigured_tls(crate::tls::pinned(&boot.fingerprint)?)
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|source| DemoError::Http {
            what: "building the pinned local api client",
            source,
        })
}

async fn call(
    client: &reqwest::Client,
    boot: &GuestBootstrap,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Result<(u16, Value), DemoError> {
    let mut request = client
        .request(method, format!("{}{path}", boot.url))
        .bearer_auth(&boot.token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.map_err(|source| DemoError::Http {
        what: "calling the local api",
        source,
    })?;
    let status = response.status().as_u16();
    let value = response.json().await.unwrap_or(Value::Null);
    Ok((status, value))
}

fn expect_ok(what: &str, (status, body): (u16, Value)) -> Result<Value, DemoError> {
    if (200..300).contains(&status) {
        Ok(body)
    } else {
        Err(DemoError::Check(format!(
            "{what} answered {status}: {body}"
        )))
    }
}

/// Step 3: the reference client of guest `vmid`.
pub async fn reference_client(
    n: &mut Narrator,
    bins: &Path,
    out: &Path,
    boot: &GuestBootstrap,
) -> Result<GuestClientOutcome, DemoError> {
    n.detail(format!(
        "bootstrap.json read from {} (mounted read-only in the guest)",
        boot.path.display()
    ));
    let client = pinned_client(boot)?;
    let storage = expect_ok(
        "GET /v1/storage",
        call(&client, boot, reqwest::Method::GET, "/v1/storage", None).await?,
    )?;
    let mounts = storage["mounts"].as_array().map_or(0, Vec::len);
    n.detail(format!(
        "GET /v1/storage over TLS pinned to {}…: {mounts} mount(s)",
        &boot.fingerprint[..16.min(boot.fingerprint.len())]
    ));
    let (status, taken) = call(
        &client,
        boot,
        reqwest::Method::POST,
        "/v1/snapshot",
        Some(json!({ "description": "before deploy (demo)" })),
    )
    .await?;
    let (snapshot, snapshot_refused) = match status {
        200..300 => (taken["name"].as_str().map(str::to_owned), None),
        // Proxmox refuses `pct snapshot` for a container with a bind mount point, and the
        // bootstrap arrives through one; the API reports it rather than hiding it.
        502 if taken.to_string().contains(BIND_MOUNT_REFUSAL) => {
            (None, Some(BIND_MOUNT_REFUSAL.to_owned()))
        }
        _ => {
            return Err(DemoError::Check(format!(
                "POST /v1/snapshot answered {status}: {taken}"
            )));
        }
    };
    match (&snapshot, &snapshot_refused) {
        (Some(name), _) => n.detail(format!("POST /v1/snapshot → {name}")),
        (None, Some(reason)) => n.detail(format!(
            "POST /v1/snapshot → refused by proxmox: {reason} (the read-only bootstrap bind mount; known limitation)"
        )),
        (None, None) => {}
    }
    let due = expect_ok(
        "GET /v1/backup/due",
        call(&client, boot, reqwest::Method::GET, "/v1/backup/due", None).await?,
    )?;
    let backup_due = due["due"].as_bool().unwrap_or(false);
    n.detail(format!("GET /v1/backup/due → due = {backup_due}"));
    if !backup_due {
        return Err(DemoError::Check(format!(
            "a fresh guest should have a backup due: {due}"
        )));
    }

    // The demo "app": running while its marker file exists; the hooks stop and start it.
    let guest_dir = out.join("guest-alpha");
    std::fs::create_dir_all(&guest_dir).map_err(|source| DemoError::Artifact {
        path: guest_dir.clone(),
        source,
    })?;
    let running = guest_dir.join("app.running");
    stack::write(&running, "up\n")?;
    let apps = guest_dir.join("apps.json");
    let running_arg = running.display().to_string();
    stack::write(
        &apps,
        &json!([{
            "name": "demo-app",
            "stop": ["rm", "-f", running_arg],
            "start": ["touch", running_arg],
        }])
        .to_string(),
    )?;
    let marker = guest_dir.join("quiesce.marker").display().to_string();
    let boot_arg = boot.path.display().to_string();
    let apps_arg = apps.display().to_string();
    stack::run_captured(
        &stack::program(bins, "bosun-guest")?,
        &[
            "--bootstrap",
            &boot_arg,
            "--apps",
            &apps_arg,
            "--marker",
            &marker,
            "--max-quiesce-s",
            "60",
            "--poll-ms",
            "100",
            "once",
        ],
        &[],
        None,
    )
    .await?;
    let app_restarted = running.exists();
    let status = expect_ok(
        "GET /v1/backup/status",
        call(
            &client,
            boot,
            reqwest::Method::GET,
            "/v1/backup/status",
            None,
        )
        .await?,
    )?;
    let backup_phase = status
        .pointer("/run/phase")
        .or_else(|| status.get("phase"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    n.detail(format!(
        "$ bosun-guest once   stopped demo-app, started it again once the backup reached `snapshotted`; backup now {backup_phase}"
    ));
    if !app_restarted {
        return Err(DemoError::Check(
            "the demo app was not running after the quiesce pass".to_owned(),
        ));
    }
    Ok(GuestClientOutcome {
        mounts,
        snapshot,
        snapshot_refused,
        backup_due,
        backup_phase,
        app_restarted,
    })
}

/// Step 4: `other`'s token names `target_vmid`; refused with 403 and no Proxmox call.
pub async fn cross_guest(
    n: &mut Narrator,
    sim: &SimEndpoint,
    other: &GuestBootstrap,
    target_vmid: u32,
) -> Result<u16, DemoError> {
    // The agent's own reconcile keeps reading the guest's status; what must not appear is
    // a snapshot call or any change for it.
    let touches = |requests: &[stack::SimRequest]| {
        let needle = format!("/{target_vmid}/");
        requests
            .iter()
            .filter(|r| {
                r.path.contains(&needle) && (r.method != "GET" || r.path.contains("snapshot"))
            })
            .count()
    };
    let before = touches(&stack::sim_requests(sim).await?);
    let client = pinned_client(other)?;
    let (status, body) = call(
        &client,
        other,
        reqwest::Method::POST,
        "/v1/snapshot",
        Some(json!({ "vmid": target_vmid })),
    )
    .await?;
    n.detail(format!(
        "POST /v1/snapshot {{\"vmid\": {target_vmid}}} with bravo's token → {status}"
    ));
    if status != 403 {
        return Err(DemoError::Check(format!(
            "another guest's token was not refused: {status} {body}"
        )));
    }
    let after = touches(&stack::sim_requests(sim).await?);
    if after != before {
        return Err(DemoError::Check(format!(
            "the simulator saw {} call(s) for vmid {target_vmid} after the refused request",
            after - before
        )));
    }
    n.detail(format!(
        "simulator log: no snapshot or change for vmid {target_vmid} after the refusal"
    ));
    Ok(status)
}
