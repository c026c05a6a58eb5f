//! The access-control endpoints an administrator uses to set a node up for Bosun (what
//! `bosunctl pve setup` calls): users and their tokens, roles, pools and ACL entries, with
//! PVE 9.1's permission checks and pve-access-control's answers.
//!
//! - `GET /access/users` lists every user to a caller holding `User.Modify` or `Sys.Audit` on
//!   `/access/groups`, else only the caller's own user; `full=1` adds each user's tokens.
//! - `POST /access/users` needs `Realm.AllocateUser` on `/access/realm/<realm>`.
//! - A token is created by its own user, or by a caller holding `User.Modify` on
//!   `/access/groups`; a token id is never "its own user", so a token cannot mint tokens for its
//!   user. The secret is in the answer once and never again.
//! - Roles: `GET` for anyone; `POST`/`PUT` need `Sys.Modify` on `/access`; built-in roles are
//!   not modifiable.
//! - `GET /pools` lists the pools the caller holds `Pool.Audit` on; `POST /pools` needs
//!   `Pool.Allocate` on `/pool/<poolid>`.
//! - `PUT /pools` (and the deprecated `PUT /pools/{poolid}`) changes a pool's members as
//!   pve-manager's `update_pool` does: `Pool.Allocate` on `/pool/<poolid>` before anything, then
//!   for each vmid `check_perm_modify` on `/vms/<vmid>` (`Permissions.Modify` or
//!   `VM.Allocate`); a guest in another pool moves only with `allow-move` and `Pool.Allocate` on
//!   that pool. Every refusal inside the lock answers 500 with `update pools failed: …` (a
//!   permission refusal too: the lock wrapper stringifies it). Storage members are not modelled.
//! - `GET /access/acl` lists the entries on paths the caller holds `Permissions.Modify` on;
//!   `PUT /access/acl` needs `Permissions.Modify` on the path (`perm-modify`).
//! - A refused change answers 500 with the lock wrapper's words (`create user failed: user
//!   'x' already exists`), as `PVE::AccessControl::lock_user_config` does.

use serde_json::{Value, json};

use crate::acl::AclError;
use crate::api::{ApiError, Ctx, HandlerResult, data};
use crate::routes::{Handler, Perm, RouteSpec, route};
use crate::schema::{BOOL, ParamKind, ParamSpec, STR, opt, opt_requires, req};

/// Which access handler serves a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AccessHandler {
    UserList,
    UserCreate,
    TokenCreate,
    RoleList,
    RoleCreate,
    RoleUpdate,
    PoolList,
    PoolCreate,
    PoolUpdate,
    AclList,
    AclUpdate,
}

pub(crate) fn dispatch(handler: AccessHandler, ctx: &Ctx) -> HandlerResult {
    match handler {
        AccessHandler::UserList => user_list(ctx),
        AccessHandler::UserCreate => user_create(ctx),
        AccessHandler::TokenCreate => token_create(ctx),
        AccessHandler::RoleList => role_list(ctx),
        AccessHandler::RoleCreate => role_create(ctx),
        AccessHandler::RoleUpdate => role_update(ctx),
        AccessHandler::PoolList => pool_list(ctx),
        AccessHandler::PoolCreate => pool_create(ctx),
        AccessHandler::PoolUpdate => pool_update(ctx),
        AccessHandler::AclList => acl_list(ctx),
        AccessHandler::AclUpdate => acl_update(ctx),
    }
}

const USERID: ParamSpec = req(
    "userid",
    ParamKind::Str {
        max_len: Some(64),
        pattern: Some(r"[^\s:/]+@[A-Za-z][A-Za-z0-9.\-_]+"),
    },
);
const TOKENID: ParamSpec = req(
    "tokenid",
    ParamKind::Str {
        max_len: None,
        pattern: Some(r"[A-Za-z][A-Za-z0-9.\-_]+"),
    },
);
const ROLEID: ParamSpec = req(
    "roleid",
    ParamKind::Str {
        max_len: None,
        pattern: Some(r"[A-Za-z0-9.\-_]+"),
    },
);
const PRIVS: ParamSpec = opt(
    "privs",
    ParamKind::Str {
        max_len: None,
        pattern: Some(r"[A-Za-z.]+(?:[,;\s][A-Za-z.]+)*"),
    },
);
const COMMENT: ParamSpec = opt(
    "comment",
    ParamKind::Str {
        max_len: Some(2048),
        pattern: None,
    },
);
const POOLID: ParamSpec = req(
    "poolid",
    ParamKind::Str {
        max_len: Some(64),
        pattern: Some(r"[A-Za-z0-9\-_]+"),
    },
);
const VMS: ParamSpec = opt("vms", ParamKind::VmIdList);
const ALLOW_MOVE: ParamSpec = opt("allow-move", BOOL);
const DELETE: ParamSpec = opt("delete", BOOL);

const fn a(
    method: &'static str,
    path: &'static str,
    params: &'static [ParamSpec],
    perm: Perm,
    handler: AccessHandler,
) -> RouteSpec {
    route(method, path, params, perm, Handler::Access(handler))
}

/// The access-control routes.
pub(crate) static ACCESS_ROUTES: &[RouteSpec] = &[
    a(
        "GET",
        "/access/users",
        &[opt("enabled", BOOL), opt("full", BOOL)],
        Perm::All,
        AccessHandler::UserList,
    ),
    a(
        "POST",
        "/access/users",
        &[USERID, COMMENT],
        Perm::All,
        AccessHandler::UserCreate,
    ),
    a(
        "POST",
        "/access/users/{userid}/token/{tokenid}",
        &[USERID, TOKENID, COMMENT, opt("privsep", BOOL)],
        Perm::All,
        AccessHandler::TokenCreate,
    ),
    a(
        "GET",
        "/access/roles",
        &[],
        Perm::All,
        AccessHandler::RoleList,
    ),
    a(
        "POST",
        "/access/roles",
        &[ROLEID, PRIVS],
        Perm::Check {
            path: "/access",
            privs: &["Sys.Modify"],
            any: false,
        },
        AccessHandler::RoleCreate,
    ),
    a(
        "PUT",
        "/access/roles/{roleid}",
        &[ROLEID, PRIVS, opt_requires("append", BOOL, "privs")],
        Perm::Check {
            path: "/access",
            privs: &["Sys.Modify"],
            any: false,
        },
        AccessHandler::RoleUpdate,
    ),
    a(
        "GET",
        "/pools",
        &[opt("poolid", STR)],
        Perm::All,
        AccessHandler::PoolList,
    ),
    a(
        "POST",
        "/pools",
        &[POOLID, COMMENT],
        Perm::All,
        AccessHandler::PoolCreate,
    ),
    a(
        "PUT",
        "/pools",
        &[POOLID, COMMENT, VMS, ALLOW_MOVE, DELETE],
        Perm::All,
        AccessHandler::PoolUpdate,
    ),
    a(
        "PUT",
        "/pools/{poolid}",
        &[POOLID, COMMENT, VMS, ALLOW_MOVE, DELETE],
        Perm::All,
        AccessHandler::PoolUpdate,
    ),
    a("GET", "/access/acl", &[], Perm::All, AccessHandler::AclList),
    a(
        "PUT",
        "/access/acl",
        &[
            req("path", STR),
            req("roles", STR),
            opt("users", STR),
            opt("tokens", STR),
            opt("propagate", BOOL),
            opt("delete", BOOL),
        ],
        Perm::All,
        AccessHandler::AclUpdate,
    ),
];

/// A refused change: 500 with the lock wrapper's words.
fn failed(what: &str, e: &AclError) -> ApiError {
    ApiError::internal(&format!("{what}: {e}"))
}

/// The user part of the caller's id.
fn caller_user(ctx: &Ctx) -> &str {
    ctx.authid
        .split_once('!')
        .map_or(ctx.authid.as_str(), |(u, _)| u)
}

fn user_list(ctx: &Ctx) -> HandlerResult {
    let all = ctx.has("/access/groups", "User.Modify") || ctx.has("/access/groups", "Sys.Audit");
    let own = caller_user(ctx).to_owned();
    let full = ctx.flag("full");
    let st = ctx.shared.state.lock();
    let users: Vec<Value> = st
        .access
        .user_list()
        .into_iter()
        .filter(|(user, _)| all || *user == own)
        .map(|(user, tokens)| {
            let mut item = json!({ "userid": user, "enable": 1, "expire": 0 });
            if full {
                item["tokens"] = tokens
                    .into_iter()
                    .map(|(tokenid, privsep)| {
                        json!({ "tokenid": tokenid, "privsep": u8::from(privsep), "expire": 0 })
                    })
                    .collect();
            }
            item
        })
        .collect();
    data(json!(users))
}

fn user_create(ctx: &Ctx) -> HandlerResult {
    let userid = ctx.required("userid")?;
    let realm = userid.rsplit_once('@').map_or("", |(_, r)| r);
    ctx.require(&format!("/access/realm/{realm}"), "Realm.AllocateUser")?;
    let mut st = ctx.shared.state.lock();
    st.access
        .create_user(userid)
        .map_err(|e| failed("create user failed", &e))?;
    data(Value::Null)
}

fn token_create(ctx: &Ctx) -> HandlerResult {
    let userid = ctx.required("userid")?;
    let tokenid = ctx.required("tokenid")?;
    if ctx.authid != userid && !ctx.has("/access/groups", "User.Modify") {
        return Err(ApiError::perm("/access/groups", "User.Modify"));
    }
    // The default is a privilege-separated token.
    let privsep = ctx.get("privsep") != Some("0");
    let secret = uuid::Uuid::new_v4().to_string();
    let mut st = ctx.shared.state.lock();
    let full = st
        .access
        .create_new_token(userid, tokenid, &secret, privsep)
        .map_err(|e| failed("generating token failed", &e))?;
    let mut info = json!({ "privsep": u8::from(privsep), "expire": 0 });
    if let Some(comment) = ctx.get("comment") {
        info["comment"] = json!(comment);
    }
    data(json!({ "full-tokenid": full, "info": info, "value": secret }))
}

fn role_list(ctx: &Ctx) -> HandlerResult {
    let st = ctx.shared.state.lock();
    let roles: Vec<Value> = st
        .access
        .role_list()
        .into_iter()
        .map(|(roleid, privs)| {
            let special = crate::acl::BUILTIN_ROLES.contains(&roleid.as_str());
            json!({
                "roleid": roleid,
                "privs": privs.into_iter().collect::<Vec<_>>().join(","),
                "special": u8::from(special),
            })
        })
        .collect();
    data(json!(roles))
}

/// `privs` split as PVE's `pve-priv-list` format does (commas, semicolons or spaces).
fn privs_of(ctx: &Ctx) -> Vec<&str> {
    ctx.get("privs")
        .unwrap_or_default()
        .split([',', ';', ' '])
        .filter(|p| !p.is_empty())
        .collect()
}

fn role_create(ctx: &Ctx) -> HandlerResult {
    let roleid = ctx.required("roleid")?;
    let privs = privs_of(ctx);
    let mut st = ctx.shared.state.lock();
    st.access
        .create_role(roleid, &privs)
        .map_err(|e| failed("create role failed", &e))?;
    data(Value::Null)
}

fn role_update(ctx: &Ctx) -> HandlerResult {
    let roleid = ctx.required("roleid")?;
    let privs = privs_of(ctx);
    let mut st = ctx.shared.state.lock();
    st.access
        .modify_role(roleid, &privs, ctx.flag("append"))
        .map_err(|e| failed("update role failed", &e))?;
    data(Value::Null)
}

fn pool_list(ctx: &Ctx) -> HandlerResult {
    let wanted = ctx.get("poolid");
    let ids = ctx.shared.state.lock().access.pool_ids();
    let pools: Vec<Value> = ids
        .into_iter()
        .filter(|p| wanted.is_none_or(|w| w == p))
        .filter(|p| ctx.has(&format!("/pool/{p}"), "Pool.Audit"))
        .map(|p| json!({ "poolid": p }))
        .collect();
    data(json!(pools))
}

/// `update_pool`: the pool's members changed vmid by vmid, every check inside the lock.
fn pool_update(ctx: &Ctx) -> HandlerResult {
    let poolid = ctx.required("poolid")?;
    ctx.require(&format!("/pool/{poolid}"), "Pool.Allocate")?;
    let refused = |why: String| ApiError::internal(&format!("update pools failed: {why}"));
    let vmids: Vec<u32> = ctx
        .get("vms")
        .unwrap_or_default()
        .split([',', ';', ' '])
        .filter(|v| !v.is_empty())
        .filter_map(|v| v.parse().ok())
        .collect();
    let (delete, allow_move) = (ctx.flag("delete"), ctx.flag("allow-move"));
    let mut st = ctx.shared.state.lock();
    if !st.access.pool_exists(poolid) {
        return Err(refused(format!("pool '{poolid}' does not exist")));
    }
    // PVE writes user.cfg once, after every vmid passed: a refusal changes nothing.
    let mut changes = Vec::with_capacity(vmids.len());
    for vmid in vmids {
        let path = format!("/vms/{vmid}");
        if !["Permissions.Modify", "VM.Allocate"]
            .iter()
            .any(|p| st.access.has(&ctx.authid, &path, p))
        {
            return Err(refused(format!(
                "Permission check failed ({path}, Permissions.Modify|VM.Allocate)"
            )));
        }
        let current = st.access.pool_of(vmid).map(str::to_owned);
        if delete {
            if current.as_deref() != Some(poolid) {
                return Err(refused(format!("VM {vmid} is not a pool member")));
            }
        } else if current.as_deref() == Some(poolid) {
            return Err(refused(format!("VM {vmid} is already a pool member")));
        } else if let Some(existing) = current {
            if !allow_move {
                return Err(refused(format!(
                    "VM {vmid} belongs already to pool '{existing}' and 'allow-move' is not set"
                )));
            }
            let pool_path = format!("/pool/{existing}");
            if !st.access.has(&ctx.authid, &pool_path, "Pool.Allocate") {
                return Err(refused(format!(
                    "Permission check failed ({pool_path}, Pool.Allocate)"
                )));
            }
        }
        changes.push(vmid);
    }
    for vmid in changes {
        if delete {
            st.access.remove_vm_from_pools(vmid);
        } else {
            st.access.add_vm_to_pool(vmid, poolid);
        }
    }
    data(Value::Null)
}

fn pool_create(ctx: &Ctx) -> HandlerResult {
    let poolid = ctx.required("poolid")?;
    ctx.require(&format!("/pool/{poolid}"), "Pool.Allocate")?;
    let mut st = ctx.shared.state.lock();
    st.access
        .create_pool(poolid)
        .map_err(|e| failed("create pool failed", &e))?;
    data(Value::Null)
}

fn acl_list(ctx: &Ctx) -> HandlerResult {
    let entries = ctx.shared.state.lock().access.acl_list();
    let list: Vec<Value> = entries
        .into_iter()
        .filter(|e| ctx.has(&e.path, "Permissions.Modify"))
        .map(|e| {
            json!({
                "path": e.path,
                "type": e.kind,
                "ugid": e.ugid,
                "roleid": e.roleid,
                "propagate": u8::from(e.propagate),
            })
        })
        .collect();
    data(json!(list))
}

/// A comma-separated list parameter's items.
fn list_of<'a>(ctx: &'a Ctx, key: &str) -> Vec<&'a str> {
    ctx.get(key)
        .unwrap_or_default()
        .split([',', ';', ' '])
        .filter(|s| !s.is_empty())
        .collect()
}

fn acl_update(ctx: &Ctx) -> HandlerResult {
    let path = ctx.required("path")?;
    ctx.require(path, "Permissions.Modify")?;
    let roles = list_of(ctx, "roles");
    let subjects: Vec<&str> = list_of(ctx, "users")
        .into_iter()
        .chain(list_of(ctx, "tokens"))
        .collect();
    let delete = ctx.flag("delete");
    let propagate = ctx.get("propagate") != Some("0");
    let mut st = ctx.shared.state.lock();
    let fail = |e: AclError| failed("ACL update failed", &e);
    // Every name is checked before anything changes, as `update_acl` does under its lock.
    for role in &roles {
        if !st.access.role_exists(role) {
            return Err(fail(AclError::UnknownRole {
                role: (*role).to_owned(),
            }));
        }
    }
    for subject in &subjects {
        st.access.check_subject(subject).map_err(fail)?;
    }
    for subject in &subjects {
        for role in &roles {
            if delete {
                st.access.revoke(path, subject, role);
            } else {
                st.access
                    .grant(path, subject, role, propagate)
                    .map_err(fail)?;
            }
        }
    }
    data(Value::Null)
}
