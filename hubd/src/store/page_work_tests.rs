//! The pages of the database a fleet's first contact writes per report: every host's first
//! full report (`docs/proto/report.json`, with its audit entries, as the benchmark's fleet
//! sends it) recorded in batches, as the poll writer records them, among hosts keyed by
//! random ids. Each page a commit changed is one frame of the write-ahead log (and one page
//! the next checkpoint copies into the database), so the frames the batches appended,
//! attributed to the table or index each page belongs to, are the writer's page work.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};

use bosun_proto::report::StateReport;

use super::sqlite::SqliteStore;
use super::tests::{NOW, poll};
use super::{PollRecord, ReportUpdate};
use crate::secret::{self, SecretHash, SecretKind};
use crate::store::PollStore as _;

/// Hosts enrolled: enough that a batch's reports rarely share a page of a table or index
/// keyed by host (a 100,000-host fleet's have up to thousands of pages).
const HOSTS: usize = 8_000;
/// Hosts that report before the measured batches (the first contact half done: the tables
/// hold reports already).
const REPORTED_BEFORE: usize = 4_000;
/// Reports a batch holds, and the batches measured.
const BATCH: usize = 64;
const BATCHES: usize = 8;

/// Enrolls `count` active hosts with one key straight into the database (as `hub-bench`
/// does); their ids in enrollment order.
fn enroll_fleet(store: &SqliteStore, count: usize) -> (Vec<uuid::Uuid>, SecretHash) {
    let (_, key_hash) = secret::mint(SecretKind::HostKey);
    let conn = store.hold_writer();
    let tx = conn.unchecked_transaction().unwrap();
    let mut ids = Vec::with_capacity(count);
    {
        let mut insert = tx
            .prepare(
                "INSERT INTO hosts (host_id, hostname, key_hash, status, enrolled_ms,
                                    poll_interval_s, agent_version)
                 VALUES (?1, ?2, ?3, 'active', ?4, 30, '0.1.0')",
            )
            .unwrap();
        for n in 0..count {
            let id = uuid::Uuid::new_v4();
            insert
                .execute(rusqlite::params![
                    id.to_string(),
                    format!("pve-{n:05}"),
                    key_hash.0.as_slice(),
                    NOW
                ])
                .unwrap();
            ids.push(id);
        }
    }
    tx.commit().unwrap();
    (ids, key_hash)
}

/// A host's first poll as the benchmark's fleet sends it: the whole sample report, its audit
/// entries apart (as the poll handler takes them).
fn first_poll(host: uuid::Uuid, key_hash: SecretHash, now_ms: i64) -> PollRecord {
    let mut report: StateReport =
        serde_json::from_str(include_str!("../../../docs/proto/report.json")).unwrap();
    let audit = std::mem::take(&mut report.audit);
    PollRecord {
        now_ms,
        report: ReportUpdate::full(report).unwrap(),
        audit,
        ..poll(host, key_hash)
    }
}

/// Records the first polls of `hosts` in batches of [`BATCH`], each answered without error.
fn record_first_polls(store: &SqliteStore, hosts: &[uuid::Uuid], key_hash: SecretHash) {
    for (n, batch) in hosts.chunks(BATCH).enumerate() {
        let now_ms = NOW + i64::try_from(n).unwrap() * 20;
        let polls = batch
            .iter()
            .map(|host| first_poll(*host, key_hash, now_ms))
            .collect();
        for outcome in store.record_polls(polls).unwrap() {
            let (recorded, _) = outcome.unwrap();
            assert!(!recorded.full_report_required);
        }
    }
}

/// The page size of the write-ahead log at `wal` and the page number of every frame in it, in
/// order.
fn wal_frames(wal: &std::path::Path) -> (usize, Vec<u32>) {
    let bytes = std::fs::read(wal).unwrap();
    let word = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    let page_size = usize::try_from(word(8)).unwrap();
    let (salt1, salt2) = (word(16), word(20));
    let mut frames = Vec::new();
    let mut at = 32;
    while at + 24 + page_size <= bytes.len() {
        // Frames left from before the log was restarted carry the old salts.
        if word(at + 8) != salt1 || word(at + 12) != salt2 {
            break;
        }
        frames.push(word(at));
        at += 24 + page_size;
    }
    (page_size, frames)
}

/// The frames of `frames` per table or index their page belongs to, most first.
fn by_tree(store: &SqliteStore, frames: &[u32]) -> Vec<(String, usize)> {
    let conn = store.hold_writer();
    let mut owner: HashMap<u32, String> = HashMap::new();
    let mut stmt = conn.prepare("SELECT name, pageno FROM dbstat").unwrap();
    let rows = stmt
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, u32>(1)?)))
        .unwrap();
    for row in rows {
        let (name, page) = row.unwrap();
        owner.insert(page, name);
    }
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for page in frames {
        let name = owner
            .get(page)
            .cloned()
            .unwrap_or_else(|| "(free or header)".to_owned());
        *counts.entry(name).or_default() += 1;
    }
    let mut counts: Vec<_> = counts.into_iter().collect();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    counts
}

#[test]
fn a_first_report_writes_few_pages_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let (hosts, key_hash) = enroll_fleet(&store, HOSTS);
    record_first_polls(&store, &hosts[..REPORTED_BEFORE], key_hash);
    {
        let conn = store.hold_writer();
        let (busy, _, _): (i64, i64, i64) = conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .unwrap();
        assert_eq!(busy, 0, "the log could not be emptied");
    }
    let measured = &hosts[REPORTED_BEFORE..REPORTED_BEFORE + BATCH * BATCHES];
    record_first_polls(&store, measured, key_hash);
    let mut wal = store.path().as_os_str().to_owned();
    wal.push("-wal");
    let (page_size, frames) = wal_frames(std::path::Path::new(&wal));
    let reports = BATCH * BATCHES;
    let per_report = frames.len() as f64 / reports as f64;
    let trees = by_tree(&store, &frames);
    eprintln!(
        "first contact: {} log frames of {page_size} bytes for {reports} first reports in \
         batches of {BATCH}: {per_report:.2} pages, {} bytes per report",
        frames.len(),
        frames.len() * (page_size + 24) / reports
    );
    for (name, count) in &trees {
        let share = *count as f64 / reports as f64;
        eprintln!("  {name:<32} {count:>6} frames, {share:.2} per report");
    }
    assert!(
        per_report <= PAGES_PER_FIRST_REPORT,
        "a first report wrote {per_report:.2} pages (at most {PAGES_PER_FIRST_REPORT}): {trees:?}"
    );
}

/// The most pages a first report may write in a batch of [`BATCH`] here: about one for each
/// tree keyed by host that it adds rows to (the host row, the base's key, the audit entries'
/// key and two indexes, the events' host index, the watch alerts, the last good backups and
/// restore tests: 9.7–10.2 measured, the rest shared with the batch), and no more. Making the
/// watch tables `WITHOUT ROWID` measured 11.1, `host_reports` `WITHOUT ROWID` 12.4 (rows
/// inserted at random places in a growing tree split its pages; a table beside its key index
/// appends them).
const PAGES_PER_FIRST_REPORT: f64 = 10.8;
