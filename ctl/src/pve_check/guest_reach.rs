//! The `guest-reach` check (decision 0113): what reaches inside a VM — its guest agent
//! (`VM.GuestAgent.*` on PVE 9, `VM.Monitor` on PVE 8), its cloud-init identity
//! (`VM.Config.Cloudinit`) and its SMBIOS identity (`VM.Config.HWType`) — the token holds on Bosun's pool, `/pool/bosun`, and nowhere
//! else: not on `/`, not on `/vms`, not on a VM outside the pool. Nor may the token change the
//! pool's members (`Pool.Allocate` or `Permissions.Modify` on `/pool/bosun`, decision 0122):
//! it would put any VM in the pool itself. A compromised agent then runs nothing and writes
//! nothing in a VM Bosun did not create or adopt.

use std::collections::{BTreeMap, BTreeSet};

use bosun_pve::{
    BOSUN_GUEST_ROLE, BOSUN_POOL, GUEST_REACH_PRIVILEGES, POOL_MEMBERSHIP_PRIVILEGES, Pve,
    PveClient, PveError, guest_privileges_for,
};

use super::Plan;
use super::report::{Check, Report};

/// Every privilege the token holds, by path.
pub(super) type Held = BTreeMap<String, BTreeMap<String, bool>>;

/// What the check concludes from what the token holds, the pool's members and the release.
pub(super) fn judge(
    held: &Held,
    pool_members: &BTreeSet<u64>,
    release: &str,
    token: &str,
) -> Check {
    let Some(wanted) = guest_privileges_for(release) else {
        return Check::fail(
            "guest-reach",
            format!("cannot tell the guest privileges of Proxmox VE release {release:?}"),
            Vec::new(),
        );
    };
    let pool_path = format!("/pool/{BOSUN_POOL}");
    let user = token.split_once('!').map_or(token, |(u, _)| u);
    let on_pool = held.get(&pool_path);
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|p| !on_pool.is_some_and(|h| h.contains_key(*p)))
        .collect();
    let mut outside: Vec<String> = Vec::new();
    for (path, privileges) in held {
        if *path == pool_path {
            continue;
        }
        let member = path
            .strip_prefix("/vms/")
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|vmid| pool_members.contains(&vmid));
        let reach: Vec<&str> = privileges
            .keys()
            .map(String::as_str)
            .filter(|p| GUEST_REACH_PRIVILEGES.contains(p))
            .collect();
        // A pool member inherits the pool's roles: its reach is the pool's, as intended.
        if !reach.is_empty() && !member {
            outside.push(format!("{} on {path}", reach.join(", ")));
        }
    }
    let extra: Vec<&str> = on_pool
        .into_iter()
        .flat_map(|h| h.keys())
        .map(String::as_str)
        .filter(|p| GUEST_REACH_PRIVILEGES.contains(p) && !wanted.contains(p))
        .collect();
    if !outside.is_empty() {
        return Check::fail(
            "guest-reach",
            format!(
                "the token reaches inside guests outside Bosun's pool: {}",
                outside.join("; ")
            ),
            vec![
                "pveum acl list  # find the ACL granting it on that path".to_owned(),
                format!(
                    "pveum acl delete <path> --roles <role> --tokens '{token}'  # and --users {user}"
                ),
                format!(
                    "grant {BOSUN_GUEST_ROLE} on {pool_path} only (docs/pve-token.md), never on / or /vms"
                ),
            ],
        );
    }
    let joins: Vec<&str> = on_pool
        .into_iter()
        .flat_map(|h| h.keys())
        .map(String::as_str)
        .filter(|p| POOL_MEMBERSHIP_PRIVILEGES.contains(p))
        .collect();
    if !joins.is_empty() {
        return Check::fail(
            "guest-reach",
            format!(
                "the token can change {pool_path}'s members ({}): it could put any VM in Bosun's pool and reach inside it",
                joins.join(", ")
            ),
            vec![
                format!(
                    "pveum user token permissions {} --path {pool_path}  # which role grants it",
                    token.replacen('!', " ", 1)
                ),
                "remove that grant: only the operator, as root, adds a VM to the pool (`pveum pool modify bosun --vms VMID`, docs/pve-token.md)".to_owned(),
            ],
        );
    }
    if !missing.is_empty() {
        return Check::fail(
            "guest-reach",
            format!(
                "the token lacks {} on {pool_path} (Bosun's VMs need them)",
                missing.join(", ")
            ),
            vec![
                format!(
                    "pveum pool add {BOSUN_POOL} --comment \"Bosun's guests\"  # if it does not exist yet"
                ),
                format!(
                    "pveum role add {BOSUN_GUEST_ROLE} --privs \"{}\"  # or: pveum role modify {BOSUN_GUEST_ROLE} --privs … --append 1",
                    wanted.join(",")
                ),
                format!(
                    "pveum acl modify {pool_path} --users {user} --roles {BOSUN_GUEST_ROLE} --propagate 1"
                ),
                format!(
                    "pveum acl modify {pool_path} --tokens '{token}' --roles {BOSUN_GUEST_ROLE} --propagate 1"
                ),
            ],
        );
    }
    if !extra.is_empty() {
        return Check::warn(
            "guest-reach",
            format!(
                "the token also holds {} on {pool_path}, beyond {BOSUN_GUEST_ROLE}",
                extra.join(", ")
            ),
            vec![format!(
                "pveum role modify {BOSUN_GUEST_ROLE} --privs \"{}\"",
                wanted.join(",")
            )],
        );
    }
    Check::ok(
        "guest-reach",
        format!(
            "{} held on {pool_path} ({} member VMs) and on no other path",
            wanted.join(", "),
            pool_members.len()
        ),
    )
}

/// Reads what the token holds everywhere and the pool's members, then judges.
pub(super) async fn check(client: &PveClient, plan: &Plan, release: &str, report: &mut Report) {
    let token = plan.config.token_id.as_str();
    let read = async {
        let mut held = client.all_permissions().await?;
        // The pool's own path is listed only where an ACL names it; ask for it as well.
        let pool_path = format!("/pool/{BOSUN_POOL}");
        let on_pool = client.permissions(&pool_path).await?;
        held.insert(pool_path, on_pool);
        let members: BTreeSet<u64> = client
            .cluster_guests()
            .await?
            .into_iter()
            .filter(|g| g.pool.as_deref() == Some(BOSUN_POOL))
            .map(|g| g.vmid)
            .collect();
        Ok::<_, PveError>((held, members))
    };
    match read.await {
        Ok((held, members)) => report.checks.push(judge(&held, &members, release, token)),
        Err(e) => report.checks.push(Check::fail(
            "guest-reach",
            format!(
                "reading the token's permissions: {}",
                bosun_errchain::error_chain(&e)
            ),
            vec![format!(
                "pveum user token permissions {}  # on the node",
                token.replacen('!', " ", 1)
            )],
        )),
    }
}

#[cfg(test)]
mod tests;
