//! The desired state as every task acts on it: the hub's document of one generation
//! ([`DesiredSnapshot`]), held to the signed data plan by the [`plan_gate`] before any task reads
//! it.
//!
//! ```text
//!  hub poll ─► DesiredIntake ─► watch<raw DesiredSnapshot> ─► gate ─► watch<DesiredSnapshot>
//!                                                                      (reconcile, storage,
//!                                                                       backup, restore tests,
//!                                                                       golden builds, jobs)
//! ```

pub mod plan_gate;

use std::sync::Arc;

use bosun_proto::desired::DesiredState;

pub use plan_gate::spawn_gate;

use crate::data::plan::{Refusal, VerifiedPlan};

/// A desired state and its generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredSnapshot {
    /// The hub's generation.
    pub generation: u64,
    /// The document.
    pub state: DesiredState,
    /// The request id of the poll that brought it.
    pub request_id: Option<String>,
    /// The operator's correlation id of the generation, recorded on the operations it causes.
    pub correlation_id: Option<String>,
    /// The signed data plan `state` was held to ([`crate::data::plan`]); `None` for the hub's
    /// own document before the gate, or when no plan was ever verified.
    pub plan: Option<Arc<VerifiedPlan>>,
    /// The storage targets and tiers of the hub's document the plan does not allow.
    pub refused: Vec<Refusal>,
    /// The guests of the hub's document whose kind this version does not know, taken out of
    /// `state` ([`bosun_proto::desired_kinds`]): reported refused, never acted on.
    pub unknown_kinds: Vec<bosun_proto::refused::Refused>,
}
