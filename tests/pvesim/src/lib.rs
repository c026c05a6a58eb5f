//! `bosun-pvesim`: a simulated Proxmox VE node for Bosun's development and tests.
//!
//! One node (`pve` by default) served over HTTPS on `/api2/json`, answering the calls Bosun's
//! agent makes with PVE's shapes: request checks in PVE's order (route → duplicate parameters
//! → authentication → schema permission → parameter validation → handler), API tokens with
//! privilege separation, asynchronous tasks with real UPIDs and logs, LXC guests with config
//! digests, pending values, snapshots and locks, vzdump archives and storage content.
//!
//! ```text
//!  reqwest/agent ──HTTPS──▶ server.rs (TLS, fault layer, envelope, auth, validation)
//!                                │
//!                                ▼
//!   handlers: access.rs lxc.rs lxc_config.rs restore.rs snapshot.rs vzdump.rs storage.rs
//!             storage_config.rs tasks.rs
//!                                │                         │
//!                                ▼                         ▼ spawn
//!                 state.rs (NodeState behind a Mutex) ◀── worker tasks (tasks.rs)
//! ```
//!
//! Outside `/api2`, the admin endpoint (`admin.rs`) serves the request log, fault injection,
//! a CT's files (`files.rs`), damaged archives (`damage.rs`) and root's CLI on the node (`cli.rs`: `pct`, `vzdump`, with the
//! programs `pct exec` models in `guest_exec.rs`), which the stand-in binaries
//! `bosun-pvesim-pct` and `bosun-pvesim-vzdump` (`stand_in.rs`) call for `bosun-helper`.
//!
//! Storages of type `pbs`, `nfs` and `cifs` reach remote servers the node pretends to reach
//! (`remotes.rs`): declared over the admin endpoint or [`SimHandle`], each reachable or not,
//! an NFS or CIFS server hanging or not (its mounts block or fail by their options,
//! `hung_mounts.rs`),
//! a PBS server with its fingerprint, datastores, password and the backups it keeps, which
//! `remote_store.rs` exports from one simulator and imports into another (a PBS that outlives
//! the node). A storage is activated as PVE activates it (`storage_config.rs`); backups and
//! tasks are stamped by a clock tests may fix (`clock.rs`).
//!
//! Beside the node, `cloudflared/` stands in for the tunnel the agent manages (cloudflared is
//! not installable here): the suites run it in process, the demo as `bosun-cloudflared-sim`.
//!
//! Tests start it with [`Simulator::start`] on a listener bound to `127.0.0.1:0` and read the
//! [`Endpoint`] (URL, certificate fingerprint, tokens) from the returned [`SimHandle`].

mod access;
mod access_admin;
mod acl;
mod admin;
mod api;
mod archive;
mod archive_files;
mod cli;
mod clock;
pub mod cloudflared;
mod cluster;
pub mod config;
mod damage;
mod extract_config;
mod files;
mod firewall;
mod guest_exec;
mod handle;
mod hardware;
mod hung_mounts;
mod lxc;
mod lxc_config;
mod lxc_params;
mod network;
mod node_load;
mod pbs_verify;
mod pct;
mod qemu;
mod qemu_admin;
mod qemu_agent;
mod qemu_disks;
mod qemu_handle;
mod qemu_resize;
mod qemu_restore;
mod qemu_routes;
mod qemu_snapshot;
mod remote_store;
mod remotes;
mod request;
mod restore;
mod routes;
mod schema;
pub(crate) mod seed;
mod server;
mod snapshot;
pub mod stand_in;
mod state;
mod storage;
mod storage_config;
mod storage_delete;
mod tasks;
mod tls;
mod unpack;
mod vzdump;
mod vzdump_qemu;

use serde::{Deserialize, Serialize};

pub use acl::{
    ALL_PRIVILEGES, AclError, BOSUN_AGENT_PRIVILEGES, BOSUN_GUEST_PRIVILEGES, BOSUN_POOL,
};
pub use cli::{CliFault, CliOutput};
pub use config::{EndpointFault, FaultConfig, PveVersion, SimConfig, StaleLock, TaskDurations};
pub use damage::{ArchiveDamage, damage_archive_remote};
pub use files::{GuestFile, fetch_guest_file};
pub use guest_exec::RESTART_COUNTS;
pub use handle::{SimHandle, Simulator};
pub use hardware::{
    DiskDegrade, GuestLoad, Hardware, SimAttribute, SimDisk, SimThinPool, SimZfsPool,
};
pub use lxc::dhcp_address;
pub use node_load::NodeLoad;
pub use pbs_verify::{ChunkDamage, VERIFY_FAILED};
pub use remote_store::{
    RemoteStore, StoredArchive, StoredBackup, StoredNamespace, export_remote_store,
    import_remote_store,
};
pub use remotes::{RemoteInfo, RemoteSpec};
pub use routes::{Perm, RouteSpec, routes};
pub use schema::{ParamKind, ParamSpec, PropSpec};
pub use seed::{DEBIAN_TEMPLATE, GOLDEN_ARCHIVE_BYTES, SIM_GUEST_STAMP_KEY, golden_sha256};

/// How to reach a running simulator; the binary also writes it as `DIR/endpoint.json`.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Endpoint {
    /// `https://127.0.0.1:PORT/api2/json`.
    pub url: String,
    /// SHA-256 of the certificate (DER), uppercase colon-separated hex as PVE shows it.
    pub fingerprint: String,
    pub node: String,
    pub tokens: Tokens,
    /// The seeded golden archive, `local:backup/vzdump-lxc-9000-YYYY_MM_DD-HH_MM_SS.tar.zst`.
    pub golden_volid: String,
    /// SHA-256 of the golden archive's bytes ([`GOLDEN_ARCHIVE_BYTES`]); with a data directory
    /// the file is `DIR/dump/<name>`, where a helper configured with that `dump_root` hashes it.
    #[serde(default)]
    pub golden_sha256: String,
    /// The VM golden archive `SimConfig::vm_golden` seeds,
    /// `local:backup/vzdump-qemu-9001-YYYY_MM_DD-HH_MM_SS.vma.zst`; none without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_golden_volid: Option<String>,
    /// SHA-256 of its file's bytes (`DIR/dump/<name>` with a data directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_golden_sha256: Option<String>,
    /// The admin endpoint outside `/api2`, `https://127.0.0.1:PORT/_sim`.
    pub admin_url: String,
    /// Bearer token for the admin endpoint.
    pub admin_token: String,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.url)
            .field("fingerprint", &self.fingerprint)
            .field("node", &self.node)
            .field("tokens", &self.tokens)
            .field("golden_volid", &self.golden_volid)
            .field("golden_sha256", &self.golden_sha256)
            .field("vm_golden_volid", &self.vm_golden_volid)
            .field("vm_golden_sha256", &self.vm_golden_sha256)
            .field("admin_url", &self.admin_url)
            .field("admin_token", &"<redacted>")
            .finish()
    }
}

/// The two seeded API tokens.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Tokens {
    /// `bosun@pve!agent`: privilege-separated, role `BosunAgent` on `/`.
    pub agent: TokenCredential,
    /// `root@pam!bosun-sim`: `privsep = 0`, every privilege, but never root.
    pub root: TokenCredential,
}

/// An API token id and its secret.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TokenCredential {
    /// `user@realm!tokenid`.
    pub id: String,
    /// The UUID secret.
    pub secret: String,
}

impl TokenCredential {
    /// The `Authorization` header value: `PVEAPIToken=<id>=<secret>`.
    pub fn header_value(&self) -> String {
        format!("PVEAPIToken={}={}", self.id, self.secret)
    }
}

impl std::fmt::Debug for TokenCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCredential")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// One request below `/api2`, as the simulator saw it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct LoggedRequest {
    pub method: String,
    /// Below `/api2/json`, percent-decoded, e.g. `/nodes/pve/lxc/100/config`.
    pub path: String,
    /// Decoded query and body parameters, in order.
    pub params: Vec<(String, String)>,
    /// The token id if the request carried a valid token.
    pub token_id: Option<String>,
    /// HTTP status sent; `0` when the connection was dropped without a response.
    pub status: u16,
}

/// Why the simulator could not start.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("failed to generate the TLS certificate")]
    GenerateCertificate(#[source] rcgen::Error),
    #[error("failed to read or write {path}")]
    DataFile {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the stored certificate in {path} is not usable")]
    StoredCertificate { path: std::path::PathBuf },
    #[error("failed to build the TLS server configuration")]
    TlsConfig(#[source] rustls::Error),
    #[error("failed to use the listener")]
    Listener(#[source] std::io::Error),
    #[error("invalid simulator configuration: {reason}")]
    Config { reason: String },
    #[error("cannot add a backup of {vmid} to storage '{storage}': {reason}")]
    AddBackup {
        storage: String,
        vmid: u32,
        reason: String,
    },
    #[error("cannot damage '{volid}': no backup archive or template has that volid")]
    DamageArchive { volid: String },
    #[error("cannot corrupt '{path}' in '{volid}': the archive holds no regular file there")]
    DamageData { volid: String, path: String },
    #[error("cannot export remote server '{server}': no test declared it and no storage used it")]
    ExportRemote { server: String },
    #[error("cannot import the store of remote server '{server}': {reason}")]
    ImportRemote { server: String, reason: String },
    #[error("cannot migrate CT {vmid}: {reason}")]
    Migrate { vmid: u32, reason: String },
}
