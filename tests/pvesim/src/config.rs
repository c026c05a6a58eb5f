//! Simulator configuration: node identity, task speed and injected faults.
//!
//! Everything here is plain data with serde so the same structures come from a TOML file
//! (`bosun-pvesim --config FILE`), from the admin endpoint (`POST /_sim/faults`, JSON) and from
//! tests (struct literals with `..Default::default()`).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How the simulated node behaves.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    /// The node name (`pve` by default); it appears in paths, UPIDs and the certificate.
    pub node: String,
    /// Multiplier for every task duration and lock wait; `1.0` is real time, `0.0` instant.
    pub time_scale: f64,
    /// How long each task type takes at `time_scale = 1.0`.
    pub durations: TaskDurations,
    /// How long a 401 answer is held back (PVE waits about 3 s).
    #[serde(with = "millis")]
    pub auth_failure_delay: Duration,
    /// Injected faults.
    pub faults: FaultConfig,
    /// Seed for every random decision (fault rolls, MAC addresses, secrets stay random).
    pub seed: u64,
    /// Where the certificate is kept so its fingerprint survives restarts.
    pub data_dir: Option<PathBuf>,
    /// Backup archives on file storages are written as files (see `archive_files`): under
    /// `archive_dir`, else `data_dir`, else a temporary directory the simulator removes when
    /// it is dropped. Off: archives exist only in memory.
    pub archive_files: bool,
    /// Where archive files are written (the node's `/var/lib/vz` and `/mnt/pve` beneath it).
    pub archive_dir: Option<PathBuf>,
    /// The PVE release answered as; it decides how error answers look.
    pub pve_version: PveVersion,
    /// Whether `local` also holds the VM golden archive from the start (a vzdump-qemu of a
    /// cloud image with cloud-init and the QEMU guest agent, as `SimHandle::add_vm_golden`
    /// adds it); with a data directory its file is written beside the container's, so a helper
    /// hashes it. The endpoint names it (`vm_golden_volid`, `vm_golden_sha256`).
    pub vm_golden: bool,
}

/// A PVE release whose observable behaviour the simulator reproduces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum PveVersion {
    /// PVE 8.2 (pve-http-server before 5.2): an error's text is only in the HTTP reason
    /// phrase; the body is `{"data":null}` (plus `errors` for a parameter error).
    #[serde(rename = "8.2")]
    #[value(name = "8.2")]
    V8_2,
    /// PVE 8.4: error bodies carry `message`.
    #[serde(rename = "8.4")]
    #[value(name = "8.4")]
    V8_4,
    /// PVE 9.1, the default.
    #[default]
    #[serde(rename = "9.1")]
    #[value(name = "9.1")]
    V9_1,
}

impl PveVersion {
    /// `(version, release)` as `GET /version` gives them.
    pub(crate) fn version_release(self) -> (&'static str, &'static str) {
        match self {
            Self::V8_2 => ("8.2.7", "8.2"),
            Self::V8_4 => ("8.4.1", "8.4"),
            Self::V9_1 => ("9.1.9", "9.1"),
        }
    }

    /// Whether this is PVE 8, where `VM.Monitor` guards the guest agent (PVE 9:
    /// `VM.GuestAgent.*`).
    pub(crate) fn is_pve8(self) -> bool {
        matches!(self, Self::V8_2 | Self::V8_4)
    }

    /// Whether error bodies leave out `message` (the text is only in the reason phrase).
    pub(crate) fn message_only_in_reason(self) -> bool {
        self == Self::V8_2
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            node: "pve".to_owned(),
            time_scale: 1.0,
            durations: TaskDurations::default(),
            auth_failure_delay: Duration::from_secs(3),
            faults: FaultConfig::default(),
            seed: 0x5eed,
            data_dir: None,
            archive_files: false,
            archive_dir: None,
            pve_version: PveVersion::default(),
            vm_golden: false,
        }
    }
}

impl SimConfig {
    /// A configuration for tests: instant 401s, task durations scaled down a hundredfold.
    pub fn fast() -> Self {
        Self {
            time_scale: 0.01,
            auth_failure_delay: Duration::ZERO,
            ..Self::default()
        }
    }

    /// Scales a real-time duration by `time_scale`.
    pub(crate) fn scaled(&self, real: Duration) -> Duration {
        if self.time_scale.is_finite() && self.time_scale > 0.0 {
            Duration::try_from_secs_f64(real.as_secs_f64() * self.time_scale)
                .unwrap_or(Duration::MAX)
        } else {
            Duration::ZERO
        }
    }
}

/// Real-time durations of each task type (before `time_scale`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TaskDurations {
    #[serde(with = "millis")]
    pub vzcreate: Duration,
    #[serde(with = "millis")]
    pub vzrestore: Duration,
    #[serde(with = "millis")]
    pub vzstart: Duration,
    #[serde(with = "millis")]
    pub vzstop: Duration,
    #[serde(with = "millis")]
    pub vzshutdown: Duration,
    #[serde(with = "millis")]
    pub vzdestroy: Duration,
    #[serde(with = "millis")]
    pub resize: Duration,
    #[serde(with = "millis")]
    pub vzsnapshot: Duration,
    #[serde(with = "millis")]
    pub vzdelsnapshot: Duration,
    #[serde(with = "millis")]
    pub vzrollback: Duration,
    /// Per guest in a vzdump job.
    #[serde(with = "millis")]
    pub vzdump: Duration,
    #[serde(with = "millis")]
    pub imgdel: Duration,
}

impl Default for TaskDurations {
    fn default() -> Self {
        Self {
            vzcreate: Duration::from_secs(20),
            vzrestore: Duration::from_secs(30),
            vzstart: Duration::from_secs(3),
            vzstop: Duration::from_secs(2),
            vzshutdown: Duration::from_secs(5),
            vzdestroy: Duration::from_secs(2),
            resize: Duration::from_secs(2),
            vzsnapshot: Duration::from_secs(2),
            vzdelsnapshot: Duration::from_secs(2),
            vzrollback: Duration::from_secs(3),
            vzdump: Duration::from_secs(20),
            imgdel: Duration::from_secs(1),
        }
    }
}

impl TaskDurations {
    /// The duration of a task type, zero for types without a configured duration.
    pub(crate) fn for_type(&self, task_type: &str) -> Duration {
        match task_type {
            "vzcreate" => self.vzcreate,
            "vzrestore" => self.vzrestore,
            "vzstart" => self.vzstart,
            "vzstop" => self.vzstop,
            "vzshutdown" => self.vzshutdown,
            "vzdestroy" => self.vzdestroy,
            "resize" => self.resize,
            "vzsnapshot" => self.vzsnapshot,
            "vzdelsnapshot" => self.vzdelsnapshot,
            "vzrollback" => self.vzrollback,
            "vzdump" => self.vzdump,
            "imgdel" => self.imgdel,
            _ => Duration::ZERO,
        }
    }
}

/// Faults injected into requests and tasks. All rolls use the simulator's seeded generator,
/// so a given sequence of requests sees the same faults on every run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FaultConfig {
    /// Per-endpoint request faults; the first rule matching a request applies.
    pub endpoints: Vec<EndpointFault>,
    /// Probability (0..=1) that a task fails at its end with its type's typical error.
    pub failed_task_rate: f64,
    /// Restricts `failed_task_rate` to these task types (`vzdump`, `vzstart`, …); empty = all.
    pub failed_task_types: Vec<String>,
    /// `lock:` values written into guest configs as if a crashed job had left them behind.
    /// Applied when the faults are set; a guest created later with that vmid gets it too.
    pub stale_locks: Vec<StaleLock>,
}

/// Faults for requests matching `method` and `path`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EndpointFault {
    /// HTTP method (`GET`, `POST`, …); `None` matches every method.
    pub method: Option<String>,
    /// A schema path template such as `/nodes/{node}/tasks/{upid}/status`, or `*` for all.
    pub path: String,
    /// Delay before the request is handled.
    #[serde(with = "millis")]
    pub latency: Duration,
    /// Probability of an HTTP 500 with `error_message`.
    pub error_rate: f64,
    /// Message of the injected 500.
    pub error_message: String,
    /// Probability of closing the connection without any response (after `latency`); the
    /// request is not carried out.
    pub drop_rate: f64,
    /// Probability of carrying the request out and then closing the connection instead of
    /// answering: the caller cannot know whether it happened.
    pub drop_after_rate: f64,
    /// Probability of an HTTP 596 (pveproxy could not reach the daemon in time).
    pub busy_rate: f64,
}

impl Default for EndpointFault {
    fn default() -> Self {
        Self {
            method: None,
            path: "*".to_owned(),
            latency: Duration::ZERO,
            error_rate: 0.0,
            error_message: "got unexpected error from daemon".to_owned(),
            drop_rate: 0.0,
            drop_after_rate: 0.0,
            busy_rate: 0.0,
        }
    }
}

impl EndpointFault {
    pub(crate) fn matches(&self, method: &str, template: &str) -> bool {
        let method_ok = self
            .method
            .as_deref()
            .is_none_or(|m| m.eq_ignore_ascii_case(method));
        method_ok && (self.path == "*" || self.path == template)
    }
}

/// A stale config lock on one guest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaleLock {
    pub vmid: u32,
    /// One of PVE's lock values, e.g. `backup`.
    pub lock: String,
}

/// Serde for durations as integer milliseconds (readable in TOML and JSON).
pub(crate) mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}
