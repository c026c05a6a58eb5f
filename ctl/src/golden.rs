//! `bosunctl golden sign`: the operator's choice of golden archive, signed with their own
//! SSH key through the stock `ssh-keygen -Y sign -n bosun-golden@v1`. The output is the
//! desired state's `golden` entry (volid, hash and the signed `bosun.golden/v1` document):
//! paste it into each guest that should start from that archive. Agents restore only a
//! golden archive their helper built or one an allowed operator signed (DESIGN §5).
//!
//! `bosunctl golden sign-recipe` signs a `bosun.golden-recipe/v1` document (golden version,
//! controller image and digest) the same way; the output is the desired state's
//! `golden_recipe` entry. Each host then builds that version through its helper and
//! provisions guests whose `golden` names `{"version": …}` from its own build.

use std::path::PathBuf;

use bosun_proto::desired::GoldenArchive;
use bosun_proto::golden::{GOLDEN_NAMESPACE, GoldenDocument, SignedGolden, is_sha256};
use bosun_proto::golden_recipe::GoldenRecipeDocument;
use bosun_proto::signed::SignedDocument;
use clap::Subcommand;

use crate::error::CtlError;

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
    /// The controller image's digest (`sha256:` and 64 hex digits).
    #[arg(long)]
    pub controller_digest: String,
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
    /// The archive's Proxmox volume id (`local:backup/vzdump-lxc-….tar.zst`).
    #[arg(long)]
    pub volid: String,
    /// SHA-256 of the archive's bytes (`sha256sum` on the host), 64 hex digits.
    #[arg(long)]
    pub sha256: String,
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

/// Runs a golden command.
pub fn run(command: &GoldenCommand) -> Result<(), CtlError> {
    match command {
        GoldenCommand::Sign(args) => sign(args),
        GoldenCommand::SignRecipe(args) => sign_recipe(args),
    }
}

fn sign_recipe(args: &SignRecipeArgs) -> Result<(), CtlError> {
    let document = GoldenRecipeDocument::new(
        &args.version,
        &args.controller_image,
        &args.controller_digest,
    );
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

fn sign(args: &SignArgs) -> Result<(), CtlError> {
    let sha256 = args.sha256.to_ascii_lowercase();
    if !is_sha256(&sha256) {
        return Err(CtlError::BadArgument {
            what: "--sha256",
            reason: "expected 64 hex digits".into(),
        });
    }
    let document = GoldenDocument::new(&args.volid, &sha256);
    document.validate().map_err(|e| CtlError::BadArgument {
        what: "--volid",
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
