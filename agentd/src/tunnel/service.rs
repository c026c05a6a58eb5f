//! The tunnel's replicas as the agent sees them: each one's metrics server on loopback
//! (`GET /ready`: `{"status":200,"readyConnections":N,…}` while it holds an edge connection,
//! 503 otherwise; `GET /metrics`: Prometheus text whose `build_info` names the version), and
//! restarting its unit through `systemctl restart UNIT` (allowed to the agent's user for these
//! units only, by the polkit rule the package ships: decision 0082).
//!
//! Every exchange is bounded: one request within the configured timeout, at most
//! [`MAX_READ`] bytes read; a restart is killed at its timeout and only its exit status is
//! kept.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use url::Url;

use crate::config::tunnel::Replica;

/// Most bytes read of one answer (`/metrics` lists `build_info` among its first families).
pub const MAX_READ: usize = 256 * 1024;

/// What one probe of a replica found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaReading {
    /// `/ready` answered 2xx.
    pub ready: bool,
    /// `readyConnections`, when the answer carried it.
    pub connections: Option<u32>,
}

/// Why a restart failed.
#[derive(Debug, thiserror::Error)]
pub enum RestartError {
    /// `systemctl` could not be started.
    #[error("starting {program} restart {unit}")]
    Spawn {
        /// The program.
        program: PathBuf,
        /// The unit.
        unit: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// It ran past its time.
    #[error("{program} restart {unit} ran past {timeout:?} and was killed")]
    Timeout {
        /// The program.
        program: PathBuf,
        /// The unit.
        unit: String,
        /// The bound.
        timeout: Duration,
    },
    /// It failed.
    #[error("{program} restart {unit} exited with {status}")]
    Failed {
        /// The program.
        program: PathBuf,
        /// The unit.
        unit: String,
        /// Its exit status.
        status: std::process::ExitStatus,
    },
}

/// Probes replicas and restarts their units.
#[derive(Debug, Clone)]
pub struct Service {
    client: reqwest::Client,
    systemctl: PathBuf,
    restart_timeout: Duration,
}

impl Service {
    /// A service handle; `timeout` bounds each probe, `restart_timeout` each restart.
    pub fn new(
        systemctl: PathBuf,
        timeout: Duration,
        restart_timeout: Duration,
    ) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .http1_only()
            .connect_timeout(timeout)
            .timeout(timeout)
            .build()?;
        Ok(Self {
            client,
            systemctl,
            restart_timeout,
        })
    }

    async fn get(&self, base: &Url, path: &str) -> Option<(bool, String)> {
        let url = base.join(path).ok()?;
        let mut response = self.client.get(url).send().await.ok()?;
        let ok = response.status().is_success();
        let mut body = Vec::new();
        while let Ok(Some(chunk)) = response.chunk().await {
            let room = MAX_READ - body.len();
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() >= MAX_READ {
                break;
            }
        }
        Some((ok, String::from_utf8_lossy(&body).into_owned()))
    }

    /// One `/ready` probe of `replica`.
    pub async fn probe(&self, replica: &Replica) -> ReplicaReading {
        match self.get(&replica.metrics, "/ready").await {
            Some((ready, body)) => ReplicaReading {
                ready,
                connections: serde_json::from_str::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v.get("readyConnections")?.as_u64())
                    .and_then(|n| u32::try_from(n).ok()),
            },
            None => ReplicaReading {
                ready: false,
                connections: None,
            },
        }
    }

    /// The version `replica`'s metrics name, if it answers.
    pub async fn version(&self, replica: &Replica) -> Option<String> {
        let (ok, body) = self.get(&replica.metrics, "/metrics").await?;
        ok.then(|| build_version(&body)).flatten()
    }

    /// `systemctl restart UNIT`, bounded in time.
    pub async fn restart(&self, unit: &str) -> Result<(), RestartError> {
        let mut child = tokio::process::Command::new(&self.systemctl)
            .arg("restart")
            .arg(unit)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| RestartError::Spawn {
                program: self.systemctl.clone(),
                unit: unit.to_owned(),
                source,
            })?;
        let status = match tokio::time::timeout(self.restart_timeout, child.wait()).await {
            Ok(Ok(status)) => status,
            Ok(Err(source)) => {
                return Err(RestartError::Spawn {
                    program: self.systemctl.clone(),
                    unit: unit.to_owned(),
                    source,
                });
            }
            Err(_) => {
                let _ = child.kill().await;
                return Err(RestartError::Timeout {
                    program: self.systemctl.clone(),
                    unit: unit.to_owned(),
                    timeout: self.restart_timeout,
                });
            }
        };
        if status.success() {
            Ok(())
        } else {
            Err(RestartError::Failed {
                program: self.systemctl.clone(),
                unit: unit.to_owned(),
                status,
            })
        }
    }
}

/// The `version` label of the first `build_info` sample: letters, digits and `.+-_` only, at
/// most 64 bytes.
pub fn build_version(metrics: &str) -> Option<String> {
    let line = metrics
        .lines()
        .find(|l| l.starts_with("build_info{") || l.starts_with("cloudflared_build_info{"))?;
    let labels = line.split_once('{')?.1.split_once('}')?.0;
    let version = labels.split(',').find_map(|l| {
        l.trim()
            .strip_prefix("version=\"")
            .and_then(|v| v.strip_suffix('"'))
    })?;
    let clean = !version.is_empty()
        && version.len() <= 64
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".+-_".contains(c));
    clean.then(|| version.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_comes_from_build_info_and_is_bounded() {
        let text = "# HELP build_info Build and version information\n# TYPE build_info gauge\n\
                    build_info{goversion=\"go1.22.5\",revision=\"2024-08-01\",type=\"\",version=\"2024.8.2\"} 1\n";
        assert_eq!(build_version(text).as_deref(), Some("2024.8.2"));
        assert_eq!(build_version("up 1\n"), None);
        let hostile = "build_info{version=\"1\\u001b[2J\"} 1\n";
        assert_eq!(build_version(hostile), None);
        let long = format!("build_info{{version=\"{}\"}} 1\n", "9".repeat(65));
        assert_eq!(build_version(&long), None);
    }

    #[tokio::test]
    async fn a_restart_is_bounded_and_its_failure_named() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let script = |name: &str, body: &str| {
            use std::os::unix::fs::PermissionsExt;
            let path = dir.path().join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            path
        };
        let ok = script("ok", "test \"$1 $2\" = \"restart t.service\"");
        let fail = script("fail", "exit 3");
        let hang = script("hang", "exec sleep 30");
        let service = |p: PathBuf| {
            Service::new(p, Duration::from_millis(200), Duration::from_millis(300)).unwrap()
        };
        service(ok).restart("t.service").await.unwrap();
        assert!(matches!(
            service(fail).restart("t.service").await.unwrap_err(),
            RestartError::Failed { .. }
        ));
        let started = std::time::Instant::now();
        assert!(matches!(
            service(hang).restart("t.service").await.unwrap_err(),
            RestartError::Timeout { .. }
        ));
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
