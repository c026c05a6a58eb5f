//! Watches the desired state's signed golden recipe and builds it when this host has no
//! build of it, or when its newest build is older than the recipe's `refresh_days`
//! ([`super::GoldenBuilder::ensure`]; the task wakes when the refresh falls due). A refused recipe is audited once
//! (`golden.build_refused`) and not retried until another recipe arrives; a failed build
//! is audited (`golden.build_failed`, or `golden.verify_failed` for a build that did not pass
//! its boot test) and retried after a pause that doubles from
//! [`FIRST_RETRY`] up to [`MAX_RETRY`]. Builds run one at a time, outside any guest queue
//! (the builder is a container of its own, destroyed at the end). Each pass ends with a
//! pruning pass over old archives ([`super::prune`]); one that left work wakes the task again
//! after [`FIRST_RETRY`]. The last outcome is journaled for the report.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::signed::SignedDocument;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::GoldenBuilder;
use crate::data::desired::DesiredSnapshot;
use crate::ops::journal::AuditEvent;

/// Pause after the first failed build.
pub const FIRST_RETRY: Duration = Duration::from_secs(300);
/// Longest pause between attempts.
pub const MAX_RETRY: Duration = Duration::from_secs(6 * 3600);

/// The build task.
#[derive(Debug)]
pub struct GoldenBuildTask {
    builder: GoldenBuilder,
    desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
}

impl GoldenBuildTask {
    /// A task building the recipes `desired` carries.
    pub fn new(
        builder: GoldenBuilder,
        desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
    ) -> Self {
        Self { builder, desired }
    }

    /// Runs until `cancel`.
    pub async fn run(mut self, cancel: CancellationToken) {
        // The recipe last refused (not tried again) and the one last failed with its pause and
        // when it may be tried again (a desired-state change before then does not hurry it:
        // each attempt builds a whole archive).
        let mut refused: Option<SignedDocument> = None;
        let mut failed: Option<(SignedDocument, Duration, jiff::Timestamp)> = None;
        loop {
            let recipe = self
                .desired
                .borrow_and_update()
                .as_ref()
                .and_then(|d| d.state.golden_recipe.clone());
            let mut retry_in = None;
            let mut refresh_at = None;
            let now = self.builder.clock.now();
            let paused = |signed: &SignedDocument| {
                failed
                    .as_ref()
                    .filter(|(last, _, not_before)| last == signed && now < *not_before)
                    .map(|(_, _, not_before)| {
                        Duration::try_from(not_before.duration_since(now)).unwrap_or(FIRST_RETRY)
                    })
            };
            if let Some(signed) = recipe.filter(|r| refused.as_ref() != Some(r)) {
                let version = signed.golden_recipe().ok().map(|r| r.version);
                if let Some(left) = paused(&signed) {
                    retry_in = Some(left);
                } else {
                    match self.builder.ensure(&signed).await {
                        Ok(built) => {
                            failed = None;
                            if let Some(build) = built {
                                tracing::info!(volid = %build.volid, version = %build.version, "golden image built");
                                self.outcome("verified", None, version).await;
                            }
                            refresh_at = self.builder.next_refresh(&signed).await;
                        }
                        Err(e) if e.is_refusal() => {
                            self.audit("golden.build_refused", &e).await;
                            self.outcome("refused", Some(e.reason()), version).await;
                            refused = Some(signed);
                        }
                        Err(e) => {
                            let pause = match &failed {
                                Some((last, pause, _)) if *last == signed => {
                                    (*pause * 2).min(MAX_RETRY)
                                }
                                _ => FIRST_RETRY,
                            };
                            let (action, outcome) = if e.is_verify_failure() {
                                ("golden.verify_failed", "verify_failed")
                            } else {
                                ("golden.build_failed", "build_failed")
                            };
                            self.audit(action, &e).await;
                            self.outcome(outcome, Some(e.reason()), version).await;
                            let not_before = jiff::SignedDuration::try_from(pause)
                                .ok()
                                .and_then(|p| self.builder.clock.now().checked_add(p).ok())
                                .unwrap_or(jiff::Timestamp::MAX);
                            failed = Some((signed, pause, not_before));
                            retry_in = Some(pause);
                        }
                    }
                }
            }
            if self.prune().await && retry_in.is_none() {
                retry_in = Some(FIRST_RETRY);
            }
            let clock = &self.builder.clock;
            let wake = match (retry_in, refresh_at) {
                (Some(pause), _) => Some(clock.sleep(pause)),
                (None, Some(at)) => Some(clock.sleep_until(at)),
                (None, None) => None,
            };
            match wake {
                None => tokio::select! {
                    () = cancel.cancelled() => return,
                    changed = self.desired.changed() => if changed.is_err() { return },
                },
                Some(wake) => tokio::select! {
                    () = cancel.cancelled() => return,
                    changed = self.desired.changed() => if changed.is_err() { return },
                    () = wake => {}
                },
            }
        }
    }

    /// One pruning pass ([`super::prune`]); gives whether something is left for another
    /// pass soon (a failed or deferred removal), which never stops the task.
    async fn prune(&self) -> bool {
        let Some(remover) = &self.builder.remover else {
            return false;
        };
        let named: BTreeSet<String> = self
            .desired
            .borrow()
            .as_ref()
            .map(|d| {
                d.state
                    .guests
                    .iter()
                    .filter_map(|g| g.golden.version.clone())
                    .collect()
            })
            .unwrap_or_default();
        match super::prune::prune(&self.builder.journal, remover.as_ref(), &named).await {
            Ok(outcome) => outcome.left_work(),
            Err(e) => {
                tracing::error!(error = %error_chain(&e), "golden archives not pruned");
                true
            }
        }
    }

    async fn outcome(&self, outcome: &str, reason: Option<&str>, version: Option<String>) {
        let written = self
            .builder
            .journal
            .record_golden_outcome(outcome.to_owned(), reason.map(str::to_owned), version)
            .await;
        if let Err(e) = written {
            tracing::error!(error = %error_chain(&e), "could not journal the golden build's outcome");
        }
    }

    async fn audit(&self, action: &str, error: &super::GoldenBuildError) {
        let text = error_chain(error);
        tracing::error!(reason = error.reason(), error = %text, "golden recipe not built");
        let mut event = AuditEvent::new(action);
        event.detail = serde_json::json!({ "reason": error.reason(), "error": text });
        if let Err(e) = self.builder.journal.append_audit(event).await {
            tracing::error!(error = %error_chain(&e), "could not audit a golden build");
        }
    }
}
