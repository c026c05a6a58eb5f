//! Integrity verification between restore tests (DESIGN §8, decision 0079), against the real
//! agent and hub and the simulator's PBS side: the agent has PBS verify its guest's backup
//! group on the signed plan's cadence, in the target's namespace, with the tier's sealed token
//! and pinned certificate; the result reaches the hub per guest and tier; damaged chunks make
//! a verify fail and raise `verify_failed`; and a hub that turns verification off, or spaces
//! it a year apart, in desired state does not make it any rarer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::{Duration, Instant};

use agent_support::pbs_stack::*;
use agent_support::storage::alerts;
use agent_support::*;
use bosun_proto::desired::StorageTarget;
use bosun_pvesim::{ChunkDamage, SimHandle};
use serde_json::{Value, json};
use std::str::FromStr as _;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plans_cadence_verifies_the_group_and_damaged_chunks_raise_verify_failed() {
    // The hub turns verification off and would space it a year apart; the plan asks hourly.
    let s = stack(1, json!({ "enabled": false, "interval_hours": 8760 })).await;
    let tier = s.desired["storage"][0]["durable_id"]
        .as_str()
        .unwrap()
        .to_owned();
    eventually(
        Duration::from_secs(90),
        "an ok verification reaches the hub",
        || async {
            reported(&s.hub, s.host)
                .await
                .iter()
                .any(|v| v["outcome"] == "ok" && v["guest_id"] == json!(s.guest))
        },
    )
    .await;
    let first = reported(&s.hub, s.host).await;
    let ok = first.iter().find(|v| v["outcome"] == "ok").unwrap();
    assert_eq!(ok["tier"], json!(tier), "{ok}");
    eprintln!(
        "verify time for guest {}'s group in the simulator: {} ms",
        s.guest, ok["duration_ms"]
    );
    // Every verify names the guest's own group, in the target's namespace, and re-reads
    // snapshots verified before.
    let requests = verify_requests(&s.sim);
    assert!(!requests.is_empty());
    for params in &requests {
        let get = |k: &str| {
            params
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("backup-type"), Some("ct"), "{params:?}");
        assert_eq!(
            get("backup-id"),
            Some(s.vmid.to_string().as_str()),
            "{params:?}"
        );
        assert_eq!(get("ns"), Some(NAMESPACE), "{params:?}");
        assert_eq!(get("ignore-verified"), Some("false"), "{params:?}");
    }

    // The plan's hour (a second here) holds whatever the hub's policy says: several
    // verifications within seconds, not one a year.
    let before = verify_requests(&s.sim).len();
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let runs = verify_requests(&s.sim).len() - before;
    eprintln!(
        "verifications in {:?} with the hub's policy off: {runs}",
        started.elapsed()
    );
    assert!(
        (3..=8).contains(&runs),
        "the plan's hourly cadence did not hold: {runs} verifications in 6 hours"
    );

    // A chunk of the guest's group goes bad on the PBS server: the next verify fails, the
    // hub raises verify_failed for the guest and tier.
    let (server, _, _) = pbs_server(&s.sim);
    let damaged = s
        .sim
        .damage_chunks(
            &server,
            &ChunkDamage {
                datastore: STORE.into(),
                namespace: NAMESPACE.into(),
                vmid: s.vmid,
            },
        )
        .unwrap();
    assert!(damaged > 0);
    eventually(
        Duration::from_secs(60),
        "the failed verification reaches the hub",
        || async {
            reported(&s.hub, s.host)
                .await
                .iter()
                .any(|v| v["outcome"] == "failed")
        },
    )
    .await;
    let failed = reported(&s.hub, s.host).await;
    let failed = failed.iter().find(|v| v["outcome"] == "failed").unwrap();
    assert!(
        failed["last_ok_at"].is_string(),
        "the last ok is kept: {failed}"
    );
    assert!(
        failed["detail"]
            .as_str()
            .unwrap()
            .contains("verification failed"),
        "{failed}"
    );
    eventually(Duration::from_secs(30), "verify_failed opens", || async {
        alerts(&s.hub, s.host, "verify_failed").await.len() == 1
    })
    .await;
    let alert = &alerts(&s.hub, s.host, "verify_failed").await[0];
    let message = alert["message"].as_str().unwrap();
    assert!(
        message.contains(&s.guest.to_string()) && message.contains(&tier),
        "the alert names the guest and the tier: {alert}"
    );
    s.agent.stop().await;
    s.hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_may_make_verification_more_frequent_than_the_plan() {
    // The plan asks every 8760 hours (a year); the hub asks every hour (a second here).
    let s = stack(8760, json!({ "enabled": true, "interval_hours": 1 })).await;
    eventually(Duration::from_secs(90), "an ok verification", || async {
        reported(&s.hub, s.host)
            .await
            .iter()
            .any(|v| v["outcome"] == "ok")
    })
    .await;
    let before = verify_requests(&s.sim).len();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let runs = verify_requests(&s.sim).len() - before;
    assert!(
        (3..=8).contains(&runs),
        "the hub's hourly cadence was not followed: {runs} verifications in 6 hours"
    );
    s.agent.stop().await;
    s.hub.stop().await;
}

/// Verify requests for guest `vmid`'s group.
fn verifies_of(sim: &SimHandle, vmid: u32) -> usize {
    let id = vmid.to_string();
    verify_requests(sim)
        .iter()
        .filter(|params| params.iter().any(|(k, v)| k == "backup-id" && *v == id))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_whose_group_takes_hours_to_verify_does_not_delay_its_neighbours() {
    // Two guests verified hourly (a second here) by the plan; the hub's own policy off.
    let s = stack_of(
        1,
        json!({ "enabled": false, "interval_hours": 8760 }),
        &["alpha", "beta"],
    )
    .await;
    let big = s.vmid;
    let small = running_vmid(&s.agent.handles.reconcile, s.guests[1]).await;
    eventually(Duration::from_secs(90), "both guests verified", || async {
        verifies_of(&s.sim, big) > 0 && verifies_of(&s.sim, small) > 0
    })
    .await;
    // Alpha's customer fills 64 TiB: its next backup holds 16 TiB, which PBS takes about five
    // hours to read, so alpha's verification from then on runs for thousands of plan-hours.
    assert!(s.sim.set_guest_data(big, 64 << 40));
    let backed_up = |sim: &SimHandle| {
        sim.requests()
            .iter()
            .filter(|r| r.path.ends_with("/vzdump"))
            .filter(|r| {
                r.params
                    .iter()
                    .any(|(k, v)| k == "vmid" && *v == big.to_string())
            })
            .count()
    };
    let before = backed_up(&s.sim);
    eventually(Duration::from_secs(30), "alpha's large backup", || async {
        backed_up(&s.sim) > before
    })
    .await;
    let (big_before, small_before) = (verifies_of(&s.sim, big), verifies_of(&s.sim, small));
    tokio::time::sleep(Duration::from_secs(8)).await;
    let (big_runs, small_runs) = (
        verifies_of(&s.sim, big) - big_before,
        verifies_of(&s.sim, small) - small_before,
    );
    eprintln!("in 8 plan-hours: alpha (16 TiB) {big_runs} verify calls, beta {small_runs}");
    assert!(
        small_runs >= 4,
        "beta's hourly verification waited on alpha's: {small_runs} in 8 hours"
    );
    assert!(
        big_runs <= 2,
        "alpha's verification is followed, not started again while it runs: {big_runs}"
    );
    s.agent.stop().await;
    s.hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_that_withholds_the_credential_does_not_stop_verification_or_backups() {
    // The plan verifies hourly (a second here); the hub turned its own policy off.
    let s = stack(1, json!({ "enabled": false, "interval_hours": 8760 })).await;
    eventually(Duration::from_secs(90), "an ok verification", || async {
        reported(&s.hub, s.host)
            .await
            .iter()
            .any(|v| v["outcome"] == "ok")
    })
    .await;
    let signed = credentials_in_use(&s).expect("the operator's credential in use");

    // The hub sends the PBS target without its sealed credential.
    let mut withheld = s.desired.clone();
    withheld["storage"][0]
        .as_object_mut()
        .unwrap()
        .remove("credentials");
    hub_sends(&s, &withheld).await;
    assert_eq!(
        credentials_in_use(&s).as_deref(),
        Some(signed.as_str()),
        "withholding is not revoking"
    );
    let (verified_without_credential, backed_up_without_credential) =
        calls_within(&s, Duration::from_secs(8)).await;

    // Then no storage at all.
    withheld["storage"] = json!([]);
    withheld["backup_policy"]["further_tiers"] = json!([]);
    hub_sends(&s, &withheld).await;
    assert_eq!(credentials_in_use(&s).as_deref(), Some(signed.as_str()));
    let (verified_without_target, backed_up_without_target) =
        calls_within(&s, Duration::from_secs(8)).await;
    eprintln!(
        "under a withholding hub, in 8 plan-hours: {verified_without_credential} verify calls \
         without the credential, {verified_without_target} without the target; backups to the \
         PBS tier {backed_up_without_credential} and {backed_up_without_target}"
    );
    for runs in [verified_without_credential, verified_without_target] {
        assert!(
            runs >= 4,
            "the plan's hourly cadence did not hold under a withholding hub: {runs} in 8 hours"
        );
    }
    for runs in [backed_up_without_credential, backed_up_without_target] {
        assert!(runs >= 1, "backups to the PBS tier stopped: {runs}");
    }
    // What the hub hears is the truth: the verifications go on and pass.
    eventually(
        Duration::from_secs(30),
        "the last verification is ok",
        || async {
            let latest = reported(&s.hub, s.host).await;
            !latest.is_empty() && latest.iter().all(|v| v["outcome"] == "ok")
        },
    )
    .await;
    s.agent.stop().await;
    s.hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_the_hub_sealed_itself_changes_nothing_and_the_operators_reseal_is_taken() {
    let s = stack(1, json!({ "enabled": true, "interval_hours": 1 })).await;
    eventually(Duration::from_secs(90), "an ok verification", || async {
        reported(&s.hub, s.host)
            .await
            .iter()
            .any(|v| v["outcome"] == "ok")
    })
    .await;
    let signed = credentials_in_use(&s).expect("the operator's credential in use");
    let durable = s.desired["storage"][0]["durable_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let identity = serde_json::from_value::<StorageTarget>(pbs_target(&s.sim, None))
        .unwrap()
        .identity();
    let storage_calls = |sim: &SimHandle| {
        mutations(sim)
            .into_iter()
            .filter(|r| r.path.starts_with("/storage"))
            .count()
    };
    let storage_before = storage_calls(&s.sim);

    // The hub holds the host's recipient: it seals, for this host and the plan's own target,
    // a password of its own, issued later than the operator's, signed with a key of its own.
    let hub_key = agent_support::signing::OperatorKey::new("hub@attacker");
    let document = serde_json::to_vec(&bosun_proto::sealed_credential::SealedCredential::new(
        s.host,
        identity.clone(),
        jiff::Timestamp::now(),
        bosun_proto::secret::SecretToken::new("the-hubs-own-password"),
    ))
    .unwrap();
    let envelope = bosun_proto::sealed_credential::CredentialEnvelope::new(
        &document,
        &hub_key.sign(
            &document,
            bosun_proto::sealed_credential::CREDENTIAL_NAMESPACE,
        ),
    );
    let forged = bosunctl::secret::seal(&s.recipient, &envelope).unwrap();
    // And one sealed the way credentials were before signatures: no envelope at all.
    let mut unsigned = serde_json::from_slice::<Value>(&document).unwrap();
    unsigned["schema"] = json!("bosun.sealed-credential/v1");
    unsigned.as_object_mut().unwrap().remove("issued_at");
    let recipient = age::x25519::Recipient::from_str(&s.recipient).unwrap();
    let legacy = age::encrypt_and_armor(&recipient, unsigned.to_string().as_bytes()).unwrap();
    for blob in [forged.armored().to_owned(), legacy] {
        let mut swapped = s.desired.clone();
        swapped["storage"][0]["credentials"] = json!(blob);
        hub_sends(&s, &swapped).await;
        assert_eq!(
            credentials_in_use(&s).as_deref(),
            Some(signed.as_str()),
            "sealing is not signing: the operator's credential stays in use"
        );
        eventually(
            Duration::from_secs(30),
            "the hub is told the credential wants the operator's signature",
            || async {
                host_storage(&s).await.iter().any(|t| {
                    t["durable_id"] == durable.as_str()
                        && t["status"] == "refused"
                        && t["reason"] == "credentials_unsigned"
                })
            },
        )
        .await;
    }
    let (verified, _) = calls_within(&s, Duration::from_secs(6)).await;
    assert!(verified >= 3, "verification slowed: {verified} in 6 hours");
    eventually(
        Duration::from_secs(30),
        "the verifications still pass",
        || async {
            let latest = reported(&s.hub, s.host).await;
            !latest.is_empty() && latest.iter().all(|v| v["outcome"] == "ok")
        },
    )
    .await;
    assert_eq!(
        storage_calls(&s.sim),
        storage_before,
        "nothing of the hub's credentials reached Proxmox's storage configuration"
    );
    let audit = s
        .agent
        .handles
        .journal
        .audit_since(0, 10_000)
        .await
        .unwrap();
    let refused: Vec<_> = audit
        .iter()
        .filter(|e| e.event.event == "storage.refused")
        .map(|e| e.event.detail.clone())
        .collect();
    // One refusal, standing while the hub swaps one blob for the other: audited once.
    assert_eq!(
        refused.len(),
        1,
        "audited once while it stands: {refused:?}"
    );
    assert!(
        refused
            .iter()
            .all(|d| d["reason"] == "credentials_unsigned" && d["durable_id"] == durable.as_str()),
        "{refused:?}"
    );
    assert!(!format!("{audit:?}").contains("the-hubs-own-password"));
    let accepted = |audit: &[bosun_agentd::ops::journal::AuditEntry]| {
        audit
            .iter()
            .filter(|e| e.event.event == "credential.accepted")
            .count()
    };
    assert_eq!(
        accepted(&audit),
        1,
        "only the operator's credential was taken"
    );

    // The operator reseals (issued later): taken, and the one in use from then on.
    let resealed = agent_support::signing::seal_signed(
        &s.recipient,
        &bosun_proto::sealed_credential::SealedCredential::new(
            s.host,
            identity,
            jiff::Timestamp::now(),
            bosun_proto::secret::SecretToken::new(s.password.clone()),
        ),
    );
    let mut again = s.desired.clone();
    again["storage"][0]["credentials"] = json!(resealed);
    hub_sends(&s, &again).await;
    assert_eq!(credentials_in_use(&s).as_deref(), Some(resealed.as_str()));
    // The operator's earlier credential, replayed by the hub: older, refused.
    hub_sends(&s, &s.desired).await;
    assert_eq!(
        credentials_in_use(&s).as_deref(),
        Some(resealed.as_str()),
        "an older signed credential does not come back"
    );
    eventually(Duration::from_secs(30), "the replay is audited", || async {
        s.agent
            .handles
            .journal
            .audit_since(0, 10_000)
            .await
            .unwrap()
            .iter()
            .any(|e| {
                e.event.event == "storage.refused"
                    && e.event.detail["reason"] == "credentials_refused"
                    && e.event.detail["fields"] == "issued_at"
            })
    })
    .await;
    let audit = s
        .agent
        .handles
        .journal
        .audit_since(0, 10_000)
        .await
        .unwrap();
    assert_eq!(accepted(&audit), 2);
    s.agent.stop().await;
    s.hub.stop().await;
}

/// The storage entries of the host's last report at the hub.
async fn host_storage(s: &Stack) -> Vec<Value> {
    s.hub.host(s.host).await["last_report"]["storage"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}
