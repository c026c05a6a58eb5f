//! A heartbeat in one round trip on the host row a replica kept (decisions 0129, 0130), against
//! a real server and through the poll writer's handle, as the hub records polls: it goes in
//! one flight from the caller's task on the row the replica last wrote, and whatever another
//! writer did to the row since (another replica's poll, a desired state, a job, the sweep, a
//! revocation) sends it the usual way with the same answer.

use std::ops::Deref;
use std::sync::Arc;

use bosun_proto::delta::ReportDelta;
use bosun_proto::report::StateReport;
use uuid::Uuid;

use super::super::{NewJob, PollRecord, PollRecorded, PollView, ReportUpdate, StoreError};
use super::pg::Database;
use super::{NOW, enroll, poll, sample_desired};
use crate::poll_writer_task::PollWriterHandle;
use crate::secret::SecretHash;
use crate::store::postgres::{HEARTBEAT_SESSION_NAME, PgStore};
use crate::store::{HostStore as _, JobStore as _, PollStore as _};

/// A hub replica's store and its poll writer, polls recorded as the hub records them.
struct Replica {
    store: Arc<PgStore>,
    writer: PollWriterHandle,
    rt: tokio::runtime::Runtime,
}

impl Replica {
    fn open(db: &Database) -> Self {
        let store = Arc::new(db.open());
        Self {
            writer: PollWriterHandle::spawn(store.clone()).unwrap(),
            store,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        }
    }

    fn record(&self, poll: PollRecord) -> Result<(PollRecorded, PollView), StoreError> {
        self.rt.block_on(self.writer.record(poll))
    }
}

impl Deref for Replica {
    type Target = PgStore;

    fn deref(&self) -> &PgStore {
        &self.store
    }
}

/// A host's agent: the last report it sent, numbered.
struct Agent {
    host: Uuid,
    key: SecretHash,
    last: StateReport,
    now_ms: i64,
}

impl Agent {
    /// A host enrolled in `store` whose first poll, a full report, `store` recorded.
    fn reported(store: &Replica) -> Self {
        let (host, key) = enroll(&*store.store, None);
        let first = poll(host, key);
        let ReportUpdate::Full { report, .. } = &first.report else {
            unreachable!("the sample poll carries a full report")
        };
        let agent = Self {
            host,
            key,
            last: (**report).clone(),
            now_ms: NOW,
        };
        store.record(first).unwrap();
        agent
    }

    /// A delta of a new CPU figure on the last report, with the generation it holds.
    fn heartbeat(&mut self, generation: u64) -> PollRecord {
        let mut next = self.last.clone();
        let host = next.host.as_mut().expect("the report has host figures");
        host.cpu_usage = (host.cpu_usage + 0.01) % 1.0;
        self.delta(next, generation)
    }

    /// A delta from the last report to `next` (numbered on from it), 30 s later.
    fn delta(&mut self, mut next: StateReport, generation: u64) -> PollRecord {
        next.seq = self.last.seq + 1;
        self.now_ms += 30_000;
        let mut record = poll(self.host, self.key);
        record.now_ms = self.now_ms;
        record.known_generation = generation;
        record.report = ReportUpdate::Delta(Box::new(ReportDelta::between(
            &self.last,
            self.last.seq,
            &next,
            next.seq,
        )));
        self.last = next;
        record
    }
}

#[test]
fn a_heartbeat_goes_in_one_flight_on_the_kept_row_and_the_usual_way_once_another_writer_moved_it() {
    let db = Database::create();
    let (a, b) = (Replica::open(&db), Replica::open(&db));
    let mut agent = Agent::reported(&a);
    let host = agent.host;
    assert_eq!(
        a.one_flight_counts(),
        (0, 0),
        "a full report goes the usual way"
    );

    // Replica a wrote the row last: one flight.
    let (recorded, view) = a.record(agent.heartbeat(0)).unwrap();
    assert!(!recorded.full_report_required && !recorded.durable);
    assert_eq!(view.report_seq, Some(2));
    assert_eq!(a.one_flight_counts(), (1, 0));
    let stored = b.host_detail(host).unwrap().last_report.unwrap();
    assert_eq!(stored, agent.last, "the merged report is the agent's");

    // Replica b writes the row; a's next heartbeat finds its kept row moved and goes the
    // usual way, merged on what b stored (the guard missing, it would be merged on seq 2's
    // row and refused for want of a base).
    let (recorded, _) = b.record(agent.heartbeat(0)).unwrap();
    assert!(!recorded.full_report_required);
    let (recorded, view) = a.record(agent.heartbeat(0)).unwrap();
    assert!(!recorded.full_report_required, "{recorded:?}");
    assert_eq!(view.report_seq, Some(4));
    assert_eq!(a.one_flight_counts(), (1, 1));
    assert_eq!(
        b.host_detail(host).unwrap().last_report.unwrap(),
        agent.last
    );
    a.record(agent.heartbeat(0)).unwrap();
    assert_eq!(a.one_flight_counts(), (2, 1), "kept again by the usual way");

    // A job queued and a desired state set through b reach the next answer through a.
    let job = Uuid::new_v4();
    b.submit_job(NewJob {
        job_id: job,
        host_id: host,
        kind: "force-backup",
        document: b"{\"job\":1}".to_vec(),
        signature: "sig".into(),
        priority: 0,
        now_ms: agent.now_ms,
    })
    .unwrap();
    let (_, view) = a.record(agent.heartbeat(0)).unwrap();
    assert_eq!(view.jobs, [(b"{\"job\":1}".to_vec(), "sig".to_owned())]);
    // Kept again with what waits (the job), in one flight.
    let (flights, _) = a.one_flight_counts();
    let (_, view) = a.record(agent.heartbeat(0)).unwrap();
    assert_eq!(view.jobs.len(), 1, "the job is still queued");
    assert_eq!(a.one_flight_counts().0, flights + 1);
    let accepted = b.put_desired(sample_desired(host, agent.now_ms)).unwrap();
    let (_, view) = a.record(agent.heartbeat(0)).unwrap();
    assert_eq!(view.generation, accepted.generation);
    assert!(
        view.desired_json.is_some(),
        "the agent does not know it yet"
    );
    let (_, view) = a.record(agent.heartbeat(accepted.generation)).unwrap();
    assert_eq!(view.generation, accepted.generation);
    assert!(view.desired_json.is_none(), "the agent knows it");
    assert_eq!(view.jobs.len(), 1, "the job is still queued");

    // The sweep marks the silent host overdue; its next heartbeat is a recovery.
    let (flights, _) = a.one_flight_counts();
    let silent = agent.now_ms + 3_600_000;
    let alerts = b
        .sweep(silent, &crate::deadman::DeadManConfig::default())
        .unwrap();
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    agent.now_ms = silent;
    let (recorded, _) = a.record(agent.heartbeat(accepted.generation)).unwrap();
    assert!(recorded.recovered && recorded.durable, "{recorded:?}");
    assert_eq!(
        a.one_flight_counts().0,
        flights,
        "a recovery is not a heartbeat"
    );

    // Revoked through b: a's kept row says active, the host row does not.
    b.revoke_host(host, agent.now_ms).unwrap();
    let refused = a.record(agent.heartbeat(accepted.generation)).unwrap_err();
    assert!(
        matches!(refused, StoreError::HostNotActive { .. }),
        "{refused:?}"
    );
}

#[test]
fn a_delta_that_needs_its_base_or_a_poll_that_carries_more_goes_the_usual_way() {
    let db = Database::create();
    let store = Replica::open(&db);
    let mut agent = Agent::reported(&store);
    // A new agent version: the poll names it, so it is no heartbeat.
    let mut named = agent.heartbeat(0);
    named.versions = Some(("0.2.0".into(), None));
    store.record(named).unwrap();
    assert_eq!(store.one_flight_counts(), (0, 0));
    // A delta of the base (a new guest) needs the stored base read: the usual way.
    let mut next = agent.last.clone();
    next.guests = serde_json::from_value(serde_json::json!([{
        "hostname": "web", "vmid": 101, "status": "running"
    }]))
    .unwrap();
    let base = agent.delta(next, 0);
    let (recorded, view) = store.record(base).unwrap();
    assert!(!recorded.full_report_required);
    assert_eq!(view.report_seq, Some(agent.last.seq));
    assert_eq!(store.one_flight_counts(), (0, 0));
    // Then the heartbeats go in one flight, each on the row the one before wrote.
    for n in 1..=3 {
        let (recorded, view) = store.record(agent.heartbeat(0)).unwrap();
        assert!(!recorded.full_report_required);
        assert_eq!(view.report_seq, Some(agent.last.seq));
        assert_eq!(store.one_flight_counts(), (n, 0));
    }
    assert_eq!(
        store.host_detail(agent.host).unwrap().last_report.unwrap(),
        agent.last
    );
}

#[test]
fn a_heartbeat_whose_session_the_server_ended_goes_the_usual_way_and_the_next_opens_another() {
    let db = Database::create();
    let store = Replica::open(&db);
    let mut agent = Agent::reported(&store);
    store.record(agent.heartbeat(0)).unwrap();
    assert_eq!(store.one_flight_counts(), (1, 0));

    // An administrator holds the host's row and, once the next heartbeat's statement waits
    // for it, ends the heartbeat session under that statement.
    let (url, host) = (db.url().to_owned(), agent.host.to_string());
    let (locked, is_locked) = std::sync::mpsc::channel();
    let administrator = std::thread::spawn(move || {
        let mut holder = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let mut held = holder.transaction().unwrap();
        held.query(
            "SELECT 1 FROM hosts WHERE host_id = $1 FOR UPDATE",
            &[&host],
        )
        .unwrap();
        locked.send(()).unwrap();
        let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let waited_since = std::time::Instant::now();
        // Bounded: the session's wait shows in pg_stat_activity within moments.
        while admin
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE application_name = $1 AND wait_event_type = 'Lock'",
                &[&HEARTBEAT_SESSION_NAME],
            )
            .unwrap()
            .is_empty()
        {
            assert!(
                waited_since.elapsed() < std::time::Duration::from_secs(10),
                "the named heartbeat session never waited for the row"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        held.rollback().unwrap();
    });
    is_locked.recv().unwrap();

    // That heartbeat finds its session gone: recorded the usual way, merged, answered.
    let (recorded, view) = store.record(agent.heartbeat(0)).unwrap();
    administrator.join().unwrap();
    assert!(!recorded.full_report_required, "{recorded:?}");
    assert_eq!(view.report_seq, Some(agent.last.seq));
    assert_eq!(store.one_flight_counts(), (1, 0));
    // The one after goes in one statement on a new session.
    let (_, view) = store.record(agent.heartbeat(0)).unwrap();
    assert_eq!(view.report_seq, Some(agent.last.seq));
    assert_eq!(store.one_flight_counts(), (2, 0));
    assert_eq!(
        store.host_detail(agent.host).unwrap().last_report.unwrap(),
        agent.last
    );
}

#[test]
fn heartbeats_sent_together_go_in_one_statement_and_a_row_another_writer_moved_goes_the_usual_way()
{
    let db = Database::create();
    let (a, b) = (Replica::open(&db), Replica::open(&db));
    let mut agents: Vec<Agent> = (0..20).map(|_| Agent::reported(&a)).collect();
    // The first heartbeat after a usual write reads what waits: alone.
    for agent in &mut agents {
        a.record(agent.heartbeat(0)).unwrap();
    }
    assert_eq!(a.one_flight_counts(), (20, 0));
    assert_eq!(a.heartbeat_batch_counts(), (0, 0));

    // Replica b writes one host's row; then every host's heartbeat reaches a at once.
    b.record(agents[7].heartbeat(0)).unwrap();
    let polls: Vec<PollRecord> = agents.iter_mut().map(|agent| agent.heartbeat(0)).collect();
    let answers = a.rt.block_on(futures::future::join_all(
        polls.into_iter().map(|poll| a.writer.record(poll)),
    ));
    for (agent, answer) in agents.iter().zip(answers) {
        let (recorded, view) = answer.unwrap();
        assert!(!recorded.full_report_required, "{recorded:?}");
        assert_eq!(view.report_seq, Some(agent.last.seq));
    }
    assert_eq!(
        a.heartbeat_batch_counts(),
        (1, 20),
        "one statement for all twenty"
    );
    // Nineteen written by the batch; the moved row was not, and went the usual way, merged on
    // what b stored (written by the batch on a's stale row, it would hold a's merge instead).
    assert_eq!(a.one_flight_counts(), (39, 1));
    for agent in &agents {
        assert_eq!(
            b.host_detail(agent.host).unwrap().last_report.unwrap(),
            agent.last
        );
    }

    // Alone, a heartbeat goes in a batch of one at once.
    a.record(agents[0].heartbeat(0)).unwrap();
    assert_eq!(a.heartbeat_batch_counts(), (2, 21));
}

#[test]
fn a_batch_of_heartbeats_is_planned_once_as_a_walk_of_the_host_key() {
    use crate::store::hosts::{PollWrite, poll_update};
    use crate::store::retention::dollar_placeholders;
    use crate::store::tx::Dialect;

    let db = Database::create();
    let _migrated = Replica::open(&db);
    let mut client = postgres::Client::connect(db.url(), postgres::NoTls).unwrap();
    // A fleet's worth of rows, counted: a plan for an empty table proves nothing.
    client
        .batch_execute(
            "INSERT INTO hosts (host_id, hostname, key_hash, status, enrolled_ms, poll_interval_s)
             SELECT gen_random_uuid()::text, 'h', '\\x00', 'active', 0, 30
             FROM generate_series(1, 20000);
             ANALYZE hosts;
             SET plan_cache_mode = force_generic_plan;",
        )
        .unwrap();
    let batch = dollar_placeholders(poll_update(Dialect::Postgres, PollWrite::GuardedBatch));
    client
        .batch_execute(&format!("PREPARE batch AS {batch}"))
        .unwrap();
    let nulls = vec!["NULL"; 16].join(", ");
    let plan: Vec<String> = client
        .query(&format!("EXPLAIN EXECUTE batch({nulls})"), &[])
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let plan = plan.join("\n");
    assert!(
        plan.contains("Nested Loop") && plan.contains("Index Scan using hosts_pkey on hosts"),
        "{plan}"
    );
    assert!(!plan.contains("Seq Scan on hosts"), "{plan}");
}
