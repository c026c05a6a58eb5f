//! `GET /nodes/{node}/vzdump/extractconfig`: the guest configuration a backup archive holds,
//! as Proxmox reads it back — `./etc/vzdump/pct.conf` from a file archive, the snapshot's
//! `pct.conf.blob` from PBS (decrypted with the storage's key, which must be the one the
//! snapshot was made with); a VM's archive answers its `qemu-server.conf` (in the VMA; on PBS
//! `qemu-server.conf.blob`) the same way. What comes back is the archive's own: an archive someone
//! replaced answers with the configuration of the guest it came from.

use serde_json::json;

use crate::api::{ApiError, Ctx, HandlerResult, data};
use crate::state::{StorageKind, render_section};
use crate::storage::{accessible_volume, volid_param};

/// Answers the archive's recorded configuration as text (`description` as `#` lines first,
/// then `key: value` lines), or PVE's refusal: no access, not a backup, a wrong key.
pub(crate) fn extract_config(ctx: &Ctx) -> HandlerResult {
    let volid = volid_param(ctx)?;
    let st = ctx.shared.state.lock();
    let (sid, volume) = accessible_volume(ctx, &st, &volid)?;
    if volume.content != "backup" {
        return Err(ApiError::internal(&format!(
            "cannot determine backup type of '{volid}'"
        )));
    }
    let storage = st.storages.get(&sid);
    if storage.is_some_and(|s| matches!(s.kind, StorageKind::Pbs { .. }))
        && let Some(line) = crate::unpack::key_mismatch(
            volume.encrypted.as_deref(),
            storage
                .and_then(|s| s.options.get("encryption-key"))
                .map(String::as_str),
        )
    {
        return Err(ApiError::internal(&line));
    }
    let archive = volume.archive.as_ref().ok_or_else(|| {
        ApiError::internal(&format!("unable to extract the configuration of '{volid}'"))
    })?;
    data(json!(render_section(&archive.conf)))
}
