//! Alert delivery: the log, `/metrics`, and an optional webhook with retries and backoff.

use std::sync::Arc;
use std::time::Duration;

use bosun_proto::admin::{Alert, AlertKind};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::store::WatchChange;

/// Webhook settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    /// Where alerts are POSTed as JSON (`bosun.alert/v1`).
    pub url: String,
    /// Delivery attempts per alert.
    pub attempts: u32,
    /// Wait before the second attempt; doubles each time.
    pub initial_backoff: Duration,
    /// Longest wait between attempts.
    pub max_backoff: Duration,
    /// Timeout of one attempt.
    pub timeout: Duration,
}

impl WebhookConfig {
    /// Defaults for `url`: 5 attempts, 1 s doubling to 60 s, 10 s per attempt.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            attempts: 5,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            timeout: Duration::from_secs(10),
        }
    }
}

/// The webhook body.
#[derive(Debug, Serialize)]
struct WebhookBody<'a> {
    schema: &'static str,
    #[serde(flatten)]
    alert: &'a Alert,
}

/// Where raised alerts go.
#[derive(Debug, Clone)]
pub struct AlertSink {
    metrics: Arc<Metrics>,
    webhook: Option<mpsc::Sender<Alert>>,
}

impl AlertSink {
    /// A sink that logs and counts, and queues for `webhook` if given.
    pub fn new(metrics: Arc<Metrics>, webhook: Option<mpsc::Sender<Alert>>) -> Self {
        Self { metrics, webhook }
    }

    /// Delivers one alert (already persisted by the store). One the store found silenced
    /// (`silenced_by`) is logged and counted like any other but not sent to the webhook.
    pub fn raise(&self, alert: &Alert) {
        let host_id = alert.host_id.map(|h| h.to_string());
        macro_rules! log {
            ($level:ident) => {
                tracing::$level!(
                    alert_id = alert.id,
                    kind = alert.kind.as_str(),
                    host_id,
                    hostname = alert.hostname,
                    silenced_by = alert.silenced_by,
                    message = %alert.message,
                    "alert raised"
                )
            };
        }
        match log_level(alert.kind) {
            AlertLog::Error => log!(error),
            AlertLog::Warn => log!(warn),
            AlertLog::Info => log!(info),
        }
        self.metrics.alert_raised(alert.kind);
        if alert.silenced_by.is_some() {
            return;
        }
        if let Some(queue) = &self.webhook
            && let Err(err) = queue.try_send(alert.clone())
        {
            tracing::warn!(alert_id = alert.id, error = %err, "webhook queue full or closed, alert not forwarded");
            self.metrics.webhook_failed();
        }
    }

    /// Delivers a guest, storage, backup, restore-test, escrow or host-health alert opened or resolved (already persisted
    /// by the store): an opening or a recovery like any alert; a condition that stopped applying
    /// for another reason (only an event) to the log and `/metrics`.
    pub fn watch(&self, change: &WatchChange) {
        if let Some(alert) = &change.alert {
            self.raise(alert);
            return;
        }
        tracing::info!(
            kind = change.event,
            host_id = %change.host_id,
            hostname = change.hostname,
            subject = change.subject,
            message = %change.message,
            "alert cleared"
        );
        self.metrics.alert_named(change.event);
    }
}

/// The level an alert is logged at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertLog {
    /// Bosun's own part failed (its agent update, the controller it manages, the hub's own
    /// network): a fault of the system itself.
    Error,
    /// A condition on a host an operator must look at (a lost guest, a refused target or job,
    /// a failed backup): the system works and says so.
    Warn,
    /// Good news: a recovery or a door closed.
    Info,
}

/// The level an alert of `kind` is logged at: warn for conditions, error only for Bosun's own
/// faults, info for recoveries (one closed table).
pub fn log_level(kind: AlertKind) -> AlertLog {
    match kind {
        AlertKind::HubConnectivitySuspected
        | AlertKind::ControllerRolledBack
        | AlertKind::ControllerBroken
        | AlertKind::ControllerMismatch
        | AlertKind::AgentUpdateFailed => AlertLog::Error,
        AlertKind::HostOverdue
        | AlertKind::GuestLost
        | AlertKind::GuestBroken
        | AlertKind::GuestOrphaned
        | AlertKind::GuestMigrated
        | AlertKind::DestructiveOperation
        | AlertKind::GoldenRefused
        | AlertKind::GoldenVerifyFailed
        | AlertKind::StorageRefused
        | AlertKind::PlacementRefused
        | AlertKind::JobRefused
        | AlertKind::ArchiveRejected
        | AlertKind::StorageLost
        | AlertKind::BackupFailed
        | AlertKind::BackupOverdue
        | AlertKind::RestoreTestFailed
        | AlertKind::RestoreTestOverdue
        | AlertKind::VerifyFailed
        | AlertKind::VerifyOverdue
        | AlertKind::BulkUnprotected
        | AlertKind::BulkBackupFailed
        | AlertKind::EscrowMissing
        | AlertKind::HostCpuHigh
        | AlertKind::HostMemoryHigh
        | AlertKind::HostDiskHigh
        | AlertKind::SmartFailing
        | AlertKind::TunnelDown
        | AlertKind::BreakGlassOpen
        | AlertKind::GuestCpuHigh
        | AlertKind::GuestMemoryHigh
        | AlertKind::GuestDiskHigh
        | AlertKind::DiskFailing
        | AlertKind::DiskWorn
        | AlertKind::PoolFillHigh
        | AlertKind::TemperatureHigh => AlertLog::Warn,
        AlertKind::HostRecovered
        | AlertKind::HubConnectivityRestored
        | AlertKind::StorageRecovered
        | AlertKind::BackupRecovered
        | AlertKind::RestoreTestRecovered
        | AlertKind::GuestRestored
        | AlertKind::GuestRecovered
        | AlertKind::ControllerMatched
        | AlertKind::EscrowVerified
        | AlertKind::HostUsageRecovered
        | AlertKind::SmartRecovered
        | AlertKind::TunnelRecovered
        | AlertKind::BreakGlassClosed
        | AlertKind::GuestUsageRecovered
        | AlertKind::DiskRecovered
        | AlertKind::PoolFillRecovered
        | AlertKind::TemperatureRecovered
        | AlertKind::VerifyRecovered
        | AlertKind::BulkProtected
        | AlertKind::BulkBackupRecovered => AlertLog::Info,
    }
}

/// Posts queued alerts to the webhook until `shutdown`.
pub async fn webhook_task(
    config: WebhookConfig,
    client: reqwest::Client,
    mut queue: mpsc::Receiver<Alert>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    loop {
        let alert = tokio::select! {
            () = shutdown.cancelled() => return,
            alert = queue.recv() => match alert {
                Some(alert) => alert,
                None => return,
            },
        };
        if !deliver(&config, &client, &alert, &shutdown).await {
            metrics.webhook_failed();
        }
    }
}

async fn deliver(
    config: &WebhookConfig,
    client: &reqwest::Client,
    alert: &Alert,
    shutdown: &CancellationToken,
) -> bool {
    let body = WebhookBody {
        schema: "bosun.alert/v1",
        alert,
    };
    let mut backoff = config.initial_backoff;
    for attempt in 1..=config.attempts.max(1) {
        let outcome = client
            .post(&config.url)
            .timeout(config.timeout)
            .json(&body)
            .send()
            .await;
        match outcome {
            Ok(response) if response.status().is_success() => {
                tracing::debug!(alert_id = alert.id, attempt, "webhook delivered");
                return true;
            }
            Ok(response) => tracing::warn!(
                alert_id = alert.id,
                attempt,
                status = response.status().as_u16(),
                "webhook refused the alert"
            ),
            Err(err) => {
                tracing::warn!(alert_id = alert.id, attempt, error = %err, "webhook not reachable")
            }
        }
        if attempt < config.attempts {
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(config.max_backoff);
        }
    }
    tracing::error!(
        alert_id = alert.id,
        attempts = config.attempts,
        "webhook delivery gave up"
    );
    false
}
