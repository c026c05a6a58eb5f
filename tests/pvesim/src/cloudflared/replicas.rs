//! The replicas of one tunnel: each reads the configuration file at its start, as the real
//! one does, and serves `/ready` and `/metrics` on its own loopback port.
//!
//! At start a replica reads the credentials file its configuration names: when the file is
//! there, its `TunnelID` must be the configuration's tunnel, or the replica stays down; with
//! no file it runs (the tests of routes alone place none).
//!
//! A replica "restarts" when the `systemctl` script the agent runs appends its unit to the
//! control file: it drops its connections, reads the configuration again and, when that is
//! valid, is ready again after [`RESTART_TAKES`]. A configuration it refuses leaves it down,
//! as the real one exits. The script returns once the stand-in took the restart (as
//! `systemctl restart` returns once the old process is gone).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::routing::get;
use parking_lot::Mutex;
use serde_json::json;

use super::{TunnelConfig, credentials_tunnel, parse};

/// How long a restarted replica takes to connect again.
pub const RESTART_TAKES: Duration = Duration::from_millis(300);
/// The version the stand-in's metrics name.
pub const VERSION: &str = "2025.8.1";
/// Edge connections a ready replica holds (cloudflared opens four).
const CONNECTIONS: u32 = 4;
/// How often the control file is read and the replicas sampled.
const TICK: Duration = Duration::from_millis(20);

/// Why the stand-in could not start.
#[derive(Debug, thiserror::Error)]
pub enum StandInError {
    /// Its `systemctl` script or control file could not be written.
    #[error("writing {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A replica's metrics server could not listen.
    #[error("binding a metrics server on 127.0.0.1")]
    Bind(#[source] std::io::Error),
    /// No replica, or a unit name the script could not carry.
    #[error("replicas {0:?}: name 1 to 8 units of letters, digits and @._-")]
    Units(Vec<String>),
}

/// One replica's state.
#[derive(Debug)]
pub struct ReplicaState {
    /// Its unit.
    pub unit: String,
    /// Edge connections held (0: not ready).
    pub connections: u32,
    /// The configuration it runs with (read at its last start).
    pub config: Option<TunnelConfig>,
    /// Why it refused its configuration at its last start.
    pub refused: Option<String>,
    /// When each restart was asked for.
    pub restarts: Vec<Instant>,
    /// Down on purpose (the edge is unreachable): a restart does not help until cleared.
    pub edge_lost: bool,
    /// The `TunnelID` of the credentials file it read at its last start.
    pub credentials: Option<String>,
}

/// The replicas of one tunnel and their control file.
#[derive(Debug)]
pub struct StandIn {
    /// Each replica and the port of its metrics server.
    pub replicas: Vec<(Arc<Mutex<ReplicaState>>, u16)>,
    /// The `systemctl` the agent runs to restart a replica.
    pub systemctl: PathBuf,
    config_file: PathBuf,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Moments at which no replica was ready (sampled every 20 ms).
    all_down_samples: Arc<Mutex<u32>>,
    /// When it started: the control API's times count from here.
    pub started: Instant,
}

fn write_error(path: &Path) -> impl FnOnce(std::io::Error) -> StandInError + '_ {
    move |source| StandInError::Write {
        path: path.to_owned(),
        source,
    }
}

/// The `systemctl` script: `restart UNIT` appends the unit to `control` and returns once the
/// stand-in counted it (at most 10 s); anything else fails as a unit the agent may not touch.
fn systemctl_script(control: &Path) -> String {
    format!(
        "#!/bin/sh\n[ \"$1\" = restart ] || exit 2\necho \"$2\" >> '{log}'\n\
         n=$(wc -l < '{log}')\ni=0\n\
         while [ \"$(cat '{log}.done' 2>/dev/null || echo 0)\" -lt \"$n\" ]; do\n\
         sleep 0.02; i=$((i+1)); [ $i -gt 500 ] && exit 1\ndone\nexit 0\n",
        log = control.display()
    )
}

fn is_unit(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "@._-".contains(c))
}

impl StandIn {
    /// `units` replicas reading `config_file`; their `systemctl` script and its control file
    /// are written in `dir`.
    pub async fn start(
        dir: &Path,
        config_file: &Path,
        units: &[&str],
    ) -> Result<Self, StandInError> {
        let mut named = Vec::new();
        for unit in units {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(StandInError::Bind)?;
            named.push(((*unit).to_owned(), listener));
        }
        Self::start_on(dir, config_file, named)
    }

    /// `count` replicas named as the package names them: `bosun-tunnel@PORT.service`, the
    /// instance the port of its metrics server.
    pub async fn start_packaged(
        dir: &Path,
        config_file: &Path,
        count: usize,
    ) -> Result<Self, StandInError> {
        let mut named = Vec::new();
        for _ in 0..count {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(StandInError::Bind)?;
            let port = listener.local_addr().map_err(StandInError::Bind)?.port();
            named.push((format!("bosun-tunnel@{port}.service"), listener));
        }
        Self::start_on(dir, config_file, named)
    }

    fn start_on(
        dir: &Path,
        config_file: &Path,
        named: Vec<(String, tokio::net::TcpListener)>,
    ) -> Result<Self, StandInError> {
        if named.is_empty() || named.len() > 8 || !named.iter().all(|(u, _)| is_unit(u)) {
            return Err(StandInError::Units(
                named.into_iter().map(|(u, _)| u).collect(),
            ));
        }
        let control = dir.join("systemctl.log");
        std::fs::write(&control, "").map_err(write_error(&control))?;
        let systemctl = dir.join("systemctl");
        std::fs::write(&systemctl, systemctl_script(&control)).map_err(write_error(&systemctl))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&systemctl, std::fs::Permissions::from_mode(0o755))
            .map_err(write_error(&systemctl))?;
        let mut replicas = Vec::new();
        let mut tasks = Vec::new();
        for (unit, listener) in named {
            let port = listener.local_addr().map_err(StandInError::Bind)?.port();
            let state = Arc::new(Mutex::new(ReplicaState {
                unit,
                connections: 0,
                config: None,
                refused: None,
                restarts: Vec::new(),
                edge_lost: false,
                credentials: None,
            }));
            start_replica(&state, config_file);
            let app = metrics_router(Arc::clone(&state));
            tasks.push(tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            }));
            replicas.push((state, port));
        }
        let all_down_samples = Arc::new(Mutex::new(0));
        tasks.push(tokio::spawn(control_loop(
            control,
            config_file.to_path_buf(),
            replicas.iter().map(|(s, _)| Arc::clone(s)).collect(),
            Arc::clone(&all_down_samples),
        )));
        Ok(Self {
            replicas,
            systemctl,
            config_file: config_file.to_path_buf(),
            tasks,
            all_down_samples,
            started: Instant::now(),
        })
    }

    /// The `[tunnel]` lines of an agent configuration for these replicas (`extra` after the
    /// table's own keys: intervals and bounds).
    pub fn agent_config(&self, credentials: &Path, extra: &str) -> String {
        let first = self.replicas.first().map_or(0, |(_, port)| *port);
        let mut text = format!(
            "[tunnel]\nreadiness_url = \"http://127.0.0.1:{first}/ready\"\nconfig_file = {:?}\ncredentials_file = {:?}\nsystemctl = {:?}\n{extra}",
            self.config_file.display().to_string(),
            credentials.display().to_string(),
            self.systemctl.display().to_string()
        );
        for (state, port) in &self.replicas {
            text.push_str(&format!(
                "[[tunnel.replica]]\nunit = {:?}\nmetrics = \"http://127.0.0.1:{port}\"\n",
                state.lock().unit
            ));
        }
        text
    }

    fn replica(&self, i: usize) -> Option<&Arc<Mutex<ReplicaState>>> {
        self.replicas.get(i).map(|(state, _)| state)
    }

    /// The routes replica `i` runs with.
    pub fn routes(&self, i: usize) -> BTreeMap<String, String> {
        self.replica(i)
            .and_then(|r| r.lock().config.as_ref().map(TunnelConfig::routes))
            .unwrap_or_default()
    }

    /// The tunnel of the credentials file replica `i` read at its last start.
    pub fn credentials(&self, i: usize) -> Option<String> {
        self.replica(i)?.lock().credentials.clone()
    }

    /// When each restart of replica `i` was asked for.
    pub fn restarts(&self, i: usize) -> Vec<Instant> {
        self.replica(i)
            .map(|r| r.lock().restarts.clone())
            .unwrap_or_default()
    }

    /// How many 20 ms samples found no replica ready.
    pub fn all_down_samples(&self) -> u32 {
        *self.all_down_samples.lock()
    }

    /// Replica `i` loses (or regains) its edge connections: lost, a restart does not bring
    /// it back until it regains them.
    pub fn lose_edge(&self, i: usize, lost: bool) {
        if let Some(replica) = self.replica(i) {
            let mut s = replica.lock();
            s.edge_lost = lost;
            if lost {
                s.connections = 0;
            }
        }
    }

    /// Replica `i` drops its edge connections and does not connect again by itself (a hung
    /// cloudflared): its next restart brings it back. False when there is no replica `i`.
    pub fn drop_connections(&self, i: usize) -> bool {
        self.replica(i).map(|r| r.lock().connections = 0).is_some()
    }

    /// Stops the replicas' servers and the control loop.
    pub async fn stop(self) {
        for task in self.tasks {
            task.abort();
            let _ = task.await;
        }
    }
}

/// Starting: reads the configuration; refuses one `ingress validate` would refuse.
fn start_replica(state: &Arc<Mutex<ReplicaState>>, config_file: &Path) {
    let parsed = std::fs::read_to_string(config_file)
        .map_err(|e| format!("reading {}: {e}", config_file.display()))
        .and_then(|t| parse(&t).map_err(|e| e.to_string()));
    let parsed = parsed.and_then(|config| {
        let credentials = match std::fs::read_to_string(&config.credentials_file) {
            Ok(text) => {
                Some(credentials_tunnel(&text).ok_or("the credentials file has no TunnelID")?)
            }
            Err(_) => None,
        };
        if credentials.as_ref().is_some_and(|id| *id != config.tunnel) {
            return Err("the credentials file is another tunnel's".to_owned());
        }
        Ok((config, credentials))
    });
    let mut s = state.lock();
    match parsed {
        Ok((config, credentials)) => {
            s.credentials = credentials;
            s.config = Some(config);
            s.refused = None;
            if !s.edge_lost {
                s.connections = CONNECTIONS;
            }
        }
        Err(why) => {
            tracing::warn!(unit = %s.unit, why = %why, "tunnel stand-in replica refused its configuration");
            s.refused = Some(why);
            s.connections = 0;
        }
    }
}

async fn control_loop(
    control: PathBuf,
    config_file: PathBuf,
    replicas: Vec<Arc<Mutex<ReplicaState>>>,
    all_down: Arc<Mutex<u32>>,
) {
    let mut seen = 0;
    loop {
        tokio::time::sleep(TICK).await;
        if replicas.iter().all(|r| r.lock().connections == 0) {
            *all_down.lock() += 1;
        }
        let text = std::fs::read_to_string(&control).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        for unit in lines.iter().skip(seen) {
            let Some(replica) = replicas.iter().find(|r| &r.lock().unit == unit) else {
                continue;
            };
            {
                let mut s = replica.lock();
                tracing::info!(unit = %s.unit, "tunnel stand-in replica restarting");
                s.restarts.push(Instant::now());
                s.connections = 0;
            }
            let (replica, file) = (Arc::clone(replica), config_file.clone());
            tokio::spawn(async move {
                tokio::time::sleep(RESTART_TAKES).await;
                start_replica(&replica, &file);
            });
        }
        if lines.len() != seen {
            seen = lines.len();
            let tmp = control.with_extension("log.done.tmp");
            // The directory may go away with a test before the loop is stopped.
            let _ = std::fs::write(&tmp, seen.to_string())
                .and_then(|()| std::fs::rename(&tmp, control.with_extension("log.done")));
        }
    }
}

fn metrics_router(state: Arc<Mutex<ReplicaState>>) -> axum::Router {
    let ready = Arc::clone(&state);
    axum::Router::new()
        .route(
            "/ready",
            get(move || {
                let s = Arc::clone(&ready);
                async move {
                    let n = s.lock().connections;
                    let status = if n > 0 {
                        StatusCode::OK
                    } else {
                        StatusCode::SERVICE_UNAVAILABLE
                    };
                    let body = json!({
                        "status": status.as_u16(),
                        "readyConnections": n,
                        "connectorId": "6ff42ae2-765d-4adf-8112-31c55c1551ef",
                    });
                    (status, body.to_string())
                }
            }),
        )
        .route(
            "/metrics",
            get(|| async {
                format!(
                    "# HELP build_info Build and version information\n# TYPE build_info gauge\n\
                     build_info{{goversion=\"go1.22.5\",revision=\"stand-in\",type=\"\",version=\"{VERSION}\"}} 1\n\
                     # TYPE cloudflared_tunnel_ha_connections gauge\ncloudflared_tunnel_ha_connections {CONNECTIONS}\n"
                )
            }),
        )
}
