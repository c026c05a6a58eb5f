//! A guest that keeps naming another guest is refused every time, but the audit log and
//! the WARN log grow by a count per guest, endpoint and window, not by a row per request.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

use crate::localapi_support;

use localapi_support::Harness;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_cross_guest_refusals_are_counted_not_journaled_one_by_one() {
    let h = Harness::start().await;
    let other = h.guest(1).vmid;
    h.sim.clear_requests();
    let (rows_before, _) = h.journal.audit_head().await.unwrap();

    for _ in 0..300 {
        let (status, body) = h.get(0, &format!("/v1/storage?vmid={other}")).await;
        assert_eq!(status, 403, "{body}");
    }
    for _ in 0..20 {
        let (status, _) = h.get(0, &format!("/v1/backup/status?vmid={other}")).await;
        assert_eq!(status, 403);
    }
    assert!(
        h.sim.requests().is_empty(),
        "no refused request reached Proxmox"
    );
    h.api.flush_refusals().await;

    let (rows_after, _) = h.journal.audit_head().await.unwrap();
    let audit = h.journal.audit_since(rows_before, 1000).await.unwrap();
    assert_eq!(
        rows_after - rows_before,
        4,
        "per endpoint one row for the first refusal and one summary: {audit:#?}"
    );
    let count_for = |endpoint: &str| -> u64 {
        audit
            .iter()
            .filter(|e| e.event.detail["endpoint"] == endpoint)
            .map(|e| match e.event.event.as_str() {
                "localapi.foreign_guest" => 1,
                "localapi.foreign_guest.repeated" => {
                    assert_eq!(e.event.detail["reason"], "foreign_guest");
                    assert_eq!(
                        e.event.guest_id.as_deref(),
                        Some(h.guest(0).guest_id.as_str())
                    );
                    e.event.detail["count"].as_u64().unwrap()
                }
                other => panic!("unexpected audit event {other}"),
            })
            .sum()
    };
    assert_eq!(count_for("storage"), 300);
    assert_eq!(count_for("backup.status"), 20, "{audit:#?}");
    assert!(matches!(
        h.journal.verify_audit_chain().await.unwrap(),
        bosun_agentd::ops::journal::ChainVerdict::Intact { .. }
    ));
    h.shutdown().await;
}
