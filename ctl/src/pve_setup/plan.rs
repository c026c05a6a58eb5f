//! What `pve setup` writes, decided from what the node holds: a pure function, so every case
//! (a bare node, a node set up already, a role or an ACL wider than Bosun's) is tested without
//! a node.
//!
//! Wanted, exactly (decision 0115):
//! - role `BosunAgent` with [`BOSUN_AGENT_PRIVILEGES`]; role `BosunGuest` with the release's
//!   guest privileges ([`guest_privileges_for`]);
//! - user `bosun@pve`, its token `agent`, privilege-separated;
//! - pool `bosun`;
//! - four ACL entries, each propagated: `BosunAgent` on `/` and `BosunGuest` on `/pool/bosun`,
//!   each to the user and to the token.
//!
//! Anything missing is created; a missing privilege is appended to its role; a wanted entry
//! that does not propagate is written again propagated. Anything wider — a privilege beyond
//! the list in one of the two roles, another ACL entry naming the user or the token, a token
//! without privilege separation — is reported, and only with `remove_wider` taken away (the
//! token's separation is the operator's: setup never changes an existing token).

use std::collections::BTreeSet;

use bosun_pve::{
    AclChange, AclEntry, AclKind, BOSUN_AGENT_PRIVILEGES, BOSUN_AGENT_ROLE, BOSUN_GUEST_ROLE,
    BOSUN_POOL, PoolInfo, RoleInfo, UserInfo, guest_privileges_for,
};

/// What the node holds, as the administrator's token reads it.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// `GET /access/roles`.
    pub roles: Vec<RoleInfo>,
    /// `GET /access/users?full=1`.
    pub users: Vec<UserInfo>,
    /// `GET /pools`.
    pub pools: Vec<PoolInfo>,
    /// `GET /access/acl`.
    pub acl: Vec<AclEntry>,
}

/// One change setup makes, in the order it makes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// `POST /access/roles`.
    CreateRole {
        /// The role.
        role: &'static str,
        /// Its privileges.
        privs: Vec<&'static str>,
    },
    /// `PUT /access/roles/{role}` with `append=1`: the privileges the role lacks.
    AppendRole {
        /// The role.
        role: &'static str,
        /// The privileges added.
        privs: Vec<&'static str>,
    },
    /// `PUT /access/roles/{role}`: the role set to exactly `privs` (only with `remove_wider`).
    NarrowRole {
        /// The role.
        role: &'static str,
        /// Its privileges from now on.
        privs: Vec<&'static str>,
        /// The privileges taken away.
        removed: Vec<String>,
    },
    /// `POST /access/users`.
    CreateUser,
    /// `POST /access/users/{user}/token/{token}`, privilege-separated.
    CreateToken,
    /// `POST /pools`.
    CreatePool,
    /// `PUT /access/acl`: an entry written (or removed, `change.delete`).
    Acl(AclChange),
}

/// Something wider than Bosun needs, found on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wider {
    /// One of Bosun's roles holds privileges beyond its list.
    Role {
        /// The role.
        role: &'static str,
        /// The privileges beyond the list.
        extra: Vec<String>,
    },
    /// An ACL entry naming Bosun's user or token that setup does not write.
    Acl(AclEntry),
    /// The agent's token is not privilege-separated: it holds whatever its user holds.
    TokenWithoutPrivsep,
}

impl Wider {
    /// Whether `remove_wider` takes it away.
    pub fn removable(&self) -> bool {
        !matches!(self, Self::TokenWithoutPrivsep)
    }
}

/// The changes and the findings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// What setup changes, in order.
    pub steps: Vec<Step>,
    /// What is wider than Bosun needs (removed by the steps only with `remove_wider`).
    pub wider: Vec<Wider>,
}

/// Why no plan could be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The release's guest privileges are unknown.
    #[error("cannot tell the guest privileges of Proxmox VE release {release:?}")]
    Release {
        /// The release `GET /version` gave.
        release: String,
    },
    /// A role setup must change is one PVE generates itself.
    #[error("role {role} exists as a built-in role of Proxmox VE; setup cannot own it")]
    BuiltinRole {
        /// The role.
        role: &'static str,
    },
}

/// The user and the token id of `token` (`bosun@pve!agent`).
fn split_token(token: &str) -> (&str, &str) {
    token.split_once('!').unwrap_or((token, ""))
}

/// The four ACL entries setup writes for `token` and its user.
pub fn wanted_acl(token: &str) -> Vec<(String, String, &'static str)> {
    let (user, _) = split_token(token);
    let pool = format!("/pool/{BOSUN_POOL}");
    let mut out = Vec::new();
    for subject in [user, token] {
        out.push(("/".to_owned(), subject.to_owned(), BOSUN_AGENT_ROLE));
        out.push((pool.clone(), subject.to_owned(), BOSUN_GUEST_ROLE));
    }
    out
}

fn role_steps(
    observed: &Observed,
    role: &'static str,
    wanted: &[&'static str],
    remove_wider: bool,
    plan: &mut Plan,
) -> Result<(), PlanError> {
    let Some(found) = observed.roles.iter().find(|r| r.roleid == role) else {
        plan.steps.push(Step::CreateRole {
            role,
            privs: wanted.to_vec(),
        });
        return Ok(());
    };
    let missing: Vec<&'static str> = wanted
        .iter()
        .copied()
        .filter(|p| !found.privs.contains(*p))
        .collect();
    let extra: Vec<String> = found
        .privs
        .iter()
        .filter(|p| !wanted.contains(&p.as_str()))
        .cloned()
        .collect();
    if found.special && (!missing.is_empty() || !extra.is_empty()) {
        return Err(PlanError::BuiltinRole { role });
    }
    if !extra.is_empty() {
        plan.wider.push(Wider::Role {
            role,
            extra: extra.clone(),
        });
        if remove_wider {
            plan.steps.push(Step::NarrowRole {
                role,
                privs: wanted.to_vec(),
                removed: extra,
            });
            return Ok(());
        }
    }
    if !missing.is_empty() {
        plan.steps.push(Step::AppendRole {
            role,
            privs: missing,
        });
    }
    Ok(())
}

/// What setup does on a node running `release`, for the agent's `token`
/// (`bosun@pve!agent`).
pub fn plan(
    observed: &Observed,
    release: &str,
    token: &str,
    remove_wider: bool,
) -> Result<Plan, PlanError> {
    let guest = guest_privileges_for(release).ok_or_else(|| PlanError::Release {
        release: release.to_owned(),
    })?;
    let (user, tokenid) = split_token(token);
    let mut plan = Plan::default();
    role_steps(
        observed,
        BOSUN_AGENT_ROLE,
        BOSUN_AGENT_PRIVILEGES,
        remove_wider,
        &mut plan,
    )?;
    role_steps(observed, BOSUN_GUEST_ROLE, guest, remove_wider, &mut plan)?;
    match observed.users.iter().find(|u| u.userid == user) {
        None => {
            plan.steps.push(Step::CreateUser);
            plan.steps.push(Step::CreateToken);
        }
        Some(found) => match found.tokens.iter().find(|t| t.tokenid == tokenid) {
            None => plan.steps.push(Step::CreateToken),
            Some(t) if !t.privsep => plan.wider.push(Wider::TokenWithoutPrivsep),
            Some(_) => {}
        },
    }
    if !observed.pools.iter().any(|p| p.poolid == BOSUN_POOL) {
        plan.steps.push(Step::CreatePool);
    }
    let wanted = wanted_acl(token);
    let ours = |e: &AclEntry| {
        matches!(e.kind, AclKind::User | AclKind::Token) && (e.ugid == user || e.ugid == token)
    };
    for (path, subject, role) in &wanted {
        let held = observed.acl.iter().any(|e| {
            ours(e) && e.path == *path && e.ugid == *subject && e.roleid == *role && e.propagate
        });
        if !held {
            plan.steps.push(Step::Acl(AclChange {
                path: path.clone(),
                role: (*role).to_owned(),
                subject: subject.clone(),
                propagate: true,
                delete: false,
            }));
        }
    }
    let wanted_keys: BTreeSet<(&str, &str, &str)> = wanted
        .iter()
        .map(|(p, s, r)| (p.as_str(), s.as_str(), *r))
        .collect();
    for entry in observed.acl.iter().filter(|e| ours(e)) {
        if wanted_keys.contains(&(
            entry.path.as_str(),
            entry.ugid.as_str(),
            entry.roleid.as_str(),
        )) {
            continue;
        }
        plan.wider.push(Wider::Acl(entry.clone()));
        if remove_wider {
            plan.steps.push(Step::Acl(AclChange {
                path: entry.path.clone(),
                role: entry.roleid.clone(),
                subject: entry.ugid.clone(),
                propagate: entry.propagate,
                delete: true,
            }));
        }
    }
    Ok(plan)
}
