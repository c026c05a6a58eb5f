//! Looking at Proxmox after a restore whose outcome is unknown (DESIGN §9):
//! its answer was lost, or the agent died before it saw one.
//!
//! While a restore runs the guest's config holds only `lock: create`; the
//! tag that names the provisioning operation arrives when the restore ends.
//! One look at such a config cannot tell whose guest it is, so the look
//! waits for the lock to go before deciding.

use std::time::Duration;

use super::observe::is_missing;
use crate::pve::{Pve, Vmid};
use bosun_proto::error_chain;

/// Pause between two looks.
const LOOK_EVERY: Duration = Duration::from_millis(200);

/// What Proxmox shows of a restore onto `vmid` once it has settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreSeen {
    /// The guest exists, unlocked, and carries the operation's tag: the restore was ours
    /// and it finished.
    Ours,
    /// No guest with this vmid: the restore never happened, or failed and was removed.
    Absent,
    /// A guest without the operation's tag: someone else's.
    Foreign,
    /// Still `lock: create` when the look gave up: a restore still running.
    StillRunning,
}

/// Whether a config's `tags` hold `tag`.
pub fn has_tag(tags: Option<&str>, tag: &str) -> bool {
    tags.is_some_and(|tags| tags.split([';', ',', ' ']).any(|t| t == tag))
}

/// Looks at `vmid` until no restore is in flight on it (or `limit` passes), then says
/// whether the guest carries `tag`. Transient read failures are looked past until
/// `limit`; the last one is returned if the look never got an answer.
pub async fn settle_restore<P: Pve>(
    pve: &P,
    vmid: Vmid,
    tag: &str,
    limit: Duration,
) -> Result<RestoreSeen, String> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let seen = match pve.ct_config(vmid).await {
            Err(e) if is_missing(&e) => return Ok(RestoreSeen::Absent),
            Err(e) if e.is_transient() || e.status().is_some_and(|s| s >= 500) => {
                if tokio::time::Instant::now() >= deadline {
                    return Err(error_chain(&e));
                }
                None
            }
            Err(e) => return Err(error_chain(&e)),
            Ok(config) if config.lock().as_deref() == Some("create") => {
                Some(RestoreSeen::StillRunning)
            }
            Ok(config) if has_tag(config.get_str("tags").as_deref(), tag) => {
                return Ok(RestoreSeen::Ours);
            }
            Ok(_) => return Ok(RestoreSeen::Foreign),
        };
        if tokio::time::Instant::now() >= deadline {
            return Ok(seen.unwrap_or(RestoreSeen::StillRunning));
        }
        tracing::debug!(%vmid, "a restore is still in flight on the guest; looking again");
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// Whether a guest's config carries `identity` (the tag the agent wrote when it created
/// the guest, see [`crate::journal::identity_tag`]): the only proof that the guest at a
/// journaled vmid is still the guest the journal means (DESIGN §5).
pub fn carries_identity(config: &crate::pve::CtConfig, identity: &str) -> bool {
    has_tag(config.get_str("tags").as_deref(), identity)
}

/// What holds a vmid the journal records, by the identity the agent wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// No guest has the vmid.
    Nobody,
    /// The guest carries the journaled identity: it is the journal's guest.
    Ours,
    /// A guest without the journaled identity: never touched on the journal's behalf.
    Stranger,
}

/// Looks at `vmid` and says whether it still holds the guest with `identity`.
pub async fn holder<P: Pve>(
    pve: &P,
    vmid: Vmid,
    identity: &str,
) -> Result<Holder, crate::pve::PveError> {
    match pve.ct_config(vmid).await {
        Err(e) if is_missing(&e) => Ok(Holder::Nobody),
        Err(e) => Err(e),
        Ok(config) if carries_identity(&config, identity) => Ok(Holder::Ours),
        Ok(_) => Ok(Holder::Stranger),
    }
}
