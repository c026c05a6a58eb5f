//! Shared setup for the PVE client tests: a simulator on loopback and clients for its tokens.
#![allow(dead_code)]

pub mod access_exercise;
pub mod qemu_exercise;

use std::time::Duration;

use bosun_pve::{
    NodeName, Pve, PveClient, PveConfig, RestoreRequest, RetryPolicy, StorageId, TlsTrust, Upid,
    Vmid, VolumeId,
};
use bosun_pvesim::{SimConfig, SimHandle, Simulator, TokenCredential};
use secrecy::SecretString;

/// A running simulator plus a client holding the agent token.
pub struct Rig {
    pub sim: SimHandle,
    pub client: PveClient,
}

/// Every test's outer time bound.
pub const TEST_BOUND: Duration = Duration::from_secs(60);

/// Test speed for the simulator: instant 401s, tasks a hundredfold faster.
pub fn fast_sim() -> SimConfig {
    SimConfig::fast()
}

pub async fn start(config: SimConfig) -> Rig {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let sim = Simulator::start(config, listener)
        .await
        .expect("simulator starts");
    let client = client_for(
        &sim,
        &sim.endpoint().tokens.agent.clone(),
        RetryPolicy::fast(),
    );
    Rig { sim, client }
}

pub fn config_for(sim: &SimHandle, token: &TokenCredential, policy: RetryPolicy) -> PveConfig {
    let ep = sim.endpoint();
    PveConfig {
        base_url: ep.url.parse().expect("simulator url parses"),
        node: NodeName::new(ep.node.clone()).expect("simulator node name is valid"),
        token_id: token.id.clone(),
        token_secret: SecretString::from(token.secret.clone()),
        trust: TlsTrust::PinnedSha256(ep.fingerprint.clone()),
        policy,
    }
}

pub fn client_for(sim: &SimHandle, token: &TokenCredential, policy: RetryPolicy) -> PveClient {
    PveClient::new(config_for(sim, token, policy)).expect("client builds")
}

pub fn golden(sim: &SimHandle) -> VolumeId {
    VolumeId::new(sim.endpoint().golden_volid.clone()).expect("golden volid is valid")
}

pub fn local() -> StorageId {
    StorageId::new("local").expect("valid")
}

pub fn local_lvm() -> StorageId {
    StorageId::new("local-lvm").expect("valid")
}

pub fn vmid(n: u32) -> Vmid {
    Vmid::new(n).expect("valid vmid")
}

/// Restores the golden archive as `id` onto `local-lvm` and waits for it.
pub async fn restore_golden(rig: &Rig, id: u32) -> Upid {
    let req = RestoreRequest::new(vmid(id), golden(&rig.sim), local_lvm());
    let upid = rig.client.restore_ct(&req).await.expect("restore starts");
    rig.client
        .wait_task(bosun_pve::Op::RestoreCt, &upid)
        .await
        .expect("restore finishes");
    upid
}

/// Runs a test body under the outer time bound.
pub async fn bounded<F: std::future::Future<Output = T>, T>(f: F) -> T {
    tokio::time::timeout(TEST_BOUND, f)
        .await
        .expect("test finished within its bound")
}
