//! Fidelity of `PUT /pools` (and the deprecated `PUT /pools/{poolid}`), as pve-manager's
//! `update_pool` changes a pool's members: `Pool.Allocate` on the pool before anything, then
//! for each vmid the right to modify its permissions (`Permissions.Modify` or `VM.Allocate` on
//! `/vms/<vmid>`), a guest in another pool moved only with `allow-move`, and every refusal
//! inside the lock answered 500 in the lock wrapper's words, nothing changed (decision 0122).

use crate::common::{Sim, start};
use crate::qemu::restore_vm;

/// A token of `bosun@pve` holding only `privs`, on `/`; its user is granted them on
/// `/pool/bosun` beside `BosunGuest` (a token holds what both hold, and the user's entry on the
/// pool replaces what it inherits from `/` there).
fn token_with(sim: &Sim, role: &str, privs: &[&str], name: &str) -> bosun_pvesim::TokenCredential {
    let token = sim.narrow_token(role, privs, name);
    sim.handle
        .grant("/pool/bosun", "bosun@pve", role, true)
        .expect("grant to the user");
    token
}

/// `PUT /pools` naming `vms` of pool `pool` as `token`, with `extra` parameters.
async fn modify(
    sim: &Sim,
    token: &bosun_pvesim::TokenCredential,
    pool: &str,
    vms: &str,
    extra: &[(&str, &str)],
) -> crate::common::Resp {
    let mut params = vec![("poolid", pool), ("vms", vms)];
    params.extend_from_slice(extra);
    sim.call_as(token, "PUT", "/pools", &params).await
}

#[tokio::test]
async fn the_agents_token_cannot_put_a_vm_in_bosuns_pool() {
    let sim = start().await;
    restore_vm(&sim, &sim.root(), 370, "").await;
    // BosunAgent holds VM.Allocate on `/`, so the VM passes `check_perm_modify`; the pool's
    // own `Pool.Allocate` is what it lacks, checked before anything else, on both paths.
    for path in ["/pools", "/pools/bosun"] {
        let r = sim
            .call("PUT", path, &[("poolid", "bosun"), ("vms", "370")])
            .await;
        assert_eq!(r.status, 403, "{path}: {r:?}");
        assert_eq!(
            r.message(),
            "Permission check failed (/pool/bosun, Pool.Allocate)\n",
            "{path}"
        );
    }
    assert!(sim.handle.pool_members("bosun").is_empty());
    // Were the token given Pool.Allocate, VM.Allocate on `/` would let it add any VM: which is
    // why it never is (decision 0122).
    let wider = token_with(&sim, "Wider", &["Pool.Allocate", "VM.Allocate"], "wider");
    let r = modify(&sim, &wider, "bosun", "370", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        sim.handle
            .pool_members("bosun")
            .into_iter()
            .collect::<Vec<_>>(),
        [370]
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn each_vm_needs_the_right_to_modify_it_and_a_refusal_changes_nothing() {
    let sim = start().await;
    restore_vm(&sim, &sim.root(), 371, "").await;
    restore_vm(&sim, &sim.root(), 372, "").await;
    let pool_only = token_with(&sim, "PoolOnly", &["Pool.Allocate"], "pool-only");
    let r = modify(&sim, &pool_only, "bosun", "371", &[]).await;
    assert_eq!(r.status, 500, "{r:?}");
    assert_eq!(
        r.message(),
        "update pools failed: Permission check failed (/vms/371, Permissions.Modify|VM.Allocate)\n"
    );
    assert!(sim.handle.pool_members("bosun").is_empty());

    let root = sim.root();
    let r = modify(&sim, &root, "bosun", "371", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    for (vms, extra, words) in [
        ("371", vec![], "VM 371 is already a pool member"),
        ("372", vec![("delete", "1")], "VM 372 is not a pool member"),
    ] {
        let r = modify(&sim, &root, "bosun", vms, &extra).await;
        assert_eq!(r.status, 500, "{vms}: {r:?}");
        assert_eq!(r.message(), format!("update pools failed: {words}\n"));
    }
    let r = modify(&sim, &root, "nope", "372", &[]).await;
    assert_eq!(r.status, 500, "{r:?}");
    assert_eq!(
        r.message(),
        "update pools failed: pool 'nope' does not exist\n"
    );

    // Another pool's member moves only with allow-move.
    let r = sim
        .call_as(&root, "POST", "/pools", &[("poolid", "ops")])
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = modify(&sim, &root, "ops", "372", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = modify(&sim, &root, "bosun", "372", &[]).await;
    assert_eq!(r.status, 500, "{r:?}");
    assert_eq!(
        r.message(),
        "update pools failed: VM 372 belongs already to pool 'ops' and 'allow-move' is not set\n"
    );
    assert!(sim.handle.pool_members("ops").contains(&372));
    let r = modify(&sim, &root, "bosun", "372", &[("allow-move", "1")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(sim.handle.pool_members("ops").is_empty());

    // delete removes a member.
    let r = modify(&sim, &root, "bosun", "371", &[("delete", "1")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        sim.handle
            .pool_members("bosun")
            .into_iter()
            .collect::<Vec<_>>(),
        [372]
    );
    sim.handle.shutdown().await;
}
