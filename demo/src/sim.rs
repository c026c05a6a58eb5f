//! The simulated Proxmox VE node: `bosun-pvesim` started as a child, the agent's own Proxmox
//! client pointed at it, and the simulator's admin endpoint (`/_sim`, the bearer token from
//! `endpoint.json`) for what the demo shows around Bosun: the request log, root's `pct` on the
//! node, a guest's files and the remote servers the node reaches.

use std::path::{Path, PathBuf};
use std::time::Duration;

use secrecy::{ExposeSecret as _, SecretString};
use serde::Deserialize;
use serde_json::Value;

use super::DemoError;
use super::children::{Children, Site, wait_for_json};
use super::stack::{program, write};

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
    /// SHA-256 of its bytes (its file is `<data>/dump/<name>`).
    pub golden_sha256: String,
    /// The seeded VM golden archive (`vzdump-qemu-…vma.zst`, config `vm_golden`).
    #[serde(default)]
    pub vm_golden_volid: Option<String>,
    /// SHA-256 of its bytes (its file beside the container's).
    #[serde(default)]
    pub vm_golden_sha256: Option<String>,
    /// `https://127.0.0.1:PORT/_sim`.
    pub admin_url: String,
    /// Bearer token of the admin endpoint.
    admin_token: SecretString,
    /// The API tokens.
    pub tokens: SimTokens,
    /// The simulator's data directory (`endpoint.json`, `dump/`).
    #[serde(skip)]
    pub data: PathBuf,
    /// Where its backup archives are files (`dump/` is `local`'s dump directory).
    #[serde(skip)]
    pub archives: PathBuf,
}

impl SimEndpoint {
    /// The file of the seeded golden archive.
    pub fn golden_file(&self) -> PathBuf {
        self.data
            .join("dump")
            .join(self.golden_volid.rsplit('/').next().unwrap_or_default())
    }

    /// The file of the seeded VM golden archive, when the node holds one.
    pub fn vm_golden_file(&self) -> Option<PathBuf> {
        let volid = self.vm_golden_volid.as_deref()?;
        Some(
            self.data
                .join("dump")
                .join(volid.rsplit('/').next().unwrap_or_default()),
        )
    }
}

/// The simulator's tokens.
#[derive(Debug, Clone, Deserialize)]
pub struct SimTokens {
    /// The privilege-separated `BosunAgent` token.
    pub agent: SimToken,
    /// `root@pam!bosun-sim`: the administrator's token `pve setup` runs with.
    pub root: SimToken,
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
    /// Decoded query and body parameters, in order.
    #[serde(default)]
    pub params: Vec<(String, String)>,
}

impl SimRequest {
    /// The value of the parameter `key`.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A container created on the node (`POST /nodes/{node}/lxc`): a restore when it names
    /// an archive (`ostemplate` with `restore=1`), a new guest otherwise.
    pub fn creates_container(&self) -> bool {
        self.method == "POST" && self.path.starts_with("/nodes/") && self.path.ends_with("/lxc")
    }
}

/// Starts `bosun-pvesim` for `site` on a free loopback port (data in `out/pvesim[-site]`, log
/// in `logs/pvesim[-site].log`); gives its endpoint.
pub async fn start_sim(
    children: &mut Children,
    bins: &Path,
    out: &Path,
    site: Site,
    time_scale: f64,
) -> Result<SimEndpoint, DemoError> {
    let name = site.name("pvesim");
    let data = out.join(&name);
    let config = out.join(format!("{name}.toml"));
    // Backup archives are files the helper hashes: beneath a directory of the system's
    // temporary directory the helper accepts as a backup root (removed with its prefix).
    let archives = archive_dir(site);
    if archives.exists() {
        std::fs::remove_dir_all(&archives).map_err(|source| DemoError::Artifact {
            path: archives.clone(),
            source,
        })?;
    }
    std::fs::create_dir_all(&archives).map_err(|source| DemoError::Artifact {
        path: archives.clone(),
        source,
    })?;
    write(
        &config,
        &format!(
            "time_scale = {time_scale}\nauth_failure_delay = 3000\narchive_files = true\narchive_dir = {:?}\nvm_golden = {}\n",
            archives.display().to_string(),
            // The main walk's node also holds a VM golden base (its VM step); the host-loss
            // walk's boxes hold none.
            site == Site::ONLY
        ),
    )?;
    let data_arg = data.display().to_string();
    let config_arg = config.display().to_string();
    children.spawn(
        &format!("bosun-{name}"),
        &program(bins, "bosun-pvesim")?,
        &[
            "--listen",
            "127.0.0.1:0",
            "--data",
            &data_arg,
            "--config",
            &config_arg,
        ],
        &out.join(format!("logs/{name}.log")),
        None,
    )?;
    let mut endpoint: SimEndpoint = wait_for_json(
        &data.join("endpoint.json"),
        Duration::from_secs(20),
        children,
    )
    .await?;
    endpoint.data = data;
    endpoint.archives = archives;
    Ok(endpoint)
}

/// Where `site`'s simulator writes backup archives: beside the helper's prefix
/// (`helper::prefix_of`), so it is removed with it.
pub fn archive_dir(site: Site) -> PathBuf {
    let mut name = super::helper::prefix_of(site).into_os_string();
    name.push("-archives");
    PathBuf::from(name)
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
        .use_preconfigured_tls(bosunctl::tls::pinned(&sim.fingerprint)?)
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
    sim_admin_put(
        sim,
        &format!("remotes/{server}"),
        spec,
        "PUT /_sim/remotes/{server}",
    )
    .await
}

/// `PUT /_sim/{path}` with `body` as JSON; fails unless the simulator answers 2xx.
async fn sim_admin_put(
    sim: &SimEndpoint,
    path: &str,
    body: &Value,
    what: &'static str,
) -> Result<(), DemoError> {
    sim_admin_client(sim)?
        .put(format!("{}/{path}", sim.admin_url))
        .bearer_auth(sim.admin_token.expose_secret())
        .json(body)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|source| DemoError::Http { what, source })?;
    Ok(())
}

/// Fixes the simulated node's load (`POST /_sim/node/load`, a `NodeLoad` as JSON: `cpu` a
/// share, `memory_used` and `rootfs_used` bytes); a field left out is the simulator's own.
pub async fn sim_node_load(sim: &SimEndpoint, load: &Value) -> Result<(), DemoError> {
    let what = "POST /_sim/node/load";
    sim_admin_client(sim)?
        .post(format!("{}/node/load", sim.admin_url))
        .bearer_auth(sim.admin_token.expose_secret())
        .json(load)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|source| DemoError::Http { what, source })?;
    Ok(())
}

/// `POST` of `body` to the simulator's admin endpoint `path` (below `/_sim`).
pub async fn sim_post(
    sim: &SimEndpoint,
    what: &'static str,
    path: &str,
    body: &Value,
) -> Result<(), DemoError> {
    sim_admin_client(sim)?
        .post(format!("{}/{path}", sim.admin_url))
        .bearer_auth(sim.admin_token.expose_secret())
        .json(body)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|source| DemoError::Http { what, source })?;
    Ok(())
}

/// `POST` of `body` to the simulator's admin endpoint `path` (below `/_sim`); gives its JSON
/// answer.
pub async fn sim_post_json(
    sim: &SimEndpoint,
    what: &'static str,
    path: &str,
    body: &Value,
) -> Result<Value, DemoError> {
    sim_admin_client(sim)?
        .post(format!("{}/{path}", sim.admin_url))
        .bearer_auth(sim.admin_token.expose_secret())
        .json(body)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|source| DemoError::Http { what, source })?
        .json()
        .await
        .map_err(|source| DemoError::Http { what, source })
}

/// Everything the remote `server` holds, as the simulator exports it to move it to another
/// node (`GET /_sim/remotes/{server}/store`: its declaration with the password, every backup
/// with its archive).
pub async fn sim_export_store(sim: &SimEndpoint, server: &str) -> Result<Value, DemoError> {
    let what = "GET /_sim/remotes/{server}/store";
    sim_admin_client(sim)?
        .get(format!("{}/remotes/{server}/store", sim.admin_url))
        .bearer_auth(sim.admin_token.expose_secret())
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|source| DemoError::Http { what, source })?
        .json()
        .await
        .map_err(|source| DemoError::Http { what, source })
}

/// Makes `server` reachable from the node with exactly the backups of `store` (`PUT
/// /_sim/remotes/{server}/store`).
pub async fn sim_import_store(
    sim: &SimEndpoint,
    server: &str,
    store: &Value,
) -> Result<(), DemoError> {
    sim_admin_put(
        sim,
        &format!("remotes/{server}/store"),
        store,
        "PUT /_sim/remotes/{server}/store",
    )
    .await
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

/// Damages the archive `volid` as the simulator models it (`POST /_sim/archives/damage`;
/// `damage` as its admin API takes it, e.g. `{"corrupt_data": {"path": "/srv/…"}}`).
pub async fn sim_damage_archive(
    sim: &SimEndpoint,
    volid: &str,
    damage: &Value,
) -> Result<(), DemoError> {
    let what = "POST /_sim/archives/damage";
    sim_admin_client(sim)?
        .post(format!("{}/archives/damage", sim.admin_url))
        .bearer_auth(sim.admin_token.expose_secret())
        .json(&serde_json::json!({ "volid": volid, "damage": damage }))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|source| DemoError::Http { what, source })?;
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

/// Writes `content` as the file `path` (permission bits `mode`, octal) inside the simulated VM
/// `vmid`, as a program in the guest would (`PUT /_sim/qemu/{vmid}/file`).
pub async fn sim_vm_write_file(
    sim: &SimEndpoint,
    vmid: u32,
    (path, mode): (&str, &str),
    content: &[u8],
) -> Result<(), DemoError> {
    let what = "PUT /_sim/qemu/{vmid}/file";
    sim_admin_client(sim)?
        .put(format!("{}/qemu/{vmid}/file", sim.admin_url))
        .query(&[("path", path), ("mode", mode)])
        .bearer_auth(sim.admin_token.expose_secret())
        .body(content.to_vec())
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|source| DemoError::Http { what, source })?;
    Ok(())
}

/// How long each backup of VM `vmid` held its filesystems frozen through its guest agent,
/// oldest first (`GET /_sim/qemu/{vmid}/freezes`).
pub async fn sim_vm_freezes(sim: &SimEndpoint, vmid: u32) -> Result<Vec<Duration>, DemoError> {
    let what = "GET /_sim/qemu/{vmid}/freezes";
    let body: Value = sim_admin_client(sim)?
        .get(format!("{}/qemu/{vmid}/freezes", sim.admin_url))
        .bearer_auth(sim.admin_token.expose_secret())
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|source| DemoError::Http { what, source })?
        .json()
        .await
        .map_err(|source| DemoError::Http { what, source })?;
    Ok(body["freezes_us"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_u64)
        .map(Duration::from_micros)
        .collect())
}

/// The agent's own Proxmox client with the `BosunAgent` token, the certificate pinned (the
/// demo reads guest configs with it to show what provisioning did).
pub fn pve_client(sim: &SimEndpoint) -> Result<bosun_pve::PveClient, DemoError> {
    client_with(sim, &sim.tokens.agent)
}

/// Root's Proxmox client on the node (`root@pam`): what an administrator's `qm` does, behind
/// Bosun's back.
pub fn root_pve_client(sim: &SimEndpoint) -> Result<bosun_pve::PveClient, DemoError> {
    client_with(sim, &sim.tokens.root)
}

fn client_with(sim: &SimEndpoint, token: &SimToken) -> Result<bosun_pve::PveClient, DemoError> {
    use bosun_pve::{PveClient, PveConfig, RetryPolicy, TlsTrust};
    let config = PveConfig {
        base_url: sim
            .url
            .parse()
            .map_err(|err| DemoError::Check(format!("simulator url {}: {err}", sim.url)))?,
        node: sim
            .node
            .parse()
            .map_err(|err| DemoError::Check(format!("node name: {err}")))?,
        token_id: token.id.clone(),
        token_secret: token.secret.clone(),
        trust: TlsTrust::PinnedSha256(sim.fingerprint.clone()),
        policy: RetryPolicy::fast(),
    };
    PveClient::new(config).map_err(|source| DemoError::Pve {
        what: "building the client",
        source,
    })
}
