//! Looking at Proxmox after a restore whose outcome is unknown (DESIGN §9):
//! its answer was lost, or the agent died before it saw one.
//!
//! While a restore runs the guest's config holds only `lock: create`; the
//! tag that names the provisioning operation arrives when the restore ends.
//! One look at such a config cannot tell whose guest it is, so the look
//! waits for the lock to go before deciding.
//!
//! A request whose answer was lost may not have reached Proxmox yet when the agent looks: a
//! `POST` that outlasted the client's timeout is still carried out when it lands. Absence
//! right after the answer was lost proves nothing, so [`await_landing`] keeps looking, at
//! the guest and at the node's task list, for a landing window after the client gave up.

use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_pve::{Op, Pve, RetryPolicy, Vmid, find_task};

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
    /// No guest and no restore task when the landing window passed: taken as never carried
    /// out, but Proxmox may still carry it out later, so the vmid is watched
    /// ([`LATE_LANDING_WATCH`]) and what lands is destroyed as the operation's own.
    Unlanded,
}

/// How long a restore that did not land within its window is watched for afterwards.
pub const LATE_LANDING_WATCH: Duration = Duration::from_secs(3600);

/// The task type of a container restore (`POST /nodes/{node}/lxc` with `restore=1`).
const RESTORE_TASK: &str = "vzrestore";

/// How long a request whose answer was lost may still land, after the client gave up: twice
/// the client's whole-request timeout (the request was in flight at least that long already).
pub fn landing_window(policy: &RetryPolicy) -> Duration {
    policy.request_timeout.saturating_mul(2)
}

/// Watches for a restore onto `vmid` whose request was sent at `asked_at` and whose answer
/// was lost, until it is proven one way or the other or `window` passes: the guest appears
/// (then settled by [`settle_restore`] within `settle_limit`: ours, someone else's, still
/// running), or a restore task for `vmid` started since `asked_at` is found in the node's
/// task list (followed to its end; one that failed left no guest: `Absent`, proven). When
/// the window passes with neither, the request is taken as never carried out for now
/// (`Unlanded`: the caller keeps watching the vmid).
pub async fn await_landing<P: Pve>(
    pve: &P,
    vmid: Vmid,
    tag: &str,
    asked_at: jiff::Timestamp,
    window: Duration,
    settle_limit: Duration,
) -> Result<RestoreSeen, String> {
    let deadline = tokio::time::Instant::now() + window;
    let mut followed = false;
    loop {
        let seen = settle_restore(pve, vmid, tag, settle_limit).await?;
        if seen != RestoreSeen::Absent || followed {
            return Ok(seen);
        }
        match find_task(pve, vmid, RESTORE_TASK, asked_at).await {
            Ok(Some(upid)) => {
                // The request ran: whatever the task's end, the next look decides (a failed
                // restore removes its guest, so absent then is proven).
                let ended = pve.wait_task(Op::RestoreCt, &upid).await;
                tracing::info!(%vmid, %upid, ok = ended.is_ok(), "the restore whose answer was lost ran");
                followed = true;
                continue;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(%vmid, error = %error_chain(&e), "could not read the node's task list while a lost restore may still land");
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(RestoreSeen::Unlanded);
        }
        tracing::debug!(%vmid, "a restore whose answer was lost has not landed; looking again");
        tokio::time::sleep(LOOK_EVERY).await;
    }
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
            Err(e) if e.is_missing() => return Ok(RestoreSeen::Absent),
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
/// the guest, see [`crate::ops::journal::identity_tag`]): the only proof that the guest at a
/// journaled vmid is still the guest the journal means (DESIGN §5).
pub fn carries_identity(config: &bosun_pve::CtConfig, identity: &str) -> bool {
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

/// Looks at VM `vmid` and says whether it still holds the guest with `identity` (a VM's
/// config has a container's shape).
pub async fn vm_holder<P: bosun_pve::PveQemu>(
    pve: &P,
    vmid: Vmid,
    identity: &str,
) -> Result<Holder, bosun_pve::PveError> {
    match pve.vm_config(vmid).await {
        Err(e) if e.is_missing() => Ok(Holder::Nobody),
        Err(e) => Err(e),
        Ok(config) if carries_identity(&config, identity) => Ok(Holder::Ours),
        Ok(_) => Ok(Holder::Stranger),
    }
}

/// Looks at `vmid` and says whether it still holds the guest with `identity`.
pub async fn holder<P: Pve>(
    pve: &P,
    vmid: Vmid,
    identity: &str,
) -> Result<Holder, bosun_pve::PveError> {
    match pve.ct_config(vmid).await {
        Err(e) if e.is_missing() => Ok(Holder::Nobody),
        Err(e) => Err(e),
        Ok(config) if carries_identity(&config, identity) => Ok(Holder::Ours),
        Ok(_) => Ok(Holder::Stranger),
    }
}
