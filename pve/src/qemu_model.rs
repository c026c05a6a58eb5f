//! What PVE answers about QEMU guests and their guest agent, parsed leniently (Perl's 0/1
//! booleans, numbers as strings) like every other answer.

use serde::Deserialize;
use serde_json::Value;

use super::decode::{
    lenient_bool, lenient_lock, lenient_opt_f64, lenient_opt_string, lenient_opt_u64,
};
use super::model::GuestStatus;
use super::types::Vmid;

/// One entry of `GET /nodes/{node}/qemu`, or the answer of `…/status/current`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct VmSummary {
    /// The VM's id.
    pub vmid: Vmid,
    /// Power state.
    pub status: GuestStatus,
    /// The VM's name.
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub name: Option<String>,
    /// The config `lock` value, if locked.
    #[serde(default, deserialize_with = "lenient_lock")]
    pub lock: Option<String>,
    /// Memory limit in bytes.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub maxmem: Option<u64>,
    /// Disk size in bytes.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub maxdisk: Option<u64>,
    /// Virtual CPUs (its cores, times its sockets).
    #[serde(default, deserialize_with = "lenient_opt_f64")]
    pub cpus: Option<f64>,
    /// Seconds since start.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    pub uptime: Option<u64>,
    /// Tags, `;`-separated.
    #[serde(default)]
    pub tags: Option<String>,
    /// Whether the VM is a template.
    #[serde(default, deserialize_with = "lenient_bool")]
    pub template: bool,
    /// `status/current` only: whether the guest agent is configured (`agent=1`).
    #[serde(default, deserialize_with = "lenient_bool")]
    pub agent: bool,
    /// `status/current` only: QEMU's own state (`running`, `paused`, `prelaunch`, …).
    #[serde(default)]
    pub qmpstatus: Option<String>,
}

/// What `…/agent/exec` answers: the guest-side process id to ask `exec-status` about.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
pub struct ExecStarted {
    /// The pid inside the guest.
    #[serde(deserialize_with = "super::decode::lenient_u64")]
    pub pid: u64,
}

/// What `…/agent/exec-status` answers. PVE decodes the agent's base64 output itself; the
/// agent captures at most 16 MiB per stream and marks the rest truncated.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct ExecStatus {
    /// Whether the program has ended.
    #[serde(deserialize_with = "lenient_bool")]
    pub exited: bool,
    /// Its exit code, when it exited normally.
    #[serde(default, deserialize_with = "lenient_opt_i64")]
    pub exitcode: Option<i64>,
    /// The signal that ended it, if one did.
    #[serde(default, deserialize_with = "lenient_opt_i64")]
    pub signal: Option<i64>,
    /// Standard output.
    #[serde(default, rename = "out-data")]
    pub out_data: Option<String>,
    /// Standard error.
    #[serde(default, rename = "err-data")]
    pub err_data: Option<String>,
    /// Whether standard output was cut at the agent's limit.
    #[serde(default, rename = "out-truncated", deserialize_with = "lenient_bool")]
    pub out_truncated: bool,
    /// Whether standard error was cut at the agent's limit.
    #[serde(default, rename = "err-truncated", deserialize_with = "lenient_bool")]
    pub err_truncated: bool,
}

fn lenient_opt_i64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    use serde::de::Error;
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .map(Some)
            .ok_or_else(|| D::Error::custom(format!("not an integer: {n}"))),
        Some(Value::String(s)) => s
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| D::Error::custom(format!("not an integer: {s:?}"))),
        Some(other) => Err(D::Error::custom(format!("not an integer: {other}"))),
    }
}

/// What `…/agent/file-read` answers: the bytes PVE read, decoded (each byte a character).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub(crate) struct FileReadAnswer {
    pub(crate) content: String,
    #[serde(default, deserialize_with = "lenient_bool")]
    pub(crate) truncated: bool,
}

/// A file read from inside a VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRead {
    /// What PVE read, as text (at most 16 MiB of the file).
    pub content: String,
    /// Whether the file goes on past what was read.
    pub truncated: bool,
}

/// The answer of the guest agent's simple commands: `{"result": …}`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub(crate) struct AgentResult<T> {
    pub(crate) result: T,
}

/// One address of a guest interface, as the guest agent reports it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct GuestIpAddress {
    /// The address.
    #[serde(rename = "ip-address")]
    pub address: String,
    /// `ipv4` or `ipv6`.
    #[serde(rename = "ip-address-type")]
    pub kind: String,
    /// The prefix length.
    #[serde(deserialize_with = "super::decode::lenient_u64")]
    pub prefix: u64,
}

/// One interface inside a VM, as the guest agent reports it (`network-get-interfaces`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct GuestInterface {
    /// The interface's name inside the guest (`eth0`, `ens18`, `lo`).
    pub name: String,
    /// Its MAC address.
    #[serde(default, rename = "hardware-address")]
    pub hardware_address: Option<String>,
    /// Its addresses.
    #[serde(default, rename = "ip-addresses")]
    pub addresses: Vec<GuestIpAddress>,
}

/// Whether a VM's filesystems are frozen (`fsfreeze-status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FreezeStatus {
    /// Frozen.
    Frozen,
    /// Thawed.
    Thawed,
}

/// One cloud-init key of `GET …/cloudinit`: the value the drive was built with and the one
/// waiting for the next regeneration.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct CloudinitItem {
    /// The config key (`ciuser`, `ipconfig0`, `sshkeys`, …).
    pub key: String,
    /// The value the current drive was generated with.
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub value: Option<String>,
    /// The value the next regeneration will use.
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub pending: Option<String>,
    /// Whether the key is to be deleted.
    #[serde(default, deserialize_with = "lenient_bool")]
    pub delete: bool,
}

impl CloudinitItem {
    /// Whether the drive is out of date for this key.
    pub fn is_pending(&self) -> bool {
        self.delete || self.pending.is_some()
    }
}

#[cfg(test)]
mod tests;
