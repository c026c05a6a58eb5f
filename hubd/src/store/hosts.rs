//! Host rows: status changes, polls, liveness, sweeps and the host views, written once for
//! both stores.

use bosun_proto::admin::{HostDetail, HostStatus, HostSummary, Liveness};
use bosun_proto::desired::DesiredState;
use rusqlite::params;
use rusqlite::types::{ToSqlOutput, Value, ValueRef};
use uuid::Uuid;

use super::codec::{host_status, signed, ts, ts_opt, unsigned, uuid};
use super::host_row::{self, HOST_ROW_COLUMNS, HOST_ROW_WIDTH, HostFacts, HostRow};
use super::poll_report;
use super::stored_report;
use super::tx::{Dialect, Row, Tx};
use super::{HostCounts, PollRecord, PollRecorded, PollView, StoreError, StoreResult};

/// The host summary's statement; `filter` follows its joins. Only the fingerprint the stored
/// report names is read in each dialect's own JSON syntax (a report that is not JSON names none).
fn summary_select(dialect: Dialect, filter: &str) -> String {
    let reported_fingerprint = dialect.pick(
        "CASE WHEN json_valid(r.report) THEN json_extract(r.report, '$.pbs_key_fingerprint') END",
        "(r.report::json ->> 'pbs_key_fingerprint')",
    );
    let golden = |field: &str| match dialect {
        Dialect::Sqlite => format!(
            "CASE WHEN json_valid(r.report) THEN json_extract(r.report, '$.golden.current.{field}') END"
        ),
        Dialect::Postgres => format!("(r.report::json -> 'golden' -> 'current' ->> '{field}')"),
    };
    let (version, sha256, built_at) = (golden("version"), golden("sha256"), golden("built_at"));
    // How many parts of desired state the report refuses (decision 0065).
    let refused = dialect.pick(
        "CASE WHEN json_valid(r.report) THEN json_array_length(r.report, '$.refused') END",
        "CASE WHEN json_typeof(r.report::json -> 'refused') = 'array'
              THEN CAST(json_array_length(r.report::json -> 'refused') AS BIGINT) END",
    );
    format!(
        "SELECT h.host_id, h.hostname, h.status, h.last_seen_ms, h.overdue_since_ms,
                h.agent_version, h.controller_version, COALESCE(d.generation, 0),
                h.known_generation, h.applied_generation,
                (SELECT COUNT(*) FROM jobs j WHERE j.host_id = h.host_id AND j.state = 'queued'),
                e.key_fingerprint, e.updated_ms, {reported_fingerprint}, h.stopped_ms,
                {version}, {sha256}, {built_at}, {refused}
         FROM hosts h LEFT JOIN desired d ON d.host_id = h.host_id
              LEFT JOIN escrow e ON e.host_id = h.host_id
              LEFT JOIN host_reports r ON r.host_id = h.host_id
         {filter}"
    )
}

fn summary(row: &Row<'_, '_>) -> rusqlite::Result<RawSummary> {
    Ok(RawSummary {
        host_id: row.get(0)?,
        hostname: row.get(1)?,
        status: row.get(2)?,
        last_seen_ms: row.get(3)?,
        overdue_since_ms: row.get(4)?,
        agent_version: row.get(5)?,
        controller_version: row.get(6)?,
        desired_generation: row.get(7)?,
        known_generation: row.get(8)?,
        applied_generation: row.get(9)?,
        pending_jobs: row.get(10)?,
        escrow_fingerprint: row.get(11)?,
        escrow_ms: row.get(12)?,
        reported_fingerprint: row.get(13)?,
        stopped_ms: row.get(14)?,
        golden_version: row.get(15)?,
        golden_sha256: row.get(16)?,
        golden_built_at: row.get(17)?,
        refused: row.get(18)?,
    })
}

struct RawSummary {
    host_id: String,
    hostname: String,
    status: String,
    last_seen_ms: Option<i64>,
    overdue_since_ms: Option<i64>,
    agent_version: Option<String>,
    controller_version: Option<String>,
    desired_generation: i64,
    known_generation: i64,
    applied_generation: i64,
    pending_jobs: i64,
    escrow_fingerprint: Option<String>,
    escrow_ms: Option<i64>,
    reported_fingerprint: Option<String>,
    stopped_ms: Option<i64>,
    golden_version: Option<String>,
    golden_sha256: Option<String>,
    golden_built_at: Option<String>,
    refused: Option<i64>,
}

impl RawSummary {
    fn decode(self) -> StoreResult<HostSummary> {
        let liveness = match (self.last_seen_ms, self.overdue_since_ms, self.stopped_ms) {
            (None, _, _) => Liveness::Never,
            (Some(_), Some(_), _) => Liveness::Overdue,
            (Some(_), None, Some(_)) => Liveness::Stopped,
            (Some(_), None, None) => Liveness::Ok,
        };
        Ok(HostSummary {
            host_id: uuid(&self.host_id)?,
            hostname: self.hostname,
            status: host_status(&self.status)?,
            liveness,
            last_seen: ts_opt(self.last_seen_ms)?,
            stopped_at: ts_opt(self.stopped_ms)?,
            agent_version: self.agent_version,
            controller_version: self.controller_version,
            desired_generation: unsigned(self.desired_generation),
            known_generation: unsigned(self.known_generation),
            applied_generation: unsigned(self.applied_generation),
            pending_jobs: unsigned(self.pending_jobs),
            escrow: super::escrow::state(
                self.escrow_ms.map(|ms| (self.escrow_fingerprint, ms)),
                self.reported_fingerprint.as_deref(),
            )?,
            health: None,
            labels: std::collections::BTreeMap::new(),
            golden: golden_summary(
                self.golden_version,
                self.golden_sha256,
                self.golden_built_at,
            ),
            refused: self.refused.map_or(0, unsigned),
        })
    }
}

/// The host's current golden base as its stored report names it; a report the hub stored
/// passed its validation, so a version and digest that do not fit are left out, not shown.
fn golden_summary(
    version: Option<String>,
    sha256: Option<String>,
    built_at: Option<String>,
) -> Option<bosun_proto::golden_report::GoldenSummary> {
    let (version, sha256) = (version?, sha256?);
    let fits =
        |s: &str, max: usize| s.len() <= max && !s.chars().any(bosun_proto::inert::is_control);
    (fits(&version, 64) && fits(&sha256, 64)).then(|| bosun_proto::golden_report::GoldenSummary {
        version,
        sha256,
        built_at: built_at.and_then(|t| t.parse().ok()),
    })
}

/// Fails with `UnknownHost` unless the host exists; returns its status.
///
/// A writing PostgreSQL transaction locks the host's row until it ends: every write about one
/// host goes through here or through a batch of polls (`PgStore::record_polls` locks its hosts'
/// rows first), so writes about a host from any replica run one after the other. SQLite has one
/// writer, which gives the same.
pub(super) fn require_host(tx: Tx<'_, '_>, host_id: Uuid) -> StoreResult<HostStatus> {
    tx.require_host(host_id)
}

pub(super) fn set_status(
    tx: Tx<'_, '_>,
    host_id: Uuid,
    to: HostStatus,
    now_ms: i64,
) -> StoreResult<()> {
    let from = require_host(tx, host_id)?;
    // Revoking a revoked host changes nothing and succeeds: an operator who is not sure it
    // went through runs it again.
    if from == HostStatus::Revoked && to == HostStatus::Revoked {
        return Ok(());
    }
    let (action, allowed) = match to {
        HostStatus::Active => ("approve", from == HostStatus::PendingApproval),
        HostStatus::Revoked => ("revoke", true),
        HostStatus::PendingApproval => ("reset", false),
    };
    if !allowed {
        return Err(StoreError::HostState {
            host_id,
            status: from.as_str(),
            action,
        });
    }
    super::monitored::before_status_change(tx, &host_id.to_string(), to == HostStatus::Active)?;
    tx.execute(
        "set host status",
        "UPDATE hosts SET status = ?1 WHERE host_id = ?2",
        params![to.as_str(), host_id.to_string()],
    )?;
    let kind = if to == HostStatus::Active {
        "approved"
    } else {
        "revoked"
    };
    tx.event(
        now_ms,
        Some(host_id),
        kind,
        &serde_json::json!({ "from": from.as_str() }),
    )
}

/// The poll's one write of the host row (a planned stop recorded or cleared with it); `?8` is
/// the report's `poll_report::Write::mode`. Written in SQL both dialects read alike: `CAST`
/// where PostgreSQL must be told a parameter's type, and the larger of the two audit sequences
/// by `CASE` (SQLite's `MAX` is PostgreSQL's `GREATEST`). No indexed column changes, so on
/// PostgreSQL the new row version needs no index entries.
const POLL_UPDATE_SQL: &str = "
    UPDATE hosts SET last_seen_ms = ?1, overdue_since_ms = NULL, alert_state = 'none',
        stopped_ms = CASE WHEN CAST(?12 AS BIGINT) = 1 THEN CAST(?1 AS BIGINT) ELSE NULL END,
        agent_version = COALESCE(?2, agent_version),
        controller_version = CASE WHEN ?2 IS NULL THEN controller_version ELSE ?3 END,
        known_generation = ?4, applied_generation = ?5,
        audit_seq = CASE WHEN COALESCE(CAST(?6 AS BIGINT), 0) > COALESCE(audit_seq, 0)
                         THEN CAST(?6 AS BIGINT) ELSE COALESCE(audit_seq, 0) END,
        full_report_wanted = CASE WHEN ?7 = 1 THEN 0 ELSE full_report_wanted END,
        prev_live = CASE WHEN ?8 IN (2, 4) THEN live WHEN ?8 = 1 THEN NULL ELSE prev_live END,
        prev_seq = CASE WHEN ?8 IN (2, 4) THEN report_seq WHEN ?8 = 1 THEN NULL ELSE prev_seq END,
        prev_base = CASE WHEN ?8 IN (1, 2) THEN 0 WHEN ?8 IN (4, 5) THEN 1 ELSE prev_base END,
        live = CASE WHEN ?8 = 0 THEN live ELSE COALESCE(?9, live) END,
        report_seq = CASE WHEN ?8 = 0 THEN report_seq ELSE ?10 END,
        base_digest = COALESCE(?14, base_digest),
        hub_pins = COALESCE(?13, hub_pins)
    WHERE host_id = ?11";

/// What a PostgreSQL poll's row write returns: the row as the next poll would read it
/// ([`HOST_ROW_COLUMNS`]), then its version and when it was last seen (`xmin` and
/// `last_seen_ms`, what the replica's next write of it is guarded on: decision 0129).
pub(super) const KEPT_COLUMNS_WIDTH: usize = HOST_ROW_WIDTH + 2;

/// The forms of [`POLL_UPDATE_SQL`] a store sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PollWrite {
    /// A poll recorded the usual way: PostgreSQL's returns the row it wrote.
    Usual,
    /// A heartbeat on a kept row (decision 0129): only while the row is the version `?15`,
    /// last seen at `?16`; it returns the row, then what waits for the host
    /// ([`super::pending::WAITING_COLUMNS`]) for the generation `?4`.
    Guarded,
    /// [`Self::Guarded`] without what waits (the replica kept it, and a guard that holds says
    /// it did not change: decision 0131), for many hosts in one statement (decision 0132):
    /// `?1`–`?16` are arrays of [`GUARDED_TYPES`], one element a host; it returns each row
    /// written, then its host's id.
    GuardedBatch,
}

/// A PostgreSQL type a guarded write's value is sent as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SqlType {
    Bigint,
    Text,
    Bytea,
}

impl SqlType {
    fn name(self) -> &'static str {
        match self {
            Self::Bigint => "BIGINT",
            Self::Text => "TEXT",
            Self::Bytea => "BYTEA",
        }
    }
}

/// The types of a guarded write's `?1`–`?16` ([`poll_update_values`], then the kept row's
/// version and when it was last seen), as [`PollWrite::GuardedBatch`] takes them in arrays.
pub(super) const GUARDED_TYPES: [SqlType; 16] = {
    use SqlType::{Bigint, Bytea, Text};
    [
        Bigint, Text, Text, Bigint, Bigint, Bigint, Bigint, Bigint, Text, Bigint, Text, Bigint,
        Text, Bytea, Text, Bigint,
    ]
};

/// [`POLL_UPDATE_SQL`] over arrays, one element a host (`?N` becomes `v.pN`). Planned as a
/// nested loop over the arrays, it locks rows in their order, which the replica makes host-id
/// order, a poll batch's: the two wait for each other rather than deadlock.
fn guarded_batch(update: &str) -> String {
    let (set, _) = update
        .rsplit_once("WHERE")
        .expect("the poll's update names its host");
    let mut set = set.to_owned();
    for n in (1..=GUARDED_TYPES.len()).rev() {
        set = set.replace(&format!("?{n}"), &format!("v.p{n}"));
    }
    let arrays: Vec<String> = GUARDED_TYPES
        .iter()
        .enumerate()
        .map(|(n, ty)| format!("CAST(?{} AS {}[])", n + 1, ty.name()))
        .collect();
    let names: Vec<String> = (1..=GUARDED_TYPES.len()).map(|n| format!("p{n}")).collect();
    format!(
        "{set} FROM unnest({arrays}) AS v({names}) \
         WHERE h.host_id = v.p11 AND h.xmin = CAST(v.p15 AS xid) AND h.last_seen_ms = v.p16 \
         RETURNING {HOST_ROW_COLUMNS}, CAST(h.xmin AS TEXT), h.last_seen_ms, h.host_id",
        arrays = arrays.join(", "),
        names = names.join(", "),
    )
}

/// [`POLL_UPDATE_SQL`] as `dialect` sends it in the form `write` (SQLite has one form).
pub(super) fn poll_update(dialect: Dialect, write: PollWrite) -> &'static str {
    static TEXT: std::sync::LazyLock<[String; 3]> = std::sync::LazyLock::new(|| {
        let returning = |guard: &str, waiting: &str| {
            format!(
                "{update}{guard} RETURNING {HOST_ROW_COLUMNS}, CAST(h.xmin AS TEXT), h.last_seen_ms{waiting}",
                update = POLL_UPDATE_SQL.replacen("UPDATE hosts SET", "UPDATE hosts h SET", 1),
            )
        };
        let guard = " AND h.xmin = CAST(CAST(?15 AS TEXT) AS xid) AND h.last_seen_ms = ?16";
        [
            returning("", ""),
            returning(
                guard,
                &format!(
                    ", {}",
                    super::pending::WAITING_COLUMNS.replace("?2", "CAST(?4 AS BIGINT)")
                ),
            ),
            guarded_batch(&POLL_UPDATE_SQL.replacen("UPDATE hosts SET", "UPDATE hosts h SET", 1)),
        ]
    });
    match (dialect, write) {
        (Dialect::Sqlite, _) => POLL_UPDATE_SQL,
        (Dialect::Postgres, PollWrite::Usual) => &TEXT[0],
        (Dialect::Postgres, PollWrite::Guarded) => &TEXT[1],
        (Dialect::Postgres, PollWrite::GuardedBatch) => &TEXT[2],
    }
}

/// The values of [`POLL_UPDATE_SQL`]'s `?1`–`?14` for `poll`, whose report does `report`.
pub(super) fn poll_update_values<'a>(
    poll: &'a PollRecord,
    report: &'a poll_report::Write,
    keys_settled: bool,
) -> Vec<ToSqlOutput<'a>> {
    let text = |s: Option<&'a str>| ToSqlOutput::Borrowed(s.map_or(ValueRef::Null, ValueRef::from));
    let int = |n: Option<i64>| ToSqlOutput::Owned(n.map_or(Value::Null, Value::Integer));
    let (agent_version, controller_version) = match &poll.versions {
        Some((agent, controller)) => (Some(agent.as_str()), controller.as_deref()),
        None => (None, None),
    };
    let (live, report_seq) = report.values();
    vec![
        int(Some(poll.now_ms)),
        text(agent_version),
        text(controller_version),
        int(Some(signed(poll.known_generation))),
        int(Some(signed(poll.applied_generation))),
        int(poll.audit.iter().map(|a| a.seq).max().map(signed)),
        int(Some(i64::from(keys_settled))),
        int(Some(report.mode())),
        text(live),
        int(report_seq.map(signed)),
        ToSqlOutput::Owned(Value::Text(poll.host_id.to_string())),
        int(Some(i64::from(poll.stopping))),
        text(poll.hub_pins.as_deref()),
        ToSqlOutput::Borrowed(report.digest().map_or(ValueRef::Null, ValueRef::Blob)),
    ]
}

/// The poll's one read: the host row and what waits for it (`?1` the host, `?2` the
/// generation the agent knows). On PostgreSQL it locks the host row until the transaction
/// ends, so writes about one host from any replica run one after the other ([`require_host`]);
/// a batch records its polls in host-id order, so two batches lock their rows in one order.
pub(super) fn poll_select(dialect: Dialect) -> &'static str {
    static TEXT: std::sync::LazyLock<[String; 2]> = std::sync::LazyLock::new(|| {
        [Dialect::Sqlite, Dialect::Postgres].map(|dialect| {
            format!(
                "SELECT {HOST_ROW_COLUMNS}, {WAITING_COLUMNS} FROM hosts h WHERE h.host_id = ?1{lock}",
                WAITING_COLUMNS = super::pending::WAITING_COLUMNS,
                lock = dialect.pick("", " FOR UPDATE OF h"),
            )
        })
    });
    match dialect {
        Dialect::Sqlite => &TEXT[0],
        Dialect::Postgres => &TEXT[1],
    }
}

/// Records one poll in the open transaction: the host row read once and written once, the
/// report's base written when it changed, alerts judged when the report changed what they
/// follow, jobs acknowledged, audit entries kept. Returns what changed and the answer's view
/// (the document only when the agent does not know its generation).
pub(super) fn record_poll(tx: Tx<'_, '_>, poll: &PollRecord) -> StoreResult<RecordedPoll> {
    let host = poll.host_id.to_string();
    let (row, waiting) = tx
        .query_opt(
            "record poll",
            poll_select(tx.dialect()),
            params![host, signed(poll.known_generation)],
            |r| {
                Ok((
                    host_row::RawHostRow::read(r)?,
                    super::pending::Waiting::read(r, host_row::HOST_ROW_WIDTH)?,
                ))
            },
        )?
        .ok_or(StoreError::UnknownHost {
            host_id: poll.host_id,
        })?;
    let mut row = HostRow::checked(row, poll)?;
    if row.never_polled {
        super::monitored::first_poll(tx)?;
    }
    let stored = std::mem::take(&mut row.stored);
    let stored_seq = stored.seq;
    let report = poll_report::decide(
        &host,
        stored,
        |which| stored_report::base(tx, &host, which),
        &poll.report,
    )?;
    let full = matches!(poll.report, super::ReportUpdate::Full { .. });
    // The host's keys travel in full reports only: after an escrow blob the stored report
    // could not verify (`escrow::put`), the next delta is answered with a request for
    // a full report, and the full report settles it.
    let keys_settled = row.keys_wanted && full && report.applied;
    let newest_audit = poll.audit.iter().map(|a| a.seq).max();
    let (_, report_seq) = report.write.values();
    let values = poll_update_values(poll, &report.write, keys_settled);
    let values: Vec<&dyn rusqlite::ToSql> = values.iter().map(|v| v as _).collect();
    // Sent with the poll's next statement, its `COMMIT` for a heartbeat; on PostgreSQL the
    // row it wrote comes back for the replica to keep.
    let written = match tx {
        Tx::Postgres(pg) => Some(
            pg.defer_rows(poll_update(tx.dialect(), PollWrite::Usual), &values)
                .map_err(|source| StoreError::Postgres {
                    op: "record poll",
                    source,
                })?,
        ),
        Tx::Sqlite(_) => {
            tx.execute_later("record poll", POLL_UPDATE_SQL, &values)?;
            None
        }
    };
    if let Some(base) = report.write.base() {
        stored_report::write_base(tx, &host, base)?;
    }
    if let Some(capabilities) = &poll.capabilities {
        super::host_profile::write_capabilities(tx, &host, capabilities, poll.now_ms)?;
    }
    let full_report_required = !report.applied || (row.keys_wanted && !full);
    // Storage, backup, restore-test, escrow and health alerts follow the merged report,
    // whichever way it arrived; a heartbeat, or a delta of what they do not look at, changes
    // nothing for them.
    // Audit entries too are judged against the merged report, this poll's included; a delta
    // of the live part alone left it unassembled.
    let mut merged = report.merged;
    if merged.is_none() && (report.judged || !poll.audit.is_empty()) {
        merged = stored_report::stored_report(tx, &host)?;
    }
    let watch = if report.judged {
        super::watch::judge_report(
            tx,
            poll.host_id,
            &row.hostname,
            poll.now_ms,
            merged.as_ref(),
        )?
    } else {
        Vec::new()
    };
    let heartbeat = poll.may_wait()
        && !report.judged
        && row.stopped_since.is_none()
        && row.overdue_since.is_none()
        && poll.applied_generation == row.old_applied;
    let mut recorded = PollRecorded {
        full_report_required,
        watch,
        durable: !heartbeat,
        ..PollRecorded::default()
    };
    poll_report::record_bookkeeping(tx, poll, &row, merged.as_ref(), &mut recorded)?;
    let facts = HostFacts {
        poll_interval_s: row.poll_interval_s,
        // As the statement stored it.
        audit_acked_seq: Some(row.audit_seq.unwrap_or(0).max(newest_audit.unwrap_or(0))),
        report_seq: report_seq.or(stored_seq),
        host_key: row.host_key,
    };
    Ok(RecordedPoll {
        recorded,
        view: waiting.pending(tx, &host)?.view(facts),
        written,
    })
}

/// What [`record_poll`] did.
#[derive(Debug)]
pub(super) struct RecordedPoll {
    pub recorded: PollRecorded,
    pub view: PollView,
    /// On PostgreSQL, the host row as the poll wrote it, once the transaction is answered
    /// ([`KEPT_COLUMNS_WIDTH`] columns).
    pub written: Option<super::postgres::conn::Later>,
}

/// Whether [`record_poll`] failed before it wrote anything (the host is unknown, not active, or
/// its key changed): the rest of a batch may go on in the same transaction.
pub(super) fn refused_before_writing(err: &StoreError) -> bool {
    matches!(
        err,
        StoreError::UnknownHost { .. }
            | StoreError::WrongHostKey { .. }
            | StoreError::HostNotActive { .. }
    )
}

pub(super) fn list_hosts(tx: Tx<'_, '_>) -> StoreResult<Vec<HostSummary>> {
    tx.query_map(
        "list hosts",
        &summary_select(tx.dialect(), "ORDER BY h.hostname, h.host_id"),
        &[],
        summary,
    )?
    .into_iter()
    .map(RawSummary::decode)
    .collect()
}

pub(super) fn host_detail(tx: Tx<'_, '_>, host_id: Uuid) -> StoreResult<HostDetail> {
    let id = host_id.to_string();
    let summary = tx
        .query_opt(
            "show host",
            &summary_select(tx.dialect(), "WHERE h.host_id = ?1"),
            params![id],
            summary,
        )?
        .ok_or(StoreError::UnknownHost { host_id })?
        .decode()?;
    type Row = (i64, u32, Option<i64>, Option<i64>);
    let (enrolled_ms, poll_interval_s, replaced_ms, reseal_ms): Row = tx.query_row(
        "show host",
        "SELECT enrolled_ms, poll_interval_s, replaced_ms, reseal_required_ms
         FROM hosts WHERE host_id = ?1",
        params![id],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )?;
    let desired: Option<String> = tx.query_opt(
        "show host",
        "SELECT document FROM desired WHERE host_id = ?1",
        params![id],
        |r| r.get(0),
    )?;
    let escrow_ms: Option<i64> = tx.query_opt(
        "show host",
        "SELECT updated_ms FROM escrow WHERE host_id = ?1",
        params![id],
        |r| r.get(0),
    )?;
    let mut summary = summary;
    summary.labels = super::host_profile::labels(tx, &id)?;
    let capabilities = super::host_profile::capabilities(tx, &id)?;
    Ok(HostDetail {
        summary,
        enrolled_at: ts(enrolled_ms)?,
        poll_interval_seconds: poll_interval_s,
        desired: desired
            .as_deref()
            .map(super::codec::parse::<DesiredState>("desired state"))
            .transpose()?,
        last_report: stored_report::stored_report(tx, &id)?
            .map(|mut r| super::watch::with_remembered(tx, &id, &mut r).map(|()| r))
            .transpose()?,
        escrow_updated_at: ts_opt(escrow_ms)?,
        replaced_at: ts_opt(replaced_ms)?,
        reseal_required_since: ts_opt(reseal_ms)?,
        capabilities_at: capabilities.as_ref().map(|(_, at)| *at),
        capabilities: capabilities.map(|(caps, _)| caps),
    })
}

pub(super) fn host_counts(tx: Tx<'_, '_>) -> StoreResult<HostCounts> {
    let mut counts = HostCounts::default();
    let rows = tx.query_map(
        "count hosts",
        "SELECT status, COUNT(*), COUNT(overdue_since_ms) FROM hosts GROUP BY status",
        &[],
        |r| Ok((r.get::<String>(0)?, r.get::<i64>(1)?, r.get::<i64>(2)?)),
    )?;
    for (status, count, overdue) in rows {
        match host_status(&status)? {
            HostStatus::PendingApproval => counts.pending_approval = unsigned(count),
            HostStatus::Active => {
                counts.active = unsigned(count);
                counts.overdue = unsigned(overdue);
            }
            HostStatus::Revoked => counts.revoked = unsigned(count),
        }
    }
    Ok(counts)
}
