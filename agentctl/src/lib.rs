//! `bosun-agentctl`'s library: what an operator runs on a Bosun host beside the agent and the
//! daemon never maps (docs/decisions/0046-agent-commands-in-bosun-agentctl.md,
//! docs/decisions/0057-agentctl-crate-and-local-explain.md).
//!
//! - [`escrow`]: the PBS encryption key under the customer's recovery code — the code's
//!   words, the scrypt wrapping, the recovery sheet's PDF with its fonts, and the offline
//!   commands that create, rotate and recover it.
//! - [`enroll`]: enrolling the box at the hub and making the escrow in the same command, so
//!   the recovery code is shown once, at enrollment.
//! - [`explain`]: an operation and its journal steps, read from this host's agent journal.
//! - [`break_glass`]: the operator's signed break-glass door opened from the node's console.
//!
//! The program (`src/main.rs`) parses the command line and runs each command on the agent's
//! runtime (`bosun_agentd::runtime::program`).

pub mod break_glass;
pub mod cli;
pub mod enroll;
pub mod escrow;
pub mod explain;
