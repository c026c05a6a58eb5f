//! The agent's side of the link to the hub: enrollment and identity ([`identity`]; the
//! host's key and its rotation in [`host_key`]), and the HTTPS client pinned to the hub's
//! keys ([`client`], [`tls`]; the keys the hub announces while it rotates its own are taken
//! and journaled by [`pins`]). The loop that polls through it is [`crate::links::hub`].

pub mod client;
pub mod host_key;
pub mod identity;
pub mod pins;
pub mod tls;
