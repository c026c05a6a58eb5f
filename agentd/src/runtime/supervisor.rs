//! Every task [`run`](crate::run) starts goes through a [`Supervisor`]: a task that panics, or
//! a task meant to run until shutdown that ends while the agent is not stopping, is a failure.
//! The failure is logged with the task's name, and `run` stops the other tasks and returns
//! [`AgentError::TaskFailed`](crate::runtime::AgentError::TaskFailed), so the process exits
//! non-zero and systemd restarts it (`Restart=on-failure`) instead of leaving the agent running
//! without the task: no storage watching, no backups, no polls. What the failed task left
//! half-done is in the journal, and the restart replays it.
//!
//! A task ending after the agent began to stop is no failure; a panic is, whenever it happens.

use std::any::Any;
use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt as _;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Most characters of a panic's message a failure keeps.
const MAX_MESSAGE: usize = 512;

/// How a supervised task failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskFailure {
    /// The task panicked.
    #[error("task {task} panicked: {message}")]
    Panicked {
        /// The task's name.
        task: &'static str,
        /// The panic's message (cut short).
        message: String,
    },
    /// A task meant to run until shutdown returned while the agent was running.
    #[error("task {task} ended while the agent was running")]
    Ended {
        /// The task's name.
        task: &'static str,
    },
}

impl TaskFailure {
    /// The name of the task that failed.
    pub fn task(&self) -> &'static str {
        match self {
            Self::Panicked { task, .. } | Self::Ended { task } => task,
        }
    }
}

/// How long a supervised task is meant to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lifetime {
    /// Until the agent stops: ending earlier is a failure.
    UntilStop,
    /// Until its work is done: only a panic is a failure.
    Once,
}

/// Spawns the agent's tasks on its [`TaskTracker`] and watches how they end.
#[derive(Debug, Clone)]
pub struct Supervisor {
    tracker: TaskTracker,
    stopping: CancellationToken,
    failure: Arc<watch::Sender<Option<TaskFailure>>>,
    running: Arc<Mutex<BTreeMap<&'static str, usize>>>,
}

/// Counts a task as running until it is dropped (when the task ends, however it ends).
struct Running {
    task: &'static str,
    running: Arc<Mutex<BTreeMap<&'static str, usize>>>,
}

impl Running {
    fn new(task: &'static str, running: &Arc<Mutex<BTreeMap<&'static str, usize>>>) -> Self {
        *running.lock().entry(task).or_default() += 1;
        Self {
            task,
            running: Arc::clone(running),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut running = self.running.lock();
        if let Some(count) = running.get_mut(self.task) {
            *count -= 1;
            if *count == 0 {
                running.remove(self.task);
            }
        }
    }
}

impl Supervisor {
    /// A supervisor spawning on `tracker`; a task that ends once `stopping` is cancelled ends
    /// as it should.
    pub fn new(tracker: TaskTracker, stopping: CancellationToken) -> Self {
        let (failure, _) = watch::channel(None);
        Self {
            tracker,
            stopping,
            failure: Arc::new(failure),
            running: Arc::default(),
        }
    }

    /// The names of the tasks running now, each with how many run under it: what a stop that
    /// takes long is still waiting for.
    pub fn running(&self) -> Vec<(&'static str, usize)> {
        self.running.lock().iter().map(|(t, n)| (*t, *n)).collect()
    }

    /// The tracker the tasks run on (shutdown waits on it).
    pub fn tracker(&self) -> &TaskTracker {
        &self.tracker
    }

    /// Spawns `future` as the task `task`, meant to run until the agent stops.
    pub fn spawn<F>(&self, task: &'static str, future: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.start(task, Lifetime::UntilStop, future);
    }

    /// Spawns `future` as the task `task`, which ends by itself once its work is done.
    pub fn spawn_once<F>(&self, task: &'static str, future: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.start(task, Lifetime::Once, future);
    }

    fn start<F>(&self, task: &'static str, lifetime: Lifetime, future: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let supervisor = self.clone();
        // Boxed: the wrapper below then holds a pointer, not a second copy of the task's state
        // (an async block keeps what it captured beside what it awaits), and spawning moves a
        // few bytes instead of copying tens of kB through tokio's layers on the stack, whose
        // high-water mark stays resident (docs/benchmarks.md, "Agent core").
        let future = Box::pin(future);
        let running = Running::new(task, &self.running);
        self.tracker.spawn(async move {
            let _running = running;
            // The task's state is dropped with it: nothing it leaves behind is used again.
            let failure = match AssertUnwindSafe(future).catch_unwind().await {
                Ok(()) if lifetime == Lifetime::Once || supervisor.stopping.is_cancelled() => {
                    return;
                }
                Ok(()) => TaskFailure::Ended { task },
                Err(payload) => TaskFailure::Panicked {
                    task,
                    message: panic_message(payload.as_ref()),
                },
            };
            supervisor.fail(failure);
        });
    }

    fn fail(&self, failure: TaskFailure) {
        tracing::error!(
            task = failure.task(),
            error = %failure,
            "a task failed; the agent stops so that it is restarted"
        );
        self.failure.send_if_modified(|first| {
            if first.is_some() {
                return false;
            }
            *first = Some(failure);
            true
        });
    }

    /// The first failure, if a task failed.
    pub fn failure(&self) -> Option<TaskFailure> {
        self.failure.borrow().clone()
    }

    /// Waits for the first failure.
    pub async fn failed(&self) -> TaskFailure {
        let mut first = self.failure.subscribe();
        loop {
            if let Some(failure) = first.borrow_and_update().clone() {
                return failure;
            }
            // The sender lives in `self`, so the channel stays open while this waits.
            if first.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// A panic's message, as far as it is text.
fn panic_message(payload: &(dyn Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message");
    text.chars().take(MAX_MESSAGE).collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn new_supervisor() -> (Supervisor, CancellationToken) {
        let stopping = CancellationToken::new();
        (
            Supervisor::new(TaskTracker::new(), stopping.clone()),
            stopping,
        )
    }

    async fn first_failure(supervisor: &Supervisor) -> TaskFailure {
        tokio::time::timeout(Duration::from_secs(5), supervisor.failed())
            .await
            .expect("a failure within 5 s")
    }

    #[tokio::test]
    async fn a_panic_is_a_failure_naming_the_task_and_its_message() {
        let (supervisor, stopping) = new_supervisor();
        supervisor.spawn("healthy", {
            let stopping = stopping.clone();
            async move { stopping.cancelled().await }
        });
        supervisor.spawn("storage_watcher", async {
            tokio::task::yield_now().await;
            panic!("the watcher broke");
        });
        assert_eq!(
            first_failure(&supervisor).await,
            TaskFailure::Panicked {
                task: "storage_watcher",
                message: "the watcher broke".into()
            }
        );
        // The others stop as on shutdown; the failure stays the first one.
        stopping.cancel();
        supervisor.tracker().close();
        tokio::time::timeout(Duration::from_secs(5), supervisor.tracker().wait())
            .await
            .unwrap();
        assert_eq!(supervisor.failure().unwrap().task(), "storage_watcher");
    }

    #[tokio::test]
    async fn the_tasks_still_running_are_named_until_they_end() {
        let (supervisor, stopping) = new_supervisor();
        let (done, finished) = tokio::sync::oneshot::channel::<()>();
        supervisor.spawn_once("backup_run", async move {
            let _ = finished.await;
        });
        for _ in 0..2 {
            let stopping = stopping.clone();
            supervisor.spawn("poll", async move { stopping.cancelled().await });
        }
        assert_eq!(supervisor.running(), [("backup_run", 1), ("poll", 2)]);
        stopping.cancel();
        let tracker = supervisor.tracker().clone();
        tracker.close();
        tokio::time::timeout(Duration::from_secs(5), async {
            while supervisor.running() != [("backup_run", 1)] {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the polls end");
        done.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), tracker.wait())
            .await
            .expect("the one-shot ends");
        assert!(supervisor.running().is_empty());
        assert!(supervisor.failure().is_none());
    }

    #[tokio::test]
    async fn a_long_running_task_that_returns_early_is_a_failure_a_one_shot_is_not() {
        let (supervisor, _stopping) = new_supervisor();
        supervisor.spawn_once("replay", async {});
        supervisor.spawn("poll", async {});
        assert_eq!(
            first_failure(&supervisor).await,
            TaskFailure::Ended { task: "poll" }
        );
    }

    #[tokio::test]
    async fn tasks_ending_on_shutdown_are_no_failure_but_a_panic_while_stopping_is() {
        let (supervisor, stopping) = new_supervisor();
        for task in ["reconcile", "poll", "local_api"] {
            let stopping = stopping.clone();
            supervisor.spawn(task, async move { stopping.cancelled().await });
        }
        stopping.cancel();
        supervisor.tracker().close();
        tokio::time::timeout(Duration::from_secs(5), supervisor.tracker().wait())
            .await
            .unwrap();
        assert_eq!(supervisor.failure(), None);

        let (supervisor, stopping) = new_supervisor();
        stopping.cancel();
        let text = String::from("x").repeat(2 * MAX_MESSAGE);
        supervisor.spawn("scheduler", async move { panic!("{text}") });
        let failure = first_failure(&supervisor).await;
        let TaskFailure::Panicked { task, message } = failure else {
            panic!("{failure:?}");
        };
        assert_eq!(task, "scheduler");
        assert_eq!(message.chars().count(), MAX_MESSAGE);
    }
}
