//! `bosunctl policy sign-floor`: the least retention the operator allows on one host, per
//! backup tier (`bosun.retention-floor/v1`), signed with their own SSH key through the stock
//! `ssh-keygen -Y sign -n bosun-policy@v1`. Pruning deletes backups, so the hub alone may only
//! lengthen retention; shortening it below the floor, or dropping a tier the floor names, takes
//! a newer signed floor (DESIGN §5). The output is the desired state's `backup_policy.floor`:
//! printed, or written into a desired-state file in place.

use std::path::{Path, PathBuf};

use bosun_proto::desired::{DesiredState, Retention};
use bosun_proto::retention::{FLOOR_SCHEMA, FloorTier, POLICY_NAMESPACE, RetentionFloor};
use bosun_proto::signed::SignedDocument;
use clap::Subcommand;
use jiff::Timestamp;
use uuid::Uuid;

use crate::error::CtlError;

/// Backup-policy commands (offline).
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Sign a host's retention floor; prints `backup_policy.floor` or writes it into
    /// `--desired`.
    SignFloor(SignFloorArgs),
    /// Sign a host's data plan (where its customer data may go); prints the desired state's
    /// `data_plan` or writes it into `--desired`.
    SignPlan(crate::plan::SignPlanArgs),
    /// Print the data plan a desired-state file's storage and tiers describe, to review and
    /// sign (a first plan for a host that had none).
    DerivePlan(crate::plan::DerivePlanArgs),
}

/// `bosunctl policy sign-floor`.
#[derive(Debug, clap::Args)]
pub struct SignFloorArgs {
    /// The host the floor is for: its id, or its hostname (looked up at the hub).
    #[arg(long, value_name = "HOST")]
    pub host: String,
    /// The operator's private key (or its `sk-` handle file).
    #[arg(long, short = 'f')]
    pub key: PathBuf,
    /// One tier's floor: `first=keep_last:3,keep_daily:7` for the first tier on the agent's
    /// configured storage, `<durable_id>=keep_daily:7,keep_weekly:4` for a manifest target.
    #[arg(long = "tier", value_name = "TIER=RETENTION")]
    pub tiers: Vec<String>,
    /// A desired-state file whose `backup_policy.floor` is replaced in place.
    #[arg(long)]
    pub desired: Option<PathBuf>,
    /// The `ssh-keygen` program.
    #[arg(long, default_value = "ssh-keygen")]
    pub ssh_keygen: PathBuf,
}

/// The tier name that means the first tier on the agent's configured storage.
const FIRST_TIER: &str = "first";

/// Parses `--tier TIER=keep_x:N,…`.
pub fn parse_tier(text: &str) -> Result<FloorTier, CtlError> {
    let bad = |reason: String| CtlError::BadArgument {
        what: "--tier",
        reason,
    };
    let (tier, counts) = text
        .rsplit_once('=')
        .ok_or_else(|| bad(format!("{text:?} is not TIER=keep_last:N,…")))?;
    let target = match tier.trim() {
        "" => return Err(bad(format!("{text:?} names no tier"))),
        FIRST_TIER => None,
        id => Some(id.to_owned()),
    };
    let mut retention = Retention::default();
    for item in counts.split(',').filter(|i| !i.trim().is_empty()) {
        let (name, count) = item
            .split_once(':')
            .ok_or_else(|| bad(format!("{item:?} is not keep_…:N")))?;
        let count: u32 = count
            .trim()
            .parse()
            .map_err(|_| bad(format!("{item:?}: {count:?} is not a count")))?;
        let slot = match name.trim() {
            "keep_last" => &mut retention.keep_last,
            "keep_daily" => &mut retention.keep_daily,
            "keep_weekly" => &mut retention.keep_weekly,
            "keep_monthly" => &mut retention.keep_monthly,
            other => {
                return Err(bad(format!(
                    "{other:?} is not keep_last, keep_daily, keep_weekly or keep_monthly"
                )));
            }
        };
        *slot = count;
    }
    if retention.keeps_all() {
        return Err(bad(format!(
            "{text:?} sets no count (a floor that keeps everything needs no signature)"
        )));
    }
    Ok(FloorTier { target, retention })
}

/// The floor the arguments describe, issued at `now`.
pub fn floor(host: Uuid, tiers: &[String], now: Timestamp) -> Result<RetentionFloor, CtlError> {
    if tiers.is_empty() {
        return Err(CtlError::BadArgument {
            what: "--tier",
            reason: "name at least one tier".into(),
        });
    }
    let floor = RetentionFloor {
        schema: FLOOR_SCHEMA.to_owned(),
        host_id: host,
        issued_at: now,
        tiers: tiers
            .iter()
            .map(|t| parse_tier(t))
            .collect::<Result<_, _>>()?,
    };
    floor.validate().map_err(|e| CtlError::BadArgument {
        what: "--tier",
        reason: e.to_string(),
    })?;
    Ok(floor)
}

/// Signs the floor of `host` (`args.host` resolved) and prints or writes it.
pub fn sign_floor(args: &SignFloorArgs, host: Uuid) -> Result<(), CtlError> {
    let floor = floor(host, &args.tiers, Timestamp::now())?;
    let bytes = serde_json::to_vec(&floor).map_err(|e| CtlError::BadArgument {
        what: "retention floor",
        reason: e.to_string(),
    })?;
    let Some(desired_path) = &args.desired else {
        let scratch = std::env::temp_dir().join(format!("bosun-floor-{}", Uuid::new_v4().simple()));
        let signed = sign(args, &bytes, &scratch)?;
        return crate::table::json_block(&to_json(&signed, "signed floor")?);
    };
    sign_into_desired(desired_path, |desired| {
        desired.backup_policy.floor = Some(sign(args, &bytes, desired_path)?);
        Ok(())
    })
}

/// Reads the desired-state file at `path` (checked before anything is signed: a wrong file
/// costs no touch), lets `set` sign a document into it, checks the result and writes it back
/// in place; prints the path.
pub(crate) fn sign_into_desired(
    path: &Path,
    set: impl FnOnce(&mut DesiredState) -> Result<(), CtlError>,
) -> Result<(), CtlError> {
    let mut desired = read_desired(path)?;
    set(&mut desired)?;
    desired
        .validate()
        .map_err(|source| CtlError::InvalidInput {
            path: path.to_owned(),
            document: "bosun.desired/v1 document",
            source,
        })?;
    write_in_place(path, to_json(&desired, "desired state")? + "\n")?;
    crate::outln!("{}", path.display())
}

fn sign(args: &SignFloorArgs, bytes: &[u8], beside: &Path) -> Result<SignedDocument, CtlError> {
    let signature =
        crate::job_sign::sign_bytes(&args.ssh_keygen, POLICY_NAMESPACE, &args.key, bytes, beside)?;
    Ok(SignedDocument::new(bytes, &signature))
}

pub(crate) fn read_desired(path: &Path) -> Result<DesiredState, CtlError> {
    let text = std::fs::read(path).map_err(|source| CtlError::ReadInput {
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_slice(&text).map_err(|source| CtlError::ParseInput {
        path: path.to_owned(),
        document: "bosun.desired/v1 document",
        source,
    })
}

pub(crate) fn to_json<T: serde::Serialize>(
    value: &T,
    what: &'static str,
) -> Result<String, CtlError> {
    serde_json::to_string_pretty(value).map_err(|e| CtlError::BadArgument {
        what,
        reason: e.to_string(),
    })
}

/// Replaces `path` with `text` through a sibling file and a rename: the file is the old one or
/// the new one, never half of each.
fn write_in_place(path: &Path, text: String) -> Result<(), CtlError> {
    let mut next = path.as_os_str().to_owned();
    next.push(".next");
    let next = PathBuf::from(next);
    let written = std::fs::write(&next, text).and_then(|()| std::fs::rename(&next, path));
    if let Err(source) = written {
        let _ = std::fs::remove_file(&next);
        return Err(CtlError::WriteOutput {
            path: path.to_owned(),
            source,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_parse_into_a_floor_and_bad_ones_are_named() {
        let floor = floor(
            Uuid::nil(),
            &[
                "first=keep_last:3,keep_daily:7".into(),
                "pbs@pbs.example:store1=keep_daily:7,keep_weekly:4".into(),
            ],
            Timestamp::UNIX_EPOCH,
        )
        .unwrap();
        assert_eq!(floor.tiers[0].target, None);
        assert_eq!(floor.tiers[0].retention.keep_last, 3);
        assert_eq!(floor.tiers[0].retention.keep_daily, 7);
        let pbs = floor.tier(Some("pbs@pbs.example:store1")).unwrap();
        assert_eq!(pbs.retention.keep_weekly, 4);
        assert_eq!(pbs.retention.keep_last, 0);
        for bad in [
            "first",
            "=keep_last:1",
            "first=keep_hourly:1",
            "first=keep_last:x",
            "first=keep_last",
            "first=",
        ] {
            assert!(parse_tier(bad).is_err(), "{bad} accepted");
        }
        let twice = [
            "first=keep_last:1".to_owned(),
            "first=keep_daily:2".to_owned(),
        ];
        assert!(super::floor(Uuid::nil(), &twice, Timestamp::UNIX_EPOCH).is_err());
        assert!(super::floor(Uuid::nil(), &[], Timestamp::UNIX_EPOCH).is_err());
    }
}
