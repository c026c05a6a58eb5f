//! `DELETE /storage/{storage}`: the storage's definition leaves `storage.cfg`; its data stays
//! on the target, as in PVE (`PVE::API2::Storage::Config::delete`). The volumes of a
//! directory, NFS or CIFS storage are kept by location here and come back when a storage
//! is added again at the same place; a PBS storage's backups live on its remote anyway.
//!
//! PVE's words: an unknown storage fails with `delete storage failed: storage '<id>' does
//! not exist` (HTTP 500). PVE does not look at guests whose volumes live on the storage;
//! it refuses only a storage that is the `base` of another, which the simulator does not
//! model.

use serde_json::Value;

use crate::api::{ApiError, Ctx, HandlerResult, data};
use crate::state::{NodeState, Storage, StorageKind, Volume};

/// Where a storage's data lives, for the kinds whose volumes the node itself holds.
fn location(kind: &StorageKind) -> Option<String> {
    match kind {
        StorageKind::Dir { path } => Some(format!("dir:{path}")),
        StorageKind::LvmThin { vgname, thinpool } => Some(format!("lvmthin:{vgname}/{thinpool}")),
        StorageKind::Nfs { server, export, .. } => Some(format!("nfs:{server}:{export}")),
        StorageKind::Cifs { server, share, .. } => Some(format!("cifs:{server}/{share}")),
        StorageKind::Pbs { .. } => None,
    }
}

/// `DELETE /storage/{storage}`.
pub(crate) fn delete(ctx: &Ctx) -> HandlerResult {
    let sid = ctx.required("storage")?.to_owned();
    let mut st = ctx.shared.state.lock();
    let Some(storage) = st.storages.remove(&sid) else {
        return Err(ApiError::internal(&format!(
            "delete storage failed: storage '{sid}' does not exist"
        )));
    };
    if let Some(place) = location(&storage.kind)
        && !storage.volumes.is_empty()
    {
        st.left_on_targets.insert(place, storage.volumes);
    }
    tracing::info!(storage = %sid, "storage removed");
    data(Value::Null)
}

/// Gives a storage added at a place a removed one left data at its volumes back, renamed to
/// the new storage id.
pub(crate) fn take_back(st: &mut NodeState, sid: &str, storage: &mut Storage) {
    let Some(place) = location(&storage.kind) else {
        return;
    };
    let Some(volumes) = st.left_on_targets.remove(&place) else {
        return;
    };
    storage.volumes.extend(volumes.into_iter().map(|v| {
        let name = v.volid.split_once(':').map_or("", |(_, n)| n).to_owned();
        Volume {
            volid: format!("{sid}:{name}"),
            ..v
        }
    }));
}
