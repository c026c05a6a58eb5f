//! What a round of the hub loop does with the hub keys an answer carries (decision 0049): the
//! operator's signed set is offered to [`HubPins`](crate::links::hub_client::pins::HubPins) and audited when
//! taken or refused (a refused document once, not once a poll); pins announced unsigned are
//! never taken, and audited once per set.

use bosun_errchain::error_chain;
use bosun_proto::signed::SignedDocument;
use bosun_pve::Pve;
use serde_json::json;

use super::PollTask;
use crate::links::hub_client::pins::{AdoptError, Adopted, Refused};
use crate::ops::journal::AuditEvent;

impl<P: Pve + 'static> PollTask<P> {
    /// Takes the hub keys an answer carried: `unsigned` (ignored) and `signed` (offered).
    pub(super) async fn take_pins(
        &self,
        unsigned: &[String],
        signed: Option<serde_json::Value>,
        request_id: &str,
    ) {
        let Some(pins) = &self.hub_pins else {
            return;
        };
        if pins.unsigned(unsigned) && texts_differ(&pins.trusted(), unsigned) {
            tracing::warn!(%request_id, announced = ?unsigned, "the hub announced key pins without the operator's signature; ignored (a pin set is taken only when signed)");
            self.audit(
                "hub_pins.unsigned_ignored",
                json!({ "announced": unsigned }),
                request_id,
            )
            .await;
        }
        let Some(value) = signed else {
            return;
        };
        // Not even the shape of a signed document: offered as such, refused (and remembered)
        // like any document that does not decode.
        let signed = serde_json::from_value::<SignedDocument>(value.clone()).unwrap_or_else(|_| {
            SignedDocument {
                document: value.to_string(),
                signature: String::new(),
            }
        });
        match pins.adopt(&signed, self.identity.host_id, self.clock.now()) {
            Ok(Adopted::Taken { serial, signer }) => {
                tracing::info!(%request_id, serial, %signer, pins = ?pins.trusted(), "the operator's signed hub keys taken; trusted from the next connection on");
                self.audit(
                    "hub_pins.accepted",
                    json!({ "serial": serial, "signer": signer, "trusted": pins.trusted() }),
                    request_id,
                )
                .await;
            }
            Ok(Adopted::Current) | Err(AdoptError::Refused(Refused::RefusedBefore)) => {}
            Err(err) => {
                tracing::warn!(%request_id, error = %error_chain(&err), "the signed hub keys were not taken; trusting the keys as before");
                self.audit(
                    "hub_pins.refused",
                    json!({ "reason": error_chain(&err) }),
                    request_id,
                )
                .await;
            }
        }
    }

    async fn audit(&self, action: &str, detail: serde_json::Value, request_id: &str) {
        let mut event = AuditEvent::new(action);
        event.request_id = Some(request_id.to_owned());
        event.detail = detail;
        if let Err(e) = self.journal.append_audit(event).await {
            tracing::warn!(error = %error_chain(&e), action, "could not audit the hub's keys");
        }
    }
}

/// Whether `announced` names a pin outside `trusted` (an announcement of what the agent trusts
/// already asks nothing of it).
fn texts_differ(trusted: &[String], announced: &[String]) -> bool {
    announced.iter().any(|pin| !trusted.contains(pin))
}
