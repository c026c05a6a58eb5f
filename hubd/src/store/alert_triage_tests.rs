//! Acknowledgements and silences on both stores: a silence marks the alerts it covers when
//! they are raised and the open alerts it covers while in force; an acknowledgement holds for
//! the opening it was made on; each is an event; bad ids and hosts are refused.
#![allow(clippy::unwrap_used)]

use bosun_proto::admin::{AlertKind, OpenAlert};
use bosun_proto::alert_triage::{AckAlert, CreateSilence};
use uuid::Uuid;

use super::super::dashboard::DashboardQuery;
use super::super::sqlite::SqliteStore;
use super::super::{EventQuery, Store, StoreError};
use super::{NOW, enroll, pg, poll};
use crate::deadman::DeadManConfig;

const MINUTE: i64 = 60_000;

#[test]
fn alerts_are_acknowledged_and_silenced_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    triage(&SqliteStore::open(dir.path()).unwrap());
}

#[test]
fn alerts_are_acknowledged_and_silenced_on_postgresql() {
    let db = pg::Database::create();
    triage(&db.open());
}

fn open(store: &dyn Store, now_ms: i64) -> Vec<OpenAlert> {
    store
        .dashboard_facts(DashboardQuery {
            host_id: None,
            alert_limit: 0,
            now_ms,
        })
        .unwrap()
        .open_alerts
}

fn silence(host_id: Uuid, kind: Option<AlertKind>, subject: Option<&str>) -> CreateSilence {
    CreateSilence {
        host_id,
        kind,
        subject: subject.map(str::to_owned),
        duration_seconds: 3600,
        reason: "rebuilding the box".into(),
    }
}

fn triage(store: &dyn Store) {
    let (host, key) = enroll(store, None);
    assert!(store.record_polls(vec![poll(host, key)]).unwrap()[0].is_ok());
    let subject = host.to_string();

    // A silence of another subject does not cover the overdue alert; one of its kind does.
    let other = store
        .create_silence(&silence(host, None, Some("guest-1")), NOW)
        .unwrap();
    let covering = store
        .create_silence(&silence(host, Some(AlertKind::HostOverdue), None), NOW)
        .unwrap();
    assert_eq!(covering.hostname, "pve1");
    assert_eq!(covering.until.as_millisecond(), NOW + 60 * MINUTE);
    let listed = store.list_silences(NOW, 10_000).unwrap();
    assert_eq!(
        listed.iter().map(|s| s.id).collect::<Vec<_>>(),
        [other.id, covering.id]
    );

    let overdue_at = NOW + 10 * MINUTE;
    let raised = store.sweep(overdue_at, &DeadManConfig::default()).unwrap();
    assert_eq!(raised.len(), 1, "{raised:?}");
    assert_eq!(raised[0].kind, AlertKind::HostOverdue);
    assert_eq!(raised[0].silenced_by, Some(covering.id));
    assert_eq!(
        store.list_alerts(10).unwrap().last().unwrap().silenced_by,
        Some(covering.id),
        "the history keeps the mark"
    );
    let now = open(store, overdue_at);
    assert_eq!(now.len(), 1);
    assert_eq!(now[0].silenced_by, Some(covering.id));
    assert_eq!(now[0].acknowledged, None);

    // Acknowledging needs the alert to be open.
    let ack = |kind, subject: &str| AckAlert {
        host_id: host,
        kind,
        subject: subject.to_owned(),
        note: "replacing the PSU".into(),
    };
    assert!(matches!(
        store.ack_alert(&ack(AlertKind::GuestLost, &subject), overdue_at),
        Err(StoreError::UnknownAlert { .. })
    ));
    assert!(matches!(
        store.ack_alert(&ack(AlertKind::HostOverdue, "nope"), overdue_at),
        Err(StoreError::UnknownAlert { .. })
    ));
    // Too short to be typed back as a prefix of the subject.
    assert!(matches!(
        store.ack_alert(&ack(AlertKind::HostOverdue, &subject[..3]), overdue_at),
        Err(StoreError::UnknownAlert { .. })
    ));
    // The subject typed back as the views print it (a prefix of the host id, any case).
    let acked = store
        .ack_alert(
            &ack(AlertKind::HostOverdue, &subject[..8].to_ascii_uppercase()),
            overdue_at + 1,
        )
        .unwrap();
    assert_eq!(acked.subject, subject);
    assert_eq!(
        acked.acknowledged.as_ref().unwrap().note,
        "replacing the PSU"
    );
    let now = open(store, overdue_at + 2);
    assert_eq!(
        now[0].acknowledged.as_ref().unwrap().at.as_millisecond(),
        overdue_at + 1
    );

    // Ending the silence early unmarks the open alert; it cannot be ended twice.
    store.remove_silence(covering.id, overdue_at + 3).unwrap();
    assert!(matches!(
        store.remove_silence(covering.id, overdue_at + 4),
        Err(StoreError::UnknownSilence { .. })
    ));
    assert!(matches!(
        store.remove_silence(999_999, overdue_at + 4),
        Err(StoreError::UnknownSilence { .. })
    ));
    assert_eq!(open(store, overdue_at + 4)[0].silenced_by, None);
    assert_eq!(
        store.list_silences(overdue_at + 4, 10_000).unwrap().len(),
        1,
        "the other one stays"
    );
    // A silence ends by itself too.
    assert!(
        store
            .list_silences(NOW + 61 * MINUTE, 10_000)
            .unwrap()
            .is_empty()
    );

    // The host comes back, goes silent again: the new opening starts unacknowledged and,
    // with no silence in force, unsilenced.
    let mut back = poll(host, key);
    back.now_ms = overdue_at + MINUTE;
    assert!(store.record_polls(vec![back]).unwrap()[0].is_ok());
    assert!(open(store, overdue_at + MINUTE).is_empty());
    let again = overdue_at + 20 * MINUTE;
    let raised = store.sweep(again, &DeadManConfig::default()).unwrap();
    assert_eq!(raised.len(), 1);
    assert_eq!(raised[0].silenced_by, None);
    let now = open(store, again);
    assert_eq!(now[0].acknowledged, None, "{now:?}");

    let kinds: Vec<String> = store
        .list_events(EventQuery {
            host_id: Some(host),
            after: None,
            limit: 100,
        })
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .filter(|k| k.starts_with("alert_"))
        .collect();
    assert_eq!(
        kinds,
        [
            "alert_silenced",
            "alert_silenced",
            "alert_acknowledged",
            "alert_unsilenced"
        ]
    );

    // Refusals: an unknown host, and more silences than a host may have.
    assert!(matches!(
        store.create_silence(&silence(Uuid::new_v4(), None, None), again),
        Err(StoreError::UnknownHost { .. })
    ));
    for _ in 1..super::super::alert_triage::MAX_SILENCES_PER_HOST {
        store
            .create_silence(&silence(host, None, None), again)
            .unwrap();
    }
    assert!(matches!(
        store.create_silence(&silence(host, None, None), again),
        Err(StoreError::TooManySilences { .. })
    ));
}

#[test]
fn a_sweep_paging_hundreds_of_hosts_at_once_marks_and_alerts_each_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    many_hosts_overdue(&SqliteStore::open(dir.path()).unwrap());
}

#[test]
fn a_sweep_paging_hundreds_of_hosts_at_once_marks_and_alerts_each_on_postgresql() {
    let db = pg::Database::create();
    many_hosts_overdue(&db.open());
}

/// 300 of 601 hosts fall silent together (not a mass silence: fewer than half): the sweep
/// writes them in chunks (256, then 32, 8 and 4), each marked overdue once with its event,
/// then each paged once, its alert under its own host's silence and no other's.
fn many_hosts_overdue(store: &dyn Store) {
    let hosts: Vec<(Uuid, _)> = (0..601).map(|_| enroll(store, None)).collect();
    let polls = hosts.iter().map(|(host, key)| poll(*host, *key)).collect();
    assert!(store.record_polls(polls).unwrap().iter().all(Result::is_ok));
    let (silent, polling) = hosts.split_at(300);
    let silenced = silent[7].0;
    let covering = store
        .create_silence(&silence(silenced, Some(AlertKind::HostOverdue), None), NOW)
        .unwrap();
    store
        .create_silence(&silence(silent[8].0, None, Some("guest-1")), NOW)
        .unwrap();
    let config = DeadManConfig::default();
    // The others keep polling.
    let keep_polling = |now_ms| {
        let polls = polling
            .iter()
            .map(|(host, key)| super::PollRecord {
                now_ms,
                ..poll(*host, *key)
            })
            .collect();
        assert!(store.record_polls(polls).unwrap().iter().all(Result::is_ok));
    };

    let overdue_at = NOW + 10 * MINUTE;
    keep_polling(overdue_at);
    let raised = store.sweep(overdue_at, &config).unwrap();
    assert!(
        raised.is_empty(),
        "paged before the silence window: {raised:?}"
    );
    let overdue: Vec<Uuid> = store
        .list_events(EventQuery {
            host_id: None,
            after: None,
            limit: 10_000,
        })
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "overdue")
        .filter_map(|e| e.host_id)
        .collect();
    let mut expected: Vec<Uuid> = silent.iter().map(|(host, _)| *host).collect();
    expected.sort();
    let mut marked = overdue.clone();
    marked.sort();
    assert_eq!(marked, expected, "each silent host's `overdue` event, once");

    let paged_at = overdue_at + i64::try_from(config.silence_window.as_millis()).unwrap();
    keep_polling(paged_at);
    let raised = store.sweep(paged_at, &config).unwrap();
    let mut paged: Vec<Uuid> = raised.iter().filter_map(|a| a.host_id).collect();
    paged.sort();
    assert_eq!(paged, expected, "each silent host paged once");
    assert!(raised.iter().all(|a| a.kind == AlertKind::HostOverdue));
    let ids: std::collections::BTreeSet<u64> = raised.iter().map(|a| a.id).collect();
    assert_eq!(ids.len(), 300, "each alert its own id");
    for alert in &raised {
        let expected = (alert.host_id == Some(silenced)).then_some(covering.id);
        assert_eq!(alert.silenced_by, expected, "{alert:?}");
        assert!(alert.message.contains(alert.hostname.as_deref().unwrap()));
    }
    // What the sweep returned is what was stored: each host's alert open, under its silence.
    let stored: Vec<(Uuid, Option<u64>)> = open(store, paged_at)
        .iter()
        .filter(|a| a.kind == AlertKind::HostOverdue)
        .map(|a| (a.host_id, a.silenced_by))
        .collect();
    assert_eq!(stored.len(), 300);
    for (host, silenced_by) in stored {
        assert!(expected.binary_search(&host).is_ok());
        assert_eq!(silenced_by, (host == silenced).then_some(covering.id));
    }
    assert!(store.sweep(paged_at + MINUTE, &config).unwrap().is_empty());
}
