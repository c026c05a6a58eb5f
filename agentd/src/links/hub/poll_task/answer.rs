//! What a round of the hub loop does with the hub's answer, or with its failure.

use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_pve::Pve;
use rand::Rng as _;
use secrecy::SecretString;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{HubLink, Next, PollTask, Round, Sent, jitter};
use crate::links::hub_client::client::{HubClientError, RawPollResponse};
use crate::links::hub_client::host_key::{KeyStep, Pace};
use crate::links::hub_client::pins::HubPins;
use crate::ops::journal::AuditEvent;

impl<P: Pve + bosun_pve::PveQemu + 'static> PollTask<P> {
    /// The hub answered: the link is up; desired state, jobs, timings, announced pins and the
    /// host key's rotation are taken; the next poll goes at once when something asks for it.
    pub(super) async fn on_answer(
        &mut self,
        round: &mut Round<P>,
        sent: &Sent,
        response: RawPollResponse,
        cancel: &CancellationToken,
    ) -> Next {
        let request_id = &sent.request_id;
        let (reconnected, approved) = {
            let s = self.status.borrow();
            (s.failures > 0, s.link == HubLink::PendingApproval)
        };
        let full = sent.request.report.is_some();
        self.status.send_modify(|s| {
            s.link = HubLink::Connected;
            s.connected = true;
            s.polls += 1;
            s.failures = 0;
            if full {
                s.full_reports += 1;
            } else {
                s.delta_reports += 1;
            }
        });
        if approved {
            tracing::info!(%request_id, host_id = %self.identity.host_id, "the hub approved this host; polling normally");
            round.urgent = true;
        } else if reconnected {
            tracing::info!(%request_id, "hub reachable again");
            // A full report: every audit entry past what the hub acknowledged.
            round.urgent = true;
        }
        round.backoff = self.settings.backoff_initial;
        round.too_large_audited = false;
        round.tried_other_key = false;
        round.inbox.acks_delivered();
        if response.schema == bosun_proto::poll::RESPONSE_SCHEMA {
            self.take_answer(round, sent, response).await;
        } else {
            tracing::warn!(%request_id, schema = %response.schema, "hub answered with an unknown schema; ignored");
            round.reporter.failed();
            round.op_tail.unanswered();
        }
        let held = sent.wait > Duration::ZERO;
        if !held && !round.urgent && round.timings.long_poll.is_zero() {
            tokio::select! {
                () = cancel.cancelled() => return Next::Stop,
                () = self.progress.waiting(tokio::time::sleep(round.timings.pause())) => {}
            }
        }
        Next::Poll
    }

    /// Acts on an answer of the known schema.
    async fn take_answer(&mut self, round: &mut Round<P>, sent: &Sent, response: RawPollResponse) {
        let request_id = &sent.request_id;
        round.op_tail.answered();
        if round.reporter.answered(
            sent.sent_at,
            &sent.snapshot,
            response.report_seq,
            response.full_report,
            response.audit_acked_seq,
        ) {
            tracing::info!(%request_id, "hub asked for a full report");
            round.urgent = true;
        }
        if let Some(seq) = response.audit_acked_seq {
            // Audit retention never prunes past what the hub acknowledged.
            self.journal.record_audit_ack(seq).await;
        }
        round
            .timings
            .apply(&response.config, &self.journal, request_id)
            .await;
        if let Some(update) = self.runner.update_context() {
            if response.config.validate().is_ok() {
                update.set_window(response.config.update_window.clone());
            }
            // The health gate counts this poll for the binary on trial.
            let at_ms = jiff::Timestamp::now().as_millisecond();
            update.poll_succeeded(&self.journal, at_ms).await;
        }
        if let Some(body) = response.desired {
            round
                .intake
                .take(
                    response.generation,
                    body,
                    response.correlation_id,
                    request_id,
                )
                .await;
        }
        round.inbox.take(response.jobs, request_id).await;
        if let Some(pins) = &self.hub_pins {
            pins.answered(&sent.request.hub_pins);
        }
        self.take_pins(&response.hub_pins, response.hub_pins_signed, request_id)
            .await;
        let named = response.next_host_key_sha256.as_deref();
        let pace = Pace::new(
            self.clock.now(),
            self.settings.host_key_rotation_min,
            round.timings.poll_interval,
        );
        if self
            .host_key_step(
                &sent.presented,
                (response.rotate_host_key, named),
                pace,
                request_id,
            )
            .await
        {
            // Carry the key's rotation on now, not a poll interval later.
            round.urgent = true;
        }
    }

    /// The poll failed: held for approval, refused, or unreachable. The loop backs off with
    /// jitter (or waits for the approval) and reconciles from the cached desired state
    /// meanwhile.
    pub(super) async fn on_failure(
        &mut self,
        round: &mut Round<P>,
        sent: &Sent,
        e: HubClientError,
        cancel: &CancellationToken,
    ) -> Next {
        let request_id = &sent.request_id;
        round.reporter.failed();
        round.op_tail.unanswered();
        if e.is_pending_approval() {
            if !self.awaiting_approval(request_id, cancel).await {
                return Next::Stop;
            }
            round.urgent = true;
            return Next::Poll;
        }
        if e.is_unauthorized() && self.other_key(&sent.presented, round, request_id) {
            // The key presented was refused while the host's key rotates: the hub holds the
            // other one. Ask again at once with it.
            round.urgent = true;
            return Next::Poll;
        }
        let failures = self.status.borrow().failures + 1;
        let link = if e.is_unauthorized() {
            HubLink::Refused
        } else {
            HubLink::Unreachable
        };
        self.status.send_modify(|s| {
            s.link = link;
            s.connected = false;
            s.failures = failures;
        });
        let pause = jitter(round.backoff);
        let chain = error_chain(&e);
        if e.is_unauthorized() {
            tracing::error!(%request_id, error = %chain, "the hub refused this host's key; an operator must act");
        } else if chain.contains(bosun_pin::UNTRUSTED_KEY) {
            // Not a network fault: the hub presents a key this agent was never told of (its
            // key was rotated while this host was away, or another server answers at the
            // hub's address). Nothing trusts it silently.
            tracing::error!(%request_id, failures, pins = ?self.hub_pins.as_ref().map(HubPins::trusted), error = %chain, "the hub presents a key this agent does not trust; if the hub's key was rotated while this host was offline, enroll this host again");
        } else {
            tracing::warn!(%request_id, failures, retry_in_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX), error = %chain, "hub poll failed; reconciling from the cached desired state");
        }
        if let HubClientError::TooLarge { limit, .. } = &e
            && !round.too_large_audited
        {
            round.too_large_audited = true;
            let mut event = AuditEvent::new("hub.answer_too_large");
            event.request_id = Some(request_id.clone());
            event.detail = json!({ "limit_bytes": limit });
            if let Err(e) = self.journal.append_audit(event).await {
                tracing::warn!(error = %error_chain(&e), "could not audit the over-large answer");
            }
        }
        round.backoff = (round.backoff * 2).min(self.settings.backoff_max);
        tokio::select! {
            () = cancel.cancelled() => return Next::Stop,
            () = self.progress.waiting(tokio::time::sleep(pause)) => {}
        }
        round.urgent = true;
        Next::Poll
    }

    /// Takes what an answer says of the host's key into [`HostKey`](crate::links::hub_client::host_key::HostKey)
    /// (a hash that is not one is ignored: a hub cannot make the agent write garbage). Gives
    /// whether the rotation carries on with the next poll.
    async fn host_key_step(
        &self,
        presented: &SecretString,
        (rotate, named): (bool, Option<&str>),
        pace: Pace,
        request_id: &str,
    ) -> bool {
        let named = named.filter(|hash| bosun_proto::poll::is_key_hash(hash));
        let step = match self
            .identity
            .host_key
            .answered(presented, rotate, named, pace)
        {
            Ok(step) => step,
            Err(e) => {
                tracing::error!(%request_id, error = %error_chain(&e), "could not keep the host's next key; the hub keeps accepting the current one");
                return false;
            }
        };
        let Some(step) = step else {
            return false;
        };
        let host_id = self.identity.host_id;
        match step {
            KeyStep::Made => {
                tracing::info!(%request_id, %host_id, "the hub asked for a new host key; made and kept, its hash goes to the hub");
            }
            KeyStep::Confirmed => {
                tracing::info!(%request_id, %host_id, "the hub holds the new host key; presenting it from now on");
            }
            KeyStep::Deferred { until } => {
                tracing::info!(%request_id, %host_id, %until, "the hub asked for a new host key sooner than the pace allows; it is made then");
                let mut event = AuditEvent::new("hub.host_key_rotation_deferred");
                event.request_id = Some(request_id.to_owned());
                event.detail = json!({ "until": until.to_string() });
                if let Err(e) = self.journal.append_audit(event).await {
                    tracing::warn!(error = %error_chain(&e), "could not audit the deferred host key rotation");
                }
            }
            KeyStep::Rotated | KeyStep::FellBack => {
                let action = if step == KeyStep::Rotated {
                    tracing::info!(%request_id, %host_id, "host key rotated; the old key no longer works");
                    "hub.host_key_rotated"
                } else {
                    tracing::warn!(%request_id, %host_id, "the hub accepts only the key this host had before its last rotation (restored from an older backup?); rotating again now");
                    "hub.host_key_fell_back"
                };
                let mut event = AuditEvent::new(action);
                event.request_id = Some(request_id.to_owned());
                if let Err(e) = self.journal.append_audit(event).await {
                    tracing::warn!(error = %error_chain(&e), "could not audit the host key rotation");
                }
            }
        }
        step.carries_on()
    }

    /// The hub refused `presented`: whether the host holds another key to try at once (a
    /// rotation under way), once per run of refusals; past that the loop backs off as for any
    /// refusal, still alternating the two keys.
    fn other_key(&self, presented: &SecretString, round: &mut Round<P>, request_id: &str) -> bool {
        let other = match self.identity.host_key.refused(presented) {
            Ok(other) => other,
            Err(e) => {
                tracing::error!(%request_id, error = %error_chain(&e), "could not keep which host key to present");
                false
            }
        };
        if other && !round.tried_other_key {
            round.tried_other_key = true;
            tracing::warn!(%request_id, "the hub refused the host key presented while it rotates; trying the other one");
            return true;
        }
        false
    }

    /// The hub refused the poll: the host waits for an operator's approval. Says so once,
    /// then waits `pending_interval` (3/4 to 1 × it) before the next poll. Gives `false` when
    /// the agent is stopping meanwhile.
    async fn awaiting_approval(&self, request_id: &str, cancel: &CancellationToken) -> bool {
        let newly = self.status.borrow().link != HubLink::PendingApproval;
        self.status.send_modify(|s| {
            s.link = HubLink::PendingApproval;
            s.connected = false;
            s.failures = s.failures.saturating_add(1);
        });
        let interval = self.settings.pending_interval;
        let host_id = self.identity.host_id;
        if newly {
            tracing::warn!(%request_id, %host_id, every_s = interval.as_secs(), "the hub holds this host until an operator approves it (bosunctl hosts approve HOST_ID); asking again slowly until then");
        } else {
            tracing::debug!(%request_id, %host_id, "still waiting for the hub's approval");
        }
        let ms = u64::try_from(interval.as_millis())
            .unwrap_or(u64::MAX)
            .max(4);
        let pause = Duration::from_millis(rand::rng().random_range(ms / 4 * 3..=ms));
        tokio::select! {
            () = cancel.cancelled() => false,
            () = self.progress.waiting(tokio::time::sleep(pause)) => true,
        }
    }
}
