use super::*;
use crate::desired::{StorageClass, StorageRole, TargetPolicy, TargetState};

fn target(kind: StorageType, durable_id: &str, role: StorageRole) -> StorageTarget {
    StorageTarget {
        kind,
        durable_id: durable_id.into(),
        class: StorageClass::Slow,
        role,
        policy: TargetPolicy {
            schedule: Some("daily".into()),
            retention: Retention::default(),
            default: false,
            schedulable: true,
        },
        state: TargetState::Attached,
        label: None,
        credentials: None,
        username: None,
        namespace: None,
        fstype: None,
        serial: None,
    }
}

fn plan() -> DataPlan {
    let mut pbs = target(
        StorageType::Pbs,
        "bosun@pbs@pbs.example:store",
        StorageRole::PbsOffsite,
    );
    pbs.namespace = Some("hosts/a".into());
    DataPlan {
        schema: PLAN_SCHEMA.into(),
        host_id: Uuid::from_u128(7),
        serial: 1,
        issued_at: Timestamp::UNIX_EPOCH,
        targets: vec![
            target(
                StorageType::LocalDir,
                "/srv/backup",
                StorageRole::VzdumpTarget,
            ),
            pbs,
        ],
        backup: PlanBackup {
            schedule: "daily".into(),
            retention: Retention {
                keep_last: 3,
                ..Retention::default()
            },
            target: Some("/srv/backup".into()),
            further_tiers: vec!["bosun@pbs@pbs.example:store".into()],
            min_interval_seconds: 60,
            restore_test_days: None,
            verify_hours: None,
        },
        node_storages: Vec::new(),
        tunnel: None,
        bulk_backups: Vec::new(),
        guest_share: None,
        guest_access: Vec::new(),
    }
}

#[test]
fn a_plan_validates_its_targets_and_tiers() {
    plan().validate().unwrap();
    let field = |p: DataPlan| p.validate().unwrap_err().field().to_owned();

    let mut p = plan();
    p.serial = 0;
    assert_eq!(field(p), "serial");
    let mut p = plan();
    p.backup.further_tiers.push("nfs.example:/x".into());
    assert_eq!(field(p), "backup.further_tiers[1]");
    let mut p = plan();
    p.backup.min_interval_seconds = 0;
    assert_eq!(field(p), "backup.min_interval_seconds");
    let mut p = plan();
    p.targets.push(target(
        StorageType::Usb,
        "2f1c-aa",
        StorageRole::VzdumpTarget,
    ));
    assert_eq!(field(p), "targets[2].serial");
    let mut p = plan();
    p.targets[0].durable_id = "/srv/../etc".into();
    p.backup.target = None;
    assert_eq!(field(p), "targets[0].durable_id");
    // The same durable_id twice would let desired state choose between two identities.
    let mut p = plan();
    let mut again = p.targets[1].clone();
    again.namespace = Some("hosts/b".into());
    p.targets.push(again);
    assert_eq!(field(p), "targets[2].durable_id");
}

#[test]
fn identities_differ_in_every_field_that_moves_data() {
    let base = plan().targets[1].identity();
    let mut other = base.clone();
    other.namespace = Some("hosts/b".into());
    assert_ne!(base.canonical_bytes(), other.canonical_bytes());
    assert_eq!(base.differences(&other), vec!["namespace"]);
    // Length prefixes: moving a character between fields never gives the same bytes.
    let a = TargetIdentity {
        namespace: Some("ab".into()),
        username: Some("c".into()),
        ..base.clone()
    };
    let b = TargetIdentity {
        namespace: Some("a".into()),
        username: Some("bc".into()),
        ..base.clone()
    };
    assert_ne!(a.canonical_bytes(), b.canonical_bytes());
    let none = TargetIdentity {
        namespace: None,
        ..base.clone()
    };
    let empty = TargetIdentity {
        namespace: Some(String::new()),
        ..base
    };
    assert_ne!(none.canonical_bytes(), empty.canonical_bytes());
}

#[test]
fn a_signed_plan_decodes_within_its_bound() {
    let bytes = serde_json::to_vec(&plan()).unwrap();
    let signed = crate::signed::SignedDocument::new(&bytes, "sig");
    assert_eq!(signed.data_plan().unwrap(), plan());
    let mut unknown = serde_json::to_value(plan()).unwrap();
    unknown["extra"] = serde_json::json!(1);
    let signed = crate::signed::SignedDocument::new(&serde_json::to_vec(&unknown).unwrap(), "sig");
    assert!(signed.data_plan().is_err());
}

#[test]
fn a_plans_restore_test_cadence_holds_whatever_desired_state_says() {
    use crate::desired::RestoreTestPolicy;
    let off = RestoreTestPolicy {
        enabled: false,
        interval_days: 365,
        timeout_minutes: 30,
        window: None,
    };
    let mut p = plan();
    // Without the field, desired state decides.
    assert_eq!(p.backup.restore_test_policy(off), off);
    p.backup.restore_test_days = Some(7);
    p.validate().unwrap();
    let held = p.backup.restore_test_policy(off);
    assert!(held.enabled);
    assert_eq!(held.interval_days, 7);
    // More often than the plan stays.
    let daily = RestoreTestPolicy {
        enabled: true,
        interval_days: 1,
        ..off
    };
    assert_eq!(p.backup.restore_test_policy(daily), daily);
    let yearly = RestoreTestPolicy {
        enabled: true,
        ..off
    };
    assert_eq!(p.backup.restore_test_policy(yearly).interval_days, 7);
    for days in [0, 366] {
        p.backup.restore_test_days = Some(days);
        assert!(p.validate().is_err(), "{days}");
    }
}

#[test]
fn a_plan_classes_only_the_nodes_own_storages_each_once() {
    let node = |storage: &str| NodeStorage {
        storage: storage.into(),
        class: StorageClass::Fast,
    };
    let mut ok = plan();
    ok.node_storages = vec![node("local-lvm"), node("zfs_fast.1")];
    ok.validate().unwrap();
    assert_eq!(ok.node_class("local-lvm"), Some(StorageClass::Fast));
    assert_eq!(ok.node_class("local"), None);
    for bad in [
        vec![node("bosun-dir-0123")],
        vec![node("")],
        vec![node("1local")],
        vec![node("local lvm")],
        vec![node(&"a".repeat(65))],
        vec![node("local-lvm"), node("local-lvm")],
    ] {
        let mut plan = plan();
        plan.node_storages = bad.clone();
        assert!(plan.validate().is_err(), "{bad:?}");
    }
    // An older plan without the field reads as one that classes none.
    let mut text = serde_json::to_value(plan()).unwrap();
    text.as_object_mut().unwrap().remove("node_storages");
    let read: DataPlan = serde_json::from_value(text).unwrap();
    assert!(read.node_storages.is_empty());
}

fn bulk(target: &str) -> PlanBulkBackup {
    PlanBulkBackup {
        guest_id: Uuid::from_u128(9),
        volume: "media".into(),
        path: "/srv/media".into(),
        target: target.into(),
        schedule: "daily".into(),
        keep_last: 3,
    }
}

#[test]
fn a_bulk_backup_goes_only_to_a_directory_vzdump_target_of_the_plan() {
    let field = |b: Vec<PlanBulkBackup>| {
        let mut p = plan();
        p.bulk_backups = b;
        p.validate().err().map(|e| e.field().to_owned())
    };
    assert_eq!(field(vec![bulk("/srv/backup")]), None);
    let mut p = plan();
    p.bulk_backups = vec![bulk("/srv/backup")];
    assert_eq!(
        p.bulk_backup(Uuid::from_u128(9), "media")
            .map(|b| b.keep_last),
        Some(3)
    );
    assert!(p.bulk_backup(Uuid::from_u128(9), "other").is_none());

    // A PBS datastore is no directory; a target the plan lacks is no target.
    assert_eq!(
        field(vec![bulk("bosun@pbs@pbs.example:store")]).as_deref(),
        Some("bulk_backups[0].target")
    );
    assert_eq!(
        field(vec![bulk("/srv/elsewhere")]).as_deref(),
        Some("bulk_backups[0].target")
    );
    // One entry per volume.
    assert_eq!(
        field(vec![bulk("/srv/backup"), bulk("/srv/backup")]).as_deref(),
        Some("bulk_backups[1].volume")
    );
    let mut b = bulk("/srv/backup");
    b.keep_last = 0;
    assert_eq!(field(vec![b]).as_deref(), Some("bulk_backups[0].keep_last"));
    let mut b = bulk("/srv/backup");
    b.keep_last = MAX_BULK_KEEP + 1;
    assert_eq!(field(vec![b]).as_deref(), Some("bulk_backups[0].keep_last"));
    let mut b = bulk("/srv/backup");
    b.schedule = "every now and then".into();
    assert_eq!(field(vec![b]).as_deref(), Some("bulk_backups[0].schedule"));
    let mut b = bulk("/srv/backup");
    b.volume = "Media!".into();
    assert_eq!(field(vec![b]).as_deref(), Some("bulk_backups[0].volume"));
    let mut b = bulk("/srv/backup");
    b.path = "/srv/../etc".into();
    assert_eq!(field(vec![b]).as_deref(), Some("bulk_backups[0].path"));
    let mut b = bulk("/srv/backup");
    b.guest_id = Uuid::nil();
    assert_eq!(field(vec![b]).as_deref(), Some("bulk_backups[0].guest_id"));
    let many = (0..=MAX_BULK_BACKUPS)
        .map(|i| PlanBulkBackup {
            guest_id: Uuid::from_u128(i as u128 + 1),
            ..bulk("/srv/backup")
        })
        .collect();
    assert_eq!(field(many).as_deref(), Some("bulk_backups"));
}

const KEY_A: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMJ9ICvzuRFQSTsuN1n1uZmou1NEzhm7SDmBZQBvv5uX shop-owner@laptop";
const KEY_B: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPPyqA64EZx2WDADL9rLZIRJm7ZDsG/SLszl6swG3/y4";

fn access(guest: u128, customer: &str, keys: &[&str]) -> crate::guest_access::GuestAccess {
    crate::guest_access::GuestAccess {
        guest_id: Uuid::from_u128(guest),
        customer_id: customer.into(),
        ssh_keys: keys
            .iter()
            .map(|k| crate::ssh_public_key::SshPublicKey::new(k).unwrap())
            .collect(),
    }
}

#[test]
fn a_plan_gives_a_guest_its_keys_only_for_the_customer_it_names() {
    let mut p = plan();
    p.guest_access = vec![access(1, "acme", &[KEY_A, KEY_B]), access(2, "zeta", &[])];
    p.validate().unwrap();
    let keys: Vec<&str> = p
        .guest_keys(Uuid::from_u128(1), "acme")
        .iter()
        .map(|k| k.as_str())
        .collect();
    // The comment is dropped: the file says exactly the key.
    assert_eq!(keys, [KEY_A.rsplit_once(' ').unwrap().0, KEY_B]);
    assert!(
        p.guest_keys(Uuid::from_u128(1), "zeta").is_empty(),
        "another customer: no key"
    );
    assert!(
        p.guest_keys(Uuid::from_u128(3), "acme").is_empty(),
        "another guest: no key"
    );
    assert!(p.guest_keys(Uuid::from_u128(2), "zeta").is_empty());
    // Round trip through the signed bytes.
    let text = serde_json::to_string(&p).unwrap();
    assert_eq!(serde_json::from_str::<DataPlan>(&text).unwrap(), p);
}

#[test]
fn a_plan_s_guest_access_is_bounded_and_unique() {
    let field = |p: DataPlan| p.validate().unwrap_err().field().to_owned();
    let mut p = plan();
    p.guest_access = vec![access(1, "acme", &[KEY_A]), access(1, "acme", &[KEY_B])];
    assert_eq!(field(p), "guest_access[1].guest_id");
    let mut p = plan();
    p.guest_access = vec![access(1, "acme", &[KEY_A, KEY_A])];
    assert_eq!(field(p), "guest_access[0].ssh_keys[1]");
    let mut p = plan();
    p.guest_access = vec![access(0, "acme", &[KEY_A])];
    assert_eq!(field(p), "guest_access[0].guest_id");
    let mut p = plan();
    p.guest_access = vec![access(1, "ac me", &[KEY_A])];
    assert_eq!(field(p), "guest_access[0].customer_id");
    // More keys than a guest may trust (distinct keys, so only the count is wrong).
    let many: Vec<String> = (0..=crate::guest_access::MAX_GUEST_KEYS)
        .map(|i| {
            let mut blob = vec![0, 0, 0, 11];
            blob.extend_from_slice(b"ssh-ed25519");
            blob.extend_from_slice(&[0, 0, 0, 32]);
            blob.extend_from_slice(&[u8::try_from(i).unwrap(); 32]);
            use base64::Engine as _;
            format!(
                "ssh-ed25519 {}",
                base64::engine::general_purpose::STANDARD.encode(blob)
            )
        })
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let mut p = plan();
    p.guest_access = vec![access(1, "acme", &many)];
    assert_eq!(field(p), "guest_access[0].ssh_keys");
    // Options before the key, a second line or a password are not keys.
    for bad in [
        format!("command=\"/bin/sh\" {KEY_B}"),
        format!("{KEY_B}\n{KEY_B}"),
        "hunter2".to_owned(),
    ] {
        let json = serde_json::json!({"guest_id": Uuid::from_u128(1), "customer_id": "acme", "ssh_keys": [bad]});
        assert!(
            serde_json::from_value::<crate::guest_access::GuestAccess>(json).is_err(),
            "{bad:?}"
        );
    }
    let unknown = serde_json::json!({"guest_id": Uuid::from_u128(1), "customer_id": "acme", "ssh_keys": [], "password": "x"});
    assert!(serde_json::from_value::<crate::guest_access::GuestAccess>(unknown).is_err());
}
