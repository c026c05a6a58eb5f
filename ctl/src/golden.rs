//! `bosunctl golden sign`: the operator's choice of golden archive, signed with their own
//! SSH key through the stock `ssh-keygen -Y sign -n bosun-golden@v1`. The output is the
//! desired state's `golden` entry (volid, hash and the signed `bosun.golden/v1` document):
//! paste it into each guest that should start from that archive. Agents restore only a
//! golden archive their helper built or one an allowed operator signed (DESIGN §5).

use std::path::PathBuf;

use bosun_proto::desired::GoldenArchive;
use bosun_proto::golden::{GOLDEN_NAMESPACE, GoldenDocument, SignedGolden, is_sha256};
use clap::Subcommand;

use crate::error::CtlError;

/// Golden-archive commands (offline).
#[derive(Debug, Subcommand)]
pub enum GoldenCommand {
    /// Sign the choice of a golden archive; writes the desired state's `golden` entry.
    Sign(SignArgs),
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
    /// Where to write the `golden` entry (JSON).
    #[arg(long, short)]
    pub output: PathBuf,
    /// The `ssh-keygen` program.
    #[arg(long, default_value = "ssh-keygen")]
    pub ssh_keygen: PathBuf,
}

/// Runs a golden command.
pub fn run(command: &GoldenCommand) -> Result<(), CtlError> {
    match command {
        GoldenCommand::Sign(args) => sign(args),
    }
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
    // ssh-keygen signs a file: the exact bytes go beside the output, then the signature.
    let mut doc_path = args.output.as_os_str().to_owned();
    doc_path.push(".document");
    let doc_path = PathBuf::from(doc_path);
    let mut sig_path = doc_path.as_os_str().to_owned();
    sig_path.push(".sig");
    let sig_path = PathBuf::from(sig_path);
    let written = |path: &PathBuf| {
        let path = path.clone();
        move |source| CtlError::WriteOutput { path, source }
    };
    std::fs::write(&doc_path, &bytes).map_err(written(&doc_path))?;
    let _ = std::fs::remove_file(&sig_path);
    let signed =
        crate::job_sign::ssh_keygen_sign(&args.ssh_keygen, GOLDEN_NAMESPACE, &args.key, &doc_path)
            .and_then(|()| {
                std::fs::read_to_string(&sig_path).map_err(|source| CtlError::ReadInput {
                    path: sig_path.clone(),
                    source,
                })
            });
    // The signed bytes travel inside the entry: neither file is kept, whatever happened.
    let _ = std::fs::remove_file(&doc_path);
    let _ = std::fs::remove_file(&sig_path);
    let signature = signed?;
    let entry = GoldenArchive {
        volid: args.volid.clone(),
        sha256,
        signed: Some(SignedGolden::new(&bytes, &signature)),
    };
    let text = serde_json::to_string_pretty(&entry).map_err(|e| CtlError::BadArgument {
        what: "golden entry",
        reason: e.to_string(),
    })?;
    std::fs::write(&args.output, text + "\n").map_err(written(&args.output))?;
    println!("{}", args.output.display());
    Ok(())
}
