//! A stand-in for `cloudflared` (not installable on these machines), for the tunnel the agent
//! manages (decision 0082): replicas of one tunnel, each serving what the agent reads of the
//! real one on its metrics address (`GET /ready`: 200
//! `{"status":200,"readyConnections":N,"connectorId":…}` while it holds edge connections, 503
//! with `readyConnections: 0` otherwise; `GET /metrics`: Prometheus text with
//! `build_info{…,version="…"}`), and reading the same configuration file, with the checks
//! `cloudflared tunnel ingress validate` makes (the last rule matches everything, no earlier
//! one does, services are a scheme, host and port without a path, or `http_status:NNN`).
//!
//! ```text
//!  agent ──writes──▶ config.yml, credentials.json ◀──read at each start── replicas (replicas.rs)
//!  agent ──GET /ready, /metrics──▶ each replica's metrics server on loopback
//!  agent ──`systemctl restart UNIT`──▶ the stand-in's `systemctl` script ──▶ control file
//!                                          ──▶ that replica drops its connections and starts
//!  a test ──StandIn (in process)──┐
//!  the demo ──control API (control.rs), over `bosun-cloudflared-sim`──┘
//! ```
//!
//! The suites run it in process ([`StandIn`]); the demo runs the binary
//! `bosun-cloudflared-sim`, which serves the same replicas and a control API beside them
//! ([`control_router`]). One stand-in either way.

mod control;
mod replicas;

use std::collections::BTreeMap;

use serde_json::json;

pub use control::{ControlError, ReplicaView, StandInView, router as control_router};
pub use replicas::{RESTART_TAKES, ReplicaState, StandIn, StandInError, VERSION};

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
    /// The tunnel's UUID (`tunnel:`).
    pub tunnel: String,
    /// `credentials-file:`.
    pub credentials_file: String,
    /// The ingress rules, in order.
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

/// Why a configuration is refused (cloudflared would exit at start).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The file is not the YAML subset a tunnel configuration uses.
    #[error("not a tunnel configuration: {0}")]
    Format(String),
    /// The ingress rules fail what `cloudflared tunnel ingress validate` checks.
    #[error("ingress rules refused: {0}")]
    Ingress(String),
    /// A required key is missing.
    #[error("the configuration has no {0}")]
    Missing(&'static str),
}

fn unquote(v: &str) -> String {
    let v = v.trim();
    v.strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(v)
        .to_owned()
}

/// The top-level keys and the rules (each a key → value map) of `text`.
type Parsed = (
    Option<String>,
    Option<String>,
    Vec<BTreeMap<String, String>>,
);

fn read_yaml(text: &str) -> Result<Parsed, ConfigError> {
    let (mut tunnel, mut credentials, mut rules) =
        (None, None, Vec::<BTreeMap<String, String>>::new());
    let mut in_ingress = false;
    let not_yaml = |line: &str| ConfigError::Format(format!("not yaml: {line}"));
    for line in text.lines() {
        let trimmed = line.trim_end();
        if trimmed.trim_start().starts_with('#') || trimmed.trim().is_empty() {
            continue;
        }
        if !line.starts_with(' ') {
            in_ingress = false;
            let (key, value) = trimmed.split_once(':').ok_or_else(|| not_yaml(line))?;
            match key {
                "tunnel" => tunnel = Some(unquote(value)),
                "credentials-file" => credentials = Some(unquote(value)),
                "ingress" if value.trim().is_empty() => in_ingress = true,
                other => return Err(ConfigError::Format(format!("unknown key {other}"))),
            }
            continue;
        }
        if !in_ingress {
            return Err(ConfigError::Format(format!(
                "indented line outside ingress: {line}"
            )));
        }
        let body = trimmed.trim_start();
        let body = if let Some(rest) = body.strip_prefix("- ") {
            rules.push(BTreeMap::new());
            rest
        } else {
            body
        };
        let (key, value) = body.split_once(':').ok_or_else(|| not_yaml(line))?;
        let rule = rules
            .last_mut()
            .ok_or_else(|| ConfigError::Format("a rule field before any rule".into()))?;
        // `service: http://a:80` splits at the first colon.
        rule.insert(key.trim().to_owned(), unquote(value));
    }
    Ok((tunnel, credentials, rules))
}

/// Parses and validates `text`: the YAML subset a tunnel configuration uses.
pub fn parse(text: &str) -> Result<TunnelConfig, ConfigError> {
    let (tunnel, credentials, rules) = read_yaml(text)?;
    let ingress: Vec<Rule> = rules
        .into_iter()
        .map(|mut r| {
            let service = r
                .remove("service")
                .ok_or_else(|| ConfigError::Ingress("a rule without a service".into()))?;
            let hostname = r.remove("hostname").filter(|h| h != "*");
            if let Some(other) = r.keys().next() {
                return Err(ConfigError::Ingress(format!("unknown rule key {other}")));
            }
            Ok(Rule { hostname, service })
        })
        .collect::<Result<_, ConfigError>>()?;
    validate(&ingress).map_err(ConfigError::Ingress)?;
    Ok(TunnelConfig {
        tunnel: tunnel.ok_or(ConfigError::Missing("tunnel"))?,
        credentials_file: credentials.ok_or(ConfigError::Missing("credentials-file"))?,
        ingress,
    })
}

/// What `cloudflared tunnel ingress validate` says of `ingress`, in its words.
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
            && (h.contains(':') || h.get(1..).is_some_and(|rest| rest.contains('*')))
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

/// The `TunnelID` a credentials file names (lowercase).
pub fn credentials_tunnel(text: &str) -> Option<String> {
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

/// The first configuration of a tunnel: only the catch-all (404), as an operator leaves it
/// before the agent routes any hostname.
pub fn catch_all_config(tunnel: uuid::Uuid, credentials: &std::path::Path) -> String {
    format!(
        "tunnel: {tunnel}\ncredentials-file: \"{}\"\ningress:\n  - service: http_status:404\n",
        credentials.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stand_in_reads_what_ingress_validate_accepts() {
        let good = "tunnel: 6ff42ae2-765d-4adf-8112-31c55c1551ef\ncredentials-file: \"/x/c.json\"\n\
                    ingress:\n  - hostname: a.example.com\n    service: http://10.0.0.5:80\n  - service: http_status:404\n";
        let c = parse(good).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.route("a.example.com"), Some("http://10.0.0.5:80"));
        assert_eq!(c.route("b.example.com"), Some("http_status:404"));
        assert_eq!(c.credentials_file, "/x/c.json");
        for bad in [
            good.replace("  - service: http_status:404\n", ""),
            good.replace("http://10.0.0.5:80", "http://10.0.0.5:80/admin"),
            good.replace("    service: http://10.0.0.5:80\n", ""),
            good.replace("ingress:\n", "ingress:\n  - service: http://10.0.0.9:80\n"),
            good.replace("a.example.com", "a.example.com:8080"),
            good.replace("http_status:404", "http_status:teapot"),
            good.replace("tunnel: ", "tunel: "),
        ] {
            assert!(parse(&bad).is_err(), "{bad}");
        }
        let first = catch_all_config(uuid::Uuid::nil(), std::path::Path::new("/x/c.json"));
        assert_eq!(
            parse(&first).map(|c| c.routes()),
            Ok(BTreeMap::new()),
            "{first}"
        );
    }

    #[test]
    fn a_credentials_file_names_its_tunnel() {
        let id = uuid::Uuid::from_u128(0x6ff4_2ae2_765d_4adf_8112_31c5_5c15_51ef);
        assert_eq!(
            credentials_tunnel(&credentials_json(id, "s")),
            Some(id.to_string())
        );
        assert_eq!(credentials_tunnel("{}"), None);
        assert_eq!(credentials_tunnel("not json"), None);
    }
}
