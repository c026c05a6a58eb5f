//! The two-tier policy the backup-tier tests and the tier benchmark share: the first tier
//! daily at 02:00 on the configured storage, a PBS offsite tier daily at 03:00, a signed
//! floor for both, and the PBS storage registered as the agent would register it.

#![allow(clippy::unwrap_used, reason = "test fixture: a panic is a failed test")]

use bosun_agentd::data::storage::naming::storage_id_of;
use bosun_proto::desired::{
    BackupPolicy, DesiredState, RestoreTestPolicy, Retention, StorageClass, StorageRole,
    StorageTarget, StorageType, TargetPolicy, TargetState,
};
use bosun_proto::retention::{FLOOR_SCHEMA, FloorTier, RetentionFloor};
use bosun_pve::{Pve, StorageCreate, StorageId, StorageKind};

/// The PBS target's `durable_id`.
pub const PBS: &str = "backup@pbs!host1@pbs.example:store1";
/// The simulated PBS server's certificate fingerprint.
pub const PBS_FP: &str = "AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89";

/// A manifest target of `kind` and `role` with `policy`, attached.
pub fn target(
    kind: StorageType,
    durable_id: &str,
    role: StorageRole,
    policy: TargetPolicy,
) -> StorageTarget {
    StorageTarget {
        kind,
        durable_id: durable_id.into(),
        class: StorageClass::Slow,
        role,
        policy,
        state: TargetState::Attached,
        label: None,
        credentials: None,
        username: None,
        namespace: None,
        fstype: None,
        serial: None,
    }
}

/// Daily at 02:00 on the configured storage keeping `first`; daily at 03:00 on PBS keeping
/// `pbs`.
pub fn desired(first: Retention, pbs: Retention) -> DesiredState {
    let policy = TargetPolicy {
        schedule: Some("03:00".into()),
        retention: pbs,
        default: false,
        schedulable: true,
    };
    DesiredState {
        schema: "bosun.desired/v1".into(),
        guests: Vec::new(),
        storage: vec![target(
            StorageType::Pbs,
            PBS,
            StorageRole::PbsOffsite,
            policy,
        )],
        backup_policy: BackupPolicy {
            schedule: "02:00".into(),
            retention: first,
            quiesce_grace_minutes: 0,
            target: None,
            further_tiers: vec![PBS.into()],
            floor: None,
        },
        verify_policy: Default::default(),
        restore_test_policy: RestoreTestPolicy {
            enabled: false,
            interval_days: 7,
            timeout_minutes: 30,
            window: None,
        },
        dr_policy: Default::default(),
        golden_recipe: None,
        data_plan: None,
        tunnel_credentials: None,
        share_classes: Vec::new(),
    }
}

/// A floor of `first` on the first tier and `pbs` on the PBS tier.
pub fn floor(first: Retention, pbs: Retention) -> RetentionFloor {
    RetentionFloor {
        schema: FLOOR_SCHEMA.into(),
        host_id: uuid::Uuid::from_u128(1),
        issued_at: "2026-03-01T00:00:00Z".parse().unwrap(),
        tiers: vec![
            FloorTier {
                target: None,
                retention: first,
            },
            FloorTier {
                target: Some(PBS.into()),
                retention: pbs,
            },
        ],
    }
}

/// Declares the PBS server in the simulator and registers the PBS target's storage through
/// `pve`; gives the storage.
pub async fn register_pbs(sim: &bosun_pvesim::SimHandle, pve: &impl Pve) -> StorageId {
    register_pbs_with(sim, pve, None).await
}

/// [`register_pbs`] with backups encrypted with `key` (K), as the agent registers PBS.
pub async fn register_pbs_with(
    sim: &bosun_pvesim::SimHandle,
    pve: &impl Pve,
    key: Option<&bosun_agentd::trust::keys::pbs_key::PbsKeySource>,
) -> StorageId {
    let encryption_key = key.map(|k| {
        let key = k.load().unwrap().expect("K exists");
        secrecy::SecretString::from(key.key_file_json().to_string())
    });
    sim.add_pbs_remote("pbs.example", PBS_FP, "store1", "secret");
    let storage = storage_id_of(StorageType::Pbs, PBS);
    pve.create_storage(&StorageCreate {
        storage: storage.clone(),
        kind: StorageKind::Pbs {
            server: "pbs.example".into(),
            datastore: "store1".into(),
            username: "backup@pbs!host1".into(),
            password: secrecy::SecretString::from("secret".to_owned()),
            fingerprint: Some(PBS_FP.into()),
            namespace: None,
            port: None,
            encryption_key,
        },
    })
    .await
    .unwrap();
    storage
}
