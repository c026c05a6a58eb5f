//! Damaged archives, as a restore test meets them: one that cannot be read to its end (a
//! truncated file, a PBS chunk that fails verification), whose restore fails as `unpack`
//! describes; one whose file tree lacks `/sbin/init` (a backup taken mid-upgrade), which
//! restores but does not start; and one whose application data is damaged (a torn copy of a
//! file the app was writing), which restores and boots: only the guest's own check finds it.

use serde::{Deserialize, Serialize};

use crate::files::{INIT, canonical};
use crate::state::NodeState;
use crate::{Endpoint, SimError};

/// How an archive is damaged (`"unreadable"`, `"no_init"`,
/// `{"corrupt_data": {"path": "/srv/…"}}` on the admin endpoint).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArchiveDamage {
    /// Every restore (or create, for a template) from it fails while unpacking; listings still
    /// show it with its size.
    Unreadable,
    /// Its file tree has no `/sbin/init`: it restores, and the CT does not start.
    NoInit,
    /// The regular file at `path` in its tree has other bytes than the guest wrote (its first
    /// byte flipped; an empty file gains one): it restores and starts like a whole one.
    CorruptData {
        /// The file, absolute inside the guest.
        path: String,
    },
}

/// Damages the archive (backup or template) `volid` names.
pub(crate) fn apply(
    st: &mut NodeState,
    volid: &str,
    damage: ArchiveDamage,
) -> Result<(), SimError> {
    let archive = st
        .volume_mut(volid)
        .and_then(|v| v.archive.as_mut())
        .ok_or_else(|| SimError::DamageArchive {
            volid: volid.to_owned(),
        })?;
    match &damage {
        ArchiveDamage::Unreadable => archive.unreadable = true,
        ArchiveDamage::NoInit => {
            // `remove_file` only fails for a directory, which the seeded trees never have here.
            let _ = archive.files.remove_file(INIT);
        }
        ArchiveDamage::CorruptData { path } => {
            let mut bytes = canonical(path)
                .ok()
                .and_then(|p| archive.files.content(&p).map(<[u8]>::to_vec))
                .ok_or_else(|| SimError::DamageData {
                    volid: volid.to_owned(),
                    path: path.clone(),
                })?;
            match bytes.first_mut() {
                Some(first) => *first ^= 0xff,
                None => bytes.push(0xff),
            }
            // The path was just read as a regular file: writing it cannot fail.
            let _ = archive
                .files
                .write(&canonical(path).unwrap_or_default(), bytes, 0o644);
        }
    }
    tracing::info!(volid, ?damage, "archive damaged");
    Ok(())
}

/// The body of `POST /_sim/archives/damage`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct DamageRequest {
    pub(crate) volid: String,
    pub(crate) damage: ArchiveDamage,
}

/// Damages an archive of a running simulator over the admin endpoint
/// (`POST /_sim/archives/damage`), for tests outside the simulator's process. An unknown volid
/// is an error with status 404. `client` must trust the simulator's certificate.
pub async fn damage_archive_remote(
    client: &reqwest::Client,
    endpoint: &Endpoint,
    volid: &str,
    damage: ArchiveDamage,
) -> Result<(), reqwest::Error> {
    client
        .post(format!("{}/archives/damage", endpoint.admin_url))
        .bearer_auth(&endpoint.admin_token)
        .json(&DamageRequest {
            volid: volid.to_owned(),
            damage,
        })
        .send()
        .await?
        .error_for_status()
        .map(drop)
}
