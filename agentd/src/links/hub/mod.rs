//! The hub loop: the long-poll loop ([`poll_task`]) over the pinned client
//! ([`crate::links::hub_client`]), which only fetches and routes: signed jobs to the
//! [`inbox`], desired state to the [`desired_intake`], timings to [`timing`], and
//! report state in the [`reporter`] (change-only bodies from [`report`], the host's
//! [`capabilities`] when they change). Where the link
//! stands is in [`link`] (and in a file for `bosun-agentctl status`).

pub mod capabilities;
pub mod desired_intake;
pub mod inbox;
pub mod link;
pub mod op_tail;
pub mod poll_task;
pub mod report;
pub mod reporter;
pub mod restored_backups;
pub mod timing;
