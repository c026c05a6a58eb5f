//! The audit trail through the admin API: `GET /v1/admin/audit` needs the admin token, filters
//! by host, guest (read from each entry's detail) and time, pages newest first with a cursor
//! that neither skips nor repeats an entry, and answers a bad query 400 with its code.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use bosun_proto::admin::AuditPage;
use bosun_proto::report::{AuditEntry, StateReport};
use common::{TestHub, error_code, full, report, send};
use reqwest::{Method, StatusCode};
use serde_json::json;
use uuid::Uuid;

const GUEST_ODD: &str = "0b6f4f2e-6c1a-4d6e-9a51-2f0c8d3e7a10";
const GUEST_EVEN: &str = "5d1c2a7e-93b4-4f60-8e2d-7a9c0b1f3e42";

/// Entry `seq` of a host, at minute `minute` past 10:00, about the odd or even guest.
fn entry(seq: u64, minute: u64) -> AuditEntry {
    let guest = if seq % 2 == 1 { GUEST_ODD } else { GUEST_EVEN };
    AuditEntry {
        seq,
        at: format!("2026-11-20T10:{minute:02}:00Z").parse().unwrap(),
        action: "backup.finished".into(),
        detail: json!({ "guest_id": guest, "vmid": 100 + seq, "detail": { "seq": seq } }),
    }
}

/// Two hosts: `pve-a` with entries 1..=5 at minutes 1, 3, 5, 7, 9; `pve-b` with 1..=2 at
/// minutes 2 and 4.
async fn hub_with_trail() -> (TestHub, Uuid, Uuid) {
    let hub = TestHub::start().await;
    let (a, key_a) = hub.enroll("pve-a").await;
    let (b, key_b) = hub.enroll("pve-b").await;
    let with = |audit| StateReport { audit, ..report() };
    send(
        &hub,
        a,
        &key_a,
        &full(&with((1..=5).map(|s| entry(s, 2 * s - 1)).collect())),
    )
    .await;
    send(
        &hub,
        b,
        &key_b,
        &full(&with((1..=2).map(|s| entry(s, 2 * s)).collect())),
    )
    .await;
    (hub, a, b)
}

async fn page(hub: &TestHub, query: &str) -> AuditPage {
    let resp = hub
        .admin(Method::GET, &format!("/v1/admin/audit{query}"), None)
        .await;
    assert_eq!(resp.status(), StatusCode::OK, "{query}");
    resp.json().await.unwrap()
}

/// (host, seq) of each entry.
fn ids(page: &AuditPage) -> Vec<(Uuid, u64)> {
    page.entries.iter().map(|e| (e.host_id, e.seq)).collect()
}

#[tokio::test]
async fn the_trail_needs_the_admin_token() {
    let (hub, _, _) = hub_with_trail().await;
    for token in [None, Some("bosun-admin-wrong")] {
        let resp = hub
            .request(Method::GET, "/v1/admin/audit", token, None)
            .await;
        assert_eq!(
            error_code(resp).await,
            (StatusCode::UNAUTHORIZED, "unauthorized".into())
        );
    }
}

#[tokio::test]
async fn the_trail_reads_newest_first_by_host_guest_and_time() {
    let (hub, a, b) = hub_with_trail().await;
    let all = page(&hub, "").await;
    assert_eq!(
        ids(&all),
        [(a, 5), (a, 4), (a, 3), (b, 2), (a, 2), (b, 1), (a, 1)]
    );
    assert_eq!(all.next_before, None);
    let first = &all.entries[0];
    assert_eq!(first.hostname.as_deref(), Some("pve-a"));
    assert_eq!(first.action, "backup.finished");
    assert_eq!(first.detail["guest_id"], GUEST_ODD);
    assert_eq!(first.at.to_string(), "2026-11-20T10:09:00Z");

    assert_eq!(
        ids(&page(&hub, &format!("?host={b}")).await),
        [(b, 2), (b, 1)]
    );
    // A prefix of the host's id, as bosunctl and the dashboard show it, names the host too.
    let prefix = &b.simple().to_string()[..24];
    assert_eq!(
        ids(&page(&hub, &format!("?host={}", prefix.to_ascii_uppercase())).await),
        [(b, 2), (b, 1)]
    );
    assert_eq!(
        ids(&page(&hub, &format!("?host={a}&guest={GUEST_ODD}")).await),
        [(a, 5), (a, 3), (a, 1)]
    );
    assert_eq!(
        ids(&page(&hub, &format!("?host={b}&guest={GUEST_EVEN}")).await),
        [(b, 2)]
    );
    // At or after 10:04, the time percent-encoded as a client sends it.
    assert_eq!(
        ids(&page(&hub, "?since=2026-11-20T10%3A04%3A00Z").await),
        [(a, 5), (a, 4), (a, 3), (b, 2)]
    );
    assert_eq!(
        ids(&page(&hub, &format!("?host={a}&since=2026-11-20T10:06:00Z")).await),
        [(a, 5), (a, 4)]
    );
    assert!(
        page(&hub, &format!("?host={}", Uuid::new_v4()))
            .await
            .entries
            .is_empty()
    );
}

#[tokio::test]
async fn pages_follow_each_other_without_gaps_or_repeats() {
    let (hub, a, b) = hub_with_trail().await;
    let mut seen = Vec::new();
    let mut pages = 0;
    let mut query = "?limit=2".to_owned();
    loop {
        let got = page(&hub, &query).await;
        assert!(got.entries.len() <= 2);
        seen.extend(ids(&got));
        pages += 1;
        match got.next_before {
            Some(cursor) => query = format!("?limit=2&before={cursor}"),
            None => break,
        }
        assert!(pages < 10, "paging does not end");
    }
    assert_eq!(pages, 4);
    assert_eq!(
        seen,
        [(a, 5), (a, 4), (a, 3), (b, 2), (a, 2), (b, 1), (a, 1)]
    );
    // A full last page says there is no next one.
    let exact = page(&hub, &format!("?host={b}&limit=2")).await;
    assert_eq!((exact.entries.len(), exact.next_before), (2, None));
}

#[tokio::test]
async fn a_bad_query_is_refused_with_its_code() {
    let (hub, a, _) = hub_with_trail().await;
    for (query, code) in [
        ("?limit=0".to_owned(), "bad_query"),
        ("?limit=501".to_owned(), "bad_query"),
        ("?limit=ten".to_owned(), "bad_query"),
        ("?limit=-1".to_owned(), "bad_query"),
        ("?since=yesterday".to_owned(), "bad_query"),
        ("?since=1700000000".to_owned(), "bad_query"),
        ("?before=garbage".to_owned(), "bad_query"),
        ("?before=1.2.not-a-uuid".to_owned(), "bad_query"),
        (format!("?before=1.-2.{a}"), "bad_query"),
        ("?gust=x".to_owned(), "bad_query"),
        ("?host=pve-a".to_owned(), "bad_host_id"),
        (format!("?host={a}&guest=web"), "bad_guest_id"),
        (format!("?guest={GUEST_ODD}"), "guest_needs_host"),
        ("?limit=1&limit=2".to_owned(), "bad_query"),
    ] {
        let resp = hub
            .admin(Method::GET, &format!("/v1/admin/audit{query}"), None)
            .await;
        assert_eq!(
            error_code(resp).await,
            (StatusCode::BAD_REQUEST, code.into()),
            "{query}"
        );
    }
    // The bounds themselves are taken.
    assert_eq!(page(&hub, "?limit=1").await.entries.len(), 1);
    assert_eq!(page(&hub, "?limit=500").await.entries.len(), 7);
}

#[tokio::test]
async fn entries_past_the_retention_bounds_leave_the_trail() {
    let hub = TestHub::start_with(|config| {
        config.retention.audit_days = 30;
        config.retention.audit_per_host = 10;
    })
    .await;
    let (host, key) = hub.enroll("pve-kept").await;
    let now = bosun_hubd::clock::Clock::now(&hub.clock);
    // Twelve entries: the first two 40 days old, the rest an hour apart up to now.
    let audit = (1..=12_i64)
        .map(|seq| AuditEntry {
            seq: seq.unsigned_abs(),
            at: if seq <= 2 {
                now - jiff::SignedDuration::from_hours(40 * 24)
            } else {
                now - jiff::SignedDuration::from_hours(12 - seq)
            },
            action: "backup.finished".into(),
            detail: json!({ "n": seq }),
        })
        .collect();
    send(&hub, host, &key, &full(&StateReport { audit, ..report() })).await;
    assert_eq!(page(&hub, "").await.entries.len(), 12);

    let pruned = hub.hub.prune_once().await.unwrap();
    // The two old ones by age; of the ten left, none past the cap.
    assert_eq!(pruned.audit, 2);
    let seqs: Vec<u64> = page(&hub, "").await.entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (3..=12).rev().collect::<Vec<_>>());

    // A month on, everything is past its age.
    hub.clock
        .advance(std::time::Duration::from_secs(31 * 86_400));
    assert_eq!(hub.hub.prune_once().await.unwrap().audit, 10);
    assert!(page(&hub, "").await.entries.is_empty());
}

/// A failed verification of guest `GUEST_ODD` on `tier` saying `detail`, entry `seq` at minute
/// `seq` past 11:00, with the entry's own chain hash.
fn verify_failed(seq: u64, tier: &str, detail: &str) -> AuditEntry {
    AuditEntry {
        seq,
        at: format!("2026-11-20T11:{seq:02}:00Z").parse().unwrap(),
        action: "verify.failed".into(),
        detail: json!({
            "op_id": null, "job_id": null, "guest_id": GUEST_ODD, "vmid": 101, "request_id": null,
            "detail": { "tier": tier, "detail": detail },
            "hash": format!("{seq:064x}"),
        }),
    }
}

/// A repeated outcome is one row with a count and its last time (decision 0106): the same
/// failure of the same guest on the same tier, again and again, is one row however the agent
/// interleaves it with other tiers and other actions; another outcome about the subject starts
/// a new row; entries sent again after a lost answer count nothing twice.
#[tokio::test]
async fn a_repeated_outcome_is_one_row_counted_until_it_changes() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-verify").await;
    let with = |seq, audit| StateReport {
        seq,
        audit,
        ..report()
    };
    let missing = "verification failed - 3 chunks missing";
    // Tiers a and b fail in turn.
    let first: Vec<AuditEntry> = (1..=6)
        .map(|s| verify_failed(s, if s % 2 == 1 { "pbs-a" } else { "pbs-b" }, missing))
        .collect();
    send(&hub, host, &key, &full(&with(1, first))).await;
    // Tier a now fails otherwise, twice; b as before; a backup of the guest between them.
    let torn = "verification failed - 1 chunk corrupt";
    let mut backup = entry(10, 10);
    backup.detail["guest_id"] = json!(GUEST_ODD);
    backup.at = "2026-11-20T11:10:00Z".parse().unwrap();
    let second = vec![
        verify_failed(7, "pbs-a", torn),
        verify_failed(8, "pbs-a", torn),
        verify_failed(9, "pbs-b", missing),
        backup.clone(),
    ];
    send(&hub, host, &key, &full(&with(2, second.clone()))).await;
    // The answer was lost: the agent sends 7..=10 again, with 11.
    let mut third = second;
    third.push(verify_failed(11, "pbs-a", torn));
    send(&hub, host, &key, &full(&with(3, third))).await;

    let trail = page(&hub, &format!("?host={host}")).await;
    let rows: Vec<(u64, &str, u64, Option<String>)> = trail
        .entries
        .iter()
        .map(|e| {
            (
                e.seq,
                e.action.as_str(),
                e.repeats,
                e.last_at.map(|t| t.to_string()),
            )
        })
        .collect();
    let at = |minute: u32| Some(format!("2026-11-20T11:{minute:02}:00Z"));
    assert_eq!(
        rows,
        [
            (10, "backup.finished", 1, None),
            (7, "verify.failed", 3, at(11)),
            (2, "verify.failed", 4, at(9)),
            (1, "verify.failed", 3, at(5)),
        ]
    );
    assert_eq!(trail.entries[1].detail["detail"]["detail"], torn);
    assert_eq!(trail.entries[3].detail["detail"]["detail"], missing);
    // The JSON says a single entry's count by leaving it out.
    let raw: serde_json::Value = hub
        .admin(Method::GET, &format!("/v1/admin/audit?host={host}"), None)
        .await
        .json()
        .await
        .unwrap();
    assert!(raw["entries"][0].get("repeats").is_none(), "{raw}");
    assert_eq!(raw["entries"][2]["repeats"], 4, "{raw}");
}
