//! `bosun-agentctl rotate-local-api-cert`: replace the local API's certificate and re-issue
//! every guest's bootstrap with the new pin and a fresh token.
//!
//! The command runs **while the daemon is stopped**. The daemon holds an exclusive lock on
//! `<state_dir>/agentd.lock` for as long as it runs (so a second daemon on the same state
//! refuses too); the command takes the same lock and refuses with
//! [`RotateError::DaemonRunning`] (stop the unit first) when it cannot. That
//! keeps one writer of the certificate and of the token table at a time, and the daemon,
//! started again, simply loads the new certificate. The rotation itself:
//!
//! 1. a new leaf is generated and stored (the old pin stops working everywhere);
//! 2. each running guest this agent provisioned gets a new token and a bootstrap carrying
//!    the new fingerprint (`pct push` through the helper, journaled as `reissue_bootstrap`);
//! 3. every other guest (stopped, or whose push failed) has its token revoked: the old file
//!    in it names a pin that no longer matches, and the daemon's "running provisioned guest
//!    without a token" action delivers a new bootstrap once it runs.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use bosun_proto::bootstrap::PinnedEndpoint;
use bosun_proto::desired::DesiredState;
use bosun_pve::{GuestStatus, Pve, PveSettings, Vmid};
use uuid::Uuid;

use crate::clock::SystemClock;
use crate::guests::credentials::bootstrap::{
    BootstrapEndpoints, BootstrapIssuer, IssueError, IssueTarget,
};
use crate::links::helper::{HelperClient, HelperTransport};
use crate::ops::journal::{JournalError, JournalHandle};
use crate::runtime::state_lock::{LockError, StateLock};

/// Why the rotation did not run.
#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    /// The daemon runs (or another rotation does).
    #[error(
        "bosun-agentd is running on {state_dir}; stop it first (systemctl stop bosun-agentd), \
         rotate, then start it again"
    )]
    DaemonRunning {
        /// The state directory.
        state_dir: PathBuf,
        /// The cause.
        #[source]
        source: LockError,
    },
    /// The lock could not be taken for another reason.
    #[error("locking the state directory")]
    Lock(#[source] LockError),
    /// The config lacks what the rotation needs.
    #[error("cannot rotate: {reason}")]
    Config {
        /// What is missing.
        reason: &'static str,
    },
    /// The host's identity could not be read.
    #[error("reading the host identity")]
    Identity(#[source] crate::links::hub_client::identity::IdentityError),
    /// The journal could not be read.
    #[error("the journal")]
    Journal(#[source] JournalError),
    /// The Proxmox client could not be set up.
    #[error("setting up the proxmox client")]
    Pve(#[source] bosun_pve::PveSetupError),
    /// The certificate could not be rotated (nothing was re-issued).
    #[error("rotating the certificate")]
    Certificate(#[source] super::bootstrap::IssueError),
}

/// What happened to one guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuestRotation {
    /// Running: a new token and bootstrap were pushed.
    Reissued,
    /// Not running (or not in the desired state): its token was revoked; the daemon
    /// delivers a new bootstrap once it runs.
    Deferred {
        /// Why it was not pushed now.
        reason: String,
    },
    /// The push failed: its token was revoked; the daemon retries once it runs.
    Failed {
        /// The error chain.
        error: String,
    },
}

/// The outcome of a rotation.
#[derive(Debug, Clone)]
pub struct RotationReport {
    /// The new fingerprint.
    pub fingerprint: String,
    /// Each guest this agent provisioned.
    pub guests: Vec<(Uuid, u32, GuestRotation)>,
}

impl RotationReport {
    /// Whether any push failed.
    pub fn has_failures(&self) -> bool {
        self.guests
            .iter()
            .any(|(_, _, g)| matches!(g, GuestRotation::Failed { .. }))
    }
}

/// What a rotation reads from the agent's configuration (`AgentConfig::rotation`).
#[derive(Debug, Clone)]
pub struct RotateSettings {
    /// The agent's state directory.
    pub state_dir: PathBuf,
    /// Its journal.
    pub journal_path: PathBuf,
    /// The local API's address and port, when it is enabled.
    pub local_api: Option<(IpAddr, u16)>,
    /// The helper that pushes the bootstraps, when one is configured.
    pub helper: Option<HelperTransport>,
    /// Proxmox.
    pub pve: PveSettings,
    /// The hub as guests reach it.
    pub bootstrap_hub: PinnedEndpoint,
}

/// Rotates the local API certificate of the (stopped) agent configured by `config`.
pub async fn rotate_local_api_cert(config: &RotateSettings) -> Result<RotationReport, RotateError> {
    let _lock = StateLock::exclusive(&config.state_dir).map_err(|source| match source {
        LockError::Held { .. } => RotateError::DaemonRunning {
            state_dir: config.state_dir.clone(),
            source,
        },
        other => RotateError::Lock(other),
    })?;
    let (bind_addr, port) = config.local_api.ok_or(RotateError::Config {
        reason: "[local_api] is not enabled",
    })?;
    if port == 0 {
        return Err(RotateError::Config {
            reason: "local_api.port is 0; bootstraps must name the real port",
        });
    }
    let transport = config.helper.clone().ok_or(RotateError::Config {
        reason: "[helper] is not configured, so bootstraps cannot be pushed",
    })?;
    // The bootstraps carry the keys of the data plan signed for this host only.
    let host_id = crate::links::hub_client::identity::HostIdentity::load(&config.state_dir)
        .map_err(RotateError::Identity)?
        .ok_or(RotateError::Config {
            reason: "the box is not enrolled (no host identity in the state directory)",
        })?
        .host_id;
    let journal = JournalHandle::open(&config.journal_path, SystemClock::shared())
        .await
        .map_err(RotateError::Journal)?;
    let pve = bosun_pve::client_from_settings(&config.pve).map_err(RotateError::Pve)?;
    let desired: Option<DesiredState> = journal
        .cached_desired_state()
        .await
        .map_err(RotateError::Journal)?
        .and_then(|c| serde_json::from_str(&c.body).ok());

    let (running, deferred) = sort_guests(&journal, &pve, desired.as_ref()).await?;

    let bind = bind_addr.to_string();
    let url_host = if bind_addr.is_ipv6() {
        format!("[{bind}]")
    } else {
        bind.clone()
    };
    let cert = crate::guests::credentials::cert::LocalApiCert::load_or_create(
        &config.state_dir,
        std::slice::from_ref(&bind),
    )
    .map_err(|e| RotateError::Certificate(super::bootstrap::IssueError::Certificate(e)))?;
    let bootstrap_issuer = BootstrapIssuer::new(
        Arc::new(HelperClient::new(transport)),
        journal.clone(),
        BootstrapEndpoints {
            hub: config.bootstrap_hub.clone(),
            local_api_url: format!("https://{url_host}:{port}"),
            local_api_fingerprint: cert.fingerprint().to_owned(),
        },
        host_id,
    );
    let (cert, failures) = bootstrap_issuer
        .rotate_certificate(&config.state_dir, &[bind], &running)
        .await
        .map_err(RotateError::Certificate)?;

    let report = report_guests(cert.fingerprint(), &running, &failures, deferred);
    revoke_stale(&journal, &report).await;
    Ok(report)
}

/// A guest left out of the re-issue, with why.
type Deferred = (Uuid, u32, String);

/// Sorts the journal's guests into the running ones a new bootstrap reaches now and the
/// ones deferred (not in the cached desired state, not running, status unknown).
async fn sort_guests<P: Pve>(
    journal: &JournalHandle,
    pve: &P,
    desired: Option<&DesiredState>,
) -> Result<(Vec<IssueTarget>, Vec<Deferred>), RotateError> {
    let mut running = Vec::new();
    let mut deferred = Vec::new();
    for provenance in journal
        .all_provenance()
        .await
        .map_err(RotateError::Journal)?
    {
        if provenance.is_scratch() {
            continue;
        }
        let Some(guest_id) = provenance.guest_id().and_then(|g| Uuid::parse_str(g).ok()) else {
            continue;
        };
        let vmid = provenance.vmid();
        let spec = desired.and_then(|d| d.guests.iter().find(|s| s.guest_id == guest_id));
        let status = match Vmid::new(vmid) {
            Ok(v) => pve
                .ct_status(v)
                .await
                .map(|s| s.status)
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match (spec, status, Vmid::new(vmid)) {
            (Some(spec), Ok(GuestStatus::Running), Ok(v)) => running.push(IssueTarget {
                guest_id,
                vmid: v,
                customer: spec.customer.clone(),
            }),
            (None, _, _) => {
                deferred.push((guest_id, vmid, "not in the cached desired state".to_owned()))
            }
            (_, Ok(status), _) => {
                deferred.push((guest_id, vmid, format!("not running ({status:?})")))
            }
            (_, Err(e), _) => deferred.push((guest_id, vmid, format!("status unknown: {e}"))),
        }
    }
    Ok((running, deferred))
}

/// The rotation's report: each running guest re-issued or failed, then the deferred ones.
fn report_guests(
    fingerprint: &str,
    running: &[IssueTarget],
    failures: &[IssueError],
    deferred: Vec<Deferred>,
) -> RotationReport {
    let mut report = RotationReport {
        fingerprint: fingerprint.to_owned(),
        guests: Vec::new(),
    };
    for target in running {
        let failure = failures.iter().find(|f| f.guest_id() == target.guest_id);
        let outcome = match failure {
            None => GuestRotation::Reissued,
            Some(e) => GuestRotation::Failed {
                error: bosun_errchain::error_chain(e),
            },
        };
        report
            .guests
            .push((target.guest_id, target.vmid.get(), outcome));
    }
    for (guest_id, vmid, reason) in deferred {
        report
            .guests
            .push((guest_id, vmid, GuestRotation::Deferred { reason }));
    }
    report
}

/// Revokes the token of every guest not re-issued: it holds a bootstrap pinning the old
/// certificate.
async fn revoke_stale(journal: &JournalHandle, report: &RotationReport) {
    for (guest_id, vmid, outcome) in &report.guests {
        if *outcome != GuestRotation::Reissued
            && let Err(e) = journal.revoke_token(guest_id.to_string()).await
        {
            tracing::error!(%guest_id, vmid, error = %bosun_errchain::error_chain(&e), "could not revoke a stale token");
        }
    }
}
