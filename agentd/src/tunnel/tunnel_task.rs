//! The tunnel task: one loop on the clock seam.
//!
//! ```text
//!  every tunnel.interval:
//!    each replica: GET /ready ─► failed restart_after times in a row? ─► systemctl restart UNIT
//!  on a new desired snapshot, and every PLACE_EVERY ticks:
//!    sealed tunnel credentials ─► open for this host and the plan's tunnel ─► differ from
//!      the file? ─► write atomically, audit (refused: audit once, the file in place stays)
//!    signed plan's routes ─► place (journal: guest id → vmid; Proxmox: its address)
//!      ─► render ─► differs from the file? ─► validate, write atomically,
//!         audit each guest concerned
//!    either written ─► restart the replicas one at a time (the next only once the previous
//!         is ready again)
//!  publish watch<Option<TunnelState>> (routes, connections, version, restarts) for the report
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::secret::SealedSecret;
use bosun_proto::tunnel::{PlanTunnel, TunnelState};
use bosun_pve::Pve;
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::credentials;
use super::ingress::{self, IngressConfig};
use super::routes::{self, PlacedRoute};
use super::service::Service;
use crate::clock::SharedClock;
use crate::config::tunnel::ManagedTunnel;
use crate::data::desired::DesiredSnapshot;
use crate::ops::journal::{AuditEvent, JournalHandle};
use crate::trust::keys::credentials::CredentialOpener;

/// The audit event of tunnel credentials written to the credentials file.
pub const CREDENTIALS_WRITTEN: &str = "tunnel.credentials_written";
/// The audit event of sealed tunnel credentials refused (another tunnel's, another host's,
/// not sealed to this host, not cloudflared's credentials file).
pub const CREDENTIALS_REFUSED: &str = crate::data::plan::credentials::TUNNEL_CREDENTIALS_REFUSED;

/// Routes are placed again every this many ticks even when desired state did not change (a
/// guest restored elsewhere, a guest's address read at last).
pub const PLACE_EVERY: u32 = 6;

/// The task.
#[derive(Debug)]
pub struct TunnelTask<P> {
    pve: Arc<P>,
    journal: JournalHandle,
    clock: SharedClock,
    desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
    settings: ManagedTunnel,
    interval: Duration,
    service: Service,
    state: watch::Sender<Option<TunnelState>>,
    sealing: Option<(Arc<CredentialOpener>, Uuid)>,
}

/// The loop's memory between ticks.
#[derive(Debug, Default)]
struct Memory {
    placed: Vec<PlacedRoute>,
    failures: Vec<u32>,
    state: TunnelState,
    /// The sealed credentials last refused (audited once each).
    refused: Option<SealedSecret>,
    /// A configuration or credentials file was written and not every replica has been
    /// restarted onto it yet: the restart is tried again until all are.
    restart_pending: bool,
}

impl<P: Pve + 'static> TunnelTask<P> {
    /// A task and the receiver of the tunnel's state.
    pub fn new(
        pve: Arc<P>,
        journal: JournalHandle,
        clock: SharedClock,
        desired: watch::Receiver<Option<Arc<DesiredSnapshot>>>,
        settings: ManagedTunnel,
        interval: Duration,
        service: Service,
    ) -> (Self, watch::Receiver<Option<TunnelState>>) {
        let (state, rx) = watch::channel(None);
        let task = Self {
            pve,
            journal,
            clock,
            desired,
            settings,
            interval,
            service,
            state,
            sealing: None,
        };
        (task, rx)
    }

    /// Opens the tunnel's sealed credentials (desired state's `tunnel_credentials`) with this
    /// host's identity, for host `host_id` only, and writes them to the credentials file.
    /// Without it, the credentials file is left to the operator.
    pub fn with_credentials(mut self, identity: Arc<CredentialOpener>, host_id: Uuid) -> Self {
        self.sealing = Some((identity, host_id));
        self
    }

    fn routes_file(&self) -> PathBuf {
        self.settings.config_file.with_extension("routes.json")
    }

    /// Runs until `cancel`.
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut memory = Memory {
            placed: std::fs::read(self.routes_file())
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default(),
            failures: vec![0; self.settings.replicas.len()],
            state: TunnelState::default(),
            refused: None,
            restart_pending: false,
        };
        let mut tick = 0u32;
        loop {
            let desired_changed = self.desired.has_changed().unwrap_or(false);
            if tick.is_multiple_of(PLACE_EVERY) || desired_changed {
                let snapshot = self.desired.borrow_and_update().clone();
                if let Some(plan) = snapshot.as_ref().and_then(|s| s.plan.clone()) {
                    let sealed = snapshot
                        .as_ref()
                        .and_then(|s| s.state.tunnel_credentials.as_ref());
                    Box::pin(self.sync(
                        plan.plan.tunnel.as_ref(),
                        sealed,
                        plan.plan.serial,
                        &mut memory,
                    ))
                    .await;
                }
                // Until every replica runs the files in place: a restart that failed or timed
                // out is tried again at the next placement.
                if memory.restart_pending {
                    tracing::info!(
                        routes = memory.state.routes,
                        unplaced = memory.state.unplaced,
                        "tunnel configuration or credentials written; restarting its replicas one at a time"
                    );
                    memory.restart_pending = !Box::pin(self.rolling_restart(&mut memory)).await;
                }
            }
            Box::pin(self.watch_replicas(&mut memory)).await;
            self.state.send_replace(Some(memory.state.clone()));
            tick = tick.wrapping_add(1);
            let mut desired = self.desired.clone();
            tokio::select! {
                () = cancel.cancelled() => return,
                () = self.clock.sleep(self.interval) => {}
                _ = desired.changed() => {}
            }
        }
    }

    /// Brings the files to the operator's newest signed plan: its tunnel's credentials and
    /// routes, or, once a plan names no tunnel, the rules in force withdrawn (the file keeps
    /// only its catch-all). Marks a restart pending when a file was written.
    async fn sync(
        &self,
        tunnel: Option<&PlanTunnel>,
        sealed: Option<&SealedSecret>,
        serial: u64,
        memory: &mut Memory,
    ) {
        let withdrawn;
        let tunnel = match tunnel {
            Some(tunnel) => tunnel,
            None if memory.placed.is_empty() => return,
            None => {
                let on_disk = std::fs::read_to_string(&self.settings.config_file).ok();
                let Some(tunnel_id) = on_disk.as_deref().and_then(ingress::tunnel_of) else {
                    memory.state.error = Some(
                        "the signed plan names no tunnel; the configuration in place names none to withdraw from".to_owned(),
                    );
                    return;
                };
                withdrawn = PlanTunnel {
                    tunnel_id,
                    routes: Vec::new(),
                };
                &withdrawn
            }
        };
        let credentials = Box::pin(self.sync_credentials(sealed, tunnel.tunnel_id, memory)).await;
        let routes = Box::pin(self.sync_routes(tunnel, serial, memory)).await;
        memory.restart_pending |= credentials || routes;
    }

    /// Places the plan's routes; when the file would change, writes it and audits. True when
    /// the file was written (the replicas need a restart).
    async fn sync_routes(&self, tunnel: &PlanTunnel, serial: u64, memory: &mut Memory) -> bool {
        let provenance = match self.journal.all_provenance().await {
            Ok(p) => p,
            Err(e) => {
                memory.state.error = Some(format!("reading the guests: {}", error_chain(&e)));
                return false;
            }
        };
        let placement =
            routes::place(&*self.pve, &tunnel.routes, &provenance, &memory.placed).await;
        memory.state.routes = u32::try_from(placement.placed.len()).unwrap_or(u32::MAX);
        memory.state.unplaced = u32::try_from(placement.unplaced.len()).unwrap_or(u32::MAX);
        let config = IngressConfig {
            tunnel_id: tunnel.tunnel_id,
            credentials_file: self.settings.credentials_file.clone(),
            rules: placement.placed.iter().map(|p| p.rule.clone()).collect(),
        };
        let on_disk = std::fs::read_to_string(&self.settings.config_file).ok();
        let unchanged = on_disk.as_deref() == Some(config.render().as_str());
        if unchanged && placement.placed == memory.placed {
            return false;
        }
        if !unchanged && let Err(e) = config.write(&self.settings.config_file) {
            tracing::error!(error = %error_chain(&e), "tunnel configuration not written; the one in place stays");
            memory.state.error = Some(error_chain(&e));
            return false;
        }
        for event in routes::changes(&memory.placed, &placement.placed, serial) {
            if let Err(e) = self.journal.append_audit(event).await {
                tracing::error!(error = %error_chain(&e), "a tunnel route change was not audited");
            }
        }
        memory.placed = placement.placed;
        if let Ok(bytes) = serde_json::to_vec(&memory.placed) {
            let _ = std::fs::write(self.routes_file(), bytes);
        }
        memory.state.error = None;
        !unchanged
    }

    /// Writes the sealed credentials when they open for this host and `tunnel_id` and differ
    /// from the file; audits each write, and each refused blob once (the file in place
    /// stays). True when the file was written (the replicas need a restart).
    async fn sync_credentials(
        &self,
        sealed: Option<&SealedSecret>,
        tunnel_id: Uuid,
        memory: &mut Memory,
    ) -> bool {
        let (Some((identity, host_id)), Some(sealed)) = (&self.sealing, sealed) else {
            memory.state.credentials_error = None;
            return false;
        };
        let path = &self.settings.credentials_file;
        match credentials::install(identity, sealed, *host_id, tunnel_id, path) {
            Ok(written) => {
                memory.state.credentials_error = None;
                memory.refused = None;
                if written {
                    tracing::info!(%tunnel_id, "tunnel credentials written");
                    let event = AuditEvent {
                        detail: json!({ "tunnel_id": tunnel_id }),
                        ..AuditEvent::new(CREDENTIALS_WRITTEN)
                    };
                    if let Err(e) = self.journal.append_audit(event).await {
                        tracing::error!(error = %error_chain(&e), "the tunnel credentials' write was not audited");
                    }
                }
                written
            }
            Err(e) => {
                memory.state.credentials_error = Some(error_chain(&e));
                if memory.refused.as_ref() != Some(sealed) {
                    tracing::error!(%tunnel_id, error = %error_chain(&e), "tunnel credentials refused; the file in place stays");
                    let mut detail = json!({ "tunnel_id": tunnel_id, "reason": e.to_string() });
                    let fields = e.differing_fields();
                    if !fields.is_empty() {
                        detail["fields"] = fields.join(", ").into();
                    }
                    let event = AuditEvent {
                        detail,
                        ..AuditEvent::new(CREDENTIALS_REFUSED)
                    };
                    match self.journal.append_audit(event).await {
                        Ok(_) => memory.refused = Some(sealed.clone()),
                        Err(e) => {
                            tracing::error!(error = %error_chain(&e), "refused tunnel credentials not audited; trying again");
                        }
                    }
                }
                false
            }
        }
    }

    /// Restarts each replica in turn, the next only once the previous is ready again, so the
    /// others keep serving every guest meanwhile.
    /// Whether every replica was restarted and ready again.
    async fn rolling_restart(&self, memory: &mut Memory) -> bool {
        for (i, replica) in self.settings.replicas.iter().enumerate() {
            if !self.restart(memory, i).await {
                return false;
            }
            let deadline = self.clock.now() + self.settings.restart_timeout;
            loop {
                if self.service.probe(replica).await.ready {
                    break;
                }
                if self.clock.now() >= deadline {
                    memory.state.error = Some(format!(
                        "{} not ready within {:?} of its restart; the other replicas were left running",
                        replica.unit, self.settings.restart_timeout
                    ));
                    return false;
                }
                self.clock.sleep(Duration::from_millis(200)).await;
            }
        }
        memory.state.error = None;
        true
    }

    /// Restarts replica `i`; false when it failed.
    async fn restart(&self, memory: &mut Memory, i: usize) -> bool {
        let unit = &self.settings.replicas[i].unit;
        memory.state.restarts = memory.state.restarts.saturating_add(1);
        memory.state.last_restart = Some(self.clock.now());
        memory.state.version = None;
        if let Some(count) = memory.failures.get_mut(i) {
            *count = 0;
        }
        match self.service.restart(unit).await {
            Ok(()) => {
                tracing::info!(unit, "tunnel replica restarted");
                true
            }
            Err(e) => {
                tracing::error!(unit, error = %error_chain(&e), "tunnel replica not restarted");
                memory.state.error = Some(error_chain(&e));
                false
            }
        }
    }

    /// Probes every replica; restarts one that failed `restart_after` times in a row.
    async fn watch_replicas(&self, memory: &mut Memory) {
        let mut connections = None::<u32>;
        for (i, replica) in self.settings.replicas.iter().enumerate() {
            let reading = self.service.probe(replica).await;
            if let Some(n) = reading.connections.filter(|_| reading.ready) {
                connections = Some(connections.unwrap_or(0).saturating_add(n));
            }
            if reading.ready {
                memory.failures[i] = 0;
                if memory.state.version.is_none() {
                    memory.state.version = self.service.version(replica).await;
                }
                continue;
            }
            memory.failures[i] = memory.failures[i].saturating_add(1);
            if memory.failures[i] >= self.settings.restart_after {
                tracing::warn!(unit = %replica.unit, failures = memory.failures[i], "tunnel replica unready; restarting it");
                self.restart(memory, i).await;
            }
        }
        memory.state.connections = connections;
    }
}
