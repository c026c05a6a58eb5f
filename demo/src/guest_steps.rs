//! Steps 3 and 4 of the demo: what a controller inside a guest sees of the agent's local
//! API, through the bootstrap provisioning pushed into the guest via the helper
//! (`pct push` to `/etc/bosun-bootstrap/bootstrap.json`). The simulator has no real guests,
//! so the demo reads the pushed file from the simulated guest's files and gives the reference
//! client a copy under `demo-out/guests/<vmid>/`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use bosun_proto::helper::GUEST_BOOTSTRAP_PATH;

use super::sim::{self, SimEndpoint};
use super::stack;
use super::{DemoError, Narrator};

/// What step 3 saw.
#[derive(Debug, Clone, Default)]
pub struct GuestClientOutcome {
    /// Mounts `GET /v1/storage` listed.
    pub mounts: usize,
    /// The snapshot `POST /v1/snapshot` took.
    pub snapshot: String,
    /// The snapshots `GET /v1/snapshot` listed afterwards.
    pub snapshots_listed: Vec<String>,
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
    /// The copy the reference client reads (the guest's file, taken from the simulator).
    pub path: PathBuf,
    /// Mode and owner of the file inside the guest, as `pct push` left it.
    pub mode: u32,
    /// Owner uid:gid inside the guest.
    pub owner: (u32, u32),
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

/// Waits until `vmid`'s bootstrap has been pushed into the guest, then reads it and leaves
/// a 0600 copy under `out/guests/<vmid>/` for the reference client.
pub async fn bootstrap(
    sim: &SimEndpoint,
    out: &Path,
    vmid: u32,
) -> Result<GuestBootstrap, DemoError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let file = loop {
        if let Some(file) = sim::sim_guest_file(sim, vmid, GUEST_BOOTSTRAP_PATH).await? {
            break file;
        }
        if Instant::now() > deadline {
            return Err(DemoError::Timeout {
                what: format!("{GUEST_BOOTSTRAP_PATH} in guest {vmid}"),
                after: Duration::from_secs(30),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    if file.kind != "file" {
        return Err(DemoError::Check(format!(
            "{GUEST_BOOTSTRAP_PATH} in guest {vmid} is a {}, not a file",
            file.kind
        )));
    }
    let content = file.content()?;
    let path = out
        .join("guests")
        .join(vmid.to_string())
        .join(GUEST_BOOTSTRAP_PATH.trim_start_matches('/'));
    let artifact = |source| DemoError::Artifact {
        path: path.clone(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(artifact)?;
    }
    {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut copy = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .map_err(artifact)?;
        copy.write_all(&content).map_err(artifact)?;
    }
    let doc: Value = serde_json::from_slice(&content).map_err(|e| {
        DemoError::Check(format!(
            "{GUEST_BOOTSTRAP_PATH} in guest {vmid} is not JSON: {e}"
        ))
    })?;
    Ok(GuestBootstrap {
        url: field(&doc, "/local_api/url", &path)?,
        fingerprint: field(&doc, "/local_api/fingerprint", &path)?,
        token: field(&doc, "/local_api/token", &path)?,
        mode: file.mode,
        owner: (file.uid, file.gid),
        path,
    })
}

fn pinned_client(boot: &GuestBootstrap) -> Result<reqwest::Client, DemoError> {
    reqwest::Client::builder()
        .use_preconfigured_tls(bosunctl::tls::pinned(&boot.fingerprint)?)
        .redirect(reqwest::redirect::Policy::none())
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

/// `method path` with `body` on the local API as the guest of `boot`; gives the status and
/// the answer, whatever the status.
pub(super) async fn send(
    boot: &GuestBootstrap,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Result<(u16, Value), DemoError> {
    call(&pinned_client(boot)?, boot, method, path, body).await
}

/// `GET path` on the local API as the guest of `boot`, expecting a 2xx answer.
pub(super) async fn get(boot: &GuestBootstrap, path: &str) -> Result<Value, DemoError> {
    let client = pinned_client(boot)?;
    let answer = call(&client, boot, reqwest::Method::GET, path, None).await?;
    expect_ok(&format!("GET {path}"), answer)
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
        "{GUEST_BOOTSTRAP_PATH} in the guest: mode {:04o}, owner {}:{} (pct push); copy at {}",
        boot.mode,
        boot.owner.0,
        boot.owner.1,
        boot.path.display()
    ));
    if boot.mode != 0o600 || boot.owner != (0, 0) {
        return Err(DemoError::Check(format!(
            "the bootstrap must be 0600 and owned by the guest's root, found {:04o} {}:{}",
            boot.mode, boot.owner.0, boot.owner.1
        )));
    }
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
    let taken = expect_ok(
        "POST /v1/snapshot",
        call(
            &client,
            boot,
            reqwest::Method::POST,
            "/v1/snapshot",
            Some(json!({ "description": "before deploy (demo)" })),
        )
        .await?,
    )?;
    let snapshot = taken["name"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| DemoError::Check(format!("POST /v1/snapshot named no snapshot: {taken}")))?;
    n.detail(format!("POST /v1/snapshot → {snapshot}"));
    let listed = expect_ok(
        "GET /v1/snapshot",
        call(&client, boot, reqwest::Method::GET, "/v1/snapshot", None).await?,
    )?;
    let snapshots_listed: Vec<String> = listed["snapshots"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str().map(str::to_owned))
        .collect();
    n.detail(format!(
        "GET /v1/snapshot → {}",
        snapshots_listed.join(", ")
    ));
    if !snapshots_listed.contains(&snapshot) {
        return Err(DemoError::Check(format!(
            "GET /v1/snapshot does not list {snapshot}: {listed}"
        )));
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
        snapshots_listed,
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
    let touches = |requests: &[sim::SimRequest]| {
        let needle = format!("/{target_vmid}/");
        requests
            .iter()
            .filter(|r| {
                r.path.contains(&needle) && (r.method != "GET" || r.path.contains("snapshot"))
            })
            .count()
    };
    let before = touches(&sim::sim_requests(sim).await?);
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
    let after = touches(&sim::sim_requests(sim).await?);
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
