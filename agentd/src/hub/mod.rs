//! The hub side of the agent: enrollment and identity ([`identity`]), the
//! HTTPS client pinned to the hub's certificate ([`client`], [`tls`]) and the
//! long-poll loop ([`poll_task`]) with its change-only reports ([`report`]).

pub mod client;
pub mod identity;
pub mod poll_task;
pub mod report;
pub mod tls;
