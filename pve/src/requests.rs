//! Typed request bodies. Each renders its form parameters through `params`, validating every
//! value first, so a bad request fails here as [`PveError::InvalidRequest`] and nothing is sent.

use std::collections::BTreeMap;

use secrecy::{ExposeSecret, SecretString};

use super::catalogue::Op;
use super::decimal::Thousandths;
use super::error::PveError;
use super::model::ContentItem;
use super::property::{NetConfig, PruneBackups};
use super::types::{StorageId, ValueError, Vmid, VolumeId, check_dns_name, check_tag};

/// Form parameters in the order they are sent.
pub type Params = Vec<(String, String)>;

fn invalid(op: Op, field: &'static str) -> impl FnOnce(ValueError) -> PveError {
    move |source| PveError::InvalidRequest { op, field, source }
}

fn bool_param(v: bool) -> String {
    u8::from(v).to_string()
}

/// Config keys every request that sets guest options shares: hostname, size and network.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CtOptions {
    /// Hostname (`dns-name`).
    pub hostname: Option<String>,
    /// CPU cores (1..=8192).
    pub cores: Option<u32>,
    /// Memory in MiB (at least 16).
    pub memory: Option<u64>,
    /// Swap in MiB.
    pub swap: Option<u64>,
    /// CPU weight (`cpuunits`, 0..=500000; cgroup v2 clamps it to 1..=10000, default 100).
    pub cpuunits: Option<u32>,
    /// CPU time limit in cores (`cpulimit`, 0..=8192; 0 is no limit).
    pub cpulimit: Option<Thousandths>,
    /// Network interfaces by index (`net0`…`net31`).
    pub net: BTreeMap<u8, NetConfig>,
    /// Start on boot.
    pub onboot: Option<bool>,
    /// Where the guest comes in the node's start at boot and stop at shutdown.
    pub startup: Option<super::startup::StartupOrder>,
    /// Free-text description.
    pub description: Option<String>,
    /// Tags (`pve-tag` each).
    pub tags: Vec<String>,
    /// New volume mount points by index (`mp0`…`mp255`), each allocated on its storage.
    pub mount_points: BTreeMap<u8, NewMountPoint>,
}

/// A new volume mount point: `<storage>:<size in GiB>,mp=<path>,backup=<0|1>` (a bulk volume
/// vzdump leaves out, `backup=0`, or a hot volume it includes, `backup=1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMountPoint {
    /// The storage the volume is allocated on.
    pub storage: StorageId,
    /// Size in GiB.
    pub size_gib: u32,
    /// Path inside the guest.
    pub path: String,
    /// Whether the guest's vzdump includes it.
    pub backup: bool,
}

impl NewMountPoint {
    fn to_property_string(&self) -> Result<String, ValueError> {
        let path_ok = self.path.starts_with('/')
            && self.path != "/"
            && !self.path.split('/').any(|c| c == "..")
            && !self.path.contains([',', '=', ' ']);
        if !path_ok {
            return Err(ValueError::new(
                "mount point path",
                self.path.clone(),
                "must be absolute, below /, without ',', '=', spaces or '..'",
            ));
        }
        if self.size_gib == 0 {
            return Err(ValueError::new(
                "mount point size",
                "0",
                "must be at least 1 GiB",
            ));
        }
        Ok(format!(
            "{}:{},mp={},backup={}",
            self.storage,
            self.size_gib,
            self.path,
            u8::from(self.backup)
        ))
    }
}

impl CtOptions {
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    fn push_params(&self, op: Op, out: &mut Params) -> Result<(), PveError> {
        if let Some(h) = &self.hostname {
            check_dns_name(h).map_err(invalid(op, "hostname"))?;
            out.push(("hostname".into(), h.clone()));
        }
        if let Some(c) = self.cores {
            if !(1..=8192).contains(&c) {
                return Err(invalid(op, "cores")(ValueError::new(
                    "cores",
                    c.to_string(),
                    "must be between 1 and 8192",
                )));
            }
            out.push(("cores".into(), c.to_string()));
        }
        if let Some(m) = self.memory {
            if m < 16 {
                return Err(invalid(op, "memory")(ValueError::new(
                    "memory",
                    m.to_string(),
                    "must be at least 16 MiB",
                )));
            }
            out.push(("memory".into(), m.to_string()));
        }
        if let Some(s) = self.swap {
            out.push(("swap".into(), s.to_string()));
        }
        if let Some(units) = self.cpuunits {
            if units > 500_000 {
                return Err(invalid(op, "cpuunits")(ValueError::new(
                    "cpuunits",
                    units.to_string(),
                    "must be between 0 and 500000",
                )));
            }
            out.push(("cpuunits".into(), units.to_string()));
        }
        if let Some(limit) = self.cpulimit {
            if limit > Thousandths::whole(8192) {
                return Err(invalid(op, "cpulimit")(ValueError::new(
                    "cpulimit",
                    limit.to_string(),
                    "must be between 0 and 8192",
                )));
            }
            out.push(("cpulimit".into(), limit.to_string()));
        }
        for (idx, net) in &self.net {
            if *idx > 31 {
                return Err(invalid(op, "net")(ValueError::new(
                    "interface index",
                    idx.to_string(),
                    "must be 0..=31",
                )));
            }
            let value = net.to_property_string().map_err(invalid(op, "net"))?;
            out.push((format!("net{idx}"), value));
        }
        if let Some(b) = self.onboot {
            out.push(("onboot".into(), bool_param(b)));
        }
        if let Some(startup) = self.startup {
            out.push(("startup".into(), startup.to_string()));
        }
        if let Some(d) = &self.description {
            if d.len() > 8192 {
                return Err(invalid(op, "description")(ValueError::new(
                    "description",
                    "…",
                    "may only be 8192 characters long",
                )));
            }
            out.push(("description".into(), d.clone()));
        }
        if !self.tags.is_empty() {
            for t in &self.tags {
                check_tag(t).map_err(invalid(op, "tags"))?;
            }
            out.push(("tags".into(), self.tags.join(";")));
        }
        for (idx, mp) in &self.mount_points {
            let value = mp.to_property_string().map_err(invalid(op, "mp"))?;
            out.push((format!("mp{idx}"), value));
        }
        Ok(())
    }
}

/// Create a container by restoring a backup archive (`POST /nodes/{node}/lxc`, `restore=1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreRequest {
    /// The new guest's id.
    pub vmid: Vmid,
    /// The backup archive (`ostemplate`).
    pub archive: VolumeId,
    /// Where the restored volumes go (must allow `rootdir`).
    pub storage: StorageId,
    /// Give the guest fresh MAC addresses.
    pub unique: bool,
    /// Restore as unprivileged (send it explicitly: PVE checks features against the value
    /// as sent).
    pub unprivileged: Option<bool>,
    /// Start the guest when the restore has finished.
    pub start: bool,
    /// Overrides of the archive's config.
    pub options: CtOptions,
}

impl RestoreRequest {
    /// Restore `archive` as `vmid` onto `storage`, unprivileged, with fresh MACs.
    pub fn new(vmid: Vmid, archive: VolumeId, storage: StorageId) -> Self {
        Self {
            vmid,
            archive,
            storage,
            unique: true,
            unprivileged: Some(true),
            start: false,
            options: CtOptions::default(),
        }
    }

    pub(crate) fn params(&self, op: Op, force: bool) -> Result<Params, PveError> {
        let mut p: Params = vec![
            ("vmid".into(), self.vmid.to_string()),
            ("ostemplate".into(), self.archive.to_string()),
            ("restore".into(), "1".into()),
            ("storage".into(), self.storage.to_string()),
        ];
        if self.unique {
            p.push(("unique".into(), "1".into()));
        }
        if let Some(u) = self.unprivileged {
            p.push(("unprivileged".into(), bool_param(u)));
        }
        if self.start {
            p.push(("start".into(), "1".into()));
        }
        if force {
            p.push(("force".into(), "1".into()));
        }
        self.options.push_params(op, &mut p)?;
        Ok(p)
    }
}

/// A change to a container's config (`PUT …/config`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigUpdate {
    /// Keys to set.
    pub set: CtOptions,
    /// Keys to delete (e.g. `net1`, `description`).
    pub delete: Vec<String>,
    /// Refuse the change if the config changed since this digest was read.
    pub digest: Option<String>,
}

impl ConfigUpdate {
    pub(crate) fn params(&self, op: Op) -> Result<Params, PveError> {
        let mut p = Params::new();
        self.set.push_params(op, &mut p)?;
        push_update(
            (self.set.is_empty(), &self.delete, self.digest.as_deref()),
            op,
            &mut p,
        )?;
        Ok(p)
    }
}

/// The part every guest kind's config update shares (`PUT …/config` of a container or a VM):
/// refused when it sets (`set_empty` false) and deletes nothing; the keys to delete, each of
/// letters, digits, `-` and `_`; the digest read before, at most 40 hex digits (the schema's
/// SHA-1 for both kinds).
pub(crate) fn push_update(
    (set_empty, delete, digest): (bool, &[String], Option<&str>),
    op: Op,
    p: &mut Params,
) -> Result<(), PveError> {
    if set_empty && delete.is_empty() {
        return Err(invalid(op, "set")(ValueError::new(
            "config update",
            "",
            "names no option to set or delete",
        )));
    }
    let bad_key = |key: &String| {
        key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    if let Some(key) = delete.iter().find(|key| bad_key(key)) {
        return Err(invalid(op, "delete")(ValueError::new(
            "config key",
            key.clone(),
            "must be letters, digits, '-' and '_'",
        )));
    }
    if !delete.is_empty() {
        p.push(("delete".into(), delete.join(",")));
    }
    if let Some(d) = digest {
        if d.len() > 40 || !d.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(invalid(op, "digest")(ValueError::new(
                "digest",
                d.to_owned(),
                "must be at most 40 hex digits (SHA-1)",
            )));
        }
        p.push(("digest".into(), d.to_owned()));
    }
    Ok(())
}

/// vzdump's `mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackupMode {
    /// Storage snapshot while running (falls back to suspend where volumes cannot snapshot).
    Snapshot,
    /// Suspend the guest for the copy.
    Suspend,
    /// Stop the guest for the backup.
    Stop,
}

impl BackupMode {
    fn as_str(self) -> &'static str {
        match self {
            Self::Snapshot => "snapshot",
            Self::Suspend => "suspend",
            Self::Stop => "stop",
        }
    }
}

/// vzdump's `compress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Plain `.tar`.
    None,
    /// gzip.
    Gzip,
    /// lzo.
    Lzo,
    /// zstd.
    Zstd,
}

impl Compression {
    fn as_str(self) -> &'static str {
        match self {
            Self::None => "0",
            Self::Gzip => "gzip",
            Self::Lzo => "lzo",
            Self::Zstd => "zstd",
        }
    }
}

/// Back one guest up (`POST /nodes/{node}/vzdump`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VzdumpRequest {
    /// The guest.
    pub vmid: Vmid,
    /// Target storage (must allow `backup`).
    pub storage: StorageId,
    /// Backup mode.
    pub mode: BackupMode,
    /// Compression (ignored by PBS targets).
    pub compress: Compression,
    /// Notes template; `{{guestname}}`, `{{vmid}}`, `{{node}}`, `{{cluster}}` are expanded.
    pub notes_template: Option<String>,
    /// Retention applied after the backup (needs `Datastore.Allocate` on the storage).
    pub prune: Option<PruneBackups>,
}

impl VzdumpRequest {
    /// A zstd snapshot-mode backup of `vmid` to `storage`.
    pub fn new(vmid: Vmid, storage: StorageId) -> Self {
        Self {
            vmid,
            storage,
            mode: BackupMode::Snapshot,
            compress: Compression::Zstd,
            notes_template: None,
            prune: None,
        }
    }

    pub(crate) fn params(&self, op: Op) -> Result<Params, PveError> {
        let mut p: Params = vec![
            ("vmid".into(), self.vmid.to_string()),
            ("storage".into(), self.storage.to_string()),
            ("mode".into(), self.mode.as_str().into()),
            ("compress".into(), self.compress.as_str().into()),
        ];
        if let Some(t) = &self.notes_template {
            check_notes_template(t).map_err(invalid(op, "notes-template"))?;
            p.push(("notes-template".into(), t.clone()));
        }
        if let Some(prune) = &self.prune {
            let s = prune
                .to_property_string()
                .map_err(invalid(op, "prune-backups"))?;
            p.push(("prune-backups".into(), s));
        }
        Ok(p)
    }
}

/// Checks a notes template the way vzdump does: one line, at most 1024 characters, only the
/// known `{{variables}}`, and only `\n` and `\\` as escapes.
fn check_notes_template(t: &str) -> Result<(), ValueError> {
    let bad = |reason| Err(ValueError::new("notes template", t, reason));
    if t.len() > 1024 {
        return bad("may only be 1024 characters long");
    }
    if t.contains('\n') || t.contains('\r') {
        return bad("must be a single line (write newlines as \\n)");
    }
    let mut rest = t;
    while let Some(i) = rest.find("{{") {
        let after = &rest[i + 2..];
        let Some(end) = after.find("}}") else {
            return bad("has an unclosed {{");
        };
        if !["cluster", "guestname", "node", "vmid"].contains(&&after[..end]) {
            return bad("uses an unknown variable");
        }
        rest = &after[end + 2..];
    }
    let mut chars = t.chars();
    while let Some(c) = chars.next() {
        if c == '\\' && !matches!(chars.next(), Some('n' | '\\')) {
            return bad("uses an escape other than \\n and \\\\");
        }
    }
    Ok(())
}

/// A content type of a storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentType {
    /// Backup archives.
    Backup,
    /// Container volumes.
    Rootdir,
    /// VM disk images.
    Images,
    /// Container templates.
    Vztmpl,
    /// ISO images.
    Iso,
    /// Snippets.
    Snippets,
}

impl ContentType {
    /// The name PVE uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Backup => "backup",
            Self::Rootdir => "rootdir",
            Self::Images => "images",
            Self::Vztmpl => "vztmpl",
            Self::Iso => "iso",
            Self::Snippets => "snippets",
        }
    }
}

/// Which volumes a content listing returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContentFilter {
    /// Only this content type.
    pub content: Option<ContentType>,
    /// Only volumes owned by this guest.
    pub vmid: Option<Vmid>,
}

impl ContentFilter {
    pub(crate) fn params(&self) -> Params {
        let mut p = Params::new();
        if let Some(c) = self.content {
            p.push(("content".into(), c.as_str().into()));
        }
        if let Some(v) = self.vmid {
            p.push(("vmid".into(), v.to_string()));
        }
        p
    }

    /// Whether a listed item passes this filter. An item that does not say its content type
    /// or owner fails a filter on that field.
    pub(crate) fn matches(&self, item: &ContentItem) -> bool {
        let content_ok = self
            .content
            .is_none_or(|c| item.content.as_deref() == Some(c.as_str()));
        let vmid_ok = self
            .vmid
            .is_none_or(|v| item.vmid == Some(u64::from(v.get())));
        content_ok && vmid_ok
    }
}

/// Which of the node's tasks to list (running and finished alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskFilter {
    /// Only tasks on this guest.
    pub vmid: Vmid,
    /// Only tasks of this type (`vzsnapshot`, `vzrollback`, `vzdump`, …).
    pub task_type: &'static str,
    /// Only tasks started at or after this time (epoch seconds).
    pub since: u64,
}

impl TaskFilter {
    /// How many tasks one look reads at most.
    pub const LIMIT: u32 = 50;
    /// How many running tasks one look at the node's workers reads at most.
    pub const ACTIVE_LIMIT: u32 = 500;

    pub(crate) fn params(&self) -> Params {
        vec![
            ("source".into(), "all".into()),
            ("vmid".into(), self.vmid.to_string()),
            ("typefilter".into(), self.task_type.into()),
            ("since".into(), self.since.to_string()),
            ("limit".into(), Self::LIMIT.to_string()),
        ]
    }

    /// Whether a listed task passes this filter (a server that ignores a filter must not
    /// hand back another guest's task as this one's).
    pub(crate) fn matches(&self, task: &super::model::TaskSummary) -> bool {
        task.task_type == self.task_type
            && task.id.as_deref() == Some(self.vmid.to_string().as_str())
            && task.starttime.is_some_and(|t| t >= self.since)
    }
}

/// The kind of storage to add, with its type-specific settings.
#[derive(Debug, Clone)]
pub enum StorageKind {
    /// A directory on the host (`type=dir`).
    Dir {
        /// Absolute path.
        path: String,
        /// Allowed content types.
        content: Vec<ContentType>,
        /// The path is an externally managed mount point: the storage is offline while it
        /// is not mounted (`is_mountpoint=yes`), so nothing is written to the bare
        /// directory underneath.
        is_mountpoint: bool,
    },
    /// An NFS export (`type=nfs`).
    Nfs {
        /// Server address.
        server: String,
        /// Export path.
        export: String,
        /// Allowed content types.
        content: Vec<ContentType>,
        /// Mount options (`options`, see `man nfs`), e.g. a soft mount with timeouts.
        options: Option<String>,
    },
    /// A CIFS share (`type=cifs`).
    Cifs {
        /// Server address.
        server: String,
        /// Share name.
        share: String,
        /// User name.
        username: String,
        /// Password.
        password: SecretString,
        /// Allowed content types.
        content: Vec<ContentType>,
        /// Mount options (`options`, see `man mount.cifs`).
        options: Option<String>,
    },
    /// A Proxmox Backup Server datastore (`type=pbs`).
    Pbs {
        /// Server address.
        server: String,
        /// Datastore name.
        datastore: String,
        /// `user@realm` or `user@realm!token`.
        username: String,
        /// Password or token secret.
        password: SecretString,
        /// The server certificate's SHA-256 fingerprint.
        fingerprint: Option<String>,
        /// PBS namespace.
        namespace: Option<String>,
        /// Server port, when not 8007.
        port: Option<u16>,
        /// The client encryption key file (JSON); backups are encrypted on this host.
        encryption_key: Option<SecretString>,
    },
}

/// Add a storage to the datacenter (`POST /storage`).
#[derive(Debug, Clone)]
pub struct StorageCreate {
    /// The new storage's id.
    pub storage: StorageId,
    /// Its type and settings.
    pub kind: StorageKind,
}

/// Change settings of a storage (`PUT /storage/{storage}`): the ones that may change in
/// place. Secrets are sent only when given.
#[derive(Debug, Clone, Default)]
pub struct StorageUpdate {
    /// Allowed content types.
    pub content: Option<Vec<ContentType>>,
    /// `is_mountpoint` of a dir storage.
    pub is_mountpoint: Option<bool>,
    /// A PBS server certificate fingerprint.
    pub fingerprint: Option<String>,
    /// A PBS namespace.
    pub namespace: Option<String>,
    /// Enables a disabled storage (`disable=0`).
    pub enable: bool,
    /// A new password (CIFS, PBS).
    pub password: Option<SecretString>,
    /// NFS or CIFS mount options (`options`).
    pub options: Option<String>,
    /// A new PBS client encryption key file (JSON): backups from now on are encrypted with
    /// it (a rotated K).
    pub encryption_key: Option<SecretString>,
}

impl StorageUpdate {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.content.is_none()
            && self.is_mountpoint.is_none()
            && self.fingerprint.is_none()
            && self.namespace.is_none()
            && !self.enable
            && self.password.is_none()
            && self.options.is_none()
            && self.encryption_key.is_none()
    }

    /// The form this update sends as `op` (errors name `op`).
    pub fn params(&self, op: Op) -> Result<Params, PveError> {
        let mut p = Params::new();
        if let Some(content) = &self.content {
            p.push(("content".into(), content_list(content)));
        }
        if let Some(yes) = self.is_mountpoint {
            p.push((
                "is_mountpoint".into(),
                if yes { "yes" } else { "no" }.into(),
            ));
        }
        if let Some(f) = &self.fingerprint {
            check_fingerprint(f).map_err(invalid(op, "fingerprint"))?;
            p.push(("fingerprint".into(), f.clone()));
        }
        if let Some(ns) = &self.namespace {
            p.push(("namespace".into(), ns.clone()));
        }
        if self.enable {
            p.push(("disable".into(), "0".into()));
        }
        if let Some(pw) = &self.password {
            p.push(("password".into(), pw.expose_secret().to_owned()));
        }
        if let Some(options) = &self.options {
            check_mount_options(options).map_err(invalid(op, "options"))?;
            p.push(("options".into(), options.clone()));
        }
        if let Some(key) = &self.encryption_key {
            p.push(("encryption-key".into(), key.expose_secret().to_owned()));
        }
        Ok(p)
    }
}

fn content_list(content: &[ContentType]) -> String {
    content
        .iter()
        .map(|c| c.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// A certificate fingerprint as PVE takes it: 32 colon-separated hex bytes.
fn check_fingerprint(f: &str) -> Result<(), ValueError> {
    let ok = f.split(':').count() == 32
        && f.split(':')
            .all(|b| b.len() == 2 && b.chars().all(|c| c.is_ascii_hexdigit()));
    if ok {
        Ok(())
    } else {
        Err(ValueError::new(
            "fingerprint",
            f,
            "must be 32 colon-separated hex bytes",
        ))
    }
}

/// NFS/CIFS mount options as PVE takes them (`pve-storage-options`): a comma-separated list
/// of `key` or `key=value`, without spaces, quotes or characters a shell or the form decoder
/// would read otherwise.
fn check_mount_options(options: &str) -> Result<(), ValueError> {
    let ok = !options.is_empty()
        && options.split(',').all(|o| {
            !o.is_empty()
                && o.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '=' | '_' | '-' | '.' | ':'))
        });
    if ok {
        Ok(())
    } else {
        Err(ValueError::new(
            "mount options",
            options,
            "must be a comma-separated list of key or key=value",
        ))
    }
}

/// A storage path as PVE takes it: absolute, without `..`.
fn check_storage_path(what: &'static str, path: &str) -> Result<(), ValueError> {
    if path.starts_with('/') && !path.split('/').any(|c| c == "..") {
        Ok(())
    } else {
        Err(ValueError::new(what, path, "must be absolute without '..'"))
    }
}

fn mount_options_of(options: Option<&str>, op: Op, p: &mut Params) -> Result<(), PveError> {
    if let Some(options) = options {
        check_mount_options(options).map_err(invalid(op, "options"))?;
        p.push(("options".into(), options.to_owned()));
    }
    Ok(())
}

impl StorageCreate {
    /// The form this request sends as `op` (errors name `op`).
    pub fn params(&self, op: Op) -> Result<Params, PveError> {
        let mut p: Params = vec![("storage".into(), self.storage.to_string())];
        let content_of = |content: &[ContentType], p: &mut Params| {
            if !content.is_empty() {
                p.push(("content".into(), content_list(content)));
            }
        };
        match &self.kind {
            StorageKind::Dir {
                path,
                content,
                is_mountpoint,
            } => {
                check_storage_path("storage path", path).map_err(invalid(op, "path"))?;
                p.push(("type".into(), "dir".into()));
                p.push(("path".into(), path.clone()));
                content_of(content, &mut p);
                if *is_mountpoint {
                    p.push(("is_mountpoint".into(), "yes".into()));
                }
            }
            StorageKind::Nfs {
                server,
                export,
                content,
                options,
            } => {
                check_storage_path("NFS export", export).map_err(invalid(op, "export"))?;
                p.push(("type".into(), "nfs".into()));
                p.push(("server".into(), server.clone()));
                p.push(("export".into(), export.clone()));
                content_of(content, &mut p);
                mount_options_of(options.as_deref(), op, &mut p)?;
            }
            StorageKind::Cifs {
                server,
                share,
                username,
                password,
                content,
                options,
            } => {
                p.push(("type".into(), "cifs".into()));
                p.push(("server".into(), server.clone()));
                p.push(("share".into(), share.clone()));
                p.push(("username".into(), username.clone()));
                p.push(("password".into(), password.expose_secret().to_owned()));
                content_of(content, &mut p);
                mount_options_of(options.as_deref(), op, &mut p)?;
            }
            StorageKind::Pbs {
                server,
                datastore,
                username,
                password,
                fingerprint,
                namespace,
                port,
                encryption_key,
            } => {
                p.push(("type".into(), "pbs".into()));
                p.push(("server".into(), server.clone()));
                p.push(("datastore".into(), datastore.clone()));
                p.push(("username".into(), username.clone()));
                p.push(("password".into(), password.expose_secret().to_owned()));
                p.push(("content".into(), "backup".into()));
                if let Some(f) = fingerprint {
                    check_fingerprint(f).map_err(invalid(op, "fingerprint"))?;
                    p.push(("fingerprint".into(), f.clone()));
                }
                if let Some(ns) = namespace {
                    p.push(("namespace".into(), ns.clone()));
                }
                if let Some(port) = port {
                    p.push(("port".into(), port.to_string()));
                }
                if let Some(key) = encryption_key {
                    p.push(("encryption-key".into(), key.expose_secret().to_owned()));
                }
            }
        }
        Ok(p)
    }
}
