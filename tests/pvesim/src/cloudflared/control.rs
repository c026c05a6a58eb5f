//! The control API `bosun-cloudflared-sim` serves beside its replicas, on its own loopback
//! port, for a demo that drives the stand-in from another process:
//!
//! - `GET /replicas`: [`StandInView`], what each replica runs with (routes, the tunnel of its
//!   credentials, why it refused its configuration), its connections and its restarts, in
//!   milliseconds since the stand-in started;
//! - `POST /replicas/{i}/drop`: replica `i` drops its edge connections and stays down until
//!   restarted (a hung cloudflared); answers `{"at_ms": …}`, the moment it dropped them;
//! - `POST /replicas/{i}/edge` `{"lost": bool}`: replica `i` loses (or regains) the edge; a
//!   restart does not help while it is lost.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::StandIn;

/// One replica as the control API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaView {
    /// Its unit.
    pub unit: String,
    /// Its metrics server: `http://127.0.0.1:PORT`.
    pub metrics: String,
    /// Edge connections held (0: `/ready` answers 503).
    pub connections: u32,
    /// Hostname → service of the configuration it runs with.
    pub routes: BTreeMap<String, String>,
    /// The `TunnelID` of the credentials file it read at its last start.
    pub credentials: Option<String>,
    /// Why it refused its configuration at its last start.
    pub refused: Option<String>,
    /// When each restart was asked for, in milliseconds since the stand-in started.
    pub restarts_ms: Vec<u64>,
}

/// The whole stand-in as the control API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StandInView {
    /// The replicas, in the order they were named.
    pub replicas: Vec<ReplicaView>,
    /// The `systemctl` the agent runs to restart a replica.
    pub systemctl: String,
    /// Moments (20 ms apart) at which no replica was ready.
    pub all_down_samples: u32,
    /// Milliseconds since the stand-in started.
    pub now_ms: u64,
}

/// Why a control request was refused.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// There is no replica with this index.
    #[error("no replica {0}")]
    NoReplica(usize),
}

fn millis(since: Instant, at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(since).as_millis()).unwrap_or(u64::MAX)
}

impl StandIn {
    /// What the control API shows.
    pub fn view(&self) -> StandInView {
        let replicas = self
            .replicas
            .iter()
            .map(|(state, port)| {
                let s = state.lock();
                ReplicaView {
                    unit: s.unit.clone(),
                    metrics: format!("http://127.0.0.1:{port}"),
                    connections: s.connections,
                    routes: s
                        .config
                        .as_ref()
                        .map(super::TunnelConfig::routes)
                        .unwrap_or_default(),
                    credentials: s.credentials.clone(),
                    refused: s.refused.clone(),
                    restarts_ms: s
                        .restarts
                        .iter()
                        .map(|at| millis(self.started, *at))
                        .collect(),
                }
            })
            .collect();
        StandInView {
            replicas,
            systemctl: self.systemctl.display().to_string(),
            all_down_samples: self.all_down_samples(),
            now_ms: millis(self.started, Instant::now()),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Edge {
    lost: bool,
}

fn refused(err: ControlError) -> (StatusCode, String) {
    (StatusCode::NOT_FOUND, err.to_string())
}

/// The control API over `stand_in`.
pub fn router(stand_in: Arc<StandIn>) -> axum::Router {
    axum::Router::new()
        .route(
            "/replicas",
            get(|State(s): State<Arc<StandIn>>| async move { Json(s.view()) }),
        )
        .route(
            "/replicas/{i}/drop",
            post(
                |State(s): State<Arc<StandIn>>, Path(i): Path<usize>| async move {
                    let at = Instant::now();
                    if !s.drop_connections(i) {
                        return Err(refused(ControlError::NoReplica(i)));
                    }
                    tracing::info!(replica = i, "tunnel stand-in replica dropped its connections");
                    Ok(Json(json!({ "at_ms": millis(s.started, at) })))
                },
            ),
        )
        .route(
            "/replicas/{i}/edge",
            post(
                |State(s): State<Arc<StandIn>>, Path(i): Path<usize>, Json(edge): Json<Edge>| async move {
                    if i >= s.replicas.len() {
                        return Err(refused(ControlError::NoReplica(i)));
                    }
                    s.lose_edge(i, edge.lost);
                    Ok(Json(json!({ "lost": edge.lost })))
                },
            ),
        )
        .with_state(stand_in)
}
