//! Fidelity of the access-control endpoints an administrator sets a node up with (what
//! `bosunctl pve setup` calls): pve-access-control's refusals and words, the token secret
//! shown once, the permission each call needs, and the ACL list filtered to what the caller
//! may modify.

use crate::common::{Resp, start};

use bosun_pvesim::TokenCredential;

fn ok(resp: &Resp, what: &str) {
    assert_eq!(resp.status, 200, "{what}: {resp:?}");
}

#[tokio::test]
async fn a_name_that_exists_is_refused_in_pves_words_never_overwritten() {
    let sim = start().await;
    let root = sim.root();
    for (method, path, params, words) in [
        (
            "POST",
            "/access/users",
            vec![("userid", "bosun@pve")],
            "create user failed: user 'bosun@pve' already exists",
        ),
        (
            "POST",
            "/access/users/bosun@pve/token/agent",
            vec![],
            "generating token failed: Token already exists.",
        ),
        (
            "POST",
            "/access/roles",
            vec![("roleid", "BosunAgent"), ("privs", "VM.Audit")],
            "create role failed: role 'BosunAgent' already exists",
        ),
        (
            "POST",
            "/pools",
            vec![("poolid", "bosun")],
            "create pool failed: pool 'bosun' already exists",
        ),
    ] {
        let resp = sim.call_as(&root, method, path, &params).await;
        assert_eq!(resp.status, 500, "{path}: {resp:?}");
        assert_eq!(resp.message(), format!("{words}\n"), "{path}");
    }
    // The agent's token still works: its secret was not replaced.
    ok(&sim.call("GET", "/version", &[]).await, "agent token");
    // The role was not overwritten.
    assert!(
        sim.handle
            .role_privileges("BosunAgent")
            .unwrap()
            .contains(&"VM.Allocate".to_owned())
    );
}

#[tokio::test]
async fn a_new_token_is_privilege_separated_by_default_and_its_secret_shown_once() {
    let sim = start().await;
    let root = sim.root();
    ok(
        &sim.call_as(&root, "POST", "/access/users", &[("userid", "ops@pve")])
            .await,
        "user",
    );
    let made = sim
        .call_as(&root, "POST", "/access/users/ops@pve/token/t1", &[])
        .await;
    ok(&made, "token");
    assert_eq!(made.data()["full-tokenid"], "ops@pve!t1");
    assert_eq!(made.data()["info"]["privsep"], 1);
    let secret = made.data()["value"].as_str().expect("secret").to_owned();
    let token = TokenCredential {
        id: "ops@pve!t1".into(),
        secret: secret.clone(),
    };
    // It authenticates, and holds nothing (no ACL yet, for it or its user).
    let perms = sim.call_as(&token, "GET", "/access/permissions", &[]).await;
    ok(&perms, "permissions");
    assert_eq!(perms.data(), &serde_json::json!({}));
    // The listing never shows the secret again.
    let users = sim
        .call_as(&root, "GET", "/access/users", &[("full", "1")])
        .await;
    ok(&users, "users");
    assert!(!users.body.to_string().contains(&secret));
    let ops = users
        .data()
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["userid"] == "ops@pve")
        .cloned();
    assert_eq!(ops.unwrap()["tokens"][0]["tokenid"], "t1");
    // A user in a realm that does not exist is refused.
    let resp = sim
        .call_as(&root, "POST", "/access/users", &[("userid", "x@nowhere")])
        .await;
    assert_eq!(
        resp.message(),
        "create user failed: domain 'nowhere' does not exist\n"
    );
}

#[tokio::test]
async fn each_change_needs_its_privilege_and_a_token_mints_no_token_for_its_user() {
    let sim = start().await;
    let agent = sim.agent();
    for (method, path, params, words) in [
        (
            "POST",
            "/access/roles",
            vec![("roleid", "Mine"), ("privs", "VM.Audit")],
            "Permission check failed (/access, Sys.Modify)\n",
        ),
        (
            "POST",
            "/access/users",
            vec![("userid", "mine@pve")],
            "Permission check failed (/access/realm/pve, Realm.AllocateUser)\n",
        ),
        (
            "POST",
            "/access/users/bosun@pve/token/second",
            vec![],
            "Permission check failed (/access/groups, User.Modify)\n",
        ),
        (
            "POST",
            "/pools",
            vec![("poolid", "mine")],
            "Permission check failed (/pool/mine, Pool.Allocate)\n",
        ),
        (
            "PUT",
            "/access/acl",
            vec![
                ("path", "/vms"),
                ("roles", "BosunGuest"),
                ("tokens", "bosun@pve!agent"),
            ],
            "Permission check failed (/vms, Permissions.Modify)\n",
        ),
    ] {
        let resp = sim.call_as(&agent, method, path, &params).await;
        assert_eq!(resp.status, 403, "{path}: {resp:?}");
        assert_eq!(resp.message(), words, "{path}");
    }
    // Anyone may list roles; a token without Sys.Audit or User.Modify on /access/groups sees
    // only its own user, and the ACL list is empty to a caller without Permissions.Modify.
    ok(&sim.call("GET", "/access/roles", &[]).await, "roles");
    let narrow = sim.narrow_token("Narrow", &["VM.Audit"], "narrow");
    let users = sim.call_as(&narrow, "GET", "/access/users", &[]).await;
    let ids: Vec<&str> = users
        .data()
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|u| u["userid"].as_str())
        .collect();
    assert_eq!(ids, ["bosun@pve"]);
    assert_eq!(
        sim.call("GET", "/access/acl", &[]).await.data(),
        &serde_json::json!([])
    );
}

#[tokio::test]
async fn roles_are_replaced_or_appended_and_builtin_ones_refused() {
    let sim = start().await;
    let root = sim.root();
    ok(
        &sim.call_as(
            &root,
            "POST",
            "/access/roles",
            &[("roleid", "R"), ("privs", "VM.Audit")],
        )
        .await,
        "create",
    );
    ok(
        &sim.call_as(
            &root,
            "PUT",
            "/access/roles/R",
            &[("privs", "VM.PowerMgmt"), ("append", "1")],
        )
        .await,
        "append",
    );
    assert_eq!(
        sim.handle.role_privileges("R").unwrap(),
        ["VM.Audit", "VM.PowerMgmt"]
    );
    ok(
        &sim.call_as(&root, "PUT", "/access/roles/R", &[("privs", "VM.Backup")])
            .await,
        "replace",
    );
    assert_eq!(sim.handle.role_privileges("R").unwrap(), ["VM.Backup"]);
    let resp = sim
        .call_as(
            &root,
            "PUT",
            "/access/roles/PVEVMUser",
            &[("privs", "VM.Audit")],
        )
        .await;
    assert_eq!(
        resp.message(),
        "update role failed: cannot modify built-in role 'PVEVMUser'\n"
    );
    let resp = sim
        .call_as(
            &root,
            "POST",
            "/access/roles",
            &[("roleid", "S"), ("privs", "VM.Nope")],
        )
        .await;
    assert_eq!(resp.status, 500, "{resp:?}");
    // PVE 9 has no VM.Monitor.
    let resp = sim
        .call_as(
            &root,
            "POST",
            "/access/roles",
            &[("roleid", "M"), ("privs", "VM.Monitor")],
        )
        .await;
    assert_eq!(resp.status, 500, "{resp:?}");
    let listed = sim.call("GET", "/access/roles", &[]).await;
    let admin = listed
        .data()
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["roleid"] == "Administrator")
        .cloned()
        .unwrap();
    assert_eq!(admin["special"], 1);
}

#[tokio::test]
async fn acl_entries_name_what_exists_and_are_removed_with_delete() {
    let sim = start().await;
    let root = sim.root();
    for (params, words) in [
        (
            vec![("path", "/vms"), ("roles", "Nope"), ("users", "bosun@pve")],
            "ACL update failed: role 'Nope' does not exist\n",
        ),
        (
            vec![
                ("path", "/vms"),
                ("roles", "BosunGuest"),
                ("tokens", "bosun@pve!ghost"),
            ],
            "ACL update failed: no such token 'ghost' for user 'bosun@pve'\n",
        ),
        (
            vec![
                ("path", "/vms"),
                ("roles", "BosunGuest"),
                ("users", "ghost@pve"),
            ],
            "ACL update failed: user 'ghost@pve' does not exist\n",
        ),
    ] {
        let resp = sim.call_as(&root, "PUT", "/access/acl", &params).await;
        assert_eq!(resp.message(), words);
    }
    assert!(
        !sim.handle
            .acl_entries()
            .iter()
            .any(|(p, _, _, _)| p == "/vms")
    );

    let grant = [
        ("path", "/vms/100"),
        ("roles", "PVEVMUser"),
        ("tokens", "bosun@pve!agent"),
        ("propagate", "0"),
    ];
    ok(
        &sim.call_as(&root, "PUT", "/access/acl", &grant).await,
        "grant",
    );
    let listed = sim.call_as(&root, "GET", "/access/acl", &[]).await;
    let entry = listed
        .data()
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == "/vms/100")
        .cloned()
        .expect("listed");
    assert_eq!(entry["type"], "token");
    assert_eq!(entry["ugid"], "bosun@pve!agent");
    assert_eq!(entry["propagate"], 0);
    let delete = [
        ("path", "/vms/100"),
        ("roles", "PVEVMUser"),
        ("tokens", "bosun@pve!agent"),
        ("delete", "1"),
    ];
    ok(
        &sim.call_as(&root, "PUT", "/access/acl", &delete).await,
        "delete",
    );
    assert!(
        !sim.handle
            .acl_entries()
            .iter()
            .any(|(p, _, _, _)| p == "/vms/100")
    );

    // Removing a user takes its tokens and its entries with it.
    sim.handle.remove_bosun_access();
    assert!(
        sim.handle
            .acl_entries()
            .iter()
            .all(|(_, s, _, _)| !s.starts_with("bosun@pve"))
    );
    assert_eq!(sim.call("GET", "/version", &[]).await.status, 401);
}
