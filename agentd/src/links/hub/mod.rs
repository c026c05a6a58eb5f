//! The hub side of the agent: enrollment and identity ([`identity`]; the host's key and its
//! rotation in [`host_key`]), the
//! HTTPS client pinned to the hub's keys ([`client`], [`tls`]; the keys the hub announces
//! while it rotates its own are taken and journaled by [`pins`]) and the
//! long-poll loop ([`poll_task`]), which only fetches and routes: signed jobs to the
//! [`inbox`], desired state to the [`desired_intake`], timings to [`timing`], and
//! report state in the [`reporter`] (change-only bodies from [`report`]). Where the link
//! stands is in [`link`] (and in a file for `bosun-agentctl status`).

pub mod client;
pub mod desired_intake;
pub mod host_key;
pub mod identity;
pub mod inbox;
pub mod link;
pub mod op_tail;
pub mod pins;
pub mod poll_task;
pub mod report;
pub mod reporter;
pub mod timing;
pub mod tls;
