//! Who may sign in to a guest is the operator's signed decision (decision 0107): the SSH keys
//! a guest's bootstrap carries come only from the verified data plan in force (`guest_access`),
//! for the guest and the customer the entry names. A hostile hub cannot add a key (a field of
//! its own, an edited plan, its own signature), move one to another guest, or bring back a key
//! the operator dropped (a replayed older plan); withholding the plan changes nothing. Each
//! change the operator signs reaches the running guest as a new bootstrap. Asserted from the
//! bootstraps the agent pushed through its helper and from what it audited.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::hostile_hub::HostileHub;
use agent_support::signing::{OperatorKey, plan_of, signed_plan};
use agent_support::*;
use base64::Engine as _;
use bosun_proto::break_glass::SshPublicKey;
use bosun_proto::data_plan::DataPlan;
use bosun_proto::guest_access::GuestAccess;
use bosun_pvesim::SimConfig;
use serde_json::{Value, json};
use uuid::Uuid;

const KEY_A: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMJ9ICvzuRFQSTsuN1n1uZmou1NEzhm7SDmBZQBvv5uX";
const KEY_B: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPPyqA64EZx2WDADL9rLZIRJm7ZDsG/SLszl6swG3/y4";
/// The hub's own key.
const KEY_EVIL: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFrAsKmOJHqtIFg4iUWCxW/iCF63k3IM0oiEv25WH7JH";

fn access(guest: Uuid, customer: &str, keys: &[&str]) -> GuestAccess {
    GuestAccess {
        guest_id: guest,
        customer_id: customer.to_owned(),
        ssh_keys: keys.iter().map(|k| SshPublicKey::new(k).unwrap()).collect(),
    }
}

/// `base` with `plan` signed by the operator as its `data_plan`.
fn with_signed(base: &Value, plan: &DataPlan) -> Value {
    let mut desired = base.clone();
    desired["data_plan"] = signed_plan(plan);
    desired
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_s_keys_come_only_from_the_operator_s_signed_plan() {
    let sim = start_sim(SimConfig::fast()).await;
    let hub = HostileHub::start().await;
    let files = agent_files(
        &sim,
        &hub.url,
        &hub.fingerprint,
        Some("hostile-enroll-token"),
    );
    files.use_local_api(0, "");
    let helper = files.helper.clone();
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = hub.host_id;
    let keys_of = |vmid: u32| -> Vec<String> {
        helper
            .read_bootstrap(vmid)
            .ssh_authorized_keys
            .iter()
            .map(|k| k.as_str().to_owned())
            .collect()
    };
    let pushes = || {
        helper
            .verbs()
            .iter()
            .filter(|v| **v == "push_bootstrap")
            .count()
    };
    let audited =
        |action: &'static str| hub.audit().into_iter().filter(|(a, _)| a == action).count();

    // The customer's guest and a neighbour of another customer.
    let (guest, neighbour) = (Uuid::new_v4(), Uuid::new_v4());
    let mut base = desired(&sim, &[(guest, "shop"), (neighbour, "other")], "running");
    base["guests"][1]["customer"]["customer_id"] = json!("zeta");

    // The operator's plan gives the shop's root key A; the neighbour no key.
    let mut first = plan_of(&base, host);
    first.guest_access = vec![access(guest, "acme", &[KEY_A])];
    hub.set_desired(with_signed(&base, &first));
    let status = agent.handles.reconcile.clone();
    let vmid = running_vmid(&status, guest).await;
    let neighbour_vmid = running_vmid(&status, neighbour).await;
    for v in [vmid, neighbour_vmid] {
        eventually(Duration::from_secs(60), "the bootstrap is pushed", || {
            let path = helper.bootstrap_path(v);
            async move { path.exists() }
        })
        .await;
    }
    assert_eq!(keys_of(vmid), [KEY_A]);
    assert!(keys_of(neighbour_vmid).is_empty());
    let accepted = audited("data_plan.accepted");

    // 1. Keys of the hub's own, as a field of the guest: no such field; the whole desired
    //    state is refused, and no bootstrap moves.
    let mut own_field = with_signed(&base, &first);
    own_field["guests"][0]["ssh_keys"] = json!([KEY_EVIL]);
    own_field["guests"][1]["ssh_authorized_keys"] = json!([KEY_EVIL]);
    // 2. The signed plan's bytes edited to add the hub's key under a higher serial: the
    //    signature no longer holds.
    let mut edited = first.clone();
    edited.serial += 10;
    edited.guest_access = vec![
        access(guest, "acme", &[KEY_A, KEY_EVIL]),
        access(neighbour, "zeta", &[KEY_EVIL]),
    ];
    let mut tampered = with_signed(&base, &first);
    tampered["data_plan"]["document"] = json!(
        base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&edited).unwrap())
    );
    // 3. The same plan signed with the hub's own key.
    let stranger = OperatorKey::new("hub@evil");
    let bytes = serde_json::to_vec(&edited).unwrap();
    let mut own_signature = base.clone();
    own_signature["data_plan"] = serde_json::to_value(bosun_proto::signed::SignedDocument::new(
        &bytes,
        &stranger.sign(&bytes, bosun_proto::data_plan::PLAN_NAMESPACE),
    ))
    .unwrap();
    // 4. The neighbour re-labelled as the shop's customer: the plan's entry names the shop's
    //    guest id with its customer, so the neighbour still gets nothing.
    let mut moved = with_signed(&base, &first);
    moved["guests"][1]["customer"]["customer_id"] = json!("acme");
    let refused_before = audited("data_plan.refused");
    for (what, desired) in [
        ("a field of the hub's own", own_field),
        ("an edited plan", tampered),
        ("a plan the hub signed", own_signature),
        ("the neighbour re-named to the shop's customer", moved),
    ] {
        let before = pushes();
        hub.set_desired(desired);
        // Three reconcile passes at least, while the agent answers polls.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(keys_of(vmid), [KEY_A], "{what}");
        assert!(keys_of(neighbour_vmid).is_empty(), "{what}");
        assert_eq!(pushes(), before, "{what}: no bootstrap was pushed");
    }
    assert!(
        audited("data_plan.refused") >= refused_before + 2,
        "the edited and the hub-signed plans were refused: {:?}",
        hub.audit()
    );
    assert_eq!(audited("data_plan.accepted"), accepted);

    // 5. The plan withheld: the agent keeps the one in force, and the shop its key.
    let before = pushes();
    hub.set_desired(base.clone());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(keys_of(vmid), [KEY_A]);
    assert_eq!(pushes(), before);

    // 6. The operator replaces key A by key B: the running shop gets a new bootstrap with B
    //    alone, and its old token stops working.
    let old_token = helper
        .read_bootstrap(vmid)
        .local_api
        .token
        .expose()
        .to_owned();
    let mut second = plan_of(&base, host);
    second.guest_access = vec![access(guest, "acme", &[KEY_B])];
    assert!(second.serial > first.serial);
    hub.set_desired(with_signed(&base, &second));
    eventually(
        Duration::from_secs(30),
        "the shop's bootstrap carries key B",
        || {
            let keys = keys_of(vmid);
            async move { keys == [KEY_B] }
        },
    )
    .await;
    let renewed = helper.read_bootstrap(vmid);
    assert_ne!(renewed.local_api.token.expose(), old_token);
    assert!(keys_of(neighbour_vmid).is_empty());

    // 7. The hub replays the first plan (key A): refused by its serial; the shop keeps B.
    let before = pushes();
    hub.set_desired(with_signed(&base, &first));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(keys_of(vmid), [KEY_B]);
    assert_eq!(pushes(), before);

    // 8. The operator takes every key away: a new bootstrap with none.
    let mut third = plan_of(&base, host);
    third.guest_access = vec![access(guest, "acme", &[])];
    hub.set_desired(with_signed(&base, &third));
    eventually(
        Duration::from_secs(30),
        "the shop's keys taken away",
        || {
            let keys = keys_of(vmid);
            async move { keys.is_empty() }
        },
    )
    .await;
    agent.stop().await;
}
