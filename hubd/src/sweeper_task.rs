//! Runs the dead-man's switch every `sweep_interval`, and the backup sweep (overdue backups
//! and restore tests) at most every [`BACKUP_SWEEP_EVERY`], until the hub shuts down.

use std::time::Duration;

use crate::Hub;

/// Least time between two backup sweeps: backups are due hours apart, and the sweep reads
/// every host's report.
pub const BACKUP_SWEEP_EVERY: Duration = Duration::from_secs(60);

/// The sweeper loop.
pub async fn run(hub: Hub, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let shutdown = hub.shutdown_token().clone();
    let mut last_backup_sweep: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        if let Err(err) = hub.sweep_once().await {
            tracing::error!(
                error = &err as &dyn std::error::Error,
                "dead-man's switch sweep failed"
            );
        }
        if last_backup_sweep.is_some_and(|at| at.elapsed() < BACKUP_SWEEP_EVERY) {
            continue;
        }
        last_backup_sweep = Some(tokio::time::Instant::now());
        if let Err(err) = hub.sweep_backups_once().await {
            tracing::error!(
                error = &err as &dyn std::error::Error,
                "backup sweep failed"
            );
        }
    }
}
