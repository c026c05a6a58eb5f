//! Runs the dead-man's switch every `sweep_interval`, the backup sweep (overdue backups and
//! restore tests) at most every [`BACKUP_SWEEP_EVERY`], or less often when a pass takes long
//! ([`backup_sweep_gap`]), and a retention prune pass at start and then every [`PRUNE_EVERY`]
//! (a step of it each tick until it is done), until the hub shuts down.

use std::time::Duration;

use crate::Hub;
use crate::store::PruneCursor;

/// Least time between two backup sweeps: backups are due hours apart, and the sweep reads
/// every host's report.
pub const BACKUP_SWEEP_EVERY: Duration = Duration::from_secs(60);

/// Most share of the time the backup sweep may take: a pass that took `d` is followed by the
/// next no sooner than `d × BACKUP_SWEEP_SPREAD` (at 100,000 hosts a pass judges every
/// report for tens of seconds, so it then runs every several minutes instead of every one).
pub const BACKUP_SWEEP_SPREAD: u32 = 20;

/// Time between two retention prunes: bounds are days long, so an hour late costs little,
/// and a pass over 100,000 hosts' per-host caps reads their newest rows.
pub const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Least time from the start of one backup sweep to the start of the next, given how long it
/// took.
pub fn backup_sweep_gap(took: Duration) -> Duration {
    BACKUP_SWEEP_EVERY.max(took.saturating_mul(BACKUP_SWEEP_SPREAD))
}

/// The sweeper loop.
pub async fn run(hub: Hub, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let shutdown = hub.shutdown_token().clone();
    // When the last backup sweep started, and the least gap to the next.
    let mut last_backup_sweep: Option<(tokio::time::Instant, Duration)> = None;
    // When the last prune pass started, and where the one under way goes on.
    let mut last_prune: Option<tokio::time::Instant> = None;
    let mut pruning: Option<PruneCursor> = None;
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
        if last_backup_sweep.is_none_or(|(at, gap)| at.elapsed() >= gap) {
            let started = tokio::time::Instant::now();
            if let Err(err) = hub.sweep_backups_once().await {
                tracing::error!(
                    error = &err as &dyn std::error::Error,
                    "backup sweep failed"
                );
            }
            last_backup_sweep = Some((started, backup_sweep_gap(started.elapsed())));
        }
        // A pass goes in steps of at most PRUNE_STEP, one a tick, so the dead-man's switch
        // keeps its pace while a long pass runs.
        let from = match pruning.take() {
            Some(cursor) => Some(cursor),
            None if last_prune.is_none_or(|at| at.elapsed() >= PRUNE_EVERY) => {
                last_prune = Some(tokio::time::Instant::now());
                Some(PruneCursor::default())
            }
            None => None,
        };
        if let Some(from) = from {
            match hub.prune_step(from).await {
                Ok(step) => pruning = step.next,
                Err(err) => tracing::error!(
                    error = &err as &dyn std::error::Error,
                    "retention prune failed"
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{BACKUP_SWEEP_EVERY, backup_sweep_gap};
    use std::time::Duration;

    #[test]
    fn a_long_backup_sweep_spreads_the_next_one() {
        assert_eq!(backup_sweep_gap(Duration::ZERO), BACKUP_SWEEP_EVERY);
        assert_eq!(backup_sweep_gap(Duration::from_secs(2)), BACKUP_SWEEP_EVERY);
        // 100,000 hosts: a 30 s pass, then 10 minutes until the next.
        assert_eq!(
            backup_sweep_gap(Duration::from_secs(30)),
            Duration::from_secs(600)
        );
    }
}
