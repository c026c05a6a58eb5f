//! `bosunctl pve check`: validates a real Proxmox VE node before it is enrolled, with the
//! agent's own client ([`PveClient`]), the agent's token and the pinned certificate
//! fingerprint, exactly as `bosun-agentd` connects.
//!
//! The checks, in order (each a line of the report; see [`report::Check`] for the names):
//! 1. `connect`: `GET /version` answers over TLS with the pinned certificate and the token.
//! 2. `version`: Proxmox VE 8.4 or 9.x.
//! 3. `node`: the node exists and is online (`--node`, else the node whose certificate was
//!    pinned, else the only node).
//! 4. `cluster`: whether the node is standalone or one of a Proxmox cluster, and whether the
//!    cluster has quorum (`GET /cluster/status`, which needs `Sys.Audit` on `/`): on a
//!    cluster's node a guest that leaves for another node is reported `migrated` and never
//!    restored here; without quorum Proxmox refuses to create or change guests.
//! 5. `privileges`: `GET /access/permissions` on `/vms`, `/storage`, `/nodes/NODE` and
//!    `/sdn/zones/localnetwork` holds every privilege of the `BosunAgent` role
//!    ([`bosun_pve::BOSUN_AGENT_PRIVILEGES`]), propagated where the agent needs it
//!    below; each missing one is named with the `pveum` command that grants it.
//!    Then `guest-reach` (decision 0113): what reaches inside a VM (`VM.GuestAgent.*` on PVE 9,
//!    `VM.Monitor` on PVE 8, and `VM.Config.Cloudinit`) is held on `/pool/bosun` and on no
//!    other path the token can list (`/`, `/vms`, a VM outside the pool): a failure
//!    otherwise, naming the path; more than the `BosunGuest` role on the pool is a warning.
//! 6. `guest-firewall`: the token holds `VM.Config.Network` and `VM.Audit` on `/vms`, which the
//!    agent needs to turn each new guest's firewall and `ipfilter` on (a failure otherwise);
//!    a warning when the datacenter firewall is off (`GET /cluster/firewall/options`, which
//!    needs `Sys.Audit` on `/`), since no guest's firewall filters anything then.
//! 7. `rootdir-storage` and `backup-storage`: an enabled, active storage allowing `rootdir`
//!    (`--storage`, or any) and one allowing `backup` (`--backup-storage`, or any); a rootdir
//!    storage that cannot snapshot containers is a warning.
//! 8. `tunnel`: whether `cloudflared` is installed where the check runs, and its version (a
//!    warning when it is not: only a host whose data plan names a tunnel needs it).
//! 9. `golden` (with `--golden`): the archive is listed on its storage.
//! 10. with `--scratch`: `scratch-restore` (the golden archive onto `GET /cluster/nextid`, links
//!     down), `scratch-start`, `scratch-snapshot`, `scratch-backup` (vzdump to the backup
//!     storage) and `scratch-cleanup`, which destroys the scratch guest and deletes its backup
//!     on every way out: a failed step, an error, or Ctrl-C.
//!
//! Exit codes ([`exit`], `bosunctl`'s one scheme): 0 every check passed (warnings allowed), 12 a
//! check failed, 5 the node could not be reached or refused the token (`connect` failed), 2 bad
//! usage, 4 an unusable token file.
//!
//! `--json` prints [`report::Report`]:
//! `{"format":2,"url":…,"node":…,"token_id":…,"passed":bool,"exit_code":n,
//!   "checks":[{"name":…,"status":"ok"|"warn"|"fail"|"skip","detail":…,"fix":[…]}]}`.

mod checks;
mod firewall;
mod guest_reach;
pub mod report;
mod scratch;
pub mod tunnel;

use std::future::Future;
use std::path::PathBuf;

use bosun_pve::{
    BOSUN_AGENT_TOKEN_ID, NodeName, PveClient, PveConfig, PveError, RetryPolicy, StorageId,
    TlsTrust, VolumeId,
};
use clap::{Args, Subcommand};
use secrecy::SecretString;

pub use report::{Check, Report, Status};

/// Exit codes of `bosunctl pve check`: `bosunctl`'s own scheme ([`crate::exit`]).
pub mod exit {
    /// Every check passed (warnings allowed).
    pub const OK: u8 = crate::exit::OK;
    /// At least one check failed; the report says which and how to fix it.
    pub const FAILED: u8 = crate::exit::CHECK_FAILED;
    /// The node could not be reached, its certificate did not match the fingerprint, or it
    /// refused the token.
    pub const UNREACHABLE: u8 = crate::exit::UNREACHABLE;
}

const EXIT_HELP: &str = "\
Exit codes (as every bosunctl command's):
  0   every check passed (warnings allowed)
  2   bad usage (options)
  4   the token file is unreadable or holds no token
  5   could not reach or authenticate to the node (URL, certificate fingerprint, token)
  12  a check failed (each failure has a `fix:` line)

With --json the report is one object:
  {\"format\":2, \"url\":…, \"node\":…, \"token_id\":…, \"passed\":true|false, \"exit_code\":N,
   \"checks\":[{\"name\":…, \"status\":\"ok\"|\"warn\"|\"fail\"|\"skip\", \"detail\":…, \"fix\":[…]}]}
Check names: connect, version, node, least-privilege, privileges, guest-reach, guest-firewall,
rootdir-storage, backup-storage, tunnel, golden, scratch-restore, scratch-start, scratch-snapshot, scratch-backup, scratch-cleanup.";

/// `bosunctl pve …`.
#[derive(Debug, Subcommand)]
pub enum PveCommand {
    /// Check a Proxmox VE node before enrolling it: version, the token's privileges,
    /// storages, the golden archive and (--scratch) a whole guest life.
    #[command(after_long_help = EXIT_HELP)]
    Check(PveCheckArgs),
    /// Set a Proxmox VE node up for Bosun with an administrator's token: the roles, the user
    /// bosun@pve and its token, the pool bosun and the ACLs that `pve check` verifies, and
    /// nothing more. A second run changes nothing.
    #[command(after_long_help = crate::pve_setup::EXIT_HELP)]
    Setup(crate::pve_setup::PveSetupArgs),
}

/// `bosunctl pve check` options.
#[derive(Debug, Clone, Args)]
pub struct PveCheckArgs {
    /// The node's API, `https://HOST:8006` (`/api2/json` is added when the path is empty).
    #[arg(long, value_name = "URL")]
    pub url: String,
    /// File holding the API token: `USER@REALM!TOKENID=SECRET`, or the secret alone (as in the
    /// agent's `token_secret_file`; the id is then --token-id).
    #[arg(long, value_name = "FILE")]
    pub token_file: PathBuf,
    /// The token id when the file holds only the secret (default: bosun@pve!agent).
    #[arg(long, value_name = "ID")]
    pub token_id: Option<String>,
    /// SHA-256 fingerprint of the node's certificate (`pvenode cert info`), pinned as the
    /// agent pins it (`pve.fingerprint` in agent.toml).
    #[arg(long, value_name = "FP", required_unless_present = "ca_file")]
    pub fingerprint: Option<String>,
    /// Trust the node's certificate through this CA instead of a pin (`pve.ca_file` in
    /// agent.toml, e.g. a copy of the cluster's /etc/pve/pve-root-ca.pem).
    #[arg(long, value_name = "FILE", conflicts_with = "fingerprint")]
    pub ca_file: Option<PathBuf>,
    /// The node to check [default: the node whose certificate is pinned, or the only node].
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,
    /// The storage for guest volumes (must allow `rootdir`) [default: any that does].
    #[arg(long, value_name = "ID")]
    pub storage: Option<String>,
    /// The storage for backups (must allow `backup`) [default: any that does].
    #[arg(long, value_name = "ID")]
    pub backup_storage: Option<String>,
    /// The golden archive's volume id (`local:backup/vzdump-lxc-….tar.zst`).
    #[arg(long, value_name = "VOLID")]
    pub golden: Option<String>,
    /// Also restore the golden archive into a scratch guest, start, snapshot and back it up,
    /// then destroy it and its backup (needs --golden).
    #[arg(long, requires = "golden")]
    pub scratch: bool,
    /// Print the report as JSON (shape below).
    #[arg(long)]
    pub json: bool,
    /// The cloudflared program whose version the `tunnel` check reads, on the machine the
    /// check runs on (run it on the node) [default: cloudflared on PATH].
    #[arg(long, value_name = "PATH", default_value = "cloudflared")]
    pub cloudflared: PathBuf,
}

/// Why `pve check` could not even start.
#[derive(Debug, thiserror::Error)]
pub enum PveCheckError {
    /// An option is not usable (exit 2, as any usage error).
    #[error("{what}: {reason}")]
    Usage {
        /// Which option.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The token file is unreadable or holds no token (exit 4, as any unusable input file).
    #[error("--token-file: {reason}")]
    TokenFile {
        /// Why.
        reason: String,
    },
}

impl PveCheckError {
    /// The exit code, in `bosunctl`'s one scheme.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Usage { .. } => crate::exit::USAGE,
            Self::TokenFile { .. } => crate::exit::INPUT,
        }
    }
}

fn usage(what: &'static str) -> impl FnOnce(String) -> PveCheckError {
    move |reason| PveCheckError::Usage { what, reason }
}

/// What the options name, validated before anything is sent.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The client's settings, on `--node` or a placeholder until the node is known.
    pub(crate) config: PveConfig,
    pub(crate) node: Option<NodeName>,
    pub(crate) storage: Option<StorageId>,
    pub(crate) backup_storage: Option<StorageId>,
    pub(crate) golden: Option<VolumeId>,
    pub(crate) scratch: bool,
}

/// A token file's or variable's text: its first non-empty line, `ID=SECRET` (optionally after
/// `PVEAPIToken=`) or the secret alone; `None` when there is no such line.
pub(crate) fn split_token_text(text: &str) -> Option<(Option<String>, String)> {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    let line = line.strip_prefix("PVEAPIToken=").unwrap_or(line);
    // A token id holds one `!` and no `=`; the secret follows the first `=` after the `!`.
    let split = line
        .find('!')
        .and_then(|bang| line[bang..].find('=').map(|eq| bang + eq));
    Some(match split {
        Some(eq) => (Some(line[..eq].to_owned()), line[eq + 1..].to_owned()),
        None => (None, line.to_owned()),
    })
}

/// Reads `--token-file`: `ID=SECRET` or the secret alone.
fn read_token(args: &PveCheckArgs) -> Result<(String, SecretString), PveCheckError> {
    let text = std::fs::read_to_string(&args.token_file).map_err(|e| PveCheckError::TokenFile {
        reason: format!("reading {}: {e}", args.token_file.display()),
    })?;
    let (id, secret) = split_token_text(&text).ok_or_else(|| PveCheckError::TokenFile {
        reason: format!("{} is empty", args.token_file.display()),
    })?;
    let id = match (id, &args.token_id) {
        (Some(file), Some(flag)) if &file != flag => {
            return Err(PveCheckError::Usage {
                what: "--token-id",
                reason: format!("the token file names {file}, not {flag}"),
            });
        }
        (Some(file), _) => file,
        (None, Some(flag)) => flag.clone(),
        (None, None) => BOSUN_AGENT_TOKEN_ID.to_owned(),
    };
    if secret.is_empty() || secret.chars().any(char::is_whitespace) {
        return Err(PveCheckError::TokenFile {
            reason: format!("{} holds no usable secret", args.token_file.display()),
        });
    }
    Ok((id, SecretString::from(secret)))
}

/// `--url`: `https://HOST:8006`, with `/api2/json` added when the path is empty.
pub(crate) fn api_base(url: &str) -> Result<reqwest::Url, PveCheckError> {
    let mut url = url.trim().to_owned();
    let Some(rest) = url.strip_prefix("https://") else {
        return Err(usage("--url")(format!("{url} is not https://")));
    };
    if rest.trim_end_matches('/').find('/').is_none() {
        url = format!("{}/api2/json", url.trim_end_matches('/'));
    }
    url.parse()
        .map_err(|e| usage("--url")(format!("{url}: {e}")))
}

/// `--fingerprint` or `--ca-file`: how the node's certificate is trusted.
pub(crate) fn tls_trust(
    fingerprint: Option<&String>,
    ca_file: Option<&PathBuf>,
) -> Result<TlsTrust, PveCheckError> {
    match (fingerprint, ca_file) {
        (Some(fingerprint), None) => {
            bosun_pve::parse_fingerprint(fingerprint).map_err(|_| {
                usage("--fingerprint")(format!(
                    "{fingerprint:?} is not a SHA-256 fingerprint (64 hex digits, colons allowed)"
                ))
            })?;
            Ok(TlsTrust::PinnedSha256(fingerprint.clone()))
        }
        (None, Some(ca)) => Ok(TlsTrust::CaFile(ca.clone())),
        _ => Err(usage("--fingerprint")(
            "give exactly one of --fingerprint and --ca-file".into(),
        )),
    }
}

impl Plan {
    fn from_args(args: &PveCheckArgs, policy: RetryPolicy) -> Result<Self, PveCheckError> {
        let base_url = api_base(&args.url)?;
        let (token_id, token_secret) = read_token(args)?;
        let trust = tls_trust(args.fingerprint.as_ref(), args.ca_file.as_ref())?;
        let node = args
            .node
            .as_deref()
            .map(NodeName::new)
            .transpose()
            .map_err(|e| usage("--node")(e.to_string()))?;
        let storage = args
            .storage
            .as_deref()
            .map(StorageId::new)
            .transpose()
            .map_err(|e| usage("--storage")(e.to_string()))?;
        let backup_storage = args
            .backup_storage
            .as_deref()
            .map(StorageId::new)
            .transpose()
            .map_err(|e| usage("--backup-storage")(e.to_string()))?;
        let golden = args
            .golden
            .as_deref()
            .map(VolumeId::new)
            .transpose()
            .map_err(|e| usage("--golden")(e.to_string()))?;
        if args.scratch && golden.is_none() {
            return Err(usage("--scratch")("needs --golden".into()));
        }
        // `GET /version` and `GET /nodes` name no node; the client needs one to exist.
        let first_node = match &node {
            Some(node) => node.clone(),
            None => NodeName::new("localhost").map_err(|e| usage("--node")(e.to_string()))?,
        };
        let config = PveConfig {
            base_url,
            node: first_node,
            token_id,
            token_secret,
            trust,
            policy,
        };
        Ok(Self {
            config,
            node,
            storage,
            backup_storage,
            golden,
            scratch: args.scratch,
        })
    }

    fn client(&self, node: NodeName) -> Result<PveClient, PveError> {
        let mut config = self.config.clone();
        config.node = node;
        PveClient::new(config)
    }
}

/// Runs every check against the node and gives the report. `cancel` (Ctrl-C in the command)
/// stops the scratch guest's steps; its cleanup still runs.
pub async fn check(
    args: &PveCheckArgs,
    policy: RetryPolicy,
    cancel: impl Future<Output = ()>,
) -> Result<Report, PveCheckError> {
    let plan = Plan::from_args(args, policy)?;
    let mut report = Report::new(
        plan.config.base_url.to_string(),
        plan.config.token_id.clone(),
    );
    let probe = match plan.client(plan.config.node.clone()) {
        Ok(client) => client,
        Err(e) => {
            report.checks.push(checks::connect_failed(&plan, &e));
            return Ok(report.finish());
        }
    };
    let Some(version) = checks::connect(&probe, &plan, &mut report).await else {
        return Ok(report.finish());
    };
    report.checks.push(checks::version(&version));
    let Some(node) = checks::node(&probe, &plan, &mut report).await else {
        return Ok(report.finish());
    };
    report.node = Some(node.to_string());
    let client = match plan.client(node.clone()) {
        Ok(client) => client,
        Err(e) => {
            report.checks.push(checks::connect_failed(&plan, &e));
            return Ok(report.finish());
        }
    };
    report
        .checks
        .push(checks::cluster(&client, &plan.config.token_id).await);
    let privileges_ok = checks::privileges(&client, &plan, &mut report).await;
    guest_reach::check(&client, &plan, &version.release, &mut report).await;
    firewall::guest_firewall(&client, &plan, &mut report).await;
    let storages = checks::storages(&client, &plan, &mut report).await;
    report.checks.push(tunnel::check(&args.cloudflared).await);
    let golden_ok = match &plan.golden {
        Some(golden) => checks::golden(&client, golden, &mut report).await,
        None => false,
    };
    if plan.scratch {
        let golden = plan.golden.clone();
        match (privileges_ok, storages, golden_ok, golden) {
            (true, (Some(rootdir), Some(backup)), true, Some(golden)) => {
                let target = scratch::Target {
                    golden,
                    rootdir,
                    backup,
                };
                scratch::run(&client, &target, &mut report, cancel).await;
            }
            _ => report.checks.push(Check::skip(
                "scratch-restore",
                "not run: fix the failed checks above first",
            )),
        }
    }
    Ok(report.finish())
}
