//! What a guest's backups are restored into, and from where: the identity each scenario
//! gives the restored guest ([`identity`]) and the archive it is restored from
//! ([`source`]). Provisioning, guest-loss DR and restore tests all restore an archive; they
//! differ in these two answers, and nothing else decides them.

pub mod host_loss;
pub mod identity;
pub mod source;

pub use identity::{IdentityPlan, Scenario, identity_for};
pub use source::{BackupSource, fastest_surviving, newest_on_tier};
