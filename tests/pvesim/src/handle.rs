//! Starting the simulator and the handle tests use to inspect and steer it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use parking_lot::Mutex;
use tokio::task::JoinHandle;

use crate::cli::{CliFault, CliOutput};
use crate::config::{FaultConfig, SimConfig};
use crate::damage::ArchiveDamage;
use crate::files::GuestFile;
use crate::remote_store::RemoteStore;
use crate::remotes::{RemoteInfo, RemoteSpec};
use crate::server::{App, make_service, router};
use crate::state::Shared;
use crate::{Endpoint, LoggedRequest, SimError, TokenCredential, seed, tls};

/// Entry point: `Simulator::start(config, listener)`.
#[derive(Debug)]
pub struct Simulator;

/// A running simulator. Cloning shares it; [`SimHandle::shutdown`] stops it.
#[derive(Clone, Debug)]
pub struct SimHandle {
    pub(crate) shared: Arc<Shared>,
    endpoint: Endpoint,
    cert_pem: String,
    server: axum_server::Handle<std::net::SocketAddr>,
    join: Arc<Mutex<Option<JoinHandle<std::io::Result<()>>>>>,
    /// The temporary directory archive files are written to, removed with the last handle.
    _scratch: Arc<Option<tempfile::TempDir>>,
}

impl Simulator {
    /// Serves on an already-bound listener (tests bind `127.0.0.1:0`).
    pub async fn start(
        config: SimConfig,
        listener: std::net::TcpListener,
    ) -> Result<SimHandle, SimError> {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            // Another thread may win the race; either way a provider is installed.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        if !crate::schema::node_name_ok(&config.node) {
            return Err(SimError::Config {
                reason: format!("node name '{}' is not valid", config.node),
            });
        }
        if !config.time_scale.is_finite() || config.time_scale < 0.0 {
            return Err(SimError::Config {
                reason: "time_scale must be a finite number, zero or positive".to_owned(),
            });
        }
        let cert = tls::load_or_create(config.data_dir.as_deref(), &config.node)?;
        let fingerprint = cert.fingerprint()?;
        let tls_config = RustlsConfig::from_config(cert.server_config()?);
        let secrets = seed::Secrets::load_or_create(config.data_dir.as_deref())?;
        let (mut state, tokens, golden_volid) =
            seed::initial_state(config.faults.clone(), &secrets, config.pve_version)?;
        if let Some(dir) = &config.data_dir {
            seed::write_golden_file(dir, &golden_volid)?;
        }
        let vm_golden_volid = if config.vm_golden {
            let volume = crate::qemu_restore::golden_vm_volume(
                &jiff::Zoned::now(),
                crate::qemu_restore::golden_vm_conf(),
                crate::qemu_restore::golden_vm_files(),
            );
            let volid = volume.volid.clone();
            state.push_volume(volume);
            if let Some(dir) = &config.data_dir {
                seed::write_vm_golden_file(dir, &volid)?;
            }
            Some(volid)
        } else {
            None
        };
        let named = config
            .archive_dir
            .clone()
            .or_else(|| config.data_dir.clone());
        let scratch = match (&named, config.archive_files) {
            (None, true) => Some(tempfile::tempdir().map_err(|source| SimError::Config {
                reason: format!("making a directory for archive files: {source}"),
            })?),
            _ => None,
        };
        if config.archive_files {
            state.files_root = named.or_else(|| scratch.as_ref().map(|d| d.path().to_owned()));
        }
        state.apply_stale_locks();
        let addr = listener.local_addr().map_err(SimError::Listener)?;
        listener.set_nonblocking(true).map_err(SimError::Listener)?;
        let host = match addr.ip() {
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            std::net::IpAddr::V4(ip) => ip.to_string(),
        };
        let base = format!("https://{host}:{}", addr.port());
        let admin_token = secrets.admin.clone();
        let endpoint = Endpoint {
            url: format!("{base}/api2/json"),
            fingerprint,
            node: config.node.clone(),
            tokens,
            golden_volid,
            golden_sha256: seed::golden_sha256(),
            vm_golden_sha256: vm_golden_volid.as_ref().map(|_| seed::vm_golden_sha256()),
            vm_golden_volid,
            admin_url: format!("{base}/_sim"),
            admin_token: admin_token.clone(),
        };
        let shared = Arc::new(Shared::new(config, endpoint.fingerprint.clone(), state));
        let app = App {
            shared: shared.clone(),
            admin_token: admin_token.into(),
        };
        let server_handle = axum_server::Handle::new();
        let server = axum_server::from_tcp_rustls(listener, tls_config)
            .map_err(SimError::Listener)?
            .handle(server_handle.clone());
        let make = make_service(router(app));
        let join = tokio::spawn(async move { server.serve(make).await });
        tracing::info!(url = %endpoint.url, node = %endpoint.node, "simulator listening");
        Ok(SimHandle {
            shared,
            endpoint,
            cert_pem: cert.cert_pem,
            server: server_handle,
            join: Arc::new(Mutex::new(Some(join))),
            _scratch: Arc::new(scratch),
        })
    }
}

impl SimHandle {
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The server certificate, PEM (for clients that pin a CA instead of a fingerprint).
    pub fn certificate_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Every `/api2` request so far, in order.
    pub fn requests(&self) -> Vec<LoggedRequest> {
        self.shared.state.lock().requests.clone()
    }

    pub fn clear_requests(&self) {
        self.shared.state.lock().requests.clear();
    }

    /// Replaces the injected faults (and applies its stale locks).
    pub fn set_faults(&self, faults: FaultConfig) {
        let mut st = self.shared.state.lock();
        st.faults = faults;
        st.apply_stale_locks();
    }

    pub fn faults(&self) -> FaultConfig {
        self.shared.state.lock().faults.clone()
    }

    /// The current config of a CT (raw values as in the config file), without pending values.
    pub fn guest_config(&self, vmid: u32) -> Option<BTreeMap<String, String>> {
        self.shared
            .state
            .lock()
            .guests
            .get(&vmid)
            .map(|g| g.conf.clone())
    }

    /// The firewall options a CT's firewall file sets (`enable`, `ipfilter`, …); `None` when
    /// the CT does not exist.
    pub fn guest_firewall(&self, vmid: u32) -> Option<BTreeMap<String, String>> {
        self.shared
            .state
            .lock()
            .guests
            .get(&vmid)
            .map(|g| g.firewall.clone())
    }

    /// Sets a CT's firewall options as an operator would on the node (`pve-firewall`'s file),
    /// without the API; `false` when the CT does not exist.
    pub fn set_guest_firewall(&self, vmid: u32, options: BTreeMap<String, String>) -> bool {
        let mut st = self.shared.state.lock();
        let Some(guest) = st.guests.get_mut(&vmid) else {
            return false;
        };
        guest.firewall = options;
        true
    }

    /// Whether what CT `vmid` sends from `source` on its `net0` leaves for the bridge, as
    /// pve-firewall filters it (`crate::firewall::passes_ipfilter`: with the datacenter's and
    /// the guest's firewall on and `ipfilter=1`, only `net0`'s static addresses pass); `None`
    /// when the CT or its `net0` does not exist. A guest's root may set any address on its
    /// interface ([`SimHandle::set_guest_own_address`]); this is what reaches others from it.
    pub fn guest_may_send_from(&self, vmid: u32, source: std::net::IpAddr) -> Option<bool> {
        let st = self.shared.state.lock();
        let guest = st.guests.get(&vmid)?;
        let net0 = guest.conf.get("net0")?;
        Some(crate::firewall::passes_ipfilter(
            st.datacenter_firewall,
            &guest.firewall,
            net0,
            source,
        ))
    }

    /// Turns the datacenter's firewall on or off (`Datacenter → Firewall → Options`).
    pub fn set_datacenter_firewall(&self, enable: bool) {
        self.shared.state.lock().datacenter_firewall = enable;
    }

    /// Pending values of a CT (`delete` lists pending deletions).
    pub fn guest_pending(&self, vmid: u32) -> Option<BTreeMap<String, String>> {
        self.shared.state.lock().guests.get(&vmid).map(|g| {
            let mut p = g.pending.clone();
            if !g.pending_delete.is_empty() {
                let list: Vec<&str> = g.pending_delete.iter().map(String::as_str).collect();
                p.insert("delete".to_owned(), list.join(","));
            }
            p
        })
    }

    /// Whether a CT exists and runs.
    pub fn guest_running(&self, vmid: u32) -> Option<bool> {
        self.shared
            .state
            .lock()
            .guests
            .get(&vmid)
            .map(crate::state::Guest::running)
    }

    /// Sets the address guest `vmid`'s root configured on its own interfaces in place of its
    /// DHCP lease or its static `ip=` (`None`: what Proxmox configured again), as a guest that
    /// names another's address would; `false` when the CT does not exist. Whether what it sends
    /// from there reaches anyone is [`SimHandle::guest_may_send_from`]'s to say.
    pub fn set_guest_own_address(&self, vmid: u32, address: Option<std::net::Ipv4Addr>) -> bool {
        let mut st = self.shared.state.lock();
        let Some(guest) = st.guests.get_mut(&vmid) else {
            return false;
        };
        guest.own_address = address;
        true
    }

    /// Sets how many bytes of files CT `vmid` holds (what its backups archive, about a quarter
    /// of it, and so how long PBS takes to verify them), as a guest that filled its disk would;
    /// `false` when the CT does not exist.
    pub fn set_guest_data(&self, vmid: u32, bytes: u64) -> bool {
        let mut st = self.shared.state.lock();
        let Some(guest) = st.guests.get_mut(&vmid) else {
            return false;
        };
        guest.data = Some(bytes);
        true
    }

    /// Stops a running CT as if its init had exited (no task, no lock); `false` when the CT
    /// does not exist.
    pub fn stop_guest(&self, vmid: u32) -> bool {
        let mut st = self.shared.state.lock();
        let Some(guest) = st.guests.get_mut(&vmid) else {
            return false;
        };
        if guest.running_since.take().is_some() {
            tracing::info!(vmid, "guest stopped: its init exited");
        }
        true
    }

    /// Makes the node one of the cluster `name`, with the other nodes `peers` (all online),
    /// as `pvecm add` would; the node's own guests stay where they are.
    pub fn join_cluster(&self, name: &str, peers: &[&str]) {
        let mut st = self.shared.state.lock();
        st.cluster = Some(crate::cluster::Cluster {
            name: name.to_owned(),
            peers: peers.iter().map(|p| (*p).to_owned()).collect(),
            guests: BTreeMap::new(),
        });
        tracing::info!(cluster = name, ?peers, "node joined a cluster");
    }

    /// Moves CT `vmid` to the cluster's node `to`, as `pct migrate` (in restart mode) would:
    /// it leaves this node's list with its config and tags, and the cluster lists it on `to`.
    /// Refused for a node outside the cluster, a CT this node does not hold or a locked one.
    pub fn migrate_guest(&self, vmid: u32, to: &str) -> Result<(), SimError> {
        let refuse = |reason: &str| SimError::Migrate {
            vmid,
            reason: reason.to_owned(),
        };
        let mut st = self.shared.state.lock();
        let crate::state::NodeState {
            cluster, guests, ..
        } = &mut *st;
        let cluster = cluster
            .as_mut()
            .ok_or_else(|| refuse("the node is not part of a cluster"))?;
        if !cluster.peers.iter().any(|p| p == to) {
            return Err(refuse(&format!("no node '{to}' in the cluster")));
        }
        let guest = guests
            .get(&vmid)
            .ok_or_else(|| refuse("this node holds no such CT"))?;
        if let Some(lock) = guest.conf.get("lock") {
            return Err(refuse(&format!("CT is locked ({lock})")));
        }
        let guest = guests.remove(&vmid).ok_or_else(|| refuse("gone"))?;
        cluster.guests.insert(
            vmid,
            crate::cluster::PeerGuest {
                node: to.to_owned(),
                guest,
            },
        );
        tracing::info!(vmid, to, "guest migrated to another node of the cluster");
        Ok(())
    }

    /// Brings CT `vmid` back from the cluster's other node that holds it.
    pub fn migrate_guest_back(&self, vmid: u32) -> Result<(), SimError> {
        let mut st = self.shared.state.lock();
        let peer = st
            .cluster
            .as_mut()
            .and_then(|c| c.guests.remove(&vmid))
            .ok_or_else(|| SimError::Migrate {
                vmid,
                reason: "no other node of the cluster holds it".to_owned(),
            })?;
        st.guests.insert(vmid, peer.guest);
        Ok(())
    }

    /// Vmids of all CTs.
    pub fn guest_ids(&self) -> Vec<u32> {
        self.shared.state.lock().guests.keys().copied().collect()
    }

    /// Snapshot names of a CT, sorted.
    pub fn snapshot_names(&self, vmid: u32) -> Vec<String> {
        self.shared
            .state
            .lock()
            .guests
            .get(&vmid)
            .map(|g| g.snapshots.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Writes or clears a CT's `lock:` (as a crash or `pct unlock` would).
    pub fn set_guest_lock(&self, vmid: u32, lock: Option<&str>) -> bool {
        let mut st = self.shared.state.lock();
        let Some(guest) = st.guests.get_mut(&vmid) else {
            return false;
        };
        match lock {
            Some(l) => guest.conf.insert("lock".to_owned(), l.to_owned()),
            None => guest.conf.remove("lock"),
        };
        true
    }

    /// Damages a backup archive or template: [`ArchiveDamage::Unreadable`] makes every restore
    /// from it fail while unpacking (it stays listed, with its size), [`ArchiveDamage::NoInit`]
    /// removes `/sbin/init` from its file tree so a CT restored from it does not start.
    pub fn damage_archive(&self, volid: &str, damage: ArchiveDamage) -> Result<(), SimError> {
        crate::damage::apply(&mut self.shared.state.lock(), volid, damage)
    }

    /// Adds a backup archive of `vmid` whose recorded config (`pct.conf`) is `conf`, named as
    /// vzdump would name it now; returns its volid. Lets tests restore archives the API
    /// cannot produce (raw `lxc.*` keys, bind mount points, privileged CTs).
    pub fn add_backup(
        &self,
        storage: &str,
        vmid: u32,
        conf: BTreeMap<String, String>,
    ) -> Result<String, SimError> {
        self.push_backup(
            storage,
            vmid,
            crate::state::Archive::new(conf, crate::files::debian_template()),
        )
    }

    /// Adds another golden archive (the seeded golden's config and files, so a guest restored
    /// from it bootstraps like one from the seeded golden) as a backup of `vmid` named as
    /// vzdump would name it now; returns its volid. Lets tests offer two golden bases.
    pub fn add_golden_backup(&self, storage: &str, vmid: u32) -> Result<String, SimError> {
        self.push_backup(
            storage,
            vmid,
            crate::state::Archive::new(seed::golden_conf(), seed::golden_files()),
        )
    }

    fn push_backup(
        &self,
        storage: &str,
        vmid: u32,
        archive: crate::state::Archive,
    ) -> Result<String, SimError> {
        let err = |reason: &str| SimError::AddBackup {
            storage: storage.to_owned(),
            vmid,
            reason: reason.to_owned(),
        };
        let mut st = self.shared.state.lock();
        let s = st
            .storages
            .get(storage)
            .ok_or_else(|| err("no such storage"))?;
        if !s.content.contains("backup") {
            return Err(err("storage has no 'backup' content"));
        }
        let now = self.shared.clock.now();
        let (volid, format, _) =
            crate::archive::archive_name(&st, storage, "zstd", vmid, &now, false)
                .ok_or_else(|| err("no free archive name"))?;
        let volume = crate::state::Volume {
            volid: volid.clone(),
            content: "backup".to_owned(),
            format,
            size: 64 << 20,
            ctime: now.timestamp().as_second(),
            vmid: Some(vmid),
            notes: None,
            protected: false,
            encrypted: None,
            archive: Some(archive),
        };
        st.push_volume(volume);
        Ok(volid)
    }

    /// Volids on a storage (every content type), in storage order.
    pub fn storage_volumes(&self, storage: &str) -> Vec<String> {
        self.shared
            .state
            .lock()
            .volumes(storage)
            .into_iter()
            .map(|v| v.volid)
            .collect()
    }

    /// The log lines of a task.
    pub fn task_log(&self, upid: &str) -> Option<Vec<String>> {
        self.shared
            .state
            .lock()
            .tasks
            .iter()
            .find(|t| t.upid == upid)
            .map(|t| t.log.lock().lines.clone())
    }

    /// The exit status of a finished task (`None` while running or unknown).
    pub fn task_exitstatus(&self, upid: &str) -> Option<String> {
        self.shared
            .state
            .lock()
            .tasks
            .iter()
            .find(|t| t.upid == upid)
            .and_then(|t| t.exitstatus.clone())
    }

    /// Waits until a task has finished (bounded by `timeout`); returns its exit status.
    pub async fn wait_task(&self, upid: &str, timeout: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(exit) = self.task_exitstatus(upid) {
                return Some(exit);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// One path of a CT's root filesystem (`None` when the CT or the path is missing).
    pub fn guest_file(&self, vmid: u32, path: &str) -> Option<GuestFile> {
        let path = crate::files::canonical(path).ok()?;
        self.shared
            .state
            .lock()
            .guests
            .get(&vmid)?
            .files
            .describe(&path)
    }

    /// Every path of a CT's root filesystem below `dir` (recursively).
    pub fn guest_paths(&self, vmid: u32, dir: &str) -> Vec<String> {
        let Ok(dir) = crate::files::canonical(dir) else {
            return Vec::new();
        };
        self.shared
            .state
            .lock()
            .guests
            .get(&vmid)
            .map(|g| g.files.below(&dir, usize::MAX))
            .unwrap_or_default()
    }

    /// One path of the root filesystem an archive or template volume holds.
    pub fn archive_file(&self, volid: &str, path: &str) -> Option<GuestFile> {
        let path = crate::files::canonical(path).ok()?;
        let st = self.shared.state.lock();
        st.find_volume(volid)?
            .archive
            .as_ref()?
            .files
            .describe(&path)
    }

    /// Replaces the failures injected into root's CLI.
    pub fn set_cli_faults(&self, faults: Vec<CliFault>) {
        self.shared.state.lock().cli_faults = faults;
    }

    /// Runs `pct` or `vzdump` as root on the node, as the stand-ins do over the admin
    /// endpoint; `input` is the file `pct push` sends. `Err` is a usage error.
    pub async fn cli(
        &self,
        program: &str,
        args: &[&str],
        input: Option<&[u8]>,
    ) -> Result<CliOutput, String> {
        let request = crate::cli::CliRequest {
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            input_hex: input.map(hex::encode),
        };
        crate::cli::run(&self.shared, program, &request).await
    }

    /// Adds a role (privileges must be PVE privilege names).
    pub fn add_role(&self, name: &str, privileges: &[&str]) -> Result<(), crate::AclError> {
        self.shared.state.lock().access.add_role(name, privileges)
    }

    /// Adds a user (`name@realm`).
    pub fn add_user(&self, userid: &str) {
        self.shared.state.lock().access.add_user(userid);
    }

    /// Creates an API token for an existing user and returns its credential.
    pub fn create_token(
        &self,
        user: &str,
        tokenid: &str,
        privsep: bool,
    ) -> Result<TokenCredential, crate::AclError> {
        let secret = uuid::Uuid::new_v4().to_string();
        let id = self
            .shared
            .state
            .lock()
            .access
            .add_token(user, tokenid, &secret, privsep)?;
        Ok(TokenCredential { id, secret })
    }

    /// Takes away everything Bosun's setup writes, as on a node nobody set up for Bosun yet:
    /// the user `bosun@pve` (with its tokens and every ACL entry naming either), the roles
    /// `BosunAgent` and `BosunGuest` (with the entries granting them) and the pool `bosun`
    /// (with the entries on it). The agent's seeded token stops working.
    pub fn remove_bosun_access(&self) {
        let mut st = self.shared.state.lock();
        st.access.remove_user("bosun@pve");
        st.access.remove_role("BosunAgent");
        st.access.remove_role("BosunGuest");
        st.access.remove_pool(crate::acl::BOSUN_POOL);
    }

    /// The role's privileges, or `None` when it does not exist.
    pub fn role_privileges(&self, role: &str) -> Option<Vec<String>> {
        self.shared
            .state
            .lock()
            .access
            .role_list()
            .into_iter()
            .find(|(name, _)| name == role)
            .map(|(_, privs)| privs.into_iter().collect())
    }

    /// Every ACL entry as `(path, user or token id, role, propagate)`.
    pub fn acl_entries(&self) -> Vec<(String, String, String, bool)> {
        self.shared
            .state
            .lock()
            .access
            .acl_list()
            .into_iter()
            .map(|e| (e.path, e.ugid, e.roleid, e.propagate))
            .collect()
    }

    /// Grants a role on an ACL path to a user or token id.
    pub fn grant(
        &self,
        path: &str,
        subject: &str,
        role: &str,
        propagate: bool,
    ) -> Result<(), crate::AclError> {
        self.shared
            .state
            .lock()
            .access
            .grant(path, subject, role, propagate)
    }

    /// Declares or replaces a remote server storages reach (reachable). A PBS server keeps
    /// the backups it already held.
    pub fn declare_remote(&self, server: &str, spec: RemoteSpec) {
        self.shared.state.lock().remotes.declare(server, spec, true);
    }

    /// Declares a reachable PBS server with one datastore that accepts `password` from any
    /// user or token; `fingerprint` is its certificate's SHA-256 (colon-separated hex).
    pub fn add_pbs_remote(&self, server: &str, fingerprint: &str, datastore: &str, password: &str) {
        self.declare_remote(
            server,
            RemoteSpec::Pbs {
                fingerprint: fingerprint.to_owned(),
                datastores: vec![datastore.to_owned()],
                username: None,
                password: password.to_owned(),
            },
        );
    }

    /// Declares a reachable NFS server with one export.
    pub fn add_nfs_remote(&self, server: &str, export: &str) {
        self.declare_remote(
            server,
            RemoteSpec::Nfs {
                exports: vec![export.to_owned()],
            },
        );
    }

    /// Declares a reachable CIFS server with one share; `password: None` allows guests.
    pub fn add_cifs_remote(&self, server: &str, share: &str, password: Option<&str>) {
        self.declare_remote(
            server,
            RemoteSpec::Cifs {
                shares: vec![share.to_owned()],
                username: None,
                password: password.map(str::to_owned),
            },
        );
    }

    /// Makes a server reachable or not (an undeclared one becomes an implicit remote).
    pub fn set_remote_reachable(&self, server: &str, reachable: bool) {
        self.shared
            .state
            .lock()
            .remotes
            .set_reachable(server, reachable);
    }

    /// Makes a server hang or answer again: while it hangs it answers Proxmox's connection
    /// checks but no I/O, so what touches a storage on it blocks (a hard mount) or fails
    /// after the mount's timeout (a soft mount), see `hung_mounts.rs`. An undeclared server
    /// becomes an implicit remote.
    pub fn set_remote_hanging(&self, server: &str, hanging: bool) {
        self.shared
            .state
            .lock()
            .remotes
            .set_hanging(server, hanging);
    }

    /// Every declared or implicit server (passwords are not listed).
    pub fn remotes(&self) -> Vec<RemoteInfo> {
        self.shared.state.lock().remotes.list()
    }

    /// Everything a remote server holds (its spec with the password, every backup with its
    /// archive), to import into another simulator; an error for a server no test declared
    /// and no storage used.
    pub fn export_remote(&self, server: &str) -> Result<RemoteStore, SimError> {
        crate::remote_store::export(&self.shared.state.lock(), server)
    }

    /// Makes `server` hold exactly `store`'s backups, declared with its spec and reachable (a
    /// PBS that outlived the node another simulator played). A store that is not valid is an
    /// error and changes nothing.
    pub fn import_remote(&self, server: &str, store: RemoteStore) -> Result<(), SimError> {
        crate::remote_store::import(&mut self.shared.state.lock(), server, store)
    }

    /// Damages the chunks of guest `vmid`'s backup group on PBS `server` (`pbs_verify`): its
    /// snapshots fail verification and restore. Gives how many snapshots it damaged.
    pub fn damage_chunks(
        &self,
        server: &str,
        damage: &crate::ChunkDamage,
    ) -> Result<usize, String> {
        crate::pbs_verify::damage(&self.shared, server, damage)
    }

    /// With `true`, a server no test declared is an unknown host (activation fails) instead
    /// of an implicit remote that accepts anything.
    pub fn set_strict_remotes(&self, strict: bool) {
        self.shared.state.lock().remotes.strict = strict;
    }

    /// Fixes the simulator's time (archive names and ctimes, backup log lines, UPID start
    /// times, task `starttime`/`endtime`); it stays put until set or advanced again.
    pub fn set_time(&self, at: jiff::Timestamp) {
        self.shared.clock.set(Some(at));
    }

    /// Moves the fixed time on (from the wall clock if none was set); returns the new time.
    pub fn advance_time(&self, by: jiff::SignedDuration) -> Option<jiff::Timestamp> {
        self.shared.clock.advance(by)
    }

    /// Returns to the wall clock.
    pub fn use_wall_clock(&self) {
        self.shared.clock.set(None);
    }

    /// The simulator's current time.
    pub fn now(&self) -> jiff::Timestamp {
        self.shared.clock.now().timestamp()
    }

    /// Sets the size of the node's root filesystem in bytes (`GET /nodes/{node}/status`
    /// `rootfs.total`, `maxdisk`); the `local` storage lives on it and reports the same size.
    pub fn set_rootfs_size(&self, total: u64) {
        if let Some(local) = self.shared.state.lock().storages.get_mut("local") {
            local.total = total;
        }
    }

    /// Fixes the node's load (`GET /nodes`, `GET /nodes/{node}/status`); unset values are the
    /// simulator's own. Refuses values the node cannot have.
    pub fn set_node_load(&self, load: crate::NodeLoad) -> Result<(), String> {
        load.check(crate::access::rootfs_total(&self.shared))?;
        *self.shared.node_load.lock() = load;
        Ok(())
    }

    /// Replaces the node's disks, pools and guests' fixed usage; refuses what cannot be.
    pub fn set_hardware(&self, hardware: crate::Hardware) -> Result<(), String> {
        hardware.check()?;
        *self.shared.hardware.lock() = hardware;
        Ok(())
    }

    /// The node's disks, pools and guests' fixed usage.
    pub fn hardware(&self) -> crate::Hardware {
        self.shared.hardware.lock().clone()
    }

    /// Degrades one disk (health, wear, a failing attribute); nothing changes on error.
    pub fn degrade_disk(&self, degrade: &crate::DiskDegrade) -> Result<(), String> {
        let mut hw = self.shared.hardware.lock();
        let mut next = hw.clone();
        next.degrade(degrade)?;
        *hw = next;
        Ok(())
    }

    /// Fixes a guest's CPU, memory and root-disk use (shares) as `GET /nodes/{node}/lxc`
    /// reports them while it runs.
    pub fn set_guest_load(&self, vmid: u32, load: crate::GuestLoad) -> Result<(), String> {
        let mut hw = self.shared.hardware.lock();
        let mut next = hw.clone();
        next.guest_load.insert(vmid, load);
        next.check()?;
        *hw = next;
        Ok(())
    }

    /// Stops serving, interrupts running tasks and waits for them.
    pub async fn shutdown(self) {
        self.shared.cancel.cancel();
        self.server.graceful_shutdown(Some(Duration::from_secs(2)));
        let join = self.join.lock().take();
        if let Some(join) = join {
            match join.await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::warn!(%error, "simulator server ended with an error"),
                Err(error) => tracing::warn!(%error, "simulator server task failed"),
            }
        }
        self.shared.tracker.close();
        self.shared.tracker.wait().await;
        tracing::info!("simulator stopped");
    }
}
