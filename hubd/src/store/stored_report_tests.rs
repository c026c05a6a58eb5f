//! The stored report kept in two parts holds exactly what the rule of change-only reports
//! says, on both stores: an agent that changes its host, sends full reports and deltas, and
//! loses some answers (so it builds on the report before the stored one) is followed by a model
//! of the rule, and after every poll the report the hub shows is the model's.

use bosun_proto::delta::ReportDelta;
use bosun_proto::health::{GaugeHealth, HostHealth};
use bosun_proto::report::{GuestReport, GuestStatus, StateReport, TunnelHealth};
use proptest::prelude::*;
use uuid::Uuid;

use super::super::ReportUpdate;
use super::super::backend::Backend;
use super::super::stored_report::{Live, stored_report};
use super::{enroll, poll};

/// `docs/proto/report.json` with host health, without audit entries, its guests in vmid order.
fn observed() -> StateReport {
    let mut report: StateReport =
        serde_json::from_str(include_str!("../../../docs/proto/report.json")).unwrap();
    report.audit.clear();
    let gauge = |usage| GaugeHealth {
        usage,
        high: 0.9,
        low: 0.8,
        raised: false,
        since: None,
    };
    report.host_health = Some(HostHealth {
        cpu: Some(gauge(0.1)),
        memory: Some(gauge(0.4)),
        ..HostHealth::default()
    });
    report.guests.sort_by_key(|g| g.vmid);
    report
}

/// What changes on the host between two polls.
#[derive(Debug, Clone)]
enum Change {
    /// A new CPU figure (the live part).
    Cpu(u8),
    /// The CPU gauge raised or cleared (the live part; its verdict changes).
    CpuRaised(bool),
    /// A new agent version (the live part).
    Agent(u8),
    /// The tunnel raised or cleared (the live part).
    Tunnel(bool),
    /// A guest stopped or started (the base).
    GuestRunning(bool),
    /// A guest added or removed (the base).
    ExtraGuest(bool),
}

impl Change {
    fn apply(&self, report: &mut StateReport) {
        match self {
            Self::Cpu(n) => {
                if let Some(host) = report.host.as_mut() {
                    host.cpu_usage = f64::from(*n) / 100.0;
                }
            }
            Self::CpuRaised(raised) => {
                if let Some(cpu) = report.host_health.as_mut().and_then(|h| h.cpu.as_mut()) {
                    cpu.raised = *raised;
                }
            }
            Self::Agent(n) => report.versions.agent = format!("0.{n}.0"),
            Self::Tunnel(raised) => {
                report.tunnel = Some(TunnelHealth {
                    healthy: !raised,
                    detail: String::new(),
                    down_since: None,
                    raised: *raised,
                    managed: None,
                });
            }
            Self::GuestRunning(running) => {
                if let Some(guest) = report.guests.first_mut() {
                    guest.status = if *running {
                        GuestStatus::Running
                    } else {
                        GuestStatus::Stopped
                    };
                }
            }
            Self::ExtraGuest(present) => {
                report.guests.retain(|g| g.vmid != 999);
                if *present {
                    report.guests.push(GuestReport {
                        guest_id: Some(Uuid::from_u128(999)),
                        vmid: 999,
                        // A VM: its kind is kept through full reports and deltas alike.
                        kind: bosun_proto::desired::GuestKind::Qemu,
                        hostname: "extra".into(),
                        status: GuestStatus::Running,
                        resources: None,
                        controller_digest: None,
                        controller_expected: None,
                        addresses: Vec::new(),
                    });
                }
            }
        }
    }
}

/// One step of the agent.
#[derive(Debug, Clone)]
enum Step {
    /// The host changes.
    Change(Change),
    /// A full report.
    Full,
    /// A delta on the last report the hub acknowledged; its answer lost when `lost` (the
    /// agent's next delta builds on the same report).
    Delta { lost: bool },
    /// The last delta sent, once more (a late retry).
    Replay,
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        (0u8..80).prop_map(Change::Cpu),
        any::<bool>().prop_map(Change::CpuRaised),
        (0u8..5).prop_map(Change::Agent),
        any::<bool>().prop_map(Change::Tunnel),
        any::<bool>().prop_map(Change::GuestRunning),
        any::<bool>().prop_map(Change::ExtraGuest),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => change().prop_map(Step::Change),
        1 => Just(Step::Full),
        4 => any::<bool>().prop_map(|lost| Step::Delta { lost }),
        1 => Just(Step::Replay),
    ]
}

/// The rule of change-only reports, as the agent sees the hub.
#[derive(Debug, Default)]
struct Model {
    current: Option<StateReport>,
    previous: Option<StateReport>,
}

impl Model {
    /// What the hub holds after `delta`, and whether it applied it.
    fn delta(&mut self, delta: &ReportDelta) -> bool {
        let newer = self.current.as_ref().is_none_or(|c| delta.seq > c.seq);
        let on = |r: &Option<StateReport>| r.as_ref().filter(|r| r.seq == delta.base_seq).cloned();
        match (newer, on(&self.current), on(&self.previous)) {
            (true, Some(base), _) => {
                let mut merged = base.clone();
                merged.apply(delta);
                self.previous = Some(base);
                self.current = Some(merged);
                true
            }
            (true, None, Some(base)) => {
                let mut merged = base;
                merged.apply(delta);
                self.current = Some(merged);
                true
            }
            _ => false,
        }
    }
}

/// Runs `steps` against `store` for a new host, checking the report it shows after every poll.
fn follow(store: &impl Backend, steps: &[Step]) -> Result<(), TestCaseError> {
    let (host, key) = enroll(store, None);
    let mut observed = observed();
    let mut model = Model::default();
    // The agent: its next number, the report the hub acknowledged last, its last delta.
    let mut next = 1u64;
    let mut acked: Option<StateReport> = None;
    let mut last: Option<ReportDelta> = None;
    for step in steps {
        let (update, lost, applied) = match step {
            Step::Change(change) => {
                change.apply(&mut observed);
                continue;
            }
            Step::Full => {
                let mut report = observed.clone();
                report.seq = next;
                model.current = Some(report.clone());
                model.previous = None;
                (ReportUpdate::full(report).unwrap(), false, true)
            }
            Step::Delta { lost } => {
                let Some(base) = acked.as_ref() else { continue };
                let delta = ReportDelta::between(base, base.seq, &observed, next);
                let applied = model.delta(&delta);
                last = Some(delta.clone());
                (ReportUpdate::Delta(Box::new(delta)), *lost, applied)
            }
            Step::Replay => {
                let Some(delta) = last.clone() else { continue };
                let applied = model.delta(&delta);
                (ReportUpdate::Delta(Box::new(delta)), false, applied)
            }
        };
        let sent = match &update {
            ReportUpdate::Full { seq, .. } => *seq,
            ReportUpdate::Delta(delta) => delta.seq,
        };
        next += 1;
        let mut record = poll(host, key);
        record.report = update;
        let (recorded, view) = store.record_polls(vec![record]).unwrap().remove(0).unwrap();
        prop_assert_eq!(view.report_seq, model.current.as_ref().map(|r| r.seq));
        prop_assert_eq!(recorded.full_report_required, !applied, "{:?}", step);
        if !lost {
            acked = if applied {
                let mut report = observed.clone();
                report.seq = sent;
                Some(report)
            } else {
                None
            };
        }
        let host_id = host.to_string();
        let shown = store
            .read_tx("read stored report", |tx| stored_report(tx, &host_id))
            .unwrap();
        prop_assert_eq!(shown.as_ref(), model.current.as_ref(), "after {:?}", step);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn the_stored_report_follows_the_rule_on_sqlite(steps in prop::collection::vec(step(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let store = super::SqliteStore::open(dir.path()).unwrap();
        follow(&store, &steps)?;
    }
}

#[test]
fn the_stored_report_follows_the_rule_on_postgresql() {
    let db = super::pg::Database::create();
    let store = db.open();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 24,
        ..ProptestConfig::default()
    });
    runner
        .run(&prop::collection::vec(step(), 1..40), |steps| {
            follow(&store, &steps)
        })
        .unwrap();
}

proptest! {
    #[test]
    fn a_delta_of_the_live_part_merges_there_as_into_the_whole_report(
        changes in prop::collection::vec(change(), 0..6),
        lost_host in any::<bool>(),
    ) {
        let base = observed();
        let mut now = base.clone();
        for change in changes.iter().filter(|c| !matches!(c, Change::GuestRunning(_) | Change::ExtraGuest(_))) {
            change.apply(&mut now);
        }
        if lost_host {
            now.host = None;
        }
        let delta = ReportDelta::between(&base, 1, &now, 2);
        prop_assert!(crate::report_alerts::delta_is_live_only(&delta));
        let mut whole = base.clone();
        whole.apply(&delta);
        let live = Live::of(&base);
        // What the alerts follow, read without applying the delta, is the applied part's.
        let merged = live.clone().applied(&delta);
        prop_assert_eq!(live.verdict_after(&delta), merged.verdict());
        let mut parts = base.clone();
        merged.put_into(&mut parts);
        parts.seq = whole.seq;
        prop_assert_eq!(parts, whole);
    }
}

#[test]
fn reports_stored_whole_before_the_split_carry_on_as_bases() {
    use rusqlite::{Connection, params};

    use super::super::sqlite::schema;
    use super::super::sqlite::{DB_FILE, SqliteStore};

    let dir = tempfile::tempdir().unwrap();
    let (_, key) = crate::secret::mint(crate::secret::SecretKind::HostKey);
    let host = Uuid::new_v4();
    // Report 7, and report 6 before it, as a hub at schema 17 kept them in the host row.
    let mut six = observed();
    six.seq = 6;
    let mut seven = six.clone();
    Change::GuestRunning(false).apply(&mut seven);
    seven.seq = 7;
    {
        let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
        for migration in &schema::MIGRATIONS[..17] {
            conn.execute_batch(migration).unwrap();
        }
        conn.pragma_update(None, "user_version", 17).unwrap();
        conn.execute(
            "INSERT INTO hosts (host_id, hostname, key_hash, status, enrolled_ms, poll_interval_s,
                                report, report_seq, prev_report, prev_seq)
             VALUES (?1, 'pve1', ?2, 'active', 0, 30, ?3, 7, ?4, 6)",
            params![
                host.to_string(),
                key.0.as_slice(),
                serde_json::to_string(&seven).unwrap(),
                serde_json::to_string(&six).unwrap()
            ],
        )
        .unwrap();
    }
    let store = SqliteStore::open(dir.path()).unwrap();
    let shown = |store: &SqliteStore| {
        store
            .read_tx("read stored report", |tx| {
                stored_report(tx, &host.to_string())
            })
            .unwrap()
    };
    assert_eq!(shown(&store).as_ref(), Some(&seven));
    let send = |delta: ReportDelta| {
        let mut record = poll(host, key);
        record.report = ReportUpdate::Delta(Box::new(delta));
        let (recorded, view) = Backend::record_polls(&store, vec![record])
            .unwrap()
            .remove(0)
            .unwrap();
        assert!(!recorded.full_report_required);
        view.report_seq
    };
    // A delta of the live part on report 7: its live part is taken from the base.
    let mut eight = seven.clone();
    Change::Cpu(55).apply(&mut eight);
    assert_eq!(send(ReportDelta::between(&seven, 7, &eight, 8)), Some(8));
    eight.seq = 8;
    assert_eq!(shown(&store).as_ref(), Some(&eight));
    // A delta on report 7 again (the answer to 8 was lost): 7 is now the previous report.
    let mut nine = seven.clone();
    Change::GuestRunning(true).apply(&mut nine);
    assert_eq!(send(ReportDelta::between(&seven, 7, &nine, 9)), Some(9));
    nine.seq = 9;
    assert_eq!(shown(&store).as_ref(), Some(&nine));
}

#[test]
fn a_full_report_repeating_the_stored_base_rewrites_only_its_live_part() {
    use rusqlite::{Connection, params};

    use super::super::sqlite::{DB_FILE, SqliteStore};

    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let (host, key) = enroll(&store, None);
    let send = |report: &StateReport| {
        let mut record = poll(host, key);
        record.report = ReportUpdate::full(report.clone()).unwrap();
        Backend::record_polls(&store, vec![record])
            .unwrap()
            .remove(0)
            .unwrap()
            .0
    };
    let mut first = observed();
    first.seq = 1;
    assert!(send(&first).watch.iter().any(|w| w.opened));
    // The stored base, spelled differently (as an older hub might have): a full report with
    // the same content leaves it as it is.
    let sql = Connection::open(dir.path().join(DB_FILE)).unwrap();
    let spelled = serde_json::to_string_pretty(&first).unwrap();
    sql.execute(
        "UPDATE host_reports SET report = ?1 WHERE host_id = ?2",
        params![spelled, host.to_string()],
    )
    .unwrap();
    let base = || -> String {
        sql.query_row(
            "SELECT report FROM host_reports WHERE host_id = ?1",
            params![host.to_string()],
            |r| r.get(0),
        )
        .unwrap()
    };
    let mut second = first.clone();
    second.seq = 2;
    Change::Cpu(33).apply(&mut second);
    let recorded = send(&second);
    assert_eq!(recorded.watch, Vec::new(), "nothing judged anew");
    assert_eq!(base(), spelled);
    let shown = store
        .read_tx("read stored report", |tx| {
            stored_report(tx, &host.to_string())
        })
        .unwrap();
    assert_eq!(shown.as_ref(), Some(&second));
    // Its live part's verdict moved (the CPU gauge raised): judged again, base still kept.
    let mut third = second.clone();
    third.seq = 3;
    Change::CpuRaised(true).apply(&mut third);
    let recorded = send(&third);
    assert!(
        recorded
            .watch
            .iter()
            .any(|w| w.opened && w.event == "host_cpu_high"),
        "{:?}",
        recorded.watch
    );
    assert_eq!(base(), spelled);
    // A guest changed: a new base.
    let mut fourth = third.clone();
    fourth.seq = 4;
    Change::GuestRunning(false).apply(&mut fourth);
    send(&fourth);
    assert_ne!(base(), spelled);
    let shown = store
        .read_tx("read stored report", |tx| {
            stored_report(tx, &host.to_string())
        })
        .unwrap();
    assert_eq!(shown.as_ref(), Some(&fourth));
}
