//! The controller's side of a rollout (DESIGN §11): each pass asks the agent which image
//! digest to run (`GET /v1/controller`, chosen by an operator's signed job), switches to it
//! when it differs from the one running, and reports the digest it runs and whether it is
//! healthy (`POST /v1/controller/health`).
//!
//! Switching and judging health are the operator's commands, run directly (no shell):
//! `activate` gets the digest as its last argument (e.g. a script that pulls
//! `registry/controller@<digest>` and restarts the unit) and must exit 0 only once the new
//! controller works; `health` (optional) exits 0 while the running one is healthy. The digest
//! running is kept in a state file on the guest's root filesystem, so a rollback to the
//! snapshot taken before a rollout brings back the digest that ran then.
//!
//! A failed activation is reported unhealthy for the new digest at once, so the agent rolls
//! the guest back without waiting out its window.
//!
//! A controller with no switch command (`activate` empty: the controller image
//! `scripts/controller-image` builds, which cannot replace its own container) runs the image
//! it was placed on. The host's helper places a rollout's signed image and writes its digest
//! beside the bootstrap ([`PLACED_FILE_NAME`], decision 0102), then restarts the controller's
//! unit: that digest, when there is one, is the one it runs. At its first start without one it
//! adopts the digest its record names unless a rollout is under way: that record is the golden
//! recipe's signed digest, and the helper baked the image only from an archive hashing to it
//! (decision 0088). While a rollout to another digest is under way it keeps reporting the one
//! it runs, until the helper has placed the new image and restarted it.
//!
//! [`ControllerLoop::run`] never gives up: a failed pass (the local API unreachable, an
//! answer it cannot use) is logged and retried after a doubling delay, from one second up to
//! the report interval.

use std::path::PathBuf;
use std::time::Duration;

use crate::backoff::Backoff;
use crate::client::{ClientError, LocalApiClient};
use crate::hooks::{self, HookError};

/// The file beside the bootstrap in which the host's helper writes the digest of the image it
/// placed (`bosun_proto::helper::GUEST_CONTROLLER_DIGEST`).
pub const PLACED_FILE_NAME: &str = "controller.digest";

/// How the loop runs.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// Switches to a digest, given as its last argument. Empty: this controller cannot
    /// switch; it adopts its record's digest at its first start and refuses a rollout.
    pub activate: Vec<String>,
    /// Judges the running controller (exit 0: healthy); none: healthy while activated.
    pub health: Option<Vec<String>>,
    /// Where the digest running is kept.
    pub state_file: PathBuf,
    /// Where the host's helper writes the digest of the image it placed; when it holds one,
    /// that is the digest running (a controller without a switch command).
    pub placed_file: Option<PathBuf>,
    /// The longest either command may take.
    pub command_timeout: Duration,
}

/// What one pass did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassOutcome {
    /// No digest chosen and none running: nothing to report.
    Unmanaged,
    /// Switched to the digest and reported it healthy.
    Activated(String),
    /// Took the digest its record names as the one it runs (no switch command, first start)
    /// and reported it healthy.
    Adopted(String),
    /// Switching to the digest failed; reported unhealthy (the agent rolls back).
    ActivationFailed(String),
    /// Reported the running digest, healthy or not.
    Reported {
        /// The digest.
        digest: String,
        /// Whether it was healthy.
        healthy: bool,
    },
}

/// Why a pass failed.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The local API call failed.
    #[error("talking to the local api failed")]
    Api(#[from] ClientError),
    /// The state file could not be written.
    #[error("failed to write the state file {path}")]
    State {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The agent named something that is not an image digest.
    #[error("the agent named {digest:?}, which is not an image digest; refusing to run it")]
    NotADigest {
        /// What it named (cut).
        digest: String,
    },
}

/// The loop's state.
#[derive(Debug)]
pub struct ControllerLoop {
    client: LocalApiClient,
    config: ControllerConfig,
}

impl ControllerLoop {
    /// A loop talking to `client`.
    pub fn new(client: LocalApiClient, config: ControllerConfig) -> Self {
        Self { client, config }
    }

    /// The digest running: the one the helper placed, else the state file's.
    pub fn running(&self) -> Option<String> {
        let read = |path: &PathBuf| {
            std::fs::read_to_string(path)
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| bosun_proto::controller::is_image_digest(s))
        };
        self.config
            .placed_file
            .as_ref()
            .and_then(read)
            .or_else(|| read(&self.config.state_file))
    }

    fn record(&self, digest: &str) -> Result<(), ControllerError> {
        let state_err = |source| ControllerError::State {
            path: self.config.state_file.clone(),
            source,
        };
        let tmp = self.config.state_file.with_extension("tmp");
        std::fs::write(&tmp, format!("{digest}\n")).map_err(state_err)?;
        std::fs::rename(&tmp, &self.config.state_file).map_err(state_err)
    }

    /// One pass: ask, switch if told to, report. Gives what it did and how long the agent
    /// wants until the next report.
    pub async fn run_once(&self) -> Result<(PassOutcome, Duration), ControllerError> {
        let desired = self.client.desired_controller().await?;
        let next = Duration::from_secs(desired.report_interval_s.clamp(1, 600));
        self.pass(desired.digest, desired.status == "rolling_out")
            .await
            .map(|outcome| (outcome, next))
    }

    /// Passes until `shutdown`, one per report interval. A failed pass is logged and retried
    /// after [`crate::backoff::Backoff`]'s delay, never more than the last report interval.
    /// `shutdown` also ends a pass under way (a command it runs is killed; the digest file
    /// is only written once a switch has succeeded), so a stop never waits out a command's
    /// timeout.
    pub async fn run(&self, shutdown: &tokio_util::sync::CancellationToken) {
        let mut backoff = Backoff::new("controller pass");
        let mut interval = Duration::from_secs(30);
        loop {
            let pass = tokio::select! {
                pass = self.run_once() => pass,
                () = shutdown.cancelled() => return,
            };
            let wait = match pass {
                Ok((outcome, next)) => {
                    tracing::debug!(?outcome, "controller pass");
                    backoff.succeeded();
                    interval = next;
                    next
                }
                Err(e) => backoff.failed(&e).min(interval),
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = shutdown.cancelled() => return,
            }
        }
    }

    async fn pass(
        &self,
        desired: Option<String>,
        rolling_out: bool,
    ) -> Result<PassOutcome, ControllerError> {
        let running = self.running();
        if let Some(digest) = desired.filter(|d| Some(d) != running.as_ref()) {
            if !bosun_proto::controller::is_image_digest(&digest) {
                return Err(ControllerError::NotADigest {
                    digest: digest.chars().take(80).collect(),
                });
            }
            if !self.config.activate.is_empty() {
                return self.switch(digest).await;
            }
            if running.is_none() && !rolling_out {
                self.record(&digest)?;
                tracing::info!(digest = %digest, "controller adopted the digest its record names");
                self.client
                    .report_controller_health(&digest, true, Some("adopted at first start"))
                    .await?;
                return Ok(PassOutcome::Adopted(digest));
            }
            if rolling_out {
                tracing::debug!(digest = %digest, "a rollout asks for another image; the host's helper places it");
            }
        }
        let Some(digest) = running else {
            return Ok(PassOutcome::Unmanaged);
        };
        let (healthy, detail) = match &self.config.health {
            None => (true, None),
            Some(argv) => {
                match hooks::run("controller", "health", argv, self.config.command_timeout).await {
                    Ok(()) => (true, None),
                    Err(e) => (false, Some(hook_detail(&e))),
                }
            }
        };
        self.client
            .report_controller_health(&digest, healthy, detail.as_deref())
            .await?;
        Ok(PassOutcome::Reported { digest, healthy })
    }

    /// Runs the switch command for `digest` and reports the outcome.
    async fn switch(&self, digest: String) -> Result<PassOutcome, ControllerError> {
        let mut argv = self.config.activate.clone();
        argv.push(digest.clone());
        match hooks::run("controller", "activate", &argv, self.config.command_timeout).await {
            Ok(()) => {
                self.record(&digest)?;
                tracing::info!(digest = %digest, "controller switched");
                self.client
                    .report_controller_health(&digest, true, Some("activated"))
                    .await?;
                Ok(PassOutcome::Activated(digest))
            }
            Err(e) => {
                let detail = hook_detail(&e);
                tracing::warn!(digest = %digest, error = %detail, "switching the controller failed");
                self.client
                    .report_controller_health(&digest, false, Some(&detail))
                    .await?;
                Ok(PassOutcome::ActivationFailed(digest))
            }
        }
    }
}

/// A hook error as one bounded line for the health report.
fn hook_detail(e: &HookError) -> String {
    bosun_errchain::error_chain(e)
        .chars()
        .map(|c| {
            if bosun_proto::inert::is_control(c) {
                ' '
            } else {
                c
            }
        })
        .take(200)
        .collect()
}
