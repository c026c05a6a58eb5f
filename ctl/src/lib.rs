//! `bosunctl`: the operator CLI. `main.rs` parses and calls [`dispatch()`]; each command group
//! lives in its own module, over the leaves every command reads (`global`, the options every
//! command accepts; `duration`; `client`; `error`; `table`), and this file only declares
//! them. [`error::CtlError::exit_code`] is the one place exit codes come from.

pub mod alerts;
pub mod artifact;
pub mod audit;
pub mod cli;
pub mod client;
pub mod completion;
pub mod config;
pub mod desired;
pub mod desired_diff;
pub mod desired_wait;
pub mod dispatch;
pub mod duration;
pub mod enroll_token;
pub mod error;
pub mod exit;
pub mod explain;
mod explain_order;
pub mod fleet;
pub mod fleet_approve;
pub mod fleet_plan;
pub mod fleet_report;
pub mod fleet_wave;
pub mod global;
pub mod golden;
pub mod history;
pub mod host_labels;
pub mod hosts;
pub mod hub;
pub mod job;
pub mod job_check;
pub mod job_show;
pub mod job_sign;
pub mod man;
pub mod plan;
pub mod policy;
pub mod pve_check;
pub mod pve_cmd;
pub mod pve_setup;
pub mod recipients;
pub mod resolve;
pub mod secret;
pub mod status;
pub mod table;
pub mod tls;
pub mod tokens;
pub mod width;

pub use dispatch::{dispatch, install_crypto_provider};
