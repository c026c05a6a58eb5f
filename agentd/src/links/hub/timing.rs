//! The timings the hub sets (`bosun.poll-response/v1` `config`), bounded: a config
//! outside the documented ranges of [`bosun_proto::poll::AgentConfig`] is refused whole
//! (the previous timings stay; audited once per distinct config as `hub.config_refused`),
//! and whatever is used is clamped into those ranges, so no hub can make the agent
//! sleep longer than [`MAX_POLL_INTERVAL_SECONDS`] between polls or hold a poll longer
//! than [`MAX_WAIT_SECONDS`].

use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::poll::{AgentConfig, MAX_POLL_INTERVAL_SECONDS, MAX_WAIT_SECONDS};
use serde_json::json;

use crate::ops::journal::{AuditEvent, JournalHandle};

/// The timings in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubTimings {
    /// The `wait` asked of the hub.
    pub long_poll: Duration,
    /// The pause between polls when the hub holds nothing.
    pub poll_interval: Duration,
    refused: Option<AgentConfig>,
}

impl HubTimings {
    /// Timings before the hub said anything: `long_poll` from the local config.
    pub fn new(long_poll: Duration) -> Self {
        Self {
            long_poll: long_poll.min(Duration::from_secs(u64::from(MAX_WAIT_SECONDS))),
            poll_interval: Duration::from_secs(30),
            refused: None,
        }
    }

    /// Takes the hub's config.
    pub async fn apply(&mut self, config: &AgentConfig, journal: &JournalHandle, request_id: &str) {
        if let Err(e) = config.validate() {
            if self.refused.as_ref() != Some(config) {
                self.refused = Some(config.clone());
                tracing::warn!(%request_id, error = %e, "the hub sent timings outside their bounds; keeping the previous ones");
                let mut event = AuditEvent::new("hub.config_refused");
                event.request_id = Some(request_id.to_owned());
                event.detail = json!({
                    "reason": e.to_string(),
                    "poll_interval_seconds": config.poll_interval_seconds,
                    "long_poll_seconds": config.long_poll_seconds,
                });
                if let Err(e) = journal.append_audit(event).await {
                    tracing::warn!(error = %error_chain(&e), "could not audit the refused config");
                }
            }
            return;
        }
        self.refused = None;
        let config = config.clamped();
        self.long_poll = Duration::from_secs(u64::from(config.long_poll_seconds));
        self.poll_interval = Duration::from_secs(u64::from(config.poll_interval_seconds));
    }

    /// The pause after an answered, unheld poll: never past the bound.
    pub fn pause(&self) -> Duration {
        self.poll_interval
            .min(Duration::from_secs(u64::from(MAX_POLL_INTERVAL_SECONDS)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clamped_config_stays_in_its_ranges() {
        let wild = AgentConfig {
            poll_interval_seconds: 86_400,
            long_poll_seconds: 9_999,
            update_window: None,
        };
        assert!(wild.validate().is_err());
        let tame = wild.clamped();
        assert_eq!(tame.poll_interval_seconds, MAX_POLL_INTERVAL_SECONDS);
        assert_eq!(tame.long_poll_seconds, MAX_WAIT_SECONDS);
        assert!(tame.validate().is_ok());
        let zero = AgentConfig {
            poll_interval_seconds: 0,
            ..tame
        };
        assert_eq!(zero.clamped().poll_interval_seconds, 1);
    }
}
