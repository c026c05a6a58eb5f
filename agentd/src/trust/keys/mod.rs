//! The host's own keys, each created once in the state directory and never sent to the hub:
//!
//! - [`pbs_key`]: K, the Proxmox Backup Server client encryption key, and the keyring of the
//!   keys a rotation retired (archives made before it still need them).
//! - [`sealing`]: the host's age identity, what operators seal storage credentials to.
//! - [`credentials`]: what a sealed credential opens to, only with an operator's signature.
//!
//! Their escrow under the customer's recovery code, with the offline commands that create,
//! rotate and recover it, is `bosun-agentctl`'s (`agentctl/src/escrow/`); operators' keys
//! are not here either: the agent only verifies their SSH signatures (`crate::trust::signing`).

pub mod credentials;
pub mod pbs_key;
pub mod sealing;

mod new_file;
