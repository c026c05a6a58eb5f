//! The access-control calls `bosunctl pve setup` makes with an administrator's token: read and
//! create users, the agent's token, roles, pools and ACL entries. Not part of [`crate::Pve`]:
//! the agent never makes them (its token may not), and nothing in the agent links them.
//!
//! A new token's secret arrives once, in the answer to its creation; it is kept in a
//! [`SecretString`] from the moment it is decoded and never put into an error or a log line.

use std::collections::BTreeSet;

use secrecy::SecretString;
use serde::Deserialize;
use serde_json::Value;

use super::catalogue::Op;
use super::client::{Ctx, PveClient};
use super::decode::lenient_bool;
use super::error::PveError;
use super::qemu_requests::PoolId;
use super::requests::Params;

fn yes() -> bool {
    true
}

/// A role as `GET /access/roles` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RoleInfo {
    /// The role's name.
    pub roleid: String,
    /// Its privileges (the answer's comma-separated `privs`).
    #[serde(default, deserialize_with = "priv_list")]
    pub privs: BTreeSet<String>,
    /// A role PVE generates itself (`Administrator`, `PVEVMUser`, …): never modifiable.
    #[serde(default, deserialize_with = "lenient_bool")]
    pub special: bool,
}

fn priv_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<BTreeSet<String>, D::Error> {
    let text = Option::<String>::deserialize(d)?.unwrap_or_default();
    Ok(text
        .split([',', ';', ' '])
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect())
}

/// One of a user's API tokens (`GET /access/users?full=1`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct UserToken {
    /// The token's id below its user (`agent` in `bosun@pve!agent`).
    pub tokenid: String,
    /// Whether its privileges are the intersection of its own ACLs and its user's (the
    /// default); `false` gives it exactly its user's.
    #[serde(default = "yes", deserialize_with = "lenient_bool")]
    pub privsep: bool,
}

/// A user with its tokens (`GET /access/users?full=1`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct UserInfo {
    /// `name@realm`.
    pub userid: String,
    /// The user's API tokens.
    #[serde(default)]
    pub tokens: Vec<UserToken>,
}

/// A pool as `GET /pools` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PoolInfo {
    /// The pool's id.
    pub poolid: String,
}

/// What an ACL entry grants its role to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AclKind {
    /// A user (`bosun@pve`).
    User,
    /// A group.
    Group,
    /// An API token (`bosun@pve!agent`).
    Token,
}

/// One ACL entry (`GET /access/acl`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct AclEntry {
    /// The ACL path (`/`, `/pool/bosun`, `/vms/100`).
    pub path: String,
    /// Whether `ugid` is a user, a group or a token.
    #[serde(rename = "type")]
    pub kind: AclKind,
    /// The user, group or token id.
    pub ugid: String,
    /// The role granted.
    pub roleid: String,
    /// Whether the role reaches the paths below (absent means yes, as PVE's default).
    #[serde(default = "yes", deserialize_with = "lenient_bool")]
    pub propagate: bool,
}

/// A token just created: its full id and its secret, which PVE never shows again.
#[derive(Debug)]
pub struct NewToken {
    /// `user@realm!tokenid`.
    pub full_tokenid: String,
    /// The secret.
    pub secret: SecretString,
}

/// A change of one ACL entry (`PUT /access/acl`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclChange {
    /// The ACL path.
    pub path: String,
    /// The role.
    pub role: String,
    /// A user (`bosun@pve`) or a token (`bosun@pve!agent`): a `!` makes it a token.
    pub subject: String,
    /// Whether the role reaches the paths below.
    pub propagate: bool,
    /// Remove the entry instead of writing it.
    pub delete: bool,
}

impl AclChange {
    fn params(&self) -> Params {
        let key = if self.subject.contains('!') {
            "tokens"
        } else {
            "users"
        };
        let mut p: Params = vec![
            ("path".into(), self.path.clone()),
            ("roles".into(), self.role.clone()),
            (key.into(), self.subject.clone()),
        ];
        if self.delete {
            p.push(("delete".into(), "1".into()));
        } else {
            p.push(("propagate".into(), u8::from(self.propagate).to_string()));
        }
        p
    }
}

impl PveClient {
    /// `GET /access/roles`: every role with its privileges.
    pub async fn roles(&self) -> Result<Vec<RoleInfo>, PveError> {
        self.call(
            Ctx::new(Op::ListRoles),
            &["access", "roles"],
            &Params::new(),
        )
        .await
    }

    /// `POST /access/roles`: a new role (`Sys.Modify` on `/access`); an existing name fails.
    pub async fn create_role(&self, roleid: &str, privs: &[&str]) -> Result<(), PveError> {
        let params: Params = vec![
            ("roleid".into(), roleid.to_owned()),
            ("privs".into(), privs.join(",")),
        ];
        self.call::<Value>(Ctx::new(Op::CreateRole), &["access", "roles"], &params)
            .await
            .map(drop)
    }

    /// `PUT /access/roles/{roleid}`: replaces the role's privileges with `privs`, or, with
    /// `append`, adds them to what it has.
    pub async fn update_role(
        &self,
        roleid: &str,
        privs: &[&str],
        append: bool,
    ) -> Result<(), PveError> {
        let mut params: Params = vec![("privs".into(), privs.join(","))];
        if append {
            params.push(("append".into(), "1".into()));
        }
        self.call::<Value>(
            Ctx::new(Op::UpdateRole),
            &["access", "roles", roleid],
            &params,
        )
        .await
        .map(drop)
    }

    /// `GET /access/users?full=1`: the users the token may see, with their tokens.
    pub async fn users(&self) -> Result<Vec<UserInfo>, PveError> {
        let params: Params = vec![("full".into(), "1".into())];
        self.call(Ctx::new(Op::ListUsers), &["access", "users"], &params)
            .await
    }

    /// `POST /access/users`: a user without a password (nobody logs in as it).
    pub async fn create_user(&self, userid: &str, comment: &str) -> Result<(), PveError> {
        let params: Params = vec![
            ("userid".into(), userid.to_owned()),
            ("comment".into(), comment.to_owned()),
        ];
        self.call::<Value>(Ctx::new(Op::CreateUser), &["access", "users"], &params)
            .await
            .map(drop)
    }

    /// `POST /access/users/{userid}/token/{tokenid}` with `privsep=1`: a privilege-separated
    /// token and its secret, given this once.
    pub async fn create_token(
        &self,
        userid: &str,
        tokenid: &str,
        comment: &str,
    ) -> Result<NewToken, PveError> {
        let params: Params = vec![
            ("privsep".into(), "1".into()),
            ("comment".into(), comment.to_owned()),
        ];
        let ctx = Ctx::new(Op::CreateToken);
        let mut answer: Value = self
            .call(ctx, &["access", "users", userid, "token", tokenid], &params)
            .await?;
        // Taken out of the answer before anything could print it; an error never quotes it.
        let secret = match answer.get_mut("value").map(Value::take) {
            // A real secret is a UUID: nothing that could steer a terminal or split a line.
            Some(Value::String(s))
                if !s.is_empty() && !s.chars().any(|c| c.is_whitespace() || c.is_control()) =>
            {
                SecretString::from(s)
            }
            _ => {
                return Err(shape_error(
                    Op::CreateToken,
                    "no usable token value in the answer",
                ));
            }
        };
        let full_tokenid = answer
            .get("full-tokenid")
            .and_then(Value::as_str)
            .map_or_else(|| format!("{userid}!{tokenid}"), str::to_owned);
        Ok(NewToken {
            full_tokenid,
            secret,
        })
    }

    /// `GET /pools`: the pools the token may audit.
    pub async fn pools(&self) -> Result<Vec<PoolInfo>, PveError> {
        self.call(Ctx::new(Op::ListPools), &["pools"], &Params::new())
            .await
    }

    /// `POST /pools`: a new, empty pool.
    pub async fn create_pool(&self, pool: &PoolId, comment: &str) -> Result<(), PveError> {
        let params: Params = vec![
            ("poolid".into(), pool.as_str().to_owned()),
            ("comment".into(), comment.to_owned()),
        ];
        self.call::<Value>(Ctx::new(Op::CreatePool), &["pools"], &params)
            .await
            .map(drop)
    }

    /// `GET /access/acl`: the entries on paths the token may modify permissions on.
    pub async fn acl(&self) -> Result<Vec<AclEntry>, PveError> {
        self.call(Ctx::new(Op::ListAcl), &["access", "acl"], &Params::new())
            .await
    }

    /// `PUT /access/acl`: writes (or, with `delete`, removes) one entry.
    pub async fn update_acl(&self, change: &AclChange) -> Result<(), PveError> {
        self.call::<Value>(
            Ctx::new(Op::UpdateAcl),
            &["access", "acl"],
            &change.params(),
        )
        .await
        .map(drop)
    }
}

/// An answer that parsed but lacks what the call needs (its text is not quoted: it may hold
/// a secret).
fn shape_error(op: Op, what: &'static str) -> PveError {
    use serde::de::Error as _;
    PveError::Decode {
        op,
        vmid: None,
        body_excerpt: String::new(),
        source: serde_json::Error::custom(what),
    }
}
