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
