//! The agent's links to what runs beside it: the hub over HTTPS ([`hub`]: enrollment, the
//! pinned client, the long-poll loop and what it routes), and the root helper over its
//! socket or `sudo` ([`helper`], the agent's only route to root). Proxmox itself is reached
//! through `bosun-pve`.

pub mod helper;
pub mod hub;
