//! `bosun-agentd`: the non-root host agent.

pub mod helper_client;
pub mod pve;
