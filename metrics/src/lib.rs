//! `bosun-metrics`: what the agent's and the hub's `/metrics` endpoints share.
//!
//! - [`exposition`]: content negotiation between OpenMetrics and the Prometheus text format
//!   0.0.4, and the rendering of a [`prometheus_client`] registry in either.
//! - [`process`]: the standard `process_*` families (CPU seconds, resident memory, start time,
//!   file descriptors) read from `/proc/self` at each scrape, and the `build_info` gauge.
//!
//! The registries and families of each program stay in that program (`bosun_agentd::metrics`,
//! `bosun_hubd::metrics`); this crate holds no state of its own.

pub mod exposition;
pub mod process;

pub use exposition::{Format, render};
pub use process::{ProcessCollector, register_build_info};
