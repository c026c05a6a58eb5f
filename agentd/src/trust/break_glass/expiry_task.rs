//! Closes the break-glass door at its deadline ([`super::BreakGlass`]): the task reads the
//! open door from the journal, sleeps on the clock seam until it expires (or the door
//! changes), and closes it through the helper. At start it closes a door that expired while
//! the agent was down. A failed close is retried after [`RETRY`].

use std::time::Duration;

use bosun_errchain::error_chain;
use tokio_util::sync::CancellationToken;

use super::BreakGlass;

/// Wait before retrying a failed close or an unreadable journal.
pub const RETRY: Duration = Duration::from_secs(30);

/// The expiry task.
#[derive(Debug)]
pub struct ExpiryTask {
    door: BreakGlass,
}

impl ExpiryTask {
    /// A task closing `door` at its deadlines.
    pub fn new(door: BreakGlass) -> Self {
        Self { door }
    }

    /// Runs until `cancel`.
    pub async fn run(self, cancel: CancellationToken) {
        let door = self.door;
        loop {
            let changed = door.changed.notified();
            let wait = match door.journal.open_door().await {
                Ok(None) => None,
                Ok(Some(open)) if open.expires_at <= door.clock.now() => {
                    match door.close_if_expired(&open.job_id).await {
                        Ok(_) => continue,
                        Err(e) => {
                            tracing::error!(job_id = %open.job_id, error = %error_chain(&e), "could not close the expired break-glass door; sshd refuses its key already");
                            Some(door.clock.sleep(RETRY))
                        }
                    }
                }
                Ok(Some(open)) => Some(door.clock.sleep_until(open.expires_at)),
                Err(e) => {
                    tracing::error!(error = %error_chain(&e), "could not read the break-glass door");
                    Some(door.clock.sleep(RETRY))
                }
            };
            match wait {
                None => tokio::select! {
                    () = cancel.cancelled() => return,
                    () = changed => {}
                },
                Some(sleep) => tokio::select! {
                    () = cancel.cancelled() => return,
                    () = changed => {}
                    () = sleep => {}
                },
            }
        }
    }
}
