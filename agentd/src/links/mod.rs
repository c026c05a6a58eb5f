//! The agent's links to what runs beside it: the hub over HTTPS ([`hub_client`]: enrollment,
//! the host's identity and the pinned client; [`hub`]: the long-poll loop over it and what
//! it routes), and the root helper over its
//! socket or `sudo` ([`helper`], the agent's only route to root). Proxmox itself is reached
//! through `bosun-pve`.

pub mod helper;
pub mod hub;
pub mod hub_client;
