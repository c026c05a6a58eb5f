//! What a guest's backups are restored into, and from where: the identity each scenario
//! gives the restored guest ([`identity`]), the archive it is restored from ([`source`])
//! and what proves that archive is the one Bosun backed up ([`crate::data::backup::proof`]). Provisioning,
//! guest-loss DR and restore tests all restore an archive; they differ in these answers,
//! and nothing else decides them.
//!
//! The DR restore itself is provisioning's bring-up from a backup
//! (`reconcile/provision/recover.rs`, which maps the whole of disaster recovery).

pub mod host_loss;
pub mod identity;
pub mod source;

pub use identity::{IdentityPlan, Scenario, identity_for};
pub use source::{
    BackupSource, named_archive, named_archive_as, newest_on_tier, newest_on_tier_as,
    newest_surviving, newest_surviving_as,
};
