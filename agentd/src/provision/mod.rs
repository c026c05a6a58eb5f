//! Provisioning pieces outside the reconciler's own steps (`crate::reconcile::provision`).
//!
//! - [`back_half`]: mint the guest's local-API token and `pct push` its `bootstrap.json`
//!   into the running guest — plugged into provisioning as a post-start
//!   `ProvisionExtension`.

pub mod back_half;
