//! `bosun-guest run`, the controller image's one process (decision 0088): the quiesce watch
//! ([`crate::quiesce`]), the controller's side of rollouts ([`crate::controller`]) and the
//! guest's protection watch ([`crate::protection`]) side by
//! side until one shutdown token is cancelled (SIGTERM or Ctrl-C). A quiesce under way when it
//! is cancelled starts its apps again before the process ends; the quiesce marker and the
//! controller's digest file stay where they are for the next start.
//!
//! Neither loop ever ends on a failed pass: the local API away, refusing or answering
//! something unusable is logged with its cause and retried after [`Backoff`]'s delay (at most
//! the loop's own interval). Only what cannot get better by waiting ends the process, and that
//! is checked before either loop starts: the bootstrap, the apps file and the options.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::controller::ControllerLoop;
use crate::protection::ProtectionWatch;
use crate::quiesce::{QuiesceOutcome, Quiescer};

/// The loops of one guest's controller.
#[derive(Debug)]
pub struct Service {
    /// The quiesce loop.
    pub quiescer: Quiescer,
    /// The controller loop.
    pub controller: ControllerLoop,
    /// The protection watch: warns while the guest's protection is overdue.
    pub protection: ProtectionWatch,
    /// Between two quiesce passes.
    pub watch_interval: Duration,
}

impl Service {
    /// Runs the three loops until `shutdown`; returns once all have stopped.
    pub async fn run(&self, shutdown: &CancellationToken) {
        tracing::info!(
            watch_interval_s = self.watch_interval.as_secs(),
            "controller running: quiesce watch, rollouts and protection watch"
        );
        tokio::join!(
            watch(&self.quiescer, self.watch_interval, shutdown),
            self.controller.run(shutdown),
            self.protection.run(shutdown)
        );
        tracing::info!("controller stopped");
    }
}

/// Quiesce passes every `interval` until `shutdown` (a failed pass is retried sooner, after
/// [`Backoff`]'s delay).
pub async fn watch(quiescer: &Quiescer, interval: Duration, shutdown: &CancellationToken) {
    let mut backoff = Backoff::new("quiesce pass");
    loop {
        let wait = match quiescer.run_once(shutdown).await {
            Ok(outcome) => {
                backoff.succeeded();
                log_outcome(&outcome);
                interval
            }
            Err(e) => backoff.failed(&e).min(interval),
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

fn log_outcome(outcome: &QuiesceOutcome) {
    match outcome {
        QuiesceOutcome::NotDue => tracing::debug!("no backup due"),
        QuiesceOutcome::Unquiesced {
            reason,
            run_id,
            restarted,
        } => tracing::info!(?reason, ?run_id, ?restarted, "quiesced backup pass done"),
    }
}
