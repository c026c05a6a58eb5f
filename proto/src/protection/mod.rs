//! A guest's own protection, as the customer reads it from the host agent's local API
//! (`GET /v1/protection`, DESIGN §7): when the guest was last backed up on each tier, last
//! verified on each PBS tier, last restore-tested, how each ended, and whether any of it is
//! overdue against the cadence the operator signed.
//!
//! The hub hears the same facts in the host's report and alerts on them; a compromised hub can
//! keep them from the operator. The agent answers the guest from its own journal, so the
//! customer learns of a withheld credential or a stopped verification whatever the hub does.
//!
//! **Overdue** is one rule, here, for the hub's alerts (`backup_overdue`, `verify_overdue`,
//! `restore_test_overdue`) and the agent's answer alike: an item is overdue once more than
//! [`OVERDUE_FACTOR`] times its interval has passed without a success, counted from its newest
//! success or, with none, from when it was first expected ([`judge`]). Twice the interval is
//! the grace: one missed run (a busy node, a window, a reboot) is not yet overdue, a second
//! one is. A backup tier's interval is the longest gap between consecutive occurrences of its
//! schedule ([`cadence`]).

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::calendar::CalendarEvent;
use crate::validate::{self, ValidationError};

/// How many intervals may pass without a success before an item is overdue.
pub const OVERDUE_FACTOR: i32 = 2;

/// Most items one answer carries: every backup tier of a plan, every PBS tier's verification
/// and the restore test, with room to spare.
pub const MAX_ITEMS: usize = 64;

/// Most characters of an item's `detail` (why it failed or could not run).
pub const MAX_DETAIL_CHARS: usize = 200;

/// Most bytes of an item's `target` (a target's `durable_id` or a Proxmox storage id).
pub const MAX_TARGET_BYTES: usize = 512;

/// The longest `interval_s` an item may say: ten years (a leap-day schedule's gap fits).
pub const MAX_INTERVAL_S: u64 = 10 * 366 * 86_400;

/// How many consecutive occurrences of a schedule its cadence is measured over: the longest
/// gap among them, so a weekday schedule's weekend is part of its cadence.
const CADENCE_OCCURRENCES: usize = 16;

/// The time without a success after which an item with `interval` is overdue:
/// [`OVERDUE_FACTOR`] times the interval.
pub fn overdue_limit(interval: SignedDuration) -> SignedDuration {
    interval
        .checked_mul(OVERDUE_FACTOR)
        .unwrap_or(SignedDuration::MAX)
}

/// The instant after which an item counted from `base` is overdue.
pub fn overdue_at(base: Timestamp, interval: SignedDuration) -> Timestamp {
    base.checked_add(overdue_limit(interval))
        .unwrap_or(Timestamp::MAX)
}

/// The longest gap between consecutive occurrences of `schedule` from `now` on (UTC; the
/// host's own zone moves a gap by an hour at most), or `None` when it does not parse or
/// occurs fewer than twice.
pub fn cadence(schedule: &str, now: Timestamp) -> Option<SignedDuration> {
    let event = CalendarEvent::parse(schedule).ok()?;
    let mut at = event.next(now, &TimeZone::UTC)?;
    let mut longest: Option<SignedDuration> = None;
    for _ in 1..CADENCE_OCCURRENCES {
        let Some(next) = event.next(at, &TimeZone::UTC) else {
            break;
        };
        let gap = next.duration_since(at);
        longest = Some(longest.map_or(gap, |l| l.max(gap)));
        at = next;
    }
    longest
}

/// How an item stands at one instant ([`judge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Judgment {
    /// What the overdue limit counts from: the newest success, else when the item was first
    /// expected; `None` when neither is known.
    pub counted_from: Option<Timestamp>,
    /// The instant after which the item is overdue.
    pub overdue_at: Option<Timestamp>,
    /// Whether it is overdue now.
    pub overdue: bool,
}

/// Judges an item whose newest success is `last_ok_at`, expected since `expected_since`, with
/// `interval` between two runs, at `now`.
pub fn judge(
    last_ok_at: Option<Timestamp>,
    expected_since: Option<Timestamp>,
    interval: SignedDuration,
    now: Timestamp,
) -> Judgment {
    let counted_from = last_ok_at.or(expected_since);
    let at = counted_from.map(|base| overdue_at(base, interval));
    Judgment {
        counted_from,
        overdue_at: at,
        overdue: at.is_some_and(|at| now > at),
    }
}

/// What an item protects against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ProtectionKind {
    /// A backup of the guest on one tier.
    Backup,
    /// A verification of the guest's backups on one tier (PBS's verify, or a re-hash).
    Verification,
    /// A restore test of the guest's backups (any tier).
    RestoreTest,
}

/// How the newest run of an item ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ProtectionResult {
    /// It succeeded: the archive was written, PBS found every chunk, the restored guest passed
    /// its check.
    Ok,
    /// It judged the data and found it bad, or the backup or restore test failed.
    Failed,
    /// It could not run or finish (a target unreachable, a credential not at hand): no
    /// judgment of the data.
    Error,
    /// A restore test booted the guest but nothing checked its data: never a pass.
    NotChecked,
    /// A result this reader does not know (a newer agent).
    #[serde(other)]
    Unknown,
}

/// Who promised an item's cadence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum PromisedBy {
    /// The operator's signed data plan: no hub can space it further.
    SignedPlan,
    /// The hub's desired state (the host has no signed plan, or the plan names no cadence for
    /// this item and the hub asks for one).
    DesiredState,
}

/// One thing protecting the guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProtectionItem {
    /// What it is.
    pub kind: ProtectionKind,
    /// For a backup, its tier (0 = first); for a verification, the tier of its PBS target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<u32>,
    /// Where: the target's `durable_id`, or the Proxmox storage id; for a restore test, the
    /// storage its newest test restored from (`-` before any).
    pub target: String,
    /// Who promised the cadence.
    pub promised_by: PromisedBy,
    /// The longest time between two runs, in seconds.
    pub interval_s: u64,
    /// When the newest run finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_at: Option<Timestamp>,
    /// How the newest run ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_result: Option<ProtectionResult>,
    /// Why the newest run failed or could not run (bounded, printable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// When the newest successful run finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_ok_at: Option<Timestamp>,
    /// What the overdue limit counts from: `last_ok_at`, else when the item was first
    /// expected (its first attempt, or the guest's arrival on this host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted_from: Option<Timestamp>,
    /// The instant after which the item is overdue: `counted_from` plus twice `interval_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overdue_at: Option<Timestamp>,
    /// Whether it is overdue now.
    pub overdue: bool,
}

/// The answer of `GET /v1/protection`: the caller's own guest only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GuestProtection {
    /// The guest.
    pub guest_id: Uuid,
    /// Its vmid.
    pub vmid: u32,
    /// The agent's time when it judged.
    pub at: Timestamp,
    /// The serial of the signed data plan judged against; absent: the host has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_serial: Option<u64>,
    /// Whether any item is overdue.
    pub overdue: bool,
    /// Every backup tier, every PBS tier's verification and the restore test, each with a
    /// cadence; a protection nothing promises is not listed.
    pub items: Vec<ProtectionItem>,
}

impl GuestProtection {
    /// Checks the counts, the text and that `overdue` is what the items say.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate::count("items", self.items.len(), MAX_ITEMS)?;
        for (i, item) in self.items.iter().enumerate() {
            validate::text(
                || format!("items[{i}].target"),
                &item.target,
                MAX_TARGET_BYTES,
            )?;
            if let Some(detail) = &item.detail {
                let field = || format!("items[{i}].detail");
                validate::text(field, detail, MAX_DETAIL_CHARS * 4)?;
                if detail.chars().count() > MAX_DETAIL_CHARS {
                    return Err(ValidationError::TooLong {
                        field: field(),
                        len: detail.chars().count(),
                        max: MAX_DETAIL_CHARS,
                    });
                }
            }
            validate::range(
                || format!("items[{i}].interval_s"),
                item.interval_s,
                1,
                MAX_INTERVAL_S,
            )?;
        }
        let any = self.items.iter().any(|i| i.overdue);
        if self.overdue != any {
            return Err(ValidationError::Invalid {
                field: "overdue".to_owned(),
                reason: format!("says {} while the items say {any}", self.overdue),
            });
        }
        Ok(())
    }

    /// The items that are overdue.
    pub fn overdue_items(&self) -> impl Iterator<Item = &ProtectionItem> {
        self.items.iter().filter(|i| i.overdue)
    }
}

/// `text` kept printable (control characters as spaces) and at most [`MAX_DETAIL_CHARS`]
/// characters: what an item's `detail` may hold.
pub fn bounded_detail(text: &str) -> Option<String> {
    let kept: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_DETAIL_CHARS)
        .collect();
    (!kept.trim().is_empty()).then_some(kept)
}

#[cfg(test)]
mod tests;
