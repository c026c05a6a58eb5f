//! A rollback brings back the bootstrap of the snapshot's time: the token survives when it
//! predates the snapshot (snapshot before deploy), and is revoked for re-issue when it was
//! minted after the snapshot (the restored file names a token the agent no longer holds).

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

use crate::localapi_support;

use std::time::Duration;

use bosun_agentd::guests::credentials::stale::{StaleCheck, revoke_if_minted_after};
use bosun_agentd::guests::credentials::token::mint_token;
use bosun_agentd::ops::journal::TokenHash;
use bosun_pve::{Op, Pve as _, Vmid};
use localapi_support::{Harness, Options};
use secrecy::ExposeSecret;
use serde_json::json;

async fn stop(h: &Harness, vmid: u32) {
    let upid = h.pve.stop_ct(Vmid::new(vmid).unwrap()).await.unwrap();
    h.pve.wait_task(Op::StopCt, &upid).await.unwrap();
}

/// Rolls guest 0 back to `name` through the local API and waits until it runs again.
async fn rollback(h: &Harness, token: &str, name: &str) {
    // The simulator cannot roll back a running guest (see localapi_endpoints.rs).
    stop(h, 101).await;
    let resp = h
        .client
        .post(h.url("/v1/rollback"))
        .bearer_auth(token)
        .json(&json!({"snapshot": name}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while h.sim.guest_running(101) != Some(true) {
        assert!(tokio::time::Instant::now() < deadline, "never rolled back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn status_with(h: &Harness, token: &str) -> u16 {
    h.client
        .get(h.url("/v1/storage"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn snapshot(h: &Harness) -> String {
    let (status, taken) = h.post(0, "/v1/snapshot", json!({})).await;
    assert_eq!(status, 201, "{taken}");
    taken["name"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_keeps_an_older_token_and_revokes_a_newer_one() {
    let h = Harness::start_with(Options {
        guests: 1,
        ..Default::default()
    })
    .await;
    let guest = h.guest(0).guest_id.clone();
    let first = h.guest(0).token.clone();

    // Snapshot before deploy: the token is older than the snapshot (seconds resolution).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let before_deploy = snapshot(&h).await;
    rollback(&h, &first, &before_deploy).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(status_with(&h, &first).await, 200, "the token is kept");
    assert!(
        h.journal
            .token_of_guest(guest.clone())
            .await
            .unwrap()
            .is_some()
    );

    // A token minted after the snapshot (a re-issue): the rollback brings back the file
    // naming the old token, so the new one is revoked and re-issued by reconcile.
    let name = snapshot(&h).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let newer = mint_token();
    h.journal
        .store_token_hash(guest.clone(), 101, TokenHash::of(&newer))
        .await
        .unwrap();
    let newer = newer.expose_secret().to_owned();
    assert_eq!(status_with(&h, &first).await, 401);
    assert_eq!(status_with(&h, &newer).await, 200);
    rollback(&h, &newer, &name).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while h
        .journal
        .token_of_guest(guest.clone())
        .await
        .unwrap()
        .is_some()
    {
        assert!(tokio::time::Instant::now() < deadline, "never revoked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status_with(&h, &newer).await, 401);
    let audit = h.journal.audit_since(0, 10_000).await.unwrap();
    let stale: Vec<_> = audit
        .iter()
        .filter(|e| e.event.event == "bootstrap.stale")
        .collect();
    assert_eq!(stale.len(), 1, "{stale:?}");
    assert_eq!(stale[0].event.detail["cause"], "rollback");
    assert_eq!(stale[0].event.guest_id.as_deref(), Some(guest.as_str()));
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stale_check_compares_seconds_and_treats_an_unknown_time_as_stale() {
    let h = Harness::start_with(Options {
        guests: 1,
        ..Default::default()
    })
    .await;
    let guest = h.guest(0).guest_id.clone();
    let minted = h
        .journal
        .token_of_guest(guest.clone())
        .await
        .unwrap()
        .unwrap()
        .minted_at
        .as_second();
    let later = u64::try_from(minted + 1).unwrap();
    let same = u64::try_from(minted).unwrap();
    let check = |taken| revoke_if_minted_after(&h.journal, &guest, 101, taken, "restore");
    assert_eq!(check(Some(later)).await.unwrap(), StaleCheck::Current);
    assert_eq!(check(Some(same)).await.unwrap(), StaleCheck::Revoked);
    assert_eq!(check(Some(later)).await.unwrap(), StaleCheck::NoToken);
    h.journal
        .store_token_hash(guest.clone(), 101, TokenHash::of(&mint_token()))
        .await
        .unwrap();
    assert_eq!(check(None).await.unwrap(), StaleCheck::Revoked);
    h.shutdown().await;
}
