//! `bosunctl desired set --wait`: follows each guest of a new generation (pending → applied, or
//! failed with the agent's reason) until the host reports the generation applied, a guest
//! fails for good (broken, lost), or the timeout passes. Progress lines go to stderr, so
//! stdout keeps the one document `--output json` promises.

use std::collections::BTreeMap;
use std::time::Duration;

use bosun_proto::desired_status::{DesiredStatus, GuestProgress, ProgressState};
use tokio::time::Instant;
use uuid::Uuid;

use crate::client::HubClient;
use crate::error::CtlError;

/// How often the hub is asked.
const POLL_EVERY: Duration = Duration::from_millis(500);

/// Waits until `host` applied `generation` (or a newer one); gives the last status seen.
pub async fn wait(
    client: &HubClient,
    host: Uuid,
    generation: u64,
    timeout: Duration,
    json: bool,
) -> Result<DesiredStatus, CtlError> {
    let deadline = Instant::now() + timeout;
    let mut shown: BTreeMap<Uuid, (ProgressState, Option<String>)> = BTreeMap::new();
    let mut held_shown = false;
    loop {
        let status = crate::desired::status(client, host).await?;
        for guest in &status.guests {
            let now = (guest.state, guest.reason.clone());
            if shown.get(&guest.guest_id) != Some(&now) {
                crate::errln!("  {}", line(guest));
                shown.insert(guest.guest_id, now);
            }
        }
        if !held_shown && status.known_generation >= generation {
            crate::errln!("  the host received generation {generation}");
            held_shown = true;
        }
        // A refused field is never applied, whatever generation the host converged to.
        let refused: Vec<&GuestProgress> = status
            .guests
            .iter()
            .filter(|g| g.state == ProgressState::Refused)
            .collect();
        if !refused.is_empty() {
            return Err(CtlError::NotApplied {
                host,
                generation,
                reason: format!(
                    "{} cannot be applied: {}",
                    plural(refused.len()),
                    list(&refused)
                ),
            });
        }
        if status.applied_generation >= generation {
            let message = format!(
                "host {host} applied generation {generation} ({} guests)",
                status.guests.len()
            );
            if json {
                crate::errln!("{message}");
            } else {
                crate::outln!("{message}")?;
            }
            return Ok(status);
        }
        let final_failures: Vec<&GuestProgress> = status
            .guests
            .iter()
            .filter(|g| g.state == ProgressState::Failed && g.terminal)
            .collect();
        if !final_failures.is_empty() {
            return Err(CtlError::NotApplied {
                host,
                generation,
                reason: format!(
                    "{} failed for good: {}",
                    plural(final_failures.len()),
                    list(&final_failures)
                ),
            });
        }
        if Instant::now() >= deadline {
            let open: Vec<&GuestProgress> = status
                .guests
                .iter()
                .filter(|g| g.state != ProgressState::Applied)
                .collect();
            let received = if status.known_generation >= generation {
                "the host holds it but has not reported it applied"
            } else {
                "the host has not fetched it (is its agent running and polling?)"
            };
            let mut guests = if open.is_empty() {
                String::new()
            } else {
                format!("; not applied: {}", list(&open))
            };
            if !status.refused.is_empty() {
                let refused: Vec<String> = status
                    .refused
                    .iter()
                    .map(bosun_proto::refused::Refused::line)
                    .collect();
                guests.push_str(&format!("; the host refuses {}", refused.join("; ")));
            }
            return Err(CtlError::NotApplied {
                host,
                generation,
                reason: format!("timed out after {}s: {received}{guests}", timeout.as_secs()),
            });
        }
        tokio::time::sleep(POLL_EVERY.min(deadline.saturating_duration_since(Instant::now())))
            .await;
    }
}

fn line(guest: &GuestProgress) -> String {
    let state = match guest.state {
        ProgressState::Pending => "pending",
        ProgressState::Applied => "applied",
        ProgressState::Failed if guest.terminal => "failed for good",
        ProgressState::Failed => "failed (the agent retries)",
        ProgressState::Refused => "refused",
        ProgressState::Unknown => "unknown",
    };
    match &guest.reason {
        Some(reason) => format!("{} ({}): {state}: {reason}", guest.hostname, guest.guest_id),
        None => format!("{} ({}): {state}", guest.hostname, guest.guest_id),
    }
}

fn list(guests: &[&GuestProgress]) -> String {
    guests
        .iter()
        .map(|g| {
            let state = format!("{:?}", g.state).to_lowercase();
            match &g.reason {
                Some(reason) => format!("{} {state} ({reason})", g.hostname),
                None => format!("{} {state}", g.hostname),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn plural(n: usize) -> String {
    if n == 1 {
        "1 guest".to_owned()
    } else {
        format!("{n} guests")
    }
}
