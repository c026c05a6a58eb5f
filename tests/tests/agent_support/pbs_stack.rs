//! A host backing one running guest up to the simulator's PBS every 3 s under a signed plan
//! that verifies hourly (a second an hour), and what reached PBS: the stack the verification
//! suite and the census's hostile-hub cases run on.

use std::time::Duration;

use bosun_proto::desired::StorageTarget;
use bosun_pvesim::{RemoteSpec, SimConfig, SimHandle};
use serde_json::{Value, json};
use uuid::Uuid;

use super::signing::{plan_of, signed_plan};
use super::*;

pub const STORE: &str = "store1";
pub const NAMESPACE: &str = "hosts/this";
pub const TOKEN: &str = "backup@pbs!bosun";

/// The PBS server is the simulator's own address (its listener answers PBS-token requests
/// as the backup server), pinned by the simulator's certificate.
pub fn pbs_server(sim: &SimHandle) -> (String, u16, String) {
    let url = reqwest::Url::parse(&sim.endpoint().url).unwrap();
    (
        url.host_str().unwrap().to_owned(),
        url.port().unwrap(),
        sim.endpoint().fingerprint.clone(),
    )
}

pub fn pbs_target(sim: &SimHandle, credentials: Option<&str>) -> Value {
    let (server, port, fp) = pbs_server(sim);
    let mut target = json!({
        "type": "pbs",
        "durable_id": format!("{TOKEN}@{server}:{port}:{STORE}#{fp}"),
        "class": "slow",
        "role": "pbs-offsite",
        "policy": { "schedule": "*:*:0/3", "retention": { "keep_last": 3 } },
        "state": "attached",
        "namespace": NAMESPACE,
    });
    if let Some(sealed) = credentials {
        target["credentials"] = json!(sealed);
    }
    target
}

/// The verify requests PBS received, as their parameters.
pub fn verify_requests(sim: &SimHandle) -> Vec<Vec<(String, String)>> {
    sim.requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == format!("/admin/datastore/{STORE}/verify"))
        .map(|r| r.params)
        .collect()
}

/// The PBS verifications the hub holds in the host's last report: those of the PBS tier, whose
/// durable id names the datastore (the local tier's re-hash, decision 0103, is left out).
pub async fn reported(hub: &RealHub, host: Uuid) -> Vec<Value> {
    hub.host(host).await["last_report"]["verifications"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| {
            v["tier"]
                .as_str()
                .is_some_and(|t| t.contains(&format!(":{STORE}#")))
        })
        .cloned()
        .collect()
}

pub struct Stack {
    pub sim: SimHandle,
    pub hub: RealHub,
    pub _files: AgentFiles,
    pub agent: InProcessAgent,
    pub host: Uuid,
    pub guest: Uuid,
    /// Every guest, [`Self::guest`] first.
    pub guests: Vec<Uuid>,
    pub vmid: u32,
    pub desired: Value,
    /// The PBS password, and the recipient the operator seals it to.
    pub password: String,
    pub recipient: String,
}

/// A host with one running guest backed up to the simulator's PBS every 3 s, under a plan
/// that asks for verification every `plan_hours` (one hour lasts a second here), published
/// with desired state's `verify_policy`.
pub async fn stack(plan_hours: u32, verify_policy: Value) -> Stack {
    stack_of(plan_hours, verify_policy, &["alpha"]).await
}

/// [`stack`] with a running guest of each name in `names` (the first is [`Stack::guest`]).
pub async fn stack_of(plan_hours: u32, verify_policy: Value, names: &[&str]) -> Stack {
    let sim = start_sim(SimConfig::fast()).await;
    let (server, _, fp) = pbs_server(&sim);
    let password = Uuid::new_v4().to_string();
    sim.declare_remote(
        &server,
        RemoteSpec::Pbs {
            fingerprint: fp,
            datastores: vec![STORE.into()],
            username: Some(TOKEN.into()),
            password: password.clone(),
        },
    );
    let hub = RealHub::start().await;
    let token = hub.enroll_token().await;
    let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some(&token));
    let mut config = std::fs::read_to_string(&files.config_path).unwrap();
    config.push_str("[backup]\nverify_hour_ms = 1000\n");
    std::fs::write(&files.config_path, config).unwrap();
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let guests: Vec<(Uuid, &str)> = names.iter().map(|name| (Uuid::new_v4(), *name)).collect();
    let guest = guests[0].0;
    let mut desired = desired(&sim, &guests, "running");
    hub.put_desired(host, &desired).await;
    let vmid = running_vmid(&agent.handles.reconcile, guest).await;
    for (other, _) in &guests[1..] {
        running_vmid(&agent.handles.reconcile, *other).await;
    }
    eventually(Duration::from_secs(30), "the host's recipient", || async {
        hub.host(host).await["last_report"]["storage_recipient"].is_string()
    })
    .await;
    let recipient = hub.host(host).await["last_report"]["storage_recipient"]
        .as_str()
        .unwrap()
        .to_owned();
    let identity = serde_json::from_value::<StorageTarget>(pbs_target(&sim, None))
        .unwrap()
        .identity();
    let credential = bosun_proto::sealed_credential::SealedCredential::new(
        host,
        identity,
        jiff::Timestamp::now(),
        bosun_proto::secret::SecretToken::new(password.clone()),
    );
    let sealed = super::signing::seal_signed(&recipient, &credential);
    desired["storage"] = json!([pbs_target(&sim, Some(&sealed))]);
    desired["backup_policy"]["further_tiers"] = json!([desired["storage"][0]["durable_id"]]);
    desired["verify_policy"] = verify_policy;
    let mut plan = plan_of(&desired, host);
    plan.backup.verify_hours = Some(plan_hours);
    desired["data_plan"] = signed_plan(&plan);
    hub.put_desired_unplanned(host, &desired).await;
    Stack {
        sim,
        hub,
        _files: files,
        agent,
        host,
        guest,
        guests: guests.iter().map(|(id, _)| *id).collect(),
        vmid,
        desired,
        password,
        recipient,
    }
}

/// The generation of the desired state the agent acts on.
pub fn generation(agent: &InProcessAgent) -> u64 {
    agent
        .handles
        .desired
        .borrow()
        .as_ref()
        .map_or(0, |d| d.generation)
}

/// Puts `desired` as the hub has it (no plan added) and waits until the agent acts on it.
pub async fn hub_sends(s: &Stack, desired: &Value) {
    let before = generation(&s.agent);
    s.hub.put_desired_unplanned(s.host, desired).await;
    eventually(
        Duration::from_secs(30),
        "the agent takes the hub's generation",
        || async { generation(&s.agent) > before },
    )
    .await;
}

/// The credentials the agent's PBS target carries now.
pub fn credentials_in_use(s: &Stack) -> Option<String> {
    s.agent.handles.desired.borrow().as_ref().and_then(|d| {
        d.state.storage[0]
            .credentials
            .as_ref()
            .map(|c| c.armored().to_owned())
    })
}

/// Verify calls PBS receives, and backups sent to the PBS target, within `window`.
pub async fn calls_within(s: &Stack, window: Duration) -> (usize, usize) {
    let pbs = pbs_storage(
        s.desired["storage"][0]["durable_id"].as_str().unwrap(),
        NAMESPACE,
    );
    let backups = |sim: &SimHandle| {
        sim.requests()
            .into_iter()
            .filter(|r| {
                r.method == "POST"
                    && r.path.ends_with("/vzdump")
                    && r.params
                        .iter()
                        .any(|(k, v)| k == "storage" && v == pbs.as_str())
            })
            .count()
    };
    let (verifies, backed_up) = (verify_requests(&s.sim).len(), backups(&s.sim));
    tokio::time::sleep(window).await;
    (
        verify_requests(&s.sim).len() - verifies,
        backups(&s.sim) - backed_up,
    )
}
