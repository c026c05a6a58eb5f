//! The per-guest work queue: mutations of one guest run one at a time, in
//! arrival order, while mutations of different guests run in parallel up to a
//! bound.
//!
//! Every piece of the agent that changes a guest (the reconciler, signed jobs,
//! the local API's snapshot/rollback/backup) hands its work to a
//! [`GuestQueue`] instead of calling Proxmox directly:
//!
//! ```text
//!  reconcile ─┐                      per-guest FIFO lock        global permits
//!  jobs ──────┼─ GuestQueue::run(key, op) ──► [guest A] ──┐
//!  local API ─┘                              [guest B] ──┼──► Semaphore(max_parallel) ──► op
//!                                            [guest C] ──┘
//! ```
//!
//! - **Serialized per guest.** Each [`GuestKey`] has a line: an operation
//!   starts only after the one submitted before it for the same guest has
//!   ended, so two mutations of one guest never overlap and run in the order
//!   they were submitted.
//! - **Parallel across guests, bounded.** When its turn comes an operation
//!   takes one of `max_parallel` permits. The turn comes first so that
//!   operations waiting on a busy guest never hold a permit another guest
//!   could use.
//! - **Not cancelled by the caller.** The operation runs on its own task, so a
//!   caller that stops waiting (an HTTP client that hangs up, a reconcile pass
//!   that times out) does not abandon a half-done Proxmox sequence. Use
//!   [`GuestQueue::submit`] to get a [`QueuedOp`] you may drop freely; the
//!   work still runs.
//! - **Shutdown.** [`GuestQueue::close`] refuses new work
//!   ([`QueueError::Closed`]); work already queued still runs, and
//!   [`GuestQueue::wait_idle`] waits for it. Operations that must stop early
//!   watch their own cancellation token.
//!
//! Keys are the hub's guest id ([`GuestKey::guest`]); a guest the agent made
//! for itself without one (a restore-test scratch guest) is keyed by its vmid
//! ([`GuestKey::vmid`]). The two name spaces never collide.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{Semaphore, oneshot};
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

/// Default bound on operations running at once across all guests.
pub const DEFAULT_MAX_PARALLEL: usize = 8;

/// The identity a guest's mutations are serialized on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GuestKey(String);

impl GuestKey {
    /// The key of a guest the hub knows by `guest_id`.
    pub fn guest(guest_id: impl fmt::Display) -> Self {
        Self(format!("guest:{guest_id}"))
    }

    /// The key of a guest the agent knows only by its vmid (a scratch guest).
    pub fn vmid(vmid: u32) -> Self {
        Self(format!("vmid:{vmid}"))
    }

    /// The key as text, for logs.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for GuestKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why an operation did not produce its value.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The queue was closed (the agent is shutting down); the operation never ran.
    #[error("the work queue is closed; operation for {guest} not started")]
    Closed {
        /// The guest the operation was for.
        guest: GuestKey,
    },
    /// The operation panicked; the guest's lock was released.
    #[error("operation for {guest} panicked")]
    Panicked {
        /// The guest the operation was for.
        guest: GuestKey,
    },
    /// The operation's task was aborted by the runtime shutting down.
    #[error("operation for {guest} was aborted")]
    Aborted {
        /// The guest the operation was for.
        guest: GuestKey,
    },
}

/// A cloneable handle to the per-guest work queue.
#[derive(Clone)]
pub struct GuestQueue {
    inner: Arc<Inner>,
}

struct Inner {
    lines: Mutex<HashMap<GuestKey, Line>>,
    permits: Arc<Semaphore>,
    max_parallel: usize,
    tracker: TaskTracker,
}

impl fmt::Debug for GuestQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuestQueue")
            .field("max_parallel", &self.inner.max_parallel)
            .field("guests_busy", &self.inner.lines.lock().len())
            .field("closed", &self.inner.tracker.is_closed())
            .finish()
    }
}

/// An operation handed to the queue; await it for the result or drop it to
/// let the work finish unobserved.
#[derive(Debug)]
pub struct QueuedOp<T> {
    guest: GuestKey,
    handle: JoinHandle<T>,
}

impl<T> Future for QueuedOp<T> {
    type Output = Result<T, QueueError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let handle = std::pin::Pin::new(&mut self.handle);
        handle.poll(cx).map(|joined| match joined {
            Ok(value) => Ok(value),
            Err(error) if error.is_panic() => Err(QueueError::Panicked {
                guest: self.guest.clone(),
            }),
            Err(_) => Err(QueueError::Aborted {
                guest: self.guest.clone(),
            }),
        })
    }
}

impl GuestQueue {
    /// A queue running at most `max_parallel` operations at once (at least 1).
    pub fn new(max_parallel: usize) -> Self {
        let max_parallel = max_parallel.max(1);
        Self {
            inner: Arc::new(Inner {
                lines: Mutex::new(HashMap::new()),
                permits: Arc::new(Semaphore::new(max_parallel)),
                max_parallel,
                tracker: TaskTracker::new(),
            }),
        }
    }

    /// The bound on operations running at once.
    pub fn max_parallel(&self) -> usize {
        self.inner.max_parallel
    }

    /// Run `op` for `guest` after every operation submitted earlier for the same
    /// guest has finished, and return its output.
    ///
    /// Dropping the returned future does not cancel `op` (see the module docs).
    pub async fn run<T, F>(&self, guest: GuestKey, op: F) -> Result<T, QueueError>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        self.submit(guest, op)?.await
    }

    /// Queue `op` for `guest` and return at once. The position in the guest's
    /// line is fixed when this returns, so two `submit` calls for one guest run
    /// in call order.
    pub fn submit<T, F>(&self, guest: GuestKey, op: F) -> Result<QueuedOp<T>, QueueError>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        if self.inner.tracker.is_closed() {
            return Err(QueueError::Closed { guest });
        }
        // Take a place in the guest's line now, synchronously, so call order
        // is run order no matter how the runtime schedules the tasks.
        let (done_tx, done_rx) = oneshot::channel::<()>();
        let previous = {
            let mut lines = self.inner.lines.lock();
            let line = lines.entry(guest.clone()).or_insert_with(|| Line {
                tail: None,
                pending: 0,
            });
            line.pending += 1;
            line.tail.replace(done_rx)
        };
        let turn = Turn {
            inner: Arc::clone(&self.inner),
            guest: guest.clone(),
            _done: done_tx,
        };
        let permits = Arc::clone(&self.inner.permits);
        let span = tracing::debug_span!("guest_op", guest = %guest);
        // The caller's span (a reconcile pass, a job) follows the operation into its task. Boxed,
        // so the task holds one copy of the operation's state, not two, and spawning it does not
        // copy it through the stack (as `Supervisor::start`).
        let op = Box::pin(op.in_current_span());
        let handle = self.inner.tracker.spawn(
            async move {
                // The turn is dropped when this task ends, panics or is
                // aborted; dropping it lets the next operation of the guest go.
                let _turn = turn;
                if let Some(previous) = previous {
                    // An error only means the previous operation's task is
                    // gone (finished, panicked or aborted): our turn either way.
                    let _ = previous.await;
                }
                let _permit = permits
                    .acquire_owned()
                    .await
                    .expect("the queue's semaphore is never closed");
                op.await
            }
            .instrument(span),
        );
        Ok(QueuedOp { guest, handle })
    }

    /// Refuse new operations from now on; queued ones still run.
    pub fn close(&self) {
        self.inner.tracker.close();
    }

    /// Wait until the queue is closed and every queued operation has finished.
    pub async fn wait_idle(&self) {
        self.inner.tracker.wait().await;
    }

    /// The guests with an operation queued or running, sorted: what a stop that takes long is
    /// still waiting for.
    pub fn busy(&self) -> Vec<GuestKey> {
        let mut busy: Vec<GuestKey> = self.inner.lines.lock().keys().cloned().collect();
        busy.sort();
        busy
    }

    /// Whether an operation for `guest` is queued or running.
    pub fn is_busy(&self, guest: &GuestKey) -> bool {
        self.inner.lines.lock().contains_key(guest)
    }

    /// Operations queued or running, and the guests they are for.
    pub fn depth(&self) -> QueueDepth {
        let lines = self.inner.lines.lock();
        QueueDepth {
            operations: lines.values().map(|line| line.pending).sum(),
            guests: lines.len(),
        }
    }

    /// How many operations for `guest` are queued or running.
    pub fn pending(&self, guest: &GuestKey) -> usize {
        self.inner
            .lines
            .lock()
            .get(guest)
            .map_or(0, |line| line.pending)
    }
}

/// How much work the queue holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDepth {
    /// Operations queued or running.
    pub operations: usize,
    /// Guests with an operation queued or running.
    pub guests: usize,
}

/// One guest's line: the completion signal of its last queued operation and
/// how many operations are queued or running.
struct Line {
    tail: Option<oneshot::Receiver<()>>,
    pending: usize,
}

/// An operation's turn in its guest's line. Dropping it (the operation ended,
/// panicked or was aborted) lets the next operation of the guest start and
/// forgets the line once it is empty.
struct Turn {
    inner: Arc<Inner>,
    guest: GuestKey,
    _done: oneshot::Sender<()>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut lines = self.inner.lines.lock();
        if let Some(line) = lines.get_mut(&self.guest) {
            line.pending = line.pending.saturating_sub(1);
            if line.pending == 0 {
                lines.remove(&self.guest);
            }
        }
    }
}

#[cfg(test)]
mod tests;
