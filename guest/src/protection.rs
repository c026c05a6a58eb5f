//! The guest's own protection, as the host agent tells it (`GET /v1/protection`): what
//! `bosun-guest status` prints and what `bosun-guest run` watches.
//!
//! The agent judges from its own journal against the cadence the operator signed; the hub is
//! not asked, so a hub that hides a failed or withheld verification from the operator cannot
//! hide it from the guest. Overdue (more than twice an item's interval without a success) is
//! the guest's health signal:
//!
//! - `bosun-guest status` prints every item and exits [`EXIT_OVERDUE`] (3) while anything is
//!   overdue, 0 otherwise: a health check for whatever watches the guest.
//! - `bosun-guest run` asks every `--protection-interval-s` and logs a warning naming each
//!   overdue item while any is (one line when it clears); with `--protection-file` it also
//!   keeps the last answer there (JSON, written whole).
//!
//! Overdue protection is not a controller failure: it is never reported as unhealthy
//! controller health, which would roll the controller back for a fault of the backups.
//!
//! Every text the agent sends (a target's name, why a run failed) is made inert
//! ([`bosun_proto::inert::escape`]) before it is printed or logged.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use bosun_proto::inert::escape;
use bosun_proto::protection::{
    GuestProtection, PromisedBy, ProtectionItem, ProtectionKind, ProtectionResult,
};
use jiff::{SignedDuration, Timestamp};
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::client::{ClientError, LocalApiClient};

/// The exit status of `bosun-guest status` while something is overdue (2 is a usage error,
/// as for every command).
pub const EXIT_OVERDUE: u8 = 3;

/// A duration as a person reads it: its two largest units (`3d 4h`, `2h 5m`, `42s`).
pub fn human(duration: SignedDuration) -> String {
    let total = duration.as_secs().unsigned_abs();
    let units = [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)];
    let mut parts = Vec::new();
    let mut rest = total;
    for (name, size) in units {
        let n = rest / size;
        if n > 0 || (parts.is_empty() && size == 1) {
            parts.push(format!("{n}{name}"));
            rest -= n * size;
        }
        if parts.len() == 2 || (!parts.is_empty() && rest == 0) {
            break;
        }
    }
    parts.join(" ")
}

/// `at` relative to `now`: `5m ago`, `in 2h`.
fn relative(at: Timestamp, now: Timestamp) -> String {
    let gap = now.duration_since(at);
    if gap.is_negative() {
        format!("in {}", human(gap))
    } else {
        format!("{} ago", human(gap))
    }
}

fn kind(item: &ProtectionItem) -> String {
    match (item.kind, item.tier) {
        (ProtectionKind::Backup, Some(t)) => format!("backup, tier {t}"),
        (ProtectionKind::Backup, None) => "backup".to_owned(),
        (ProtectionKind::Verification, Some(t)) => format!("verification, tier {t}"),
        (ProtectionKind::Verification, None) => "verification".to_owned(),
        (ProtectionKind::RestoreTest, _) => "restore test".to_owned(),
    }
}

fn result(result: ProtectionResult) -> &'static str {
    match result {
        ProtectionResult::Ok => "ok",
        ProtectionResult::Failed => "failed",
        ProtectionResult::Error => "could not run",
        ProtectionResult::NotChecked => "booted, data not checked",
        ProtectionResult::Unknown => "an outcome this client does not know",
    }
}

/// One item as one line (its text escaped), judged at the agent's `now`.
pub fn item_line(item: &ProtectionItem, now: Timestamp) -> String {
    let every = SignedDuration::from_secs(i64::try_from(item.interval_s).unwrap_or(i64::MAX));
    let by = match item.promised_by {
        PromisedBy::SignedPlan => "signed plan",
        PromisedBy::DesiredState => "hub's desired state",
    };
    let mut line = format!(
        "{} on {}: every {} ({by})",
        kind(item),
        escape(&item.target),
        human(every)
    );
    let _ = match item.last_ok_at {
        Some(at) => write!(line, "; last ok {}", relative(at, now)),
        None => write!(line, "; never ok"),
    };
    if let (Some(at), Some(r)) = (item.last_at, item.last_result)
        && (r != ProtectionResult::Ok || Some(at) != item.last_ok_at)
    {
        let _ = write!(line, "; last run {} {}", result(r), relative(at, now));
    }
    if let Some(detail) = &item.detail {
        let _ = write!(line, ": {}", escape(detail));
    }
    let _ = match (item.overdue, item.overdue_at) {
        (true, Some(at)) => write!(line, "; OVERDUE since {}", relative(at, now)),
        (true, None) => write!(line, "; OVERDUE"),
        (false, Some(at)) => write!(line, "; overdue {}", relative(at, now)),
        (false, None) => Ok(()),
    };
    line
}

/// What `bosun-guest status` prints.
pub fn render(p: &GuestProtection) -> String {
    let mut out = format!("guest {} (vmid {}) at {}, ", p.guest_id, p.vmid, p.at);
    let _ = match p.plan_serial {
        Some(serial) => writeln!(out, "judged against the signed data plan (serial {serial})"),
        None => writeln!(
            out,
            "judged against the hub's desired state: the host has no signed data plan"
        ),
    };
    let overdue = p.overdue_items().count();
    let _ = if overdue > 0 {
        writeln!(out, "OVERDUE: {overdue} of {} items", p.items.len())
    } else if p.items.is_empty() {
        writeln!(
            out,
            "nothing is promised for this guest: no backup tier, verification or restore test"
        )
    } else {
        writeln!(out, "nothing overdue ({} items)", p.items.len())
    };
    for item in &p.items {
        let _ = writeln!(out, "- {}", item_line(item, p.at));
    }
    out
}

/// The exit status `bosun-guest status` ends with for `p`.
pub fn exit_status(p: &GuestProtection) -> u8 {
    if p.overdue { EXIT_OVERDUE } else { 0 }
}

/// Why a watch pass failed.
#[derive(Debug, thiserror::Error)]
pub enum ProtectionError {
    /// The local API call failed.
    #[error("reading the guest's protection failed")]
    Api(#[from] ClientError),
    /// The state file could not be written.
    #[error("failed to write {path}")]
    File {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// `bosun-guest run`'s protection watch.
#[derive(Debug)]
pub struct ProtectionWatch {
    client: LocalApiClient,
    interval: Duration,
    file: Option<PathBuf>,
}

impl ProtectionWatch {
    /// Asks `client` every `interval`, keeping the last answer in `file` when given.
    pub fn new(client: LocalApiClient, interval: Duration, file: Option<PathBuf>) -> Self {
        Self {
            client,
            interval,
            file,
        }
    }

    /// One pass: ask, log what is overdue, keep the answer. Gives the answer.
    pub async fn check(&self, was_overdue: bool) -> Result<GuestProtection, ProtectionError> {
        let p = self.client.protection().await?;
        if p.overdue {
            let items: Vec<String> = p.overdue_items().map(|i| item_line(i, p.at)).collect();
            tracing::warn!(
                overdue = items.len(),
                items = %items.join(" | "),
                "this guest's protection is overdue"
            );
        } else if was_overdue {
            tracing::info!("this guest's protection is no longer overdue");
        }
        if let Some(path) = &self.file {
            write_whole(path, &p).map_err(|source| ProtectionError::File {
                path: path.clone(),
                source,
            })?;
        }
        Ok(p)
    }

    /// Passes until `shutdown`, one per interval; a failed pass is retried after
    /// [`Backoff`]'s delay (never more than the interval).
    pub async fn run(&self, shutdown: &CancellationToken) {
        let mut backoff = Backoff::new("protection pass");
        let mut overdue = false;
        loop {
            let pass = tokio::select! {
                pass = self.check(overdue) => pass,
                () = shutdown.cancelled() => return,
            };
            let wait = match pass {
                Ok(p) => {
                    backoff.succeeded();
                    overdue = p.overdue;
                    self.interval
                }
                Err(e) => backoff.failed(&e).min(self.interval),
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = shutdown.cancelled() => return,
            }
        }
    }
}

/// Writes `p` as JSON beside `path`, then renames it over `path`.
fn write_whole(path: &std::path::Path, p: &GuestProtection) -> std::io::Result<()> {
    let mut text = serde_json::to_vec_pretty(p).map_err(std::io::Error::other)?;
    text.push(b'\n');
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests;
