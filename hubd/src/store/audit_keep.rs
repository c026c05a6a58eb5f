//! Keeping the audit entries a poll carries: one row per change, with a count (decision 0106).
//!
//! An entry that repeats what the host's newest row about the same subject says — the same
//! action, and the same detail but for the entry's chain hash (so the same actor: job, operation
//! and request ids are part of the detail) — is not kept as a row of its own: it adds one to
//! that row's `repeats` and moves its `last_seq` and `last_at_ms`. A failure the agent audits
//! every minute for a day is one row saying so 1,440 times, and the first other outcome about
//! the subject (a success, a different failure) starts a new row. An entry's subject is the
//! family of its action (`verify` of `verify.failed`), the guest and vmid it names, and the
//! tier or target its own detail names ([`SUBJECT_FIELDS`]).
//!
//! What the host says each entry is stays whole in its own journal (its hash chain, read by
//! the guest's controller and `bosun-agentctl`); the hub's copy is the operator's view of it.

use bosun_proto::report::AuditEntry;

use super::StoreResult;
use super::codec::signed;
use super::tx::Tx;

/// The fields of an entry's own detail that name what it is about, beside its guest and vmid.
pub(super) const SUBJECT_FIELDS: [&str; 3] = ["tier", "target", "storage"];

/// An entry's subject: its action's family, its guest and vmid, and what of
/// [`SUBJECT_FIELDS`] its own detail names.
pub(super) fn subject(entry: &AuditEntry) -> String {
    let family = entry
        .action
        .rsplit_once('.')
        .map_or(entry.action.as_str(), |(family, _)| family);
    let detail = &entry.detail;
    let mut parts = vec![
        family.to_owned(),
        text(&detail["guest_id"]),
        text(&detail["vmid"]),
    ];
    for field in SUBJECT_FIELDS {
        parts.push(text(&detail["detail"][field]));
    }
    serde_json::Value::from(parts).to_string()
}

fn text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// An entry's detail without its chain hash: what two entries with the same outcome share.
fn outcome(detail: &serde_json::Value) -> serde_json::Value {
    let mut detail = detail.clone();
    if let Some(map) = detail.as_object_mut() {
        map.remove("hash");
    }
    detail
}

/// The host's newest row about a subject: its first sequence number, the last it counted,
/// its action and its detail.
struct Newest {
    seq: i64,
    last_seq: i64,
    action: String,
    detail: String,
}

/// Keeps `entry` of `host`, whose highest audit sequence stored before this poll was `held`;
/// whether it is new (a row, or one more repeat of one). An entry at or below `held` was kept
/// before (an agent sends again what a lost answer did not acknowledge).
/// The newest audit row of a host's subject, read for every audit entry a poll carries.
pub(super) const NEWEST_OF_SUBJECT_SQL: &str =
    "SELECT seq, COALESCE(last_seq, seq), action, detail FROM audit
     WHERE host_id = ?1 AND subject = ?2 ORDER BY seq DESC LIMIT 1";

pub(super) fn keep(
    tx: Tx<'_, '_>,
    host: &str,
    held: Option<u64>,
    entry: &AuditEntry,
) -> StoreResult<bool> {
    if held.is_some_and(|held| entry.seq <= held) {
        return Ok(false);
    }
    let seq = signed(entry.seq);
    let at_ms = entry.at.as_millisecond();
    let subject = subject(entry);
    let newest = tx.query_opt(
        "read newest audit row of a subject",
        NEWEST_OF_SUBJECT_SQL,
        &[&host, &subject],
        |r| {
            Ok(Newest {
                seq: r.get(0)?,
                last_seq: r.get(1)?,
                action: r.get(2)?,
                detail: r.get(3)?,
            })
        },
    )?;
    if let Some(newest) = newest {
        if (newest.seq..=newest.last_seq).contains(&seq) {
            return Ok(false);
        }
        let same = newest.action == entry.action
            && serde_json::from_str::<serde_json::Value>(&newest.detail)
                .is_ok_and(|stored| outcome(&stored) == outcome(&entry.detail));
        if same && seq > newest.last_seq {
            tx.execute(
                "count a repeated audit entry",
                "UPDATE audit SET repeats = repeats + 1, last_seq = ?3, last_at_ms = ?4
                 WHERE host_id = ?1 AND seq = ?2",
                &[&host, &newest.seq, &seq, &at_ms],
            )?;
            return Ok(true);
        }
    }
    tx.execute(
        "store audit entry",
        "INSERT INTO audit (host_id, seq, at_ms, action, detail, subject) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT DO NOTHING",
        &[
            &host,
            &seq,
            &at_ms,
            &entry.action,
            &entry.detail.to_string(),
            &subject,
        ],
    )
    .map(|inserted| inserted > 0)
}
