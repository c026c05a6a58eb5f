//! The `BosunAgent` role: the privileges the agent's token needs, in one place.
//!
//! `docs/pve-token.md` shows the `pveum role add` command built from this list, and a test
//! (`tests/tests/pve_token_doc.rs`) keeps the doc, this list and the simulator's role equal.
//! `bosunctl pve check` reads the token's effective privileges and names any of these it lacks.

/// The custom role's name.
pub const BOSUN_AGENT_ROLE: &str = "BosunAgent";

/// The user the agent's token belongs to, as the doc creates it.
pub const BOSUN_AGENT_USER: &str = "bosun@pve";

/// The token id the doc creates (`user!tokenid`).
pub const BOSUN_AGENT_TOKEN_ID: &str = "bosun@pve!agent";

/// Every privilege of the `BosunAgent` role, in the doc's order.
pub const BOSUN_AGENT_PRIVILEGES: &[&str] = &[
    "VM.Allocate",
    "VM.Audit",
    "VM.Backup",
    "VM.Config.CPU",
    "VM.Config.Disk",
    "VM.Config.Memory",
    "VM.Config.Network",
    "VM.Config.Options",
    "VM.PowerMgmt",
    "VM.Snapshot",
    "VM.Snapshot.Rollback",
    "Datastore.Allocate",
    "Datastore.AllocateSpace",
    "Datastore.Audit",
    "Sys.Audit",
    "SDN.Use",
];

/// The Proxmox pool only Bosun's guests join: the token's reach inside a VM (its guest agent,
/// its cloud-init identity) is granted on `/pool/bosun` and nowhere else (decision 0113).
pub const BOSUN_POOL: &str = "bosun";

/// The role granted on `/pool/bosun`, to the user and to the token.
pub const BOSUN_GUEST_ROLE: &str = "BosunGuest";

/// The `BosunGuest` role on PVE 9: what reaches inside a VM. `Audit` for `ping` and
/// `network-get-interfaces`, `FileWrite` for a guest's `bootstrap.json`, `Unrestricted` for
/// `exec` (a restore test's check, a controller restarted in place), which PVE 9 lets through
/// every other guest-agent call too; `VM.Config.Cloudinit` for the identity cloud-init gives a
/// VM at its next boot (its SSH keys among it); `VM.Config.HWType` for the fresh SMBIOS uuid
/// (`smbios1`) a provisioned VM gets instead of its archive's (decision 0114).
pub const BOSUN_GUEST_PRIVILEGES: &[&str] = &[
    "VM.Config.Cloudinit",
    "VM.Config.HWType",
    "VM.GuestAgent.Audit",
    "VM.GuestAgent.FileWrite",
    "VM.GuestAgent.Unrestricted",
];

/// The `BosunGuest` role on PVE 8, where one privilege, `VM.Monitor`, guards every guest-agent
/// call.
pub const BOSUN_GUEST_PRIVILEGES_PVE8: &[&str] =
    &["VM.Config.Cloudinit", "VM.Config.HWType", "VM.Monitor"];

/// Every privilege that reaches inside a VM, on either release: none may hold on `/`, `/vms`
/// or a VM outside Bosun's pool.
pub const GUEST_REACH_PRIVILEGES: &[&str] = &[
    "VM.Config.Cloudinit",
    // The SMBIOS uuid a guest reads as its machine's identity (`smbios1`, decision 0114).
    "VM.Config.HWType",
    "VM.GuestAgent.Audit",
    "VM.GuestAgent.FileRead",
    "VM.GuestAgent.FileSystemMgmt",
    "VM.GuestAgent.FileWrite",
    "VM.GuestAgent.Unrestricted",
    "VM.Monitor",
];

/// Privileges that would let the token change pool `bosun`'s members (decision 0122):
/// `update_pool` needs `Pool.Allocate` on `/pool/bosun`, and on each VM `Permissions.Modify`
/// or `VM.Allocate`, which `BosunAgent` holds on `/`; `Permissions.Modify` on the pool would
/// let the token grant itself the rest. With either, a compromised agent could put any VM in
/// the pool and reach inside it, so the token holds neither there: the operator adds a VM to
/// the pool, as root, before a signed `adopt`.
pub const POOL_MEMBERSHIP_PRIVILEGES: &[&str] = &["Pool.Allocate", "Permissions.Modify"];

/// The `BosunGuest` privileges for a PVE release (`9.1` → PVE 9's, `8.4` → PVE 8's); `None`
/// for a release that is not a number.
pub fn guest_privileges_for(release: &str) -> Option<&'static [&'static str]> {
    let major: u32 = release.split('.').next()?.trim().parse().ok()?;
    Some(if major >= 9 {
        BOSUN_GUEST_PRIVILEGES
    } else {
        BOSUN_GUEST_PRIVILEGES_PVE8
    })
}
