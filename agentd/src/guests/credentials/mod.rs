//! The guests' credentials: local-API tokens, the bootstrap that carries them, the local API
//! certificate's rotation, and stale bootstraps. Provisioning itself is
//! `crate::guests::reconcile::provision`.
//!
//! - [`bootstrap`]: mint the guest's local-API token and `pct push` its `bootstrap.json`
//!   into the running guest — plugged into provisioning as a post-start
//!   `ProvisionExtension`.
//! - [`cert`]: the local API's TLS certificate, which every bootstrap pins.
//! - [`token`]: minting the guests' local-API tokens.
//! - [`rotate`]: the offline `rotate-local-api-cert` command (under [`crate::runtime::state_lock`]).
//! - [`stale`]: after a rollback or restore, revoke a token the restored bootstrap cannot
//!   carry, so the reconciler re-issues it once the guest runs.

pub mod bootstrap;
pub mod cert;
pub mod rotate;
pub mod stale;
pub mod token;
