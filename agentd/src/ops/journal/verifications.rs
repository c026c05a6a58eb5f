//! The newest verification of each guest's backups per tier (`data/verify/`: PBS's verify, or
//! a file tier's re-hash): one row per (guest, tier), replaced by each verification, keeping
//! when the group was first verified and when it last verified `ok`, so the report can say
//! how long a group has gone unverified across restarts.

use std::collections::BTreeSet;

use bosun_proto::verify::VerifyOutcome;
use jiff::Timestamp;
use rusqlite::params;

use super::error::JournalError;
use super::handle::{JournalHandle, journal_calls};
use super::store::Store;
use super::store::{from_ms, opt_from_ms, query_err, to_ms, tuple_rows};

const TABLE: &str = "verifications";

/// One finished verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    /// The guest whose group was verified.
    pub guest_id: String,
    /// The tier's target (`durable_id`).
    pub tier: String,
    /// How it ended.
    pub outcome: VerifyOutcome,
    /// How long it took, in milliseconds.
    pub duration_ms: u64,
    /// PBS's task status, or why it could not run.
    pub detail: String,
}

/// The newest verification of a guest on a tier, with its history's two times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastVerification {
    /// The verification.
    pub verification: Verification,
    /// When it finished.
    pub finished_at: Timestamp,
    /// The newest `ok` one.
    pub last_ok_at: Option<Timestamp>,
    /// The newest `failed` one.
    pub last_failed_at: Option<Timestamp>,
    /// The first one recorded.
    pub first_at: Timestamp,
}

fn outcome_str(outcome: VerifyOutcome) -> &'static str {
    match outcome {
        VerifyOutcome::Ok => "ok",
        VerifyOutcome::Failed => "failed",
        VerifyOutcome::Error | VerifyOutcome::Unknown => "error",
    }
}

fn parse_outcome(text: &str) -> Option<VerifyOutcome> {
    match text {
        "ok" => Some(VerifyOutcome::Ok),
        "failed" => Some(VerifyOutcome::Failed),
        "error" => Some(VerifyOutcome::Error),
        _ => None,
    }
}

impl Store {
    /// Records a finished verification (now), replacing the guest's last one on the tier.
    pub fn record_verification(&mut self, v: &Verification) -> Result<(), JournalError> {
        let now = to_ms(self.now());
        let duration = i64::try_from(v.duration_ms).unwrap_or(i64::MAX);
        let ok = (v.outcome == VerifyOutcome::Ok).then_some(now);
        let failed = (v.outcome == VerifyOutcome::Failed).then_some(now);
        self.write("record verification", |tx| {
            tx.execute(
                "INSERT INTO verifications
                     (guest_id, tier, outcome, duration_ms, detail, finished_ms, last_ok_ms,
                      last_failed_ms, first_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?6)
                 ON CONFLICT (guest_id, tier) DO UPDATE SET
                     outcome = excluded.outcome, duration_ms = excluded.duration_ms,
                     detail = excluded.detail, finished_ms = excluded.finished_ms,
                     last_ok_ms = coalesce(excluded.last_ok_ms, verifications.last_ok_ms),
                     last_failed_ms =
                         coalesce(excluded.last_failed_ms, verifications.last_failed_ms)",
                params![
                    v.guest_id,
                    v.tier,
                    outcome_str(v.outcome),
                    duration,
                    v.detail,
                    now,
                    ok,
                    failed
                ],
            )
            .map_err(query_err("record verification"))?;
            Ok(())
        })
    }

    /// Every guest's newest verification per tier, ordered by guest then tier.
    pub fn last_verifications(&self) -> Result<Vec<LastVerification>, JournalError> {
        const WHAT: &str = "read verifications";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT guest_id, tier, outcome, duration_ms, detail, finished_ms, last_ok_ms,
                        last_failed_ms, first_ms
                 FROM verifications ORDER BY guest_id, tier",
            )
            .map_err(query_err(WHAT))?;
        type Row = (
            String,
            String,
            String,
            i64,
            String,
            i64,
            Option<i64>,
            Option<i64>,
            i64,
        );
        let rows: Vec<Row> = tuple_rows(&mut stmt, [], WHAT)?;
        rows.into_iter()
            .map(
                |(guest_id, tier, outcome, duration, detail, finished, ok, failed, first)| {
                    let outcome = parse_outcome(&outcome).ok_or_else(|| JournalError::Corrupt {
                        table: TABLE,
                        column: "outcome",
                        value: outcome.clone(),
                    })?;
                    Ok(LastVerification {
                        verification: Verification {
                            guest_id,
                            tier,
                            outcome,
                            duration_ms: u64::try_from(duration).unwrap_or(0),
                            detail,
                        },
                        finished_at: from_ms(finished, TABLE, "finished_ms")?,
                        last_ok_at: opt_from_ms(ok, TABLE, "last_ok_ms")?,
                        last_failed_at: opt_from_ms(failed, TABLE, "last_failed_ms")?,
                        first_at: from_ms(first, TABLE, "first_ms")?,
                    })
                },
            )
            .collect()
    }
}

impl Store {
    /// Removes the rows of every guest not in `guests` and of every tier not in `tiers` (a
    /// guest gone from desired state, a tier gone from the policy): what the report carries
    /// stays what is still verified, and the table stays bounded. Gives how many went.
    pub fn prune_verifications(
        &mut self,
        guests: &BTreeSet<String>,
        tiers: &BTreeSet<String>,
    ) -> Result<usize, JournalError> {
        const WHAT: &str = "prune verifications";
        self.write(WHAT, |tx| {
            let mut stmt = tx
                .prepare_cached("SELECT guest_id, tier FROM verifications")
                .map_err(query_err(WHAT))?;
            let rows: Vec<(String, String)> = tuple_rows(&mut stmt, [], WHAT)?;
            let mut gone = 0;
            for (guest_id, tier) in rows {
                if guests.contains(&guest_id) && tiers.contains(&tier) {
                    continue;
                }
                gone += tx
                    .execute(
                        "DELETE FROM verifications WHERE guest_id = ?1 AND tier = ?2",
                        params![guest_id, tier],
                    )
                    .map_err(query_err(WHAT))?;
            }
            Ok(gone)
        })
    }
}

impl Store {
    /// The guests with a successful backup recorded on Proxmox storage `storage`, each once:
    /// whose archives there the integrity check re-hashes (a guest never backed up there has
    /// nothing to check).
    pub fn guests_with_archives(&self, storage: &str) -> Result<BTreeSet<String>, JournalError> {
        const WHAT: &str = "read the guests with archives on a storage";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT DISTINCT guest_id FROM backup_outcomes
                 WHERE storage = ?1 AND ok = 1 AND archive IS NOT NULL",
            )
            .map_err(query_err(WHAT))?;
        let rows = stmt
            .query_map(params![storage], |row| row.get::<_, String>(0))
            .map_err(query_err(WHAT))?
            .collect::<Result<BTreeSet<_>, _>>()
            .map_err(query_err(WHAT))?;
        Ok(rows)
    }
}

journal_calls! {
    /// See [`Store::guests_with_archives`].
    fn guests_with_archives(storage: String) -> BTreeSet<String>
        = |s| s.guests_with_archives(&storage);
    /// See [`Store::prune_verifications`].
    fn prune_verifications(guests: BTreeSet<String>, tiers: BTreeSet<String>) -> usize
        = |s| s.prune_verifications(&guests, &tiers);
    /// See [`Store::record_verification`].
    fn record_verification(v: Verification) -> () = |s| s.record_verification(&v);
    /// See [`Store::last_verifications`].
    fn last_verifications() -> Vec<LastVerification> = |s| s.last_verifications();
}
