//! The set-up the VM suites share (decision 0114, 0117): the host's pool of addresses a VM's
//! `ipconfig0` comes from, the VM golden archive with its document signed for a VM, desired
//! states of VM guests, and a running VM provisioned by the real agent and hub.

use std::time::Duration;

use bosun_proto::desired::GuestKind;
use bosun_proto::golden::GoldenDocument;
use bosun_pvesim::SimHandle;
use serde_json::{Value, json};
use uuid::Uuid;

use super::signing::signed_golden_document;
use super::{AgentFiles, InProcessAgent, RealHub, enrolled_stack, running_vmid};

/// The host's pool of addresses (decision 0101): a VM's `ipconfig0` comes from it.
pub const POOL: &str = "[addresses]\nbridge = \"vmbr0\"\nipv4_first = \"192.0.2.20\"\n\
                        ipv4_last = \"192.0.2.29\"\nipv4_prefix = 24\nipv4_gateway = \"192.0.2.1\"\n";

/// Where every guest's bootstrap lives.
pub const BOOTSTRAP: &str = "/etc/bosun-bootstrap/bootstrap.json";

/// Appends `text` to the agent's config.
pub fn append_config(files: &AgentFiles, text: &str) {
    let mut config = std::fs::read_to_string(&files.config_path).unwrap();
    config.push_str(text);
    std::fs::write(&files.config_path, config).unwrap();
}

/// The value of `key=` in a property string.
pub fn part<'a>(value: &'a str, key: &str) -> Option<&'a str> {
    value
        .split(',')
        .find_map(|p| p.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

/// A desired state of `guests`, each `(id, name, kind, golden entry)`: 2 cores, 1 GiB, a
/// 10 GiB root disk, running.
pub fn desired_of(guests: &[(Uuid, &str, GuestKind, Value)]) -> Value {
    json!({
        "schema": "bosun.desired/v1",
        "guests": guests.iter().map(|(id, name, kind, golden)| json!({
            "guest_id": id,
            "kind": kind.as_str(),
            "hostname": name,
            "customer": { "customer_id": "acme", "display_name": "Acme" },
            "resources": { "cores": 2, "memory_mib": 1024, "rootfs_gib": 10 },
            "power": "running",
            "golden": golden,
        })).collect::<Vec<_>>(),
        "backup_policy": { "schedule": "daily", "retention": {} },
        "restore_test_policy": { "enabled": false, "interval_days": 7, "timeout_minutes": 30 },
    })
}

/// The VM golden archive, seeded in the simulator, with the hash the (fake) helper reads
/// from its file; and its golden entry signed for a VM.
pub fn vm_golden(sim: &SimHandle, files: &AgentFiles) -> (String, String, Value) {
    let volid = sim.add_vm_golden();
    let sha = "5e".repeat(32);
    files.helper.set_archive(&volid, &sha);
    let entry =
        signed_golden_document(&GoldenDocument::new(&volid, &sha).for_kind(GuestKind::Qemu));
    (volid, sha, entry)
}

/// A VM an administrator restored outside Bosun from `volid`, at `vmid`, running: never
/// Bosun's to touch unless a signed `adopt` names it.
pub async fn foreign_vm(sim: &SimHandle, volid: &str, vmid: u32) {
    let vmid = bosun_pve::Vmid::new(vmid).unwrap();
    let mut request = bosun_pve::VmRestoreRequest::new(
        vmid,
        bosun_pve::VolumeId::new(volid.to_owned()).unwrap(),
        bosun_pve::StorageId::new("local-lvm".to_owned()).unwrap(),
    );
    request.start = true;
    let root = super::root_client(sim);
    let upid = bosun_pve::PveQemu::restore_vm(&root, &request)
        .await
        .unwrap();
    bosun_pve::Pve::wait_task(&root, bosun_pve::Op::RestoreVm, &upid)
        .await
        .unwrap();
}

/// `PUT /pools` adding `vmid` to pool `bosun` with `token` (root's: the operator's `pveum pool
/// modify bosun --vms VMID`; the agent's: what a compromised agent would try): the status and
/// PVE's message.
pub async fn join_bosun_pool(
    sim: &SimHandle,
    token: &bosun_pvesim::TokenCredential,
    vmid: u32,
) -> (u16, String) {
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let resp = client
        .put(format!("{}/pools", sim.endpoint().url))
        .header("Authorization", token.header_value())
        .form(&[("poolid", "bosun"), ("vms", &vmid.to_string())])
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    (
        status,
        body["message"].as_str().unwrap_or_default().to_owned(),
    )
}

/// The requests that reached Proxmox, as `(method, path)`.
pub fn calls(sim: &SimHandle) -> Vec<(String, String)> {
    sim.requests()
        .into_iter()
        .map(|r| (r.method, r.path))
        .collect()
}

/// The VM restores (`POST /nodes/pve/qemu`) that reached Proxmox, by archive.
pub fn vm_restores(sim: &SimHandle) -> Vec<String> {
    sim.requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/nodes/pve/qemu")
        .filter_map(|r| {
            r.params
                .iter()
                .find(|(k, _)| k == "archive")
                .map(|(_, v)| v.clone())
        })
        .collect()
}

/// One running VM guest provisioned end to end: the simulator, the hub, the agent (its local
/// API on, the host's pool of addresses), the guest, its vmid and the desired state that made
/// it.
pub struct VmStack {
    pub sim: SimHandle,
    pub hub: RealHub,
    pub files: AgentFiles,
    pub agent: InProcessAgent,
    pub host: Uuid,
    pub guest: Uuid,
    pub vmid: u32,
    pub desired: Value,
}

/// The agent's backups go to `local` (the first tier a signed plan backs guests up to).
pub const LOCAL_BACKUPS: &str = "[backup]\nstorage = \"local\"\n";

/// Destroys VM `vmid` behind the agent's back (root's `qm stop`, then `qm destroy --purge`).
pub async fn destroy_vm_behind_its_back(sim: &SimHandle, vmid: u32) {
    use bosun_pve::PveQemu as _;
    let root = super::root_client(sim);
    let id = bosun_pve::Vmid::new(vmid).unwrap();
    if sim.vm_running(vmid) == Some(true) {
        let upid = root.stop_vm(id).await.unwrap();
        sim.wait_task(&upid.to_string(), Duration::from_secs(30))
            .await
            .unwrap();
    }
    let upid = root.destroy_vm(id, true).await.unwrap();
    sim.wait_task(&upid.to_string(), Duration::from_secs(30))
        .await
        .unwrap();
    assert!(sim.vm_config(vmid).is_none(), "vm {vmid} is gone");
}

/// The MAC of VM `vmid`'s `net0` (`virtio=<MAC>` or `macaddr=`).
pub fn vm_mac(sim: &SimHandle, vmid: u32) -> Option<String> {
    let net0 = sim.vm_config(vmid)?.get("net0")?.clone();
    net0.split(',').find_map(|p| {
        p.strip_prefix("macaddr=")
            .or_else(|| p.strip_prefix("virtio="))
            .map(str::to_owned)
    })
}

/// The SMBIOS uuid of VM `vmid` (`smbios1: uuid=…`).
pub fn vm_uuid(sim: &SimHandle, vmid: u32) -> Option<String> {
    let smbios = sim.vm_config(vmid)?.get("smbios1")?.clone();
    part(&smbios, "uuid").map(str::to_owned)
}

/// The `vzdump-qemu` archives of `vmid` on `local`, oldest first.
pub fn vm_archives(sim: &SimHandle, vmid: u32) -> Vec<String> {
    let prefix = format!("local:backup/vzdump-qemu-{vmid}-");
    let mut found: Vec<String> = sim
        .storage_volumes("local")
        .into_iter()
        .filter(|v| v.starts_with(&prefix))
        .collect();
    found.sort();
    found
}

/// The restores the agent sent to `sim`, of either kind, as `(path, vmid, archive)`.
pub fn agent_restores_of_any_kind(sim: &SimHandle) -> Vec<(String, String, String)> {
    let agent = sim.endpoint().tokens.agent.id.clone();
    sim.requests()
        .into_iter()
        .filter(|r| r.token_id.as_deref() == Some(agent.as_str()))
        .filter(|r| r.method == "POST" && (r.path.ends_with("/lxc") || r.path.ends_with("/qemu")))
        .map(|r| {
            let get = |k: &str| {
                r.params
                    .iter()
                    .find(|(key, _)| key == k)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            // A container's restore names its archive `ostemplate`.
            let archive = match get("archive") {
                a if a.is_empty() => get("ostemplate"),
                a => a,
            };
            (r.path.clone(), get("vmid"), archive)
        })
        .collect()
}

/// Backs `desired`'s guests up to `local` every 5 s under a signed plan until each of `vmids`
/// (VMs or containers, by `archives_of`) has `count` archives, then signs a daily plan and
/// waits for the last backup to end; gives each vmid's archives, oldest first.
pub async fn backed_up(
    hub: &RealHub,
    host: Uuid,
    desired: &mut Value,
    (sim, vmids, count): (&SimHandle, &[u32], usize),
    archives_of: impl Fn(&SimHandle, u32) -> Vec<String>,
) -> Vec<Vec<String>> {
    desired["backup_policy"]["schedule"] = json!("*:*:0/5");
    desired["data_plan"] = super::signing::signed_plan(&super::signing::plan_of(desired, host));
    hub.put_desired(host, desired).await;
    super::eventually(
        Duration::from_secs(90),
        "every guest backed up by the plan",
        || {
            let done = vmids.iter().all(|v| archives_of(sim, *v).len() >= count);
            async move { done }
        },
    )
    .await;
    desired["backup_policy"]["schedule"] = json!("daily");
    desired["data_plan"] = super::signing::signed_plan(&super::signing::plan_of(desired, host));
    hub.put_desired(host, desired).await;
    // A backup the fast plan started ends before the guests are looked at.
    tokio::time::sleep(Duration::from_secs(6)).await;
    super::eventually(Duration::from_secs(30), "no backup holds a lock", || {
        let free = vmids.iter().all(|v| {
            let vm = sim.vm_config(*v).is_none_or(|c| !c.contains_key("lock"));
            let ct = sim.guest_config(*v).is_none_or(|c| !c.contains_key("lock"));
            vm && ct
        });
        async move { free }
    })
    .await;
    vmids.iter().map(|v| archives_of(sim, *v)).collect()
}

impl VmStack {
    /// Provisions one VM guest, `vm-shop`, and waits until it runs with its bootstrap.
    pub async fn running() -> Self {
        Self::running_with("").await
    }

    /// [`Self::running`] with `extra` in the agent's config (after its local API's).
    pub async fn running_with(extra: &str) -> Self {
        let (sim, hub, files) = enrolled_stack().await;
        sim.set_datacenter_firewall(true);
        append_config(&files, POOL);
        files.use_local_api(0, extra);
        let (_, _, golden) = vm_golden(&sim, &files);
        let agent = InProcessAgent::start(&files.config_path).await;
        let host = agent.handles.host_id;
        let guest = Uuid::new_v4();
        let desired = desired_of(&[(guest, "vm-shop", GuestKind::Qemu, golden)]);
        hub.put_desired(host, &desired).await;
        let vmid = running_vmid(&agent.handles.reconcile, guest).await;
        super::eventually(
            Duration::from_secs(30),
            "the vm's bootstrap is written",
            || {
                let sim = &sim;
                async move { sim.vm_file(vmid, BOOTSTRAP).is_some() }
            },
        )
        .await;
        Self {
            sim,
            hub,
            files,
            agent,
            host,
            guest,
            vmid,
            desired,
        }
    }

    /// Sends `desired` to the agent and keeps it as the stack's.
    pub async fn put_desired(&mut self, desired: Value) {
        self.hub.put_desired(self.host, &desired).await;
        self.desired = desired;
    }

    /// The agent's last report of the guest.
    pub fn report(&self) -> Option<bosun_proto::report::GuestReport> {
        self.agent
            .handles
            .reconcile
            .borrow()
            .guests
            .iter()
            .find(|g| g.guest_id == Some(self.guest))
            .cloned()
    }

    /// Stops the agent, the hub and the simulator.
    pub async fn stop(self) {
        self.agent.stop().await;
        self.hub.stop().await;
        self.sim.shutdown().await;
    }
}
