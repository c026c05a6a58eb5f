//! The cluster storage configuration (`/storage`): create (written, then activated; a storage
//! that fails to activate is not kept), update, read and list, and the activation every user
//! of a storage goes through (`PVE::Storage::activate_storage`). Secrets (`password`, the
//! encryption key file) are kept apart and never shown; the config holds the key's
//! fingerprint, as PVE's does.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};
use sha1::{Digest, Sha1};

use crate::api::{ApiError, Ctx, HandlerResult, data};
use crate::remotes::{Access, mountpoint_of, path_is_mounted};
use crate::state::{NodeState, Storage, StorageKind};

/// Options each type takes besides `storage`, `type`, `content`, `disable`, `shared`,
/// `prune-backups` and its fixed ones (the plugins' `options`).
fn optional_options(stype: &str) -> &'static [&'static str] {
    match stype {
        "dir" => &[
            "nodes",
            "max-protected-backups",
            "is_mountpoint",
            "create-base-path",
            "create-subdirs",
        ],
        "lvmthin" => &["nodes"],
        "nfs" => &[
            "nodes",
            "max-protected-backups",
            "options",
            "create-base-path",
            "create-subdirs",
        ],
        "cifs" => &[
            "nodes",
            "max-protected-backups",
            "options",
            "username",
            "domain",
            "subdir",
            "smbversion",
            "create-base-path",
            "create-subdirs",
        ],
        "pbs" => &[
            "nodes",
            "max-protected-backups",
            "username",
            "fingerprint",
            "namespace",
            "port",
            "encryption-key",
        ],
        _ => &[],
    }
}

/// Options set at create time only.
fn fixed_options(stype: &str) -> &'static [&'static str] {
    match stype {
        "dir" => &["path"],
        "lvmthin" => &["vgname", "thinpool"],
        "nfs" => &["path", "server", "export"],
        "cifs" => &["path", "server", "share"],
        "pbs" => &["server", "datastore"],
        _ => &[],
    }
}

/// Options every type takes that may be deleted.
const COMMON: &[&str] = &["content", "disable", "shared", "prune-backups"];

fn content_rules(stype: &str) -> (&'static [&'static str], &'static [&'static str]) {
    const FILES: &[&str] = &[
        "backup", "images", "import", "iso", "none", "rootdir", "snippets", "vztmpl",
    ];
    match stype {
        "dir" => (&["images", "rootdir"], FILES),
        "nfs" | "cifs" => (&["images"], FILES),
        "lvmthin" => (&["images", "rootdir"], &["images", "rootdir"]),
        _ => (&["backup"], &["backup", "none"]),
    }
}

fn parse_content(stype: &str, raw: Option<&str>) -> Result<BTreeSet<String>, ApiError> {
    let (default, allowed) = content_rules(stype);
    let content: BTreeSet<String> = match raw {
        Some(c) => c
            .split([',', ';', ' '])
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        None => default.iter().map(|s| (*s).to_owned()).collect(),
    };
    if let Some(bad) = content.iter().find(|c| !allowed.contains(&c.as_str())) {
        return Err(ApiError::param(
            "content",
            &format!("storage does not support content type '{bad}'"),
        ));
    }
    Ok(content)
}

/// Activates a storage (PVE's `activate_storage`): `Err` is PVE's message.
pub(crate) fn activate(st: &NodeState, sid: &str) -> Result<(), String> {
    let storage = st
        .storages
        .get(sid)
        .ok_or_else(|| format!("storage '{sid}' does not exist"))?;
    if !storage.enabled {
        return Err(format!("storage '{sid}' is disabled"));
    }
    activate_config(st, sid, storage)
}

/// Activation of an enabled storage's config (also before it is kept, at create).
fn activate_config(st: &NodeState, sid: &str, s: &Storage) -> Result<(), String> {
    let opt = |k: &str| s.options.get(k).map(String::as_str);
    match &s.kind {
        StorageKind::Dir { path } => {
            if let Some(mp) = opt("is_mountpoint").and_then(|v| mountpoint_of(v, path))
                && !path_is_mounted(&mp)
            {
                return Err(format!(
                    "unable to activate storage '{sid}' - directory is expected to be a mount point but is not mounted: '{mp}'"
                ));
            }
            Ok(())
        }
        StorageKind::LvmThin { .. } => Ok(()),
        StorageKind::Pbs { server, datastore } => st.remotes.activate(
            sid,
            server,
            &Access::Pbs {
                datastore,
                username: opt("username").unwrap_or("root@pam"),
                password: s.secrets.password.as_deref(),
                fingerprint: opt("fingerprint"),
                port: opt("port").unwrap_or("8007"),
            },
        ),
        StorageKind::Nfs { server, export, .. } => {
            st.remotes.activate(sid, server, &Access::Nfs { export })
        }
        StorageKind::Cifs { server, share, .. } => st.remotes.activate(
            sid,
            server,
            &Access::Cifs {
                share,
                username: opt("username"),
                password: s.secrets.password.as_deref(),
            },
        ),
    }
}

/// The storage's `storage.cfg` section as the API shows it: no secrets.
pub(crate) fn config_json(sid: &str, s: &Storage) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("storage".into(), json!(sid));
    m.insert("type".into(), json!(s.kind.type_name()));
    m.insert("content".into(), json!(s.content_list()));
    match &s.kind {
        StorageKind::Dir { path } => {
            m.insert("path".into(), json!(path));
        }
        StorageKind::LvmThin { vgname, thinpool } => {
            m.insert("vgname".into(), json!(vgname));
            m.insert("thinpool".into(), json!(thinpool));
        }
        StorageKind::Pbs { server, datastore } => {
            m.insert("server".into(), json!(server));
            m.insert("datastore".into(), json!(datastore));
        }
        StorageKind::Nfs {
            server,
            export,
            path,
        } => {
            m.insert("server".into(), json!(server));
            m.insert("export".into(), json!(export));
            m.insert("path".into(), json!(path));
        }
        StorageKind::Cifs {
            server,
            share,
            path,
        } => {
            m.insert("server".into(), json!(server));
            m.insert("share".into(), json!(share));
            m.insert("path".into(), json!(path));
        }
    }
    if !s.enabled {
        m.insert("disable".into(), json!(1));
    }
    if s.shared {
        m.insert("shared".into(), json!(1));
    }
    if let Some(p) = &s.prune_backups {
        m.insert("prune-backups".into(), json!(p));
    }
    for (k, v) in &s.options {
        let value = match k.as_str() {
            "port" | "max-protected-backups" => {
                v.parse::<i64>().map_or_else(|_| json!(v), |n| json!(n))
            }
            _ => json!(v),
        };
        m.insert(k.clone(), value);
    }
    m
}

/// SHA-1 of the non-secret config of every storage (`storage.cfg`'s digest).
fn digest(st: &NodeState) -> String {
    let mut h = Sha1::new();
    for (sid, s) in &st.storages {
        h.update(Value::Object(config_json(sid, s)).to_string().as_bytes());
        h.update(b"\n");
    }
    hex::encode(h.finalize())
}

fn visible(ctx: &Ctx, st: &NodeState, sid: &str) -> bool {
    let path = format!("/storage/{sid}");
    st.access.has(&ctx.authid, &path, "Datastore.Audit")
        || st.access.has(&ctx.authid, &path, "Datastore.AllocateSpace")
}

/// `GET /storage[?type=]`: the storages the caller may audit or allocate space on.
pub(crate) fn index(ctx: &Ctx) -> HandlerResult {
    let st = ctx.shared.state.lock();
    let digest = digest(&st);
    let items: Vec<Value> = st
        .storages
        .iter()
        .filter(|(sid, _)| visible(ctx, &st, sid))
        .filter(|(_, s)| ctx.get("type").is_none_or(|t| t == s.kind.type_name()))
        .map(|(sid, s)| {
            let mut m = config_json(sid, s);
            m.insert("digest".into(), json!(digest));
            Value::Object(m)
        })
        .collect();
    data(Value::Array(items))
}

/// `GET /storage/{storage}`.
pub(crate) fn read(ctx: &Ctx) -> HandlerResult {
    let sid = ctx.required("storage")?;
    let st = ctx.shared.state.lock();
    let s = st
        .storages
        .get(sid)
        .ok_or_else(|| ApiError::internal(&format!("storage '{sid}' does not exist")))?;
    let mut m = config_json(sid, s);
    m.insert("digest".into(), json!(digest(&st)));
    data(Value::Object(m))
}

/// `encryption-key`: the key file JSON or `autogen`; returns (file, fingerprint or `1`).
fn encryption_key(ctx: &Ctx, value: &str) -> Result<(String, String), String> {
    let file = if value == "autogen" {
        autogen_key(ctx)
    } else {
        value.to_owned()
    };
    let decoded: Value = serde_json::from_str(&file)
        .ok()
        .filter(|v: &Value| v.get("data").is_some())
        .ok_or_else(|| {
            "Value does not seems like a valid, JSON formatted encryption key!".to_owned()
        })?;
    let fingerprint = decoded
        .get("fingerprint")
        .and_then(Value::as_str)
        .map_or_else(|| "1".to_owned(), str::to_owned);
    Ok((file, fingerprint))
}

/// `proxmox-backup-client key create --kdf none`: a fresh key file.
fn autogen_key(ctx: &Ctx) -> String {
    let key: [u8; 32] = rand::random();
    let fp = sha2::Sha256::digest(key);
    let fingerprint: Vec<String> = fp.iter().map(|b| format!("{b:02x}")).collect();
    let now = ctx
        .shared
        .clock
        .now()
        .strftime("%Y-%m-%dT%H:%M:%S%:z")
        .to_string();
    json!({
        "kdf": null,
        "created": now,
        "modified": now,
        "data": hex::encode(key),
        "fingerprint": fingerprint.join(":"),
    })
    .to_string()
}

/// `POST /storage`: the config is written, then activated when enabled; a failed activation
/// removes it again and answers with the error.
pub(crate) fn create(ctx: &Ctx) -> HandlerResult {
    let sid = ctx.required("storage")?.to_owned();
    let stype = ctx.required("type")?;
    let need = |k: &str| ctx.required(k).map(str::to_owned);
    let mount = || {
        ctx.get("path")
            .map_or_else(|| format!("/mnt/pve/{sid}"), str::to_owned)
    };
    let kind = match stype {
        "dir" => {
            let path = need("path")?;
            if !path.starts_with('/')
                || !path
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-/_.@".contains(&b))
            {
                return Err(ApiError::internal(&format!(
                    "illegal path for directory storage: {path}"
                )));
            }
            let trimmed = path.trim_end_matches('/');
            StorageKind::Dir {
                path: if trimmed.is_empty() {
                    "/".to_owned()
                } else {
                    trimmed.to_owned()
                },
            }
        }
        "lvmthin" => StorageKind::LvmThin {
            vgname: need("vgname")?,
            thinpool: need("thinpool")?,
        },
        "pbs" => {
            need("username")?;
            StorageKind::Pbs {
                server: need("server")?,
                datastore: need("datastore")?,
            }
        }
        "nfs" => StorageKind::Nfs {
            server: need("server")?,
            export: need("export")?,
            path: mount(),
        },
        "cifs" => StorageKind::Cifs {
            server: need("server")?,
            share: need("share")?,
            path: mount(),
        },
        other => {
            return Err(ApiError::param(
                "type",
                &format!("storage type '{other}' is not supported here"),
            ));
        }
    };
    check_known_options(ctx, stype, true)?;
    let content = parse_content(stype, ctx.get("content"))?;
    let mut storage = Storage::new(kind, content, 1 << 40);
    storage.enabled = !ctx.flag("disable");
    storage.shared = ctx.flag("shared") || matches!(stype, "pbs" | "nfs" | "cifs");
    storage.prune_backups = ctx.get("prune-backups").map(str::to_owned);
    for key in optional_options(stype) {
        if *key != "encryption-key"
            && let Some(v) = ctx.get(key)
        {
            storage.options.insert((*key).to_owned(), v.to_owned());
        }
    }
    storage.secrets.password = ctx.get("password").map(str::to_owned);
    let failed = |msg: &str| ApiError::internal(&format!("create storage failed: {msg}"));
    let mut returned = Map::new();
    if stype == "pbs"
        && let Some(value) = ctx.get("encryption-key")
    {
        let (file, fingerprint) = encryption_key(ctx, value).map_err(|e| failed(&e))?;
        storage.options.insert("encryption-key".into(), fingerprint);
        returned.insert("encryption-key".into(), json!(file));
        storage.secrets.encryption_key = Some(file);
    }
    let mut st = ctx.shared.state.lock();
    if st.storages.contains_key(&sid) {
        return Err(failed(&format!("storage ID '{sid}' already defined")));
    }
    if storage.enabled {
        activate_config(&st, &sid, &storage).map_err(|e| failed(&e))?;
    }
    crate::storage_delete::take_back(&mut st, &sid, &mut storage);
    st.storages.insert(sid.clone(), storage);
    tracing::info!(storage = %sid, r#type = stype, "storage added");
    let mut out = json!({ "storage": sid, "type": stype });
    if !returned.is_empty() {
        out["config"] = Value::Object(returned);
    }
    data(out)
}

/// Refuses options the type does not take (PVE's JSONSchema message).
fn check_known_options(ctx: &Ctx, stype: &str, create: bool) -> Result<(), ApiError> {
    let optional = optional_options(stype);
    let fixed = fixed_options(stype);
    let mut errors = BTreeMap::new();
    for key in &ctx.explicit {
        let known = ["storage", "type", "digest", "delete", "password"].contains(&key.as_str())
            || COMMON.contains(&key.as_str())
            || optional.contains(&key.as_str())
            || (create && fixed.contains(&key.as_str()));
        let password_ok = key != "password" || matches!(stype, "pbs" | "cifs");
        if !known || !password_ok {
            if !create && fixed.contains(&key.as_str()) {
                continue;
            }
            errors.insert(
                key.clone(),
                "property is not defined in schema and the schema does not allow additional properties\n".to_owned(),
            );
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::params(errors))
    }
}

/// `PUT /storage/{storage}`: changes options (not the fixed ones), secrets included; `delete`
/// removes options; `digest` guards against concurrent edits. No activation happens.
pub(crate) fn update(ctx: &Ctx) -> HandlerResult {
    let sid = ctx.required("storage")?.to_owned();
    let failed = |msg: &str| ApiError::internal(&format!("update storage failed: {msg}"));
    let mut st = ctx.shared.state.lock();
    if let Some(d) = ctx.get("digest")
        && d != digest(&st)
    {
        return Err(failed(
            "detected modified configuration - file changed by other user? Try again.",
        ));
    }
    let stype = st
        .storages
        .get(&sid)
        .map(|s| s.kind.type_name())
        .ok_or_else(|| failed(&format!("storage '{sid}' does not exist")))?;
    check_known_options(ctx, stype, false)?;
    let fixed = fixed_options(stype);
    if let Some(key) = fixed.iter().find(|k| ctx.explicit.contains(**k)) {
        return Err(failed(&format!(
            "can't change value of fixed parameter '{key}'"
        )));
    }
    let delete: Vec<String> = ctx
        .get("delete")
        .map(|d| {
            d.split([',', ';', ' '])
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let optional = optional_options(stype);
    let secret_keys: &[&str] = match stype {
        "pbs" => &["password"],
        "cifs" => &["password"],
        _ => &[],
    };
    for key in &delete {
        let k = key.as_str();
        if fixed.contains(&k) {
            return Err(failed(&format!("unable to delete fixed option '{k}'")));
        }
        if !COMMON.contains(&k) && !optional.contains(&k) && !secret_keys.contains(&k) {
            return Err(failed(&format!("no such option '{k}'")));
        }
        if ctx.explicit.contains(k) {
            return Err(failed(&format!(
                "cannot set and delete property '{k}' at the same time!"
            )));
        }
    }
    let mut returned = Map::new();
    let key_update = match ctx.get("encryption-key") {
        Some(value) if stype == "pbs" => {
            let (file, fingerprint) = encryption_key(ctx, value).map_err(|e| failed(&e))?;
            returned.insert("encryption-key".into(), json!(file));
            Some((file, fingerprint))
        }
        _ => None,
    };
    let content = match ctx.get("content") {
        Some(c) => Some(parse_content(stype, Some(c))?),
        None => None,
    };
    let Some(s) = st.storages.get_mut(&sid) else {
        return Err(failed(&format!("storage '{sid}' does not exist")));
    };
    for key in &delete {
        match key.as_str() {
            "content" => s.content = parse_content(stype, None)?,
            "disable" => s.enabled = true,
            "shared" => s.shared = false,
            "prune-backups" => s.prune_backups = None,
            "password" => s.secrets.password = None,
            "encryption-key" => {
                s.secrets.encryption_key = None;
                s.options.remove("encryption-key");
            }
            other => {
                s.options.remove(other);
            }
        }
    }
    if let Some(c) = content {
        s.content = c;
    }
    if ctx.get("disable").is_some() {
        s.enabled = !ctx.flag("disable");
    }
    if ctx.get("shared").is_some() {
        s.shared = ctx.flag("shared");
    }
    if let Some(p) = ctx.get("prune-backups") {
        s.prune_backups = Some(p.to_owned());
    }
    if let Some(p) = ctx.get("password") {
        s.secrets.password = Some(p.to_owned());
    }
    if let Some((file, fingerprint)) = key_update {
        s.secrets.encryption_key = Some(file);
        s.options.insert("encryption-key".into(), fingerprint);
    }
    for key in optional {
        if *key != "encryption-key"
            && let Some(v) = ctx.get(key)
        {
            s.options.insert((*key).to_owned(), v.to_owned());
        }
    }
    tracing::info!(storage = %sid, "storage updated");
    let mut out = json!({ "storage": sid, "type": stype });
    if !returned.is_empty() {
        out["config"] = Value::Object(returned);
    }
    data(out)
}
