//! Probing the tunnel's readiness endpoint: `cloudflared` runs as its own unit and, started
//! with `--metrics 127.0.0.1:PORT`, answers `GET /ready` with 200 while it holds at least one
//! connection to the edge and 503 otherwise.
//!
//! One `GET` per probe, on loopback only (the config refuses anything else), never following a
//! redirect, within the configured timeout for the whole exchange, reading at most
//! [`MAX_BODY_BYTES`] of the answer.

use bosun_errchain::error_chain;

use super::smart::clean;
use crate::config::health::TunnelSettings;

/// Most bytes of an answer read (the start of a not-ready answer goes into the detail).
pub const MAX_BODY_BYTES: usize = 1024;

/// Why the probe could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("building the tunnel readiness client for {url}")]
pub struct ProbeSetupError {
    /// The readiness URL.
    pub url: String,
    /// The cause.
    #[source]
    pub source: reqwest::Error,
}

/// The readiness probe.
#[derive(Debug, Clone)]
pub struct ReadinessProbe {
    client: reqwest::Client,
    url: url::Url,
}

impl ReadinessProbe {
    /// A probe of `settings.readiness_url`.
    pub fn new(settings: &TunnelSettings) -> Result<Self, ProbeSetupError> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .http1_only()
            .connect_timeout(settings.timeout)
            .timeout(settings.timeout)
            .build()
            .map_err(|source| ProbeSetupError {
                url: settings.readiness_url.to_string(),
                source,
            })?;
        Ok(Self {
            client,
            url: settings.readiness_url.clone(),
        })
    }

    /// One probe: `Ok(detail)` when the endpoint answers 2xx, `Err(detail)` otherwise.
    pub async fn check(&self) -> Result<String, String> {
        let mut response = match self.client.get(self.url.clone()).send().await {
            Ok(r) => r,
            Err(e) => return Err(clean(&format!("no answer: {}", error_chain(&e)))),
        };
        let status = response.status();
        if status.is_success() {
            return Ok(format!("ready (HTTP {})", status.as_u16()));
        }
        let mut body = Vec::new();
        while let Ok(Some(chunk)) = response.chunk().await {
            let room = MAX_BODY_BYTES - body.len();
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() >= MAX_BODY_BYTES {
                break;
            }
        }
        let text = String::from_utf8_lossy(&body);
        let text = text.trim();
        Err(clean(&if text.is_empty() {
            format!("not ready: HTTP {}", status.as_u16())
        } else {
            format!("not ready: HTTP {}: {text}", status.as_u16())
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    use axum::routing::get;

    use super::*;

    /// A loopback server: `/ready` answers 200, `/moved` redirects there, `/down` answers 503
    /// with a body larger than the probe reads, `/slow` never answers.
    async fn server() -> std::net::SocketAddr {
        let app = axum::Router::new()
            .route("/ready", get(|| async { "{\"status\":200}" }))
            .route(
                "/moved",
                get(|| async {
                    (StatusCode::FOUND, [(header::LOCATION, "/ready")]).into_response()
                }),
            )
            .route(
                "/down",
                get(|| async { (StatusCode::SERVICE_UNAVAILABLE, "y".repeat(1 << 20)) }),
            )
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    "late"
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        addr
    }

    fn probe(addr: std::net::SocketAddr, path: &str) -> ReadinessProbe {
        let _ = rustls::crypto::ring::default_provider().install_default();
        ReadinessProbe::new(&TunnelSettings {
            readiness_url: format!("http://{addr}{path}").parse().unwrap(),
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(300),
            down_after: Duration::ZERO,
            managed: None,
        })
        .unwrap()
    }

    #[tokio::test]
    async fn ready_redirected_down_slow_and_refused() {
        let addr = server().await;
        assert_eq!(
            probe(addr, "/ready").check().await.unwrap(),
            "ready (HTTP 200)"
        );
        let moved = probe(addr, "/moved").check().await.unwrap_err();
        assert!(
            moved.contains("HTTP 302"),
            "a redirect is not followed: {moved}"
        );
        let down = probe(addr, "/down").check().await.unwrap_err();
        assert!(down.starts_with("not ready: HTTP 503: yyy"), "{down}");
        assert!(
            down.len() <= MAX_BODY_BYTES + 40,
            "read in part only: {}",
            down.len()
        );
        let started = std::time::Instant::now();
        let slow = probe(addr, "/slow").check().await.unwrap_err();
        assert!(slow.starts_with("no answer"), "{slow}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the timeout holds"
        );
        // Nobody listening.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let refused = probe(closed, "/ready").check().await.unwrap_err();
        assert!(refused.starts_with("no answer"), "{refused}");
    }
}
