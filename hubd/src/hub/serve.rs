//! Serving: the listeners, the background tasks, the routers, and draining on the way out.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum_server::tls_rustls::RustlsAcceptor;

use super::Hub;
use super::conn_cap::{self, CappedAcceptor, ConnectionCap, Side};
use crate::error::HubError;

impl Hub {
    /// Serves HTTPS until `shutdown` resolves, then drains. One listener serves both sides;
    /// with [`Listeners::admin`] set, the agent listener serves only the agent API and the
    /// admin listener the admin API, dashboard and metrics.
    pub async fn serve(
        &self,
        listeners: impl Into<Listeners>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), HubError> {
        let listeners = listeners.into();
        let agent = prepare(listeners.agent)?;
        let admin = listeners.admin.map(prepare).transpose()?;
        let connections = conn_cap::total();
        if let Some(interval) = self.inner.config.dead_man.sweep_interval {
            self.inner
                .tasks
                .spawn(crate::sweeper_task::run(self.clone(), interval));
        }
        self.inner.tasks.spawn(crate::served_key::run(self.clone()));
        self.inner.tasks.spawn(crate::flush_task::run(self.clone()));
        if let Some(watchdog) = crate::watchdog_task::WatchdogTask::from_env(self.clone()) {
            tracing::info!(
                period_ms = u64::try_from(watchdog.period().as_millis()).unwrap_or(u64::MAX),
                "systemd watchdog pings"
            );
            self.inner.tasks.spawn(watchdog.run());
        }
        let handle = axum_server::Handle::new();
        let token = self.inner.shutdown.clone();
        let stopper = handle.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = shutdown => {}
                () = token.cancelled() => {}
            }
            // Stop first, log second: a failing log writer must not keep the hub running.
            token.cancel();
            stopper.graceful_shutdown(Some(Duration::from_secs(10)));
            tracing::info!("shutting down");
        });
        let served = match admin {
            None => {
                let router = crate::api::router(self.clone());
                let cap = self.metrics().connections().cap(Side::Both, connections);
                self.serve_one(agent, router, cap, handle).await
            }
            Some(admin) => {
                let agents = crate::api::agent_router(self.clone());
                let operators = crate::api::admin_router(self.clone());
                // The admin side keeps its own share: agents that fill theirs leave the
                // operators theirs.
                let admin_cap = conn_cap::ADMIN_CONNECTIONS.min(connections / 2);
                let agent_cap = self
                    .metrics()
                    .connections()
                    .cap(Side::Agent, connections - admin_cap);
                let admin_cap = self.metrics().connections().cap(Side::Admin, admin_cap);
                let (agents, operators) = tokio::join!(
                    self.serve_one(agent, agents, agent_cap, handle.clone()),
                    self.serve_one(admin, operators, admin_cap, handle),
                );
                agents.and(operators)
            }
        };
        self.inner.shutdown.cancel();
        self.inner.tasks.close();
        if tokio::time::timeout(Duration::from_secs(10), self.inner.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("background tasks did not stop within 10s");
        }
        // The last polls answered may wait for a flush: they are on disk before the hub stops.
        crate::flush_task::write_history(self, true).await;
        crate::flush_task::flush(self).await;
        served
    }

    /// Serves `router` over TLS on one listener, at most `cap` connections at once, until the
    /// shared `handle` shuts down. A listener that fails stops the whole hub, so one side never
    /// runs without the other.
    async fn serve_one(
        &self,
        (listener, addr): (std::net::TcpListener, String),
        router: axum::Router,
        cap: Arc<ConnectionCap>,
        handle: axum_server::Handle<std::net::SocketAddr>,
    ) -> Result<(), HubError> {
        let tls = self.inner.served_key.tls();
        tracing::info!(
            %addr,
            side = cap.side().name(),
            fingerprint = self.fingerprint(),
            key_pin = self.key_pin(),
            max_connections = cap.max(),
            "hub listening"
        );
        let timeouts = self.inner.config.connection_timeouts;
        let acceptor = CappedAcceptor::new(RustlsAcceptor::new(tls), cap, timeouts);
        let served = match axum_server::from_tcp(listener) {
            Ok(server) => server
                .acceptor(acceptor)
                .handle(handle)
                .serve(router.into_make_service_with_connect_info::<std::net::SocketAddr>())
                .await
                .map_err(|source| HubError::Serve { addr, source }),
            Err(source) => Err(HubError::Serve { addr, source }),
        };
        if served.is_err() {
            self.inner.shutdown.cancel();
        }
        served
    }
}

/// The sockets the hub serves on.
#[derive(Debug)]
pub struct Listeners {
    /// The agent API; also everything else when `admin` is `None`.
    pub agent: std::net::TcpListener,
    /// The admin API, dashboard and metrics, usually on an internal address.
    pub admin: Option<std::net::TcpListener>,
}

impl From<std::net::TcpListener> for Listeners {
    fn from(agent: std::net::TcpListener) -> Self {
        Self { agent, admin: None }
    }
}

/// Makes a bound listener ready for tokio and names its address for logs and errors.
fn prepare(listener: std::net::TcpListener) -> Result<(std::net::TcpListener, String), HubError> {
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "unknown".to_owned());
    match listener.set_nonblocking(true) {
        Ok(()) => Ok((listener, addr)),
        Err(source) => Err(HubError::Serve { addr, source }),
    }
}
