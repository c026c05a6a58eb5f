//! The crash-safe quiesce loop (the controller's side of an app-consistent backup).
//!
//! ```text
//!  recover()  ── marker found? restart what it lists, remove it
//!  GET /v1/backup/due ── not due: done
//!  write marker {stopped: []}          ◄─ before anything is stopped
//!  for each app: marker.stopping = app; stop hook; marker.stopped += app
//!  restore check: the apps' data summed, the check written (when an app names data)
//!  POST /v1/backup {quiesced, max_quiesce_s}
//!  poll GET /v1/backup/status ──► snapshotted | archived | done ─┐
//!          failed · poll error · max-quiesce bound · shutdown ───┤
//!  unquiesce: restore check removed; start hooks of exactly marker.stopped (+ stopping),
//!             reverse order
//!  remove marker (only when every start succeeded)
//! ```
//!
//! The backup taken while the apps are stopped holds the restore check of their data
//! ([`crate::restore_check`]); the live guest never does once they run again.
//!
//! Whatever happens after the marker is written, the apps it lists are started again
//! before [`Quiescer::run_once`] returns; if the process dies instead, the next start's
//! [`Quiescer::recover`] does it. The backup itself goes on at the agent either way.

use std::path::PathBuf;
use std::time::Duration;

use bosun_errchain::error_chain;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::{ClientError, LocalApiClient};
use crate::hooks::App;
use crate::marker::{self, Marker, MarkerError};
use crate::restore_check::RestoreCheck;

/// How the loop behaves.
#[derive(Debug, Clone)]
pub struct QuiesceConfig {
    /// The marker file (on persistent storage inside the guest).
    pub marker_path: PathBuf,
    /// The longest the apps stay stopped, whatever the backup does.
    pub max_quiesce: Duration,
    /// How often the backup's status is read.
    pub poll_interval: Duration,
    /// The bound on each hook command.
    pub hook_timeout: Duration,
    /// Where the restore check of the apps' data is written while they are stopped.
    pub restore_check: RestoreCheck,
    /// The customer's apps file ([`crate::apps`]), read again at every pass; its apps come
    /// after the controller's own.
    pub customer_apps: Option<PathBuf>,
}

impl QuiesceConfig {
    /// Defaults: 10 minutes of quiesce at most, polled every second, 2-minute hooks.
    pub fn new(marker_path: PathBuf) -> Self {
        Self {
            marker_path,
            max_quiesce: Duration::from_secs(600),
            poll_interval: Duration::from_secs(1),
            hook_timeout: Duration::from_secs(120),
            restore_check: RestoreCheck::default(),
            customer_apps: None,
        }
    }
}

/// Why the apps were started again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestartReason {
    /// The backup's copy is consistent (`snapshotted`, `archived` or `done`).
    Consistent {
        /// The phase seen.
        phase: String,
    },
    /// The backup failed.
    BackupFailed {
        /// The agent's reason.
        error: String,
    },
    /// The agent refused the backup request.
    RequestRefused {
        /// The error.
        error: String,
    },
    /// The status could not be read.
    PollFailed {
        /// The error.
        error: String,
    },
    /// A stop hook failed; no backup was requested.
    StopFailed {
        /// The error.
        error: String,
    },
    /// The max-quiesce bound was reached; the backup goes on at the agent.
    BoundReached,
    /// The controller is shutting down.
    Shutdown,
}

/// What one pass did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuiesceOutcome {
    /// No backup was due; nothing was stopped.
    NotDue,
    /// Apps were stopped and started again.
    Unquiesced {
        /// Why they were started again.
        reason: RestartReason,
        /// The backup run asked for, if the request got that far.
        run_id: Option<String>,
        /// The apps started again, in start order.
        restarted: Vec<String>,
    },
}

/// Why a pass failed.
#[derive(Debug, thiserror::Error)]
pub enum QuiesceError {
    /// Asking whether a backup is due failed; nothing was stopped.
    #[error("failed to ask whether a backup is due")]
    Due(#[source] ClientError),
    /// The marker could not be written or read.
    #[error("quiesce marker failure")]
    Marker(#[source] MarkerError),
    /// Some apps could not be started again; the marker stays so the next pass retries.
    #[error("failed to start {} app(s) again: {}", failed.len(), failed.join("; "))]
    RestartFailed {
        /// One line per app that is still down.
        failed: Vec<String>,
    },
}

/// The quiesce loop of one controller.
#[derive(Debug, Clone)]
pub struct Quiescer {
    client: LocalApiClient,
    apps: Vec<App>,
    config: QuiesceConfig,
}

impl Quiescer {
    /// A loop stopping `apps` in the given order.
    pub fn new(client: LocalApiClient, apps: Vec<App>, config: QuiesceConfig) -> Self {
        Self {
            client,
            apps,
            config,
        }
    }

    /// Restarts whatever a previous, interrupted pass left stopped. Returns the apps started.
    pub async fn recover(&self) -> Result<Vec<String>, QuiesceError> {
        let Some(found) = marker::read(&self.config.marker_path).map_err(QuiesceError::Marker)?
        else {
            return Ok(Vec::new());
        };
        tracing::warn!(pid = found.pid, apps = ?found.to_restart(), "found a quiesce marker from an interrupted pass; restarting its apps");
        self.unquiesce(&self.apps_now(), &found).await
    }

    /// One pass: recover, and if a backup is due, quiesce, back up and unquiesce.
    pub async fn run_once(
        &self,
        shutdown: &CancellationToken,
    ) -> Result<QuiesceOutcome, QuiesceError> {
        self.recover().await?;
        let due = self.client.backup_due().await.map_err(QuiesceError::Due)?;
        if !due.due {
            return Ok(QuiesceOutcome::NotDue);
        }
        let apps = self.apps_now();
        let mut mark = Marker {
            pid: std::process::id(),
            stopped: Vec::new(),
            stopping: None,
        };
        marker::write(&self.config.marker_path, &mark).map_err(QuiesceError::Marker)?;
        let (reason, run_id) = self.quiesced(&apps, &mut mark, shutdown).await;
        tracing::info!(?reason, "starting the apps again");
        let restarted = self.unquiesce(&apps, &mark).await?;
        Ok(QuiesceOutcome::Unquiesced {
            reason,
            run_id,
            restarted,
        })
    }

    /// The apps of this pass: the controller's own, then the customer's file's. A guest file
    /// that cannot be used is logged and left out: the backup goes on, unquiesced for its
    /// apps, rather than not at all.
    fn apps_now(&self) -> Vec<App> {
        let Some(path) = &self.config.customer_apps else {
            return self.apps.clone();
        };
        match crate::apps::load_customer(path)
            .and_then(|guest| crate::apps::merge(&self.apps, guest, path))
        {
            Ok(apps) => apps,
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %error_chain(&e), "the customer's apps file is not used for this pass: its apps are backed up without being stopped");
                self.apps.clone()
            }
        }
    }

    /// Stops the apps, asks for the backup and waits until the apps may run again. Never
    /// returns without a reason; the caller restarts what `mark` lists.
    async fn quiesced(
        &self,
        apps: &[App],
        mark: &mut Marker,
        shutdown: &CancellationToken,
    ) -> (RestartReason, Option<String>) {
        let bound = Instant::now() + self.config.max_quiesce;
        for app in apps {
            mark.stopping = Some(app.name.clone());
            if let Err(e) = marker::write(&self.config.marker_path, mark) {
                return (
                    RestartReason::StopFailed {
                        error: e.to_string(),
                    },
                    None,
                );
            }
            let stopped = tokio::select! {
                r = app.stop(self.config.hook_timeout) => r,
                () = shutdown.cancelled() => return (RestartReason::Shutdown, None),
                () = tokio::time::sleep_until(bound) => return (RestartReason::BoundReached, None),
            };
            if let Err(e) = stopped {
                return (
                    RestartReason::StopFailed {
                        error: error_chain(&e),
                    },
                    None,
                );
            }
            mark.stopped.push(app.name.clone());
            mark.stopping = None;
            if let Err(e) = marker::write(&self.config.marker_path, mark) {
                return (
                    RestartReason::StopFailed {
                        error: e.to_string(),
                    },
                    None,
                );
            }
        }
        self.write_restore_check(apps, bound).await;
        let max_s = u32::try_from(self.config.max_quiesce.as_secs().max(1)).unwrap_or(u32::MAX);
        let requested = tokio::select! {
            r = self.client.start_quiesced_backup(max_s.min(86_400)) => r,
            () = shutdown.cancelled() => return (RestartReason::Shutdown, None),
            () = tokio::time::sleep_until(bound) => return (RestartReason::BoundReached, None),
        };
        let run = match requested {
            Ok(run) => run,
            Err(e) => {
                return (
                    RestartReason::RequestRefused {
                        error: e.to_string(),
                    },
                    None,
                );
            }
        };
        let run_id = Some(run.run_id.clone());
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.config.poll_interval) => {}
                () = shutdown.cancelled() => return (RestartReason::Shutdown, run_id),
                () = tokio::time::sleep_until(bound) => return (RestartReason::BoundReached, run_id),
            }
            let status = tokio::select! {
                r = self.client.backup_status() => r,
                () = shutdown.cancelled() => return (RestartReason::Shutdown, run_id),
                () = tokio::time::sleep_until(bound) => return (RestartReason::BoundReached, run_id),
            };
            match status {
                Ok(Some(current)) if current.run_id == run.run_id => {
                    if current.phase == "failed" {
                        let error = current
                            .error
                            .unwrap_or_else(|| "no reason given".to_owned());
                        return (RestartReason::BackupFailed { error }, run_id);
                    }
                    if current.apps_may_restart() {
                        return (
                            RestartReason::Consistent {
                                phase: current.phase,
                            },
                            run_id,
                        );
                    }
                }
                Ok(other) => {
                    let error = format!(
                        "the agent reports another run ({:?}) instead of {}",
                        other.map(|r| r.run_id),
                        run.run_id
                    );
                    return (RestartReason::PollFailed { error }, run_id);
                }
                Err(e) => {
                    return (
                        RestartReason::PollFailed {
                            error: e.to_string(),
                        },
                        run_id,
                    );
                }
            }
        }
    }

    /// The apps' data, when any app names some.
    fn data(apps: &[App]) -> Vec<std::path::PathBuf> {
        apps.iter().flat_map(|a| a.data.iter().cloned()).collect()
    }

    /// Sums the apps' data and writes the restore check, within `bound`; a check that cannot
    /// be written is removed (the backup goes on without one: its restore test then says it
    /// was not checked).
    async fn write_restore_check(&self, apps: &[App], bound: Instant) {
        let data = Self::data(apps);
        if data.is_empty() {
            return;
        }
        let check = self.config.restore_check.clone();
        let deadline = Some(bound.into_std());
        let written = tokio::task::spawn_blocking(move || check.install(&data, deadline)).await;
        match written {
            Ok(Ok(files)) => {
                tracing::info!(files, script = %self.config.restore_check.script.display(), "restore check written")
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %error_chain(&e), "no restore check for this backup");
                self.remove_restore_check(apps);
            }
            Err(e) => {
                tracing::warn!(error = %e, "no restore check for this backup");
                self.remove_restore_check(apps);
            }
        }
    }

    /// Removes the restore check (the apps' data is about to change), when any app names data.
    fn remove_restore_check(&self, apps: &[App]) {
        if !Self::data(apps).is_empty()
            && let Err(e) = self.config.restore_check.remove()
        {
            tracing::error!(error = %error_chain(&e), "the restore check could not be removed; a backup taken now would fail its restore test");
        }
    }

    /// Starts exactly the apps `mark` lists, in reverse stop order; removes the marker when
    /// all of them started. The restore check goes first: once an app runs, its data changes.
    async fn unquiesce(&self, apps: &[App], mark: &Marker) -> Result<Vec<String>, QuiesceError> {
        self.remove_restore_check(apps);
        let mut restarted = Vec::new();
        let mut failed = Vec::new();
        for name in mark.to_restart().iter().rev() {
            let Some(app) = apps.iter().find(|a| &a.name == name) else {
                failed.push(format!("{name}: no such app is configured"));
                continue;
            };
            match app.start(self.config.hook_timeout).await {
                Ok(()) => restarted.push(name.clone()),
                Err(e) => {
                    tracing::error!(app = %name, error = %error_chain(&e), "an app could not be started again");
                    failed.push(error_chain(&e));
                }
            }
        }
        if !failed.is_empty() {
            // Keep only what is still down, so a retry does not restart the others.
            let remaining = Marker {
                pid: mark.pid,
                stopped: mark
                    .to_restart()
                    .into_iter()
                    .filter(|n| !restarted.contains(n))
                    .collect(),
                stopping: None,
            };
            marker::write(&self.config.marker_path, &remaining).map_err(QuiesceError::Marker)?;
            return Err(QuiesceError::RestartFailed { failed });
        }
        marker::remove(&self.config.marker_path).map_err(QuiesceError::Marker)?;
        Ok(restarted)
    }
}
