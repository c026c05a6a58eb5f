//! What keeps one SQLite hub flat at 100,000 hosts: reads beside the writer (the dead-man's
//! sweep among them), the liveness index, the backup sweep in slices, and deltas of a host's
//! figures stored without judging.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use bosun_proto::delta::ReportDelta;
use bosun_proto::report::{StateReport, TargetStatus};

use super::ReportUpdate;
use super::sqlite::SqliteStore;
use super::tests::{NOW, enroll, poll};
use crate::store::{HostStore as _, PollStore as _};

/// `docs/proto/report.json` numbered `seq`, without its audit entries; one target unreachable.
fn report(seq: u64) -> StateReport {
    let mut report: StateReport =
        serde_json::from_str(include_str!("../../../docs/proto/report.json")).unwrap();
    report.seq = seq;
    report.audit.clear();
    report
}

fn full(report: &StateReport) -> ReportUpdate {
    ReportUpdate::full(report.clone()).unwrap()
}

/// A host enrolled in `store` whose first poll carried a full report.
fn reported_host(store: &SqliteStore) -> uuid::Uuid {
    let (host, key) = enroll(store, None);
    let mut record = poll(host, key);
    record.report = full(&report(1));
    store.record_polls(vec![record]).unwrap()[0]
        .as_ref()
        .unwrap();
    host
}

#[test]
fn reads_do_not_wait_for_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(SqliteStore::open(dir.path()).unwrap());
    let (host, _) = enroll(store.as_ref(), None);
    let writer = store.hold_writer();
    let (done, answer) = std::sync::mpsc::channel();
    let reader = store.clone();
    std::thread::spawn(move || {
        let _ = done.send(reader.host_credentials(host).map(|c| c.is_some()));
    });
    // With the writer's connection held (a batch of polls being made durable), a poll's key
    // check still answers.
    let found = answer
        .recv_timeout(Duration::from_secs(10))
        .expect("a read waited for the writer");
    assert!(found.unwrap());
    drop(writer);
}

#[test]
fn a_dead_man_sweep_with_nothing_to_do_does_not_wait_for_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(SqliteStore::open(dir.path()).unwrap());
    let (host, key) = enroll(store.as_ref(), None);
    store.record_polls(vec![poll(host, key)]).unwrap();
    let config = crate::deadman::DeadManConfig::default();
    let sweep = |at: i64| {
        let (done, answer) = std::sync::mpsc::channel();
        let sweeper = store.clone();
        let config = config.clone();
        std::thread::spawn(move || {
            let _ = done.send(sweeper.sweep(at, &config).map(|alerts| alerts.len()));
        });
        answer
    };
    // The host polled just now: nothing to change, and the sweep answers while a batch of
    // polls holds the writer.
    let writer = store.hold_writer();
    let quiet = sweep(NOW + 1_000);
    let alerts = quiet
        .recv_timeout(Duration::from_secs(10))
        .expect("a sweep with nothing to do waited for the writer");
    assert_eq!(alerts.unwrap(), 0);
    // An hour later the host is overdue: that sweep writes, so it waits for the writer.
    let overdue = sweep(NOW + 3_600_000);
    assert!(overdue.recv_timeout(Duration::from_millis(300)).is_err());
    drop(writer);
    let alerts = overdue.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(alerts.unwrap(), 1, "the overdue host is alerted once");
}

#[test]
fn read_connections_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(SqliteStore::open(dir.path()).unwrap());
    enroll(store.as_ref(), None);
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let store = store.clone();
            std::thread::spawn(move || {
                for _ in 0..20 {
                    assert_eq!(store.list_hosts().unwrap().len(), 1);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let open = store.read_connections();
    assert!(
        (1..=super::sqlite::readers::MAX_READERS).contains(&open),
        "{open} read connections"
    );
}

#[test]
fn sweeps_never_sort_and_the_backup_sweep_reads_its_index() {
    let dir = tempfile::tempdir().unwrap();
    let _store = SqliteStore::open(dir.path()).unwrap();
    let conn = rusqlite::Connection::open(dir.path().join(super::sqlite::DB_FILE)).unwrap();
    for (sql, how) in [
        // The dead-man's sweep reads every host row, once per sweep, on a read connection: an
        // index on when hosts were last seen would be moved by every poll instead.
        (super::sweep::LIVENESS_SQL, "SCAN hosts"),
        // How many hosts it watches is one row of `meta`, kept by the writer's triggers.
        (
            super::sweep::monitored_sql(super::tx::Dialect::Sqlite),
            "SEARCH meta",
        ),
        // The backup sweep reads the hosts due from their index.
        (super::watch::SWEEP_SQL, "INDEX hosts_judge_due"),
    ] {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let mut rows = stmt
            .query(rusqlite::params_from_iter(std::iter::repeat_n(
                0i64,
                stmt.parameter_count(),
            )))
            .unwrap();
        let mut plan = Vec::new();
        while let Some(row) = rows.next().unwrap() {
            plan.push(row.get::<_, String>(3).unwrap());
        }
        assert!(
            plan.iter().any(|step| step.contains(how))
                && !plan.iter().any(|step| step.contains("TEMP B-TREE")),
            "{sql}: {plan:?}"
        );
    }
}

#[test]
fn the_backup_sweep_judges_the_hosts_due_once_each_in_slices() {
    use super::watch::{MAX_JUDGE_GAP_MS, sweep_slice};
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let reported: Vec<String> = (0..5).map(|_| reported_host(&store).to_string()).collect();
    // A host that never reported is never due.
    let silent = enroll(&store, None).0.to_string();
    let conn = store.hold_writer();
    let due = |host: &str| -> Option<i64> {
        conn.query_row(
            "SELECT judge_due_ms FROM hosts WHERE host_id = ?1",
            [host],
            |r| r.get(0),
        )
        .unwrap()
    };
    // Each poll judged its host: nothing turns overdue with time in these reports, so each
    // is due again after the longest gap.
    for host in &reported {
        assert_eq!(due(host), Some(NOW + MAX_JUDGE_GAP_MS));
    }
    assert_eq!(due(&silent), None);
    let tx = super::tx::Tx::Sqlite(&conn);
    assert_eq!(
        sweep_slice(tx, NOW, Duration::ZERO).unwrap(),
        (Vec::new(), false)
    );
    // An hour on every reported host is due; with no time budget each slice judges one.
    let later = NOW + MAX_JUDGE_GAP_MS;
    let mut slices = 0;
    loop {
        let (changes, more) = sweep_slice(tx, later, Duration::ZERO).unwrap();
        assert_eq!(changes, Vec::new());
        slices += 1;
        assert!(slices <= reported.len() + 1, "the sweep does not end");
        if !more {
            break;
        }
    }
    assert_eq!(slices, reported.len() + 1);
    for host in &reported {
        assert_eq!(due(host), Some(later + MAX_JUDGE_GAP_MS));
    }
    assert_eq!(due(&silent), None);
    drop(conn);
    // The whole sweep through the store finds nothing due.
    assert_eq!(store.sweep_backups(later).unwrap(), Vec::new());
}

#[test]
fn a_delta_of_host_figures_is_stored_without_judging_and_others_are_judged() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let (host, key) = enroll(&store, None);
    let record = |update: ReportUpdate| {
        let mut record = poll(host, key);
        record.report = update;
        let (recorded, view) = store.record_polls(vec![record]).unwrap().remove(0).unwrap();
        (recorded, view.report_seq)
    };
    let first = report(1);
    let (recorded, seq) = record(full(&first));
    assert_eq!(seq, Some(1));
    assert!(
        recorded
            .watch
            .iter()
            .any(|w| w.opened && w.event == "storage_lost"),
        "{:?}",
        recorded.watch
    );

    let mut busier = first.clone();
    busier.host.as_mut().unwrap().cpu_usage = 0.87;
    busier.seq = 2;
    let delta = ReportDelta::between(&first, 1, &busier, 2);
    assert!(!crate::report_alerts::delta_is_judged(
        &delta, &first, &busier
    ));
    let (recorded, seq) = record(ReportUpdate::Delta(Box::new(delta)));
    assert_eq!(seq, Some(2));
    assert!(recorded.watch.is_empty() && !recorded.full_report_required);
    let stored = store.host_detail(host).unwrap().last_report.unwrap();
    assert!((stored.host.as_ref().unwrap().cpu_usage - 0.87).abs() < f64::EPSILON);

    let mut recovered = busier.clone();
    recovered.seq = 3;
    for target in &mut recovered.storage {
        target.status = TargetStatus::Mounted;
    }
    let (recorded, seq) = record(ReportUpdate::Delta(Box::new(ReportDelta::between(
        &busier, 2, &recovered, 3,
    ))));
    assert_eq!(seq, Some(3));
    assert!(
        recorded
            .watch
            .iter()
            .any(|w| !w.opened && w.event == "storage_recovered"),
        "{:?}",
        recorded.watch
    );

    // Host health: a new reading below the mark is stored without judging; the gauge raised
    // is judged and opens its alert.
    let gauge = |usage: f64, raised: bool| bosun_proto::health::GaugeHealth {
        usage,
        high: 0.9,
        low: 0.8,
        raised,
        since: None,
    };
    let mut previous = recovered;
    for (seq, usage, raised) in [(4, 0.5, false), (5, 0.85, false), (6, 0.95, true)] {
        let mut next = previous.clone();
        next.seq = seq;
        next.host_health = Some(bosun_proto::health::HostHealth {
            cpu: Some(gauge(usage, raised)),
            ..Default::default()
        });
        let delta = ReportDelta::between(&previous, seq - 1, &next, seq);
        let judged = crate::report_alerts::delta_is_judged(&delta, &previous, &next);
        assert_eq!(judged, seq != 5, "seq {seq}");
        let (recorded, stored_seq) = record(ReportUpdate::Delta(Box::new(delta)));
        assert_eq!(stored_seq, Some(seq));
        assert_eq!(
            recorded
                .watch
                .iter()
                .any(|w| w.opened && w.event == "host_cpu_high"),
            raised,
            "seq {seq}: {:?}",
            recorded.watch
        );
        let stored = store.host_detail(host).unwrap().last_report.unwrap();
        assert_eq!(stored.host_health, next.host_health, "seq {seq}");
        previous = next;
    }
}

#[test]
fn the_statements_of_a_poll_compile_once() {
    use rusqlite::StatementStatus;

    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    reported_host(&store);
    let writer = store.hold_writer();
    // A read connection plans once too: the newest jobs of a host, as the dashboard lists them.
    let newest_jobs = "SELECT job_id FROM jobs WHERE host_id = ?1 ORDER BY seq DESC LIMIT ?2";
    let reader = store.read_connection().unwrap();
    for (conn, sql) in [
        (
            &*writer,
            super::hosts::poll_select(super::tx::Dialect::Sqlite),
        ),
        (&*writer, super::alert_triage::MATCHING_SILENCE_SQL),
        (&*writer, super::audit_keep::NEWEST_OF_SUBJECT_SQL),
        (&reader, newest_jobs),
    ] {
        let mut stmt = conn.prepare(sql).unwrap();
        let count = stmt.parameter_count();
        for round in 0..3i64 {
            let values: Vec<rusqlite::types::Value> = (0..count)
                .map(|n| {
                    if n % 2 == 0 {
                        rusqlite::types::Value::Text(format!("{round}-{n}"))
                    } else {
                        rusqlite::types::Value::Integer(round * 1000 + i64::try_from(n).unwrap())
                    }
                })
                .collect();
            let mut rows = stmt.query(rusqlite::params_from_iter(values)).unwrap();
            while rows.next().unwrap().is_some() {}
        }
        assert_eq!(
            stmt.get_status(StatementStatus::RePrepare),
            0,
            "compiled again for new bindings: {sql}"
        );
    }
}
