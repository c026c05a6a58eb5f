//! The first phase: the state directory and its lock, the journal (then `READY=1`), the
//! supervisor every task runs under, and the systemd watchdog (judging the journal and the
//! hub loop's progress).

use std::sync::Arc;

use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;

use super::{AgentError, notify};
use crate::clock::SharedClock;
use crate::config::AgentConfig;
use crate::ops::journal::JournalHandle;
use crate::runtime::state_lock::StateLock;
use crate::runtime::supervisor::Supervisor;
use crate::runtime::watchdog::{Progress, WatchdogTask};

/// What the agent holds from start to stop.
pub(super) struct Opened {
    /// The clock every task reads.
    pub clock: SharedClock,
    /// The journal, open.
    pub journal: JournalHandle,
    /// Runs every task; a task that fails stops the agent.
    pub tasks: Supervisor,
    /// Stops every task.
    pub cancel: CancellationToken,
    /// The hub loop's progress, which the watchdog judges.
    pub progress: Progress,
    /// Held while the agent runs: a second agent on the same state directory and offline
    /// commands (certificate rotation) refuse meanwhile.
    _state_lock: StateLock,
    /// Any early return stops the tasks started so far, not only a shutdown.
    _stop_tasks: DropGuard,
}

/// Opens the state directory and the journal (`READY=1` once it is open) and starts the
/// watchdog: systemd expects its pings from `READY=1` on, through enrollment and replay too.
pub(super) async fn open(
    config: &AgentConfig,
    shutdown: &CancellationToken,
    sd: bool,
    clock: SharedClock,
) -> Result<Opened, AgentError> {
    create_state_dir(config)?;
    let state_lock = StateLock::exclusive(&config.state_dir).map_err(AgentError::StateLock)?;
    let journal = JournalHandle::open(&config.journal_path(), Arc::clone(&clock))
        .await
        .map_err(AgentError::Journal)?;
    notify(
        sd,
        &[
            sd_notify::NotifyState::Ready,
            sd_notify::NotifyState::Status("journal open"),
        ],
    );
    tracing::info!(state_dir = %config.state_dir.display(), "journal open");
    let cancel = shutdown.child_token();
    // A task that panics, or ends before shutdown, stops the agent (supervisor.rs).
    let tasks = Supervisor::new(TaskTracker::new(), cancel.clone());
    let stop_tasks = cancel.clone().drop_guard();
    let progress = Progress::default();
    if sd && let Some(watchdog) = WatchdogTask::from_env(journal.clone()) {
        let watchdog = watchdog.with_progress(progress.clone(), config.poll.stall_limit);
        tracing::info!(
            period_ms = u64::try_from(watchdog.period().as_millis()).unwrap_or(u64::MAX),
            "systemd watchdog pings"
        );
        tasks.spawn("watchdog", watchdog.run(cancel.clone()));
    }
    Ok(Opened {
        clock,
        journal,
        tasks,
        cancel,
        progress,
        _state_lock: state_lock,
        _stop_tasks: stop_tasks,
    })
}

fn create_state_dir(config: &AgentConfig) -> Result<(), AgentError> {
    use std::os::unix::fs::DirBuilderExt;
    let path = &config.state_dir;
    if path.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|source| AgentError::StateDir {
            path: path.clone(),
            source,
        })
}
