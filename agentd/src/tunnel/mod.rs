//! The tunnel (`cloudflared`, its own systemd units so traffic survives the agent), managed
//! (DESIGN §8, decision 0082): the agent owns its configuration and restarts it.
//!
//! - [`routes`]: the operator-signed data plan's routes (hostname → guest id, port) placed on
//!   the guests' addresses on the bridge, which the agent reads itself; every change audited
//!   to each guest concerned.
//! - [`credentials`]: the tunnel's credentials, sealed to this host and bound to the tunnel
//!   (decision 0084), opened and written where the configuration names them.
//! - [`ingress`]: the configuration file, checked as `cloudflared tunnel ingress validate`
//!   would before it replaces the one in place, atomically.
//! - [`service`]: each replica's `/ready` and `/metrics`, and `systemctl restart` of its unit.
//! - [`tunnel_task`]: the loop that ties them together and publishes the tunnel's state for
//!   the report.
//!
//! The health task's readiness watch (`health/tunnel.rs`) stays what raises `tunnel_down`.

pub mod credentials;
pub mod ingress;
pub mod routes;
pub mod service;
pub mod tunnel_task;

pub use tunnel_task::TunnelTask;
