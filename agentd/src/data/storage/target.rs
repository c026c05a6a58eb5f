//! What one manifest target looks like in Proxmox: the `POST /storage` that registers it,
//! and the settings a registered storage must still have (drift is corrected in place with
//! `PUT /storage/{storage}`, never by deleting the storage: it may hold backups).

use std::path::Path;

use bosun_proto::desired::{StorageRole, StorageTarget, StorageType};
use secrecy::SecretString;
use serde_json::{Map, Value};

use bosun_pve::{ContentType, StorageCreate, StorageId, StorageKind, StorageUpdate};

/// NFS mount options: a soft mount, so an NFS server that stops answering fails the I/O
/// (EIO) instead of hanging vzdump for ever while it holds the guest's `backup` lock. Over TCP
/// the client waits `timeo` (deciseconds) and backs off linearly, so with `timeo=30` and
/// `retrans=2` a request fails after 3 + 6 + 9 = 18 s: long enough to ride out a short
/// network blip, short enough that the tier is known dead and the others go on.
pub const NFS_MOUNT_OPTIONS: &str = "soft,timeo=30,retrans=2";
/// CIFS mount options: soft (what `mount.cifs` does by default, said out loud so a changed
/// default cannot turn it hard), and an echo every 5 s: the kernel deems a server that has
/// not answered for 3 echo intervals (15 s) unresponsive and fails soft-mount requests.
pub const CIFS_MOUNT_OPTIONS: &str = "soft,echo_interval=5";

/// The mount options a target of `kind` is registered with (`None`: not a network mount).
pub fn mount_options(kind: StorageType) -> Option<&'static str> {
    match kind {
        StorageType::Nfs => Some(NFS_MOUNT_OPTIONS),
        StorageType::Cifs => Some(CIFS_MOUNT_OPTIONS),
        StorageType::LocalDir | StorageType::Usb | StorageType::Pbs => None,
    }
}

/// A PBS repository as a `durable_id` names it:
/// `user@realm[!token]@server[:port]:datastore[#fingerprint]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PbsRepository {
    /// `user@realm` or `user@realm!token`.
    pub username: String,
    /// Host name or address.
    pub server: String,
    /// Port, when not PBS's 8007.
    pub port: Option<u16>,
    /// Datastore name.
    pub datastore: String,
    /// The server certificate's SHA-256 fingerprint, upper-case as PVE shows it.
    pub fingerprint: Option<String>,
}

/// Why a target's `durable_id` or settings do not make a storage registration. The text is
/// the detail a failing target reports.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// A PBS `durable_id` without its user.
    #[error("expected user@realm@server:datastore")]
    NoPbsUser,
    /// A PBS user without its realm.
    #[error("the user must name its realm (user@realm)")]
    NoRealm,
    /// A PBS `durable_id` without its datastore.
    #[error("expected server:datastore after the user")]
    NoDatastore,
    /// A PBS port that is not a number.
    #[error("bad port {port:?}")]
    BadPort {
        /// The port as written.
        port: String,
    },
    /// A PBS server or datastore with characters a name does not have.
    #[error("server and datastore must be plain names")]
    NotPlainNames,
    /// A PBS fingerprint that is not one.
    #[error("the fingerprint must be 32 colon-separated hex bytes")]
    BadFingerprint,
    /// An NFS or CIFS `durable_id` that is not `server:path`.
    #[error("expected server:path")]
    NoServerPath,
    /// A CIFS target without its username.
    #[error("a {kind} target needs a username")]
    NoUsername {
        /// The target's kind.
        kind: &'static str,
    },
    /// A target whose sealed credentials are not at hand.
    #[error("a {kind} target needs sealed credentials")]
    NoCredentials {
        /// The target's kind.
        kind: &'static str,
    },
}

/// Parses a PBS `durable_id`.
pub fn parse_pbs(durable_id: &str) -> Result<PbsRepository, TargetError> {
    let (repo, fingerprint) = match durable_id.split_once('#') {
        Some((repo, fp)) => (repo, Some(fp.to_ascii_uppercase())),
        None => (durable_id, None),
    };
    let (user_at, location) = repo.rsplit_once('@').ok_or(TargetError::NoPbsUser)?;
    if !user_at.contains('@') {
        return Err(TargetError::NoRealm);
    }
    let (host_port, datastore) = location.rsplit_once(':').ok_or(TargetError::NoDatastore)?;
    let (server, port) = match host_port.rsplit_once(':') {
        Some((server, port)) if !server.ends_with(']') || host_port.starts_with('[') => {
            let port: u16 = port.parse().map_err(|_| TargetError::BadPort {
                port: port.to_owned(),
            })?;
            (server, Some(port))
        }
        _ => (host_port, None),
    };
    let name_ok = |s: &str| {
        !s.is_empty()
            && s.chars().all(|c| {
                c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '[' | ']' | ':')
            })
    };
    if !name_ok(server) || !name_ok(datastore) || datastore.contains(':') {
        return Err(TargetError::NotPlainNames);
    }
    if let Some(fp) = &fingerprint {
        let ok = fp.split(':').count() == 32
            && fp
                .split(':')
                .all(|b| b.len() == 2 && b.chars().all(|c| c.is_ascii_hexdigit()));
        if !ok {
            return Err(TargetError::BadFingerprint);
        }
    }
    Ok(PbsRepository {
        username: user_at.to_owned(),
        server: server.to_owned(),
        port: port.filter(|p| *p != 8007),
        datastore: datastore.to_owned(),
        fingerprint,
    })
}

/// `server:export` (NFS) or `server:share` (CIFS).
fn server_and_path(durable_id: &str) -> Result<(&str, &str), TargetError> {
    durable_id
        .split_once(':')
        .filter(|(s, p)| !s.is_empty() && !p.is_empty())
        .ok_or(TargetError::NoServerPath)
}

/// What the target holds, as Proxmox content types.
pub fn content_of(target: &StorageTarget) -> Vec<ContentType> {
    match target.role {
        StorageRole::VzdumpTarget | StorageRole::PbsOffsite => vec![ContentType::Backup],
        StorageRole::Primary | StorageRole::BulkData => {
            vec![ContentType::Images, ContentType::Rootdir]
        }
    }
}

/// Where a USB target is mounted: `<mount_root>/<storage id>`.
pub fn usb_mount_path(mount_root: &Path, storage: &StorageId) -> String {
    mount_root.join(storage.as_str()).display().to_string()
}

/// Where the node reaches `target`'s storage `storage` as a directory: a local directory's
/// own path, a USB disk's mount, or where Proxmox mounts an NFS or CIFS share
/// (`/mnt/pve/<storage id>`); `None` for a PBS datastore, which is no directory.
pub fn directory_of(
    target: &StorageTarget,
    storage: &StorageId,
    mount_root: &Path,
) -> Option<String> {
    match target.kind {
        StorageType::LocalDir => Some(target.durable_id.clone()),
        StorageType::Usb => Some(usb_mount_path(mount_root, storage)),
        StorageType::Nfs | StorageType::Cifs => Some(format!("/mnt/pve/{}", storage.as_str())),
        StorageType::Pbs => None,
    }
}

/// The secrets a registration needs, opened on this host.
#[derive(Debug, Default)]
pub struct Secrets {
    /// The CIFS or PBS password (the target's sealed credentials).
    pub password: Option<SecretString>,
    /// The PBS client encryption key file K.
    pub pbs_key: Option<SecretString>,
}

/// The `POST /storage` registering `target` as `storage`.
pub fn create_request(
    target: &StorageTarget,
    storage: &StorageId,
    mount_root: &Path,
    secrets: Secrets,
) -> Result<StorageCreate, TargetError> {
    let content = content_of(target);
    let kind = match target.kind {
        StorageType::LocalDir => StorageKind::Dir {
            path: target.durable_id.clone(),
            content,
            is_mountpoint: false,
        },
        StorageType::Usb => StorageKind::Dir {
            path: usb_mount_path(mount_root, storage),
            content,
            is_mountpoint: true,
        },
        StorageType::Nfs => {
            let (server, export) = server_and_path(&target.durable_id)?;
            StorageKind::Nfs {
                server: server.to_owned(),
                export: export.to_owned(),
                content,
                options: mount_options(target.kind).map(str::to_owned),
            }
        }
        StorageType::Cifs => {
            let (server, share) = server_and_path(&target.durable_id)?;
            StorageKind::Cifs {
                server: server.to_owned(),
                share: share.trim_start_matches('/').to_owned(),
                username: target
                    .username
                    .clone()
                    .ok_or(TargetError::NoUsername { kind: "cifs" })?,
                password: secrets
                    .password
                    .ok_or(TargetError::NoCredentials { kind: "cifs" })?,
                content,
                options: mount_options(target.kind).map(str::to_owned),
            }
        }
        StorageType::Pbs => {
            let repo = parse_pbs(&target.durable_id)?;
            StorageKind::Pbs {
                server: repo.server,
                datastore: repo.datastore,
                username: repo.username,
                password: secrets
                    .password
                    .ok_or(TargetError::NoCredentials { kind: "pbs" })?,
                fingerprint: repo.fingerprint,
                namespace: target.namespace.clone(),
                port: repo.port,
                encryption_key: secrets.pbs_key,
            }
        }
    };
    Ok(StorageCreate {
        storage: storage.clone(),
        kind,
    })
}

/// How a registered storage differs from its target.
#[derive(Debug, Default)]
pub struct Drift {
    /// What can be corrected in place.
    pub update: StorageUpdate,
    /// Settings Proxmox fixes at creation that differ (`key: found → wanted`): reported,
    /// never corrected by deleting the storage.
    pub fixed: Vec<String>,
}

/// Compares the registered configuration `config` (`GET /storage/{storage}`) with `target`.
pub fn drift(
    target: &StorageTarget,
    storage: &StorageId,
    mount_root: &Path,
    config: &Map<String, Value>,
) -> Drift {
    let text = |key: &str| config.get(key).and_then(Value::as_str).unwrap_or_default();
    let mut out = Drift::default();
    let mut fixed = |key: &str, wanted: &str| {
        let found = text(key);
        if found != wanted {
            out.fixed.push(format!("{key}: {found:?} → {wanted:?}"));
        }
    };
    let wanted_type = match target.kind {
        StorageType::LocalDir | StorageType::Usb => "dir",
        StorageType::Nfs => "nfs",
        StorageType::Cifs => "cifs",
        StorageType::Pbs => "pbs",
    };
    fixed("type", wanted_type);
    match target.kind {
        StorageType::LocalDir => fixed("path", &target.durable_id),
        StorageType::Usb => fixed("path", &usb_mount_path(mount_root, storage)),
        StorageType::Nfs | StorageType::Cifs => {
            if let Ok((server, path)) = server_and_path(&target.durable_id) {
                fixed("server", server);
                if target.kind == StorageType::Nfs {
                    fixed("export", path);
                } else {
                    fixed("share", path.trim_start_matches('/'));
                }
            }
            // Proxmox applies changed options at the next mount; a hard mount is a hang
            // waiting for a server that stops answering.
            if let Some(wanted) = mount_options(target.kind)
                && text("options") != wanted
            {
                out.update.options = Some(wanted.to_owned());
            }
        }
        StorageType::Pbs => {
            if let Ok(repo) = parse_pbs(&target.durable_id) {
                fixed("server", &repo.server);
                fixed("datastore", &repo.datastore);
                if let Some(fp) = repo.fingerprint
                    && !text("fingerprint").eq_ignore_ascii_case(&fp)
                {
                    out.update.fingerprint = Some(fp);
                }
            }
            let namespace = target.namespace.as_deref().unwrap_or_default();
            if text("namespace") != namespace && !namespace.is_empty() {
                out.update.namespace = Some(namespace.to_owned());
            }
        }
    }
    let wanted: Vec<ContentType> = content_of(target);
    let mut found: Vec<&str> = text("content")
        .split(',')
        .filter(|c| !c.is_empty())
        .collect();
    found.sort_unstable();
    let mut want: Vec<&str> = wanted.iter().map(|c| c.as_str()).collect();
    want.sort_unstable();
    if found != want {
        out.update.content = Some(wanted);
    }
    if target.kind == StorageType::Usb && !matches!(text("is_mountpoint"), "yes" | "1") {
        out.update.is_mountpoint = Some(true);
    }
    let disabled = config
        .get("disable")
        .is_some_and(|v| v.as_u64() == Some(1) || v.as_str() == Some("1"));
    out.update.enable = disabled;
    out
}

/// An attached, slow target with no schedule or retention, for unit tests.
#[cfg(test)]
pub(crate) fn test_target(kind: StorageType, durable_id: &str, role: StorageRole) -> StorageTarget {
    use bosun_proto::desired::{StorageClass, TargetPolicy, TargetState};
    StorageTarget {
        kind,
        durable_id: durable_id.into(),
        class: StorageClass::Slow,
        role,
        policy: TargetPolicy {
            schedule: None,
            retention: Default::default(),
            default: false,
            schedulable: true,
        },
        state: TargetState::Attached,
        label: None,
        credentials: None,
        username: None,
        namespace: None,
        fstype: None,
        serial: None,
    }
}

#[cfg(test)]
mod tests;
