//! Timing and retry bounds, passed in so tests run in milliseconds.

use std::time::Duration;

/// An exponential backoff: `initial`, doubled each step, capped at `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay.
    pub initial: Duration,
    /// The largest delay.
    pub max: Duration,
}

impl Backoff {
    /// The delay after `delay`.
    pub fn next(&self, delay: Duration) -> Duration {
        delay.saturating_mul(2).min(self.max)
    }
}

/// How long and how often the client waits and retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// TCP connect timeout (a timeout here means "not sent").
    pub connect_timeout: Duration,
    /// Whole-request timeout (a timeout after sending means "outcome unknown").
    pub request_timeout: Duration,
    /// How many times a call refused with `CT is locked (…)` or a config file lock timeout is
    /// sent again before the client gives up with [`super::PveError::Locked`].
    pub lock_attempts: u32,
    /// The pause between those attempts.
    pub lock_backoff: Backoff,
    /// How many times a request is sent in all when its failure is worth asking again (not
    /// sent; a read whose answer was lost, answered busy, or failed by the handler with a
    /// 5xx that does not say the object is missing): see
    /// [`super::PveError::is_worth_asking_again`].
    pub transient_attempts: u32,
    /// The pause between those attempts.
    pub transient_backoff: Backoff,
    /// Task status polling interval.
    pub task_poll: Backoff,
    /// How long `wait_task` waits for a task to stop.
    pub task_wait_limit: Duration,
    /// How many consecutive failed status polls `wait_task` tolerates.
    pub task_poll_errors: u32,
    /// How many lines of the task log a failed task carries.
    pub log_tail_lines: usize,
    /// How many ids a restore onto the next free id tries.
    pub nextid_attempts: u32,
    /// The most bytes of one answer the client reads: a longer answer is
    /// [`super::PveError::AnswerTooLarge`], never held whole in memory.
    pub max_answer_bytes: usize,
}

/// The default bound on one answer: 64 MiB, far above the largest Bosun asks for (a
/// guest-agent `file-read` gives at most 16 MiB, base64-encoded; a whole cluster's resource
/// list of 10,000 guests is a few MiB).
pub const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

impl Default for RetryPolicy {
    /// Production values: locks are waited out for about two minutes, tasks for six hours
    /// (a large restore or backup).
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            lock_attempts: 12,
            lock_backoff: Backoff {
                initial: Duration::from_secs(1),
                max: Duration::from_secs(15),
            },
            transient_attempts: 3,
            transient_backoff: Backoff {
                initial: Duration::from_millis(500),
                max: Duration::from_secs(5),
            },
            task_poll: Backoff {
                initial: Duration::from_millis(500),
                max: Duration::from_secs(5),
            },
            task_wait_limit: Duration::from_secs(6 * 3600),
            task_poll_errors: 30,
            log_tail_lines: 20,
            nextid_attempts: 5,
            max_answer_bytes: MAX_ANSWER_BYTES,
        }
    }
}

impl RetryPolicy {
    /// Short delays for tests against the simulator; the bounds stay the same.
    pub fn fast() -> Self {
        let ms = Duration::from_millis;
        Self {
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(5),
            lock_attempts: 12,
            lock_backoff: Backoff {
                initial: ms(10),
                max: ms(100),
            },
            transient_attempts: 3,
            transient_backoff: Backoff {
                initial: ms(10),
                max: ms(50),
            },
            task_poll: Backoff {
                initial: ms(5),
                max: ms(50),
            },
            task_wait_limit: Duration::from_secs(20),
            task_poll_errors: 10,
            log_tail_lines: 20,
            nextid_attempts: 5,
            max_answer_bytes: MAX_ANSWER_BYTES,
        }
    }
}
