use bosun_proto::desired::{
    BackupPolicy, RestoreTestPolicy, Retention, StorageClass, StorageRole, StorageTarget,
    TargetPolicy,
};
use serde_json::json;

use super::*;
use crate::data::backup::tiers::plan;

const USB: &str = "2f1c-aa01";
const NAS: &str = "nas.example:/export/backups";

fn target(kind: StorageType, durable_id: &str, state: TargetState) -> StorageTarget {
    StorageTarget {
        kind,
        durable_id: durable_id.into(),
        class: StorageClass::Slow,
        role: StorageRole::VzdumpTarget,
        policy: TargetPolicy {
            schedule: Some("daily".into()),
            retention: Retention::default(),
            default: false,
            schedulable: true,
        },
        state,
        label: None,
        credentials: None,
        username: None,
        namespace: None,
        fstype: None,
        serial: None,
    }
}

/// A manifest of a USB disk and an NFS share; `first_tier` is the first tier's target.
fn desired(usb: TargetState, first_tier: Option<&str>) -> DesiredState {
    DesiredState {
        schema: "bosun.desired/v1".into(),
        guests: Vec::new(),
        storage: vec![
            target(StorageType::Usb, USB, usb),
            target(StorageType::Nfs, NAS, TargetState::Attached),
        ],
        backup_policy: BackupPolicy {
            schedule: "02:00".into(),
            retention: Retention::default(),
            quiesce_grace_minutes: 30,
            target: first_tier.map(str::to_owned),
            further_tiers: Vec::new(),
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

fn tiers(state: &DesiredState) -> TierPlan {
    plan(state, None, None, &StorageId::new("local").unwrap(), 0)
}

fn params(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap()
}

fn code(params_: Value, desired: Option<&DesiredState>) -> Result<DetachTarget, &'static str> {
    let plan = desired.map(tiers).unwrap_or_default();
    resolve(&params(params_), desired, &plan).map_err(|r| r.code())
}

#[test]
fn a_disconnected_target_no_tier_writes_to_resolves_to_the_storage_this_agent_named() {
    let state = desired(TargetState::Disconnected, None);
    let expected = storage_id_of(StorageType::Usb, USB);
    for p in [
        json!({ "durable_id": USB }),
        json!({ "durable_id": USB, "type": "usb" }),
        json!({ "durable_id": USB, "storage": expected.as_str() }),
    ] {
        let target = code(p.clone(), Some(&state)).unwrap_or_else(|c| panic!("{p}: {c}"));
        assert_eq!(target.storage, expected);
        assert_eq!(target.kind, StorageType::Usb);
        assert!(target.storage.as_str().starts_with("bosun-usb-"));
    }
    // Decommissioned in desired state, or gone from the manifest (named by type): the same.
    let state = desired(TargetState::Decommissioned, None);
    assert!(code(json!({ "durable_id": USB }), Some(&state)).is_ok());
    let mut gone = desired(TargetState::Attached, None);
    gone.storage.retain(|t| t.durable_id != USB);
    assert!(code(json!({ "durable_id": USB, "type": "usb" }), Some(&gone)).is_ok());
}

#[test]
fn every_refusal_rule_has_its_code() {
    let attached = desired(TargetState::Attached, None);
    let disconnected = desired(TargetState::Disconnected, None);
    let first_tier_on_usb = desired(TargetState::Disconnected, Some(USB));
    let mut gone = desired(TargetState::Attached, None);
    gone.storage.retain(|t| t.durable_id != USB);
    let cases: &[(Value, Option<&DesiredState>, &str)] = &[
        // Still attached: the watcher would register it again.
        (
            json!({ "durable_id": USB }),
            Some(&attached),
            "still_attached",
        ),
        (
            json!({ "durable_id": NAS }),
            Some(&attached),
            "still_attached",
        ),
        // A tier of the current plan writes to it.
        (
            json!({ "durable_id": USB }),
            Some(&first_tier_on_usb),
            "tier_writes",
        ),
        // Storages this agent did not name, whatever else the job says.
        (
            json!({ "durable_id": USB, "storage": "local" }),
            Some(&disconnected),
            "not_ours",
        ),
        (
            json!({ "durable_id": USB, "storage": storage_id_of(StorageType::Nfs, NAS).as_str() }),
            Some(&disconnected),
            "not_ours",
        ),
        (
            json!({ "durable_id": "local", "storage": "local" }),
            Some(&disconnected),
            "unknown_target",
        ),
        (
            json!({ "durable_id": "local", "type": "local-dir", "storage": "local" }),
            Some(&disconnected),
            "not_ours",
        ),
        // Not in the manifest and no type named.
        (json!({ "durable_id": USB }), Some(&gone), "unknown_target"),
        // Malformed.
        (
            json!({ "durable_id": USB, "type": "zfs" }),
            Some(&disconnected),
            "bad_params",
        ),
        (
            json!({ "durable_id": 7 }),
            Some(&disconnected),
            "bad_params",
        ),
        (json!({}), Some(&disconnected), "bad_params"),
        // No desired state yet: whether it is attached cannot be told.
        (
            json!({ "durable_id": USB, "type": "usb" }),
            None,
            "no_desired_state",
        ),
    ];
    for (p, state, want) in cases {
        assert_eq!(code(p.clone(), *state).err(), Some(*want), "{p}");
    }
}

#[test]
fn the_type_the_job_names_picks_the_manifest_entry() {
    // The same durable id as an attached NFS target and a disconnected USB disk: a job for
    // the USB disk is judged on the USB entry.
    let mut state = desired(TargetState::Disconnected, None);
    state.storage[1].durable_id = USB.into();
    assert_eq!(
        code(json!({ "durable_id": USB, "type": "nfs" }), Some(&state)).err(),
        Some("still_attached")
    );
    assert!(code(json!({ "durable_id": USB, "type": "usb" }), Some(&state)).is_ok());
}

#[test]
fn refusals_say_what_to_do() {
    let state = desired(TargetState::Attached, None);
    let plan = tiers(&state);
    let refusal = resolve(&params(json!({ "durable_id": USB })), Some(&state), &plan).unwrap_err();
    let text = refusal.to_string();
    assert!(text.contains("disconnected"), "{text}");
    assert!(text.contains("storage watcher"), "{text}");
}
