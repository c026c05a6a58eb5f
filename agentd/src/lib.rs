//! `bosun-agentd`: the non-root host agent.

pub mod helper_client;
pub mod pve;
pub mod clock;
pub mod jobs;
pub mod journal;
