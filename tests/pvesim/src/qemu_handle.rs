//! What tests do to the simulated node's QEMU guests and pools outside the API: seed the VM
//! golden archive, stop a guest's agent, read and write a VM's files, put a VM in a pool (an
//! operator's `pveum pool modify`).

use std::collections::BTreeSet;

use crate::files::GuestFile;
use crate::handle::SimHandle;
use crate::qemu_restore::{golden_vm_conf, golden_vm_files, golden_vm_volume};

impl SimHandle {
    /// Adds the VM golden archive (a vzdump-qemu `vma.zst` of a cloud image with cloud-init
    /// and the QEMU guest agent, `agent: 1`) to storage `local`; gives its volid.
    pub fn add_vm_golden(&self) -> String {
        let now = jiff::Timestamp::from_second(self.shared.clock.epoch())
            .unwrap_or_else(|_| jiff::Timestamp::now())
            .to_zoned(jiff::tz::TimeZone::UTC);
        let volume = golden_vm_volume(&now, golden_vm_conf(), golden_vm_files());
        let volid = volume.volid.clone();
        self.shared.state.lock().push_volume(volume);
        volid
    }

    /// Adds a vzdump-qemu archive whose image has no guest agent (`agent` unset, no
    /// `qemu-ga`): what a VM Bosun did not build may be restored from.
    pub fn add_vm_archive_without_agent(&self) -> String {
        let now = jiff::Timestamp::from_second(self.shared.clock.epoch() + 1)
            .unwrap_or_else(|_| jiff::Timestamp::now())
            .to_zoned(jiff::tz::TimeZone::UTC);
        let mut conf = golden_vm_conf();
        conf.remove("agent");
        let mut files = golden_vm_files();
        let _ = files.remove_file(crate::qemu::QGA_BIN);
        let volume = golden_vm_volume(&now, conf, files);
        let volid = volume.volid.clone();
        self.shared.state.lock().push_volume(volume);
        volid
    }

    /// Starts or stops the guest agent's service inside VM `vmid` (it answers only while the
    /// VM runs); `false` for an unknown VM.
    pub fn set_vm_agent(&self, vmid: u32, running: bool) -> bool {
        match self.shared.state.lock().vms.get_mut(&vmid) {
            Some(vm) => {
                vm.agent_stopped = !running;
                true
            }
            None => false,
        }
    }

    /// One path of VM `vmid`'s filesystem.
    pub fn vm_file(&self, vmid: u32, path: &str) -> Option<GuestFile> {
        self.shared
            .state
            .lock()
            .vms
            .get(&vmid)?
            .files
            .describe(path)
    }

    /// The NoCloud `instance-id` of VM `vmid`'s cloud-init drive as its last start wrote it
    /// (`None` for a VM never started): qemu-server's `PVE::QemuServer::Cloudinit` takes the
    /// SHA-1 of the user data and the network data it generates, and the network data names
    /// each interface's MAC, so a new name, user, key, address or MAC is a new instance (on
    /// whose first boot a cloud image makes a new machine-id and SSH host keys) and the same
    /// ones are the same instance. Modelled as the SHA-1 of the drive's cloud-init keys and the
    /// MACs of the VM's `netN`.
    pub fn vm_instance_id(&self, vmid: u32) -> Option<String> {
        use sha1::{Digest, Sha1};
        let st = self.shared.state.lock();
        let vm = st.vms.get(&vmid)?;
        if vm.cloudinit_drive.is_empty() {
            return None;
        }
        let mut hasher = Sha1::new();
        for (key, value) in &vm.cloudinit_drive {
            hasher.update(format!("{key}: {value}\n"));
        }
        for (key, value) in vm.conf.iter().filter(|(k, _)| k.starts_with("net")) {
            let mac = value.split(',').find_map(|p| {
                p.strip_prefix("macaddr=")
                    .or_else(|| p.split_once('=').map(|(_, m)| m).filter(|m| m.len() == 17))
            });
            hasher.update(format!("{key}: {}\n", mac.unwrap_or_default()));
        }
        Some(format!("{:x}", hasher.finalize()))
    }

    /// Writes a file inside VM `vmid` as a program in the guest would (its parents made
    /// 0755 as needed; a new file gets `mode`): what a VM's controller installs, such as its
    /// restore check. `false` for an unknown VM or a path the tree refuses.
    pub fn write_vm_file(&self, vmid: u32, path: &str, content: &[u8], mode: u32) -> bool {
        let mut st = self.shared.state.lock();
        let Some(vm) = st.vms.get_mut(&vmid) else {
            return false;
        };
        let Ok(path) = crate::files::canonical(path) else {
            return false;
        };
        let parent = crate::files::parent(&path).to_owned();
        vm.files.mkdir_all(&parent, 0o755).is_ok()
            && vm.files.write(&path, content.to_vec(), mode).is_ok()
    }

    /// Removes a file inside VM `vmid` (a package removed in the guest, say its guest
    /// agent's program); `false` for an unknown VM or a path that is no file.
    pub fn remove_vm_file(&self, vmid: u32, path: &str) -> bool {
        let mut st = self.shared.state.lock();
        st.vms
            .get_mut(&vmid)
            .is_some_and(|vm| vm.files.remove_file(path) == Ok(true))
    }

    /// VM `vmid`'s config (no digest).
    pub fn vm_config(&self, vmid: u32) -> Option<std::collections::BTreeMap<String, String>> {
        Some(self.shared.state.lock().vms.get(&vmid)?.conf.clone())
    }

    /// Makes VM `vmid` a template, as root's `qm template` does (`template: 1`); `false` for an
    /// unknown or a running VM (Proxmox converts only a stopped one).
    pub fn make_vm_template(&self, vmid: u32) -> bool {
        match self.shared.state.lock().vms.get_mut(&vmid) {
            Some(vm) if !vm.running() => {
                vm.conf.insert("template".into(), "1".into());
                true
            }
            _ => false,
        }
    }

    /// The vmids of every VM on the node.
    pub fn vm_ids(&self) -> Vec<u32> {
        self.shared.state.lock().vms.keys().copied().collect()
    }

    /// VM `vmid`'s firewall options (`/etc/pve/firewall/<vmid>.fw`).
    pub fn vm_firewall(&self, vmid: u32) -> Option<std::collections::BTreeMap<String, String>> {
        Some(self.shared.state.lock().vms.get(&vmid)?.firewall.clone())
    }

    /// Sets VM `vmid`'s firewall options as an operator would on the node (`pve-firewall`'s
    /// file), without the API; `false` for an unknown VM.
    pub fn set_vm_firewall(
        &self,
        vmid: u32,
        options: std::collections::BTreeMap<String, String>,
    ) -> bool {
        match self.shared.state.lock().vms.get_mut(&vmid) {
            Some(vm) => {
                vm.firewall = options;
                true
            }
            None => false,
        }
    }

    /// How long each filesystem freeze that vzdump issued through VM `vmid`'s guest agent
    /// lasted, until its thaw (oldest first; empty for none or an unknown VM).
    pub fn vm_backup_freezes(&self, vmid: u32) -> Vec<std::time::Duration> {
        self.shared
            .state
            .lock()
            .vms
            .get(&vmid)
            .map(|vm| {
                vm.backup_freezes
                    .iter()
                    .map(|f| f.thawed_at.duration_since(f.frozen_at))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether VM `vmid` runs.
    pub fn vm_running(&self, vmid: u32) -> Option<bool> {
        Some(self.shared.state.lock().vms.get(&vmid)?.running())
    }

    /// Whether VM `vmid`'s filesystems are frozen.
    pub fn vm_frozen(&self, vmid: u32) -> Option<bool> {
        Some(self.shared.state.lock().vms.get(&vmid)?.frozen)
    }

    /// Creates pool `pool` (nothing when it exists).
    pub fn add_pool(&self, pool: &str) {
        self.shared.state.lock().access.add_pool(pool);
    }

    /// Puts VM `vmid` in `pool`, as root's `pveum pool modify <pool> --vms <vmid>`; `false`
    /// when the pool or the VM does not exist.
    pub fn add_vm_to_pool(&self, vmid: u32, pool: &str) -> bool {
        let mut st = self.shared.state.lock();
        st.vms.contains_key(&vmid) && st.access.add_vm_to_pool(vmid, pool)
    }

    /// The VMs in `pool`.
    pub fn pool_members(&self, pool: &str) -> BTreeSet<u32> {
        self.shared.state.lock().access.pool_members(pool)
    }
}
