//! Break-glass consent through the local API (decision 0080): a controller grants, for a
//! bounded time, and revokes consent for its own guest only; each change is in the consent
//! file the support shell reads before the answer, and in the guest's own audit log.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

use crate::localapi_support;

use std::time::Duration;

use bosun_support::consent::ConsentFile;
use localapi_support::{Harness, record_own_guest};
use serde_json::json;

const CONSENT: &str = "/v1/break-glass/consent";

fn consent_file(h: &Harness) -> ConsentFile {
    ConsentFile::read(&h.dir.path().join("consent.json")).unwrap()
}

/// The harness with its guests recorded as the agent's own (a consent is bound to the guest
/// holding its vmid in the journal).
async fn harness() -> Harness {
    let h = Harness::start().await;
    for n in 0..2 {
        let guest = h.guest(n).clone();
        record_own_guest(&h.journal, &guest.guest_id, guest.vmid).await;
    }
    h
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_grants_and_revokes_consent_for_itself_alone_within_the_bound() {
    let h = harness().await;
    let (mine, theirs) = (h.guest(0).clone(), h.guest(1).clone());
    let (status, state) = h.get(0, CONSENT).await;
    assert_eq!(status, 200, "{state}");
    assert_eq!(state["granted"], false);
    assert_eq!(state["max_duration_seconds"], 86_400);

    // Beyond the bound, or none at all: a clear refusal, nothing written.
    for bad in [
        json!({"duration_seconds": 86_401}),
        json!({"duration_seconds": 0}),
        json!({}),
    ] {
        let (status, answer) = h.post(0, CONSENT, bad.clone()).await;
        assert_eq!(status, 400, "{bad}: {answer}");
        assert!(
            answer["message"].as_str().unwrap().contains("86400 (24 h)"),
            "{answer}"
        );
    }
    assert!(consent_file(&h).consents.is_empty());

    // Consent for another guest, named by vmid or guest id, in the body or the query: 403,
    // and the other guest holds no consent.
    let foreign = [
        (
            CONSENT.to_owned(),
            json!({"duration_seconds": 600, "vmid": theirs.vmid}),
        ),
        (
            CONSENT.to_owned(),
            json!({"duration_seconds": 600, "guest_id": theirs.guest_id}),
        ),
        (
            format!("{CONSENT}?vmid={}", theirs.vmid),
            json!({"duration_seconds": 600}),
        ),
    ];
    for (path, body) in &foreign {
        let (status, answer) = h.post(0, path, body.clone()).await;
        assert_eq!(status, 403, "{path} {body}: {answer}");
        assert_eq!(answer["code"], "foreign_guest");
    }
    let (status, _) = h
        .delete(0, &format!("{CONSENT}?guest_id={}", theirs.guest_id))
        .await;
    assert_eq!(status, 403);
    assert!(consent_file(&h).consents.is_empty());
    let (_, state) = h.get(1, CONSENT).await;
    assert_eq!(state["granted"], false);

    // Its own consent: in the file, for its own vmid, until the deadline it was told.
    let before = now_s();
    let (status, state) = h
        .post(
            0,
            CONSENT,
            json!({"duration_seconds": 600, "reason": "ticket 4711"}),
        )
        .await;
    assert_eq!(status, 200, "{state}");
    assert_eq!(state["granted"], true);
    let expires: jiff::Timestamp = state["expires_at"].as_str().unwrap().parse().unwrap();
    let expires = u64::try_from(expires.as_second()).unwrap();
    // Whole seconds, rounded up: at least the 600 s asked for.
    assert!((before + 600..=now_s() + 601).contains(&expires), "{state}");
    let file = consent_file(&h);
    assert_eq!(file.consents.len(), 1, "{file:?}");
    assert_eq!(file.consents[0].vmid, mine.vmid);
    assert_eq!(file.consents[0].guest_id, mine.guest_id);
    assert!(
        file.consents[0].identity.starts_with("bosun-op-"),
        "bound to the guest's identity tag: {file:?}"
    );
    assert_eq!(file.consents[0].expires_at, expires);
    assert!(
        file.live_for(mine.vmid, now_s()).is_some()
            && file.live_for(theirs.vmid, now_s()).is_none()
    );
    let (_, state) = h.get(1, CONSENT).await;
    assert_eq!(
        state["granted"], false,
        "the other guest consented to nothing"
    );

    // Revoked: gone from the file when the answer comes.
    let (status, state) = h.delete(0, CONSENT).await;
    assert_eq!(status, 200, "{state}");
    assert_eq!(state["granted"], false);
    assert!(consent_file(&h).live_for(mine.vmid, now_s()).is_none());

    // Both are the guest's own audit rows; the other guest sees neither.
    let (_, page) = h.get(0, "/v1/audit").await;
    let entries = page["entries"].as_array().unwrap();
    assert_eq!(entries[0]["event"], "break_glass.consent_revoked", "{page}");
    assert_eq!(entries[0]["detail"]["was_granted"], true);
    assert_eq!(entries[1]["event"], "break_glass.consent_granted", "{page}");
    assert_eq!(entries[1]["detail"]["duration_seconds"], 600);
    assert_eq!(entries[1]["detail"]["reason"], "ticket 4711");
    assert_eq!(entries[1]["host_wide"], false);
    let (_, other) = h.get(1, "/v1/audit").await;
    assert!(
        other["entries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| !e["event"].as_str().unwrap().contains("consent")),
        "{other}"
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consent_ends_at_its_deadline() {
    let h = harness().await;
    let vmid = h.guest(0).vmid;
    let (status, state) = h.post(0, CONSENT, json!({"duration_seconds": 1})).await;
    assert_eq!(status, 200, "{state}");
    assert!(consent_file(&h).live_for(vmid, now_s()).is_some());
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (_, state) = h.get(0, CONSENT).await;
    assert_eq!(state["granted"], false, "{state}");
    assert!(
        consent_file(&h).live_for(vmid, now_s()).is_none(),
        "the support shell reads it as ended by its own clock"
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_the_file_did_not_take_is_not_written_later_by_another_guests_grant() {
    let h = harness().await;
    let (mine, theirs) = (h.guest(0).clone(), h.guest(1).clone());
    let path = h.dir.path().join("consent.json");
    // Nothing can be renamed over the file's path (a directory stands there): the grant fails.
    let _ = std::fs::remove_file(&path);
    std::fs::create_dir(&path).unwrap();
    std::fs::write(path.join("keep"), b"x").unwrap();
    let (status, answer) = h.post(0, CONSENT, json!({"duration_seconds": 600})).await;
    assert_eq!(status, 503, "{answer}");
    let (_, state) = h.get(0, CONSENT).await;
    assert_eq!(state["granted"], false, "{state}");
    std::fs::remove_dir_all(&path).unwrap();

    // The other guest's grant writes the file: the failed grant is not in it, nor audited.
    let (status, answer) = h.post(1, CONSENT, json!({"duration_seconds": 600})).await;
    assert_eq!(status, 200, "{answer}");
    let file = consent_file(&h);
    assert!(file.live_for(theirs.vmid, now_s()).is_some());
    assert!(file.live_for(mine.vmid, now_s()).is_none(), "{file:?}");
    let (_, page) = h.get(0, "/v1/audit").await;
    assert!(
        page["entries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["event"] != "break_glass.consent_granted"),
        "{page}"
    );
    h.shutdown().await;
}
