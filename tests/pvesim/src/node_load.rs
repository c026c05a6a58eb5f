//! The node's load as `GET /nodes` and `GET /nodes/{node}/status` report it. Tests set it over
//! the admin endpoint (`GET`/`POST /_sim/node/load`, a [`NodeLoad`] as JSON) or with
//! [`SimHandle::set_node_load`](crate::SimHandle::set_node_load): CPU usage, memory and root
//! filesystem in use, load averages. A value left unset is the simulator's own (a quiet CPU,
//! the running guests' memory and the `local` storage's volumes on top of a base for the host).

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use serde::{Deserialize, Serialize};

use crate::server::App;

/// The node's memory in bytes (64 GiB).
pub(crate) const NODE_MAXMEM: u64 = 68_719_476_736;

/// What a test fixed of the node's load; `None` leaves a value to the simulator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeLoad {
    /// CPU usage, a share of all CPUs in `0.0..=1.0`.
    #[serde(default)]
    pub cpu: Option<f64>,
    /// Memory in use, bytes (at most the node's 64 GiB).
    #[serde(default)]
    pub memory_used: Option<u64>,
    /// Root filesystem in use, bytes (at most its size).
    #[serde(default)]
    pub rootfs_used: Option<u64>,
    /// The 1, 5 and 15 minute load averages.
    #[serde(default)]
    pub loadavg: Option<[f64; 3]>,
}

impl NodeLoad {
    /// Checks the values against the node (`rootfs_total`: its root filesystem's size).
    pub(crate) fn check(&self, rootfs_total: u64) -> Result<(), String> {
        if let Some(cpu) = self.cpu
            && !(0.0..=1.0).contains(&cpu)
        {
            return Err(format!("cpu {cpu} is not a share between 0 and 1"));
        }
        if let Some(used) = self.memory_used
            && used > NODE_MAXMEM
        {
            return Err(format!(
                "memory_used {used} is above the node's {NODE_MAXMEM}"
            ));
        }
        if let Some(used) = self.rootfs_used
            && used > rootfs_total
        {
            return Err(format!(
                "rootfs_used {used} is above the root filesystem's {rootfs_total}"
            ));
        }
        if let Some(load) = self.loadavg
            && load.iter().any(|l| !l.is_finite() || *l < 0.0)
        {
            return Err("load averages are finite and not negative".into());
        }
        Ok(())
    }
}

pub(crate) fn routes() -> Router<App> {
    Router::new().route("/_sim/node/load", get(get_load).post(set_load))
}

/// `GET /_sim/node/load`: what is fixed.
async fn get_load(
    State(app): State<App>,
    headers: HeaderMap,
) -> Result<Json<NodeLoad>, StatusCode> {
    crate::admin::authorized(&app, &headers)?;
    Ok(Json(*app.shared.node_load.lock()))
}

/// `POST /_sim/node/load` with a [`NodeLoad`]: replaces what is fixed; 400 (and no change) for
/// a body that does not parse or a value the node cannot have.
async fn set_load(
    State(app): State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<NodeLoad>, (StatusCode, String)> {
    crate::admin::authorized(&app, &headers).map_err(|s| (s, String::new()))?;
    let load: NodeLoad = serde_json::from_slice(&body)
        .map_err(|e| (StatusCode::BAD_REQUEST, format!("invalid node load: {e}\n")))?;
    let total = crate::access::rootfs_total(&app.shared);
    load.check(total)
        .map_err(|e| (StatusCode::BAD_REQUEST, format!("invalid node load: {e}\n")))?;
    tracing::info!(?load, "node load set over the admin endpoint");
    *app.shared.node_load.lock() = load;
    Ok(Json(load))
}
