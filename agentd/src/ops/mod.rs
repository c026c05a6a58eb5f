//! The agent's work as it is recorded: the [`journal`] (SQLite on its own thread, every
//! table the agent keeps), the journaled [`operation`] protocol and its replay,
//! the closed table of operation kinds ([`op_kind`], a leaf every part may name), the signed one-shot [`jobs`], and the [`nonce_prune`] task that forgets the nonces
//! of jobs long expired.

pub mod jobs;
pub mod journal;
pub mod nonce_prune;
pub mod op_kind;
pub mod operation;
