//! A host that backs its guests up to an offsite PBS, encrypted with its keys: the old box
//! of the host-loss walk and of the rotation suite. Its agent runs in-process; the escrow
//! commands run through the library (or a child process, to kill them half-way).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use bosun_agentctl::escrow::code::RecoveryCode;
use bosun_agentctl::escrow::command::SheetOptions;
use bosun_agentctl::escrow::wrap;
use bosun_agentd::config::AgentConfig;
use bosun_agentd::trust::keys::pbs_key::PbsKeyring;
use bosun_proto::desired::GuestKind;
use bosun_proto::escrow::EscrowBlob;
use bosun_pve::{ContentFilter, ContentType, Pve as _, StorageId};
use bosun_pvesim::{SimConfig, SimHandle};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::agent_support::jobs::{job_result, submit};
use crate::agent_support::signing::OperatorKey;
use crate::agent_support::*;

/// The PBS server's certificate fingerprint.
pub const FP: &str = "12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0";
/// The PBS server.
pub const PBS: &str = "pbs.example";
/// A low scrypt factor keeps the tests quick; the real one is measured in escrow_bench.
pub const WORK_FACTOR: u8 = 12;

/// The PBS target's `durable_id`.
pub fn pbs_durable() -> String {
    format!("backup@pbs!bosun@{PBS}:store1#{FP}")
}

/// The desired state with a PBS tier whose password is sealed to `recipient`.
pub fn with_pbs(desired: &mut Value, host: Uuid, recipient: &str, password: &str) {
    let durable = pbs_durable();
    let mut target = json!({
        "type": "pbs", "durable_id": durable, "class": "slow", "role": "pbs-offsite",
        "policy": { "schedule": "03:00", "retention": {} }, "state": "attached",
        "namespace": format!("host-{}", host.simple()),
    });
    target["credentials"] = json!(seal_for(recipient, host, &target, password));
    desired["storage"] = json!([target]);
    desired["backup_policy"]["further_tiers"] = json!([durable]);
}

/// A signed force-backup of `guest` (at `vmid`) to `storage`; gives the archive's volid.
pub async fn back_up(
    hub: &RealHub,
    operator: &OperatorKey,
    dir: &Path,
    host: Uuid,
    guest: Uuid,
    vmid: u32,
    storage: &str,
) -> String {
    let (h, g, v, p) = (
        host.to_string(),
        guest.to_string(),
        vmid.to_string(),
        format!("storage={storage}"),
    );
    let args = [
        "--kind",
        "force-backup",
        "--host",
        &h,
        "--guest",
        &g,
        "--vmid",
        &v,
        "--param",
        &p,
    ];
    let job = submit(hub, operator, dir, &args).await;
    let result = job_result(hub, host, job).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    result["output"]["volid"].as_str().unwrap().to_owned()
}

/// The sheet options of the escrows made here: the PDF into `dir`, no extras.
pub fn sheet_options(dir: &Path) -> SheetOptions {
    SheetOptions {
        dir: dir.to_owned(),
        include_blob: false,
        paper_key: false,
        customer: None,
        operator: None,
        operator_contact: None,
        work_factor: WORK_FACTOR,
    }
}

/// A host on its own simulated node, enrolled at `hub` (through `hub_url`, a tap or the hub
/// itself), running `names` guests with a PBS tier.
pub struct PbsHost {
    pub sim: SimHandle,
    pub files: AgentFiles,
    pub agent: InProcessAgent,
    pub operator: OperatorKey,
    pub host: Uuid,
    pub config: AgentConfig,
    pub password: String,
    pub recipient: String,
    pub state: Value,
    /// The PBS target's storage.
    pub pbs: StorageId,
    /// The guests, with their vmids.
    pub guests: Vec<(Uuid, String, u32)>,
}

impl PbsHost {
    pub async fn start(hub: &RealHub, hub_url: &str, names: &[&str]) -> Self {
        let guests: Vec<(&str, GuestKind)> = names.iter().map(|n| (*n, GuestKind::Lxc)).collect();
        Self::start_kinds(hub, hub_url, &guests).await
    }

    /// [`Self::start`] with guests of either kind: a VM gets its address from the host's pool
    /// and is provisioned from the VM golden archive signed for VMs.
    pub async fn start_kinds(hub: &RealHub, hub_url: &str, guests: &[(&str, GuestKind)]) -> Self {
        let password = format!("pbs-{}", Uuid::new_v4().simple());
        let sim = start_sim(SimConfig::fast()).await;
        sim.add_pbs_remote(PBS, FP, "store1", &password);
        let token = hub.enroll_token().await;
        let files = agent_files(&sim, hub_url, &hub.fingerprint, Some(&token));
        let operator = files.trusted_operator();
        let vms = guests.iter().any(|(_, kind)| *kind == GuestKind::Qemu);
        let vm_golden = vms.then(|| {
            crate::agent_support::vm::append_config(&files, crate::agent_support::vm::POOL);
            crate::agent_support::vm::vm_golden(&sim, &files).2
        });
        let agent = InProcessAgent::start(&files.config_path).await;
        let host = agent.handles.host_id;
        let ct_golden =
            signing::signed_golden(&sim.endpoint().golden_volid, &sim.endpoint().golden_sha256);
        let ids: Vec<(Uuid, &str, GuestKind, Value)> = guests
            .iter()
            .map(|(name, kind)| {
                let golden = match kind {
                    GuestKind::Lxc => ct_golden.clone(),
                    GuestKind::Qemu => vm_golden.clone().unwrap_or_default(),
                };
                (Uuid::new_v4(), *name, *kind, golden)
            })
            .collect();
        let mut state = if vms {
            crate::agent_support::vm::desired_of(&ids)
        } else {
            let named: Vec<(Uuid, &str)> = ids.iter().map(|(g, n, _, _)| (*g, *n)).collect();
            desired(&sim, &named, "running")
        };
        let recipient = hub_recipient(hub, host).await;
        with_pbs(&mut state, host, &recipient, &password);
        hub.put_desired(host, &state).await;
        let pbs = pbs_storage(&pbs_durable(), &format!("host-{}", host.simple()));
        let mut guests = Vec::new();
        for (guest, name, _, _) in ids {
            let vmid = running_vmid(&agent.handles.reconcile, guest).await;
            guests.push((guest, name.to_owned(), vmid));
        }
        let config = AgentConfig::load(&files.config_path).unwrap();
        Self {
            sim,
            files,
            agent,
            operator,
            host,
            config,
            password,
            recipient,
            state,
            pbs,
            guests,
        }
    }

    /// A backup of guest `index` to PBS; gives its volid.
    pub async fn back_up(&self, hub: &RealHub, index: usize) -> String {
        let (guest, _, vmid) = &self.guests[index];
        let archive = back_up(
            hub,
            &self.operator,
            self.files.dir.path(),
            self.host,
            *guest,
            *vmid,
            self.pbs.as_str(),
        )
        .await;
        assert!(archive.starts_with(self.pbs.as_str()), "{archive}");
        archive
    }

    /// The fingerprint of the key Proxmox lists `archive` as encrypted with.
    pub async fn archive_key(&self, archive: &str) -> Option<String> {
        let storage = StorageId::new(archive.split_once(':').unwrap().0).unwrap();
        let items = root_client(&self.sim)
            .list_content(
                &storage,
                ContentFilter {
                    content: Some(ContentType::Backup),
                    vmid: None,
                },
            )
            .await
            .unwrap();
        items
            .into_iter()
            .find(|i| i.volid == archive)
            .and_then(|i| i.encrypted)
    }

    /// The key fingerprint `storage.cfg` holds for `storage` (`encryption-key`), if any.
    pub async fn storage_key(&self, storage: &StorageId) -> Option<String> {
        let config = root_client(&self.sim).storage_config(storage).await.ok()?;
        config
            .get("encryption-key")
            .and_then(Value::as_str)
            .map(str::to_owned)
    }

    /// The proof the journal recorded for `archive` of guest `index` (`{kind, fingerprint,
    /// binding}` for PBS).
    pub async fn proof(&self, index: usize, archive: &str) -> Value {
        let guest = self.guests[index].0.to_string();
        let recorded = self
            .agent
            .handles
            .journal
            .good_archives(guest, self.pbs.as_str().to_owned(), 32)
            .await
            .unwrap();
        let good = recorded
            .into_iter()
            .find(|g| g.archive == archive)
            .unwrap_or_else(|| panic!("{archive} is not journaled"));
        serde_json::to_value(good.proof).unwrap()
    }

    /// The keys on the box: current first.
    pub fn keys(&self) -> Vec<String> {
        PbsKeyring::load(&self.config.state_dir)
            .unwrap()
            .map(|r| r.fingerprints())
            .unwrap_or_default()
    }

    /// Waits until the PBS storage holds the box's current key.
    pub async fn storage_holds_current_key(&self) {
        let current = self.keys()[0].clone();
        eventually(
            Duration::from_secs(30),
            "the PBS storage holds the current key",
            || async {
                self.storage_key(&self.pbs)
                    .await
                    .is_some_and(|k| k.eq_ignore_ascii_case(&current))
            },
        )
        .await;
    }

    /// A signed restore-now of guest `index` from `archive`; gives the job's result.
    pub async fn restore_now(&self, hub: &RealHub, index: usize, archive: &str) -> Value {
        let (guest, _, vmid) = &self.guests[index];
        let (h, g, v, p) = (
            self.host.to_string(),
            guest.to_string(),
            vmid.to_string(),
            format!("backup={archive}"),
        );
        let args = [
            "--kind",
            "restore-now",
            "--host",
            &h,
            "--guest",
            &g,
            "--vmid",
            &v,
            "--param",
            &p,
        ];
        let job = submit(hub, &self.operator, self.files.dir.path(), &args).await;
        job_result(hub, self.host, job).await
    }
}

/// The blob the hub holds for `host`.
pub async fn hub_blob(hub: &RealHub, host: Uuid) -> EscrowBlob {
    let (status, blob) = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}/escrow"), None)
        .await;
    assert_eq!(status, 200, "{blob}");
    serde_json::from_value(blob).unwrap()
}

/// The fingerprints of the keys `blob` opens to with `words` (current first); `None` when
/// the words do not open it.
pub fn opened_keys(blob: &EscrowBlob, words: &str, host: Uuid) -> Option<Vec<String>> {
    let code = RecoveryCode::parse(words).unwrap();
    wrap::unwrap(blob, &code, host)
        .ok()
        .map(|ring| ring.fingerprints())
}

/// The one PDF in `dir`, if any.
pub fn sheet_in(dir: &Path) -> Option<PathBuf> {
    let mut pdfs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "pdf"))
        .collect();
    assert!(pdfs.len() <= 1, "{pdfs:?}");
    pdfs.pop()
}
