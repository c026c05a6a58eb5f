//! `bosunctl golden sign`: the operator's choice of golden archive, signed with their own
//! SSH key through the stock `ssh-keygen -Y sign -n bosun-golden@v1`. The output is the
//! desired state's `golden` entry (volid, hash and the signed `bosun.golden/v1` document):
//! paste it into each guest that should start from that archive. Agents restore only a
//! golden archive their helper built or one an allowed operator signed (DESIGN §5), and only
//! while that operator's key is still in their `allowed_signers`: removing the line revokes
//! every choice the key signed. `--host` binds the choice to one host and `--expires-in` /
//! `--expires-at` end it; hosts check both before every guest they provision from it.
//! `--kind qemu` signs a VM base (a `vzdump-qemu-…` archive): the kind is signed with the
//! rest, and a host restores an archive only into a guest of its kind (decision 0114).
//!
//! Every document carries a serial that only rises (decision 0092): a host that used a
//! document refuses every one with a lower serial, so a hub cannot bring back a base (or a
//! recipe) the operator has since replaced. `--serial` sets it; without it the serial is the
//! signing time in Unix seconds, so successive signings rise without anyone counting. To
//! roll back, sign the older archive again: it gets a new, higher serial. To keep several
//! bases in use side by side, sign them with the same `--serial`.
//!
//! `bosunctl golden sign-recipe` signs a `bosun.golden-recipe/v1` document (golden version,
//! controller image and digest) the same way; the output is the desired state's
//! `golden_recipe` entry. Each host then builds that version through its helper and
//! provisions guests whose `golden` names `{"version": …}` from its own build.

use std::path::PathBuf;

use bosun_proto::desired::{GoldenArchive, GuestKind};
use bosun_proto::golden::{
    GOLDEN_NAMESPACE, GoldenDocument, MAX_GOLDEN_SERIAL, SignedGolden, is_sha256,
};
use bosun_proto::golden_recipe::GoldenRecipeDocument;
use bosun_proto::signed::SignedDocument;
use clap::Subcommand;
use jiff::{SignedDuration, Timestamp};
use uuid::Uuid;

use crate::error::CtlError;
use crate::global::GlobalArgs;

/// Golden-archive commands (offline).
#[derive(Debug, Subcommand)]
pub enum GoldenCommand {
    /// Sign the choice of a golden archive; writes the desired state's `golden` entry.
    Sign(SignArgs),
    /// Sign a golden recipe (version and controller); writes the desired state's
    /// `golden_recipe` entry, which makes each host build that version through its helper.
    SignRecipe(SignRecipeArgs),
}

/// `bosunctl golden sign-recipe`.
#[derive(Debug, clap::Args)]
pub struct SignRecipeArgs {
    /// The golden version guests will name (`[A-Za-z0-9._-]`, at most 64).
    #[arg(long = "golden-version", value_name = "VERSION")]
    pub version: String,
    /// The controller image inside each host's controller image archive.
    #[arg(long)]
    pub controller_image: String,
    /// The controller image archive's digest (`sha256:` and 64 hex digits): `sha256sum` of
    /// the `docker save` file each host's helper bakes; a host whose archive hashes to
    /// anything else builds nothing.
    #[arg(long)]
    pub controller_digest: String,
    /// Rebuild the version every N days (1 to 90); each host verifies a rebuilt base (a boot
    /// in a scratch guest) before guests are provisioned from it. Without it the version is
    /// built once.
    #[arg(long, value_name = "DAYS")]
    pub refresh_days: Option<u16>,
    /// The document's serial, which hosts only let rise (a lower one than a host already
    /// holds is refused there). Default: the signing time in Unix seconds.
    #[arg(long, value_name = "N")]
    pub serial: Option<u64>,
    /// The operator's private key (or its `sk-` handle file).
    #[arg(long, short = 'f')]
    pub key: PathBuf,
    /// Where to write the `golden_recipe` entry (JSON).
    #[arg(id = "out", long = "out", short = 'o', value_name = "FILE")]
    pub output: PathBuf,
    /// The `ssh-keygen` program.
    #[arg(long, default_value = "ssh-keygen")]
    pub ssh_keygen: PathBuf,
}

/// `bosunctl golden sign`.
#[derive(Debug, clap::Args)]
pub struct SignArgs {
    /// The archive's Proxmox volume id (`local:backup/vzdump-lxc-….tar.zst`, or
    /// `local:backup/vzdump-qemu-….vma.zst` with `--kind qemu`).
    #[arg(long)]
    pub volid: String,
    /// The kind of guest the archive seeds: `lxc` (a container base) or `qemu` (a VM base).
    /// Signed with the rest: agents restore it only into a guest of that kind.
    #[arg(long, default_value = "lxc", value_parser = ["lxc", "qemu"])]
    pub kind: String,
    /// SHA-256 of the archive's bytes (`sha256sum` on the host), 64 hex digits.
    #[arg(long)]
    pub sha256: String,
    /// The one host that may provision from the archive: its id, or its hostname (looked up
    /// at the hub). Without it, every host that trusts the key may.
    #[arg(long, value_name = "HOST")]
    pub host: Option<String>,
    /// How long the choice lasts from now: seconds, or a number with s/m/h/d (`90d`).
    /// Without it or `--expires-at`, it lasts while the key stays in the hosts'
    /// `allowed_signers`.
    #[arg(long, value_name = "DURATION", conflicts_with = "expires_at")]
    pub expires_in: Option<String>,
    /// When the choice ends (RFC 3339, e.g. `2027-01-01T00:00:00Z`).
    #[arg(long, value_name = "TIME")]
    pub expires_at: Option<Timestamp>,
    /// The document's serial, which hosts only let rise (a lower one than a host already
    /// holds is refused there). Default: the signing time in Unix seconds.
    #[arg(long, value_name = "N")]
    pub serial: Option<u64>,
    /// The operator's private key (or its `sk-` handle file).
    #[arg(long, short = 'f')]
    pub key: PathBuf,
    /// Where to write the `golden` entry (JSON). (`--output` is the global output format.)
    #[arg(id = "out", long = "out", short = 'o', value_name = "FILE")]
    pub output: PathBuf,
    /// The `ssh-keygen` program.
    #[arg(long, default_value = "ssh-keygen")]
    pub ssh_keygen: PathBuf,
}

/// Runs a golden command. Offline, except that a `--host` given by name is looked up at the
/// configured hub.
pub async fn run(command: &GoldenCommand, global: &GlobalArgs) -> Result<(), CtlError> {
    match command {
        GoldenCommand::Sign(args) => {
            let host = match &args.host {
                Some(host) => Some(crate::resolve::host_id_offline(global, host).await?),
                None => None,
            };
            sign(args, host, Timestamp::now())
        }
        GoldenCommand::SignRecipe(args) => sign_recipe(args, Timestamp::now()),
    }
}

/// The serial to sign: `--serial`, or the signing time `now` in Unix seconds.
fn serial(given: Option<u64>, now: Timestamp) -> Result<u64, CtlError> {
    let serial = given.unwrap_or_else(|| u64::try_from(now.as_second()).unwrap_or(0));
    if serial > MAX_GOLDEN_SERIAL {
        return Err(CtlError::BadArgument {
            what: "--serial",
            reason: format!("expected at most {MAX_GOLDEN_SERIAL}"),
        });
    }
    Ok(serial)
}

/// When a choice signed at `now` ends, from `--expires-in` or `--expires-at`.
fn expiry(args: &SignArgs, now: Timestamp) -> Result<Option<Timestamp>, CtlError> {
    if let Some(text) = &args.expires_in {
        let seconds = crate::duration::parse_duration("--expires-in", text)?;
        if seconds == 0 {
            return Err(CtlError::BadArgument {
                what: "--expires-in",
                reason: "a choice that ends at once seeds nothing".into(),
            });
        }
        return Ok(Some(now + SignedDuration::from_secs(i64::from(seconds))));
    }
    match args.expires_at {
        Some(at) if at <= now => Err(CtlError::BadArgument {
            what: "--expires-at",
            reason: format!("{at} is not in the future"),
        }),
        other => Ok(other),
    }
}

fn sign_recipe(args: &SignRecipeArgs, now: Timestamp) -> Result<(), CtlError> {
    let mut document = GoldenRecipeDocument::new(
        &args.version,
        &args.controller_image,
        &args.controller_digest,
    )
    .with_serial(serial(args.serial, now)?);
    document.refresh_days = args.refresh_days;
    document.validate().map_err(|e| CtlError::BadArgument {
        what: "golden recipe",
        reason: e.to_string(),
    })?;
    let bytes = serde_json::to_vec(&document).map_err(|e| CtlError::BadArgument {
        what: "golden recipe",
        reason: e.to_string(),
    })?;
    let signature = crate::job_sign::sign_bytes(
        &args.ssh_keygen,
        GOLDEN_NAMESPACE,
        &args.key,
        &bytes,
        &args.output,
    )?;
    let entry = SignedDocument::new(&bytes, &signature);
    let text = serde_json::to_string_pretty(&entry).map_err(|e| CtlError::BadArgument {
        what: "golden recipe entry",
        reason: e.to_string(),
    })?;
    std::fs::write(&args.output, text + "\n").map_err(|source| CtlError::WriteOutput {
        path: args.output.clone(),
        source,
    })?;
    crate::outln!("{}", args.output.display())
}

fn sign(args: &SignArgs, host: Option<Uuid>, now: Timestamp) -> Result<(), CtlError> {
    let sha256 = args.sha256.to_ascii_lowercase();
    if !is_sha256(&sha256) {
        return Err(CtlError::BadArgument {
            what: "--sha256",
            reason: "expected 64 hex digits".into(),
        });
    }
    let kind = match args.kind.as_str() {
        "qemu" => GuestKind::Qemu,
        _ => GuestKind::Lxc,
    };
    let name = args.volid.rsplit('/').next().unwrap_or_default();
    let prefix = format!("vzdump-{kind}-");
    if !name.starts_with(&prefix) {
        return Err(CtlError::BadArgument {
            what: "--kind",
            reason: format!("a {kind} base is a {prefix}… archive; {name:?} is not"),
        });
    }
    let mut document = GoldenDocument::new(&args.volid, &sha256)
        .with_serial(serial(args.serial, now)?)
        .for_kind(kind);
    document.host_id = host;
    document.expires_at = expiry(args, now)?;
    document.validate().map_err(|e| CtlError::BadArgument {
        what: if e.field() == "host_id" {
            "--host"
        } else {
            "--volid"
        },
        reason: e.to_string(),
    })?;
    let bytes = serde_json::to_vec(&document).map_err(|e| CtlError::BadArgument {
        what: "golden document",
        reason: e.to_string(),
    })?;
    let signature = crate::job_sign::sign_bytes(
        &args.ssh_keygen,
        GOLDEN_NAMESPACE,
        &args.key,
        &bytes,
        &args.output,
    )?;
    let entry = GoldenArchive {
        volid: args.volid.clone(),
        sha256,
        signed: Some(SignedGolden::new(&bytes, &signature)),
        version: None,
    };
    let text = serde_json::to_string_pretty(&entry).map_err(|e| CtlError::BadArgument {
        what: "golden entry",
        reason: e.to_string(),
    })?;
    std::fs::write(&args.output, text + "\n").map_err(|source| CtlError::WriteOutput {
        path: args.output.clone(),
        source,
    })?;
    crate::outln!("{}", args.output.display())
}

#[cfg(test)]
#[path = "golden_tests.rs"]
mod tests;
