//! The customer's app (decision 0107, `docs/operator-guide.md` §14): the customer's SSH key
//! reaches their guest only through the operator's signed plan. The operator signs alpha's
//! customer key into the plan's `guest_access`; the agent delivers alpha a new bootstrap that
//! carries it; alpha's controller, started as the controller image starts it, writes it where
//! the golden image's sshd reads it and reads the customer's own apps file, the Compose
//! project's containers the customer listed after deploying over SSH.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use uuid::Uuid;

use super::backup_tiers::{set_desired, sign_plan};
use super::guest_steps;
use super::scenario::write_json;
use super::sim::{self, SimEndpoint};
use super::stack;
use super::{DemoError, Narrator};
use bosun_proto::helper::GUEST_BOOTSTRAP_PATH;
use bosunctl::client::HubClient;
use bosunctl::status::FleetStatus;

/// What the step established.
#[derive(Debug, Clone, Default)]
pub struct CustomerAppOutcome {
    /// The customer's key as the plan signs it (`<algorithm> <base64>`).
    pub key: String,
    /// The keys alpha's new bootstrap carries.
    pub bootstrap_keys: Vec<String>,
    /// What the controller wrote to the sshd's keys file.
    pub written: String,
    /// The keys file's mode.
    pub mode: u32,
}

fn artifact(path: &Path) -> impl FnOnce(std::io::Error) -> DemoError + '_ {
    move |source| DemoError::Artifact {
        path: path.to_owned(),
        source,
    }
}

/// The customer's key pair under `out/customer/` (made once); gives the public key as the
/// plan signs it, without its comment.
async fn customer_key(out: &Path) -> Result<String, DemoError> {
    let dir = out.join("customer");
    std::fs::create_dir_all(&dir).map_err(artifact(&dir))?;
    let private = dir.join("id_ed25519");
    if !private.exists() {
        let private_arg = private.display().to_string();
        stack::run_captured(
            Path::new("ssh-keygen"),
            &[
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "shop-owner@laptop",
                "-f",
                &private_arg,
            ],
            &[],
            None,
        )
        .await?;
    }
    let public = dir.join("id_ed25519.pub");
    let text = std::fs::read_to_string(&public).map_err(artifact(&public))?;
    let mut words = text.split_whitespace();
    match (words.next(), words.next()) {
        (Some(algorithm), Some(blob)) => Ok(format!("{algorithm} {blob}")),
        _ => Err(DemoError::Check(format!(
            "{} is not an OpenSSH public key",
            public.display()
        ))),
    }
}

/// The keys the bootstrap pushed into guest `vmid` carries, once it carries `key`.
async fn bootstrap_keys(sim: &SimEndpoint, vmid: u32, key: &str) -> Result<Vec<String>, DemoError> {
    let deadline = Instant::now() + super::scenario::CONVERGE;
    loop {
        if let Some(file) = sim::sim_guest_file(sim, vmid, GUEST_BOOTSTRAP_PATH).await? {
            let doc: Value = serde_json::from_slice(&file.content()?).map_err(|e| {
                DemoError::Check(format!("{GUEST_BOOTSTRAP_PATH} in guest {vmid}: {e}"))
            })?;
            let keys: Vec<String> = doc["ssh_authorized_keys"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect();
            if keys.iter().any(|k| k == key) {
                return Ok(keys);
            }
        }
        if Instant::now() > deadline {
            return Err(DemoError::Timeout {
                what: format!("guest {vmid}'s bootstrap carrying the customer's key"),
                after: super::scenario::CONVERGE,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The step.
pub(super) async fn customer_app(
    n: &mut Narrator,
    client: &HubClient,
    (bins, out): (&Path, &Path),
    sim: &SimEndpoint,
    (host_id, alpha, alpha_vmid): (Uuid, Uuid, u32),
) -> Result<CustomerAppOutcome, DemoError> {
    let host_arg = host_id.to_string();
    let key = customer_key(out).await?;
    n.detail("the customer sends their public key: customer/id_ed25519.pub (never a password)");

    // The operator adds it to the newest plan, for alpha and alpha's customer, and signs.
    let fleet = FleetStatus::fetch(client, 50).await?;
    let document = fleet
        .hosts
        .first()
        .and_then(|h| h.desired.as_ref())
        .map(serde_json::to_value)
        .transpose()
        .map_err(|e| DemoError::Check(format!("the host's desired state: {e}")))?
        .ok_or_else(|| DemoError::Check("the host has no desired state".to_owned()))?;
    let customer = document["guests"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|g| g["guest_id"] == json!(alpha))
        .and_then(|g| g["customer"]["customer_id"].as_str())
        .ok_or_else(|| DemoError::Check("guest alpha is not in desired state".to_owned()))?
        .to_owned();
    let (serial, mut plan) = super::tunnel::newest_plan(out)?;
    let serial = serial + 1;
    plan["serial"] = json!(serial);
    plan["guest_access"] =
        json!([{ "guest_id": alpha, "customer_id": customer, "ssh_keys": [key] }]);
    let desired = out.join("operator/desired-access.json");
    write_json(&desired, &document)?;
    let plan_name = format!("plan-{serial}.json");
    sign_plan(bins, out, &host_arg, (&plan_name, &plan), &desired).await?;
    n.detail(format!(
        "$ bosunctl policy sign-plan --host … -f id_ed25519 --plan {plan_name} --desired desired-access.json   (serial {serial}: \"guest_access\": guest alpha, {customer}, the customer's key)"
    ));
    set_desired(bins, out, &host_arg, &desired).await?;
    n.detail("$ bosunctl desired set --host … desired-access.json");

    let bootstrap_keys = bootstrap_keys(sim, alpha_vmid, &key).await?;
    n.detail(format!(
        "the agent delivers alpha a new bootstrap (and token): {GUEST_BOOTSTRAP_PATH} carries ssh_authorized_keys = [{}…]",
        &key[..key.len().min(40)]
    ));
    super::scenario::check(bootstrap_keys == [key.clone()], || {
        format!("alpha's bootstrap carries {bootstrap_keys:?}, not only the customer's key")
    })?;

    // The customer deploys over SSH (DOCKER_HOST=ssh://root@alpha docker compose up -d) and
    // copies their apps file; the controller starts as the image starts it.
    let boot = guest_steps::bootstrap(sim, out, alpha_vmid).await?;
    let guest_root = out.join("guests").join(alpha_vmid.to_string());
    let apps = guest_root.join("etc/bosun/apps.json");
    stack::create_dir(&guest_root.join("etc/bosun"))?;
    stack::write(&apps, include_str!("../../docs/examples/app/apps.json"))?;
    n.detail("the customer: $ DOCKER_HOST=ssh://root@alpha docker compose -f compose.yaml up -d; scp apps.json root@alpha:/etc/bosun/apps.json   (docs/examples/app/)");
    let keys_file = guest_root.join("etc/bosun/authorized_keys/root");
    let _ = std::fs::remove_file(&keys_file);
    let written = run_controller(bins, out, &boot.path, &apps, &keys_file).await?;
    let mode = {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::metadata(&keys_file)
            .map_err(artifact(&keys_file))?
            .permissions()
            .mode()
            & 0o777
    };
    n.detail(format!(
        "alpha's controller (bosun-guest run, BOSUN_AUTHORIZED_KEYS and BOSUN_CUSTOMER_APPS as in the image) wrote /etc/bosun/authorized_keys/root ({mode:04o}), which the golden image's sshd reads: keys only, no password; it reads the customer's apps before every backup"
    ));
    super::scenario::check(written == format!("{key}\n") && mode == 0o600, || {
        format!("the keys file holds {written:?} ({mode:04o})")
    })?;
    Ok(CustomerAppOutcome {
        key,
        bootstrap_keys,
        written,
        mode,
    })
}

/// Starts `bosun-guest run` with the image's environment (the bootstrap, the customer's apps,
/// the keys file) and `docker` a stand-in that only logs (the simulated guest runs no Docker);
/// gives the keys file once written, and stops the controller.
async fn run_controller(
    bins: &Path,
    out: &Path,
    bootstrap: &Path,
    apps: &Path,
    keys_file: &Path,
) -> Result<String, DemoError> {
    let stand_in = out.join("customer/bin");
    stack::create_dir(&stand_in)?;
    let docker = stand_in.join("docker");
    stack::write(
        &docker,
        &format!(
            "#!/bin/sh\necho \"docker $*\" >> '{}'\n",
            out.join("customer/docker.log").display()
        ),
    )?;
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&docker, std::fs::Permissions::from_mode(0o755))
            .map_err(artifact(&docker))?;
    }
    let state: PathBuf = out.join("customer/controller");
    stack::create_dir(&state)?;
    let program = stack::program(bins, "bosun-guest")?;
    let mut child = tokio::process::Command::new(&program)
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", stand_in.display()))
        .env("BOSUN_BOOTSTRAP", bootstrap)
        .env("BOSUN_CUSTOMER_APPS", apps)
        .env("BOSUN_AUTHORIZED_KEYS", keys_file)
        .arg("--marker")
        .arg(state.join("quiesce.marker"))
        .arg("--checksums")
        .arg(state.join("restore-check.sha256"))
        .arg("--restore-check")
        .arg(state.join("restore-check"))
        .arg("run")
        .arg("--state")
        .arg(state.join("controller.digest"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| DemoError::Spawn { program, source })?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let written = loop {
        if let Ok(text) = std::fs::read_to_string(keys_file) {
            break text;
        }
        if Instant::now() > deadline {
            let _ = child.start_kill();
            return Err(DemoError::Timeout {
                what: format!("{} written by the controller", keys_file.display()),
                after: Duration::from_secs(20),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let _ = child.start_kill();
    let _ = child.wait().await;
    Ok(written)
}
