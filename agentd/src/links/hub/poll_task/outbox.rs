//! The hub loop's job-result outbox: a result stays queued in the journal until the hub
//! acknowledged it, and results a crash left undelivered go out before the first poll.

use bosun_errchain::error_chain;
use bosun_proto::job::JobResult;
use bosun_pve::Pve;
use uuid::Uuid;

use super::{PollTask, Round, push_result};
use crate::links::hub_client::client::HubClientError;

impl<P: Pve + bosun_pve::PveQemu + 'static> PollTask<P> {
    /// Sends the queued results; keeps those the hub did not take for the next round.
    pub(super) async fn flush_results(&self, round: &mut Round<P>) {
        let mut keep = Vec::new();
        for result in std::mem::take(&mut round.pending_results) {
            match self
                .client
                .job_result(
                    self.identity.host_id,
                    &self.identity.host_key.presented(),
                    &result,
                )
                .await
            {
                Ok(()) => {
                    tracing::info!(job_id = %result.job_id, outcome = ?result.outcome, "job result reported");
                    self.delivered(result.job_id).await;
                }
                Err(HubClientError::Status { status, body, .. })
                    if (400..500).contains(&status)
                        && status != 401
                        && status != 403
                        && status != 429 =>
                {
                    tracing::warn!(job_id = %result.job_id, status, body = %body, "hub refused a job result; dropped");
                    self.delivered(result.job_id).await;
                }
                Err(e) => {
                    tracing::info!(job_id = %result.job_id, error = %error_chain(&e), "job result not delivered yet");
                    keep.push(result);
                }
            }
        }
        round.pending_results = keep;
    }

    /// Results a crash left undelivered: they go out before the first poll.
    pub(super) async fn load_outbox(&self, round: &mut Round<P>) {
        match self.journal.undelivered_job_results().await {
            Ok(pending) => {
                for entry in pending {
                    match serde_json::from_str::<JobResult>(&entry.body) {
                        Ok(result) => {
                            tracing::info!(job_id = %entry.job_id, "job result from before the restart queued again");
                            push_result(&mut round.pending_results, result);
                        }
                        Err(e) => {
                            tracing::warn!(job_id = %entry.job_id, error = %e, "queued job result unreadable; dropped");
                            if let Ok(id) = Uuid::parse_str(&entry.job_id) {
                                self.delivered(id).await;
                            }
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "job-result outbox unreadable");
            }
        }
    }

    async fn delivered(&self, job_id: Uuid) {
        if let Err(e) = self
            .journal
            .mark_job_result_delivered(job_id.to_string())
            .await
        {
            tracing::warn!(%job_id, error = %error_chain(&e), "could not mark a job result delivered; it may be sent again");
        }
    }
}
