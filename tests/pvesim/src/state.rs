//! The simulated node's state: guests, storages, volumes and the shared runtime pieces
//! (per-CT file locks, the vzdump global lock, the seeded generator, the request log).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sha1::{Digest, Sha1};
use tokio::sync::OwnedMutexGuard;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::LoggedRequest;
use crate::acl::AccessControl;
use crate::config::{FaultConfig, SimConfig};
use crate::files::FileTree;
use crate::tasks::Task;

/// A guest config as PVE keeps it: key → raw value string.
pub(crate) type Conf = BTreeMap<String, String>;

/// One snapshot section of a CT config.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    pub(crate) conf: Conf,
    pub(crate) snaptime: i64,
    pub(crate) description: String,
    pub(crate) snapstate: Option<String>,
    /// The CT's files when the snapshot was taken (a rollback brings them back).
    pub(crate) files: FileTree,
}

/// One LXC guest.
#[derive(Debug, Clone)]
pub(crate) struct Guest {
    pub(crate) conf: Conf,
    pub(crate) pending: Conf,
    pub(crate) pending_delete: BTreeSet<String>,
    pub(crate) snapshots: BTreeMap<String, Snapshot>,
    pub(crate) running_since: Option<Instant>,
    /// The CT's root filesystem (what `pct push`/`pct exec` change).
    pub(crate) files: FileTree,
    /// Its firewall options (`/etc/pve/firewall/<vmid>.fw`, `[OPTIONS]`): `crate::firewall`.
    pub(crate) firewall: Conf,
    /// The address the guest's root set on its own interfaces instead of its DHCP lease
    /// (`SimHandle::set_guest_own_address`): what `…/interfaces` reads for its `net`s.
    pub(crate) own_address: Option<std::net::Ipv4Addr>,
    /// Bytes of files on its volumes, once fixed (`SimHandle::set_guest_data`, or its first
    /// resize: growing a volume adds no files); until then a fifth of its rootfs' size.
    pub(crate) data: Option<u64>,
}

impl Guest {
    pub(crate) fn new(conf: Conf) -> Self {
        Self {
            conf,
            pending: Conf::new(),
            pending_delete: BTreeSet::new(),
            snapshots: BTreeMap::new(),
            running_since: None,
            files: FileTree::default(),
            firewall: Conf::new(),
            own_address: None,
            data: None,
        }
    }

    /// Bytes of files on its volumes: what a backup archives and its status calls `disk`.
    pub(crate) fn data_bytes(&self) -> u64 {
        self.data.unwrap_or_else(|| self.rootfs_size() / 5)
    }

    /// The rootfs' configured size in bytes (0 when it has none).
    pub(crate) fn rootfs_size(&self) -> u64 {
        self.conf
            .get("rootfs")
            .and_then(|v| crate::schema::parse_prop_string(&crate::schema::ROOTFS, v).ok())
            .and_then(|m| m.get("size").and_then(|s| crate::schema::parse_size(s)))
            .unwrap_or(0)
    }

    pub(crate) fn running(&self) -> bool {
        self.running_since.is_some()
    }

    pub(crate) fn lock(&self) -> Option<&str> {
        self.conf.get("lock").map(String::as_str)
    }

    /// `CT is locked (<lock>)` unless unlocked (or locked with an allowed value).
    pub(crate) fn check_lock(&self, allowed: &[&str]) -> Result<(), String> {
        match self.lock() {
            Some(l) if !allowed.contains(&l) => Err(format!("CT is locked ({l})")),
            _ => Ok(()),
        }
    }

    /// The config file text as PVE writes it (`/etc/pve/lxc/<vmid>.conf`).
    pub(crate) fn render(&self) -> String {
        let mut out = render_section(&self.conf);
        if !self.pending.is_empty() || !self.pending_delete.is_empty() {
            out.push_str("\n[pve:pending]\n");
            let mut pending = self.pending.clone();
            if !self.pending_delete.is_empty() {
                let list: Vec<&str> = self.pending_delete.iter().map(String::as_str).collect();
                pending.insert("delete".to_owned(), list.join(","));
            }
            out.push_str(&render_section(&pending));
        }
        for (name, snap) in &self.snapshots {
            out.push_str(&format!("\n[{name}]\n"));
            let mut conf = snap.conf.clone();
            conf.insert("snaptime".to_owned(), snap.snaptime.to_string());
            if let Some(state) = &snap.snapstate {
                conf.insert("snapstate".to_owned(), state.clone());
            }
            if !snap.description.is_empty() {
                conf.insert("description".to_owned(), snap.description.clone());
            }
            out.push_str(&render_section(&conf));
        }
        out
    }

    /// SHA-1 of the rendered config file, hex.
    pub(crate) fn digest(&self) -> String {
        hex::encode(Sha1::digest(self.render().as_bytes()))
    }

    /// Applies the pending changes (at start).
    pub(crate) fn apply_pending(&mut self) {
        for key in std::mem::take(&mut self.pending_delete) {
            self.conf.remove(&key);
        }
        let pending = std::mem::take(&mut self.pending);
        self.conf.extend(pending);
    }

    /// Every volume the guest references (rootfs, mpN and unusedN, plus snapshot ones).
    pub(crate) fn volumes(&self) -> BTreeSet<String> {
        let mut vols = BTreeSet::new();
        let confs = std::iter::once(&self.conf)
            .chain(std::iter::once(&self.pending))
            .chain(self.snapshots.values().map(|s| &s.conf));
        for conf in confs {
            for (k, v) in conf {
                if is_volume_key(k)
                    && let Some(vol) = volume_of(v)
                    && vol.contains(':')
                {
                    vols.insert(vol);
                }
            }
        }
        vols
    }
}

/// `rootfs`, `mpN`, `unusedN`.
pub(crate) fn is_volume_key(key: &str) -> bool {
    key == "rootfs"
        || ["mp", "unused"].iter().any(|p| {
            key.strip_prefix(p)
                .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
        })
}

/// The volume part of a `rootfs`/`mpN` value (`local-lvm:vm-100-disk-0,size=8G`).
pub(crate) fn volume_of(value: &str) -> Option<String> {
    value
        .split(',')
        .find_map(|part| match part.split_once('=') {
            Some(("volume", v)) => Some(v.to_owned()),
            Some(_) => None,
            None => Some(part.to_owned()),
        })
}

pub(crate) fn render_section(conf: &Conf) -> String {
    let mut out = String::new();
    if let Some(desc) = conf.get("description") {
        for line in desc.lines() {
            out.push_str(&format!("#{line}\n"));
        }
    }
    for (k, v) in conf {
        if k != "description" {
            out.push_str(&format!("{k}: {v}\n"));
        }
    }
    out
}

/// Kinds of storage the simulator models, with their fixed options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StorageKind {
    Dir {
        path: String,
    },
    LvmThin {
        vgname: String,
        thinpool: String,
    },
    Pbs {
        server: String,
        datastore: String,
    },
    Nfs {
        server: String,
        export: String,
        path: String,
    },
    Cifs {
        server: String,
        share: String,
        path: String,
    },
}

impl StorageKind {
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            StorageKind::Dir { .. } => "dir",
            StorageKind::LvmThin { .. } => "lvmthin",
            StorageKind::Pbs { .. } => "pbs",
            StorageKind::Nfs { .. } => "nfs",
            StorageKind::Cifs { .. } => "cifs",
        }
    }

    /// The directory of a file-based storage (dir, nfs, cifs).
    pub(crate) fn dir_path(&self) -> Option<&str> {
        match self {
            StorageKind::Dir { path }
            | StorageKind::Nfs { path, .. }
            | StorageKind::Cifs { path, .. } => Some(path),
            StorageKind::LvmThin { .. } | StorageKind::Pbs { .. } => None,
        }
    }

    /// Whether LXC volumes on this storage can be snapshotted.
    pub(crate) fn snapshots(&self) -> bool {
        matches!(self, StorageKind::LvmThin { .. })
    }
}

/// What an archive holds: a backup's recorded config (`./etc/vzdump/pct.conf`, empty for a
/// template) and the root filesystem.
#[derive(Debug, Clone)]
pub(crate) struct Archive {
    pub(crate) conf: Conf,
    pub(crate) files: FileTree,
    /// The archive cannot be read to its end (a truncated file, a PBS chunk that fails
    /// verification): unpacking it fails (see `unpack`).
    pub(crate) unreadable: bool,
}

impl Archive {
    /// A whole, readable archive.
    pub(crate) fn new(conf: Conf, files: FileTree) -> Self {
        Self {
            conf,
            files,
            unreadable: false,
        }
    }
}

/// One volume on a storage.
#[derive(Debug, Clone)]
pub(crate) struct Volume {
    pub(crate) volid: String,
    pub(crate) content: String,
    pub(crate) format: String,
    pub(crate) size: u64,
    pub(crate) ctime: i64,
    pub(crate) vmid: Option<u32>,
    pub(crate) notes: Option<String>,
    pub(crate) protected: bool,
    /// PBS: the fingerprint of the key the backup was encrypted with.
    pub(crate) encrypted: Option<String>,
    pub(crate) archive: Option<Archive>,
}

/// One configured storage.
#[derive(Debug, Clone)]
pub(crate) struct Storage {
    pub(crate) kind: StorageKind,
    pub(crate) content: BTreeSet<String>,
    pub(crate) enabled: bool,
    pub(crate) shared: bool,
    pub(crate) total: u64,
    pub(crate) prune_backups: Option<String>,
    /// The volumes of every kind but PBS (a PBS storage's backups live on its remote).
    pub(crate) volumes: Vec<Volume>,
    /// Further options as `storage.cfg` holds them (`namespace`, `fingerprint`, `username`,
    /// `port`, `options`, `is_mountpoint`, the encryption key's fingerprint, …).
    pub(crate) options: BTreeMap<String, String>,
    /// What PVE keeps outside `storage.cfg` and never shows.
    pub(crate) secrets: StorageSecrets,
}

/// A storage's secrets (`/etc/pve/priv/storage/<sid>.pw`, `.enc`).
#[derive(Clone, Default)]
pub(crate) struct StorageSecrets {
    pub(crate) password: Option<String>,
    /// The PBS key file (JSON).
    pub(crate) encryption_key: Option<String>,
}

impl std::fmt::Debug for StorageSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorageSecrets")
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field(
                "encryption_key",
                &self.encryption_key.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl Storage {
    /// A new storage with no options, secrets or volumes.
    pub(crate) fn new(kind: StorageKind, content: BTreeSet<String>, total: u64) -> Self {
        Self {
            kind,
            content,
            enabled: true,
            shared: false,
            total,
            prune_backups: None,
            volumes: Vec::new(),
            options: BTreeMap::new(),
            secrets: StorageSecrets::default(),
        }
    }

    pub(crate) fn used(&self) -> u64 {
        self.volumes.iter().map(|v| v.size).sum()
    }

    /// The PBS namespace (`""` is the root namespace).
    pub(crate) fn namespace(&self) -> &str {
        self.options.get("namespace").map_or("", String::as_str)
    }

    pub(crate) fn content_list(&self) -> String {
        self.content.iter().cloned().collect::<Vec<_>>().join(",")
    }
}

/// The mutable state behind one lock.
#[derive(Debug)]
pub(crate) struct NodeState {
    pub(crate) access: AccessControl,
    pub(crate) guests: BTreeMap<u32, Guest>,
    /// The node's QEMU guests (`crate::qemu`).
    pub(crate) vms: BTreeMap<u32, crate::qemu::Vm>,
    pub(crate) storages: BTreeMap<String, Storage>,
    pub(crate) tasks: Vec<Task>,
    pub(crate) faults: FaultConfig,
    pub(crate) requests: Vec<LoggedRequest>,
    pub(crate) next_pid: u32,
    /// Failures injected into root's CLI (`pct`, `vzdump`).
    pub(crate) cli_faults: Vec<crate::cli::CliFault>,
    /// The servers storages reach (PBS, NFS, CIFS), keyed by host name or address.
    pub(crate) remotes: crate::remotes::Remotes,
    /// What removed storages left on their targets, by location (see `storage_delete`).
    pub(crate) left_on_targets: BTreeMap<String, Vec<Volume>>,
    /// Where the node's file systems are, when archives are files (`archive_files`).
    pub(crate) files_root: Option<std::path::PathBuf>,
    /// The datacenter firewall's `enable` (off, as in a default install).
    pub(crate) datacenter_firewall: bool,
    /// The cluster the node is part of, with the guests its other nodes hold; `None` for a
    /// standalone node.
    pub(crate) cluster: Option<crate::cluster::Cluster>,
}

impl NodeState {
    /// The other node of the cluster that holds `vmid`, if any.
    pub(crate) fn peer_holding(&self, vmid: u32) -> Option<&str> {
        self.cluster
            .as_ref()?
            .guests
            .get(&vmid)
            .map(|g| g.node.as_str())
    }

    /// Whether `vmid` is taken anywhere in the cluster.
    pub(crate) fn vmid_taken(&self, vmid: u32) -> bool {
        self.guests.contains_key(&vmid)
            || self.vms.contains_key(&vmid)
            || self.peer_holding(vmid).is_some()
    }

    pub(crate) fn storage_of(&self, volid: &str) -> Option<(&str, &Storage)> {
        let (sid, _) = volid.split_once(':')?;
        self.storages
            .get_key_value(sid)
            .map(|(k, s)| (k.as_str(), s))
    }

    /// The volumes of a storage, with full volids (a PBS storage's come from its remote's
    /// datastore and namespace).
    pub(crate) fn volumes(&self, sid: &str) -> Vec<Volume> {
        let Some(storage) = self.storages.get(sid) else {
            return Vec::new();
        };
        match &storage.kind {
            StorageKind::Pbs { server, datastore } => self
                .remotes
                .backups(server, datastore, storage.namespace())
                .iter()
                .map(|v| Volume {
                    volid: format!("{sid}:{}", v.volid),
                    ..v.clone()
                })
                .collect(),
            _ => storage.volumes.clone(),
        }
    }

    /// The list a storage's volumes live in, and the key a volid has in it.
    fn volume_list_mut(&mut self, volid: &str) -> Option<(&mut Vec<Volume>, String)> {
        let (sid, name) = volid.split_once(':')?;
        let storage = self.storages.get_mut(sid)?;
        match &storage.kind {
            StorageKind::Pbs { server, datastore } => {
                let ns = storage.namespace().to_owned();
                let list = self.remotes.backups_mut(server, datastore, &ns);
                Some((list, name.to_owned()))
            }
            _ => Some((&mut storage.volumes, volid.to_owned())),
        }
    }

    pub(crate) fn find_volume(&self, volid: &str) -> Option<Volume> {
        let (sid, _) = volid.split_once(':')?;
        self.volumes(sid).into_iter().find(|v| v.volid == volid)
    }

    pub(crate) fn volume_mut(&mut self, volid: &str) -> Option<&mut Volume> {
        let (list, key) = self.volume_list_mut(volid)?;
        list.iter_mut().find(|v| v.volid == key)
    }

    pub(crate) fn remove_volume(&mut self, volid: &str) -> Option<Volume> {
        let file = self.archive_file(volid);
        let (list, key) = self.volume_list_mut(volid)?;
        let idx = list.iter().position(|v| v.volid == key)?;
        if let Some(file) = file {
            let _ = std::fs::remove_file(file);
        }
        Some(list.remove(idx))
    }

    /// Adds a volume (its volid names the storage); a backup on a file storage is written
    /// as its file too when archives are files.
    pub(crate) fn push_volume(&mut self, mut volume: Volume) {
        let volid = volume.volid.clone();
        if let (Some(file), Some(archive)) = (self.archive_file(&volid), &volume.archive) {
            crate::archive_files::write(&file, &crate::archive_files::bytes(&volume, archive));
        }
        if let Some((list, key)) = self.volume_list_mut(&volid) {
            volume.volid = key;
            list.push(volume);
        }
    }

    /// Applies the stale locks of the fault config to existing guests.
    pub(crate) fn apply_stale_locks(&mut self) {
        for stale in &self.faults.stale_locks {
            if let Some(guest) = self.guests.get_mut(&stale.vmid) {
                guest.conf.insert("lock".to_owned(), stale.lock.clone());
            }
        }
    }
}

/// Everything the request handlers and tasks share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: SimConfig,
    /// The certificate fingerprint (shown in `GET /nodes`).
    pub(crate) fingerprint: String,
    pub(crate) state: Mutex<NodeState>,
    flocks: Mutex<HashMap<u32, Arc<tokio::sync::Mutex<()>>>>,
    pub(crate) vzdump_lock: Arc<tokio::sync::Mutex<()>>,
    rng: Mutex<StdRng>,
    pub(crate) tracker: TaskTracker,
    pub(crate) cancel: CancellationToken,
    /// The time backups and tasks are stamped with.
    pub(crate) clock: crate::clock::SimClock,
    /// The node's load as a test fixed it.
    pub(crate) node_load: Mutex<crate::node_load::NodeLoad>,
    /// The node's disks and pools, and guests' usage a test fixed.
    pub(crate) hardware: Mutex<crate::hardware::Hardware>,
    /// The PBS side's verify tasks (`pbs_verify`).
    pub(crate) pbs_tasks: Mutex<Vec<crate::pbs_verify::PbsTask>>,
}

impl Shared {
    pub(crate) fn new(config: SimConfig, fingerprint: String, state: NodeState) -> Self {
        let rng = StdRng::seed_from_u64(config.seed);
        Self {
            config,
            fingerprint,
            state: Mutex::new(state),
            flocks: Mutex::new(HashMap::new()),
            vzdump_lock: Arc::new(tokio::sync::Mutex::new(())),
            rng: Mutex::new(rng),
            tracker: TaskTracker::new(),
            cancel: CancellationToken::new(),
            clock: crate::clock::SimClock::default(),
            node_load: Mutex::default(),
            hardware: Mutex::default(),
            pbs_tasks: Mutex::default(),
        }
    }

    pub(crate) fn node(&self) -> &str {
        &self.config.node
    }

    /// Rolls a seeded die: true with probability `p`.
    pub(crate) fn roll(&self, p: f64) -> bool {
        if p.is_nan() || p <= 0.0 {
            return false;
        }
        self.rng.lock().random_bool(p.min(1.0))
    }

    /// A random locally administered MAC with Proxmox's `BC:24:11` prefix.
    pub(crate) fn random_mac(&self) -> String {
        let mut rng = self.rng.lock();
        let b: [u8; 3] = [rng.random(), rng.random(), rng.random()];
        format!("BC:24:11:{:02X}:{:02X}:{:02X}", b[0], b[1], b[2])
    }

    /// Takes the per-CT file lock (`/run/lock/lxc/pve-config-<vmid>.lock`), waiting at most
    /// `wait` (real time, scaled by `time_scale`).
    pub(crate) async fn flock(
        &self,
        vmid: u32,
        wait: Duration,
    ) -> Result<OwnedMutexGuard<()>, String> {
        self.flock_file(vmid, wait, &format!("/run/lock/lxc/pve-config-{vmid}.lock"))
            .await
    }

    /// Takes a VM's config file lock (`/var/lock/qemu-server/lock-<vmid>.conf`): the same
    /// per-guest lock (a vmid is a CT or a VM, never both), with qemu-server's file name.
    pub(crate) async fn flock_qemu(
        &self,
        vmid: u32,
        wait: Duration,
    ) -> Result<OwnedMutexGuard<()>, String> {
        self.flock_file(
            vmid,
            wait,
            &format!("/var/lock/qemu-server/lock-{vmid}.conf"),
        )
        .await
    }

    async fn flock_file(
        &self,
        vmid: u32,
        wait: Duration,
        file: &str,
    ) -> Result<OwnedMutexGuard<()>, String> {
        let mutex = self.flocks.lock().entry(vmid).or_default().clone();
        let scaled = self.config.scaled(wait);
        let timeout = format!("can't lock file '{file}' - got timeout");
        if scaled.is_zero() {
            return mutex.try_lock_owned().map_err(|_| timeout);
        }
        tokio::time::timeout(scaled, mutex.lock_owned())
            .await
            .map_err(|_| timeout)
    }

    /// Sleeps a scaled task duration; returns early (false) on shutdown.
    pub(crate) async fn sleep(&self, real: Duration) -> bool {
        let d = self.config.scaled(real);
        if d.is_zero() {
            return !self.cancel.is_cancelled();
        }
        tokio::select! {
            () = tokio::time::sleep(d) => true,
            () = self.cancel.cancelled() => false,
        }
    }
}

/// The standard per-CT lock wait (10 s) and the one for create (5 s).
pub(crate) const FLOCK_WAIT: Duration = Duration::from_secs(10);
pub(crate) const FLOCK_WAIT_CREATE: Duration = Duration::from_secs(5);

/// Seconds since the epoch, on the wall clock (snapshot and volume times; backups and tasks
/// use [`Shared::clock`]).
pub(crate) fn now_epoch() -> i64 {
    jiff::Timestamp::now().as_second()
}
