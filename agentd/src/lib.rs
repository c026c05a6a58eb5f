//! `bosun-agentd`: the non-root host agent.

pub mod backup;
pub mod clock;
pub mod config;
pub mod failpoint;
pub mod helper_client;
pub mod jobs;
pub mod journal;
pub mod localapi;
pub mod pve;
pub mod queue;
pub mod reconcile;
