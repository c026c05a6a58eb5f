//! A virtual machine beside the containers (DESIGN §8b, decision 0114). The simulated node
//! holds a VM golden base (a vzdump-qemu archive of a cloud image with cloud-init and the QEMU
//! guest agent); the operator signs it **for a VM** (`bosunctl golden sign --kind qemu`) and
//! desired state adds guest `vm-shop` of kind `qemu` beside the containers. The agent hashes
//! the archive through its helper, restores it into Bosun's pool with its own identity through
//! cloud-init, starts it and writes its bootstrap through the guest agent; `bosunctl status`
//! shows it running as `qemu` beside the containers (`lxc`).

use std::path::Path;

use bosun_proto::desired::GuestKind;
use bosunctl::client::HubClient;
use bosunctl::status::{self, FleetStatus};
use serde_json::{Value, json};
use uuid::Uuid;

use super::backup_tiers::set_desired;
use super::boot_order::current_desired;
use super::children::Children;
use super::scenario::{check, converge, ignore_plain_output, observed, vmid_of, write_json};
use super::sim::{self, SimEndpoint};
use super::stack;
use super::{DemoError, Narrator};

/// What the step established.
#[derive(Debug, Clone)]
pub struct VmOutcome {
    /// The VM's guest id.
    pub guest_id: Uuid,
    /// Its vmid.
    pub vmid: u32,
    /// The archive it was restored from, as the restore request named it.
    pub restored_from: Option<String>,
    /// The pool the restore request put it in.
    pub pool: Option<String>,
    /// Its `bosunctl status` line, words joined by one space.
    pub status_line: String,
    /// The kinds of every guest line of `bosunctl status`, by hostname.
    pub kinds: Vec<(String, GuestKind)>,
}

/// The step: sign the VM base, add the VM, watch it come up as `qemu`.
pub(super) async fn vm_beside_containers(
    n: &mut Narrator,
    children: &mut Children,
    client: &HubClient,
    (bins, out): (&Path, &Path),
    sim: &SimEndpoint,
    host_id: Uuid,
) -> Result<VmOutcome, DemoError> {
    let (Some(volid), Some(sha)) = (&sim.vm_golden_volid, &sim.vm_golden_sha256) else {
        return Err(DemoError::Check(
            "the simulated node holds no VM golden archive".to_owned(),
        ));
    };
    let golden_file = out.join("operator/golden-vm.json");
    let golden_arg = golden_file.display().to_string();
    let key_arg = stack::operator_key_path(out).display().to_string();
    stack::ctl(
        bins,
        out,
        &[
            "golden",
            "sign",
            "--kind",
            "qemu",
            "--volid",
            volid,
            "--sha256",
            sha,
            "-f",
            &key_arg,
            "-o",
            &golden_arg,
        ],
    )
    .await
    .or_else(ignore_plain_output)?;
    n.detail(format!(
        "$ bosunctl golden sign --kind qemu --volid {volid} --sha256 … -f id_ed25519 -o golden-vm.json   (a base signed for a VM)"
    ));
    let text = std::fs::read_to_string(&golden_file).map_err(|source| DemoError::Artifact {
        path: golden_file.clone(),
        source,
    })?;
    let golden: Value = serde_json::from_str(&text)
        .map_err(|e| DemoError::Check(format!("{}: {e}", golden_file.display())))?;

    let vm = Uuid::new_v4();
    let mut document = current_desired(&FleetStatus::fetch(client, 50).await?)?;
    let guests = document["guests"]
        .as_array_mut()
        .ok_or_else(|| DemoError::Check("desired state lists no guests".to_owned()))?;
    guests.push(json!({
        "guest_id": vm,
        "kind": "qemu",
        "hostname": "vm-shop",
        "customer": { "customer_id": "cust-vm-shop", "display_name": "Customer vm-shop" },
        "resources": { "cores": 1, "memory_mib": 1024, "rootfs_gib": 10 },
        "power": "running",
        "golden": golden,
    }));
    let file = out.join("operator/desired-vm.json");
    write_json(&file, &document)?;
    set_desired(bins, out, &host_id.to_string(), &file).await?;
    n.detail("$ bosunctl desired set --host … desired-vm.json   (guest vm-shop, \"kind\": \"qemu\", from golden-vm.json, beside the containers)");
    let fleet = converge(children, client, "vm-shop running", |f| {
        observed(f, vm) == "running"
    })
    .await?;
    let vmid = vmid_of(&fleet, vm)?;

    // What reached Proxmox: one VM restore, of the signed base, into Bosun's pool.
    let restores: Vec<sim::SimRequest> = sim::sim_requests(sim)
        .await?
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == format!("/nodes/{}/qemu", sim.node))
        .collect();
    check(restores.len() == 1, || {
        format!("one VM restore, not {}: {restores:?}", restores.len())
    })?;
    let restored_from = restores[0].param("archive").map(str::to_owned);
    let pool = restores[0].param("pool").map(str::to_owned);
    check(
        restored_from.as_deref() == Some(volid.as_str()) && pool.as_deref() == Some("bosun"),
        || format!("the VM restore named {restored_from:?} into pool {pool:?}"),
    )?;
    n.detail(format!(
        "the agent restored VM {vmid} from {volid} into pool bosun (cloud-init: ciuser, sshkeys, ipconfig0 of the host's pool), started it, wrote its bootstrap through the guest agent"
    ));

    let lines: Vec<String> = status::render(&fleet)
        .iter()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let status_line = lines
        .iter()
        .find(|l| l.starts_with("guest vm-shop "))
        .cloned()
        .unwrap_or_default();
    check(
        status_line.starts_with(&format!("guest vm-shop vmid {vmid} qemu desired running")),
        || format!("bosunctl status shows vm-shop as {status_line:?}"),
    )?;
    let host = fleet
        .hosts
        .first()
        .ok_or_else(|| DemoError::Check("no host".to_owned()))?;
    let kinds: Vec<(String, GuestKind)> = status::guest_lines(host)
        .into_iter()
        .map(|g| (g.hostname, g.kind))
        .collect();
    for line in lines.iter().filter(|l| l.starts_with("guest ")) {
        n.detail(format!("  {line}"));
    }
    check(
        kinds
            .iter()
            .filter(|(name, _)| name != "vm-shop")
            .all(|(_, kind)| *kind == GuestKind::Lxc),
        || format!("a container shows as another kind: {kinds:?}"),
    )?;
    Ok(VmOutcome {
        guest_id: vm,
        vmid,
        restored_from,
        pool,
        status_line,
        kinds,
    })
}
