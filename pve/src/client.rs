//! `PveClient`: the HTTPS implementation of [`Pve`] (reqwest + rustls/ring).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use regex::Regex;
use reqwest::header::{AUTHORIZATION, HeaderValue};
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serde_json::Value;
use url::Url;

use super::api::Pve;
use super::catalogue::{HttpMethod, Op};
use super::error::PveError;
use super::firewall::{DatacenterFirewall, FirewallUpdate, GuestFirewall};
use super::hardware::{NodeDisk, SmartData, ThinPool, ZfsPool};
use super::model::{
    ClusterGuest, ClusterMember, ContentItem, CtConfig, CtInterface, CtStatus, CtSummary, NodeInfo,
    NodeStatus, SnapshotInfo, StorageInfo, TaskLog, TaskLogLine, TaskStatusInfo, TaskSummary,
    VersionInfo, VolumeAttributes,
};
use super::observer::{RequestObserver, RequestOutcome};
use super::policy::RetryPolicy;
use super::property::{CtDisk, DiskSize};
use super::requests::{
    ConfigUpdate, ContentFilter, Params, RestoreRequest, StorageCreate, StorageUpdate, TaskFilter,
    VzdumpRequest,
};
use super::tls::{TlsTrust, client_config};
use super::types::{NodeName, SnapName, StorageId, Upid, Vmid, VolumeId};

static TOKEN_ID_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[^\s:/@]+@[A-Za-z][A-Za-z0-9.\-_]+![A-Za-z][A-Za-z0-9.\-_]+$")
        .expect("constant regex is valid")
});

/// Where and how to reach the PVE API.
#[derive(Debug, Clone)]
pub struct PveConfig {
    /// The API base, e.g. `https://127.0.0.1:8006/api2/json`.
    pub base_url: Url,
    /// The node to drive.
    pub node: NodeName,
    /// The token id, `user@realm!tokenid`.
    pub token_id: String,
    /// The token secret.
    pub token_secret: SecretString,
    /// How to trust the server's certificate.
    pub trust: TlsTrust,
    /// Timing and retry bounds.
    pub policy: RetryPolicy,
}

/// The HTTPS client for one PVE node. Cheap to clone.
#[derive(Debug, Clone)]
pub struct PveClient {
    http: reqwest::Client,
    base: Url,
    node: NodeName,
    /// The whole `Authorization` header value; it holds the secret.
    auth: SecretString,
    policy: RetryPolicy,
    /// Told about every request sent, when one is attached.
    observer: Option<Arc<dyn RequestObserver>>,
    /// Moves when a request that may change the node is sent and again when it ends
    /// ([`Pve::change_mark`]); shared by the clones.
    changes: Arc<AtomicU64>,
}

/// Moves a client's change mark when dropped: at the end of a request that may change the
/// node, however it ended (answered, failed, or abandoned while Proxmox may still apply it).
struct ChangeEnds<'a>(Option<&'a AtomicU64>);

impl Drop for ChangeEnds<'_> {
    fn drop(&mut self) {
        if let Some(changes) = self.0 {
            changes.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// What a call is about: the operation and the guest, for errors and logs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx {
    op: Op,
    vmid: Option<Vmid>,
}

impl Ctx {
    pub(crate) fn new(op: Op) -> Self {
        Self { op, vmid: None }
    }
    pub(crate) fn ct(op: Op, vmid: Vmid) -> Self {
        Self {
            op,
            vmid: Some(vmid),
        }
    }
}

impl PveClient {
    /// `/nodes/{node}/storage/{storage}/content/{volume}` for `volume`.
    fn volume_path<'a>(&'a self, volume: &'a VolumeId) -> [&'a str; 6] {
        [
            "nodes",
            self.node.as_str(),
            "storage",
            volume.storage(),
            "content",
            volume.as_str(),
        ]
    }

    /// Builds a client; checks the token id form and loads the TLS trust.
    pub fn new(config: PveConfig) -> Result<Self, PveError> {
        if !TOKEN_ID_RE.is_match(&config.token_id) {
            return Err(PveError::Setup {
                what: format!(
                    "token id {:?} is not of the form user@realm!tokenid",
                    config.token_id
                ),
                source: None,
            });
        }
        if config.base_url.scheme() != "https" {
            return Err(PveError::Setup {
                what: "the PVE base url must use https".into(),
                source: None,
            });
        }
        if config.base_url.cannot_be_a_base() {
            return Err(PveError::Setup {
                what: "the PVE base url cannot be a base".into(),
                source: None,
            });
        }
        let tls = client_config(&config.trust)?;
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(config.policy.connect_timeout)
            .timeout(config.policy.request_timeout)
            .build()
            .map_err(|e| PveError::Setup {
                what: "http client".into(),
                source: Some(Box::new(e)),
            })?;
        let auth = SecretString::from(format!(
            "PVEAPIToken={}={}",
            config.token_id,
            config.token_secret.expose_secret()
        ));
        Ok(Self {
            http,
            base: config.base_url,
            node: config.node,
            auth,
            policy: config.policy,
            observer: None,
            changes: Arc::new(AtomicU64::new(0)),
        })
    }

    /// This client, telling `observer` about every request it sends.
    #[must_use]
    pub fn observed_by(mut self, observer: Arc<dyn RequestObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        {
            let mut path = url
                .path_segments_mut()
                .expect("checked in new: the base url can be a base");
            path.pop_if_empty();
            path.extend(segments);
        }
        url
    }

    /// Sends one request, waiting out lock contention and retrying retry-safe transient
    /// failures within the policy's bounds; gives the whole answer body.
    async fn call_raw(
        &self,
        ctx: Ctx,
        segments: &[&str],
        params: &Params,
    ) -> Result<Vec<u8>, PveError> {
        let mut lock_attempt = 1u32;
        let mut transient_attempt = 1u32;
        let mut lock_delay = self.policy.lock_backoff.initial;
        let mut transient_delay = self.policy.transient_backoff.initial;
        loop {
            match self.send_once(ctx, segments, params).await {
                Err(e @ PveError::Locked { .. }) if lock_attempt < self.policy.lock_attempts => {
                    tracing::info!(op = ?ctx.op, vmid = ctx.vmid.map(|v| v.get()), attempt = lock_attempt, error = %e, "guest locked; waiting");
                    tokio::time::sleep(lock_delay).await;
                    lock_delay = self.policy.lock_backoff.next(lock_delay);
                    lock_attempt += 1;
                }
                Err(e)
                    if e.is_worth_asking_again()
                        && transient_attempt < self.policy.transient_attempts =>
                {
                    tracing::warn!(op = ?ctx.op, vmid = ctx.vmid.map(|v| v.get()), attempt = transient_attempt, error = %e, "pve call failed; retrying");
                    tokio::time::sleep(transient_delay).await;
                    transient_delay = self.policy.transient_backoff.next(transient_delay);
                    transient_attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn send_once(
        &self,
        ctx: Ctx,
        segments: &[&str],
        params: &Params,
    ) -> Result<Vec<u8>, PveError> {
        let endpoint = ctx.op.endpoint();
        let url = self.url(segments);
        let mut auth =
            HeaderValue::from_str(self.auth.expose_secret()).map_err(|e| PveError::Setup {
                what: "the token does not fit in an http header".into(),
                source: Some(Box::new(e)),
            })?;
        auth.set_sensitive(true);
        let builder = match endpoint.method {
            HttpMethod::Get => self.http.get(url).query(params),
            HttpMethod::Delete => self.http.delete(url).query(params),
            HttpMethod::Post => self.http.post(url).form(params),
            HttpMethod::Put => self.http.put(url).form(params),
        };
        tracing::debug!(op = ?ctx.op, vmid = ctx.vmid.map(|v| v.get()), method = %endpoint.method, "pve call");
        // A task changes the node as it runs: reading its status counts as a change too.
        let changing = !endpoint.method.is_read_only() || ctx.op == Op::TaskStatus;
        let _ends = ChangeEnds(changing.then(|| {
            self.changes.fetch_add(1, Ordering::AcqRel);
            &*self.changes
        }));
        let started = std::time::Instant::now();
        let counted = |outcome| {
            if let Some(observer) = &self.observer {
                observer.request(endpoint, outcome, started.elapsed());
            }
        };
        let response = builder
            .header(AUTHORIZATION, auth)
            .send()
            .await
            .map_err(|source| {
                let not_sent = source.is_connect() || source.is_builder();
                counted(if not_sent {
                    RequestOutcome::NotSent
                } else {
                    RequestOutcome::NoAnswer
                });
                if not_sent {
                    PveError::NotSent {
                        op: ctx.op,
                        vmid: ctx.vmid,
                        source,
                    }
                } else {
                    PveError::OutcomeUnknown {
                        op: ctx.op,
                        vmid: ctx.vmid,
                        source,
                    }
                }
            })?;
        let status = response.status();
        counted(RequestOutcome::Answered(status.as_u16()));
        // PVE up to 8.2 sends the error text only here; hyper keeps a non-canonical phrase.
        let reason = response
            .extensions()
            .get::<hyper::ext::ReasonPhrase>()
            .map(|r| String::from_utf8_lossy(r.as_bytes()).into_owned())
            .unwrap_or_else(|| status.canonical_reason().unwrap_or("").to_owned());
        let body = read_bounded(response, self.policy.max_answer_bytes)
            .await
            .map_err(|e| match e {
                Bounded::Lost(source) => PveError::OutcomeUnknown {
                    op: ctx.op,
                    vmid: ctx.vmid,
                    source,
                },
                Bounded::TooLarge => PveError::AnswerTooLarge {
                    op: ctx.op,
                    vmid: ctx.vmid,
                    limit: self.policy.max_answer_bytes,
                    status: status.as_u16(),
                },
            })?;
        if !status.is_success() {
            return Err(PveError::from_answer(
                ctx.op,
                ctx.vmid,
                status.as_u16(),
                &reason,
                &body,
            ));
        }
        Ok(body)
    }

    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        ctx: Ctx,
        segments: &[&str],
        params: &Params,
    ) -> Result<T, PveError> {
        let body = self.call_raw(ctx, segments, params).await?;
        decode_answer(ctx, &body)
    }

    fn ct_path<'a>(&'a self, vmid: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
        let mut p = vec!["nodes", self.node.as_str(), "lxc", vmid];
        p.extend_from_slice(rest);
        p
    }

    async fn ct_task(
        &self,
        op: Op,
        vmid: Vmid,
        rest: &[&str],
        params: Params,
    ) -> Result<Upid, PveError> {
        let id = vmid.to_string();
        self.call(Ctx::ct(op, vmid), &self.ct_path(&id, rest), &params)
            .await
    }

    /// `GET /access/permissions?path=PATH`: the privileges this token effectively holds on
    /// `path` (for a privilege-separated token, the intersection of its own and its user's),
    /// each with whether it propagates to the paths below. Not part of [`Pve`]: the agent
    /// itself never asks; `bosunctl pve check` does, with the agent's token.
    pub async fn permissions(&self, path: &str) -> Result<BTreeMap<String, bool>, PveError> {
        let params: Params = vec![("path".into(), path.to_owned())];
        let ctx = Ctx::new(Op::Permissions);
        let by_path: BTreeMap<String, BTreeMap<String, Value>> =
            self.call(ctx, &["access", "permissions"], &params).await?;
        let Some(privileges) = by_path.get(path) else {
            return Ok(BTreeMap::new());
        };
        privileges
            .iter()
            .map(|(name, propagate)| {
                crate::decode::value_to_bool::<serde_json::Error>(propagate)
                    .map(|p| (name.clone(), p))
                    .map_err(|source| PveError::Decode {
                        op: Op::Permissions,
                        vmid: None,
                        body_excerpt: format!("{name}: {propagate}"),
                        source,
                    })
            })
            .collect()
    }

    /// `GET /access/permissions` without a path: every path on which this token holds a
    /// privilege (PVE's defaults, each ACL's path and each pool member's `/vms/<vmid>`), with
    /// the privileges it effectively holds there. Not part of [`Pve`]: `bosunctl pve check`
    /// asks, to find reach the token should not have.
    pub async fn all_permissions(
        &self,
    ) -> Result<BTreeMap<String, BTreeMap<String, bool>>, PveError> {
        let ctx = Ctx::new(Op::Permissions);
        let by_path: BTreeMap<String, BTreeMap<String, Value>> = self
            .call(ctx, &["access", "permissions"], &Params::new())
            .await?;
        by_path
            .into_iter()
            .map(|(path, privileges)| {
                let privileges = privileges
                    .iter()
                    .map(|(name, propagate)| {
                        crate::decode::value_to_bool::<serde_json::Error>(propagate)
                            .map(|p| (name.clone(), p))
                            .map_err(|source| PveError::Decode {
                                op: Op::Permissions,
                                vmid: None,
                                body_excerpt: format!("{path} {name}: {propagate}"),
                                source,
                            })
                    })
                    .collect::<Result<BTreeMap<_, _>, _>>()?;
                Ok((path, privileges))
            })
            .collect()
    }

    /// `GET /cluster/firewall/options`: whether the datacenter's firewall is on. Not part of
    /// [`Pve`]: the agent does not need it to act; `bosunctl pve check` asks, because no
    /// guest's firewall options take effect while it is off.
    pub async fn datacenter_firewall(&self) -> Result<DatacenterFirewall, PveError> {
        self.call(
            Ctx::new(Op::DatacenterFirewall),
            &["cluster", "firewall", "options"],
            &Params::new(),
        )
        .await
    }

    /// `GET /cluster/status`: the cluster and its nodes, or the node alone when it is
    /// standalone. Not part of [`Pve`]: the agent learns where a guest went from
    /// [`Pve::cluster_guests`]; `bosunctl pve check` reports membership. Needs `Sys.Audit`
    /// on `/`.
    pub async fn cluster_status(&self) -> Result<Vec<ClusterMember>, PveError> {
        self.call(
            Ctx::new(Op::ClusterStatus),
            &["cluster", "status"],
            &Params::new(),
        )
        .await
    }

    async fn restore(
        &self,
        op: Op,
        request: &RestoreRequest,
        force: bool,
    ) -> Result<Upid, PveError> {
        let params = request.params(op, force)?;
        let ctx = Ctx::ct(op, request.vmid);
        self.call(ctx, &["nodes", self.node.as_str(), "lxc"], &params)
            .await
    }
}

/// An answer's envelope, `{"data": …}`; its other members (`errors`, `message`, `total`)
/// are not read here.
#[derive(serde::Deserialize)]
#[serde(bound = "T: DeserializeOwned")]
struct Answer<T> {
    /// Absent or `null` for a call that answers nothing.
    #[serde(default)]
    data: Option<T>,
}

/// The `data` of an answer's body, decoded straight from its bytes: no tree of it is built
/// first, which would cost an idle agent's every read twice what the decoding costs. A
/// missing or `null` `data` decodes as `null` does.
fn decode_answer<T: DeserializeOwned>(ctx: Ctx, body: &[u8]) -> Result<T, PveError> {
    let answer: Answer<T> =
        serde_json::from_slice(body).map_err(|source| undecodable(ctx, body, source))?;
    match answer.data {
        Some(data) => Ok(data),
        None => decode(ctx, Value::Null),
    }
}

/// An answer that is not JSON, or not of the shape the call expects, with its first 200
/// bytes to say what came instead.
fn undecodable(ctx: Ctx, body: &[u8], source: serde_json::Error) -> PveError {
    PveError::Decode {
        op: ctx.op,
        vmid: ctx.vmid,
        body_excerpt: String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
        source,
    }
}

fn decode<T: DeserializeOwned>(ctx: Ctx, data: Value) -> Result<T, PveError> {
    let excerpt = || {
        let s = data.to_string();
        s.chars().take(200).collect::<String>()
    };
    // Read from the tree in place: a copy of it only to keep an excerpt for the error would
    // cost every call what the decoding costs.
    T::deserialize(&data).map_err(|source| PveError::Decode {
        op: ctx.op,
        vmid: ctx.vmid,
        body_excerpt: excerpt(),
        source,
    })
}

impl Pve for PveClient {
    fn node(&self) -> &NodeName {
        &self.node
    }

    fn retry_policy(&self) -> &RetryPolicy {
        &self.policy
    }

    fn change_mark(&self) -> Option<u64> {
        Some(self.changes.load(Ordering::Acquire))
    }

    async fn version(&self) -> Result<VersionInfo, PveError> {
        self.call(Ctx::new(Op::Version), &["version"], &Params::new())
            .await
    }

    async fn nodes(&self) -> Result<Vec<NodeInfo>, PveError> {
        self.call(Ctx::new(Op::ListNodes), &["nodes"], &Params::new())
            .await
    }

    async fn node_status(&self) -> Result<NodeStatus, PveError> {
        self.call(
            Ctx::new(Op::NodeStatus),
            &["nodes", self.node.as_str(), "status"],
            &Params::new(),
        )
        .await
    }

    async fn list_disks(&self) -> Result<Vec<NodeDisk>, PveError> {
        self.call(
            Ctx::new(Op::ListDisks),
            &["nodes", self.node.as_str(), "disks", "list"],
            &Params::new(),
        )
        .await
    }

    async fn disk_smart(&self, device: &str) -> Result<SmartData, PveError> {
        let device =
            crate::hardware::smart_device(device).map_err(|source| PveError::InvalidRequest {
                op: Op::DiskSmart,
                field: "disk",
                source,
            })?;
        let params: Params = vec![("disk".to_owned(), device.to_owned())];
        self.call(
            Ctx::new(Op::DiskSmart),
            &["nodes", self.node.as_str(), "disks", "smart"],
            &params,
        )
        .await
    }

    async fn thin_pools(&self) -> Result<Vec<ThinPool>, PveError> {
        self.call(
            Ctx::new(Op::ListThinPools),
            &["nodes", self.node.as_str(), "disks", "lvmthin"],
            &Params::new(),
        )
        .await
    }

    async fn network(&self) -> Result<Vec<crate::NetworkInterface>, PveError> {
        self.call(
            Ctx::new(Op::ListNetwork),
            &["nodes", self.node.as_str(), "network"],
            &Params::new(),
        )
        .await
    }

    async fn zfs_pools(&self) -> Result<Vec<ZfsPool>, PveError> {
        self.call(
            Ctx::new(Op::ListZfsPools),
            &["nodes", self.node.as_str(), "disks", "zfs"],
            &Params::new(),
        )
        .await
    }

    async fn next_id(&self) -> Result<Vmid, PveError> {
        self.call(Ctx::new(Op::NextId), &["cluster", "nextid"], &Params::new())
            .await
    }

    async fn cluster_guests(&self) -> Result<Vec<ClusterGuest>, PveError> {
        let params: Params = vec![("type".to_owned(), "vm".to_owned())];
        self.call(
            Ctx::new(Op::ClusterResources),
            &["cluster", "resources"],
            &params,
        )
        .await
    }

    async fn list_cts(&self) -> Result<Vec<CtSummary>, PveError> {
        self.call(
            Ctx::new(Op::ListCts),
            &["nodes", self.node.as_str(), "lxc"],
            &Params::new(),
        )
        .await
    }

    async fn ct_config(&self, vmid: Vmid) -> Result<CtConfig, PveError> {
        let id = vmid.to_string();
        self.call(
            Ctx::ct(Op::GetConfig, vmid),
            &self.ct_path(&id, &["config"]),
            &Params::new(),
        )
        .await
    }

    async fn update_ct_config(&self, vmid: Vmid, update: &ConfigUpdate) -> Result<(), PveError> {
        let params = update.params(Op::UpdateConfig)?;
        let id = vmid.to_string();
        let _: Value = self
            .call(
                Ctx::ct(Op::UpdateConfig, vmid),
                &self.ct_path(&id, &["config"]),
                &params,
            )
            .await?;
        Ok(())
    }

    async fn ct_status(&self, vmid: Vmid) -> Result<CtStatus, PveError> {
        let id = vmid.to_string();
        self.call(
            Ctx::ct(Op::CtStatus, vmid),
            &self.ct_path(&id, &["status", "current"]),
            &Params::new(),
        )
        .await
    }

    async fn ct_interfaces(&self, vmid: Vmid) -> Result<Vec<CtInterface>, PveError> {
        let id = vmid.to_string();
        self.call(
            Ctx::ct(Op::CtInterfaces, vmid),
            &self.ct_path(&id, &["interfaces"]),
            &Params::new(),
        )
        .await
    }

    async fn start_ct(&self, vmid: Vmid) -> Result<Upid, PveError> {
        self.ct_task(Op::StartCt, vmid, &["status", "start"], Params::new())
            .await
    }

    async fn stop_ct(&self, vmid: Vmid) -> Result<Upid, PveError> {
        self.ct_task(Op::StopCt, vmid, &["status", "stop"], Params::new())
            .await
    }

    async fn shutdown_ct(
        &self,
        vmid: Vmid,
        timeout_secs: Option<u32>,
        force_stop: bool,
    ) -> Result<Upid, PveError> {
        let mut params = Params::new();
        if let Some(t) = timeout_secs {
            params.push(("timeout".into(), t.to_string()));
        }
        if force_stop {
            params.push(("forceStop".into(), "1".into()));
        }
        self.ct_task(Op::ShutdownCt, vmid, &["status", "shutdown"], params)
            .await
    }

    async fn restore_ct(&self, request: &RestoreRequest) -> Result<Upid, PveError> {
        self.restore(Op::RestoreCt, request, false).await
    }

    async fn restore_ct_overwrite(&self, request: &RestoreRequest) -> Result<Upid, PveError> {
        tracing::warn!(vmid = %request.vmid, "restoring over an existing container");
        self.restore(Op::RestoreCtOverwrite, request, true).await
    }

    async fn destroy_ct(&self, vmid: Vmid, purge: bool) -> Result<Upid, PveError> {
        let mut params = Params::new();
        if purge {
            params.push(("purge".into(), "1".into()));
        }
        self.ct_task(Op::DestroyCt, vmid, &[], params).await
    }

    async fn list_snapshots(&self, vmid: Vmid) -> Result<Vec<SnapshotInfo>, PveError> {
        let id = vmid.to_string();
        self.call(
            Ctx::ct(Op::ListSnapshots, vmid),
            &self.ct_path(&id, &["snapshot"]),
            &Params::new(),
        )
        .await
    }

    async fn create_snapshot(
        &self,
        vmid: Vmid,
        name: &SnapName,
        description: Option<&str>,
    ) -> Result<Upid, PveError> {
        let mut params: Params = vec![("snapname".into(), name.to_string())];
        if let Some(d) = description {
            params.push(("description".into(), d.to_owned()));
        }
        self.ct_task(Op::CreateSnapshot, vmid, &["snapshot"], params)
            .await
    }

    async fn delete_snapshot(&self, vmid: Vmid, name: &SnapName) -> Result<Upid, PveError> {
        self.ct_task(
            Op::DeleteSnapshot,
            vmid,
            &["snapshot", name.as_str()],
            Params::new(),
        )
        .await
    }

    async fn rollback_snapshot(
        &self,
        vmid: Vmid,
        name: &SnapName,
        start: bool,
    ) -> Result<Upid, PveError> {
        let mut params = Params::new();
        if start {
            params.push(("start".into(), "1".into()));
        }
        self.ct_task(
            Op::RollbackSnapshot,
            vmid,
            &["snapshot", name.as_str(), "rollback"],
            params,
        )
        .await
    }

    async fn resize_disk(
        &self,
        vmid: Vmid,
        disk: CtDisk,
        size: DiskSize,
    ) -> Result<Upid, PveError> {
        let size = size.to_param().map_err(|source| PveError::InvalidRequest {
            op: Op::ResizeDisk,
            field: "size",
            source,
        })?;
        let params: Params = vec![("disk".into(), disk.to_string()), ("size".into(), size)];
        self.ct_task(Op::ResizeDisk, vmid, &["resize"], params)
            .await
    }

    async fn vzdump(&self, request: &VzdumpRequest) -> Result<Upid, PveError> {
        let params = request.params(Op::Vzdump)?;
        let ctx = Ctx::ct(Op::Vzdump, request.vmid);
        self.call(ctx, &["nodes", self.node.as_str(), "vzdump"], &params)
            .await
    }

    async fn list_storage(&self) -> Result<Vec<StorageInfo>, PveError> {
        self.call(
            Ctx::new(Op::ListStorage),
            &["nodes", self.node.as_str(), "storage"],
            &Params::new(),
        )
        .await
    }

    async fn storage_status(&self, storage: &StorageId) -> Result<StorageInfo, PveError> {
        let path = [
            "nodes",
            self.node.as_str(),
            "storage",
            storage.as_str(),
            "status",
        ];
        self.call(Ctx::new(Op::StorageStatus), &path, &Params::new())
            .await
    }

    async fn create_storage(&self, request: &StorageCreate) -> Result<(), PveError> {
        let params = request.params(Op::CreateStorage)?;
        let _: Value = self
            .call(Ctx::new(Op::CreateStorage), &["storage"], &params)
            .await?;
        Ok(())
    }

    async fn storage_config(
        &self,
        storage: &StorageId,
    ) -> Result<serde_json::Map<String, Value>, PveError> {
        self.call(
            Ctx::new(Op::StorageConfig),
            &["storage", storage.as_str()],
            &Params::new(),
        )
        .await
    }

    async fn update_storage(
        &self,
        storage: &StorageId,
        update: &StorageUpdate,
    ) -> Result<(), PveError> {
        let params = update.params(Op::UpdateStorage)?;
        let _: Value = self
            .call(
                Ctx::new(Op::UpdateStorage),
                &["storage", storage.as_str()],
                &params,
            )
            .await?;
        Ok(())
    }

    async fn delete_storage(&self, storage: &StorageId) -> Result<(), PveError> {
        let _: Value = self
            .call(
                Ctx::new(Op::DeleteStorage),
                &["storage", storage.as_str()],
                &Params::new(),
            )
            .await?;
        Ok(())
    }

    async fn list_content(
        &self,
        storage: &StorageId,
        filter: ContentFilter,
    ) -> Result<Vec<ContentItem>, PveError> {
        let path = [
            "nodes",
            self.node.as_str(),
            "storage",
            storage.as_str(),
            "content",
        ];
        let ctx = Ctx {
            op: Op::ListContent,
            vmid: filter.vmid,
        };
        let items: Vec<ContentItem> = self.call(ctx, &path, &filter.params()).await?;
        // A server that ignores a filter must not hand back other guests' or kinds' volumes.
        Ok(items.into_iter().filter(|i| filter.matches(i)).collect())
    }

    async fn delete_volume(&self, volume: &VolumeId) -> Result<Option<Upid>, PveError> {
        let path = self.volume_path(volume);
        self.call(Ctx::new(Op::DeleteVolume), &path, &Params::new())
            .await
    }

    async fn volume_attributes(&self, volume: &VolumeId) -> Result<VolumeAttributes, PveError> {
        let path = self.volume_path(volume);
        self.call(Ctx::new(Op::VolumeAttributes), &path, &Params::new())
            .await
    }

    async fn set_volume_notes(&self, volume: &VolumeId, notes: &str) -> Result<(), PveError> {
        let path = self.volume_path(volume);
        let params: Params = vec![("notes".into(), notes.to_owned())];
        let _: Value = self
            .call(Ctx::new(Op::SetVolumeNotes), &path, &params)
            .await?;
        Ok(())
    }

    async fn extract_config(&self, volume: &VolumeId) -> Result<String, PveError> {
        let params: Params = vec![("volume".into(), volume.as_str().to_owned())];
        self.call(
            Ctx::new(Op::ExtractConfig),
            &["nodes", self.node.as_str(), "vzdump", "extractconfig"],
            &params,
        )
        .await
    }

    async fn list_tasks(&self, filter: TaskFilter) -> Result<Vec<TaskSummary>, PveError> {
        let path = ["nodes", self.node.as_str(), "tasks"];
        let ctx = Ctx {
            op: Op::ListTasks,
            vmid: Some(filter.vmid),
        };
        let mut tasks: Vec<TaskSummary> = self.call(ctx, &path, &filter.params()).await?;
        tasks.retain(|t| filter.matches(t));
        tasks.sort_by_key(|t| t.starttime);
        Ok(tasks)
    }

    async fn active_tasks(&self) -> Result<Vec<TaskSummary>, PveError> {
        let path = ["nodes", self.node.as_str(), "tasks"];
        let params: Params = vec![
            ("source".into(), "active".into()),
            ("limit".into(), TaskFilter::ACTIVE_LIMIT.to_string()),
        ];
        let mut tasks: Vec<TaskSummary> =
            self.call(Ctx::new(Op::ListTasks), &path, &params).await?;
        tasks.retain(|t| t.status.is_none());
        Ok(tasks)
    }

    async fn task_status(&self, upid: &Upid) -> Result<TaskStatusInfo, PveError> {
        let path = [
            "nodes",
            upid.node().as_str(),
            "tasks",
            upid.as_str(),
            "status",
        ];
        self.call(Ctx::new(Op::TaskStatus), &path, &Params::new())
            .await
    }

    async fn ct_firewall(&self, vmid: Vmid) -> Result<GuestFirewall, PveError> {
        let id = vmid.to_string();
        self.call(
            Ctx::ct(Op::GetFirewall, vmid),
            &self.ct_path(&id, &["firewall", "options"]),
            &Params::new(),
        )
        .await
    }

    async fn set_ct_firewall(&self, vmid: Vmid, update: &FirewallUpdate) -> Result<(), PveError> {
        let params = update.params(Op::SetFirewall)?;
        let id = vmid.to_string();
        let _: Value = self
            .call(
                Ctx::ct(Op::SetFirewall, vmid),
                &self.ct_path(&id, &["firewall", "options"]),
                &params,
            )
            .await?;
        Ok(())
    }

    async fn task_log(&self, upid: &Upid, start: u64, limit: u64) -> Result<TaskLog, PveError> {
        let path = ["nodes", upid.node().as_str(), "tasks", upid.as_str(), "log"];
        let params: Params = vec![
            ("start".into(), start.to_string()),
            ("limit".into(), limit.to_string()),
        ];
        let ctx = Ctx::new(Op::TaskLog);
        let body = self.call_raw(ctx, &path, &params).await?;
        let mut body: Value =
            serde_json::from_slice(&body).map_err(|source| undecodable(ctx, &body, source))?;
        let lines: Vec<TaskLogLine> = decode(
            ctx,
            body.get_mut("data").map(Value::take).unwrap_or(Value::Null),
        )?;
        let total = match body.get("total") {
            Some(Value::Number(n)) => n.as_u64(),
            Some(Value::String(s)) => s.parse().ok(),
            _ => None,
        }
        .unwrap_or_else(|| start + u64::try_from(lines.len()).unwrap_or(u64::MAX));
        Ok(TaskLog { total, lines })
    }
}

/// Why a bounded read of an answer stopped.
enum Bounded {
    /// The connection failed mid-answer.
    Lost(reqwest::Error),
    /// The answer went on past the bound.
    TooLarge,
}

/// Reads `response`'s body, at most `limit` bytes of it: a longer answer is refused as soon
/// as it passes the bound (its declared length first), never held whole.
async fn read_bounded(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, Bounded> {
    let declared = response.content_length().unwrap_or(0);
    if usize::try_from(declared).map_or(true, |d| d > limit) {
        return Err(Bounded::TooLarge);
    }
    let mut body = Vec::with_capacity(usize::try_from(declared).unwrap_or(0));
    while let Some(chunk) = response.chunk().await.map_err(Bounded::Lost)? {
        if body.len() + chunk.len() > limit {
            return Err(Bounded::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod answer_tests {
    use super::*;

    fn ctx() -> Ctx {
        Ctx::new(Op::ListCts)
    }

    #[test]
    fn the_data_member_is_decoded_and_the_rest_left_unread() {
        let body = br#"{"errors":null,"data":[{"vmid":101,"name":"a"},{"vmid":102}],"total":2}"#;
        let got: Vec<BTreeMap<String, Value>> = decode_answer(ctx(), body).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0]["vmid"], 101);
        let bare: Vec<u32> = decode_answer(ctx(), br#"{"data":[1,2,3]}"#).unwrap();
        assert_eq!(bare, [1, 2, 3]);
    }

    #[test]
    fn a_missing_or_null_data_decodes_as_null_does() {
        for body in [&br#"{"data":null}"#[..], br"{}", br#"{"success":1}"#] {
            let none: Option<u32> = decode_answer(ctx(), body).unwrap();
            assert_eq!(none, None);
            let value: Value = decode_answer(ctx(), body).unwrap();
            assert_eq!(value, Value::Null);
            decode_answer::<()>(ctx(), body).unwrap();
            // What cannot be null is refused, as it was from a tree.
            let err = decode_answer::<Vec<u32>>(ctx(), body).unwrap_err();
            assert!(
                matches!(
                    err,
                    PveError::Decode {
                        op: Op::ListCts,
                        ..
                    }
                ),
                "{err:?}"
            );
        }
        let some: Option<u32> = decode_answer(ctx(), br#"{"data":7}"#).unwrap();
        assert_eq!(some, Some(7));
    }

    #[test]
    fn an_answer_of_another_shape_or_not_json_is_a_decode_error_with_its_start() {
        let long = format!(r#"{{"data":"{}"}}"#, "x".repeat(500));
        let err = decode_answer::<Vec<u32>>(ctx(), long.as_bytes()).unwrap_err();
        let PveError::Decode { body_excerpt, .. } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(body_excerpt.len(), 200);
        assert!(body_excerpt.starts_with(r#"{"data":"xxx"#));
        for body in [
            &b"<html>502 Bad Gateway</html>"[..],
            b"",
            br#"{"data":[1,2"#,
        ] {
            let err = decode_answer::<Vec<u32>>(ctx(), body).unwrap_err();
            let PveError::Decode { body_excerpt, .. } = &err else {
                panic!("{err:?}");
            };
            assert_eq!(body_excerpt.as_bytes(), body);
        }
        // Bytes that are not UTF-8 do not make the excerpt panic.
        let err = decode_answer::<Vec<u32>>(ctx(), &[0xff, 0xfe, b'{']).unwrap_err();
        assert!(matches!(err, PveError::Decode { .. }), "{err:?}");
    }
}
