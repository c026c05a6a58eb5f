//! Rollbacks and restores bring old bootstraps back.
//!
//! `bootstrap.json` lives in the guest's root filesystem, so a snapshot or a backup carries
//! the one that was current when it was taken. When the guest's current token was minted
//! **after** that moment, the file the guest now holds names a token the agent no longer
//! accepts: the token is revoked here, and the reconciler's "running provisioned guest
//! without a token" action then mints a new one and pushes a fresh bootstrap once the guest
//! runs. When the token is older than the snapshot or backup (the common
//! snapshot-before-deploy case), the file brought back is the current one and nothing
//! changes.
//!
//! The check runs just **before** the rollback or restore: a crash right after it must not
//! leave the restored (older) file next to a newer token in the journal. If the rollback
//! or restore then fails, the only cost is a re-issue.

use jiff::Timestamp;
use serde_json::json;

use crate::ops::journal::{AuditEvent, JournalError, JournalHandle};

/// What the check decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaleCheck {
    /// The guest holds no token: nothing to compare.
    NoToken,
    /// The token predates the restored state: the restored bootstrap carries it.
    Current,
    /// The token was minted after the restored state (or that moment is unknown): revoked,
    /// to be re-issued once the guest runs.
    Revoked,
}

/// Compares `guest_id`'s token with `taken_at` (epoch seconds of the snapshot or the
/// backup; `None` when unknown) and revokes it when the restored bootstrap cannot carry
/// it. `cause` (`rollback`, `restore`) goes into the audit record.
pub async fn revoke_if_minted_after(
    journal: &JournalHandle,
    guest_id: &str,
    vmid: u32,
    taken_at: Option<u64>,
    cause: &'static str,
) -> Result<StaleCheck, JournalError> {
    let Some(token) = journal.token_of_guest(guest_id.to_owned()).await? else {
        return Ok(StaleCheck::NoToken);
    };
    let taken = taken_at.and_then(|s| i64::try_from(s).ok());
    // Same second counts as "after": the restored file may predate the token.
    if let Some(taken) = taken
        && token.minted_at.as_second() < taken
    {
        return Ok(StaleCheck::Current);
    }
    let mut event = AuditEvent::new("bootstrap.stale");
    event.guest_id = Some(guest_id.to_owned());
    event.vmid = Some(vmid);
    event.detail = json!({
        "cause": cause,
        "restored_state_taken_at": taken.and_then(|t| Timestamp::from_second(t).ok()).map(|t| t.to_string()),
        "token_minted_at": token.minted_at.to_string(),
    });
    journal.append_audit(event).await?;
    journal.revoke_token(guest_id.to_owned()).await?;
    tracing::info!(
        guest_id,
        vmid,
        cause,
        "the restored bootstrap predates the guest's token; revoked for re-issue"
    );
    Ok(StaleCheck::Revoked)
}
