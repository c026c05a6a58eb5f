//! The read-only checks: connection, version, node, the token's privileges, storages and the
//! golden archive.

use std::collections::BTreeMap;

use bosun_pve::{
    BOSUN_AGENT_PRIVILEGES, BOSUN_AGENT_ROLE, ContentFilter, ContentType, NodeName, Pve, PveClient,
    PveError, StorageId, StorageInfo, VersionInfo, VolumeId,
};

use super::Plan;
use super::report::{Check, Report};

/// The whole cause chain of an error, for a report line.
fn chain(e: &PveError) -> String {
    bosun_errchain::error_chain(e)
}

/// The `connect` failure for an error that kept the first call from being answered.
pub(super) fn connect_failed(plan: &Plan, e: &PveError) -> Check {
    let token = &plan.config.token_id;
    let (user, name) = token.split_once('!').unwrap_or((token.as_str(), ""));
    let fix = match e {
        PveError::Unauthorized { .. } => vec![
            format!(
                "pveum user token list {user}  # does token {name} exist? a new secret: pveum user token add {user} {name} --privsep 1"
            ),
            "the token file holds USER@REALM!TOKENID=SECRET, or the secret alone with --token-id"
                .to_owned(),
        ],
        _ => vec![
            "check --url (pveproxy listens on port 8006) and that this machine reaches it"
                .to_owned(),
            "pvenode cert info  # on the node: pass its `fingerprint` as --fingerprint".to_owned(),
        ],
    };
    Check::fail(
        "connect",
        format!("{}: {}", plan.config.base_url, chain(e)),
        fix,
    )
}

/// `GET /version` with the pinned certificate and the token; `None` when that failed (the
/// `connect` check is then a failure).
pub(super) async fn connect(
    client: &PveClient,
    plan: &Plan,
    report: &mut Report,
) -> Option<VersionInfo> {
    match client.version().await {
        Ok(version) => {
            report.checks.push(Check::ok(
                "connect",
                format!(
                    "{} answered with the pinned certificate; token {} accepted",
                    plan.config.base_url, plan.config.token_id
                ),
            ));
            Some(version)
        }
        Err(e) => {
            report.checks.push(connect_failed(plan, &e));
            None
        }
    }
}

/// Whether Bosun supports this release: 8.4 or any 9.x.
pub(super) fn supported_release(release: &str) -> bool {
    release == "8.4" || release.split('.').next() == Some("9")
}

/// The `version` check.
pub(super) fn version(version: &VersionInfo) -> Check {
    if supported_release(&version.release) {
        Check::ok("version", format!("Proxmox VE {}", version.version))
    } else {
        Check::fail(
            "version",
            format!(
                "Proxmox VE {} (release {}) is not supported; Bosun supports 8.4 and 9.x",
                version.version, version.release
            ),
            vec!["upgrade the node to Proxmox VE 8.4 or 9.x (https://pve.proxmox.com/wiki/Upgrade_from_8_to_9)".to_owned()],
        )
    }
}

/// The `node` check: `--node`, else the node whose certificate was pinned, else the only one.
pub(super) async fn node(client: &PveClient, plan: &Plan, report: &mut Report) -> Option<NodeName> {
    let nodes = match client.nodes().await {
        Ok(nodes) => nodes,
        Err(e) => {
            report.checks.push(Check::fail(
                "node",
                format!("listing the nodes: {}", chain(&e)),
                vec![format!(
                    "grant Sys.Audit: pveum role modify {BOSUN_AGENT_ROLE} --privs Sys.Audit --append 1"
                )],
            ));
            return None;
        }
    };
    let names = || {
        nodes
            .iter()
            .map(|n| n.node.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let pinned = bosun_pve::parse_fingerprint(match &plan.config.trust {
        bosun_pve::TlsTrust::PinnedSha256(fp) => fp,
        bosun_pve::TlsTrust::CaFile(_) => "",
    })
    .ok();
    let found = match &plan.node {
        Some(wanted) => nodes.iter().find(|n| n.node == wanted.as_str()),
        None => nodes
            .iter()
            .find(|n| {
                pinned.is_some()
                    && n.ssl_fingerprint
                        .as_deref()
                        .and_then(|fp| bosun_pve::parse_fingerprint(fp).ok())
                        == pinned
            })
            .or_else(|| (nodes.len() == 1).then(|| &nodes[0])),
    };
    let Some(found) = found else {
        let detail = match &plan.node {
            Some(wanted) => format!("node {wanted} is not in the cluster (nodes: {})", names()),
            None => format!(
                "cannot tell which node to check (nodes: {}); pass --node",
                names()
            ),
        };
        report.checks.push(Check::fail(
            "node",
            detail,
            vec!["pvecm nodes  # the cluster's node names; pass one with --node".to_owned()],
        ));
        return None;
    };
    let name = match NodeName::new(found.node.clone()) {
        Ok(name) => name,
        Err(e) => {
            report.checks.push(Check::fail(
                "node",
                format!("node name {:?}: {e}", found.node),
                Vec::new(),
            ));
            return None;
        }
    };
    match found.status.as_deref() {
        Some("online") | None => {
            report
                .checks
                .push(Check::ok("node", format!("node {name} is online")));
            Some(name)
        }
        Some(other) => {
            report.checks.push(Check::fail(
                "node",
                format!("node {name} is {other}"),
                vec!["pvecm status  # bring the node back into the cluster".to_owned()],
            ));
            None
        }
    }
}

/// `cluster`: standalone, or one of a cluster and whether it has quorum.
pub(super) async fn cluster(client: &PveClient, token: &str) -> Check {
    let members = match client.cluster_status().await {
        Ok(members) => members,
        Err(e) => {
            return Check::warn(
                "cluster",
                format!(
                    "cannot tell whether the node is part of a cluster: {}",
                    bosun_errchain::error_chain(&e)
                ),
                match e.status() {
                    Some(403) => vec![format!(
                        "pveum acl modify / --tokens '{token}' --roles {BOSUN_AGENT_ROLE} --propagate 0  # Sys.Audit on /"
                    )],
                    _ => Vec::new(),
                },
            );
        }
    };
    let Some(cluster) = members.iter().find(|m| m.kind == "cluster") else {
        return Check::ok("cluster", "standalone node (not part of a Proxmox cluster)");
    };
    let nodes = members.iter().filter(|m| m.kind == "node").count();
    let online = members
        .iter()
        .filter(|m| m.kind == "node" && m.online)
        .count();
    let counted = cluster
        .nodes
        .map_or(nodes, |n| usize::try_from(n).unwrap_or(nodes));
    let detail = format!(
        "node of cluster {} ({counted} nodes, {online} online{}): a guest migrated to another \
         node is reported `migrated` and never restored here",
        cluster.name,
        if cluster.quorate { ", quorate" } else { "" }
    );
    if cluster.quorate {
        Check::ok("cluster", detail)
    } else {
        Check::warn(
            "cluster",
            format!(
                "{detail}; the cluster has NO QUORUM: Proxmox refuses to create or change guests"
            ),
            vec!["pvecm status  # bring enough nodes back online for quorum".to_owned()],
        )
    }
}

/// Where the agent needs a privilege: the ACL path and whether it must propagate below it.
pub(super) fn scope(privilege: &str, node: &str) -> (String, bool) {
    match privilege.split('.').next() {
        Some("VM") => ("/vms".to_owned(), true),
        Some("Datastore") => ("/storage".to_owned(), true),
        Some("Sys") => (format!("/nodes/{node}"), false),
        Some("SDN") => ("/sdn/zones/localnetwork".to_owned(), true),
        _ => ("/".to_owned(), true),
    }
}

/// The `privileges` check; `true` when every privilege is held where the agent needs it.
pub(super) async fn privileges(client: &PveClient, plan: &Plan, report: &mut Report) -> bool {
    let node = client.node().as_str();
    let mut held: BTreeMap<String, BTreeMap<String, bool>> = BTreeMap::new();
    for privilege in BOSUN_AGENT_PRIVILEGES {
        let (path, _) = scope(privilege, node);
        if held.contains_key(&path) {
            continue;
        }
        match client.permissions(&path).await {
            Ok(privs) => {
                held.insert(path, privs);
            }
            Err(e) => {
                report.checks.push(Check::fail(
                    "privileges",
                    format!("reading the token's permissions on {path}: {}", chain(&e)),
                    vec![format!(
                        "pveum user token permissions {} --path {path}  # on the node",
                        token_words(&plan.config.token_id)
                    )],
                ));
                return false;
            }
        }
    }
    least_privilege(&held, &plan.config.token_id, report);
    let mut missing: Vec<String> = Vec::new();
    let mut missing_names: Vec<&str> = Vec::new();
    let mut unpropagated: Vec<String> = Vec::new();
    for privilege in BOSUN_AGENT_PRIVILEGES {
        let (path, needs_propagate) = scope(privilege, node);
        match held.get(&path).and_then(|p| p.get(*privilege)) {
            None => {
                missing.push(format!("{privilege} on {path}"));
                missing_names.push(privilege);
            }
            Some(false) if needs_propagate => {
                unpropagated.push(format!("{privilege} on {path}"));
            }
            Some(_) => {}
        }
    }
    let token = &plan.config.token_id;
    let user = token.split_once('!').map_or(token.as_str(), |(u, _)| u);
    let acl = [
        format!("pveum acl modify / --users {user} --roles {BOSUN_AGENT_ROLE} --propagate 1"),
        format!("pveum acl modify / --tokens '{token}' --roles {BOSUN_AGENT_ROLE} --propagate 1"),
    ];
    if missing.is_empty() && unpropagated.is_empty() {
        report.checks.push(Check::ok(
            "privileges",
            format!(
                "all {} privileges of {BOSUN_AGENT_ROLE} held on {}",
                BOSUN_AGENT_PRIVILEGES.len(),
                held.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        ));
        return true;
    }
    let mut detail = Vec::new();
    let mut fix = Vec::new();
    if !missing.is_empty() {
        detail.push(format!("the token lacks {}", missing.join(", ")));
        if missing.len() == BOSUN_AGENT_PRIVILEGES.len() {
            fix.push(format!(
                "pveum role add {BOSUN_AGENT_ROLE} --privs \"{}\"  # if the role does not exist yet",
                BOSUN_AGENT_PRIVILEGES.join(",")
            ));
        } else {
            fix.push(format!(
                "pveum role modify {BOSUN_AGENT_ROLE} --privs \"{}\" --append 1",
                missing_names.join(",")
            ));
        }
        fix.extend(acl.iter().cloned());
    }
    if !unpropagated.is_empty() {
        detail.push(format!(
            "granted but not propagated to the guests and storages below: {}",
            unpropagated.join(", ")
        ));
        if missing.is_empty() {
            fix.extend(acl.iter().cloned());
        }
    }
    fix.push(format!(
        "pveum user token permissions {} --path /vms  # check what the token holds now",
        token_words(token)
    ));
    report
        .checks
        .push(Check::fail("privileges", detail.join("; "), fix));
    false
}

/// The `least-privilege` check: warns when the token holds more than the agent needs on the
/// paths it was read on — a `root@pam` token, `Sys.Modify`, `Permissions.Modify`, a console —
/// since whoever takes the agent's token gets all of it.
fn least_privilege(
    held: &BTreeMap<String, BTreeMap<String, bool>>,
    token: &str,
    report: &mut Report,
) {
    let extra: std::collections::BTreeSet<&str> = held
        .values()
        .flat_map(|privs| privs.keys())
        .map(String::as_str)
        .filter(|p| !BOSUN_AGENT_PRIVILEGES.contains(p))
        .collect();
    let root = token
        .split_once('!')
        .is_some_and(|(user, _)| user == "root@pam");
    if extra.is_empty() && !root {
        report.checks.push(Check::ok(
            "least-privilege",
            format!("the token holds nothing beyond {BOSUN_AGENT_ROLE}"),
        ));
        return;
    }
    let mut detail = Vec::new();
    if root {
        detail.push(format!(
            "{token} is a root@pam token: whoever reads the agent's config holds the whole node"
        ));
    }
    if !extra.is_empty() {
        detail.push(format!(
            "the token also holds {} (more than {BOSUN_AGENT_ROLE})",
            extra.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    report.checks.push(Check::warn(
        "least-privilege",
        detail.join("; "),
        vec![
            "give the agent its own privilege-separated token with only the BosunAgent role (docs/pve-token.md)".to_owned(),
            format!(
                "pveum user token permissions {} --path /  # what it holds now",
                token_words(token)
            ),
        ],
    ));
}

/// `bosun@pve!agent` → `bosun@pve agent`, as `pveum user token …` takes it.
fn token_words(token: &str) -> String {
    match token.split_once('!') {
        Some((user, name)) => format!("{user} {name}"),
        None => token.to_owned(),
    }
}

/// Storage types on which Proxmox can snapshot a container's volumes.
const SNAPSHOT_TYPES: &[&str] = &["lvmthin", "zfspool", "btrfs", "rbd"];

/// The `rootdir-storage` and `backup-storage` checks; each gives the storage found.
pub(super) async fn storages(
    client: &PveClient,
    plan: &Plan,
    report: &mut Report,
) -> (Option<StorageId>, Option<StorageId>) {
    let list = match client.list_storage().await {
        Ok(list) => list,
        Err(e) => {
            for name in ["rootdir-storage", "backup-storage"] {
                report.checks.push(Check::fail(
                    name,
                    format!("listing the node's storages: {}", chain(&e)),
                    vec!["pvesm status  # on the node".to_owned()],
                ));
            }
            return (None, None);
        }
    };
    let rootdir = storage_for(
        &list,
        "rootdir-storage",
        "rootdir",
        "--storage",
        plan.storage.as_ref(),
        report,
    );
    let backup = storage_for(
        &list,
        "backup-storage",
        "backup",
        "--backup-storage",
        plan.backup_storage.as_ref(),
        report,
    );
    (rootdir, backup)
}

fn id_of(s: &StorageInfo) -> &str {
    s.storage.as_deref().unwrap_or("?")
}

/// `pvesm set ID --content EXISTING,KIND`.
fn add_content(s: &StorageInfo, kind: &str) -> String {
    let mut content: Vec<&str> = s
        .content
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    content.push(kind);
    format!("pvesm set {} --content {}", id_of(s), content.join(","))
}

fn describe(s: &StorageInfo) -> String {
    format!(
        "{} ({}: {})",
        id_of(s),
        s.storage_type,
        s.content.as_deref().unwrap_or("no content")
    )
}

/// What keeps storage `s` from holding `kind`, with the fix; `None` when it can.
fn unfit(s: &StorageInfo, kind: &str) -> Option<(String, String)> {
    let id = id_of(s);
    if !s.enabled {
        Some((
            format!("storage {id} is disabled"),
            format!("pvesm set {id} --disable 0"),
        ))
    } else if !s.active {
        Some((
            format!("storage {id} is not active"),
            format!(
                "pvesm status --storage {id}  # why is it inactive: an unmounted disk, an unreachable server?"
            ),
        ))
    } else if !s.allows(kind) {
        Some((
            format!(
                "storage {id} has no {kind} content ({})",
                s.content.as_deref().unwrap_or("none")
            ),
            add_content(s, kind),
        ))
    } else {
        None
    }
}

fn storage_for(
    list: &[StorageInfo],
    name: &'static str,
    kind: &str,
    flag: &str,
    wanted: Option<&StorageId>,
    report: &mut Report,
) -> Option<StorageId> {
    let chosen = match wanted {
        Some(wanted) => {
            let Some(s) = list.iter().find(|s| id_of(s) == wanted.as_str()) else {
                report.checks.push(Check::fail(
                    name,
                    format!(
                        "storage {wanted} is not on this node, or the token cannot see it (storages: {})",
                        list.iter().map(id_of).collect::<Vec<_>>().join(", ")
                    ),
                    vec![format!("pvesm status  # the node's storages; pass one allowing {kind} with {flag}")],
                ));
                return None;
            };
            if let Some((detail, fix)) = unfit(s, kind) {
                report.checks.push(Check::fail(name, detail, vec![fix]));
                return None;
            }
            s
        }
        None => {
            let mut fit: Vec<&StorageInfo> =
                list.iter().filter(|s| unfit(s, kind).is_none()).collect();
            // Guest volumes: prefer a storage that can snapshot.
            fit.sort_by_key(|s| !SNAPSHOT_TYPES.contains(&s.storage_type.as_str()));
            let Some(s) = fit.first().copied() else {
                let all = list.iter().map(describe).collect::<Vec<_>>().join(", ");
                // Guest volumes belong on a storage that can snapshot, when there is one.
                let usable = || list.iter().filter(|s| s.enabled && s.active);
                let candidate = usable()
                    .find(|s| {
                        kind == "rootdir" && SNAPSHOT_TYPES.contains(&s.storage_type.as_str())
                    })
                    .or_else(|| usable().next());
                let fix = match candidate {
                    Some(c) => add_content(c, kind),
                    None => format!(
                        "pvesm status  # no storage is enabled and active; add one for {kind} (pvesm add …)"
                    ),
                };
                report.checks.push(Check::fail(
                    name,
                    format!("no enabled, active storage allows {kind} (storages: {all})"),
                    vec![fix],
                ));
                return None;
            };
            s
        }
    };
    let id = match StorageId::new(id_of(chosen)) {
        Ok(id) => id,
        Err(e) => {
            report.checks.push(Check::fail(
                name,
                format!("storage id {:?}: {e}", id_of(chosen)),
                Vec::new(),
            ));
            return None;
        }
    };
    let detail = format!(
        "{} allows {kind}{}",
        describe(chosen),
        chosen
            .avail
            .map(|a| format!(", {} GiB free", a >> 30))
            .unwrap_or_default()
    );
    if kind == "rootdir" && !SNAPSHOT_TYPES.contains(&chosen.storage_type.as_str()) {
        report.checks.push(Check::warn(
            name,
            format!("{detail}, but a {} storage cannot snapshot containers (Bosun snapshots before each deploy)", chosen.storage_type),
            vec![format!("put guest volumes on an lvmthin, zfspool, btrfs or rbd storage and pass it with {flag}")],
        ));
    } else {
        report.checks.push(Check::ok(name, detail));
    }
    Some(id)
}

/// The `golden` check: the archive is listed on its storage.
pub(super) async fn golden(client: &PveClient, golden: &VolumeId, report: &mut Report) -> bool {
    let storage = match StorageId::new(golden.storage()) {
        Ok(storage) => storage,
        Err(e) => {
            report
                .checks
                .push(Check::fail("golden", format!("{golden}: {e}"), Vec::new()));
            return false;
        }
    };
    let filter = ContentFilter {
        content: Some(ContentType::Backup),
        vmid: None,
    };
    match client.list_content(&storage, filter).await {
        Ok(items) => match items.iter().find(|i| i.volid == golden.as_str()) {
            Some(item) => {
                report.checks.push(Check::ok(
                    "golden",
                    format!(
                        "{golden} is on storage {storage}{}",
                        item.size
                            .map(|s| format!(" ({} MiB)", s >> 20))
                            .unwrap_or_default()
                    ),
                ));
                true
            }
            None => {
                report.checks.push(Check::fail(
                    "golden",
                    format!(
                        "{golden} is not on storage {storage} ({} backup archive(s) there)",
                        items.len()
                    ),
                    vec![format!("pvesm list {storage} --content backup  # the archives there; build the golden image (golden/README.md) or pass one with --golden")],
                ));
                false
            }
        },
        Err(e) => {
            report.checks.push(Check::fail(
                "golden",
                format!("listing storage {storage}: {}", chain(&e)),
                vec![format!(
                    "pvesm list {storage} --content backup  # on the node"
                )],
            ));
            false
        }
    }
}
