//! Users, API tokens, roles and ACLs, evaluated the way PVE's access control does.
//!
//! - A path's privileges come from the most specific ACL level that names the subject:
//!   entries on the path itself always count, entries on an ancestor only with `propagate`.
//! - A privilege-separated token (`privsep = 1`) gets the intersection of its own and its
//!   user's privileges; a token with `privsep = 0` gets exactly its user's privileges.
//! - `root@pam` has every privilege, but only the exact id `root@pam` is root: a token never is.

use std::collections::{BTreeMap, BTreeSet};

mod admin;
pub(crate) use admin::BUILTIN_ROLES;

/// Every privilege name PVE 9 knows (the subset relevant here plus the common ones).
pub const ALL_PRIVILEGES: &[&str] = &[
    "Datastore.Allocate",
    "Datastore.AllocateSpace",
    "Datastore.AllocateTemplate",
    "Datastore.Audit",
    "Group.Allocate",
    "Mapping.Audit",
    "Mapping.Modify",
    "Mapping.Use",
    "Permissions.Modify",
    "Pool.Allocate",
    "Pool.Audit",
    "Realm.Allocate",
    "Realm.AllocateUser",
    "SDN.Allocate",
    "SDN.Audit",
    "SDN.Use",
    "Sys.AccessNetwork",
    "Sys.Audit",
    "Sys.Console",
    "Sys.Incoming",
    "Sys.Modify",
    "Sys.PowerMgmt",
    "Sys.Syslog",
    "User.Modify",
    "VM.Allocate",
    "VM.Audit",
    "VM.Backup",
    "VM.Clone",
    "VM.Config.CDROM",
    "VM.Config.CPU",
    "VM.Config.Cloudinit",
    "VM.Config.Disk",
    "VM.Config.HWType",
    "VM.Config.Memory",
    "VM.Config.Network",
    "VM.Config.Options",
    "VM.Console",
    "VM.GuestAgent.Audit",
    "VM.GuestAgent.FileRead",
    "VM.GuestAgent.FileSystemMgmt",
    "VM.GuestAgent.FileWrite",
    "VM.GuestAgent.Unrestricted",
    "VM.Migrate",
    "VM.PowerMgmt",
    "VM.Replicate",
    "VM.Snapshot",
    "VM.Snapshot.Rollback",
];

/// The privileges of the `BosunAgent` role.
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

/// The pool only Bosun's guests join; the `BosunGuest` role is granted on it (decision 0113).
pub const BOSUN_POOL: &str = "bosun";

/// The privileges of the `BosunGuest` role (PVE 9 names): what reaches inside a VM.
pub const BOSUN_GUEST_PRIVILEGES: &[&str] = &[
    "VM.Config.Cloudinit",
    "VM.Config.HWType",
    "VM.GuestAgent.Audit",
    "VM.GuestAgent.FileWrite",
    "VM.GuestAgent.Unrestricted",
];

/// The `BosunGuest` role on PVE 8, where `VM.Monitor` guards every guest-agent call.
pub const BOSUN_GUEST_PRIVILEGES_PVE8: &[&str] =
    &["VM.Config.Cloudinit", "VM.Config.HWType", "VM.Monitor"];

/// Every privilege name of a release: PVE 9's list, or PVE 8's (`VM.Monitor` instead of
/// `VM.GuestAgent.*`).
pub(crate) fn privileges_of(pve8: bool) -> BTreeSet<String> {
    ALL_PRIVILEGES
        .iter()
        .filter(|p| !(pve8 && p.starts_with("VM.GuestAgent.")))
        .map(|p| (*p).to_owned())
        .chain(pve8.then(|| "VM.Monitor".to_owned()))
        .collect()
}

/// Effective privileges on one path: privilege name → propagate flag.
pub type PrivSet = BTreeMap<String, bool>;

/// Why an access-control change was refused.
#[derive(Debug, thiserror::Error)]
pub enum AclError {
    #[error("role '{role}' does not exist")]
    UnknownRole { role: String },
    #[error("privilege '{privilege}' does not exist")]
    UnknownPrivilege { privilege: String },
    #[error("user '{user}' does not exist")]
    UnknownUser { user: String },
    #[error("token id '{tokenid}' is not valid")]
    InvalidTokenId { tokenid: String },
    #[error("ACL path '{path}' is not valid")]
    InvalidPath { path: String },
    #[error("user '{user}' already exists")]
    UserExists { user: String },
    #[error("Token already exists.")]
    TokenExists,
    #[error("no such token '{tokenid}' for user '{user}'")]
    UnknownToken { tokenid: String, user: String },
    #[error("role '{role}' already exists")]
    RoleExists { role: String },
    #[error("cannot modify built-in role '{role}'")]
    BuiltinRole { role: String },
    #[error("pool '{pool}' already exists")]
    PoolExists { pool: String },
    #[error("domain '{realm}' does not exist")]
    UnknownRealm { realm: String },
}

#[derive(Clone, Debug)]
struct AclEntry {
    path: String,
    /// A user id (`bosun@pve`) or a token id (`bosun@pve!agent`).
    subject: String,
    role: String,
    propagate: bool,
}

#[derive(Clone)]
pub(crate) struct Token {
    pub(crate) user: String,
    pub(crate) secret: String,
    pub(crate) privsep: bool,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("user", &self.user)
            .field("secret", &"<redacted>")
            .field("privsep", &self.privsep)
            .finish()
    }
}

/// The access-control database of the simulated cluster.
#[derive(Debug, Default)]
pub(crate) struct AccessControl {
    roles: BTreeMap<String, BTreeSet<String>>,
    users: BTreeSet<String>,
    tokens: BTreeMap<String, Token>,
    acl: Vec<AclEntry>,
    /// Pools and the VMs that are their members (`user.cfg`'s `pool:` lines).
    pools: BTreeMap<String, BTreeSet<u32>>,
    /// The privilege names the release knows.
    known: BTreeSet<String>,
}

impl AccessControl {
    /// The built-in roles used here plus `BosunAgent`, users `root@pam` and `bosun@pve`.
    #[cfg(test)]
    pub(crate) fn with_builtin() -> Self {
        Self::for_release(false)
    }

    /// The built-in roles of PVE 9 (`pve8 = false`) or PVE 8, with `BosunGuest` in that
    /// release's names.
    pub(crate) fn for_release(pve8: bool) -> Self {
        let mut ac = Self {
            known: privileges_of(pve8),
            ..Self::default()
        };
        let all = ac.known.clone();
        ac.roles.insert("Administrator".to_owned(), all);
        ac.roles.insert("NoAccess".to_owned(), BTreeSet::new());
        for (name, privs) in [
            ("BosunAgent", BOSUN_AGENT_PRIVILEGES),
            (
                "BosunGuest",
                if pve8 {
                    BOSUN_GUEST_PRIVILEGES_PVE8
                } else {
                    BOSUN_GUEST_PRIVILEGES
                },
            ),
            (
                "PVEAuditor",
                &["VM.Audit", "Datastore.Audit", "Sys.Audit", "SDN.Audit"][..],
            ),
            (
                "PVEDatastoreUser",
                &["Datastore.AllocateSpace", "Datastore.Audit"][..],
            ),
            (
                "PVEVMUser",
                &["VM.Audit", "VM.Backup", "VM.PowerMgmt", "VM.Console"][..],
            ),
        ] {
            ac.roles.insert(
                name.to_owned(),
                privs.iter().map(|p| (*p).to_owned()).collect(),
            );
        }
        ac.users.insert("root@pam".to_owned());
        ac.users.insert("bosun@pve".to_owned());
        ac
    }

    pub(crate) fn add_role(&mut self, name: &str, privileges: &[&str]) -> Result<(), AclError> {
        let mut set = BTreeSet::new();
        for p in privileges {
            if !self.known.contains(*p) {
                return Err(AclError::UnknownPrivilege {
                    privilege: (*p).to_owned(),
                });
            }
            set.insert((*p).to_owned());
        }
        self.roles.insert(name.to_owned(), set);
        Ok(())
    }

    pub(crate) fn add_user(&mut self, userid: &str) {
        self.users.insert(userid.to_owned());
    }

    /// Creates (or replaces) token `user!tokenid` with the given secret.
    pub(crate) fn add_token(
        &mut self,
        user: &str,
        tokenid: &str,
        secret: &str,
        privsep: bool,
    ) -> Result<String, AclError> {
        if !self.users.contains(user) {
            return Err(AclError::UnknownUser {
                user: user.to_owned(),
            });
        }
        if !valid_tokenid(tokenid) {
            return Err(AclError::InvalidTokenId {
                tokenid: tokenid.to_owned(),
            });
        }
        let full = format!("{user}!{tokenid}");
        self.tokens.insert(
            full.clone(),
            Token {
                user: user.to_owned(),
                secret: secret.to_owned(),
                privsep,
            },
        );
        Ok(full)
    }

    /// Grants `role` on `path` to a user or token id.
    pub(crate) fn grant(
        &mut self,
        path: &str,
        subject: &str,
        role: &str,
        propagate: bool,
    ) -> Result<(), AclError> {
        if !self.roles.contains_key(role) {
            return Err(AclError::UnknownRole {
                role: role.to_owned(),
            });
        }
        if !path.starts_with('/') || (path.len() > 1 && path.ends_with('/')) {
            return Err(AclError::InvalidPath {
                path: path.to_owned(),
            });
        }
        self.acl
            .retain(|e| !(e.path == path && e.subject == subject && e.role == role));
        self.acl.push(AclEntry {
            path: path.to_owned(),
            subject: subject.to_owned(),
            role: role.to_owned(),
            propagate,
        });
        Ok(())
    }

    /// Checks a token header value; returns the token's full id on success.
    pub(crate) fn authenticate_token(&self, full_id: &str, secret: &str) -> Option<String> {
        let token = self.tokens.get(full_id)?;
        (token.secret == secret && self.users.contains(&token.user)).then(|| full_id.to_owned())
    }

    /// Effective privileges of `authid` (user or token) on `path`.
    pub(crate) fn privileges(&self, authid: &str, path: &str) -> PrivSet {
        match authid.split_once('!') {
            Some((user, _)) => {
                let Some(token) = self.tokens.get(authid) else {
                    return PrivSet::new();
                };
                let user_privs = self.subject_privileges(user, path);
                if !token.privsep {
                    return user_privs;
                }
                let token_privs = self.subject_privileges(authid, path);
                user_privs
                    .into_iter()
                    .filter_map(|(p, prop)| token_privs.get(&p).map(|tp| (p, prop && *tp)))
                    .collect()
            }
            None => self.subject_privileges(authid, path),
        }
    }

    /// Whether `authid` holds `privilege` on `path`.
    pub(crate) fn has(&self, authid: &str, path: &str, privilege: &str) -> bool {
        self.privileges(authid, path).contains_key(privilege)
    }

    /// Creates an empty pool (nothing if it exists).
    pub(crate) fn add_pool(&mut self, pool: &str) {
        self.pools.entry(pool.to_owned()).or_default();
    }

    /// Whether `pool` exists.
    pub(crate) fn pool_exists(&self, pool: &str) -> bool {
        self.pools.contains_key(pool)
    }

    /// Makes VM `vmid` a member of `pool` (leaving any other pool: a guest is in one pool at
    /// most). `false` when the pool does not exist.
    pub(crate) fn add_vm_to_pool(&mut self, vmid: u32, pool: &str) -> bool {
        if !self.pools.contains_key(pool) {
            return false;
        }
        self.remove_vm_from_pools(vmid);
        self.pools.entry(pool.to_owned()).or_default().insert(vmid);
        true
    }

    /// Removes VM `vmid` from its pool (PVE does so when the VM is destroyed).
    pub(crate) fn remove_vm_from_pools(&mut self, vmid: u32) {
        for members in self.pools.values_mut() {
            members.remove(&vmid);
        }
    }

    /// The pool VM `vmid` is a member of.
    pub(crate) fn pool_of(&self, vmid: u32) -> Option<&str> {
        self.pools
            .iter()
            .find(|(_, m)| m.contains(&vmid))
            .map(|(p, _)| p.as_str())
    }

    /// The members of `pool`.
    pub(crate) fn pool_members(&self, pool: &str) -> BTreeSet<u32> {
        self.pools.get(pool).cloned().unwrap_or_default()
    }

    /// Every path that has an ACL entry (for anyone).
    pub(crate) fn acl_paths(&self) -> BTreeSet<String> {
        self.acl.iter().map(|e| e.path.clone()).collect()
    }

    fn subject_privileges(&self, subject: &str, path: &str) -> PrivSet {
        if subject == "root@pam" {
            return self.known.iter().map(|p| (p.clone(), true)).collect();
        }
        // Walk from "/" down to `path`; a level naming the subject replaces what was inherited.
        let mut roles: BTreeMap<String, bool> = BTreeMap::new();
        let levels = path_levels(path);
        let last = levels.len().saturating_sub(1);
        for (i, level) in levels.iter().enumerate() {
            let here: Vec<&AclEntry> = self
                .acl
                .iter()
                .filter(|e| e.subject == subject && &e.path == level)
                .filter(|e| i == last || e.propagate)
                .collect();
            if !here.is_empty() {
                roles = here.iter().map(|e| (e.role.clone(), e.propagate)).collect();
            }
        }
        self.merge_pool_roles(subject, path, &mut roles);
        if roles.contains_key("NoAccess") {
            return PrivSet::new();
        }
        let mut privs = PrivSet::new();
        for (role, propagate) in roles {
            for p in self.roles.get(&role).into_iter().flatten() {
                let entry = privs.entry(p.clone()).or_insert(false);
                *entry = *entry || propagate;
            }
        }
        privs
    }
}

impl AccessControl {
    /// PVE's pool inheritance (`PVE::RPCEnvironment`'s ACL compile): a member VM's path
    /// `/vms/<vmid>` gets the roles the subject holds on `/pool/<pool>`, never propagated and
    /// only where its own ACLs did not already set the role; a `NoAccess` on the path is not
    /// trumped, and a pool's `NoAccess` trumps the path's other roles.
    fn merge_pool_roles(&self, subject: &str, path: &str, roles: &mut BTreeMap<String, bool>) {
        let Some(vmid) = path
            .strip_prefix("/vms/")
            .and_then(|v| v.parse::<u32>().ok())
        else {
            return;
        };
        let Some(pool) = self.pool_of(vmid) else {
            return;
        };
        if roles.contains_key("NoAccess") {
            return;
        }
        let pool_path = format!("/pool/{pool}");
        let mut pool_roles: BTreeMap<String, bool> = BTreeMap::new();
        let levels = path_levels(&pool_path);
        let last = levels.len().saturating_sub(1);
        for (i, level) in levels.iter().enumerate() {
            let here: Vec<&AclEntry> = self
                .acl
                .iter()
                .filter(|e| e.subject == subject && &e.path == level)
                .filter(|e| i == last || e.propagate)
                .collect();
            if !here.is_empty() {
                pool_roles = here.iter().map(|e| (e.role.clone(), e.propagate)).collect();
            }
        }
        if pool_roles.contains_key("NoAccess") {
            *roles = BTreeMap::from([("NoAccess".to_owned(), false)]);
            return;
        }
        for role in pool_roles.into_keys() {
            roles.entry(role).or_insert(false);
        }
    }
}

/// `/vms/100` → `["/", "/vms", "/vms/100"]`.
fn path_levels(path: &str) -> Vec<String> {
    let mut levels = vec!["/".to_owned()];
    let mut current = String::new();
    for seg in path.split('/').filter(|s| !s.is_empty()) {
        current.push('/');
        current.push_str(seg);
        levels.push(current.clone());
    }
    levels
}

/// PVE's token id syntax: `[A-Za-z][A-Za-z0-9.\-_]+`.
pub(crate) fn valid_tokenid(id: &str) -> bool {
    let mut chars = id.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && id.len() >= 2
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> AccessControl {
        let mut ac = AccessControl::with_builtin();
        ac.add_token("bosun@pve", "agent", "s1", true)
            .expect("token");
        ac.grant("/", "bosun@pve", "BosunAgent", true)
            .expect("grant");
        ac.grant("/", "bosun@pve!agent", "BosunAgent", true)
            .expect("grant");
        ac
    }

    #[test]
    fn privsep_token_gets_the_intersection() {
        let mut ac = setup();
        ac.add_role("PowerOnly", &["VM.PowerMgmt", "VM.Audit"])
            .expect("role");
        ac.add_token("bosun@pve", "narrow", "s2", true)
            .expect("token");
        ac.grant("/vms", "bosun@pve!narrow", "PowerOnly", true)
            .expect("grant");
        assert!(ac.has("bosun@pve!narrow", "/vms/100", "VM.PowerMgmt"));
        assert!(!ac.has("bosun@pve!narrow", "/vms/100", "VM.Allocate"));
        assert!(!ac.has("bosun@pve!narrow", "/storage/local", "Datastore.Audit"));
        assert!(ac.has("bosun@pve!agent", "/storage/local", "Datastore.Audit"));
    }

    #[test]
    fn non_propagating_acl_applies_only_to_its_path() {
        let mut ac = setup();
        ac.add_user("other@pve");
        ac.grant("/vms", "other@pve", "PVEAuditor", false)
            .expect("grant");
        assert!(ac.has("other@pve", "/vms", "VM.Audit"));
        assert!(!ac.has("other@pve", "/vms/100", "VM.Audit"));
    }

    #[test]
    fn more_specific_level_replaces_inherited_roles() {
        let mut ac = setup();
        ac.grant("/vms/666", "bosun@pve!agent", "NoAccess", true)
            .expect("grant");
        assert!(!ac.has("bosun@pve!agent", "/vms/666", "VM.Audit"));
        assert!(ac.has("bosun@pve!agent", "/vms/100", "VM.Audit"));
    }

    #[test]
    fn unknown_token_or_wrong_secret_fails() {
        let ac = setup();
        assert!(ac.authenticate_token("bosun@pve!agent", "s1").is_some());
        assert!(ac.authenticate_token("bosun@pve!agent", "nope").is_none());
        assert!(ac.authenticate_token("bosun@pve!ghost", "s1").is_none());
    }

    #[test]
    fn root_token_without_privsep_has_everything() {
        let mut ac = setup();
        ac.add_token("root@pam", "bosun-sim", "r", false)
            .expect("token");
        assert!(ac.has("root@pam!bosun-sim", "/", "Sys.Modify"));
        assert!(ac.has("root@pam!bosun-sim", "/vms/1234", "VM.Allocate"));
    }
}
