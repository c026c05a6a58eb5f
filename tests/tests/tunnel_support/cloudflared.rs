//! A stand-in for `cloudflared` (not installable on these machines): replicas of one tunnel,
//! each serving what the agent reads of the real one on its metrics address (`GET /ready`:
//! 200 `{"status":200,"readyConnections":N,"connectorId":…}` while it holds edge connections,
//! 503 with `readyConnections: 0` otherwise; `GET /metrics`: Prometheus text with
//! `build_info{…,version="…"}`), and reading the same configuration file, with the checks
//! `cloudflared tunnel ingress validate` makes (the last rule matches everything, no earlier
//! one does, services are a scheme, host and port without a path, or `http_status:NNN`).
//!
//! At start a replica reads the credentials file its configuration names, as the real one
//! does: when the file is there, its `TunnelID` must be the configuration's tunnel, or the
//! replica stays down; with no file it runs (the tests of routes alone place none).
//!
//! A replica "restarts" when the `systemctl` script the agent runs appends its unit to the
//! control file: it drops its connections, reads the configuration again and, when that is
//! valid, is ready again after [`RESTART_TAKES`]. A configuration it refuses leaves it down,
//! as the real one exits.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::routing::get;
use parking_lot::Mutex;
use serde_json::json;

/// How long a restarted replica takes to connect again.
pub const RESTART_TAKES: Duration = Duration::from_millis(300);
/// The version the stand-in's metrics name.
pub const VERSION: &str = "2025.8.1";

/// One rule of a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Its hostname; `None` matches every hostname.
    pub hostname: Option<String>,
    /// Its service.
    pub service: String,
}

/// A configuration file as cloudflared reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelConfig {
    pub tunnel: String,
    pub credentials_file: String,
    pub ingress: Vec<Rule>,
}

impl TunnelConfig {
    /// The service a request for `hostname` reaches (the first matching rule).
    pub fn route(&self, hostname: &str) -> Option<&str> {
        self.ingress
            .iter()
            .find(|r| r.hostname.as_deref().is_none_or(|h| h == hostname))
            .map(|r| r.service.as_str())
    }

    /// Hostname → service of every hostname rule.
    pub fn routes(&self) -> BTreeMap<String, String> {
        self.ingress
            .iter()
            .filter_map(|r| Some((r.hostname.clone()?, r.service.clone())))
            .collect()
    }
}

fn unquote(v: &str) -> String {
    let v = v.trim();
    v.strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(v)
        .to_owned()
}

/// Parses and validates `text`: the YAML subset a tunnel configuration uses.
pub fn parse(text: &str) -> Result<TunnelConfig, String> {
    let (mut tunnel, mut credentials, mut rules) =
        (None, None, Vec::<BTreeMap<String, String>>::new());
    let mut in_ingress = false;
    for line in text.lines() {
        let trimmed = line.trim_end();
        if trimmed.trim_start().starts_with('#') || trimmed.trim().is_empty() {
            continue;
        }
        if !line.starts_with(' ') {
            in_ingress = false;
            let (key, value) = trimmed.split_once(':').ok_or(format!("not yaml: {line}"))?;
            match key {
                "tunnel" => tunnel = Some(unquote(value)),
                "credentials-file" => credentials = Some(unquote(value)),
                "ingress" if value.trim().is_empty() => in_ingress = true,
                other => return Err(format!("unknown key {other}")),
            }
            continue;
        }
        if !in_ingress {
            return Err(format!("indented line outside ingress: {line}"));
        }
        let body = trimmed.trim_start();
        let body = if let Some(rest) = body.strip_prefix("- ") {
            rules.push(BTreeMap::new());
            rest
        } else {
            body
        };
        let (key, value) = body.split_once(':').ok_or(format!("not yaml: {line}"))?;
        let rule = rules.last_mut().ok_or("a rule field before any rule")?;
        // `service: http://a:80` splits at the first colon.
        rule.insert(key.trim().to_owned(), unquote(value));
    }
    let ingress: Vec<Rule> = rules
        .into_iter()
        .map(|mut r| {
            let service = r.remove("service").ok_or("a rule without a service")?;
            let hostname = r.remove("hostname").filter(|h| h != "*");
            if let Some(other) = r.keys().next() {
                return Err(format!("unknown rule key {other}"));
            }
            Ok(Rule { hostname, service })
        })
        .collect::<Result<_, String>>()?;
    validate(&ingress)?;
    Ok(TunnelConfig {
        tunnel: tunnel.ok_or("no tunnel")?,
        credentials_file: credentials.ok_or("no credentials-file")?,
        ingress,
    })
}

fn validate(ingress: &[Rule]) -> Result<(), String> {
    let last = ingress.last().ok_or("no ingress rules")?;
    if last.hostname.is_some() {
        return Err("the last ingress rule must match all URLs".into());
    }
    for (i, rule) in ingress.iter().enumerate() {
        if i + 1 < ingress.len() && rule.hostname.is_none() {
            return Err(format!("rule #{} matches all URLs but is not last", i + 1));
        }
        if let Some(h) = &rule.hostname
            && (h.contains(':') || h[1..].contains('*'))
        {
            return Err(format!("rule #{}: bad hostname {h}", i + 1));
        }
        if let Some(code) = rule.service.strip_prefix("http_status:") {
            code.parse::<u16>()
                .map_err(|_| format!("bad status {code}"))?;
            continue;
        }
        let rest = rule
            .service
            .strip_prefix("http://")
            .or_else(|| rule.service.strip_prefix("https://"))
            .ok_or(format!(
                "rule #{}: unsupported service {}",
                i + 1,
                rule.service
            ))?;
        if rest.contains('/') {
            return Err(format!("rule #{}: a service has no path", i + 1));
        }
        let (_, port) = rest.rsplit_once(':').ok_or("a service without a port")?;
        port.parse::<u16>()
            .map_err(|_| format!("bad port {port}"))?;
    }
    Ok(())
}

/// One replica's state.
#[derive(Debug)]
pub struct ReplicaState {
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
pub struct StandIn {
    pub replicas: Vec<(Arc<Mutex<ReplicaState>>, u16)>,
    pub systemctl: PathBuf,
    config_file: PathBuf,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Moments at which no replica was ready (sampled every 20 ms).
    pub all_down_samples: Arc<Mutex<u32>>,
}

impl StandIn {
    /// `units` replicas reading `config_file`; their `systemctl` script is written in `dir`.
    pub async fn start(dir: &Path, config_file: &Path, units: &[&str]) -> Self {
        let control = dir.join("systemctl.log");
        std::fs::write(&control, "").unwrap();
        let systemctl = dir.join("systemctl");
        // Like `systemctl restart`, it returns once the old process is gone.
        std::fs::write(
            &systemctl,
            format!(
                "#!/bin/sh\n[ \"$1\" = restart ] || exit 2\necho \"$2\" >> '{log}'\n\
                 n=$(wc -l < '{log}')\ni=0\n\
                 while [ \"$(cat '{log}.done' 2>/dev/null || echo 0)\" -lt \"$n\" ]; do\n\
                 sleep 0.02; i=$((i+1)); [ $i -gt 500 ] && exit 1\ndone\nexit 0\n",
                log = control.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&systemctl, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut replicas = Vec::new();
        let mut tasks = Vec::new();
        for unit in units {
            let state = Arc::new(Mutex::new(ReplicaState {
                unit: (*unit).to_owned(),
                connections: 0,
                config: None,
                refused: None,
                restarts: Vec::new(),
                edge_lost: false,
                credentials: None,
            }));
            start_replica(&state, config_file);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let app = router(Arc::clone(&state));
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
        Self {
            replicas,
            systemctl,
            config_file: config_file.to_path_buf(),
            tasks,
            all_down_samples,
        }
    }

    /// The `[tunnel]` lines of an agent configuration for these replicas.
    pub fn agent_config(&self, credentials: &Path, extra: &str) -> String {
        let first = self.replicas[0].1;
        let mut text = format!(
            "[tunnel]\nreadiness_url = \"http://127.0.0.1:{first}/ready\"\nconfig_file = \"{}\"\ncredentials_file = \"{}\"\nsystemctl = \"{}\"\n{extra}",
            self.config_file.display(),
            credentials.display(),
            self.systemctl.display()
        );
        for (state, port) in &self.replicas {
            text.push_str(&format!(
                "[[tunnel.replica]]\nunit = \"{}\"\nmetrics = \"http://127.0.0.1:{port}\"\n",
                state.lock().unit
            ));
        }
        text
    }

    /// The routes replica `i` runs with.
    pub fn routes(&self, i: usize) -> BTreeMap<String, String> {
        self.replicas[i]
            .0
            .lock()
            .config
            .as_ref()
            .map(TunnelConfig::routes)
            .unwrap_or_default()
    }

    /// The tunnel of the credentials file replica `i` read at its last start.
    pub fn credentials(&self, i: usize) -> Option<String> {
        self.replicas[i].0.lock().credentials.clone()
    }

    pub fn restarts(&self, i: usize) -> Vec<Instant> {
        self.replicas[i].0.lock().restarts.clone()
    }

    /// Replica `i` loses (or regains) its edge connections.
    pub fn lose_edge(&self, i: usize, lost: bool) {
        let mut s = self.replicas[i].0.lock();
        s.edge_lost = lost;
        if lost {
            s.connections = 0;
        }
    }

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
        .map_err(|e| e.to_string())
        .and_then(|t| parse(&t));
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
                s.connections = 4;
            }
        }
        Err(why) => {
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
        tokio::time::sleep(Duration::from_millis(20)).await;
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
            // The directory goes away with the test.
            let _ = std::fs::write(&tmp, seen.to_string())
                .and_then(|()| std::fs::rename(&tmp, control.with_extension("log.done")));
        }
    }
}

/// The `TunnelID` a credentials file names.
fn credentials_tunnel(text: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    value["TunnelID"].as_str().map(str::to_lowercase)
}

/// A credentials file as `cloudflared tunnel create` writes it, for `tunnel`.
pub fn credentials_json(tunnel: uuid::Uuid, secret: &str) -> String {
    json!({
        "AccountTag": "5ab4e9dfbd435d24068829fda0077963",
        "TunnelSecret": secret,
        "TunnelID": tunnel.to_string(),
    })
    .to_string()
}

/// `file` sealed to `recipient` for host `host` and tunnel `tunnel`, as `bosunctl secret seal
/// --tunnel-id` seals it: the armored ciphertext for desired state's `tunnel_credentials`.
pub fn seal_credentials(
    recipient: &str,
    host: uuid::Uuid,
    tunnel: uuid::Uuid,
    file: &str,
) -> String {
    let credential = bosun_proto::sealed_credential::TunnelCredential::new(
        host,
        tunnel,
        bosun_proto::secret::SecretToken::new(file),
    );
    bosunctl::secret::seal(recipient, &credential)
        .unwrap()
        .armored()
        .to_owned()
}

fn router(state: Arc<Mutex<ReplicaState>>) -> axum::Router {
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
                     # TYPE cloudflared_tunnel_ha_connections gauge\ncloudflared_tunnel_ha_connections 4\n"
                )
            }),
        )
}

#[test]
fn the_stand_in_reads_what_ingress_validate_accepts() {
    let good = "tunnel: 6ff42ae2-765d-4adf-8112-31c55c1551ef\ncredentials-file: \"/x/c.json\"\n\
                ingress:\n  - hostname: a.example.com\n    service: http://10.0.0.5:80\n  - service: http_status:404\n";
    let c = parse(good).unwrap();
    assert_eq!(c.route("a.example.com"), Some("http://10.0.0.5:80"));
    assert_eq!(c.route("b.example.com"), Some("http_status:404"));
    for bad in [
        good.replace("  - service: http_status:404\n", ""),
        good.replace("http://10.0.0.5:80", "http://10.0.0.5:80/admin"),
        good.replace("    service: http://10.0.0.5:80\n", ""),
        good.replace("ingress:\n", "ingress:\n  - service: http://10.0.0.9:80\n"),
    ] {
        assert!(parse(&bad).is_err(), "{bad}");
    }
}
