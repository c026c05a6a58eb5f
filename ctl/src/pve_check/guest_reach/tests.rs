//! The `guest-reach` judgement.

use super::*;

fn held(entries: &[(&str, &[&str])]) -> Held {
    entries
        .iter()
        .map(|(path, privs)| {
            (
                (*path).to_owned(),
                privs.iter().map(|p| ((*p).to_owned(), true)).collect(),
            )
        })
        .collect()
}

const PVE9: &[&str] = bosun_pve::BOSUN_GUEST_PRIVILEGES;
const TOKEN: &str = "bosun@pve!agent";

#[test]
fn the_pool_alone_passes() {
    let h = held(&[
        ("/", &["VM.Audit"]),
        ("/pool/bosun", PVE9),
        ("/vms/101", PVE9),
    ]);
    let c = judge(&h, &BTreeSet::from([101]), "9.1", TOKEN);
    assert_eq!(c.status, super::super::report::Status::Ok, "{c:?}");
}

#[test]
fn reach_on_vms_or_root_or_a_foreign_vm_fails() {
    for path in ["/", "/vms", "/vms/555"] {
        let h = held(&[
            ("/pool/bosun", PVE9),
            (path, &["VM.GuestAgent.Unrestricted"]),
        ]);
        let c = judge(&h, &BTreeSet::from([101]), "9.1", TOKEN);
        assert_eq!(
            c.status,
            super::super::report::Status::Fail,
            "{path}: {c:?}"
        );
        assert!(c.detail.contains(path), "{c:?}");
    }
    for identity in ["VM.Config.Cloudinit", "VM.Config.HWType"] {
        let wide = held(&[("/pool/bosun", PVE9), ("/vms", &[identity])]);
        let c = judge(&wide, &BTreeSet::new(), "9.1", TOKEN);
        assert_eq!(
            c.status,
            super::super::report::Status::Fail,
            "{identity}: {c:?}"
        );
    }
}

#[test]
fn a_token_that_can_change_the_pools_members_fails() {
    for privilege in bosun_pve::POOL_MEMBERSHIP_PRIVILEGES {
        let mut on_pool = PVE9.to_vec();
        on_pool.push(privilege);
        let h = held(&[("/", &["VM.Allocate"]), ("/pool/bosun", &on_pool)]);
        let c = judge(&h, &BTreeSet::new(), "9.1", TOKEN);
        assert_eq!(
            c.status,
            super::super::report::Status::Fail,
            "{privilege}: {c:?}"
        );
        assert!(c.detail.contains(privilege), "{c:?}");
        assert!(
            c.fix.iter().any(|f| f.contains("pveum pool modify")),
            "{c:?}"
        );
    }
}

#[test]
fn pve8_wants_vm_monitor_on_the_pool_and_nowhere_else() {
    let ok = held(&[("/pool/bosun", bosun_pve::BOSUN_GUEST_PRIVILEGES_PVE8)]);
    let c = judge(&ok, &BTreeSet::new(), "8.4", TOKEN);
    assert_eq!(c.status, super::super::report::Status::Ok, "{c:?}");
    let wide = held(&[
        ("/pool/bosun", bosun_pve::BOSUN_GUEST_PRIVILEGES_PVE8),
        ("/vms", &["VM.Monitor"]),
    ]);
    let c = judge(&wide, &BTreeSet::new(), "8.4", TOKEN);
    assert_eq!(c.status, super::super::report::Status::Fail, "{c:?}");
    let missing = held(&[("/pool/bosun", PVE9)]);
    let c = judge(&missing, &BTreeSet::new(), "8.4", TOKEN);
    assert_eq!(c.status, super::super::report::Status::Fail, "{c:?}");
    assert!(c.detail.contains("VM.Monitor"), "{c:?}");
}

#[test]
fn a_missing_pool_grant_fails_and_says_how_to_write_it() {
    let c = judge(
        &held(&[("/", &["VM.Audit"])]),
        &BTreeSet::new(),
        "9.1",
        TOKEN,
    );
    assert_eq!(c.status, super::super::report::Status::Fail, "{c:?}");
    assert!(
        c.fix
            .iter()
            .any(|f| f.contains("pveum acl modify /pool/bosun --tokens")),
        "{c:?}"
    );
}

#[test]
fn more_than_the_role_on_the_pool_warns() {
    let mut privs: Vec<&str> = PVE9.to_vec();
    privs.push("VM.GuestAgent.FileRead");
    let c = judge(
        &held(&[("/pool/bosun", &privs)]),
        &BTreeSet::new(),
        "9.1",
        TOKEN,
    );
    assert_eq!(c.status, super::super::report::Status::Warn, "{c:?}");
}
