//! Decoded answers. Every field PVE may omit is optional, and numbers and booleans are read
//! leniently (see [`super::decode`]).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::decode::{
    lenient_bool, lenient_lock, lenient_opt_f64, lenient_opt_string, lenient_opt_u64, lenient_u64,
};
use super::types::{Upid, Vmid};

/// `GET /version`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct VersionInfo {
    /// The pve-manager version, e.g. `9.1.9`.
    pub version: String,
    /// The release, e.g. `9.1`.
    pub release: String,
    /// The build's repository id.
    #[serde(default)]
    pub repoid: Option<String>,
}

/// One entry of `GET /nodes`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct NodeInfo {
    /// The node name.
    pub node: String,
    /// `online`, `offline` or `unknown`.
    #[serde(default)]
    pub status: Option<String>,
    /// CPU load (0..1).
    #[serde(default, deserialize_with = "lenient_opt_f64")]
    pub cpu: Option<f64>,
    /// Number of CPUs.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub maxcpu: Option<u64>,
    /// Used memory in bytes.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub mem: Option<u64>,
    /// Total memory in bytes.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub maxmem: Option<u64>,
    /// Uptime in seconds.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub uptime: Option<u64>,
    /// Used bytes of the root filesystem.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub disk: Option<u64>,
    /// Size of the root filesystem in bytes.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub maxdisk: Option<u64>,
    /// The node certificate's SHA-256 fingerprint.
    #[serde(default)]
    pub ssl_fingerprint: Option<String>,
}

/// `GET /nodes/{node}/status`: the parts host health reads.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
pub struct NodeStatus {
    /// CPU usage, a share of all CPUs (0..1).
    #[serde(default, deserialize_with = "lenient_opt_f64")]
    pub cpu: Option<f64>,
    /// The 1, 5 and 15 minute load averages (PVE sends them as strings).
    #[serde(default)]
    pub loadavg: Option<Vec<Value>>,
    /// Memory in bytes.
    #[serde(default)]
    pub memory: Option<NodeUsage>,
    /// The root filesystem in bytes.
    #[serde(default)]
    pub rootfs: Option<NodeUsage>,
    /// The CPU: model and counts.
    #[serde(default)]
    pub cpuinfo: Option<CpuInfo>,
    /// The Proxmox VE version (`pve-manager/9.1.1/…`).
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub pveversion: Option<String>,
    /// The running kernel, with the machine's architecture.
    #[serde(default, rename = "current-kernel")]
    pub current_kernel: Option<KernelInfo>,
}

/// `cpuinfo` of [`NodeStatus`].
#[derive(Debug, Clone, Deserialize, PartialEq, Eq, Default)]
pub struct CpuInfo {
    /// The CPU model.
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub model: Option<String>,
    /// Logical CPUs.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub cpus: Option<u64>,
    /// Sockets.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub sockets: Option<u64>,
}

/// `current-kernel` of [`NodeStatus`].
#[derive(Debug, Clone, Deserialize, PartialEq, Eq, Default)]
pub struct KernelInfo {
    /// The hardware (architecture) type, `x86_64`.
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub machine: Option<String>,
}

/// One entry of `GET /nodes/{node}/network`: an interface as the node's network configuration
/// lists it (no MAC, state or speed: the kernel tells those, `/sys/class/net`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct NetworkInterface {
    /// The interface name.
    pub iface: String,
    /// `bridge`, `bond`, `eth`, `alias`, `vlan`, `OVSBridge`, … (`unknown` when absent).
    #[serde(default = "unknown_kind", rename = "type")]
    pub kind: String,
    /// Whether it is active.
    #[serde(default, deserialize_with = "lenient_bool")]
    pub active: bool,
    /// Its configured IPv4 address, if it has one.
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub address: Option<String>,
}

fn unknown_kind() -> String {
    "unknown".to_owned()
}

/// A `total` / `used` pair of [`NodeStatus`].
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
pub struct NodeUsage {
    /// Size in bytes.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub total: Option<u64>,
    /// Bytes in use.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub used: Option<u64>,
}

/// A guest's power state.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GuestStatus {
    /// Running.
    Running,
    /// Stopped.
    Stopped,
    /// Anything else PVE may report.
    #[serde(other)]
    Unknown,
}

/// One entry of `GET /nodes/{node}/lxc`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct CtSummary {
    /// The guest id.
    pub vmid: Vmid,
    /// Power state.
    pub status: GuestStatus,
    /// The hostname.
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub name: Option<String>,
    /// The config `lock` value, if locked (an empty value is no lock).
    #[serde(default, deserialize_with = "lenient_lock")]
    pub lock: Option<String>,
    /// Memory limit in bytes.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub maxmem: Option<u64>,
    /// Memory in use in bytes.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub mem: Option<u64>,
    /// Root disk size in bytes.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub maxdisk: Option<u64>,
    /// Root disk usage in bytes.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub disk: Option<u64>,
    /// CPU limit.
    #[serde(default, deserialize_with = "lenient_opt_f64")]
    pub cpus: Option<f64>,
    /// CPU usage, a share of its `cpus`.
    #[serde(default, deserialize_with = "lenient_opt_f64")]
    pub cpu: Option<f64>,
    /// Uptime in seconds.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub uptime: Option<u64>,
    /// Tags, `;`-separated.
    #[serde(default)]
    pub tags: Option<String>,
    /// Whether the guest is a template.
    #[serde(default, deserialize_with = "lenient_bool")]
    pub template: bool,
}

/// One guest of `GET /cluster/resources?type=vm`: where in the cluster a vmid lives.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct ClusterGuest {
    /// The guest id.
    #[serde(deserialize_with = "lenient_u64")]
    pub vmid: u64,
    /// `lxc` or `qemu`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The node that holds it.
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub node: Option<String>,
    /// Tags, `;`-separated (the identity the agent wrote is one).
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub tags: Option<String>,
    /// The pool the guest is a member of.
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub pool: Option<String>,
    /// `running`, `stopped`, … as the node reports it.
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub status: Option<String>,
}

/// One entry of `GET /cluster/status`: the cluster itself (on a cluster's node only) or one
/// of its nodes.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct ClusterMember {
    /// `cluster` or `node`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The cluster's or the node's name.
    pub name: String,
    /// For the cluster: how many nodes it has, offline ones included.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub nodes: Option<u64>,
    /// For the cluster: whether a majority of its nodes is online.
    #[serde(default, deserialize_with = "lenient_bool")]
    pub quorate: bool,
    /// For a node: whether it is online.
    #[serde(default, deserialize_with = "lenient_bool")]
    pub online: bool,
    /// For a node: whether it is the node that answered.
    #[serde(default, deserialize_with = "lenient_bool")]
    pub local: bool,
}

/// One entry of `GET /nodes/{node}/lxc/{vmid}/interfaces`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct CtInterface {
    /// The interface's name inside the container (`eth0`).
    pub name: String,
    /// Its MAC address.
    #[serde(default)]
    pub hwaddr: String,
    /// Its IPv4 address with prefix (`10.0.0.5/24`), when it has one.
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub inet: Option<String>,
}

/// `GET /nodes/{node}/lxc/{vmid}/status/current`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct CtStatus {
    /// The guest id.
    pub vmid: Vmid,
    /// Power state.
    pub status: GuestStatus,
    /// The hostname.
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub name: Option<String>,
    /// The config `lock` value, if locked (an empty value is no lock).
    #[serde(default, deserialize_with = "lenient_lock")]
    pub lock: Option<String>,
    /// Memory in use in bytes.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub mem: Option<u64>,
    /// Memory limit in bytes.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub maxmem: Option<u64>,
    /// Root disk usage in bytes.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub disk: Option<u64>,
    /// Root disk size in bytes.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub maxdisk: Option<u64>,
    /// CPU limit.
    #[serde(default, deserialize_with = "lenient_opt_f64")]
    pub cpus: Option<f64>,
    /// CPU usage (0..cpus).
    #[serde(default, deserialize_with = "lenient_opt_f64")]
    pub cpu: Option<f64>,
    /// Uptime in seconds.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub uptime: Option<u64>,
    /// The init process id when running.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub pid: Option<u64>,
    /// Tags, `;`-separated.
    #[serde(default)]
    pub tags: Option<String>,
    /// Whether the guest is a template.
    #[serde(default, deserialize_with = "lenient_bool")]
    pub template: bool,
}

/// `GET /nodes/{node}/lxc/{vmid}/config`: the `digest` plus every key as PVE sent it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct CtConfig {
    /// SHA-1 of the config file; pass it back in an update to refuse a concurrent change.
    pub digest: String,
    /// Every other key (`hostname`, `memory`, `net0`, `features`, …) with its raw value.
    #[serde(flatten)]
    pub values: BTreeMap<String, Value>,
}

impl CtConfig {
    /// A key's value as a string, whatever its JSON type.
    pub fn get_str(&self, key: &str) -> Option<String> {
        match self.values.get(key)? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(u8::from(*b).to_string()),
            _ => None,
        }
    }

    /// A key's value as an integer (number or numeric string).
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get_str(key)?.trim().parse().ok()
    }

    /// A key's value as a Perl boolean.
    pub fn get_bool(&self, key: &str) -> Option<bool> {
        crate::decode::value_to_bool::<serde_json::Error>(self.values.get(key)?).ok()
    }

    /// The hostname.
    pub fn hostname(&self) -> Option<String> {
        self.get_str("hostname")
    }

    /// The `lock` value, if the guest is locked.
    pub fn lock(&self) -> Option<String> {
        self.get_str("lock").filter(|l| !l.trim().is_empty())
    }

    /// Whether the container is unprivileged.
    pub fn unprivileged(&self) -> bool {
        self.get_bool("unprivileged").unwrap_or(false)
    }

    /// The `features` property string split into `(key, value)` pairs.
    pub fn features(&self) -> Vec<(String, String)> {
        self.get_str("features")
            .map(|f| {
                f.split(',')
                    .filter(|p| !p.is_empty())
                    .map(|p| match p.split_once('=') {
                        Some((k, v)) => (k.to_owned(), v.to_owned()),
                        None => (p.to_owned(), String::new()),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// One entry of `GET …/snapshot`; the pseudo-entry `current` marks where the guest is now.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct SnapshotInfo {
    /// The snapshot name, or `current`.
    pub name: String,
    /// The parent snapshot.
    #[serde(default)]
    pub parent: Option<String>,
    /// When it was taken (epoch seconds); absent on `current`.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub snaptime: Option<u64>,
    /// The description.
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub description: Option<String>,
    /// `prepare` or `delete` while a snapshot task works on it.
    #[serde(default)]
    pub snapstate: Option<String>,
}

impl SnapshotInfo {
    /// Whether this is the `current` pseudo-entry rather than a snapshot.
    pub fn is_current(&self) -> bool {
        self.name == "current"
    }
}

/// One entry of `GET /nodes/{node}/storage`, or the answer of `…/storage/{storage}/status`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct StorageInfo {
    /// The storage id (absent in a status answer, which names it in the path).
    #[serde(default)]
    pub storage: Option<String>,
    /// The storage type (`dir`, `lvmthin`, `pbs`, …).
    #[serde(rename = "type")]
    pub storage_type: String,
    /// Allowed content types, comma-separated.
    #[serde(default)]
    pub content: Option<String>,
    /// Whether the storage is accessible now.
    #[serde(default, deserialize_with = "lenient_bool")]
    pub active: bool,
    /// Whether the storage is enabled.
    #[serde(default, deserialize_with = "lenient_bool")]
    pub enabled: bool,
    /// Whether it is shared between nodes.
    #[serde(default, deserialize_with = "lenient_bool")]
    pub shared: bool,
    /// Total bytes.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub total: Option<u64>,
    /// Used bytes.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub used: Option<u64>,
    /// Available bytes.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub avail: Option<u64>,
}

impl StorageInfo {
    /// Whether the storage allows content type `kind` (`backup`, `rootdir`, …).
    pub fn allows(&self, kind: &str) -> bool {
        self.content
            .as_deref()
            .is_some_and(|c| c.split(',').any(|k| k.trim() == kind))
    }
}

/// `GET …/storage/{storage}/content/{volume}`: one volume's attributes.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct VolumeAttributes {
    /// Where the volume is on the node (a file path for file storages; for PBS, the
    /// volume name).
    pub path: String,
    /// A backup's notes, whole.
    #[serde(default)]
    pub notes: Option<String>,
}

/// One entry of `GET …/storage/{storage}/content`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct ContentItem {
    /// The volume id.
    pub volid: String,
    /// The content type (`backup`, `rootdir`, …).
    #[serde(default)]
    pub content: Option<String>,
    /// The format (`tar.zst`, `pbs-ct`, `raw`, …).
    #[serde(default)]
    pub format: Option<String>,
    /// Size in bytes.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub size: Option<u64>,
    /// Creation time (epoch seconds).
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub ctime: Option<u64>,
    /// The owning guest.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub vmid: Option<u64>,
    /// `lxc` or `qemu` for backups.
    #[serde(default)]
    pub subtype: Option<String>,
    /// The first line of the backup's notes.
    #[serde(default)]
    pub notes: Option<String>,
    /// Whether the backup is protected from pruning and deletion.
    #[serde(default, deserialize_with = "lenient_bool")]
    pub protected: bool,
    /// A PBS backup encrypted on the client: the key's fingerprint.
    #[serde(default)]
    pub encrypted: Option<String>,
}

/// A task's state as read from `…/tasks/{upid}/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskState {
    /// Still running.
    Running,
    /// Finished with `OK`.
    Ok,
    /// Finished with `WARNINGS: n`: a success with warnings.
    Warnings(u32),
    /// Finished with an error; the text is the exit status.
    Failed(String),
}

impl TaskState {
    /// Interprets `status` and `exitstatus` as PVE reports them.
    pub fn from_status(status: &str, exitstatus: Option<&str>) -> Self {
        if status == "running" {
            return Self::Running;
        }
        match exitstatus.map(str::trim) {
            Some("OK") => Self::Ok,
            Some(s) => match s.strip_prefix("WARNINGS:").map(|n| n.trim().parse::<u32>()) {
                Some(Ok(n)) => Self::Warnings(n),
                _ => Self::Failed(s.to_owned()),
            },
            None => Self::Failed("unexpected status".to_owned()),
        }
    }
}

/// One entry of `GET /nodes/{node}/tasks`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct TaskSummary {
    /// The task.
    pub upid: Upid,
    /// The task type (`vzsnapshot`, `vzrollback`, `vzdump`, …).
    #[serde(rename = "type")]
    pub task_type: String,
    /// The object id (the vmid for guest tasks).
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub id: Option<String>,
    /// Start time (epoch seconds).
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub starttime: Option<u64>,
    /// The exit status, once the task ended; absent while it runs.
    #[serde(default)]
    pub status: Option<String>,
}

/// `GET /nodes/{node}/tasks/{upid}/status`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct TaskStatusInfo {
    /// The task.
    pub upid: Upid,
    /// `running` or `stopped`.
    pub status: String,
    /// The exit status once stopped.
    #[serde(default)]
    pub exitstatus: Option<String>,
    /// The task type.
    #[serde(default, rename = "type")]
    pub task_type: Option<String>,
    /// The object id.
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub id: Option<String>,
    /// The owning user (`user@realm`; a token's id is in `tokenid`).
    #[serde(default)]
    pub user: Option<String>,
    /// The token that started the task, if any.
    #[serde(default)]
    pub tokenid: Option<String>,
    /// Start time (epoch seconds).
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub starttime: Option<u64>,
}

impl TaskStatusInfo {
    /// The task's state.
    pub fn state(&self) -> TaskState {
        TaskState::from_status(&self.status, self.exitstatus.as_deref())
    }
}

/// A slice of a task log: lines plus the total line count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskLog {
    /// The number of lines in the whole log.
    pub total: u64,
    /// The lines read, in order.
    pub lines: Vec<TaskLogLine>,
}

/// One task log line.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct TaskLogLine {
    /// 1-based line number.
    #[serde(deserialize_with = "lenient_u64")]
    pub n: u64,
    /// The text.
    #[serde(default)]
    pub t: String,
}

/// A finished, successful task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskOutcome {
    /// The task.
    pub upid: Upid,
    /// The number of warnings (`WARNINGS: n`); 0 for `OK`.
    pub warnings: u32,
}

/// A finished backup of one guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupOutcome {
    /// The vzdump task.
    pub task: TaskOutcome,
    /// The archive's volume id.
    pub volid: String,
}
