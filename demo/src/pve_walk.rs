//! The Proxmox layer walk: a simulated node, the agent's typed client with the `BosunAgent`
//! token and a pinned certificate, and one guest's life from golden archive to destruction.

use std::path::Path;
use std::time::Duration;

use bosun_pve::{
    BackupMode, ContentFilter, ContentType, CtOptions, GuestStatus, Op, Pve, PveClient, PveConfig,
    PveError, RestoreRequest, RetryPolicy, SnapName, StorageId, TlsTrust, Upid, VolumeId,
    VzdumpRequest, read_log,
};
use secrecy::SecretString;
use serde::Deserialize;

use super::children::{Children, wait_for_json};
use super::{DemoError, Narrator};

/// The parts of the simulator's `endpoint.json` the walk uses.
#[derive(Debug, Deserialize)]
struct SimEndpoint {
    url: String,
    fingerprint: String,
    node: String,
    golden_volid: String,
    tokens: SimTokens,
}

#[derive(Debug, Deserialize)]
struct SimTokens {
    agent: SimToken,
}

#[derive(Debug, Deserialize)]
struct SimToken {
    id: String,
    secret: String,
}

fn pve(what: &'static str) -> impl FnOnce(PveError) -> DemoError {
    move |source| DemoError::Pve { what, source }
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), DemoError> {
    if ok {
        Ok(())
    } else {
        Err(DemoError::Check(what()))
    }
}

/// Runs the walk. Children it starts are left in `children` for the caller to stop.
pub async fn run(
    n: &mut Narrator,
    children: &mut Children,
    bins: &Path,
    out: &Path,
    time_scale: f64,
) -> Result<(), DemoError> {
    n.say("Bosun demo: the Proxmox layer");
    n.say(format!(
        "a simulated Proxmox VE node, driven by the agent's own client (tasks at {time_scale}× real time)"
    ));
    n.say("");

    let endpoint = n
        .step(
            "start a simulated Proxmox VE node (bosun-pvesim)",
            async |n| {
                let data = out.join("pvesim");
                let config = out.join("pvesim.toml");
                std::fs::write(
                    &config,
                    format!("time_scale = {time_scale}\nauth_failure_delay = 3000\n"),
                )
                .map_err(|source| DemoError::Artifact {
                    path: config.clone(),
                    source,
                })?;
                let program = super::stack::program(bins, "bosun-pvesim")?;
                let data_arg = data.display().to_string();
                let config_arg = config.display().to_string();
                children.spawn(
                    "bosun-pvesim",
                    &program,
                    &[
                        "--listen",
                        "127.0.0.1:0",
                        "--data",
                        &data_arg,
                        "--config",
                        &config_arg,
                    ],
                    &out.join("logs/pvesim.log"),
                    None,
                )?;
                let endpoint: SimEndpoint = wait_for_json(
                    &data.join("endpoint.json"),
                    Duration::from_secs(20),
                    children,
                )
                .await?;
                n.detail(format!("api          {}", endpoint.url));
                n.detail(format!("certificate  {}", endpoint.fingerprint));
                n.detail(format!("golden       {}", endpoint.golden_volid));
                Ok(endpoint)
            },
        )
        .await?;

    let client = n
        .step(
            "connect with the privilege-separated BosunAgent token, certificate pinned",
            async |n| {
                let config = PveConfig {
                    base_url: endpoint.url.parse().map_err(|err| {
                        DemoError::Check(format!("endpoint url {}: {err}", endpoint.url))
                    })?,
                    node: endpoint
                        .node
                        .parse()
                        .map_err(|err| DemoError::Check(format!("node name: {err}")))?,
                    token_id: endpoint.tokens.agent.id.clone(),
                    token_secret: SecretString::from(endpoint.tokens.agent.secret.clone()),
                    trust: TlsTrust::PinnedSha256(endpoint.fingerprint.clone()),
                    policy: RetryPolicy::default(),
                };
                let client = PveClient::new(config).map_err(pve("building the client"))?;
                let version = client.version().await.map_err(pve("GET /version"))?;
                let nodes = client.nodes().await.map_err(pve("GET /nodes"))?;
                n.detail(format!(
                    "token {} sees Proxmox VE {} with {} node(s)",
                    endpoint.tokens.agent.id,
                    version.version,
                    nodes.len()
                ));
                Ok(client)
            },
        )
        .await?;

    let vmid = n
        .step(
            "restore the golden archive into a new guest (token-covered, keyctl kept)",
            async |n| {
                let golden: VolumeId = endpoint
                    .golden_volid
                    .parse()
                    .map_err(|err| DemoError::Check(format!("golden volid: {err}")))?;
                let storage: StorageId = "local-lvm"
                    .parse()
                    .map_err(|err| DemoError::Check(format!("storage id: {err}")))?;
                let first = client.next_id().await.map_err(pve("GET /cluster/nextid"))?;
                let mut request = RestoreRequest::new(first, golden, storage);
                request.options = CtOptions {
                    hostname: Some("demo-guest".to_owned()),
                    cores: Some(2),
                    memory: Some(2048),
                    ..CtOptions::default()
                };
                let (vmid, upid) = client
                    .restore_ct_next_id(&request)
                    .await
                    .map_err(pve("restore"))?;
                wait(&client, n, Op::RestoreCt, &upid).await?;
                let config = client.ct_config(vmid).await.map_err(pve("GET config"))?;
                let features = config.get_str("features").unwrap_or_default();
                n.detail(format!(
                    "guest {vmid}: hostname {}, features {features}",
                    config.hostname().unwrap_or_default()
                ));
                check(features.contains("keyctl=1"), || {
                    format!("restored guest lost keyctl: features `{features}`")
                })?;
                Ok(vmid)
            },
        )
        .await?;

    n.step("start the guest", async |n| {
        let upid = client.start_ct(vmid).await.map_err(pve("start"))?;
        wait(&client, n, Op::StartCt, &upid).await?;
        let status = client.ct_status(vmid).await.map_err(pve("status"))?;
        check(status.status == GuestStatus::Running, || {
            format!("guest {vmid} is {:?} after start", status.status)
        })
    })
    .await?;

    n.step("snapshot the guest before a deploy", async |n| {
        let name: SnapName = "before-deploy"
            .parse()
            .map_err(|err| DemoError::Check(format!("snapshot name: {err}")))?;
        let upid = client
            .create_snapshot(vmid, &name, Some("taken by the Bosun demo"))
            .await
            .map_err(pve("snapshot"))?;
        wait(&client, n, Op::CreateSnapshot, &upid).await?;
        let snapshots = client
            .list_snapshots(vmid)
            .await
            .map_err(pve("list snapshots"))?;
        let names: Vec<&str> = snapshots.iter().map(|s| s.name.as_str()).collect();
        n.detail(format!("snapshots: {}", names.join(", ")));
        check(names.contains(&"before-deploy"), || {
            format!("snapshot list {names:?} lacks before-deploy")
        })
    })
    .await?;

    let volid = n
        .step(
            "back the guest up with vzdump (snapshot mode, zstd, storage local)",
            async |n| {
                let storage: StorageId = "local"
                    .parse()
                    .map_err(|err| DemoError::Check(format!("storage id: {err}")))?;
                let mut request = VzdumpRequest::new(vmid, storage);
                request.mode = BackupMode::Snapshot;
                let outcome = client.backup_ct(&request).await.map_err(pve("vzdump"))?;
                let log = read_log(&client, &outcome.task.upid)
                    .await
                    .map_err(pve("task log"))?;
                for line in log.iter().filter(|l| {
                    l.t.contains("storage snapshot") || l.t.contains("creating vzdump archive")
                }) {
                    n.detail(format!("log: {}", line.t));
                }
                n.detail(format!("archive {}", outcome.volid));
                Ok(outcome.volid)
            },
        )
        .await?;

    n.step("list the backup archives on storage local", async |n| {
        let storage: StorageId = "local"
            .parse()
            .map_err(|err| DemoError::Check(format!("storage id: {err}")))?;
        let items = client
            .list_content(
                &storage,
                ContentFilter {
                    content: Some(ContentType::Backup),
                    vmid: None,
                },
            )
            .await
            .map_err(pve("list content"))?;
        for item in &items {
            n.detail(item.volid.clone());
        }
        check(items.iter().any(|i| i.volid == volid), || {
            format!("{volid} is not listed on storage local")
        })
    })
    .await?;

    n.step("stop and destroy the guest (purge)", async |n| {
        let upid = client.stop_ct(vmid).await.map_err(pve("stop"))?;
        wait(&client, n, Op::StopCt, &upid).await?;
        let upid = client
            .destroy_ct(vmid, true)
            .await
            .map_err(pve("destroy"))?;
        wait(&client, n, Op::DestroyCt, &upid).await?;
        let left = client.list_cts().await.map_err(pve("list guests"))?;
        check(left.iter().all(|ct| ct.vmid != vmid), || {
            format!("guest {vmid} is still listed after destroy")
        })
    })
    .await?;
    Ok(())
}

async fn wait<P: Pve>(client: &P, n: &mut Narrator, op: Op, upid: &Upid) -> Result<(), DemoError> {
    let outcome = client
        .wait_task(op, upid)
        .await
        .map_err(pve("waiting for the task"))?;
    let warnings = match outcome.warnings {
        0 => String::new(),
        w => format!(" with {w} warning(s)"),
    };
    n.detail(format!("task {upid} ok{warnings}"));
    Ok(())
}
