//! The signed data plan: where this host's customer data may go (DESIGN §5).
//!
//! ```text
//!  hub poll ─► DesiredIntake ─► watch<raw DesiredSnapshot> ─► gate task ─► watch<DesiredSnapshot>
//!                                                              │             (what every task
//!                      PlanKeeper (verify, journal, newest) ◄──┤              acts on)
//!                      effective::apply (hold to the plan)  ◄──┤
//!                      CredentialKeeper (signed, held, newest) ◄┤
//!                      journal audit: storage.refused once  ◄──┘
//! ```
//!
//! Every task that touches storage (the storage watcher, backup tiers, the scheduler, disaster
//! recovery, restore tests, placement of bulk volumes) reads the gate's output, never the hub's
//! document, so a target or tier the plan does not name cannot reach any of them.
//!
//! This module holds the plan ([`keeper`]: verified, journaled, the newest serial), what
//! holding a document to it gives ([`effective`]) and the credentials its targets and tunnel
//! use ([`credentials`]: operator-signed, journaled, the newest); the gate task that applies them to every
//! desired state is [`crate::data::desired::plan_gate`].

pub mod credentials;
pub mod effective;
pub mod keeper;

pub use credentials::CredentialKeeper;
pub use effective::{Effective, Refusal, apply};
pub use keeper::{PlanKeeper, PlanOffer, VerifiedPlan};

#[cfg(test)]
mod tests;
