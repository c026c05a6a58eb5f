//! A VM guest's restore test ([`RestoreTester::vm_steps`]), the container's steps in a VM's
//! calls: the archive chosen (proved as a VM's, decision 0118) and its network devices read
//! from the config inside it; a scratch vmid recorded; the restore into Bosun's pool with every
//! `netN` sent `link_down=1` in the same request, the scratch name and the test's tag; the
//! config read back and any link still up set down before the first start; the start; the
//! stay-up watch; the guest agent waited for; the guest's own check through the guest agent
//! (`vm_check.rs`).
//!
//! ```text
//!  choose_archive (+ its netN) ─► next_id, record scratch ─► restore_vm (pool bosun,
//!  net*: link_down=1, name restore-test-<vmid>, tag, onboot=0, start=0) ─► read_config
//!  ─► isolate (only if a link is still up) ─► start_vm ─► stayed_up ─► agent_ping
//!  (bounded) ─► restore_check (exec + exec-status, bounded) ─► [tester: stop, destroy purge]
//! ```

use std::collections::BTreeMap;

use bosun_proto::helper::SCRATCH_HOSTNAME_PREFIX;
use bosun_pve::{
    Op, PoolId, PveQemu, VmConfig, VmConfigUpdate, VmNet, VmOptions, VmRestoreRequest, Vmid,
};
use serde_json::json;

use super::check::Verdict;
use super::vm_check::{self, link_is_down, net_index};
use super::{RestoreTester, steps::VMID_TRIES};
use crate::data::recovery::source::BackupSource;
use crate::ops::journal::identity_tag;
use crate::ops::operation::scratch::{other, scratch_vmid_as, stay_up_vm};
use crate::ops::operation::{OpJournal, StepError, StepName};
use bosun_proto::desired::GuestKind;

/// The most network devices a VM has (`net0`…`net31`).
const MAX_NETS: usize = 32;

impl<P: PveQemu + 'static> RestoreTester<P> {
    /// The test of a VM guest's archive; `scratch` is set once a scratch VM may exist.
    pub(super) async fn vm_steps(
        &self,
        op: &OpJournal,
        source: &BackupSource,
        scratch: &mut Option<Vmid>,
    ) -> Result<Verdict, StepError> {
        let pve = &*self.pve;
        let volume = source.restore_volume();
        let nets = op
            .local(
                StepName::ChooseArchive,
                json!({ "storage": source.storage.as_str(), "archive": source.archive.to_string(), "tier": source.tier, "kind": "qemu" }),
                async {
                    let config = pve
                        .extract_config(&volume)
                        .await
                        .map_err(|e| format!("the archive's config could not be read: {}", bosun_errchain::error_chain(&e)))?;
                    scratch_nets(&config)
                },
            )
            .await?;
        let pool = PoolId::new(bosun_pve::BOSUN_POOL)
            .map_err(|e| other(op, "restore_vm", e.to_string()))?;
        let vmid = scratch_vmid_as(pve, &self.journal, op, VMID_TRIES, GuestKind::Qemu).await?;
        *scratch = Some(vmid);
        let mut request = VmRestoreRequest::new(vmid, volume, self.config.storage.clone());
        request.unique = true;
        request.pool = Some(pool.clone());
        request.start = false;
        request.options = VmOptions {
            name: Some(format!("{SCRATCH_HOSTNAME_PREFIX}{vmid}")),
            net: nets,
            onboot: Some(false),
            tags: vec![identity_tag(op.op_id())],
            ..VmOptions::default()
        };
        let links = request.options.net.len();
        op.task(
            pve,
            Op::RestoreVm,
            StepName::RestoreVm,
            json!({ "vmid": vmid.get(), "archive": source.archive.to_string(), "storage": self.config.storage.as_str(), "pool": pool.as_str(), "links_down": links, "scratch": true }),
            pve.restore_vm(&request),
        )
        .await?;
        self.isolate_vm(op, vmid).await?;
        op.task(
            pve,
            Op::StartVm,
            StepName::StartVm,
            json!({ "vmid": vmid.get() }),
            pve.start_vm(vmid),
        )
        .await?;
        let watch = (self.config.stay_up, self.config.poll);
        stay_up_vm(pve, op, vmid, watch, |ran| {
            format!(
                "the restored VM stopped {} s after its start",
                ran.as_secs()
            )
        })
        .await?;
        op.local(
            StepName::StayedUp,
            json!({ "vmid": vmid.get(), "seconds": self.config.stay_up.as_secs() }),
            async { Ok::<(), String>(()) },
        )
        .await?;
        vm_check::await_agent(pve, op, vmid, self.config.agent_wait).await?;
        // Links still down: the guest checks its own data through its agent.
        vm_check::run(pve, op, vmid, self.config.check_timeout).await
    }

    /// `read_config`, then `isolate` before the first start when a `netN` is not down (one the
    /// archive's config did not show, or a restore that did not take the override); the config
    /// read again must then show every link down, or the VM is never started.
    async fn isolate_vm(&self, op: &OpJournal, vmid: Vmid) -> Result<(), StepError> {
        let pve = &*self.pve;
        let config = op
            .call(
                StepName::ReadConfig,
                json!({ "vmid": vmid.get() }),
                pve.vm_config(vmid),
            )
            .await?;
        let up = links_up(&config).map_err(|why| other(op, "isolate", why))?;
        if up.is_empty() {
            return Ok(());
        }
        let update = VmConfigUpdate {
            set: VmOptions {
                net: up,
                ..VmOptions::default()
            },
            digest: Some(config.digest.clone()),
            ..VmConfigUpdate::default()
        };
        let keys: Vec<String> = update.set.net.keys().map(|i| format!("net{i}")).collect();
        op.call(
            StepName::Isolate,
            json!({ "vmid": vmid.get(), "links_down": keys }),
            pve.update_vm_config(vmid, &update),
        )
        .await?;
        let again = pve
            .vm_config(vmid)
            .await
            .map_err(|e| other(op, "isolate", bosun_errchain::error_chain(&e)))?;
        let still = links_up(&again).map_err(|why| other(op, "isolate", why))?;
        if still.is_empty() {
            Ok(())
        } else {
            let keys: Vec<String> = still.keys().map(|i| format!("net{i}")).collect();
            Err(other(
                op,
                "isolate",
                format!("the scratch VM keeps a link up on {}", keys.join(", ")),
            ))
        }
    }
}

/// Each `netN` of a VM archive's config (its main section), as the scratch VM gets it: the
/// same bridge, VLAN and firewall, no MAC (a fresh one), the link down. A device Bosun cannot
/// write back whole (another model) becomes a `virtio` device on its bridge: the scratch VM
/// only has to boot with it down. One without a bridge is refused (nothing to put down).
pub(super) fn scratch_nets(config: &str) -> Result<BTreeMap<u8, VmNet>, String> {
    let mut nets = BTreeMap::new();
    for line in config.lines() {
        if line.starts_with('[') {
            break;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let Some(index) = net_index(key.trim()) else {
            continue;
        };
        if nets.len() >= MAX_NETS {
            return Err(format!(
                "the archive's config names more than {MAX_NETS} network devices"
            ));
        }
        nets.insert(index, scratch_net(key.trim(), value.trim())?);
    }
    Ok(nets)
}

/// One device of [`scratch_nets`].
fn scratch_net(key: &str, value: &str) -> Result<VmNet, String> {
    let mut net = match VmNet::parse(value) {
        Ok(net) => net,
        Err(_) => {
            let bridge = value
                .split(',')
                .find_map(|p| p.strip_prefix("bridge="))
                .filter(|b| !b.is_empty())
                .ok_or_else(|| {
                    format!("{key} names no bridge: the scratch VM could not have it down")
                })?;
            VmNet::new(bridge)
        }
    };
    net.macaddr = None;
    net.link_down = Some(true);
    Ok(net)
}

/// The `netN` of `config` whose link is not down, each as it is to be written with the link
/// down (its MAC kept).
fn links_up(config: &VmConfig) -> Result<BTreeMap<u8, VmNet>, String> {
    let mut up = BTreeMap::new();
    for (key, value) in &config.values {
        let Some(index) = net_index(key) else {
            continue;
        };
        let value = value.as_str().unwrap_or_default();
        if link_is_down(value) {
            continue;
        }
        let mut net = scratch_net(key, value)?;
        net.macaddr = VmNet::parse(value).ok().and_then(|n| n.macaddr);
        up.insert(index, net);
    }
    Ok(up)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_device_of_the_archive_goes_down_without_its_mac() {
        let config = "agent: 1\nname: shop\n\
            net0: virtio=BC:24:11:5E:A1:08,bridge=vmbr0,firewall=1\n\
            net3: e1000=BC:24:11:5E:A1:09,bridge=vmbr1,tag=20\n\
            scsi0: local-lvm:vm-101-disk-0,size=10G\n\
            \n[snap1]\nnet5: virtio,bridge=vmbr9\n";
        let nets = scratch_nets(config).unwrap();
        assert_eq!(nets.keys().copied().collect::<Vec<_>>(), vec![0, 3]);
        assert_eq!(
            nets[&0].to_property_string().unwrap(),
            "virtio,bridge=vmbr0,firewall=1,link_down=1"
        );
        assert_eq!(
            nets[&3].to_property_string().unwrap(),
            "virtio,bridge=vmbr1,link_down=1"
        );
        assert!(scratch_nets("net0: virtio=BC:24:11:5E:A1:08\n").is_err());
        assert!(scratch_nets("name: shop\n").unwrap().is_empty());
    }

    #[test]
    fn a_link_left_up_is_written_down_with_its_mac() {
        let config: VmConfig = serde_json::from_value(json!({
            "digest": "0",
            "net0": "virtio=BC:24:11:5E:A1:08,bridge=vmbr0,link_down=1",
            "net1": "virtio=BC:24:11:5E:A1:09,bridge=vmbr0,firewall=1",
        }))
        .unwrap();
        let up = links_up(&config).unwrap();
        assert_eq!(up.keys().copied().collect::<Vec<_>>(), vec![1]);
        assert_eq!(
            up[&1].to_property_string().unwrap(),
            "virtio=BC:24:11:5E:A1:09,bridge=vmbr0,firewall=1,link_down=1"
        );
    }
}
