//! Desired state from the hub: validated, cached, then acted on — always the same
//! document. A generation lower than the one held is a hub reset (restored from a
//! backup, or a hostile hub's out-of-reach generation being undone): the agent acts on
//! it, caches it (so a restart while the hub is away does not bring the old document
//! back) and audits it once (`desired.generation_reset`).
//!
//! A guest whose `kind` this version does not know is taken out of the document and refused
//! alone ([`bosun_proto::desired_kinds`]): audited once per generation (`desired.guest_refused`),
//! reported refused, never acted on; every other guest's desired state applies.

use std::sync::Arc;

use bosun_errchain::error_chain;
use bosun_proto::desired_kinds::{self, Parsed};
use bosun_proto::validate::ValidationError;
use serde_json::json;
use tokio::sync::watch;

use crate::data::desired::DesiredSnapshot;
use crate::ops::journal::{AuditEvent, CacheOutcome, JournalHandle};

/// Most guests of unknown kinds one `desired.guest_refused` audit row (and the log) names.
const AUDITED_GUESTS: usize = 16;

/// Why a desired state (from the hub or the cache) is refused. Its text is the `reason` of
/// the `desired.refused` audit row.
#[derive(Debug, thiserror::Error)]
pub enum DesiredRefusal {
    /// The document does not decode as a desired state.
    #[error(transparent)]
    Decode(#[from] serde_json::Error),
    /// It decodes but breaks a bound or rule (the error names the field).
    #[error(transparent)]
    Invalid(#[from] ValidationError),
}

/// Reads the cached document, checked like one fresh from the hub: its bounds hold
/// for the cache too, and a guest of an unknown kind is refused alone as it was then.
pub fn parse_cached(body: &str) -> Result<Parsed, DesiredRefusal> {
    parse(serde_json::from_str::<serde_json::Value>(body)?)
}

fn parse(body: serde_json::Value) -> Result<Parsed, DesiredRefusal> {
    let parsed = desired_kinds::parse(body)?;
    parsed.state.validate()?;
    Ok(parsed)
}

/// The intake.
#[derive(Debug)]
pub struct DesiredIntake {
    journal: JournalHandle,
    desired: watch::Sender<Option<Arc<DesiredSnapshot>>>,
    known_generation: u64,
}

impl DesiredIntake {
    /// An intake feeding `desired` (which holds the cached document, if any).
    pub fn new(
        journal: JournalHandle,
        desired: watch::Sender<Option<Arc<DesiredSnapshot>>>,
    ) -> Self {
        let known_generation = desired.borrow().as_ref().map_or(0, |d| d.generation);
        Self {
            journal,
            desired,
            known_generation,
        }
    }

    /// The generation the agent holds (sent as `known_generation`).
    pub fn known_generation(&self) -> u64 {
        self.known_generation
    }

    /// Takes a desired state the hub sent under `generation`, with the operator's
    /// `correlation_id` for it (dropped, with a warning, when it is not a valid id).
    pub async fn take(
        &mut self,
        generation: u64,
        body: serde_json::Value,
        correlation_id: Option<String>,
        request_id: &str,
    ) {
        let correlation_id = correlation_id.filter(|id| {
            let ok = bosun_proto::oplog::check_correlation_id("correlation_id", id).is_ok();
            if !ok {
                tracing::warn!(%request_id, generation, "hub sent an invalid correlation id; ignored");
            }
            ok
        });
        // Seen, valid or not: asking again would only bring the same document.
        self.known_generation = generation;
        let Parsed {
            state: desired,
            refused: unknown_kinds,
        } = match parse(body.clone()) {
            Ok(parsed) => parsed,
            Err(refusal) => {
                let reason = refusal.to_string();
                tracing::warn!(%request_id, generation, reason = %reason, "hub sent an invalid desired state; keeping the previous one");
                self.audit(
                    "desired.refused",
                    request_id,
                    json!({ "generation": generation, "reason": reason }),
                )
                .await;
                return;
            }
        };
        match self
            .journal
            .cache_correlated_desired_state(generation, body.to_string(), correlation_id.clone())
            .await
        {
            Ok(CacheOutcome::Stored) => {}
            Ok(CacheOutcome::Reset { previous }) => {
                tracing::warn!(%request_id, generation, previous, "the hub's generation went backwards; acting on its document as a hub reset");
                self.audit(
                    "desired.generation_reset",
                    request_id,
                    json!({ "generation": generation, "previous": previous }),
                )
                .await;
            }
            Err(e) => {
                tracing::error!(%request_id, generation, error = %error_chain(&e), "could not cache the desired state; not acting on it");
                self.audit(
                    "desired.refused",
                    request_id,
                    json!({ "generation": generation, "reason": e.to_string() }),
                )
                .await;
                return;
            }
        }
        if !unknown_kinds.is_empty() {
            // One audit row per generation, naming the first few guests (the report names
            // every one, bounded there).
            let named = &unknown_kinds[..unknown_kinds.len().min(AUDITED_GUESTS)];
            for refused in named {
                tracing::warn!(%request_id, generation, guest = %refused.name, guest_id = ?refused.guest_id, reason = %refused.reason, "hub named a guest of a kind this host does not know; that guest is refused");
            }
            let guests: Vec<_> = named
                .iter()
                .map(|r| json!({ "guest": r.name, "guest_id": r.guest_id, "reason": r.reason }))
                .collect();
            self.audit(
                "desired.guest_refused",
                request_id,
                json!({ "generation": generation, "count": unknown_kinds.len(), "guests": guests }),
            )
            .await;
        }
        tracing::info!(%request_id, generation, correlation_id = %correlation_id.as_deref().unwrap_or_default(), guests = desired.guests.len(), "new desired state");
        self.desired.send_replace(Some(Arc::new(DesiredSnapshot {
            generation,
            state: desired,
            request_id: Some(request_id.to_owned()),
            correlation_id,
            plan: None,
            refused: Vec::new(),
            unknown_kinds,
        })));
    }

    async fn audit(&self, action: &str, request_id: &str, detail: serde_json::Value) {
        let mut event = AuditEvent::new(action);
        event.request_id = Some(request_id.to_owned());
        event.detail = detail;
        if let Err(e) = self.journal.append_audit(event).await {
            tracing::warn!(action, error = %error_chain(&e), "could not audit a desired-state event");
        }
    }
}
