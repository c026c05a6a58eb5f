//! What the client sends for QEMU guests: a restore from a vzdump-qemu archive, config
//! changes (the cloud-init keys among them) and the guest agent's requests, each bounded here
//! before anything is sent.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use base64::Engine as _;

use super::catalogue::Op;
use super::decimal::Thousandths;
use super::error::PveError;
use super::requests::{Params, push_update};
use super::types::{StorageId, ValueError, Vmid, VolumeId, check_dns_name, check_tag};

/// The most bytes one `file-write` carries: PVE's `content` is at most 61 440 characters
/// of base64, which the client encodes itself (`encode=0`).
pub const FILE_WRITE_MAX: usize = 61_440 / 4 * 3;

/// The most bytes one `file-read` gives: PVE reads at most 16 MiB of a file through the guest
/// agent and marks the answer `truncated` when the file goes on.
pub const FILE_READ_MAX: u64 = 16 * 1024 * 1024;

/// The most program arguments (the program included) one `exec` sends.
pub const EXEC_MAX_ARGS: usize = 64;

/// The longest single argument one `exec` sends, in bytes.
pub const EXEC_MAX_ARG_LEN: usize = 4096;

/// The longest standard input one `exec` sends (PVE's `input-data` maximum).
pub const EXEC_MAX_INPUT: usize = 65_536;

/// The longest path inside a guest the agent names.
pub const GUEST_PATH_MAX: usize = 4096;

/// A VM's CPU weight range (`cpuunits`, 1..=262144 in the 8.4 and 9.1 schemas alike; cgroup v2
/// clamps it to 1..=10000). A container's is wider (0..=500000).
pub const VM_CPUUNITS_RANGE: (u32, u32) = (1, 262_144);

/// The most cores a VM's CPU time limit (`cpulimit`, a `number`) may name: 128 in the 8.4 and
/// 9.1 schemas alike, where a container's goes to 8192. 0 is no limit.
pub const VM_CPULIMIT_MAX: Thousandths = Thousandths::whole(128);

fn invalid(op: Op, field: &'static str) -> impl FnOnce(ValueError) -> PveError {
    move |source| PveError::InvalidRequest { op, field, source }
}

fn bool_param(v: bool) -> String {
    u8::from(v).to_string()
}

/// A Proxmox pool id (`pve-poolid`): letters, digits, `-` and `_`, at most 64 characters.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PoolId(String);

impl PoolId {
    /// Checks the form PVE accepts.
    pub fn new(value: impl Into<String>) -> Result<Self, ValueError> {
        let value = value.into();
        if value.is_empty()
            || value.len() > 64
            || !value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(ValueError::new(
                "pool id",
                value,
                "must be 1 to 64 letters, digits, '-' or '_'",
            ));
        }
        Ok(Self(value))
    }

    /// The id as sent.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The ACL path of the pool, `/pool/<id>`.
    pub fn acl_path(&self) -> String {
        format!("/pool/{}", self.0)
    }
}

impl std::fmt::Display for PoolId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A VM network device (`netN`): always `virtio`, on a bridge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmNet {
    /// A fixed MAC address; `None` lets PVE generate one.
    pub macaddr: Option<String>,
    /// The host bridge (`vmbr0`).
    pub bridge: String,
    /// Whether the PVE firewall filters this device.
    pub firewall: Option<bool>,
    /// Keep the link down (a restore test's scratch VM).
    pub link_down: Option<bool>,
    /// Rate limit in MB/s (the schema's `number`, at least 0, no ceiling; 0 or absent is no
    /// limit).
    pub rate: Option<Thousandths>,
    /// VLAN tag (1..=4094).
    pub tag: Option<u16>,
}

impl VmNet {
    /// A virtio device on `bridge`.
    pub fn new(bridge: impl Into<String>) -> Self {
        Self {
            macaddr: None,
            bridge: bridge.into(),
            firewall: None,
            link_down: None,
            rate: None,
            tag: None,
        }
    }

    /// `virtio[=MAC],bridge=…[,firewall=1][,link_down=1][,rate=…][,tag=…]`.
    pub fn to_property_string(&self) -> Result<String, ValueError> {
        let bridge_ok = !self.bridge.is_empty()
            && self.bridge.len() <= 15
            && self
                .bridge
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-');
        if !bridge_ok {
            return Err(ValueError::new(
                "bridge",
                self.bridge.clone(),
                "must be a bridge name (letters, digits, '.', '-', '_', at most 15)",
            ));
        }
        let mut out = match &self.macaddr {
            Some(mac) => {
                check_mac(mac)?;
                format!("virtio={mac}")
            }
            None => "virtio".to_owned(),
        };
        out.push_str(&format!(",bridge={}", self.bridge));
        if let Some(f) = self.firewall {
            out.push_str(&format!(",firewall={}", bool_param(f)));
        }
        if let Some(l) = self.link_down {
            out.push_str(&format!(",link_down={}", bool_param(l)));
        }
        if let Some(r) = self.rate {
            out.push_str(&format!(",rate={r}"));
        }
        if let Some(t) = self.tag {
            if !(1..=4094).contains(&t) {
                return Err(ValueError::new(
                    "vlan tag",
                    t.to_string(),
                    "must be 1..=4094",
                ));
            }
            out.push_str(&format!(",tag={t}"));
        }
        Ok(out)
    }
}

fn check_mac(mac: &str) -> Result<(), ValueError> {
    let parts: Vec<&str> = mac.split(':').collect();
    let hex_pairs = parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()));
    // The I/G bit must be clear: a unicast address.
    let unicast = parts
        .first()
        .and_then(|p| u8::from_str_radix(p, 16).ok())
        .is_some_and(|b| b & 1 == 0);
    if hex_pairs && unicast {
        Ok(())
    } else {
        Err(ValueError::new(
            "mac address",
            mac,
            "must be six hex pairs with the I/G bit clear",
        ))
    }
}

/// A cloud-init interface configuration (`ipconfigN`), IPv4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpConfig {
    /// `ip=dhcp`.
    Dhcp,
    /// `ip=<address>/<prefix>[,gw=<gateway>]`.
    Static {
        /// The address.
        address: Ipv4Addr,
        /// The prefix length (1..=32).
        prefix: u8,
        /// The default gateway.
        gateway: Option<Ipv4Addr>,
    },
}

impl IpConfig {
    fn to_property_string(self) -> Result<String, ValueError> {
        match self {
            Self::Dhcp => Ok("ip=dhcp".to_owned()),
            Self::Static {
                address,
                prefix,
                gateway,
            } => {
                if !(1..=32).contains(&prefix) {
                    return Err(ValueError::new(
                        "prefix length",
                        prefix.to_string(),
                        "must be 1..=32",
                    ));
                }
                let mut out = format!("ip={address}/{prefix}");
                if let Some(gw) = gateway {
                    out.push_str(&format!(",gw={gw}"));
                }
                Ok(out)
            }
        }
    }
}

/// Percent-encodes as PVE's `urlencoded` format wants (`[-%a-zA-Z0-9_.!~*'()]` only).
fn url_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Config keys a VM restore or config change sets: name, size, network, cloud-init identity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VmOptions {
    /// The VM's name (`dns-name`).
    pub name: Option<String>,
    /// CPU cores (1..=8192).
    pub cores: Option<u32>,
    /// Memory in MiB (at least 16).
    pub memory: Option<u64>,
    // The VM's share and place in the node's order (decisions 0099, 0100, 0125).
    /// CPU weight (`cpuunits`, [`VM_CPUUNITS_RANGE`]).
    pub cpuunits: Option<u32>,
    /// CPU time limit in cores (`cpulimit`, 0..=[`VM_CPULIMIT_MAX`]; 0 is no limit).
    pub cpulimit: Option<Thousandths>,
    /// Where the VM comes in the node's start at boot and stop at shutdown (`startup`).
    pub startup: Option<super::startup::StartupOrder>,
    /// Network devices by index (`net0`…`net31`).
    pub net: BTreeMap<u8, VmNet>,
    /// Cloud-init interface configurations by index (`ipconfig0`…`ipconfig31`).
    pub ipconfig: BTreeMap<u8, IpConfig>,
    /// Cloud-init user (`ciuser`).
    pub ciuser: Option<String>,
    /// Cloud-init authorised SSH public keys (`sshkeys`), one OpenSSH key each.
    pub sshkeys: Vec<String>,
    /// Whether the VM has the QEMU guest agent device (`agent=1`).
    pub agent: Option<bool>,
    /// Disks allocated and added (`scsiN: <storage>:<GiB>,…`; never with a restore's
    /// `archive`, which brings its own).
    pub new_disks: super::qemu_disks::NewVmDisks,
    /// The VM's SMBIOS system UUID (`smbios1: uuid=…`): what cloud-init and the guest read as
    /// the machine's identity.
    pub smbios_uuid: Option<uuid::Uuid>,
    /// Start on boot.
    pub onboot: Option<bool>,
    /// Free-text description.
    pub description: Option<String>,
    /// Tags (`pve-tag` each).
    pub tags: Vec<String>,
}

impl VmOptions {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    pub(crate) fn push_params(&self, op: Op, out: &mut Params) -> Result<(), PveError> {
        if let Some(name) = &self.name {
            check_dns_name(name).map_err(invalid(op, "name"))?;
            out.push(("name".into(), name.clone()));
        }
        if let Some(cores) = self.cores {
            if !(1..=8192).contains(&cores) {
                return Err(invalid(op, "cores")(ValueError::new(
                    "cores",
                    cores.to_string(),
                    "must be 1..=8192",
                )));
            }
            out.push(("cores".into(), cores.to_string()));
        }
        if let Some(memory) = self.memory {
            if memory < 16 {
                return Err(invalid(op, "memory")(ValueError::new(
                    "memory",
                    memory.to_string(),
                    "must be at least 16 MiB",
                )));
            }
            out.push(("memory".into(), memory.to_string()));
        }
        self.push_share(op, out)?;
        for (i, net) in &self.net {
            if *i > 31 {
                return Err(invalid(op, "net")(ValueError::new(
                    "net index",
                    i.to_string(),
                    "must be 0..=31",
                )));
            }
            let v = net.to_property_string().map_err(invalid(op, "net"))?;
            out.push((format!("net{i}"), v));
        }
        for (i, ip) in &self.ipconfig {
            if *i > 31 {
                return Err(invalid(op, "ipconfig")(ValueError::new(
                    "ipconfig index",
                    i.to_string(),
                    "must be 0..=31",
                )));
            }
            let v = ip.to_property_string().map_err(invalid(op, "ipconfig"))?;
            out.push((format!("ipconfig{i}"), v));
        }
        if let Some(user) = &self.ciuser {
            let ok = !user.is_empty()
                && user.len() <= 32
                && user
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
            if !ok {
                return Err(invalid(op, "ciuser")(ValueError::new(
                    "cloud-init user",
                    user.clone(),
                    "must be 1 to 32 lowercase letters, digits, '_' or '-'",
                )));
            }
            out.push(("ciuser".into(), user.clone()));
        }
        if !self.sshkeys.is_empty() {
            for key in &self.sshkeys {
                let ok = key.starts_with("ssh-") || key.starts_with("ecdsa-");
                if !ok || key.contains(['\n', '\r']) || key.len() > 8192 {
                    return Err(invalid(op, "sshkeys")(ValueError::new(
                        "ssh public key",
                        key.chars().take(40).collect::<String>(),
                        "must be one OpenSSH public key line",
                    )));
                }
            }
            out.push(("sshkeys".into(), url_encode(&self.sshkeys.join("\n"))));
        }
        if let Some(agent) = self.agent {
            out.push(("agent".into(), format!("enabled={}", bool_param(agent))));
        }
        out.extend(self.new_disks.params().map_err(invalid(op, "scsi"))?);
        if let Some(uuid) = self.smbios_uuid {
            out.push(("smbios1".into(), format!("uuid={}", uuid.hyphenated())));
        }
        if let Some(onboot) = self.onboot {
            out.push(("onboot".into(), bool_param(onboot)));
        }
        if let Some(description) = &self.description {
            if description.len() > 8192 {
                return Err(invalid(op, "description")(ValueError::new(
                    "description",
                    "",
                    "must be at most 8192 bytes",
                )));
            }
            out.push(("description".into(), description.clone()));
        }
        if !self.tags.is_empty() {
            for tag in &self.tags {
                check_tag(tag).map_err(invalid(op, "tags"))?;
            }
            out.push(("tags".into(), self.tags.join(";")));
        }
        Ok(())
    }

    /// `cpuunits`, `cpulimit` and `startup`, each held to the qemu config schema's range.
    fn push_share(&self, op: Op, out: &mut Params) -> Result<(), PveError> {
        if let Some(units) = self.cpuunits {
            let (min, max) = VM_CPUUNITS_RANGE;
            if !(min..=max).contains(&units) {
                return Err(invalid(op, "cpuunits")(ValueError::new(
                    "cpuunits",
                    units.to_string(),
                    "must be 1..=262144 for a VM",
                )));
            }
            out.push(("cpuunits".into(), units.to_string()));
        }
        if let Some(limit) = self.cpulimit {
            if limit > VM_CPULIMIT_MAX {
                return Err(invalid(op, "cpulimit")(ValueError::new(
                    "cpulimit",
                    limit.to_string(),
                    "must be 0..=128 for a VM",
                )));
            }
            out.push(("cpulimit".into(), limit.to_string()));
        }
        if let Some(startup) = self.startup {
            out.push(("startup".into(), startup.to_string()));
        }
        Ok(())
    }
}

/// Create a VM by restoring a vzdump-qemu archive (`POST /nodes/{node}/qemu`, `archive=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmRestoreRequest {
    /// The new VM's id.
    pub vmid: Vmid,
    /// The backup archive.
    pub archive: VolumeId,
    /// Where the restored disks go (must allow `images`).
    pub storage: StorageId,
    /// Give the VM fresh MAC addresses (and a fresh `vmgenid`).
    pub unique: bool,
    /// The pool the new VM joins (Bosun's own: where the token's guest-agent reach is).
    pub pool: Option<PoolId>,
    /// Start the VM when the restore has finished.
    pub start: bool,
    /// Overwrite the stopped VM that holds `vmid` (`force=1`): qemu-server destroys its disks
    /// and replaces its config with the archive's, keeping its pool membership.
    pub force: bool,
    /// Overrides of the archive's config (cloud-init identity, size, network).
    pub options: VmOptions,
}

impl VmRestoreRequest {
    /// Restore `archive` as `vmid` onto `storage`, with fresh MACs, into no pool.
    pub fn new(vmid: Vmid, archive: VolumeId, storage: StorageId) -> Self {
        Self {
            vmid,
            archive,
            storage,
            unique: true,
            pool: None,
            start: false,
            force: false,
            options: VmOptions::default(),
        }
    }

    pub(crate) fn params(&self, op: Op) -> Result<Params, PveError> {
        let mut p: Params = vec![
            ("vmid".into(), self.vmid.to_string()),
            ("archive".into(), self.archive.to_string()),
            ("storage".into(), self.storage.to_string()),
        ];
        if self.unique {
            p.push(("unique".into(), "1".into()));
        }
        if let Some(pool) = &self.pool {
            p.push(("pool".into(), pool.to_string()));
        }
        if self.start {
            p.push(("start".into(), "1".into()));
        }
        if self.force {
            p.push(("force".into(), "1".into()));
        }
        self.options.push_params(op, &mut p)?;
        Ok(p)
    }
}

/// A change to a VM's config (`PUT …/qemu/{vmid}/config`, synchronous).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VmConfigUpdate {
    /// Keys to set.
    pub set: VmOptions,
    /// Keys to delete.
    pub delete: Vec<String>,
    /// Refuse the change if the config changed since this digest was read.
    pub digest: Option<String>,
}

impl VmConfigUpdate {
    pub(crate) fn params(&self, op: Op) -> Result<Params, PveError> {
        let mut p = Params::new();
        self.set.push_params(op, &mut p)?;
        push_update(
            (self.set.is_empty(), &self.delete, self.digest.as_deref()),
            op,
            &mut p,
        )?;
        Ok(p)
    }
}

/// A path inside a guest: absolute, no NUL, at most [`GUEST_PATH_MAX`] bytes.
pub(crate) fn check_guest_path(path: &str) -> Result<(), ValueError> {
    if !path.starts_with('/') || path.contains('\0') || path.len() > GUEST_PATH_MAX {
        return Err(ValueError::new(
            "guest path",
            path.chars().take(80).collect::<String>(),
            "must be absolute, without NUL, at most 4096 bytes",
        ));
    }
    Ok(())
}

/// A program the guest agent starts inside a VM (`POST …/agent/exec`): the program by
/// absolute path and its arguments, no shell, and optional standard input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentExec {
    /// The program (absolute path) followed by its arguments.
    pub argv: Vec<String>,
    /// Standard input, at most [`EXEC_MAX_INPUT`] bytes.
    pub input: Option<String>,
}

impl AgentExec {
    pub(crate) fn params(&self, op: Op) -> Result<Params, PveError> {
        let Some(program) = self.argv.first() else {
            return Err(invalid(op, "command")(ValueError::new(
                "command",
                "",
                "names no program",
            )));
        };
        check_guest_path(program).map_err(invalid(op, "command"))?;
        if self.argv.len() > EXEC_MAX_ARGS {
            return Err(invalid(op, "command")(ValueError::new(
                "command",
                self.argv.len().to_string(),
                "has more than 64 arguments",
            )));
        }
        if let Some(arg) = self
            .argv
            .iter()
            .find(|a| a.len() > EXEC_MAX_ARG_LEN || a.contains('\0'))
        {
            return Err(invalid(op, "command")(ValueError::new(
                "argument",
                arg.chars().take(40).collect::<String>(),
                "must be at most 4096 bytes without NUL",
            )));
        }
        let mut p: Params = self
            .argv
            .iter()
            .map(|a| ("command".to_owned(), a.clone()))
            .collect();
        if let Some(input) = &self.input {
            if input.len() > EXEC_MAX_INPUT {
                return Err(invalid(op, "input-data")(ValueError::new(
                    "input-data",
                    input.len().to_string(),
                    "must be at most 65536 bytes",
                )));
            }
            p.push(("input-data".into(), input.clone()));
        }
        Ok(p)
    }
}

/// A file the guest agent writes inside a VM (`POST …/agent/file-write`): the client
/// base64-encodes the bytes itself and sends `encode=0`, so any bytes arrive unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentFileWrite {
    /// The absolute path inside the guest.
    pub path: String,
    /// The bytes, at most [`FILE_WRITE_MAX`].
    pub content: Vec<u8>,
}

impl AgentFileWrite {
    pub(crate) fn params(&self, op: Op) -> Result<Params, PveError> {
        check_guest_path(&self.path).map_err(invalid(op, "file"))?;
        if self.content.len() > FILE_WRITE_MAX {
            return Err(invalid(op, "content")(ValueError::new(
                "file content",
                self.content.len().to_string(),
                "must be at most 46080 bytes (61440 characters of base64)",
            )));
        }
        Ok(vec![
            ("file".into(), self.path.clone()),
            (
                "content".into(),
                base64::engine::general_purpose::STANDARD.encode(&self.content),
            ),
            ("encode".into(), "0".into()),
        ])
    }
}

/// Parameters of `GET …/agent/file-read`: the file alone, as PVE 8.4 takes it (9.1's `count`,
/// `offset` and `decode` do not exist there). PVE reads at most [`FILE_READ_MAX`] bytes of it
/// and answers them decoded, as text.
pub(crate) fn file_read_params(op: Op, path: &str) -> Result<Params, PveError> {
    check_guest_path(path).map_err(invalid(op, "file"))?;
    Ok(vec![("file".into(), path.to_owned())])
}

#[cfg(test)]
mod tests;
