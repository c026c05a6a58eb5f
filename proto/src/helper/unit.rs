//! Which systemd unit a verb runs under (decision 0071).
//!
//! The socket route has one socket unit per sandbox: each verb belongs to exactly one, its
//! unit's sandbox is sized to the verbs it holds (`systemd/bosun-helper*@.service`), and the
//! helper refuses a verb that arrives at another unit's socket. The agent picks the socket
//! from the verb ([`HelperUnit::of`]); the sudo route (an agent outside systemd) has no unit.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The argument that selects the socket transport of `bosun-helper@.service`; the other
/// units' arguments are [`HelperUnit::socket_arg`].
pub const SOCKET_MODE_ARG: &str = "--socket";

/// The verb names, as they appear on the wire, in sudoers and in audit lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerbName {
    /// See [`Request::MountByUuid`](super::Request::MountByUuid).
    MountByUuid,
    /// See [`Request::Unmount`](super::Request::Unmount).
    Unmount,
    /// See [`Request::PushBootstrap`](super::Request::PushBootstrap).
    PushBootstrap,
    /// See [`Request::BuildGolden`](super::Request::BuildGolden).
    BuildGolden,
    /// See [`Request::SmartStatus`](super::Request::SmartStatus).
    SmartStatus,
    /// See [`Request::HashArchive`](super::Request::HashArchive).
    HashArchive,
    /// See [`Request::RestartController`](super::Request::RestartController).
    RestartController,
    /// See [`Request::ResetGuestIdentity`](super::Request::ResetGuestIdentity).
    ResetGuestIdentity,
    /// See [`Request::RestoreCheck`](super::Request::RestoreCheck).
    RestoreCheck,
    /// See [`Request::BreakGlassOpen`](super::Request::BreakGlassOpen).
    BreakGlassOpen,
    /// See [`Request::BreakGlassClose`](super::Request::BreakGlassClose).
    BreakGlassClose,
    /// See [`Request::StageAgentUpdate`](super::Request::StageAgentUpdate).
    StageAgentUpdate,
    /// See [`Request::BulkArchive`](super::Request::BulkArchive).
    BulkArchive,
    /// See [`Request::BulkRestore`](super::Request::BulkRestore).
    BulkRestore,
}

impl VerbName {
    /// Every verb, in declaration order.
    pub const ALL: [VerbName; 14] = [
        Self::MountByUuid,
        Self::Unmount,
        Self::PushBootstrap,
        Self::BuildGolden,
        Self::SmartStatus,
        Self::HashArchive,
        Self::RestartController,
        Self::ResetGuestIdentity,
        Self::RestoreCheck,
        Self::BreakGlassOpen,
        Self::BreakGlassClose,
        Self::StageAgentUpdate,
        Self::BulkArchive,
        Self::BulkRestore,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MountByUuid => "mount_by_uuid",
            Self::Unmount => "unmount",
            Self::PushBootstrap => "push_bootstrap",
            Self::BuildGolden => "build_golden",
            Self::SmartStatus => "smart_status",
            Self::HashArchive => "hash_archive",
            Self::RestartController => "restart_controller",
            Self::ResetGuestIdentity => "reset_guest_identity",
            Self::RestoreCheck => "restore_check",
            Self::BreakGlassOpen => "break_glass_open",
            Self::BreakGlassClose => "break_glass_close",
            Self::StageAgentUpdate => "stage_agent_update",
            Self::BulkArchive => "bulk_archive",
            Self::BulkRestore => "bulk_restore",
        }
    }

    /// Parses a wire name (e.g. the sudo transport's argument).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == name)
    }
}

impl fmt::Display for VerbName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One of the helper's socket-activated units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HelperUnit {
    /// `bosun-helper@.service`: mounts, SMART, archive hashes, break-glass keys, agent
    /// updates. The host's mount namespace, no network, four capabilities.
    Host,
    /// `bosun-helper-guest@.service`: the verbs that enter a running container (`pct push`,
    /// `pct pull`, `pct exec`).
    Guest,
    /// `bosun-helper-golden@.service`: golden-image builds (a container created, started,
    /// given packages over the network and dumped).
    Golden,
}

impl HelperUnit {
    /// Every unit.
    pub const ALL: [HelperUnit; 3] = [Self::Host, Self::Guest, Self::Golden];

    /// The unit `verb` runs under.
    pub fn of(verb: VerbName) -> Self {
        match verb {
            VerbName::PushBootstrap
            | VerbName::RestartController
            | VerbName::ResetGuestIdentity
            | VerbName::RestoreCheck
            | VerbName::BulkArchive
            | VerbName::BulkRestore => Self::Guest,
            VerbName::BuildGolden => Self::Golden,
            VerbName::MountByUuid
            | VerbName::Unmount
            | VerbName::SmartStatus
            | VerbName::HashArchive
            | VerbName::BreakGlassOpen
            | VerbName::BreakGlassClose
            | VerbName::StageAgentUpdate => Self::Host,
        }
    }

    /// The verbs that run under this unit.
    pub fn verbs(self) -> impl Iterator<Item = VerbName> {
        VerbName::ALL
            .into_iter()
            .filter(move |v| Self::of(*v) == self)
    }

    /// The unit's name without its suffix: `<name>.socket` listens, `<name>@.service` serves.
    pub fn unit_name(self) -> &'static str {
        match self {
            Self::Host => "bosun-helper",
            Self::Guest => "bosun-helper-guest",
            Self::Golden => "bosun-helper-golden",
        }
    }

    /// The helper's one argument in this unit's `ExecStart=`.
    pub fn socket_arg(self) -> &'static str {
        match self {
            Self::Host => SOCKET_MODE_ARG,
            Self::Guest => "--socket=guest",
            Self::Golden => "--socket=golden",
        }
    }

    /// The unit whose `ExecStart=` argument `arg` is.
    pub fn from_arg(arg: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|u| u.socket_arg() == arg)
    }

    /// The file name of the unit's listening socket; the three sit side by side
    /// (`/run/bosun/`).
    pub fn socket_file(self) -> &'static str {
        match self {
            Self::Host => "helper.sock",
            Self::Guest => "helper-guest.sock",
            Self::Golden => "helper-golden.sock",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verb_has_one_unit_and_every_unit_a_verb() {
        let counted: usize = HelperUnit::ALL.iter().map(|u| u.verbs().count()).sum();
        assert_eq!(counted, VerbName::ALL.len());
        for unit in HelperUnit::ALL {
            assert!(unit.verbs().next().is_some(), "{unit:?}");
            assert_eq!(HelperUnit::from_arg(unit.socket_arg()), Some(unit));
            assert!(VerbName::parse(unit.socket_arg()).is_none());
        }
        assert_eq!(HelperUnit::of(VerbName::BuildGolden), HelperUnit::Golden);
        assert_eq!(HelperUnit::of(VerbName::MountByUuid), HelperUnit::Host);
        assert_eq!(HelperUnit::from_arg("--socket=other"), None);
    }
}
