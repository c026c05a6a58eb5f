//! The hub resolves typed id prefixes the same way on both backends: a unique prefix to its
//! id, an ambiguous one refused listing its candidates (bounded), an unknown one and one too
//! short refused.
#![allow(clippy::unwrap_used)]

use uuid::Uuid;

use super::super::id_lookup::IdKind;
use super::super::sqlite::SqliteStore;
use super::super::{Enrollment, NewEnrollToken, NewJob, Store, StoreError};
use super::{NOW, pg};
use crate::secret::{self, SecretHash, SecretKind};

/// Enrolls `host_id` as `hostname` straight through the store.
fn enroll_as(store: &dyn Store, host_id: Uuid, hostname: &str) {
    let (token, token_hash) = secret::mint(SecretKind::Enrollment);
    store
        .create_enroll_token(NewEnrollToken {
            hash: token_hash,
            created_ms: NOW,
            expires_ms: NOW + 60_000,
            require_approval: false,
            note: None,
            restore_host: None,
        })
        .unwrap();
    let (_, key_hash) = secret::mint(SecretKind::HostKey);
    store
        .enroll(Enrollment {
            token_hash: SecretHash::of(token.expose()),
            host_id,
            key_hash,
            hostname: hostname.into(),
            agent_version: "0.1.0".into(),
            pve_version: None,
            poll_interval_s: 30,
            now_ms: NOW,
        })
        .unwrap();
}

fn id(text: &str) -> Uuid {
    Uuid::parse_str(text).unwrap()
}

#[test]
fn id_prefixes_resolve_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    prefixes_resolve(&SqliteStore::open(dir.path()).unwrap());
}

#[test]
fn id_prefixes_resolve_on_postgresql() {
    let db = pg::Database::create();
    prefixes_resolve(&db.open());
}

fn prefixes_resolve(store: &dyn Store) {
    let alpha = id("6ac09cbf-0000-4000-8000-000000000001");
    let bravo = id("6ac09cbf-0000-4000-8000-000000000002");
    let charlie = id("01a213eb-7000-4000-8000-000000000003");
    enroll_as(store, alpha, "alpha");
    enroll_as(store, bravo, "bravo");
    enroll_as(store, charlie, "charlie");

    // Unique: as the views print it, in capitals, without hyphens, whole.
    for typed in [
        "01a2",
        "01a213eb",
        "01A213EB-7",
        "01a213eb7000",
        &charlie.to_string(),
    ] {
        assert_eq!(
            store.resolve_id(IdKind::Host, typed).unwrap(),
            charlie,
            "{typed}"
        );
    }
    let near = store.resolve_id(IdKind::Host, "6ac09cbf-0000-4000-8000-00000000000");
    assert!(
        matches!(near, Err(StoreError::AmbiguousId { .. })),
        "{near:?}"
    );
    assert_eq!(
        store
            .resolve_id(IdKind::Host, "6ac09cbf-0000-4000-8000-000000000002")
            .unwrap(),
        bravo
    );

    // Ambiguous: both candidates listed with their names, in order.
    match store.resolve_id(IdKind::Host, "6ac09cbf") {
        Err(StoreError::AmbiguousId {
            candidates, more, ..
        }) => {
            let listed: Vec<(Uuid, &str)> =
                candidates.iter().map(|c| (c.id, c.name.as_str())).collect();
            assert_eq!(listed, [(alpha, "alpha"), (bravo, "bravo")]);
            assert!(!more);
        }
        other => panic!("{other:?}"),
    }

    // Unknown, too short, not hex, and a whole id the hub does not hold.
    let unknown = store.resolve_id(IdKind::Host, "ffff0000");
    assert!(
        matches!(
            unknown,
            Err(StoreError::UnknownId {
                kind: IdKind::Host,
                ..
            })
        ),
        "{unknown:?}"
    );
    let whole = store.resolve_id(IdKind::Host, &Uuid::new_v4().to_string());
    assert!(
        matches!(whole, Err(StoreError::UnknownId { .. })),
        "{whole:?}"
    );
    for bad in ["01a", "", "alpha", "6ac%", "6ac_", "-6ac0"] {
        let err = store.resolve_id(IdKind::Host, bad);
        assert!(
            matches!(err, Err(StoreError::BadIdPrefix { .. })),
            "{bad}: {err:?}"
        );
    }

    // Jobs, across hosts; a host's id does not resolve as a job's.
    let mut jobs = Vec::new();
    for n in 0..12u128 {
        let job_id = Uuid::from_u128(0x5eed_0000_0000_4000_8000_0000_0000_0000 | n);
        store
            .submit_job(NewJob {
                job_id,
                host_id: if n % 2 == 0 { alpha } else { charlie },
                kind: "restore_now",
                document: job_id.as_bytes().to_vec(),
                signature: "sig".into(),
                now_ms: NOW,
                priority: 0,
            })
            .unwrap();
        jobs.push(job_id);
    }
    let last = jobs[11].to_string();
    assert_eq!(
        store.resolve_id(IdKind::Job, &last[..36]).unwrap(),
        jobs[11]
    );
    assert!(matches!(
        store.resolve_id(IdKind::Job, "01a213eb"),
        Err(StoreError::UnknownId {
            kind: IdKind::Job,
            ..
        })
    ));
    // Twelve jobs share `5eed0000`: ten listed, in order, named by kind and host, and "more".
    match store.resolve_id(IdKind::Job, "5eed0000") {
        Err(err @ StoreError::AmbiguousId { .. }) => {
            let text = err.to_string();
            let StoreError::AmbiguousId {
                candidates, more, ..
            } = err
            else {
                unreachable!()
            };
            assert_eq!(candidates.len(), bosun_proto::ids::MAX_CANDIDATES);
            assert!(more);
            assert_eq!(candidates[0].id, jobs[0]);
            assert_eq!(candidates[0].name, "restore_now on alpha");
            assert_eq!(candidates[1].name, "restore_now on charlie");
            assert!(text.contains("and more"), "{text}");
            assert!(!text.contains(&jobs[11].to_string()), "{text}");
        }
        other => panic!("{other:?}"),
    }
}
