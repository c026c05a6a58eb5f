//! The local API: HTTPS on the guest bridge for the controllers inside customer guests.
//!
//! Every request but `GET /v1/health` carries `Authorization: Bearer <token>`; the guest is
//! resolved from the token alone ([`auth`]) and every Proxmox call takes that guest's vmid.
//! A request that names another guest (`vmid` or `guest_id` in the query or the body) is
//! refused with 403, audited, and reaches no Proxmox call.
//!
//! ```text
//!  controller ──TCP──► SlotBook (slots.rs, conn.rs): caps, slots reserved per guest
//!             ──TLS (pinned leaf, cert.rs)──► axum router (handlers.rs)
//!                                              │ Caller (auth.rs): token → journal hash → guest;
//!                                              │   the connection's slot learns its guest
//!                                              │ RateLimiter (per token) · body limit
//!                                              │ bosun_httpkit: drain the rest, or close
//!                     reads ◄──────────────────┤
//!  GuestOps (bosun-pve) ◄── GuestQueue (one mutation per guest) ◄── snapshot / rollback
//!                                              ├──► BackupService (crate::data::backup) ── queue
//!                                              ├──► protection (crate::data::protection): the
//!                                              │    journal judged against the signed plan
//!                                              ├──► ControllerBoard (crate::guests::controller):
//!                                              │    the digest to run, health reports
//!                                              └──► ConsentBook (crate::trust::break_glass):
//!                                                   break-glass consent → the support shell's file
//! ```
//!
//! Errors are answered in one place ([`error::ApiError`]): a stable `code` and a `message`.
//! The OpenAPI document is generated from the handlers ([`openapi`]) and committed as
//! `docs/localapi.openapi.json`; a test fails when the two drift.

mod audit_routes;
pub mod auth;
mod backup_routes;
mod body;
pub mod conn;
mod controller_routes;
pub mod error;
mod handlers;
pub mod interrupted;
pub mod refusals;
pub mod restore_test;
pub mod slots;
mod snapshots;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use bosun_errchain::error_chain;
use bosun_proto::desired::BackupPolicy;
use tokio::sync::watch;
use utoipa::OpenApi as _;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use audit_routes::{AuditItem, AuditPage};
pub use auth::{Caller, RateLimiter};
pub use backup_routes::{BackupBody, BackupDue, BackupStatus};
use bosun_pve::GuestOps;
pub use conn::ConnectionLimits;
pub use controller_routes::{
    ConsentBody, ConsentState, ControllerStatus, DesiredController, HealthBody, HealthRecorded,
};
pub use error::{ApiError, ErrorBody};
pub use handlers::{Health, MountClass, MountInfo, Scope, StorageReport};
pub use restore_test::{RestoreTestBoard, RestoreTestRecord, RestoreTestStatus};
pub use slots::{ConnSlot, SlotBook};
pub use snapshots::{
    API_SNAPSHOT_PREFIX, RollbackAccepted, RollbackBody, SnapshotBody, SnapshotEntry, SnapshotList,
    SnapshotTaken,
};

use crate::clock::SharedClock;
use crate::data::backup::BackupService;
use crate::data::desired::DesiredSnapshot;
use crate::data::storage::StorageFacts;
use crate::guests::controller::ControllerBoard;
use crate::guests::credentials::cert::{CertError, LocalApiCert};
use crate::guests::queue::GuestQueue;
use crate::ops::journal::{self, JournalHandle};
use crate::trust::break_glass::consent::ConsentBook;

/// The default port on the bridge address.
pub const DEFAULT_PORT: u16 = 8443;
/// The largest request body accepted by default, in bytes (`local_api.max_body_bytes`).
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// Tunables of the local API.
#[derive(Debug, Clone)]
pub struct LocalApiConfig {
    /// Largest request body accepted (413 above).
    pub max_body_bytes: usize,
    /// Sustained requests per second per token.
    pub rate_per_s: u32,
    /// Requests a token may send at once before the rate applies.
    pub burst: u32,
    /// How long in-flight requests get to finish on shutdown.
    pub shutdown_grace: Duration,
    /// Connection caps and timeouts ([`conn`]).
    pub connections: ConnectionLimits,
    /// The window over which repeated refusals are counted into one audit row ([`refusals`]).
    pub refusal_window: Duration,
    /// How often controllers are asked to report health (`GET /v1/controller`).
    pub controller_report_interval: Duration,
    /// The Proxmox storage tier 0 writes to when no target names it (`backup.storage`), as
    /// `GET /v1/protection` names it.
    pub default_storage: String,
    /// How long one hour of a verification interval lasts (`backup.verify_hour_ms`), so
    /// `GET /v1/protection` judges verification on the verifier's own clock.
    pub verify_hour: Duration,
}

impl Default for LocalApiConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: MAX_BODY_BYTES,
            rate_per_s: 20,
            burst: 40,
            shutdown_grace: Duration::from_secs(5),
            connections: ConnectionLimits::default(),
            refusal_window: refusals::DEFAULT_REFUSAL_WINDOW,
            controller_report_interval: crate::config::controller::ControllerSettings::default()
                .report_interval,
            default_storage: "local".to_owned(),
            verify_hour: Duration::from_secs(3600),
        }
    }
}

/// Everything the handlers share. Cheap to clone.
#[derive(Debug, Clone)]
pub struct LocalApi {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    ops: Arc<dyn GuestOps>,
    journal: JournalHandle,
    queue: GuestQueue,
    backups: BackupService,
    policy: watch::Receiver<Option<BackupPolicy>>,
    desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
    storage: watch::Receiver<StorageFacts>,
    restore_tests: RestoreTestBoard,
    controllers: ControllerBoard,
    consent: ConsentBook,
    limiter: RateLimiter,
    refusals: refusals::RefusalLedger,
    /// Connection slots per guest ([`slots`]).
    slots: Arc<SlotBook>,
    clock: SharedClock,
    config: LocalApiConfig,
}

/// What [`LocalApi::new`] needs.
#[derive(Debug)]
pub struct LocalApiParts {
    /// Proxmox, scoped per call to the caller's vmid.
    pub ops: Arc<dyn GuestOps>,
    /// The agent's journal (tokens, operations, audit).
    pub journal: JournalHandle,
    /// The agent's per-guest work queue.
    pub queue: GuestQueue,
    /// Backups and their phases.
    pub backups: BackupService,
    /// The backup policy of the current desired state, as the hub loop publishes it.
    pub policy: watch::Receiver<Option<BackupPolicy>>,
    /// The desired state the agent acts on, held to the signed data plan (with the plan): what
    /// `GET /v1/protection` judges against.
    pub desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
    /// What the storage watcher knows of the manifest's targets: the speed class of each
    /// target's storage, read at every `GET /v1/storage`, so it follows targets as they come
    /// and go.
    pub storage: watch::Receiver<StorageFacts>,
    /// Restore-test results per guest.
    pub restore_tests: RestoreTestBoard,
    /// What each guest's controller is told to run, and its health reports.
    pub controllers: ControllerBoard,
    /// Each guest's consent to break-glass commands, and the file the support shell reads.
    pub consent: ConsentBook,
    /// The agent's clock.
    pub clock: SharedClock,
    /// Tunables.
    pub config: LocalApiConfig,
}

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
pub enum LocalApiError {
    /// The listener could not be used.
    #[error("failed to serve the local api on {addr}")]
    Serve {
        /// The listener's address, if known.
        addr: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl LocalApi {
    /// Assembles the shared state.
    pub fn new(parts: LocalApiParts) -> Self {
        let limiter = RateLimiter::new(parts.config.rate_per_s, parts.config.burst);
        Self {
            inner: Arc::new(Inner {
                ops: parts.ops,
                journal: parts.journal,
                queue: parts.queue,
                backups: parts.backups,
                policy: parts.policy,
                desired: parts.desired,
                storage: parts.storage,
                restore_tests: parts.restore_tests,
                controllers: parts.controllers,
                consent: parts.consent,
                limiter,
                refusals: refusals::RefusalLedger::new(parts.config.refusal_window),
                slots: SlotBook::new(&parts.config.connections),
                clock: parts.clock,
                config: parts.config,
            }),
        }
    }

    /// The connection slots: where the guests' configured addresses go
    /// ([`SlotBook::set_addresses`]) and what tests read.
    pub fn slots(&self) -> &Arc<SlotBook> {
        &self.inner.slots
    }

    /// Writes the summaries of every refusal window, open or ended (at shutdown; tests).
    pub async fn flush_refusals(&self) {
        for event in self.inner.refusals.take_due(self.inner.clock.now(), true) {
            self.audit_refusal(event).await;
        }
    }

    /// Writes the summaries of the refusal windows that have ended.
    async fn flush_ended_refusals(&self) {
        for event in self.inner.refusals.take_due(self.inner.clock.now(), false) {
            self.audit_refusal(event).await;
        }
    }

    /// Appends a refusal's audit row; a journal failure is logged, the refusal stands.
    pub(crate) async fn audit_refusal(&self, event: journal::AuditEvent) {
        if let Err(e) = self.inner.journal.append_audit(event).await {
            tracing::error!(error = %error_chain(&e), "could not audit a refused cross-guest request");
        }
    }

    /// The router with every endpoint, limits and the JSON fallbacks; a body a handler leaves
    /// unread is drained or its connection closed after the answer ([`bosun_httpkit`]).
    pub fn router(&self) -> Router {
        let (router, _) = api_router().split_for_parts();
        router
            .fallback(|| async { ApiError::NoRoute })
            .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
            .layer(DefaultBodyLimit::max(self.inner.config.max_body_bytes))
            .layer(axum::middleware::from_fn_with_state(
                bosun_httpkit::DrainLimits::within(self.inner.config.connections.body_timeout),
                bosun_httpkit::settle,
            ))
            .layer(tower_http::trace::TraceLayer::new_for_http())
            .layer(axum::middleware::from_fn(crate::metrics::count_local_api))
            .with_state(self.clone())
    }
}

fn api_router() -> OpenApiRouter<LocalApi> {
    OpenApiRouter::with_openapi(handlers::ApiDoc::openapi())
        .routes(routes!(handlers::health))
        .routes(routes!(handlers::storage))
        .routes(routes!(snapshots::list_snapshots, snapshots::take_snapshot))
        .routes(routes!(snapshots::rollback))
        .routes(routes!(backup_routes::start_backup))
        .routes(routes!(backup_routes::backup_due))
        .routes(routes!(backup_routes::backup_status))
        .routes(routes!(handlers::restore_test_status))
        .routes(routes!(audit_routes::guest_audit))
        .routes(routes!(backup_routes::protection))
        .routes(routes!(controller_routes::desired_controller))
        .routes(routes!(controller_routes::report_health))
        .routes(routes!(
            controller_routes::consent_state,
            controller_routes::grant_consent,
            controller_routes::revoke_consent
        ))
}

/// The OpenAPI document of the local API, as generated from the handlers.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let (_, doc) = api_router().split_for_parts();
    doc
}

/// The OpenAPI document as the pretty JSON committed in `docs/localapi.openapi.json`.
pub fn openapi_json() -> String {
    let mut text = openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    text.push('\n');
    text
}

/// The TLS configuration a running server uses; [`LocalApiTls::reload`] swaps the leaf in
/// place after a rotation, for new connections.
#[derive(Debug, Clone)]
pub struct LocalApiTls {
    config: RustlsConfig,
}

impl LocalApiTls {
    /// The configuration serving `cert`.
    pub fn new(cert: &LocalApiCert) -> Result<Self, CertError> {
        Ok(Self {
            config: RustlsConfig::from_config(cert.server_config()?),
        })
    }

    /// Serves `cert` from now on.
    pub fn reload(&self, cert: &LocalApiCert) -> Result<(), CertError> {
        self.config.reload_from_config(cert.server_config()?);
        tracing::info!(fingerprint = %cert.fingerprint(), "local api certificate reloaded");
        Ok(())
    }
}

/// Serves `api` over `tls` on `listener` until `shutdown` resolves, then lets in-flight
/// requests finish for the configured grace. HTTP/1.1 only; every connection is subject to
/// the caps and timeouts of [`conn`].
pub async fn serve(
    listener: std::net::TcpListener,
    tls: &LocalApiTls,
    api: LocalApi,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), LocalApiError> {
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let serve_err = |source| LocalApiError::Serve {
        addr: addr.clone(),
        source,
    };
    listener.set_nonblocking(true).map_err(serve_err)?;
    let handle = axum_server::Handle::new();
    let grace = api.inner.config.shutdown_grace;
    let stopper = handle.clone();
    let flusher = {
        let api = api.clone();
        let period = api.inner.refusals.window();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let stopped = async move {
                shutdown.await;
                stopper.graceful_shutdown(Some(grace));
            };
            tokio::pin!(stopped);
            loop {
                tokio::select! {
                    () = &mut stopped => break,
                    _ = tick.tick() => api.flush_ended_refusals().await,
                }
            }
        })
    };
    let limits = api.inner.config.connections;
    tracing::info!(
        addr = %addr,
        max_connections = limits.max_total,
        max_connections_per_peer = limits.max_per_peer,
        max_connections_per_guest = limits.max_per_guest,
        max_unattributed_connections = limits.max_unattributed,
        "local api listening"
    );
    warn_if_files_too_few(limits.max_total);
    let app = api.router();
    let tls_acceptor =
        RustlsAcceptor::new(tls.config.clone()).handshake_timeout(limits.handshake_timeout);
    let acceptor = conn::LimitedAcceptor::new(tls_acceptor, Arc::clone(&api.inner.slots), limits);
    axum_server::from_tcp(listener)
        .map_err(serve_err)?
        .acceptor(acceptor)
        .http1_only()
        .handle(handle)
        .serve(app.into_make_service())
        .await
        .map_err(serve_err)?;
    flusher.abort();
    api.flush_refusals().await;
    tracing::info!(addr = %addr, "local api stopped");
    Ok(())
}

/// Files the agent needs besides local-API connections (journal, Proxmox, hub, helper).
const OTHER_FILES: u64 = 256;

/// Warns when the process's file limit cannot hold `max_connections` and the agent's other
/// files: the caps would then not be what runs out first.
fn warn_if_files_too_few(max_connections: usize) {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let needed = u64::try_from(max_connections)
        .unwrap_or(u64::MAX)
        .saturating_add(OTHER_FILES);
    if let Some(soft) = limit.current.filter(|soft| *soft < needed) {
        tracing::warn!(
            nofile = soft,
            needed,
            max_connections,
            "the file limit is below local_api.max_connections plus the agent's own files"
        );
    }
}
