//! Capabilities and labels on both stores: a poll stores what the host says it is and the
//! words a filter matches, labels change as one bounded change recorded with who made it, and
//! a filter of labels and capability words finds exactly the hosts carrying all of them.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use bosun_proto::capabilities::{
    HostCapabilities, Interface, InterfaceKind, LabelChange, LinkState, MAX_LABELS,
};
use uuid::Uuid;

use super::super::host_profile::HostFilter;
use super::super::sqlite::SqliteStore;
use super::super::{EventQuery, Store, StoreError};
use super::{NOW, enroll, pg, poll};

/// A node's description as an agent sends it.
pub(in crate::store) fn sample_capabilities() -> HostCapabilities {
    HostCapabilities {
        arch: "x86_64".into(),
        cpu_model: Some("<b>Simulated</b> CPU".into()),
        cpu_count: 16,
        cpu_sockets: Some(1),
        pve_version: Some("pve-manager/9.1.1/abcdef".into()),
        storage_kinds: vec!["dir".into(), "lvmthin".into()],
        plan_targets: Vec::new(),
        interfaces: vec![Interface {
            name: "vmbr0".into(),
            kind: InterfaceKind::Bridge,
            mac: Some("aa:bb:cc:dd:ee:ff".into()),
            state: LinkState::Up,
            speed_mbps: None,
        }],
        helper: true,
        tunnel: false,
        smart: false,
        address_pool: Some(true),
    }
}

/// A change setting `pairs`.
pub(in crate::store) fn labels(pairs: &[(&str, &str)]) -> LabelChange {
    LabelChange {
        set: pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        remove: Vec::new(),
    }
}

fn filter(labels: &[(&str, &str)], capabilities: &[&str]) -> HostFilter {
    HostFilter {
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        capabilities: capabilities.iter().map(|c| (*c).to_owned()).collect(),
    }
}

fn sorted(mut ids: Vec<Uuid>) -> Vec<Uuid> {
    ids.sort();
    ids
}

fn profiles_hold(store: &dyn Store) {
    let (a, a_key) = enroll(store, None);
    let (b, b_key) = enroll(store, None);
    // Host a says what it is; host b's poll says nothing of it.
    let mut first = poll(a, a_key);
    first.capabilities = Some(sample_capabilities());
    assert!(store.record_polls(vec![first]).unwrap()[0].is_ok());
    assert!(store.record_polls(vec![poll(b, b_key)]).unwrap()[0].is_ok());
    let shown = store.host_detail(a).unwrap();
    assert_eq!(shown.capabilities, Some(sample_capabilities()));
    assert_eq!(shown.capabilities_at.unwrap().as_millisecond(), NOW);
    assert_eq!(store.host_detail(b).unwrap().capabilities, None);

    // A later description replaces the earlier one and its words.
    let mut changed = sample_capabilities();
    changed.tunnel = true;
    changed.storage_kinds = vec!["pbs".into()];
    let mut second = poll(a, a_key);
    second.now_ms = NOW + 1_000;
    if let super::super::ReportUpdate::Full {
        report, json, seq, ..
    } = &mut second.report
    {
        report.seq = 2;
        *seq = 2;
        *json = serde_json::to_string(&**report).unwrap();
    }
    second.capabilities = Some(changed.clone());
    assert!(store.record_polls(vec![second]).unwrap()[0].is_ok());
    assert_eq!(store.host_detail(a).unwrap().capabilities, Some(changed));
    assert_eq!(
        store
            .hosts_matching(&filter(&[], &["storage=lvmthin"]))
            .unwrap(),
        Vec::<Uuid>::new(),
        "the old description's words are gone"
    );

    // Labels: set, change and remove in one change each; every change is an event with its
    // token's name.
    let after = crate::actor::on_thread(Some("alice".into()), || {
        store.change_host_labels(a, &labels(&[("site", "fra"), ("tier", "gold")]), NOW)
    })
    .unwrap();
    assert_eq!(after.len(), 2);
    store
        .change_host_labels(b, &labels(&[("site", "fra")]), NOW)
        .unwrap();
    let mut change = labels(&[("tier", "silver")]);
    change.remove.push("nope".into());
    let after = store.change_host_labels(a, &change, NOW).unwrap();
    assert_eq!(after["tier"], "silver");
    assert_eq!(store.host_detail(a).unwrap().summary.labels, after);
    let events = store
        .list_events(EventQuery {
            host_id: Some(a),
            after: None,
            limit: 100,
        })
        .unwrap();
    let labeled: Vec<_> = events.iter().filter(|e| e.kind == "host_labeled").collect();
    assert_eq!(labeled.len(), 2, "{events:?}");
    assert!(
        labeled
            .iter()
            .any(|e| e.detail["by"] == "alice" && e.detail["set"]["site"] == "fra"),
        "{labeled:?}"
    );
    // A change that changes nothing records nothing.
    store
        .change_host_labels(a, &labels(&[("site", "fra")]), NOW)
        .unwrap();
    let again = store
        .list_events(EventQuery {
            host_id: Some(a),
            after: None,
            limit: 100,
        })
        .unwrap();
    assert_eq!(again.len(), events.len());

    // Filters: every term must match.
    assert_eq!(
        sorted(
            store
                .hosts_matching(&filter(&[("site", "fra")], &[]))
                .unwrap()
        ),
        sorted(vec![a, b])
    );
    assert_eq!(
        store
            .hosts_matching(&filter(&[("site", "fra")], &["tunnel", "bridge=vmbr0"]))
            .unwrap(),
        vec![a]
    );
    assert_eq!(
        store
            .hosts_matching(&filter(&[("site", "fra"), ("tier", "gold")], &[]))
            .unwrap(),
        Vec::<Uuid>::new()
    );

    // Too many labels: refused whole, nothing changed.
    let many: BTreeMap<String, String> = (0..MAX_LABELS)
        .map(|i| (format!("k{i}"), "v".to_owned()))
        .collect();
    let err = store
        .change_host_labels(
            a,
            &LabelChange {
                set: many,
                remove: Vec::new(),
            },
            NOW,
        )
        .unwrap_err();
    assert!(
        matches!(err, StoreError::TooManyLabels { count, limit: MAX_LABELS, .. } if count == MAX_LABELS + 2),
        "{err:?}"
    );
    assert_eq!(store.host_detail(a).unwrap().summary.labels, after);
    assert!(matches!(
        store.change_host_labels(Uuid::new_v4(), &labels(&[("a", "b")]), NOW),
        Err(StoreError::UnknownHost { .. })
    ));
}

#[test]
fn capabilities_and_labels_hold_on_both_stores() {
    let dir = tempfile::tempdir().unwrap();
    profiles_hold(&SqliteStore::open(dir.path()).unwrap());
    let db = pg::Database::create();
    profiles_hold(&db.open());
}
