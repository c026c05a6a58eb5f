//! The door opened from the node's console (DESIGN §12, decision 0104): when the agent's poll
//! loop is wedged, the operator's signed `break-glass-enable` cannot arrive through it, so
//! `bosun-agentctl break-glass open --file JOB` hands the same signed job to the same code the
//! poll loop hands it to, in a process of its own beside the agent:
//!
//! ```text
//!  JOB + JOB.sig ─► kind is break-glass-enable? ─► JobRunner::handle (break-glass only)
//!     check_job: signature by allowed_signers, namespace, not before / expiry, this host
//!     claim_job: job id once, nonce never reused (the journal's, shared with the agent)
//!     BreakGlassJobs: accepted step ─► helper break_glass_open ─► door + audit journaled
//!  ◄─ the job's result (also queued in the journal's outbox for the hub)
//! ```
//!
//! Nothing is checked or written here that the hub-delivered job does not go through: the
//! refusals are journaled and audited as the poll loop's are (`job.refused`), the door and its
//! audit row (`break_glass.opened`) as the runner's are, and the hub hears of both through the
//! audit tail once the agent polls again. The agent and this command share the journal
//! (SQLite, one writer at a time), so a job opened here is `already_run` if the hub delivers it
//! later, and its nonce is spent for both.

use std::sync::Arc;

use bosun_errchain::error_chain;
use bosun_proto::job::{JobKind, JobResult, SignedJob};
use tokio::sync::mpsc;

use super::BreakGlass;
use crate::clock::SystemClock;
use crate::config::AgentConfig;
use crate::guests::queue::GuestQueue;
use crate::links::helper::HelperClient;
use crate::links::hub_client::identity::{HostIdentity, IdentityError};
use crate::ops::jobs::check::peek_job_id;
use crate::ops::jobs::runner::JobRunner;
use crate::ops::journal::{JournalError, JournalHandle};

/// Why the console could not hand the job over (a refusal of the job itself is its result).
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// The document is another kind of job: the console opens the door and nothing else.
    #[error("the job is a {kind:?} job; the console only opens break-glass (break-glass-enable)")]
    NotBreakGlass {
        /// The kind the document names (at most [`MAX_KIND_CHARS`] characters of it).
        kind: String,
    },
    /// The agent's configuration names no helper: there is no door to open.
    #[error("the agent's configuration names no helper ([helper]), which writes the door")]
    NoHelper,
    /// The host has no identity yet.
    #[error("this host is not enrolled")]
    NotEnrolled,
    /// The host's identity could not be read.
    #[error("reading the host's identity")]
    Identity(#[source] IdentityError),
    /// A configured value is not one.
    #[error("{field}: {reason}")]
    Value {
        /// The field.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// The Proxmox client could not be set up.
    #[error("setting up the Proxmox client")]
    Pve(#[source] bosun_pve::PveSetupError),
    /// The journal could not be opened.
    #[error("opening the agent's journal")]
    Journal(#[source] JournalError),
    /// The job ran before (here or through the hub): it runs at most once, and its first
    /// result stands (refused as `already_run`, audited).
    #[error(
        "already_run: job {job_id} already ran on this host; a new door needs a new signed job"
    )]
    AlreadyRun {
        /// The job.
        job_id: uuid::Uuid,
    },
    /// The job ended without a result (the journal could not record it).
    #[error("the job ended without a result; see the log")]
    NoResult,
}

/// Most characters of another kind's name a refusal repeats.
pub const MAX_KIND_CHARS: usize = 64;

/// The kind `signed`'s document names when it is not `break-glass-enable` (a missing kind is
/// none); `None` when it is, or when the document is not a JSON object.
fn other_kind(signed: &SignedJob) -> Option<String> {
    let bytes = signed.document_bytes().ok()?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let object = value.as_object()?;
    let kind = object.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    (kind != JobKind::BreakGlassEnable.as_str()).then(|| {
        kind.chars()
            .take(MAX_KIND_CHARS)
            .flat_map(char::escape_debug)
            .collect()
    })
}

/// Hands `signed` to the job runner as the poll loop would, for a `break-glass-enable` only;
/// gives the job's result (`succeeded` with the door's facts, or `rejected` with why).
pub async fn open_from_console(
    config: &AgentConfig,
    signed: &SignedJob,
) -> Result<JobResult, ConsoleError> {
    // The kind is read before any check only to refuse other jobs outright, whatever else
    // the document says; one that is not JSON at all goes on to be refused, and audited, by
    // the checks themselves.
    if let Some(kind) = other_kind(signed) {
        return Err(ConsoleError::NotBreakGlass { kind });
    }
    let transport = config.helper.clone().ok_or(ConsoleError::NoHelper)?;
    let identity = HostIdentity::load(&config.state_dir)
        .map_err(ConsoleError::Identity)?
        .ok_or(ConsoleError::NotEnrolled)?;
    let storage = |field: &'static str, name: &str| {
        bosun_pve::StorageId::new(name.to_owned()).map_err(|e| ConsoleError::Value {
            field,
            reason: e.to_string(),
        })
    };
    let restore_storage = storage("pve.storage", &config.guest_storage)?;
    let backup_storage = storage("backup.storage", &config.backup.storage)?;
    // Break-glass jobs never call Proxmox; the runner is built with the agent's client all
    // the same, so it is the agent's runner and nothing else.
    let pve = Arc::new(bosun_pve::client_from_settings(&config.pve).map_err(ConsoleError::Pve)?);
    let clock = SystemClock::shared();
    let journal = JournalHandle::open(&config.journal_path(), Arc::clone(&clock))
        .await
        .map_err(ConsoleError::Journal)?;
    let (results, mut answers) = mpsc::unbounded_channel();
    let door = BreakGlass::new(
        HelperClient::new(transport),
        journal.clone(),
        Arc::clone(&clock),
    );
    let runner = JobRunner::new(
        pve,
        journal.clone(),
        GuestQueue::new(1),
        clock,
        config.allowed_signers.clone(),
        identity.host_id,
        restore_storage,
        backup_storage,
        results,
    )
    .with_break_glass(door);
    tracing::info!(host_id = %identity.host_id, "break-glass job handed over from the console");
    // The runner's future is deep (every family's); boxed, a caller's stays shallow.
    let handled: futures::future::BoxFuture<'_, ()> = Box::pin(runner.handle(signed, None));
    handled.await;
    // The job has ended: its result (or its refusal) was sent before `handle` returned.
    let mut last = None;
    while let Ok(result) = answers.try_recv() {
        last = Some(result);
    }
    // A job that already ran gets no second result: its first one stands.
    let ran_before = match (&last, peek_job_id(signed)) {
        (None, Some(job_id)) => journal
            .job_run(job_id.to_string())
            .await
            .ok()
            .flatten()
            .map(|_| job_id),
        _ => None,
    };
    if let Err(e) = journal.close().await {
        tracing::warn!(error = %error_chain(&e), "closing the journal");
    }
    match (last, ran_before) {
        (Some(result), _) => Ok(result),
        (None, Some(job_id)) => Err(ConsoleError::AlreadyRun { job_id }),
        (None, None) => Err(ConsoleError::NoResult),
    }
}
