use std::collections::BTreeSet;

use bosun_pve::{
    AclEntry, AclKind, BOSUN_AGENT_PRIVILEGES, BOSUN_GUEST_PRIVILEGES, BOSUN_GUEST_PRIVILEGES_PVE8,
    PoolInfo, RoleInfo, UserInfo, UserToken,
};

use super::plan::{Observed, Step, Wider, plan, wanted_acl};

const TOKEN: &str = "bosun@pve!agent";

fn role(name: &str, privs: &[&str]) -> RoleInfo {
    RoleInfo {
        roleid: name.to_owned(),
        privs: privs.iter().map(|p| (*p).to_owned()).collect(),
        special: false,
    }
}

fn entry(path: &str, ugid: &str, roleid: &str, propagate: bool) -> AclEntry {
    AclEntry {
        path: path.to_owned(),
        kind: if ugid.contains('!') {
            AclKind::Token
        } else {
            AclKind::User
        },
        ugid: ugid.to_owned(),
        roleid: roleid.to_owned(),
        propagate,
    }
}

/// A node set up exactly as setup leaves it (PVE 9).
fn set_up() -> Observed {
    Observed {
        roles: vec![
            role("Administrator", &["Sys.Modify"]),
            role("BosunAgent", BOSUN_AGENT_PRIVILEGES),
            role("BosunGuest", BOSUN_GUEST_PRIVILEGES),
        ],
        users: vec![UserInfo {
            userid: "bosun@pve".into(),
            tokens: vec![UserToken {
                tokenid: "agent".into(),
                privsep: true,
            }],
        }],
        pools: vec![PoolInfo {
            poolid: "bosun".into(),
        }],
        acl: wanted_acl(TOKEN)
            .into_iter()
            .map(|(p, s, r)| entry(&p, &s, r, true))
            .collect(),
    }
}

#[test]
fn a_bare_node_gets_everything_in_order() {
    let p = plan(&Observed::default(), "9.1", TOKEN, false).expect("plan");
    assert!(p.wider.is_empty());
    let kinds: Vec<String> = p
        .steps
        .iter()
        .map(|s| match s {
            Step::CreateRole { role, .. } => format!("role {role}"),
            Step::CreateUser => "user".into(),
            Step::CreateToken => "token".into(),
            Step::CreatePool => "pool".into(),
            Step::Acl(c) => format!("acl {} {} {} {}", c.path, c.subject, c.role, c.delete),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "role BosunAgent",
            "role BosunGuest",
            "user",
            "token",
            "pool",
            "acl / bosun@pve BosunAgent false",
            "acl /pool/bosun bosun@pve BosunGuest false",
            "acl / bosun@pve!agent BosunAgent false",
            "acl /pool/bosun bosun@pve!agent BosunGuest false",
        ]
    );
    assert!(p.steps.iter().all(|s| match s {
        Step::Acl(c) => c.propagate,
        _ => true,
    }));
}

#[test]
fn the_guest_role_takes_the_releases_names() {
    for (release, wanted) in [
        ("9.1", BOSUN_GUEST_PRIVILEGES),
        ("8.4", BOSUN_GUEST_PRIVILEGES_PVE8),
    ] {
        let p = plan(&Observed::default(), release, TOKEN, false).expect("plan");
        let guest = p.steps.iter().find_map(|s| match s {
            Step::CreateRole {
                role: "BosunGuest",
                privs,
            } => Some(privs.clone()),
            _ => None,
        });
        assert_eq!(guest.as_deref(), Some(wanted), "{release}");
    }
    assert!(plan(&Observed::default(), "unknown", TOKEN, false).is_err());
}

#[test]
fn a_node_set_up_already_needs_nothing() {
    let p = plan(&set_up(), "9.1", TOKEN, false).expect("plan");
    assert!(p.steps.is_empty(), "{p:?}");
    assert!(p.wider.is_empty(), "{p:?}");
}

#[test]
fn a_missing_privilege_is_appended_and_an_unpropagated_entry_rewritten() {
    let mut node = set_up();
    node.roles[1] = role("BosunAgent", &BOSUN_AGENT_PRIVILEGES[1..]);
    node.acl[0].propagate = false;
    let p = plan(&node, "9.1", TOKEN, false).expect("plan");
    assert!(p.wider.is_empty(), "{p:?}");
    assert_eq!(p.steps.len(), 2, "{p:?}");
    assert_eq!(
        p.steps[0],
        Step::AppendRole {
            role: "BosunAgent",
            privs: vec![BOSUN_AGENT_PRIVILEGES[0]],
        }
    );
    assert!(
        matches!(&p.steps[1], Step::Acl(c) if c.propagate && !c.delete && c.path == node.acl[0].path)
    );
}

#[test]
fn wider_roles_and_entries_are_reported_and_removed_only_when_asked() {
    let mut node = set_up();
    let mut guest: Vec<&str> = BOSUN_GUEST_PRIVILEGES.to_vec();
    guest.push("VM.GuestAgent.FileRead");
    node.roles[2] = role("BosunGuest", &guest);
    node.acl
        .push(entry("/vms", "bosun@pve", "BosunGuest", true));
    node.acl.push(entry("/", TOKEN, "Administrator", false));
    // Another user's entries are not Bosun's to judge.
    node.acl.push(entry("/vms", "ops@pve", "BosunGuest", true));

    let p = plan(&node, "9.1", TOKEN, false).expect("plan");
    assert!(
        p.steps.is_empty(),
        "nothing removed without the flag: {p:?}"
    );
    assert_eq!(p.wider.len(), 3, "{p:?}");
    assert!(p.wider.contains(&Wider::Role {
        role: "BosunGuest",
        extra: vec!["VM.GuestAgent.FileRead".into()],
    }));

    let p = plan(&node, "9.1", TOKEN, true).expect("plan");
    assert_eq!(p.wider.len(), 3, "{p:?}");
    assert!(p.steps.contains(&Step::NarrowRole {
        role: "BosunGuest",
        privs: BOSUN_GUEST_PRIVILEGES.to_vec(),
        removed: vec!["VM.GuestAgent.FileRead".into()],
    }));
    let removed: BTreeSet<(String, String, String)> = p
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Acl(c) if c.delete => Some((c.path.clone(), c.subject.clone(), c.role.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        removed,
        BTreeSet::from([
            ("/vms".into(), "bosun@pve".into(), "BosunGuest".into()),
            ("/".into(), TOKEN.into(), "Administrator".into()),
        ])
    );
}

#[test]
fn a_token_without_privilege_separation_is_reported_never_changed() {
    let mut node = set_up();
    node.users[0].tokens[0].privsep = false;
    let p = plan(&node, "9.1", TOKEN, true).expect("plan");
    assert_eq!(p.wider, vec![Wider::TokenWithoutPrivsep]);
    assert!(!p.wider[0].removable());
    assert!(p.steps.is_empty(), "{p:?}");
}

#[test]
fn a_builtin_role_of_bosuns_name_is_refused() {
    let mut node = set_up();
    node.roles[1] = RoleInfo {
        special: true,
        ..role("BosunAgent", &["VM.Audit"])
    };
    assert!(plan(&node, "9.1", TOKEN, false).is_err());
}

#[test]
fn an_admin_token_is_read_from_its_file_and_bosuns_own_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let args = |path: std::path::PathBuf| super::PveSetupArgs {
        url: "https://pve:8006".into(),
        admin_token_file: Some(path),
        fingerprint: Some("00".repeat(32)),
        ca_file: None,
        secret_out: None,
        remove_wider: false,
    };
    let good = dir.path().join("good");
    std::fs::write(&good, "root@pam!setup=s3cr3t\n").expect("written");
    let (id, _) = super::admin_token(&args(good)).expect("read");
    assert_eq!(id, "root@pam!setup");
    for (name, text) in [
        ("bare", "s3cr3t\n"),
        ("own", "bosun@pve!agent=s3cr3t\n"),
        ("empty", "\n"),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("written");
        let err = super::admin_token(&args(path)).expect_err(name);
        assert_eq!(err.exit_code(), 4, "{name}: {err}");
        assert!(!err.to_string().contains("s3cr3t"), "{err}");
    }
}
