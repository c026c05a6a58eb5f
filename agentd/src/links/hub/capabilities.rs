//! What the host is and has, for the hub (decision 0077): read from Proxmox (the node's status,
//! storage list and network configuration) and from the kernel's `/sys/class/net` (MAC, state
//! and speed, readable without root), at most once per [`REFRESH`]; the parts the agent knows
//! itself (helper, tunnel, SMART, the signed plan's targets) every poll.
//!
//! A poll carries the description with every full report and whenever it changed since the
//! last answered poll ([`CapabilityState`]); the hub keeps the last one. Whatever Proxmox or
//! the kernel say is cut to the wire's bounds here, so one odd value never costs the poll:
//! names outside their alphabet are left out, free text loses its control characters and is
//! cut at its length.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bosun_errchain::error_chain;
use bosun_proto::capabilities::{
    self as caps, HostCapabilities, Interface, InterfaceKind, LinkState,
};
use bosun_pve::{NetworkInterface, NodeStatus, Pve};
use tokio::time::Instant;

/// How long a reading of Proxmox and the kernel stands before it is read again.
pub const REFRESH: Duration = Duration::from_secs(600);

/// Where the kernel lists network interfaces.
pub const SYS_CLASS_NET: &str = "/sys/class/net";

/// What the agent knows of itself, read every poll.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalFacts {
    /// A root helper is configured.
    pub helper: bool,
    /// A tunnel is watched.
    pub tunnel: bool,
    /// The node's disks give SMART readings.
    pub smart: bool,
    /// `agent.toml` has an address pool (`[addresses]`).
    pub address_pool: bool,
    /// The signed data plan's targets.
    pub plan_targets: Vec<String>,
}

/// The capabilities the agent read, and what the hub acknowledged of them.
#[derive(Debug)]
pub struct CapabilityState {
    sysfs: PathBuf,
    read: Option<(HostCapabilities, Instant)>,
    acked: Option<HostCapabilities>,
    sent: Option<HostCapabilities>,
}

impl CapabilityState {
    /// Reading interfaces' MAC, state and speed under `sysfs` (normally [`SYS_CLASS_NET`]).
    pub fn new(sysfs: impl Into<PathBuf>) -> Self {
        Self {
            sysfs: sysfs.into(),
            read: None,
            acked: None,
            sent: None,
        }
    }

    /// The description for the next poll: always with a full report, otherwise only when it
    /// differs from the one the hub last acknowledged. Proxmox and the kernel are read again
    /// once the last reading is [`REFRESH`] old.
    pub async fn to_send<P: Pve>(
        &mut self,
        pve: &P,
        local: LocalFacts,
        full_report: bool,
    ) -> Option<HostCapabilities> {
        let stale = self
            .read
            .as_ref()
            .is_none_or(|(_, at)| at.elapsed() >= REFRESH);
        if stale {
            let read = read_node(pve, &self.sysfs).await;
            self.read = Some((read, Instant::now()));
        }
        self.select(local, full_report)
    }

    /// [`Self::to_send`] once the node is read: the last reading with `local`'s facts.
    fn select(&mut self, local: LocalFacts, full_report: bool) -> Option<HostCapabilities> {
        let mut current = self.read.as_ref()?.0.clone();
        current.helper = local.helper;
        current.tunnel = local.tunnel;
        current.smart = local.smart;
        current.address_pool = Some(local.address_pool);
        current.plan_targets = local.plan_targets;
        current.plan_targets.sort();
        current.plan_targets.dedup();
        current.plan_targets.retain(|t| {
            !t.is_empty()
                && t.len() <= 64
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        });
        current.plan_targets.truncate(caps::MAX_PLAN_TARGETS);
        if let Err(e) = current.validate() {
            tracing::warn!(error = %error_chain(&e), "host capabilities out of bounds; not sent");
            return None;
        }
        let send = full_report || self.acked.as_ref() != Some(&current);
        self.sent = send.then(|| current.clone());
        self.sent.clone()
    }

    /// The hub answered the poll: what it carried is what the hub holds.
    pub fn answered(&mut self) {
        if let Some(sent) = self.sent.take() {
            self.acked = Some(sent);
        }
    }

    /// The poll failed or was abandoned: whether the hub kept what it carried is unknown, so
    /// the next poll carries the description again.
    pub fn unanswered(&mut self) {
        self.sent = None;
        self.acked = None;
    }
}

/// Reads what Proxmox and the kernel say; a call that fails leaves its part empty.
async fn read_node<P: Pve>(pve: &P, sysfs: &Path) -> HostCapabilities {
    let status = pve.node_status().await.unwrap_or_else(|e| {
        tracing::debug!(error = %error_chain(&e), "node status unread; capabilities without it");
        NodeStatus::default()
    });
    let mut storage_kinds: Vec<String> = match pve.list_storage().await {
        Ok(list) => list.into_iter().map(|s| s.storage_type).collect(),
        Err(e) => {
            tracing::debug!(error = %error_chain(&e), "storage list unread; capabilities without it");
            Vec::new()
        }
    };
    storage_kinds.retain(|k| {
        !k.is_empty()
            && k.len() <= 16
            && k.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    });
    storage_kinds.sort();
    storage_kinds.dedup();
    storage_kinds.truncate(caps::MAX_STORAGE_KINDS);
    let interfaces = match pve.network().await {
        Ok(list) => interfaces(list, sysfs),
        Err(e) => {
            tracing::debug!(error = %error_chain(&e), "network configuration unread; capabilities without it");
            Vec::new()
        }
    };
    let cpu = status.cpuinfo.unwrap_or_default();
    HostCapabilities {
        arch: arch(status.current_kernel.and_then(|k| k.machine)),
        cpu_model: cpu
            .model
            .as_deref()
            .and_then(|m| clean(m, caps::MAX_CPU_MODEL)),
        cpu_count: cpu.cpus.and_then(|n| u32::try_from(n).ok()).unwrap_or(0),
        cpu_sockets: cpu.sockets.and_then(|n| u32::try_from(n).ok()),
        pve_version: status
            .pveversion
            .as_deref()
            .and_then(|v| clean(v, caps::MAX_PVE_VERSION)),
        storage_kinds,
        plan_targets: Vec::new(),
        interfaces,
        helper: false,
        tunnel: false,
        smart: false,
        address_pool: None,
    }
}

/// The machine's architecture as Proxmox names it, else as this agent was built for.
fn arch(machine: Option<String>) -> String {
    machine
        .filter(|m| {
            !m.is_empty()
                && m.len() <= 16
                && m.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned())
}

/// `text` without control characters, trimmed and cut to `max` bytes; none when nothing is
/// left.
fn clean(text: &str, max: usize) -> Option<String> {
    let visible: String = text
        .chars()
        .filter(|c| !bosun_proto::inert::is_control(*c))
        .collect();
    let mut cut = visible.trim();
    while cut.len() > max {
        let mut end = max;
        while !cut.is_char_boundary(end) {
            end -= 1;
        }
        cut = cut[..end].trim_end();
    }
    (!cut.is_empty()).then(|| cut.to_owned())
}

/// The bridges, NICs, bonds and VLANs Proxmox lists, with what the kernel says of each, by
/// name; names outside the wire's alphabet are left out.
pub fn interfaces(list: Vec<NetworkInterface>, sysfs: &Path) -> Vec<Interface> {
    let mut out: Vec<Interface> = list
        .into_iter()
        .filter_map(|i| {
            let kind = match i.kind.as_str() {
                "bridge" | "OVSBridge" => InterfaceKind::Bridge,
                "eth" => InterfaceKind::Nic,
                "bond" | "OVSBond" => InterfaceKind::Bond,
                "vlan" => InterfaceKind::Vlan,
                _ => return None,
            };
            let valid = !i.iface.is_empty()
                && i.iface.len() <= caps::MAX_INTERFACE_NAME
                && i.iface.starts_with(|c: char| c.is_ascii_alphanumeric())
                && i.iface
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'));
            if !valid {
                return None;
            }
            let dir = sysfs.join(&i.iface);
            let mac = sys_text(&dir, "address").filter(|m| caps::is_mac(m));
            let state = match sys_text(&dir, "operstate").as_deref() {
                Some("up") => LinkState::Up,
                Some("down" | "lowerlayerdown") => LinkState::Down,
                _ if i.active => LinkState::Up,
                _ => LinkState::Down,
            };
            let speed_mbps = sys_text(&dir, "speed")
                .and_then(|s| s.parse::<u32>().ok())
                .filter(|s| (1..=caps::MAX_SPEED_MBPS).contains(s));
            Some(Interface {
                name: i.iface,
                kind,
                mac,
                state,
                speed_mbps,
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    out.truncate(caps::MAX_INTERFACES);
    out
}

/// One small attribute file of an interface, trimmed; none when it cannot be read (no such
/// interface here, or the kernel refuses, as `speed` of a link that is down).
fn sys_text(dir: &Path, name: &str) -> Option<String> {
    use std::io::Read as _;
    let file = std::fs::File::open(dir.join(name)).ok()?;
    let mut text = String::new();
    file.take(64).read_to_string(&mut text).ok()?;
    Some(text.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(name: &str, kind: &str, active: bool) -> NetworkInterface {
        NetworkInterface {
            iface: name.into(),
            kind: kind.into(),
            active,
            address: None,
        }
    }

    #[test]
    fn interfaces_take_the_kernels_word_for_mac_state_and_speed() {
        let dir = tempfile::tempdir().unwrap();
        let eno1 = dir.path().join("eno1");
        std::fs::create_dir(&eno1).unwrap();
        std::fs::write(eno1.join("address"), "0c:c4:7a:12:34:56\n").unwrap();
        std::fs::write(eno1.join("operstate"), "up\n").unwrap();
        std::fs::write(eno1.join("speed"), "10000\n").unwrap();
        let eno2 = dir.path().join("eno2");
        std::fs::create_dir(&eno2).unwrap();
        std::fs::write(eno2.join("address"), "\u{1b}[2J\n").unwrap();
        std::fs::write(eno2.join("operstate"), "down\n").unwrap();
        std::fs::write(eno2.join("speed"), "-1\n").unwrap();
        let list = vec![
            iface("vmbr0", "bridge", true),
            iface("eno2", "eth", true),
            iface("eno1", "eth", false),
            iface("lo", "loopback", true),
            iface("bad<name>", "eth", true),
            iface("vmbr0", "bridge", true),
        ];
        let got = interfaces(list, dir.path());
        assert_eq!(
            got,
            vec![
                Interface {
                    name: "eno1".into(),
                    kind: InterfaceKind::Nic,
                    mac: Some("0c:c4:7a:12:34:56".into()),
                    state: LinkState::Up,
                    speed_mbps: Some(10_000),
                },
                Interface {
                    name: "eno2".into(),
                    kind: InterfaceKind::Nic,
                    mac: None,
                    state: LinkState::Down,
                    speed_mbps: None,
                },
                Interface {
                    name: "vmbr0".into(),
                    kind: InterfaceKind::Bridge,
                    mac: None,
                    state: LinkState::Up,
                    speed_mbps: None,
                },
            ]
        );
    }

    #[test]
    fn free_text_loses_control_characters_and_is_cut_at_its_bound() {
        assert_eq!(
            clean("  Intel\u{1b}[31m Xeon\u{7} ", 128).as_deref(),
            Some("Intel[31m Xeon")
        );
        assert_eq!(clean("\u{1b}\u{7}", 128), None);
        let long = "é".repeat(100);
        let cut = clean(&long, 128).unwrap();
        assert!(cut.len() <= 128 && cut.chars().all(|c| c == 'é'));
        assert_eq!(arch(Some("<x86>".into())), std::env::consts::ARCH);
        assert_eq!(arch(Some("aarch64".into())), "aarch64");
    }

    #[test]
    fn a_description_goes_with_full_reports_and_when_it_changes() {
        let mut state = CapabilityState::new("/nonexistent");
        let local = LocalFacts {
            helper: true,
            ..LocalFacts::default()
        };
        assert_eq!(state.select(local.clone(), true), None, "nothing read yet");
        let read = HostCapabilities {
            arch: "x86_64".into(),
            cpu_model: None,
            cpu_count: 4,
            cpu_sockets: None,
            pve_version: None,
            storage_kinds: Vec::new(),
            plan_targets: Vec::new(),
            interfaces: Vec::new(),
            helper: false,
            tunnel: false,
            smart: false,
            address_pool: None,
        };
        state.read = Some((read, Instant::now()));
        let first = state.select(local.clone(), true);
        assert!(
            first
                .as_ref()
                .is_some_and(|c| c.helper && c.address_pool == Some(false)),
            "{first:?}"
        );
        state.answered();
        assert_eq!(
            state.select(local.clone(), false),
            None,
            "unchanged, not resent"
        );
        state.answered();
        assert!(
            state.select(local.clone(), true).is_some(),
            "a full report carries it"
        );
        state.answered();
        let changed = LocalFacts {
            tunnel: true,
            address_pool: true,
            plan_targets: vec!["nas".into(), "bad target".into(), "nas".into()],
            ..local.clone()
        };
        let sent = state.select(changed.clone(), false);
        assert!(
            sent.as_ref().is_some_and(|c| c.tunnel
                && c.address_pool == Some(true)
                && c.plan_targets == ["nas"]),
            "a change goes at once: {sent:?}"
        );
        state.unanswered();
        assert!(
            state.select(changed, false).is_some(),
            "after a failed poll it goes again"
        );
    }
}
