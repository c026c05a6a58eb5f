//! Drives every access-control call of the client once against the simulator, with the root
//! token as `bosunctl pve setup` uses an administrator's (the conformance test holds the
//! requests to both schemas): roles, users and a token, a pool, ACL entries written and removed.

use bosun_pve::{AclChange, AclKind, PoolId};
use secrecy::ExposeSecret as _;

use super::{Rig, client_for};

pub async fn exercise_access(rig: &Rig) {
    let c = client_for(
        &rig.sim,
        &rig.sim.endpoint().tokens.root,
        bosun_pve::RetryPolicy::fast(),
    );
    let roles = c.roles().await.expect("roles");
    assert!(
        roles
            .iter()
            .any(|r| r.roleid == "Administrator" && r.special && r.privs.contains("Sys.Modify")),
        "{roles:?}"
    );
    c.create_role("ConformanceRole", &["VM.Audit"])
        .await
        .expect("role create");
    c.update_role("ConformanceRole", &["VM.PowerMgmt"], true)
        .await
        .expect("role append");
    let again = c
        .create_role("ConformanceRole", &["VM.Audit"])
        .await
        .expect_err("a role that exists");
    assert!(
        again.to_string().contains("already exists"),
        "PVE's words: {again}"
    );
    let roles = c.roles().await.expect("roles");
    let role = roles
        .iter()
        .find(|r| r.roleid == "ConformanceRole")
        .expect("the new role");
    assert_eq!(
        role.privs.iter().map(String::as_str).collect::<Vec<_>>(),
        ["VM.Audit", "VM.PowerMgmt"]
    );

    c.create_user("conformance@pve", "conformance")
        .await
        .expect("user create");
    let token = c
        .create_token("conformance@pve", "t1", "conformance")
        .await
        .expect("token create");
    assert_eq!(token.full_tokenid, "conformance@pve!t1");
    assert!(!token.secret.expose_secret().is_empty());
    let users = c.users().await.expect("users");
    let user = users
        .iter()
        .find(|u| u.userid == "conformance@pve")
        .expect("the new user");
    assert!(
        user.tokens.iter().any(|t| t.tokenid == "t1" && t.privsep),
        "{user:?}"
    );

    let pool = PoolId::new("conformance").expect("pool id");
    c.create_pool(&pool, "conformance")
        .await
        .expect("pool create");
    assert!(
        c.pools()
            .await
            .expect("pools")
            .iter()
            .any(|p| p.poolid == "conformance")
    );
    let mut change = AclChange {
        path: "/pool/conformance".into(),
        role: "ConformanceRole".into(),
        subject: "conformance@pve!t1".into(),
        propagate: true,
        delete: false,
    };
    c.update_acl(&change).await.expect("acl write");
    let acl = c.acl().await.expect("acl");
    assert!(
        acl.iter().any(|e| e.path == "/pool/conformance"
            && e.kind == AclKind::Token
            && e.ugid == "conformance@pve!t1"
            && e.propagate),
        "{acl:?}"
    );
    change.delete = true;
    c.update_acl(&change).await.expect("acl delete");
    assert!(
        !c.acl()
            .await
            .expect("acl")
            .iter()
            .any(|e| e.path == "/pool/conformance")
    );
}
