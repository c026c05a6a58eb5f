//! What an administrator changes in the access-control database through the API (users,
//! tokens, roles, pools, ACL entries), with pve-access-control's rules: a name that exists is
//! refused, never overwritten; a built-in role cannot be changed; an ACL entry names a user or
//! a token that exists and a role that exists; removing a user removes its tokens and every
//! ACL entry naming either.

use std::collections::BTreeSet;

use super::{AccessControl, AclError, valid_tokenid};

/// The roles PVE generates itself (`special` in `GET /access/roles`): never modifiable.
pub(crate) const BUILTIN_ROLES: &[&str] = &[
    "Administrator",
    "NoAccess",
    "PVEAuditor",
    "PVEDatastoreUser",
    "PVEVMUser",
];

/// The realms of the simulated cluster.
const REALMS: &[&str] = &["pam", "pve"];

/// One ACL entry as `GET /access/acl` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AclView {
    pub(crate) path: String,
    /// `user` or `token` (the simulator has no groups).
    pub(crate) kind: &'static str,
    pub(crate) ugid: String,
    pub(crate) roleid: String,
    pub(crate) propagate: bool,
}

impl AccessControl {
    /// Every role with its privileges.
    pub(crate) fn role_list(&self) -> Vec<(String, BTreeSet<String>)> {
        self.roles
            .iter()
            .map(|(name, privs)| (name.clone(), privs.clone()))
            .collect()
    }

    /// `POST /access/roles`: a new role; an existing name is refused.
    pub(crate) fn create_role(&mut self, name: &str, privileges: &[&str]) -> Result<(), AclError> {
        if self.roles.contains_key(name) {
            return Err(AclError::RoleExists {
                role: name.to_owned(),
            });
        }
        self.add_role(name, privileges)
    }

    /// `PUT /access/roles/{roleid}`: replaces the role's privileges, or adds to them with
    /// `append`. A built-in role is refused.
    pub(crate) fn modify_role(
        &mut self,
        name: &str,
        privileges: &[&str],
        append: bool,
    ) -> Result<(), AclError> {
        if BUILTIN_ROLES.contains(&name) {
            return Err(AclError::BuiltinRole {
                role: name.to_owned(),
            });
        }
        let Some(current) = self.roles.get(name).cloned() else {
            return Err(AclError::UnknownRole {
                role: name.to_owned(),
            });
        };
        let mut wanted: Vec<&str> = privileges.to_vec();
        if append {
            wanted.extend(current.iter().map(String::as_str));
        }
        self.add_role(name, &wanted)
    }

    /// Every user with its tokens (`tokenid`, `privsep`).
    pub(crate) fn user_list(&self) -> Vec<(String, Vec<(String, bool)>)> {
        self.users
            .iter()
            .map(|user| {
                let tokens = self
                    .tokens
                    .iter()
                    .filter(|(_, t)| &t.user == user)
                    .filter_map(|(full, t)| {
                        full.split_once('!')
                            .map(|(_, id)| (id.to_owned(), t.privsep))
                    })
                    .collect();
                (user.clone(), tokens)
            })
            .collect()
    }

    /// `POST /access/users`: a new user in an existing realm; an existing id is refused.
    pub(crate) fn create_user(&mut self, userid: &str) -> Result<(), AclError> {
        let realm = userid.rsplit_once('@').map_or("", |(_, r)| r);
        if !REALMS.contains(&realm) {
            return Err(AclError::UnknownRealm {
                realm: realm.to_owned(),
            });
        }
        if !self.users.insert(userid.to_owned()) {
            return Err(AclError::UserExists {
                user: userid.to_owned(),
            });
        }
        Ok(())
    }

    /// Removes a user, its tokens and every ACL entry naming the user or a token of it.
    pub(crate) fn remove_user(&mut self, userid: &str) {
        self.users.remove(userid);
        self.tokens.retain(|_, t| t.user != userid);
        let prefix = format!("{userid}!");
        self.acl
            .retain(|e| e.subject != userid && !e.subject.starts_with(&prefix));
    }

    /// Removes a role and every ACL entry granting it (`DELETE /access/roles/{roleid}`).
    pub(crate) fn remove_role(&mut self, name: &str) {
        self.roles.remove(name);
        self.acl.retain(|e| e.role != name);
    }

    /// Removes a pool and every ACL entry on its path (`DELETE /pools` of an empty pool).
    pub(crate) fn remove_pool(&mut self, pool: &str) {
        self.pools.remove(pool);
        let path = format!("/pool/{pool}");
        self.acl.retain(|e| e.path != path);
    }

    /// `POST /access/users/{userid}/token/{tokenid}`: a new token; an existing one is refused
    /// (its secret is never shown again).
    pub(crate) fn create_new_token(
        &mut self,
        user: &str,
        tokenid: &str,
        secret: &str,
        privsep: bool,
    ) -> Result<String, AclError> {
        if self.tokens.contains_key(&format!("{user}!{tokenid}")) {
            return Err(AclError::TokenExists);
        }
        self.add_token(user, tokenid, secret, privsep)
    }

    /// `POST /pools`: a new, empty pool; an existing id is refused.
    pub(crate) fn create_pool(&mut self, pool: &str) -> Result<(), AclError> {
        if self.pools.contains_key(pool) {
            return Err(AclError::PoolExists {
                pool: pool.to_owned(),
            });
        }
        self.add_pool(pool);
        Ok(())
    }

    /// Every pool's id.
    pub(crate) fn pool_ids(&self) -> Vec<String> {
        self.pools.keys().cloned().collect()
    }

    /// Every ACL entry, in the order `user.cfg` keeps them (by path).
    pub(crate) fn acl_list(&self) -> Vec<AclView> {
        let mut list: Vec<AclView> = self
            .acl
            .iter()
            .map(|e| AclView {
                path: e.path.clone(),
                kind: if e.subject.contains('!') {
                    "token"
                } else {
                    "user"
                },
                ugid: e.subject.clone(),
                roleid: e.role.clone(),
                propagate: e.propagate,
            })
            .collect();
        list.sort_by(|a, b| (&a.path, &a.ugid, &a.roleid).cmp(&(&b.path, &b.ugid, &b.roleid)));
        list
    }

    /// Whether a user or token id may be named in an ACL entry (PVE's `update_acl` checks).
    pub(crate) fn check_subject(&self, subject: &str) -> Result<(), AclError> {
        match subject.split_once('!') {
            Some((user, tokenid)) => {
                if !valid_tokenid(tokenid) {
                    return Err(AclError::InvalidTokenId {
                        tokenid: tokenid.to_owned(),
                    });
                }
                if !self.users.contains(user) {
                    return Err(AclError::UnknownUser {
                        user: user.to_owned(),
                    });
                }
                if !self.tokens.contains_key(subject) {
                    return Err(AclError::UnknownToken {
                        tokenid: tokenid.to_owned(),
                        user: user.to_owned(),
                    });
                }
                Ok(())
            }
            None if self.users.contains(subject) => Ok(()),
            None => Err(AclError::UnknownUser {
                user: subject.to_owned(),
            }),
        }
    }

    /// `PUT /access/acl` with `delete=1`: removes the entry, if there is one.
    pub(crate) fn revoke(&mut self, path: &str, subject: &str, role: &str) {
        self.acl
            .retain(|e| !(e.path == path && e.subject == subject && e.role == role));
    }

    /// Whether `role` exists.
    pub(crate) fn role_exists(&self, role: &str) -> bool {
        self.roles.contains_key(role)
    }
}
