//! `bosunctl job new` and `bosunctl job sign`: write a `bosun.job/v1`
//! document and sign it with the operator's own SSH key through the stock
//! `ssh-keygen -Y sign -n bosun-job@v1` (so FIDO `sk-` keys work the same
//! way). Neither talks to the hub; `bosunctl job submit` sends the result.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use bosun_proto::job::{JobDocument, JobKind, JobTarget, SIGNATURE_NAMESPACE};
use clap::Subcommand;
use jiff::{SignedDuration, Timestamp};
use uuid::Uuid;

use bosun_proto::admin::HostDetail;

use crate::client::decode;
use crate::error::CtlError;
use crate::global::GlobalArgs;
use crate::resolve;

/// The job authoring commands (offline).
#[derive(Debug, Subcommand)]
pub enum JobAuthoringCommand {
    /// Write a new job document (`bosun.job/v1`) to a file.
    New(NewArgs),
    /// Sign a job document with `ssh-keygen -Y sign -n bosun-job@v1`, writing `FILE.sig`.
    Sign(SignArgs),
}

/// `bosunctl job new`.
#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// `restore-now`, `decommission`, `force-backup`, `storage-detach`, `storage-wipe`
    /// (both with `--param durable_id=…`; wipe before detach),
    /// `break-glass-enable` (params `ssh_public_key`, `duration_seconds` ≤ 86400, `reason`),
    /// `break-glass-disable`, `agent-update`, `controller-update` (with
    /// `--param digest=sha256:…`) or `adopt` (with `--vmid`, `--param hostname=…`,
    /// `--param config_digest=…` as `pvesh get /nodes/NODE/lxc/VMID/config` shows them, and
    /// optionally `--param bootstrap=true` with `customer_id=…` and `customer_name=…`; a VM
    /// with `--param guest_kind=qemu`, its `name` as `hostname`, once root put it in pool
    /// `bosun`) or
    /// `restore-bulk` (with `--volume`, optionally `--archive`).
    #[arg(long, value_enum)]
    pub kind: KindArg,
    /// The host the job is for: its id, or its hostname (looked up at the hub).
    #[arg(long, value_name = "HOST")]
    pub host: String,
    /// The guest (guest jobs): its id, or its hostname on that host (looked up at the hub).
    /// For `adopt`, the id the adopted guest gets (a new one when left out).
    #[arg(long, value_name = "GUEST")]
    pub guest: Option<String>,
    /// The guest's vmid (guest jobs); by default the one the hub knows for the guest.
    #[arg(long)]
    pub vmid: Option<u32>,
    /// `restore-bulk`: the guest's bulk volume to put back (`--param volume=…`).
    #[arg(long, value_name = "VOLUME")]
    pub volume: Option<String>,
    /// `restore-bulk`: the archive to put back, `bulk-<volume>-<YYYY_MM_DD-HH_MM_SS>.tar`
    /// (`--param archive=…`); by default the newest the host recorded. The host takes its
    /// size and SHA-256 from its own records, never from the job.
    #[arg(long, value_name = "ARCHIVE", requires = "volume")]
    pub archive: Option<String>,
    /// A parameter, `key=value` (e.g. `backup=local:backup/vzdump-lxc-101-….tar.zst`).
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,
    /// Hours the job stays valid from now (1 to 168: a job is valid for a week at most).
    #[arg(long, default_value_t = 24,
          value_parser = clap::value_parser!(i64).range(1..=bosun_proto::job::MAX_VALIDITY_HOURS))]
    pub valid_hours: i64,
    /// How long the job may run once the host accepts it (`90s`, `30m`, `2h`; 10 s to 24 h):
    /// no step starts after it, and the job ends `failed`, timed out. Signed with the job.
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// Where the job queues among the host's queued jobs: higher first (-100 to 100).
    #[arg(long, default_value_t = 0, allow_hyphen_values = true,
          value_parser = clap::value_parser!(i32).range(-100..=100))]
    pub priority: i32,
    /// Where to write the document. (`--output` is the global output format.)
    #[arg(id = "out", long = "out", short = 'o', value_name = "FILE")]
    pub output: PathBuf,
}

/// `bosunctl job sign`.
#[derive(Debug, clap::Args)]
pub struct SignArgs {
    /// The job document.
    pub document: PathBuf,
    /// The operator's private key (or its `sk-` handle file).
    #[arg(long, short = 'f')]
    pub key: PathBuf,
    /// The `ssh-keygen` program.
    #[arg(long, default_value = "ssh-keygen")]
    pub ssh_keygen: PathBuf,
}

/// Runs an authoring command. Ids need no hub; a host or guest given by name is looked up at
/// the configured hub.
pub async fn run(command: &JobAuthoringCommand, global: &GlobalArgs) -> Result<(), CtlError> {
    match command {
        JobAuthoringCommand::New(args) => {
            let host = resolve::host_id_offline(global, &args.host).await?;
            let (guest, vmid) = match &args.guest {
                _ if args.kind.0 == JobKind::Adopt => (Some(adopted_id(args)?), args.vmid),
                Some(guest) => {
                    let (id, vmid) = guest_target(global, host, guest, args.vmid).await?;
                    (Some(id), vmid)
                }
                None => (None, args.vmid),
            };
            new(args, host, guest, vmid)
        }
        JobAuthoringCommand::Sign(args) => sign(args),
    }
}

/// The guest id an `adopt` job gives the container: `--guest` as an id (never looked up: the
/// hub knows no guest there yet), or a new one.
fn adopted_id(args: &NewArgs) -> Result<Uuid, CtlError> {
    match &args.guest {
        None => Ok(Uuid::new_v4()),
        Some(guest) => resolve::as_id(guest).ok_or_else(|| CtlError::BadArgument {
            what: "--guest",
            reason: format!(
                "{guest:?} is not a guest id: an adopted container gets a new id (leave --guest out for a fresh one)"
            ),
        }),
    }
}

/// `--kind`: one of [`JobKind::ALL`] by its wire name, so a typo is a usage error that lists
/// the kinds (with the nearest one), and shell completion offers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindArg(pub JobKind);

/// Every `--kind`, in [`JobKind::ALL`]'s order.
const KIND_ARGS: [KindArg; JobKind::ALL.len()] = {
    let mut out = [KindArg(JobKind::ALL[0]); JobKind::ALL.len()];
    let mut at = 1;
    while at < out.len() {
        out[at] = KindArg(JobKind::ALL[at]);
        at += 1;
    }
    out
};

impl clap::ValueEnum for KindArg {
    fn value_variants<'a>() -> &'a [Self] {
        &KIND_ARGS
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.0.as_str()))
    }
}

/// The guest a job names and its vmid: `--vmid` when given, else the vmid the hub knows for
/// that guest (its last report, else its desired state's pin). A guest named by id with its
/// vmid given needs no hub; otherwise the configured hub is asked, and a guest given by id is
/// taken as is when no hub is configured.
async fn guest_target(
    global: &GlobalArgs,
    host: Uuid,
    guest: &str,
    vmid: Option<u32>,
) -> Result<(Uuid, Option<u32>), CtlError> {
    let by_id = resolve::as_id(guest);
    if let (Some(id), Some(_)) = (by_id, vmid) {
        return Ok((id, vmid));
    }
    let client = match (crate::client::connect(global), by_id) {
        (Ok(client), _) => client,
        (Err(CtlError::MissingSetting { .. }), Some(id)) => return Ok((id, vmid)),
        (Err(err), _) => return Err(err),
    };
    let detail: HostDetail = decode(
        "host detail",
        client.get(&format!("/v1/admin/hosts/{host}")).await?,
    )?;
    let id = match by_id {
        Some(id) => id,
        None => resolve::pick(
            resolve::NameKind::Guest,
            guest,
            &resolve::guest_candidates(&detail),
        )?,
    };
    let known = crate::job_check::known_vmid(&detail, id);
    match (vmid, known) {
        (Some(given), Some(known)) if given != known => Err(CtlError::BadArgument {
            what: "--vmid",
            reason: format!("guest {id} runs as vmid {known} on this host, not {given}"),
        }),
        (Some(given), _) => Ok((id, Some(given))),
        (None, known) => Ok((id, known)),
    }
}

fn new(args: &NewArgs, host: Uuid, guest: Option<Uuid>, vmid: Option<u32>) -> Result<(), CtlError> {
    let mut params = params(&args.params)?;
    let named = [
        (bosun_proto::job::RESTORE_BULK_VOLUME, &args.volume),
        (bosun_proto::job::RESTORE_BULK_ARCHIVE, &args.archive),
    ];
    for (key, value) in named {
        let Some(value) = value else { continue };
        if args.kind.0 != JobKind::RestoreBulk {
            return Err(CtlError::BadArgument {
                what: "--volume",
                reason: "`--volume` and `--archive` belong to `--kind restore-bulk`".into(),
            });
        }
        params.insert(key.to_owned(), serde_json::Value::String(value.clone()));
    }
    let timeout_s = args
        .timeout
        .as_deref()
        .map(|t| crate::duration::parse_duration("--timeout", t))
        .transpose()?;
    let document = document(
        args.kind.0,
        JobTarget {
            host_id: host,
            guest_id: guest,
            vmid,
        },
        params,
        args.valid_hours,
        timeout_s,
        args.priority,
    );
    document
        .validate()
        .map_err(|source| CtlError::InvalidInput {
            path: args.output.clone(),
            document: "bosun.job/v1 document",
            source,
        })?;
    let mut bytes =
        serde_json::to_vec_pretty(&document).map_err(|source| CtlError::ParseInput {
            path: args.output.clone(),
            document: "bosun.job/v1 document",
            source,
        })?;
    bytes.push(b'\n');
    std::fs::write(&args.output, bytes).map_err(|source| CtlError::ReadInput {
        path: args.output.clone(),
        source,
    })?;
    crate::outln!("{}", document.job_id)
}

/// `--param KEY=VALUE` arguments as a job's `params` (every value a string).
pub(crate) fn params(
    given: &[String],
) -> Result<serde_json::Map<String, serde_json::Value>, CtlError> {
    let mut params = serde_json::Map::new();
    for param in given {
        let (key, value) = param.split_once('=').ok_or_else(|| CtlError::BadArgument {
            what: "--param",
            reason: format!("{param:?} is not KEY=VALUE"),
        })?;
        params.insert(key.to_owned(), serde_json::Value::String(value.to_owned()));
    }
    Ok(params)
}

/// A fresh job document (a new id and nonce), valid from a minute ago for `valid_hours`; not
/// validated here.
pub(crate) fn document(
    kind: JobKind,
    target: JobTarget,
    params: serde_json::Map<String, serde_json::Value>,
    valid_hours: i64,
    timeout_s: Option<u32>,
    priority: i32,
) -> JobDocument {
    let now = Timestamp::now();
    JobDocument {
        schema: bosun_proto::job::DOCUMENT_SCHEMA.to_owned(),
        job_id: Uuid::now_v7(),
        kind,
        target,
        params,
        nonce: format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple()),
        // A minute of slack for the operator's clock running ahead of the host's.
        not_before: now - SignedDuration::from_secs(60),
        expires_at: now + SignedDuration::from_hours(valid_hours),
        timeout_s,
        priority,
    }
}

fn sig_path(document: &Path) -> PathBuf {
    let mut name = document.as_os_str().to_owned();
    name.push(".sig");
    PathBuf::from(name)
}

fn sign(args: &SignArgs) -> Result<(), CtlError> {
    let bytes = std::fs::read(&args.document).map_err(|source| CtlError::ReadInput {
        path: args.document.clone(),
        source,
    })?;
    let document: JobDocument =
        serde_json::from_slice(&bytes).map_err(|source| CtlError::ParseInput {
            path: args.document.clone(),
            document: "bosun.job/v1 document",
            source,
        })?;
    document
        .validate()
        .map_err(|source| CtlError::InvalidInput {
            path: args.document.clone(),
            document: "bosun.job/v1 document",
            source,
        })?;
    let signature = sig_path(&args.document);
    if signature.exists() {
        return Err(CtlError::BadArgument {
            what: "signature",
            reason: format!("{} exists; remove it to sign again", signature.display()),
        });
    }
    ssh_keygen_sign(
        &args.ssh_keygen,
        SIGNATURE_NAMESPACE,
        &args.key,
        &args.document,
    )?;
    crate::outln!("{}", signature.display())
}

/// Signs `file` with `ssh-keygen -Y sign -n NAMESPACE -f KEY`, which writes `FILE.sig`; the
/// operator's agent or FIDO touch is asked for on the inherited terminal.
pub(crate) fn ssh_keygen_sign(
    program: &Path,
    namespace: &str,
    key: &Path,
    file: &Path,
) -> Result<(), CtlError> {
    let output = Command::new(program)
        .args(["-Y", "sign", "-n", namespace, "-f"])
        .arg(key)
        .arg(file)
        .stdin(Stdio::inherit())
        .output()
        .map_err(|source| CtlError::ReadInput {
            path: program.to_owned(),
            source,
        })?;
    if !output.status.success() {
        return Err(CtlError::BadArgument {
            what: "ssh-keygen -Y sign",
            reason: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(())
}

/// Signs `bytes` that must never touch the disk (they hold a secret) with `ssh-keygen -Y sign
/// -n NAMESPACE -f KEY` reading them on standard input; returns the armored signature, which
/// it writes to standard output. The operator's agent, passphrase or FIDO touch is asked for on
/// the terminal, as for a file.
pub(crate) fn sign_in_memory(
    program: &Path,
    namespace: &str,
    key: &Path,
    bytes: &[u8],
) -> Result<String, CtlError> {
    use std::io::Write;
    let spawn_err = |source| CtlError::ReadInput {
        path: program.to_owned(),
        source,
    };
    let mut child = Command::new(program)
        .args(["-Y", "sign", "-n", namespace, "-f"])
        .arg(key)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn_err)?;
    // Closing standard input (dropping it) tells ssh-keygen the message is complete.
    let written = child
        .stdin
        .take()
        .map(|mut stdin| stdin.write_all(bytes))
        .unwrap_or(Ok(()));
    let output = child.wait_with_output().map_err(spawn_err)?;
    if !output.status.success() || written.is_err() {
        return Err(CtlError::BadArgument {
            what: "ssh-keygen -Y sign",
            reason: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    String::from_utf8(output.stdout).map_err(|_| CtlError::BadArgument {
        what: "ssh-keygen -Y sign",
        reason: "the signature is not text".to_owned(),
    })
}

/// Signs `bytes` exactly as given with `ssh-keygen -Y sign -n NAMESPACE -f KEY` and returns
/// the armored signature. `ssh-keygen` signs a file: the bytes go to `BESIDE.document` and
/// the signature to `BESIDE.document.sig`; neither file is kept, whatever happened.
pub(crate) fn sign_bytes(
    program: &Path,
    namespace: &str,
    key: &Path,
    bytes: &[u8],
    beside: &Path,
) -> Result<String, CtlError> {
    let mut doc_path = beside.as_os_str().to_owned();
    doc_path.push(".document");
    let doc_path = PathBuf::from(doc_path);
    let signature = sig_path(&doc_path);
    std::fs::write(&doc_path, bytes).map_err(|source| CtlError::WriteOutput {
        path: doc_path.clone(),
        source,
    })?;
    let _ = std::fs::remove_file(&signature);
    let signed = ssh_keygen_sign(program, namespace, key, &doc_path).and_then(|()| {
        std::fs::read_to_string(&signature).map_err(|source| CtlError::ReadInput {
            path: signature.clone(),
            source,
        })
    });
    let _ = std::fs::remove_file(&doc_path);
    let _ = std::fs::remove_file(&signature);
    signed
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};
    use crate::job::JobCommand;

    fn valid_hours(hours: &str) -> Result<i64, clap::Error> {
        let argv = [
            "bosunctl",
            "job",
            "new",
            "--kind",
            "force-backup",
            "--host",
            "h1",
            "--valid-hours",
            hours,
            "-o",
            "job.json",
        ];
        match Cli::try_parse_from(argv)?.command {
            Command::Job(JobCommand::Authoring(JobAuthoringCommand::New(args))) => {
                Ok(args.valid_hours)
            }
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn a_validity_is_one_hour_to_a_week_and_nothing_else_is_quietly_mended() {
        assert_eq!(valid_hours("1").unwrap(), 1);
        assert_eq!(
            valid_hours("168").unwrap(),
            bosun_proto::job::MAX_VALIDITY_HOURS
        );
        for bad in ["0", "169", "1.5", "day"] {
            let err = valid_hours(bad).unwrap_err();
            assert_eq!(
                err.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{bad}: {err}"
            );
        }
    }
}
