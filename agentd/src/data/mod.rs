//! The customers' data: where it may go and how it comes back. The signed data [`plan`] and
//! the [`desired`] state held to it (its `plan_gate`); the [`storage`] targets; the
//! [`backup`]s of each guest and their policy; what a restore takes as identity and source
//! ([`recovery`]); the [`restore_test`]s that prove a backup restores, and the PBS
//! verifications ([`verify`]) that check every chunk between them; the [`bulk`] volumes'
//! own archives; each guest's own view of its [`protection`].

pub mod backup;
pub mod bulk;
pub mod desired;
pub mod plan;
pub mod protection;
pub mod recovery;
pub mod restore_test;
pub mod storage;
pub mod verify;
