//! The host's own keys, each created once in the state directory and never sent to the hub:
//!
//! - [`pbs_key`]: K, the Proxmox Backup Server client encryption key, and the keyring of the
//!   keys a rotation retired (archives made before it still need them).
//! - [`sealing`]: the host's age identity, what operators seal storage credentials to.
//! - [`escrow`]: the customer's recovery code R, K wrapped under R, and the printed sheet
//!   that brings the keys back on a new box after the host is lost.
//!
//! Operators' keys are elsewhere: the agent only verifies their SSH signatures
//! (`crate::signing`).

pub mod escrow;
pub mod pbs_key;
pub mod sealing;
