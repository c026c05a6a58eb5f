//! A remote server's store as one JSON document, so a Proxmox Backup Server can outlive the
//! node: a test of "the host is lost, a fresh node restores the guests from the offsite PBS"
//! exports the server from the old simulator (`GET /_sim/remotes/{server}/store`,
//! [`SimHandle::export_remote`](crate::SimHandle::export_remote)) and imports it into the new
//! one (`PUT`, [`SimHandle::import_remote`](crate::SimHandle::import_remote)).
//!
//! The document carries the server's spec with its password (the new node's storages must
//! present the same credentials) and every backup in full: its listing fields and the archive
//! (recorded config and file tree) a restore unpacks. An import is checked as a whole before
//! anything changes, and then the server holds exactly the imported backups.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize, Serializer};

use crate::files::{FileTree, GuestFile};
use crate::remotes::{Backups, RemoteSpec};
use crate::state::{Archive, NodeState, Volume};
use crate::{Endpoint, SimError};

/// Everything one remote server holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteStore {
    /// How the server is declared; `None` for an implicit remote (never declared). Unlike
    /// `GET /_sim/remotes`, this carries the password: the server on the new node must accept
    /// the credentials the old node's storages presented. The admin token guards it, and
    /// `Debug` still redacts it.
    #[serde(serialize_with = "spec_with_password")]
    pub spec: Option<RemoteSpec>,
    /// Every (datastore, namespace) the server keeps backups in, empty ones included.
    pub namespaces: Vec<StoredNamespace>,
}

/// The backups of one (datastore, namespace); `""` is the root namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredNamespace {
    pub datastore: String,
    pub namespace: String,
    pub backups: Vec<StoredBackup>,
}

/// One backup snapshot as a PBS storage lists it, plus its archive.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredBackup {
    /// Without the storage: `backup/ct/<vmid>/<YYYY-MM-DDTHH:MM:SSZ>`.
    pub volid: String,
    /// `backup`.
    pub content: String,
    /// `pbs-ct` (`pbs-vm` for a `backup/vm/…` volid).
    pub format: String,
    pub size: u64,
    pub ctime: i64,
    pub vmid: Option<u32>,
    pub notes: Option<String>,
    pub protected: bool,
    /// The fingerprint of the key the backup was encrypted with.
    pub encrypted: Option<String>,
    pub archive: Option<StoredArchive>,
}

/// What a restore unpacks: the recorded config (`pct.conf`) and the root filesystem.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredArchive {
    pub conf: BTreeMap<String, String>,
    /// Every path, `/` included (file contents as hex).
    pub files: Vec<GuestFile>,
    /// The archive cannot be read to its end (see `ArchiveDamage::Unreadable`).
    pub unreadable: bool,
}

/// [`RemoteSpec`] serializes without its password; the store needs it.
fn spec_with_password<S: Serializer>(spec: &Option<RemoteSpec>, s: S) -> Result<S::Ok, S::Error> {
    let Some(spec) = spec else {
        return s.serialize_none();
    };
    let mut value = serde_json::to_value(spec).map_err(serde::ser::Error::custom)?;
    let password = match spec {
        RemoteSpec::Pbs { password, .. } => Some(password.as_str()),
        RemoteSpec::Cifs { password, .. } => password.as_deref(),
        RemoteSpec::Nfs { .. } => None,
    };
    if let (Some(password), Some(fields)) = (password, value.as_object_mut()) {
        fields.insert("password".to_owned(), password.into());
    }
    value.serialize(s)
}

/// The store of `server`; an error if no test declared it and no storage used it.
pub(crate) fn export(st: &NodeState, server: &str) -> Result<RemoteStore, SimError> {
    let (spec, backups) = st
        .remotes
        .store(server)
        .ok_or_else(|| SimError::ExportRemote {
            server: server.to_owned(),
        })?;
    let namespaces = backups
        .iter()
        .map(|((datastore, namespace), volumes)| StoredNamespace {
            datastore: datastore.clone(),
            namespace: namespace.clone(),
            backups: volumes.iter().map(stored_backup).collect(),
        })
        .collect();
    Ok(RemoteStore {
        spec: spec.cloned(),
        namespaces,
    })
}

/// Makes `server` hold exactly `store` (declared with its spec, reachable), or changes
/// nothing when the document does not describe a valid store.
pub(crate) fn import(st: &mut NodeState, server: &str, store: RemoteStore) -> Result<(), SimError> {
    let err = |reason: String| SimError::ImportRemote {
        server: server.to_owned(),
        reason,
    };
    if server.is_empty() || server.len() > 255 || server.chars().any(|c| c.is_control() || c == '/')
    {
        return Err(err(
            "the server name is not a host name or address".to_owned()
        ));
    }
    let mut backups = Backups::new();
    let mut count = 0;
    for ns in store.namespaces {
        let at = format!("datastore '{}' namespace '{}'", ns.datastore, ns.namespace);
        check_location(&ns.datastore, &ns.namespace).map_err(|e| err(format!("{at}: {e}")))?;
        let mut volumes: Vec<Volume> = Vec::with_capacity(ns.backups.len());
        for backup in ns.backups {
            let volid = backup.volid.clone();
            let volume = volume(backup).map_err(|e| err(format!("{at}: '{volid}': {e}")))?;
            if volumes.iter().any(|v| v.volid == volume.volid) {
                return Err(err(format!("{at}: '{volid}' is listed twice")));
            }
            volumes.push(volume);
        }
        count += volumes.len();
        if backups
            .insert((ns.datastore.clone(), ns.namespace.clone()), volumes)
            .is_some()
        {
            return Err(err(format!("{at} is listed twice")));
        }
    }
    tracing::info!(%server, backups = count, "remote server store imported");
    st.remotes.replace(server, store.spec, backups);
    Ok(())
}

fn stored_backup(v: &Volume) -> StoredBackup {
    StoredBackup {
        volid: v.volid.clone(),
        content: v.content.clone(),
        format: v.format.clone(),
        size: v.size,
        ctime: v.ctime,
        vmid: v.vmid,
        notes: v.notes.clone(),
        protected: v.protected,
        encrypted: v.encrypted.clone(),
        archive: v.archive.as_ref().map(|a| StoredArchive {
            conf: a.conf.clone(),
            files: a.files.entries(),
            unreadable: a.unreadable,
        }),
    }
}

/// `backup/<type>/<id>/<time>`, as PVE lists a PBS snapshot below its storage.
static SNAPSHOT_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^backup/(ct|vm)/([1-9][0-9]{0,8})/([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z)$")
        .expect("static regex is valid")
});

/// A stored backup as the node keeps it, once its fields are consistent.
fn volume(b: StoredBackup) -> Result<Volume, String> {
    let caps = SNAPSHOT_RE
        .captures(&b.volid)
        .ok_or("the volid is not backup/ct/<vmid>/<YYYY-MM-DDTHH:MM:SSZ>")?;
    let (kind, id, time) = (&caps[1], &caps[2], &caps[3]);
    time.parse::<jiff::Timestamp>()
        .map_err(|e| format!("the backup time '{time}' is not a time: {e}"))?;
    if b.content != "backup" {
        return Err(format!("content is '{}', not 'backup'", b.content));
    }
    if b.format != format!("pbs-{kind}") {
        return Err(format!("format is '{}', not 'pbs-{kind}'", b.format));
    }
    if b.vmid.is_some_and(|vmid| vmid.to_string() != id) {
        return Err(format!("vmid does not match the volid's {id}"));
    }
    if let Some(fp) = &b.encrypted
        && (fp.is_empty() || fp.chars().any(char::is_control))
    {
        return Err("the encryption key fingerprint is empty or has control characters".into());
    }
    let archive = match b.archive {
        Some(a) => {
            check_conf(&a.conf)?;
            let files = FileTree::from_entries(a.files).map_err(|e| format!("archive: {e}"))?;
            Some(Archive {
                conf: a.conf,
                files,
                unreadable: a.unreadable,
            })
        }
        None => None,
    };
    Ok(Volume {
        volid: b.volid,
        content: b.content,
        format: b.format,
        size: b.size,
        ctime: b.ctime,
        vmid: b.vmid,
        notes: b.notes,
        protected: b.protected,
        encrypted: b.encrypted,
        archive,
    })
}

fn check_location(datastore: &str, namespace: &str) -> Result<(), String> {
    if datastore.is_empty() || datastore.len() > 128 || datastore.chars().any(char::is_control) {
        return Err("the datastore name is empty, too long or has control characters".into());
    }
    let bad_part = namespace
        .split('/')
        .any(|p| p.is_empty() || p.chars().any(char::is_control));
    if namespace.len() > 256 || (!namespace.is_empty() && bad_part) {
        return Err("the namespace is not a '/'-separated path of names".into());
    }
    Ok(())
}

/// A config a restore can render: keys are names, and only the description spans lines.
fn check_conf(conf: &BTreeMap<String, String>) -> Result<(), String> {
    for (key, value) in conf {
        let key_ok = !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        if !key_ok {
            return Err(format!("archive: config key '{key}' is not a name"));
        }
        let multiline = key == "description";
        if value
            .chars()
            .any(|c| c.is_control() && !(multiline && c == '\n'))
        {
            return Err(format!(
                "archive: config value of '{key}' has control characters"
            ));
        }
    }
    Ok(())
}

/// Exports a remote server of a running simulator over the admin endpoint
/// (`GET /_sim/remotes/{server}/store`), for tests and the demo outside the simulator's
/// process; `Ok(None)` for a server it does not know. `client` must trust the simulator's
/// certificate.
pub async fn export_remote_store(
    client: &reqwest::Client,
    endpoint: &Endpoint,
    server: &str,
) -> Result<Option<RemoteStore>, reqwest::Error> {
    let response = client
        .get(store_url(endpoint, server))
        .bearer_auth(&endpoint.admin_token)
        .send()
        .await?;
    if response.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    response.error_for_status()?.json().await.map(Some)
}

/// Imports a remote server's store into a running simulator over the admin endpoint
/// (`PUT /_sim/remotes/{server}/store`); a document it refuses is an error with status 400.
pub async fn import_remote_store(
    client: &reqwest::Client,
    endpoint: &Endpoint,
    server: &str,
    store: &RemoteStore,
) -> Result<(), reqwest::Error> {
    client
        .put(store_url(endpoint, server))
        .bearer_auth(&endpoint.admin_token)
        .json(store)
        .send()
        .await?
        .error_for_status()
        .map(drop)
}

fn store_url(endpoint: &Endpoint, server: &str) -> String {
    // A server is a host name or an address; an IPv6 address has no '/' to escape.
    format!("{}/remotes/{server}/store", endpoint.admin_url)
}

#[cfg(test)]
mod tests;
