//! Customers see their own protection (DESIGN §7): a hub that never sends the PBS target's
//! sealed credential keeps verification from running while the signed plan asks for it every
//! hour, and reports of it go only to that hub. The guest's local API, from the agent's own
//! journal, tells the customer: after two plan hours (a second each here) `GET /v1/protection`
//! with the guest's token shows the PBS tier's verification overdue against the signed plan,
//! with why it could not run; `bosun-guest`'s client reads and prints the same; another
//! guest's token reads only its own protection and is refused this guest's; PBS was never
//! asked to verify and the hub was told of no verification that passed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::Duration;

use agent_support::signing::{plan_of, signed_plan};
use agent_support::*;
use bosun_proto::bootstrap::Bootstrap;
use bosun_proto::protection::{GuestProtection, PromisedBy, ProtectionKind, ProtectionResult};
use bosun_pvesim::{RemoteSpec, SimConfig, SimHandle};
use serde_json::{Value, json};
use uuid::Uuid;

const STORE: &str = "store1";
const TOKEN: &str = "backup@pbs!bosun";

fn pbs_target(sim: &SimHandle) -> Value {
    let url = reqwest::Url::parse(&sim.endpoint().url).unwrap();
    json!({
        "type": "pbs",
        "durable_id": format!(
            "{TOKEN}@{}:{}:{STORE}#{}",
            url.host_str().unwrap(),
            url.port().unwrap(),
            sim.endpoint().fingerprint
        ),
        "class": "slow",
        "role": "pbs-offsite",
        "policy": { "schedule": "*:*:0/3", "retention": { "keep_last": 3 } },
        "state": "attached",
        "namespace": "hosts/this",
    })
}

/// The guest's protection as `bosun-guest`'s client reads it with the guest's bootstrap.
async fn protection(doc: &Bootstrap) -> Option<GuestProtection> {
    let client = bosun_guest::LocalApiClient::from_bootstrap(doc).unwrap();
    client.protection().await.ok()
}

async fn get(client: &reqwest::Client, doc: &Bootstrap, query: &str) -> (u16, Value) {
    let answer = client
        .get(format!("{}/v1/protection{query}", doc.local_api.url))
        .bearer_auth(doc.local_api.token.expose())
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withholding_hub_cannot_hide_overdue_verification_from_the_customer() {
    let sim = start_sim(SimConfig::fast()).await;
    let url = reqwest::Url::parse(&sim.endpoint().url).unwrap();
    sim.declare_remote(
        url.host_str().unwrap(),
        RemoteSpec::Pbs {
            fingerprint: sim.endpoint().fingerprint.clone(),
            datastores: vec![STORE.into()],
            username: Some(TOKEN.into()),
            password: Uuid::new_v4().to_string(),
        },
    );
    let hub = RealHub::start().await;
    let token = hub.enroll_token().await;
    let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some(&token));
    let helper = files.helper.clone();
    // One hour of the plan's verification interval lasts a second.
    files.use_local_api(0, "[backup]\nverify_hour_ms = 1000\n");
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;

    // The hub names the plan's PBS target as a tier but never its sealed credential; the
    // signed plan asks for verification every hour, the hub's own policy turns it off.
    let (alpha, bravo) = (Uuid::new_v4(), Uuid::new_v4());
    let mut desired = desired(&sim, &[(alpha, "alpha"), (bravo, "bravo")], "running");
    desired["storage"] = json!([pbs_target(&sim)]);
    desired["backup_policy"]["further_tiers"] = json!([desired["storage"][0]["durable_id"]]);
    desired["verify_policy"] = json!({ "enabled": false, "interval_hours": 8760 });
    let mut plan = plan_of(&desired, host);
    plan.backup.verify_hours = Some(1);
    desired["data_plan"] = signed_plan(&plan);
    hub.put_desired_unplanned(host, &desired).await;
    let tier = desired["storage"][0]["durable_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let status = agent.handles.reconcile.clone();
    let mut docs = Vec::new();
    for guest in [alpha, bravo] {
        let vmid = running_vmid(&status, guest).await;
        eventually(Duration::from_secs(30), "the bootstrap is pushed", || {
            let path = helper.bootstrap_path(vmid);
            async move { path.exists() }
        })
        .await;
        docs.push((vmid, helper.read_bootstrap(vmid)));
    }
    let (alpha_vmid, alpha_doc) = &docs[0];
    let (_, bravo_doc) = &docs[1];
    assert_eq!(alpha_doc.guest_id, alpha);

    // Two plan hours pass without a verification that could run: alpha is told.
    let verification = |p: &GuestProtection| {
        p.items
            .iter()
            .find(|i| i.kind == ProtectionKind::Verification)
            .cloned()
    };
    eventually(
        Duration::from_secs(60),
        "alpha's protection shows verification overdue",
        || async {
            protection(alpha_doc)
                .await
                .and_then(|p| verification(&p))
                .is_some_and(|v| v.overdue)
        },
    )
    .await;
    let seen = protection(alpha_doc).await.unwrap();
    eprintln!("{}", bosun_guest::protection::render(&seen));
    assert_eq!(seen.guest_id, alpha);
    assert_eq!(seen.vmid, *alpha_vmid);
    assert_eq!(seen.plan_serial, Some(plan.serial));
    assert!(seen.overdue);
    let v = verification(&seen).unwrap();
    assert_eq!(v.target, tier);
    assert_eq!(v.tier, Some(1));
    assert_eq!(v.promised_by, PromisedBy::SignedPlan);
    assert_eq!(
        v.interval_s, 1,
        "the plan's hour, on the verifier's own clock"
    );
    assert_eq!(v.last_result, Some(ProtectionResult::Error));
    assert_eq!(v.last_ok_at, None);
    assert!(
        v.detail
            .as_deref()
            .unwrap_or_default()
            .contains("credentials"),
        "{v:?}"
    );
    let printed = bosun_guest::protection::render(&seen);
    assert!(
        printed.contains("OVERDUE") && printed.contains("never ok; last run could not run"),
        "{printed}"
    );
    assert_eq!(
        bosun_guest::protection::exit_status(&seen),
        bosun_guest::EXIT_OVERDUE
    );

    // Bravo's token reads bravo's protection, never alpha's; naming alpha is refused.
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let (code, own) = get(&client, bravo_doc, "").await;
    assert_eq!(code, 200, "{own}");
    assert_eq!(own["guest_id"], json!(bravo));
    for query in [format!("?guest_id={alpha}"), format!("?vmid={alpha_vmid}")] {
        let (code, body) = get(&client, bravo_doc, &query).await;
        assert_eq!(code, 403, "{query}: {body}");
        assert!(body.get("items").is_none(), "{body}");
    }
    let stranger = client
        .get(format!("{}/v1/protection", alpha_doc.local_api.url))
        .bearer_auth("b".repeat(64))
        .send()
        .await
        .unwrap();
    assert_eq!(stranger.status(), 401);

    // Nothing reached PBS, and the hub was told of no verification that passed.
    let verifies = sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == format!("/admin/datastore/{STORE}/verify"))
        .count();
    assert_eq!(verifies, 0, "PBS was asked to verify without a credential");
    let reported = hub.host(host).await["last_report"]["verifications"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        reported
            .iter()
            .all(|r| r["outcome"] != "ok" && r["last_ok_at"].is_null()),
        "{reported:?}"
    );
    agent.stop().await;
    hub.stop().await;
}
