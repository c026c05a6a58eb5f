//! The local API in the phases: bound (with its certificate) before provisioning, so the
//! guests' bootstraps can name its real address and fingerprint, and served once the
//! subsystems it answers for run.

use std::net::SocketAddr;
use std::sync::Arc;

use bosun_errchain::error_chain;
use bosun_proto::bootstrap::PinnedEndpoint;
use bosun_proto::desired::BackupPolicy;
use bosun_pve::PveOps;
use tokio::sync::watch;

use super::spawn::Wiring;
use super::{AgentError, LocalApiEndpoint};
use crate::config::{AgentConfig, LocalApiSettings};
use crate::data::backup::BackupService;
use crate::data::storage::StorageFacts;
use crate::guests::controller::ControllerBoard;
use crate::guests::credentials::bootstrap::{BootstrapEndpoints, BootstrapIssuer};
use crate::guests::credentials::cert::LocalApiCert;
use crate::guests::localapi::{
    self, LocalApi, LocalApiConfig, LocalApiParts, LocalApiTls, RestoreTestBoard, SlotBook,
};
use crate::links::helper::HelperClient;
use crate::ops::journal::JournalHandle;
use crate::trust::break_glass::consent::ConsentBook;

/// The local API bound but not yet serving.
pub(super) struct BoundLocalApi {
    listener: std::net::TcpListener,
    tls: LocalApiTls,
    endpoint: LocalApiEndpoint,
    settings: LocalApiSettings,
}

/// Binds the local API's listener and loads (or creates once) its certificate, so the
/// bootstrap can name the real address and fingerprint before provisioning starts.
pub(super) fn bind(
    config: &AgentConfig,
    settings: LocalApiSettings,
) -> Result<BoundLocalApi, AgentError> {
    let wanted = SocketAddr::new(settings.bind, settings.port);
    let bind_err = |source| AgentError::LocalApiBind {
        addr: wanted,
        source,
    };
    let listener = std::net::TcpListener::bind(wanted).map_err(bind_err)?;
    let addr = listener.local_addr().map_err(bind_err)?;
    let cert_err = |source| AgentError::LocalApiCert {
        dir: config.state_dir.clone(),
        source,
    };
    let cert = LocalApiCert::load_or_create(&config.state_dir, &[settings.bind.to_string()])
        .map_err(cert_err)?;
    let tls = LocalApiTls::new(&cert).map_err(cert_err)?;
    tracing::info!(addr = %addr, fingerprint = %cert.fingerprint(), "local api bound");
    Ok(BoundLocalApi {
        listener,
        tls,
        settings,
        endpoint: LocalApiEndpoint {
            addr,
            fingerprint: cert.fingerprint().to_owned(),
        },
    })
}

/// The guest bootstrap issuer, when the config names a helper.
pub(super) fn bootstrap_issuer(
    config: &AgentConfig,
    bound: Option<&BoundLocalApi>,
    journal: &JournalHandle,
    host_id: uuid::Uuid,
) -> Result<Option<BootstrapIssuer>, AgentError> {
    let Some(transport) = config.helper.clone() else {
        tracing::warn!(
            "no [helper] configured: no golden archive can be hashed, so no guest is provisioned"
        );
        return Ok(None);
    };
    let Some(bound) = bound else {
        // The helper still hashes golden archives; there is no local API to bootstrap.
        tracing::info!("no [local_api] configured; provisioning stops before the bootstrap");
        return Ok(None);
    };
    let endpoints = BootstrapEndpoints {
        hub: PinnedEndpoint {
            url: config.bootstrap_hub.url.clone(),
            fingerprint: config.bootstrap_hub.fingerprint.clone(),
        },
        local_api_url: format!("https://{}", bound.endpoint.addr),
        local_api_fingerprint: bound.endpoint.fingerprint.clone(),
    };
    Ok(Some(BootstrapIssuer::new(
        Arc::new(HelperClient::new(transport)),
        journal.clone(),
        endpoints,
        host_id,
    )))
}

/// What the local API serves beyond the wiring.
pub(super) struct LocalApiSources {
    /// Backups the guests start.
    pub backups: BackupService,
    /// The backup policy of the desired state.
    pub policy: watch::Receiver<Option<BackupPolicy>>,
    /// Each mount's class as the storage watcher knows it now.
    pub storage: watch::Receiver<StorageFacts>,
    /// The restore tests' results.
    pub restore_tests: RestoreTestBoard,
    /// The controllers' board.
    pub controllers: ControllerBoard,
    /// The guests' break-glass consents.
    pub consent: ConsentBook,
}

/// Serves the local API on its bound listener; gives where guests reach it and its
/// connection slots, which follow the guests' addresses.
pub(super) fn serve(
    w: &Wiring<'_>,
    bound: Option<BoundLocalApi>,
    sources: LocalApiSources,
) -> (Option<LocalApiEndpoint>, Option<Arc<SlotBook>>) {
    let Some(bound) = bound else {
        return (None, None);
    };
    let endpoint = bound.endpoint.clone();
    let settings = bound.settings;
    let api = LocalApi::new(LocalApiParts {
        ops: PveOps::shared(Arc::clone(w.pve)),
        journal: w.journal.clone(),
        queue: w.queue.clone(),
        backups: sources.backups,
        policy: sources.policy,
        desired: w.desired.clone(),
        storage: sources.storage,
        restore_tests: sources.restore_tests,
        controllers: sources.controllers,
        consent: sources.consent,
        clock: Arc::clone(w.clock),
        config: LocalApiConfig {
            max_body_bytes: settings.max_body_bytes,
            rate_per_s: settings.rate_per_s,
            burst: settings.burst,
            shutdown_grace: settings.shutdown_grace,
            connections: settings.connections,
            controller_report_interval: w.config.controller.report_interval,
            default_storage: w.config.backup.storage.clone(),
            verify_hour: w.config.backup.verify_hour,
            ..LocalApiConfig::default()
        },
    });
    let slots = Arc::clone(api.slots());
    let stop = w.cancel.clone();
    w.tasks.spawn("local_api", async move {
        let BoundLocalApi { listener, tls, .. } = bound;
        if let Err(e) = localapi::serve(listener, &tls, api, stop.cancelled_owned()).await {
            tracing::error!(error = %error_chain(&e), "the local api stopped with an error");
        }
    });
    (Some(endpoint), Some(slots))
}
