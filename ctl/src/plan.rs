//! `bosunctl policy sign-plan` and `derive-plan`: the host's data plan
//! (`bosun.data-plan/v1`), where its customer data may go, signed with the operator's own SSH
//! key through the stock `ssh-keygen -Y sign -n bosun-policy@v1` (DESIGN §5). The operator
//! writes the plan file (its targets with their whole identity, the tiers, the least backup
//! interval, and a serial raised with every change); `sign-plan` fills in the host, the issue
//! time and the schema, checks the plan and prints the signed document or writes it into a
//! desired-state file as its `data_plan`. `derive-plan` starts a first plan from a desired
//! state's storage manifest and tiers, for the operator to review before signing.

use std::path::{Path, PathBuf};

use bosun_proto::data_plan::{DataPlan, PLAN_NAMESPACE, PLAN_SCHEMA, PlanBackup};
use bosun_proto::desired::StorageTarget;
use bosun_proto::signed::SignedDocument;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::CtlError;
use crate::policy::{read_desired, sign_into_desired, to_json};

/// The least backup interval a derived plan proposes, in seconds.
const DERIVED_MIN_INTERVAL: u32 = 3600;

/// What the operator writes: the plan without the host, issue time and schema, which
/// `sign-plan` fills in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanFile {
    /// Raised with every change: the agent refuses a serial at or below the one it holds.
    pub serial: u64,
    /// Every target the host may use, with its whole identity.
    #[serde(default)]
    pub targets: Vec<StorageTarget>,
    /// The tiers.
    pub backup: PlanBackup,
    /// The node's own storages' classes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_storages: Vec<bosun_proto::data_plan::NodeStorage>,
    /// The tunnel and its routes: which public hostname reaches which guest (decision 0082).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<bosun_proto::tunnel::PlanTunnel>,
    /// Bulk volumes' own backups (decision 0090).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bulk_backups: Vec<bosun_proto::data_plan::PlanBulkBackup>,
    /// The bounds on every guest's CPU weight, CPU time and network rate (decision 0100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_share: Option<bosun_proto::share::ShareBounds>,
    /// The SSH keys each guest's `root` trusts (decision 0107).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guest_access: Vec<bosun_proto::guest_access::GuestAccess>,
}

/// `bosunctl policy sign-plan`.
#[derive(Debug, clap::Args)]
pub struct SignPlanArgs {
    /// The host the plan is for: its id, or its hostname (looked up at the hub).
    #[arg(long, value_name = "HOST")]
    pub host: String,
    /// The operator's private key (or its `sk-` handle file).
    #[arg(long, short = 'f')]
    pub key: PathBuf,
    /// The plan file (JSON: `serial`, `targets`, `backup`, and `tunnel` when the host runs one).
    #[arg(long, value_name = "FILE")]
    pub plan: PathBuf,
    /// A desired-state file whose `data_plan` is replaced in place.
    #[arg(long)]
    pub desired: Option<PathBuf>,
    /// The `ssh-keygen` program.
    #[arg(long, default_value = "ssh-keygen")]
    pub ssh_keygen: PathBuf,
}

/// `bosunctl policy derive-plan`.
#[derive(Debug, clap::Args)]
pub struct DerivePlanArgs {
    /// The desired-state file whose storage manifest and tiers the plan takes.
    #[arg(long, value_name = "FILE")]
    pub desired: PathBuf,
    /// The plan's serial (above the one the host holds).
    #[arg(long, default_value_t = 1)]
    pub serial: u64,
    /// The least time between two scheduled backups of a guest on a tier, in seconds.
    #[arg(long, default_value_t = DERIVED_MIN_INTERVAL)]
    pub min_interval_seconds: u32,
}

/// The plan `file` describes for `host`, issued at `now`, checked (a refusal names `--plan`,
/// the file it came from).
pub fn plan_for(host: Uuid, file: PlanFile, now: Timestamp) -> Result<DataPlan, CtlError> {
    let plan = unchecked_plan(host, file, now);
    plan.validate().map_err(|e| CtlError::BadArgument {
        what: "--plan",
        reason: e.to_string(),
    })?;
    Ok(plan)
}

/// The plan `file` describes for `host`, issued at `now`.
fn unchecked_plan(host: Uuid, file: PlanFile, now: Timestamp) -> DataPlan {
    DataPlan {
        schema: PLAN_SCHEMA.to_owned(),
        host_id: host,
        serial: file.serial,
        issued_at: now,
        targets: file.targets,
        backup: file.backup,
        node_storages: file.node_storages,
        tunnel: file.tunnel,
        bulk_backups: file.bulk_backups,
        guest_share: file.guest_share,
        guest_access: file.guest_access,
    }
}

/// `derive-plan`'s option a refusal of the derived plan's `field` comes from: `--serial` and
/// `--min-interval-seconds` give their own fields, the desired-state file the rest.
fn derived_from(field: &str) -> &'static str {
    match field {
        "serial" => "--serial",
        "backup.min_interval_seconds" => "--min-interval-seconds",
        _ => "--desired",
    }
}

/// The plan file a desired state's manifest and tiers describe.
pub fn derived(
    desired: &bosun_proto::desired::DesiredState,
    serial: u64,
    min_interval_seconds: u32,
) -> PlanFile {
    let policy = &desired.backup_policy;
    PlanFile {
        serial,
        targets: desired
            .storage
            .iter()
            .map(|t| StorageTarget {
                // Credentials stay in desired state: they are sealed to their target.
                credentials: None,
                ..t.clone()
            })
            .collect(),
        backup: PlanBackup {
            schedule: policy.schedule.clone(),
            retention: policy.retention,
            target: policy.target.clone(),
            further_tiers: policy.further_tiers.clone(),
            min_interval_seconds,
            restore_test_days: desired
                .restore_test_policy
                .enabled
                .then_some(desired.restore_test_policy.interval_days),
            verify_hours: desired
                .verify_policy
                .enabled
                .then_some(desired.verify_policy.interval_hours),
        },
        // Desired state says nothing of the node's own storages: the operator adds them.
        node_storages: Vec::new(),
        tunnel: None,
        bulk_backups: derived_bulk_backups(desired),
        // Bounds on the guests' share are the operator's to choose: the agent's own hold.
        guest_share: None,
        // Who may sign in to a guest is the operator's to write: no key is derived.
        guest_access: Vec::new(),
    }
}

/// One bulk backup per bulk volume whose desired decision names a directory target of role
/// `vzdump-target`, on the first tier's schedule, keeping as many archives as its retention
/// keeps last (at least one).
fn derived_bulk_backups(
    desired: &bosun_proto::desired::DesiredState,
) -> Vec<bosun_proto::data_plan::PlanBulkBackup> {
    use bosun_proto::desired::{BulkBackup, StorageRole, StorageType};
    let policy = &desired.backup_policy;
    let archivable = |id: &str| {
        desired.storage.iter().any(|t| {
            t.durable_id == id && t.role == StorageRole::VzdumpTarget && t.kind != StorageType::Pbs
        })
    };
    desired
        .guests
        .iter()
        .flat_map(|guest| guest.bulk_volumes.iter().map(move |v| (guest.guest_id, v)))
        .filter_map(|(guest_id, volume)| match &volume.backup {
            BulkBackup::Target { target } if archivable(target) => {
                Some(bosun_proto::data_plan::PlanBulkBackup {
                    guest_id,
                    volume: volume.name.clone(),
                    path: volume.path.clone(),
                    target: target.clone(),
                    schedule: policy.schedule.clone(),
                    keep_last: policy
                        .retention
                        .keep_last
                        .clamp(1, bosun_proto::data_plan::MAX_BULK_KEEP),
                })
            }
            _ => None,
        })
        .collect()
}

/// Prints the plan a desired-state file describes.
pub fn derive_plan(args: &DerivePlanArgs) -> Result<(), CtlError> {
    let desired = read_desired(&args.desired)?;
    let file = derived(&desired, args.serial, args.min_interval_seconds);
    // Checked as a plan before it is shown: what is printed can be signed as it is.
    unchecked_plan(Uuid::from_u128(1), file.clone(), Timestamp::UNIX_EPOCH)
        .validate()
        .map_err(|e| CtlError::BadArgument {
            what: derived_from(e.field()),
            reason: e.to_string(),
        })?;
    crate::table::json_block(&to_json(&file, "data plan")?)
}

/// Signs the plan of `host` (`args.host` resolved) and prints or writes it.
pub fn sign_plan(args: &SignPlanArgs, host: Uuid) -> Result<(), CtlError> {
    let text = std::fs::read(&args.plan).map_err(|source| CtlError::ReadInput {
        path: args.plan.clone(),
        source,
    })?;
    let file: PlanFile = serde_json::from_slice(&text).map_err(|source| CtlError::ParseInput {
        path: args.plan.clone(),
        document: "data plan file (serial, targets, backup)",
        source,
    })?;
    let plan = plan_for(host, file, Timestamp::now())?;
    let bytes = serde_json::to_vec(&plan).map_err(|e| CtlError::BadArgument {
        what: "data plan",
        reason: e.to_string(),
    })?;
    let Some(desired_path) = &args.desired else {
        let signed = sign(args, &bytes, &args.plan)?;
        return crate::table::json_block(&to_json(&signed, "signed data plan")?);
    };
    sign_into_desired(desired_path, |desired| {
        desired.data_plan = Some(sign(args, &bytes, desired_path)?);
        Ok(())
    })
}

fn sign(args: &SignPlanArgs, bytes: &[u8], beside: &Path) -> Result<SignedDocument, CtlError> {
    let signature =
        crate::job_sign::sign_bytes(&args.ssh_keygen, PLAN_NAMESPACE, &args.key, bytes, beside)?;
    Ok(SignedDocument::new(bytes, &signature))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_file_takes_the_host_and_is_checked() {
        let file: PlanFile = serde_json::from_value(serde_json::json!({
            "serial": 2,
            "targets": [{
                "type": "pbs", "durable_id": "bosun@pbs@pbs.example:store",
                "namespace": "hosts/a", "class": "slow", "role": "pbs-offsite",
                "policy": { "schedule": "daily", "retention": { "keep_daily": 7 } },
                "state": "attached"
            }],
            "backup": {
                "schedule": "02:00", "retention": { "keep_last": 3 },
                "further_tiers": ["bosun@pbs@pbs.example:store"], "min_interval_seconds": 60
            }
        }))
        .unwrap();
        let host = Uuid::from_u128(9);
        let plan = plan_for(host, file.clone(), Timestamp::UNIX_EPOCH).unwrap();
        assert_eq!(plan.host_id, host);
        assert_eq!(plan.schema, PLAN_SCHEMA);
        let mut zero = file;
        zero.serial = 0;
        assert!(plan_for(host, zero, Timestamp::UNIX_EPOCH).is_err());
        let unknown: Result<PlanFile, _> = serde_json::from_value(serde_json::json!({
            "serial": 1, "host_id": host, "backup": {
                "schedule": "daily", "retention": {}, "min_interval_seconds": 60 }
        }));
        assert!(
            unknown.is_err(),
            "the host comes from --host, never from the file"
        );
    }

    #[test]
    fn a_derived_plan_refused_names_the_option_it_came_from() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("desired.json");
        let mut desired = serde_json::json!({
            "schema": "bosun.desired-state/v1",
            "storage": [],
            "backup_policy": {"schedule": "02:00", "retention": {"keep_last": 3}},
            "restore_test_policy": {"enabled": false, "interval_days": 7, "timeout_minutes": 30},
            "guests": []
        });
        let refused = |desired: &serde_json::Value, serial: u64| {
            std::fs::write(&path, desired.to_string()).unwrap();
            derive_plan(&DerivePlanArgs {
                desired: path.clone(),
                serial,
                min_interval_seconds: DERIVED_MIN_INTERVAL,
            })
            .expect_err("a plan the agent would refuse")
            .to_string()
        };
        let said = refused(&desired, 0);
        assert!(said.starts_with("--serial: "), "{said}");
        // A tier on a target the desired state does not have: the desired state's fault.
        desired["backup_policy"]["further_tiers"] = serde_json::json!(["bosun@pbs@nowhere:x"]);
        let said = refused(&desired, 1);
        assert!(said.starts_with("--desired: "), "{said}");
        assert!(!said.contains("--plan"), "{said}");
    }

    #[test]
    fn derive_plan_names_each_bulk_volume_whose_decision_names_a_directory_backup_target() {
        let guest = "5b0f9c62-3a0e-4c44-9d55-0a1b2c3d4e5f";
        let desired: bosun_proto::desired::DesiredState =
            serde_json::from_value(serde_json::json!({
                "schema": "bosun.desired-state/v1",
                "storage": [
                    {"type": "local-dir", "durable_id": "/srv/bulk", "class": "slow",
                     "role": "bulk-data", "policy": {"retention": {}}, "state": "attached"},
                    {"type": "local-dir", "durable_id": "/srv/backup", "class": "slow",
                     "role": "vzdump-target", "policy": {"retention": {}}, "state": "attached"}
                ],
                "backup_policy": {"schedule": "02:00", "retention": {"keep_last": 0}},
                "restore_test_policy": {"enabled": false, "interval_days": 7, "timeout_minutes": 30},
                "guests": [{
                    "guest_id": guest, "hostname": "alpha",
                    "customer": {"customer_id": "c1", "display_name": "C"},
                    "resources": {"cores": 1, "memory_mib": 512, "rootfs_gib": 4},
                    "power": "running",
                    "golden": {
                        "volid": "local:backup/vzdump-lxc-9000-2026_11_01-02_00_00.tar.zst",
                        "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
                    },
                    "bulk_volumes": [
                        {"name": "media", "size_gib": 2, "path": "/srv/media", "class": "slow",
                         "backup": {"kind": "target", "target": "/srv/backup"}},
                        {"name": "cache", "size_gib": 2, "path": "/srv/cache", "class": "slow",
                         "backup": {"kind": "none", "acknowledged_by": "ops"}}
                    ]
                }]
            }))
            .unwrap();
        let file = derived(&desired, 4, 60);
        assert_eq!(file.bulk_backups.len(), 1, "{:?}", file.bulk_backups);
        let entry = &file.bulk_backups[0];
        assert_eq!(entry.volume, "media");
        assert_eq!(entry.path, "/srv/media");
        assert_eq!(entry.target, "/srv/backup");
        assert_eq!(entry.schedule, "02:00");
        assert_eq!(entry.keep_last, 1, "at least one archive is kept");
        plan_for(Uuid::from_u128(9), file, Timestamp::UNIX_EPOCH).expect("a valid plan");
    }

    /// Every desired-state example the docs ship is one `derive-plan` accepts as it is, and
    /// the app chapter's plan file is that derivation plus what only the operator writes
    /// (the node's storages and who may sign in to the guest), and signs as a valid plan.
    #[test]
    fn the_docs_desired_examples_derive_plans_and_the_app_plan_signs() {
        let examples = [
            include_str!("../../docs/proto/desired.json"),
            include_str!("../../docs/proto/desired-ordered.json"),
            include_str!("../../docs/examples/app/desired.json"),
        ];
        let dir = tempfile::tempdir().unwrap();
        for (i, text) in examples.iter().enumerate() {
            let path = dir.path().join(format!("desired-{i}.json"));
            std::fs::write(&path, text).unwrap();
            derive_plan(&DerivePlanArgs {
                desired: path,
                serial: 1,
                min_interval_seconds: DERIVED_MIN_INTERVAL,
            })
            .unwrap_or_else(|e| panic!("example {i}: {e}"));
        }
        let desired: bosun_proto::desired::DesiredState =
            serde_json::from_str(examples[2]).unwrap();
        let file: PlanFile =
            serde_json::from_str(include_str!("../../docs/examples/app/plan.json")).unwrap();
        let derived = derived(&desired, 1, DERIVED_MIN_INTERVAL);
        assert_eq!(
            (&file.targets, &file.backup, &file.bulk_backups),
            (&derived.targets, &derived.backup, &derived.bulk_backups),
            "the example plan is derive-plan's output for the example desired state"
        );
        let plan = plan_for(Uuid::from_u128(9), file, Timestamp::UNIX_EPOCH).unwrap();
        let guest = &desired.guests[0];
        assert_eq!(
            plan.guest_keys(guest.guest_id, &guest.customer.customer_id)
                .len(),
            1,
            "the example gives the example guest its customer's key"
        );
    }
}
