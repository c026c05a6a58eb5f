//! Break-glass (DESIGN §12): the emergency SSH door an operator opens with a signed
//! `break-glass-enable` job when the poll loop itself is wedged: delivered by the hub, or
//! handed over from the node's console ([`console`], `bosun-agentctl break-glass open`).
//!
//! [`BreakGlass`] opens and closes the door through the helper (`break_glass_open`,
//! `break_glass_close`) and journals each change with its audit row
//! ([`crate::ops::journal::Door`]). The helper writes the key with OpenSSH's `expiry-time=`, so
//! sshd refuses it after the deadline even if the agent is gone; [`expiry_task`] also
//! removes the line at the deadline (and at start, for a door that expired while the agent
//! was down), so the file holds nothing stale. Opening, closing and the expiry check are
//! serialized: the task never closes a door a newer job just opened.
//!
//! ```text
//!  JobRunner ──open/close──► BreakGlass ──helper──► bosun-helper (authorized_keys)
//!                               │  └─journal: door + audit (break_glass.opened/closed)
//!                               └─Notify──► ExpiryTask ──sleep_until(expiry)──► close
//! ```

pub mod consent;
pub mod console;
pub mod expiry_task;
pub mod spool;

use std::sync::Arc;

use bosun_proto::break_glass::{BREAK_GLASS_ACCOUNT, SshPublicKey};
use bosun_proto::helper::{BreakGlassClose, BreakGlassOpen, Output, Request};
use jiff::Timestamp;
use serde_json::{Value, json};
use tokio::sync::{Mutex, Notify};
use uuid::Uuid;

use crate::clock::SharedClock;
use crate::links::helper::{HelperClient, HelperClientError};
use crate::ops::journal::{Door, DoorClosed, JournalError, JournalHandle};

/// Why the door could not be opened or closed.
#[derive(Debug, thiserror::Error)]
pub enum BreakGlassError {
    /// The deadline has already passed.
    #[error("the break-glass door would expire at {expires_at}, which is not after now ({now})")]
    AlreadyExpired {
        /// The deadline.
        expires_at: Timestamp,
        /// The agent's time.
        now: Timestamp,
    },
    /// The helper refused or failed the verb.
    #[error("helper verb {verb}")]
    Helper {
        /// The verb.
        verb: &'static str,
        /// Cause.
        #[source]
        source: HelperClientError,
    },
    /// The helper answered with another output.
    #[error("the helper answered {verb} with {output}")]
    UnexpectedOutput {
        /// The verb.
        verb: &'static str,
        /// The answer.
        output: String,
    },
    /// The journal could not record the change (the file was already changed).
    #[error("journaling the break-glass door")]
    Journal(#[source] JournalError),
}

/// What a signed job asks to open.
#[derive(Debug, Clone)]
pub struct DoorRequest {
    /// The `break-glass-enable` job.
    pub job_id: Uuid,
    /// The operator's key.
    pub key: SshPublicKey,
    /// The deadline.
    pub expires_at: Timestamp,
    /// The operator's reason.
    pub reason: String,
    /// Fingerprint of the job's signer.
    pub signer: String,
}

/// Opens and closes the break-glass door. Cloning shares the same door.
#[derive(Debug, Clone)]
pub struct BreakGlass {
    helper: HelperClient,
    journal: JournalHandle,
    clock: SharedClock,
    /// Wakes the expiry task when the door changes.
    changed: Arc<Notify>,
    /// One change at a time.
    busy: Arc<Mutex<()>>,
}

impl BreakGlass {
    /// A door kept through `helper`.
    pub fn new(helper: HelperClient, journal: JournalHandle, clock: SharedClock) -> Self {
        Self {
            helper,
            journal,
            clock,
            changed: Arc::new(Notify::new()),
            busy: Arc::new(Mutex::new(())),
        }
    }

    /// Opens the door for `request` (replacing any open one); gives the job's output.
    /// Opening again for the same job (a resumed job) writes the same line and journals
    /// nothing new.
    pub async fn open(&self, request: &DoorRequest) -> Result<Value, BreakGlassError> {
        let _busy = self.busy.lock().await;
        let now = self.clock.now();
        if request.expires_at <= now {
            return Err(BreakGlassError::AlreadyExpired {
                expires_at: request.expires_at,
                now,
            });
        }
        const VERB: &str = "break_glass_open";
        let call = Request::BreakGlassOpen(BreakGlassOpen {
            job_id: request.job_id,
            key: request.key.clone(),
            expires_at: request.expires_at,
        });
        let output = self
            .helper
            .call(&call)
            .await
            .map_err(|source| BreakGlassError::Helper { verb: VERB, source })?;
        let Output::BreakGlassOpened {
            account,
            path,
            fingerprint,
            expiry_time,
        } = output
        else {
            return Err(BreakGlassError::UnexpectedOutput {
                verb: VERB,
                output: format!("{output:?}"),
            });
        };
        let door = Door {
            job_id: request.job_id.to_string(),
            fingerprint: fingerprint.clone(),
            reason: request.reason.clone(),
            signer: request.signer.clone(),
            opened_at: now,
            expires_at: request.expires_at,
        };
        self.journal
            .record_door_opened(door)
            .await
            .map_err(BreakGlassError::Journal)?;
        self.changed.notify_one();
        tracing::warn!(job_id = %request.job_id, %fingerprint, expires_at = %request.expires_at, account, "break-glass door open");
        Ok(json!({
            "account": account,
            "path": path,
            "fingerprint": fingerprint,
            "expires_at": request.expires_at.to_string(),
            "expiry_time": expiry_time,
        }))
    }

    /// Closes the door, whatever the journal says (the file is removed if present);
    /// `by_job` is the `break-glass-disable` job. Gives the job's output.
    pub async fn close(
        &self,
        how: DoorClosed,
        by_job: Option<Uuid>,
    ) -> Result<Value, BreakGlassError> {
        let _busy = self.busy.lock().await;
        self.close_locked(how, by_job).await
    }

    async fn close_locked(
        &self,
        how: DoorClosed,
        by_job: Option<Uuid>,
    ) -> Result<Value, BreakGlassError> {
        const VERB: &str = "break_glass_close";
        let output = self
            .helper
            .call(&Request::BreakGlassClose(BreakGlassClose {}))
            .await
            .map_err(|source| BreakGlassError::Helper { verb: VERB, source })?;
        let Output::BreakGlassClosed { path, removed } = output else {
            return Err(BreakGlassError::UnexpectedOutput {
                verb: VERB,
                output: format!("{output:?}"),
            });
        };
        let door = self
            .journal
            .record_door_closed(how, by_job.map(|j| j.to_string()))
            .await
            .map_err(BreakGlassError::Journal)?;
        self.changed.notify_one();
        let closed = door.as_ref().map(|d| d.job_id.clone());
        tracing::warn!(closed_job = ?closed, closed_by = how.as_str(), removed, account = BREAK_GLASS_ACCOUNT, "break-glass door closed");
        Ok(json!({
            "path": path,
            "removed": removed,
            "closed_job_id": closed,
            "closed_by": how.as_str(),
        }))
    }

    /// Closes the open door if it is still the door of `job_id` and its deadline has
    /// passed; gives whether it closed it.
    pub async fn close_if_expired(&self, job_id: &str) -> Result<bool, BreakGlassError> {
        let _busy = self.busy.lock().await;
        let door = self
            .journal
            .open_door()
            .await
            .map_err(BreakGlassError::Journal)?;
        match door {
            Some(door) if door.job_id == job_id && door.expires_at <= self.clock.now() => {
                self.close_locked(DoorClosed::Expiry, None).await?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
