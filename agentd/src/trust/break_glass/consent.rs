//! Customer consent to break-glass (DESIGN §12, decision 0080): a guest's controller grants,
//! for a bounded time, or revokes its consent to support commands that touch its guest, through
//! the local API; nothing else can.
//!
//! [`ConsentBook`] keeps each guest's consent and writes them all to the consent file
//! ([`bosun_support::consent`]) on every change, atomically, before it answers: the support
//! shell reads that file before every command touching a guest and runs it only while that
//! guest's consent lasts by its own clock, so a revoke holds from the next command on, and a
//! consent ends at its deadline even if the agent is gone. Each grant and revoke is audited
//! as the guest's own row (`break_glass.consent_granted`, `break_glass.consent_revoked`),
//! which its controller reads through `GET /v1/audit` and the hub through the audit tail.
//!
//! Who may consent for whom: the caller's guest and vmid come from its token alone (the local
//! API's `Caller`); the hub has no route to consent, and no job or desired state carries one.
//! A consent is the guest's, not its vmid's: each entry names the guest's id and the identity
//! tag the agent wrote into its Proxmox config, and the shell honours it only while the guest at
//! the vmid carries that tag. The book drops every entry whose guest no longer holds its vmid in
//! the agent's records (decommissioned, forgotten, or the vmid given to another guest) or whose
//! deadline passed: at start, and whenever the journal's guests change
//! ([`ConsentBook::follow_guests`]).

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_support::consent::{Consent, ConsentFile, ConsentFileError};
use jiff::Timestamp;
use serde_json::json;
use tokio::sync::{Mutex, watch};
use tokio_util::sync::CancellationToken;

use crate::clock::SharedClock;
use crate::ops::journal::{AuditEvent, JournalError, JournalHandle};

/// The audit row of a granted consent.
pub const GRANTED_ACTION: &str = "break_glass.consent_granted";
/// The audit row of a revoked consent.
pub const REVOKED_ACTION: &str = "break_glass.consent_revoked";
/// Longest consent a controller may grant: as long as the longest door.
pub const MAX_CONSENT_SECONDS: u64 = bosun_proto::break_glass::MAX_BREAK_GLASS_SECONDS;
/// Shortest consent.
pub const MIN_CONSENT_SECONDS: u64 = 1;
/// Longest reason kept, in characters.
pub const MAX_CONSENT_REASON_CHARS: usize = 200;

/// Why a consent could not be granted or revoked.
#[derive(Debug, thiserror::Error)]
pub enum ConsentError {
    /// The consent file could not be written (the consent is unchanged).
    #[error("writing the consent file {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The change could not be audited (a grant is undone; a revoke stands).
    #[error("auditing a break-glass consent")]
    Audit(#[source] JournalError),
    /// The agent's record of who holds the vmid could not be read (nothing granted).
    #[error("reading who holds vmid {vmid}")]
    Holder {
        /// The guest's vmid.
        vmid: u32,
        /// Cause.
        #[source]
        source: JournalError,
    },
    /// The agent's records do not say the caller's guest holds its vmid (nothing granted).
    #[error("guest {guest_id} does not hold vmid {vmid} in the agent's records")]
    NotHolder {
        /// The caller's guest.
        guest_id: String,
        /// The caller's vmid.
        vmid: u32,
    },
}

/// Keeps the guests' consents and the file the support shell reads. Cloning shares it.
#[derive(Debug, Clone)]
pub struct ConsentBook {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    journal: JournalHandle,
    clock: SharedClock,
    /// What the file holds; one change at a time.
    file: Mutex<ConsentFile>,
}

/// A guest's live consent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveConsent {
    /// When it ends.
    pub expires_at: Timestamp,
}

impl ConsentBook {
    /// Reads back the consents of `path` that still hold (their guest holds its vmid in the
    /// journal under the same identity, their deadline is ahead) and writes the file again with only those. An
    /// unreadable file holds no consent; a file that cannot be written is logged (every grant
    /// then fails until it can be), and the agent runs on.
    pub async fn open(path: PathBuf, journal: JournalHandle, clock: SharedClock) -> Self {
        let read = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || ConsentFile::read(&path))
                .await
                .unwrap_or_else(|e| Err(ConsentFileError::Read(std::io::Error::other(e))))
        };
        let mut file = read.unwrap_or_else(|e| {
            tracing::warn!(path = %path.display(), error = %error_chain(&e), "the break-glass consent file is unreadable; every guest starts without consent");
            ConsentFile::default()
        });
        let now = unix_seconds(clock.now());
        file.consents = still_held(&journal, std::mem::take(&mut file.consents), now).await;
        if let Err(e) = write_file(&path, &file).await {
            tracing::error!(error = %error_chain(&e), "the break-glass consent file cannot be written; no guest can consent until it can");
        }
        Self {
            inner: Arc::new(Inner {
                path,
                journal,
                clock,
                file: Mutex::new(file),
            }),
        }
    }

    /// The consent file's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// `guest_id`'s consent, while it lasts.
    pub async fn current(&self, guest_id: &str) -> Option<LiveConsent> {
        let now = unix_seconds(self.inner.clock.now());
        let file = self.inner.file.lock().await;
        file.consents
            .iter()
            .find(|c| c.guest_id == guest_id && c.expires_at > now)
            .map(live)
    }

    /// Grants consent for guest `guest_id` (at `vmid`) for `duration` (within
    /// [`MIN_CONSENT_SECONDS`]..=[`MAX_CONSENT_SECONDS`], checked by the caller), replacing its
    /// earlier one; in the file before this returns, audited as the guest's row.
    pub async fn grant(
        &self,
        guest_id: &str,
        vmid: u32,
        duration: Duration,
        reason: Option<String>,
    ) -> Result<LiveConsent, ConsentError> {
        let identity = match self.inner.journal.provenance(vmid).await {
            Ok(Some(p)) if p.guest_id() == Some(guest_id) => p.identity().to_owned(),
            Ok(_) => {
                return Err(ConsentError::NotHolder {
                    guest_id: guest_id.to_owned(),
                    vmid,
                });
            }
            Err(source) => return Err(ConsentError::Holder { vmid, source }),
        };
        let mut file = self.inner.file.lock().await;
        let now = self.inner.clock.now();
        // Whole seconds, rounded up: a consent lasts at least what the guest asked for.
        let expires_at = unix_seconds(now)
            .saturating_add(duration.as_secs())
            .saturating_add(u64::from(now.subsec_nanosecond() > 0));
        let before = file.clone();
        // One entry per guest and per vmid: the caller holds `vmid` now, whoever held it.
        file.consents.retain(|c| {
            c.guest_id != guest_id && c.vmid != vmid && c.expires_at > unix_seconds(now)
        });
        let consent = Consent {
            vmid,
            guest_id: guest_id.to_owned(),
            identity,
            expires_at,
        };
        file.consents.push(consent.clone());
        if let Err(e) = write_file(&self.inner.path, &file).await {
            // Not in the file, so not granted: the book forgets it too, or the next write
            // (another guest's) would put it in the file unaudited.
            *file = before;
            return Err(e);
        }
        let mut event = AuditEvent::new(GRANTED_ACTION);
        event.guest_id = Some(guest_id.to_owned());
        event.vmid = Some(vmid);
        event.detail = json!({
            "expires_at": live(&consent).expires_at.to_string(),
            "duration_seconds": duration.as_secs(),
            "reason": reason,
        });
        if let Err(e) = self.inner.journal.append_audit(event).await {
            // Unaudited consent is no consent: put the file back as it was.
            *file = before;
            if let Err(undo) = write_file(&self.inner.path, &file).await {
                tracing::error!(guest_id, vmid, error = %error_chain(&undo), "could not undo an unaudited break-glass consent");
            }
            return Err(ConsentError::Audit(e));
        }
        tracing::warn!(
            guest_id,
            vmid,
            expires_at = consent.expires_at,
            "break-glass consent granted"
        );
        Ok(live(&consent))
    }

    /// Revokes `guest_id`'s consent; gives whether a live one was revoked. The file no longer
    /// holds it when this returns (even when the audit row could not be written).
    pub async fn revoke(&self, guest_id: &str, vmid: u32) -> Result<bool, ConsentError> {
        let mut file = self.inner.file.lock().await;
        let now = unix_seconds(self.inner.clock.now());
        let was_live = file
            .consents
            .iter()
            .any(|c| c.guest_id == guest_id && c.expires_at > now);
        let before = file.clone();
        file.consents
            .retain(|c| c.guest_id != guest_id && c.vmid != vmid && c.expires_at > now);
        if let Err(e) = write_file(&self.inner.path, &file).await {
            // Still in the file, so still granted: the book says so too.
            *file = before;
            return Err(e);
        }
        let mut event = AuditEvent::new(REVOKED_ACTION);
        event.guest_id = Some(guest_id.to_owned());
        event.vmid = Some(vmid);
        event.detail = json!({ "was_granted": was_live });
        self.inner
            .journal
            .append_audit(event)
            .await
            .map_err(ConsentError::Audit)?;
        tracing::warn!(guest_id, vmid, was_live, "break-glass consent revoked");
        Ok(was_live)
    }
}

impl ConsentBook {
    /// Drops every consent whose guest no longer holds its vmid in the journal (or holds it
    /// under another identity) or whose deadline passed; the file is written again when one
    /// goes. Gives how many went.
    pub async fn settle(&self) -> Result<usize, ConsentError> {
        let mut file = self.inner.file.lock().await;
        let now = unix_seconds(self.inner.clock.now());
        let kept = still_held(&self.inner.journal, file.consents.clone(), now).await;
        let gone = file.consents.len() - kept.len();
        if gone == 0 {
            return Ok(0);
        }
        let before = std::mem::replace(&mut file.consents, kept);
        if let Err(e) = write_file(&self.inner.path, &file).await {
            file.consents = before;
            return Err(e);
        }
        for consent in before.iter().filter(|c| !file.consents.contains(c)) {
            tracing::warn!(
                guest_id = consent.guest_id,
                vmid = consent.vmid,
                "break-glass consent dropped: its guest no longer holds the vmid, or it ended"
            );
        }
        Ok(gone)
    }

    /// Settles the book ([`ConsentBook::settle`]) each time `guests` says the journal's guests
    /// changed (a decommission retired one, a guest was created or recovered at a vmid), until
    /// `cancel`. A file that cannot be written is tried again at the next change, and the shell
    /// refuses a consent whose guest no longer carries its identity meanwhile.
    pub async fn follow_guests(self, mut guests: watch::Receiver<u64>, cancel: CancellationToken) {
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                changed = guests.changed() => if changed.is_err() { return },
            }
            if let Err(e) = self.settle().await {
                tracing::error!(error = %error_chain(&e), "could not drop the consents of guests that left their vmid");
            }
        }
    }
}

/// The consents among `consents` whose guest holds its vmid in the journal under the same
/// identity, and whose deadline is after `now`. A record that cannot be read keeps no consent.
async fn still_held(journal: &JournalHandle, consents: Vec<Consent>, now: u64) -> Vec<Consent> {
    let mut kept = Vec::with_capacity(consents.len());
    for consent in consents {
        let holder = journal.provenance(consent.vmid).await.ok().flatten();
        let holds = holder.is_some_and(|p| {
            p.guest_id() == Some(consent.guest_id.as_str()) && p.identity() == consent.identity
        });
        if holds && consent.expires_at > now {
            kept.push(consent);
        }
    }
    kept
}

fn live(consent: &Consent) -> LiveConsent {
    let seconds = i64::try_from(consent.expires_at).unwrap_or(i64::MAX);
    LiveConsent {
        expires_at: Timestamp::from_second(seconds).unwrap_or(Timestamp::MAX),
    }
}

/// `at` in whole Unix seconds (0 before 1970).
fn unix_seconds(at: Timestamp) -> u64 {
    u64::try_from(at.as_second()).unwrap_or(0)
}

/// Writes `file` to a sibling of `path` (0640: the break-glass account reads it through the
/// directory's group), syncs it and renames it over `path`.
async fn write_file(path: &Path, file: &ConsentFile) -> Result<(), ConsentError> {
    let text = file.render();
    let target = path.to_path_buf();
    let written = tokio::task::spawn_blocking(move || write_atomic(&target, text.as_bytes()))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
    written.map_err(|source| ConsentError::Write {
        path: path.to_path_buf(),
        source,
    })
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), std::io::Error> {
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        // `create_new` follows no link at the temporary name.
        .mode(0o640)
        .open(&tmp)?;
    // Set on the open file: the agent's umask (0077) would leave the group no read.
    file.set_permissions(std::fs::Permissions::from_mode(0o640))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent()
        && let Ok(d) = std::fs::File::open(dir)
    {
        let _ = d.sync_all();
    }
    Ok(())
}
