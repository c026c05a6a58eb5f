//! Provisioning pieces outside the reconciler's own steps (`crate::reconcile::provision`).
//!
//! - [`back_half`]: mint the guest's local-API token, write its `bootstrap.json` and attach
//!   it read-only — plugged into provisioning as a `ProvisionExtension`.

pub mod back_half;
