//! `bosunctl pve setup`: with an administrator's token the operator gives, writes on a Proxmox
//! VE node exactly what `bosunctl pve check` verifies (decision 0115): the roles `BosunAgent`
//! and `BosunGuest` (in the release's privilege names), the user `bosun@pve`, its
//! privilege-separated token `agent`, the pool `bosun`, and four ACL entries — `BosunAgent` on
//! `/` and `BosunGuest` on `/pool/bosun`, each to the user and to the token, propagated.
//!
//! - It reads first (`GET /version`, roles, users, pools, ACL) and writes only what is missing
//!   ([`plan::plan`]): a second run writes nothing and says so.
//! - Anything wider than that — a privilege beyond either role's list, another ACL entry for
//!   the user or the token (`BosunGuest` on `/vms`, `Administrator` anywhere), a token without
//!   privilege separation — is reported and fails the run (exit 12); `--remove-wider` takes
//!   the roles' extra privileges and the extra entries away.
//! - The administrator's token comes from `--admin-token-file` or `BOSUN_PVE_ADMIN_TOKEN`
//!   (`USER@REALM!TOKENID=SECRET`); it is never logged, printed or stored.
//! - The new token's secret, which Proxmox gives once, is written to `--secret-out` (created
//!   with mode 0600; an existing file is refused before anything changes), or else printed
//!   once on stdout.

pub mod plan;

use std::io::Write as _;
use std::path::{Path, PathBuf};

use bosun_pve::{
    BOSUN_AGENT_TOKEN_ID, BOSUN_AGENT_USER, BOSUN_POOL, NodeName, PoolId, Pve, PveClient,
    PveConfig, PveError, RetryPolicy,
};
use clap::Args;
use secrecy::{ExposeSecret as _, SecretString};

use crate::pve_check::{PveCheckError, api_base, split_token_text, tls_trust};
pub use plan::{Observed, Plan, PlanError, Step, Wider};

/// The environment variable that may hold the administrator's token.
pub const ADMIN_TOKEN_ENV: &str = "BOSUN_PVE_ADMIN_TOKEN";

/// Exit codes and output, for `--help`.
pub const EXIT_HELP: &str = "\
Exit codes (as every bosunctl command's):
  0   the node holds exactly what Bosun needs (after this run's changes, if any)
  2   bad usage (options), or --secret-out names a file that exists
  4   the administrator's token is unreadable or holds no token
  5   could not reach or authenticate to the node, or it refused a call
  12  something wider than Bosun needs is on the node (listed; --remove-wider removes it)

Each line says what was created, written, removed or found; the last says whether anything
changed. The new token's secret is written to --secret-out (mode 0600) or printed once.
With --output json: {\"format\":1, \"changed\":bool, \"wider_left\":N, \"lines\":[…],
\"token\":\"bosun@pve!agent=SECRET\" (only when printed)}.";

/// `bosunctl pve setup` options.
#[derive(Debug, Clone, Args)]
pub struct PveSetupArgs {
    /// The node's API, `https://HOST:8006` (`/api2/json` is added when the path is empty).
    #[arg(long, value_name = "URL")]
    pub url: String,
    /// File holding an administrator's API token, `USER@REALM!TOKENID=SECRET` (e.g. a
    /// `root@pam` token); else the variable BOSUN_PVE_ADMIN_TOKEN. Never stored.
    #[arg(long, value_name = "FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// SHA-256 fingerprint of the node's certificate (`pvenode cert info`).
    #[arg(long, value_name = "FP", required_unless_present = "ca_file")]
    pub fingerprint: Option<String>,
    /// Trust the node's certificate through this CA instead of a pin.
    #[arg(long, value_name = "FILE", conflicts_with = "fingerprint")]
    pub ca_file: Option<PathBuf>,
    /// Write the new token's secret here (created, mode 0600; the agent's
    /// `token_secret_file`) instead of printing it.
    #[arg(long, value_name = "FILE")]
    pub secret_out: Option<PathBuf>,
    /// Also take away what is wider than Bosun needs: extra privileges in BosunAgent or
    /// BosunGuest, and ACL entries for bosun@pve or its token other than the four setup writes.
    #[arg(long)]
    pub remove_wider: bool,
}

/// Why `pve setup` stopped.
#[derive(Debug, thiserror::Error)]
pub enum PveSetupError {
    /// `--url`, `--fingerprint` or `--ca-file` is unusable.
    #[error(transparent)]
    Options(#[from] PveCheckError),
    /// The administrator's token is unreadable or holds no token.
    #[error("the administrator's token ({source_name}): {reason}")]
    AdminToken {
        /// `--admin-token-file PATH` or the variable.
        source_name: String,
        /// Why.
        reason: String,
    },
    /// `--secret-out` names a file that exists (checked before anything changes).
    #[error("--secret-out {}: the file exists; setup never overwrites a secret", path.display())]
    SecretOutExists {
        /// The file.
        path: PathBuf,
    },
    /// Writing the new token's secret failed; the token exists on the node.
    #[error(
        "writing the new token's secret to {}; remove the token (pveum user token remove {BOSUN_AGENT_USER} agent) and run setup again",
        path.display()
    )]
    SecretOut {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The node answered something setup cannot plan from.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A call to the node failed.
    #[error("{step}")]
    Api {
        /// What setup was doing.
        step: String,
        /// The error.
        source: PveError,
    },
}

impl PveSetupError {
    /// The exit code, in `bosunctl`'s one scheme.
    pub fn exit_code(&self) -> u8 {
        use crate::exit;
        match self {
            Self::Options(e) => e.exit_code(),
            Self::AdminToken { .. } => exit::INPUT,
            Self::SecretOutExists { .. } => exit::USAGE,
            Self::SecretOut { .. } => exit::INPUT,
            Self::Plan(_) => exit::CHECK_FAILED,
            Self::Api { .. } => exit::UNREACHABLE,
        }
    }
}

fn api(step: impl Into<String>) -> impl FnOnce(PveError) -> PveSetupError {
    let step = step.into();
    move |source| PveSetupError::Api { step, source }
}

/// The administrator's token: the file, else the variable. Its id must be given.
fn admin_token(args: &PveSetupArgs) -> Result<(String, SecretString), PveSetupError> {
    let (source_name, text) = match &args.admin_token_file {
        Some(path) => (
            format!("--admin-token-file {}", path.display()),
            std::fs::read_to_string(path).map_err(|e| PveSetupError::AdminToken {
                source_name: format!("--admin-token-file {}", path.display()),
                reason: e.to_string(),
            })?,
        ),
        None => (
            ADMIN_TOKEN_ENV.to_owned(),
            std::env::var(ADMIN_TOKEN_ENV).map_err(|_| PveSetupError::AdminToken {
                source_name: ADMIN_TOKEN_ENV.to_owned(),
                reason: "give --admin-token-file or set the variable".to_owned(),
            })?,
        ),
    };
    let bad = |reason: &str| PveSetupError::AdminToken {
        source_name: source_name.clone(),
        reason: reason.to_owned(),
    };
    let text = SecretString::from(text);
    let (id, secret) = split_token_text(text.expose_secret()).ok_or_else(|| bad("empty"))?;
    let id = id.ok_or_else(|| bad("holds no token id: write USER@REALM!TOKENID=SECRET"))?;
    if secret.is_empty() || secret.chars().any(char::is_whitespace) {
        return Err(bad("holds no usable secret"));
    }
    if id == BOSUN_AGENT_TOKEN_ID {
        return Err(bad(
            "is Bosun's own token: setup needs an administrator's (root@pam!…)",
        ));
    }
    Ok((id, SecretString::from(secret)))
}

/// What one run did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// One line per change or finding, in order.
    pub lines: Vec<String>,
    /// Whether anything was written on the node.
    pub changed: bool,
    /// What is wider than Bosun needs and is still there.
    pub wider_left: usize,
    /// The new token's secret, when it was created and `--secret-out` was not given.
    pub secret: Option<SecretString>,
}

/// Reads what the node holds.
async fn observe(client: &PveClient) -> Result<Observed, PveSetupError> {
    Ok(Observed {
        roles: client.roles().await.map_err(api("reading the roles"))?,
        users: client.users().await.map_err(api("reading the users"))?,
        pools: client.pools().await.map_err(api("reading the pools"))?,
        acl: client.acl().await.map_err(api("reading the ACL"))?,
    })
}

fn wider_line(w: &Wider, removing: bool) -> String {
    let tail = if removing && w.removable() {
        "removing it (--remove-wider)"
    } else if w.removable() {
        "left as it is: run again with --remove-wider to remove it"
    } else {
        "left as it is: setup never changes an existing token"
    };
    match w {
        Wider::Role { role, extra } => {
            format!("wider: role {role} also holds {}; {tail}", extra.join(", "))
        }
        Wider::Acl(e) => format!(
            "wider: {} holds {} on {}{}; {tail} (pveum acl delete {} --roles {} --{} '{}')",
            e.ugid,
            e.roleid,
            e.path,
            if e.propagate { ", propagated" } else { "" },
            e.path,
            e.roleid,
            if e.ugid.contains('!') {
                "tokens"
            } else {
                "users"
            },
            e.ugid
        ),
        Wider::TokenWithoutPrivsep => format!(
            "wider: token {BOSUN_AGENT_TOKEN_ID} is not privilege-separated (it holds all its user holds); {tail} (pveum user token modify {BOSUN_AGENT_USER} agent --privsep 1)"
        ),
    }
}

/// Writes the new secret to `path`: created, never overwritten, mode 0600.
fn write_secret(path: &Path, secret: &SecretString) -> Result<(), PveSetupError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let err = |source| PveSetupError::SecretOut {
        path: path.to_owned(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(err)?;
    file.write_all(format!("{}\n", secret.expose_secret()).as_bytes())
        .map_err(err)?;
    file.sync_all().map_err(err)
}

/// Carries one step out; gives its line.
async fn apply(
    client: &PveClient,
    step: &Step,
    args: &PveSetupArgs,
    outcome: &mut Outcome,
) -> Result<String, PveSetupError> {
    Ok(match step {
        Step::CreateRole { role, privs } => {
            client
                .create_role(role, privs)
                .await
                .map_err(api(format!("creating role {role}")))?;
            format!("role {role}: created ({})", privs.join(","))
        }
        Step::AppendRole { role, privs } => {
            client
                .update_role(role, privs, true)
                .await
                .map_err(api(format!("adding to role {role}")))?;
            format!("role {role}: added {}", privs.join(","))
        }
        Step::NarrowRole {
            role,
            privs,
            removed,
        } => {
            client
                .update_role(role, privs, false)
                .await
                .map_err(api(format!("narrowing role {role}")))?;
            format!(
                "role {role}: removed {}; it holds {}",
                removed.join(","),
                privs.join(",")
            )
        }
        Step::CreateUser => {
            client
                .create_user(BOSUN_AGENT_USER, "Bosun host agent")
                .await
                .map_err(api(format!("creating user {BOSUN_AGENT_USER}")))?;
            format!("user {BOSUN_AGENT_USER}: created (no password: nobody logs in as it)")
        }
        Step::CreateToken => {
            let (user, tokenid) = BOSUN_AGENT_TOKEN_ID
                .split_once('!')
                .unwrap_or((BOSUN_AGENT_USER, "agent"));
            let token = client
                .create_token(user, tokenid, "bosun-agentd")
                .await
                .map_err(api(format!("creating token {BOSUN_AGENT_TOKEN_ID}")))?;
            match &args.secret_out {
                Some(path) => {
                    write_secret(path, &token.secret)?;
                    format!(
                        "token {}: created, privilege-separated; its secret is in {} (mode 0600)",
                        token.full_tokenid,
                        path.display()
                    )
                }
                None => {
                    outcome.secret = Some(token.secret);
                    format!(
                        "token {}: created, privilege-separated; its secret follows, shown this once",
                        token.full_tokenid
                    )
                }
            }
        }
        Step::CreatePool => {
            let pool = PoolId::new(BOSUN_POOL).map_err(|e| PveSetupError::Api {
                step: format!("pool id {BOSUN_POOL}"),
                source: PveError::Setup {
                    what: e.to_string(),
                    source: None,
                },
            })?;
            client
                .create_pool(&pool, "Bosun's guests: nothing else joins this pool")
                .await
                .map_err(api(format!("creating pool {BOSUN_POOL}")))?;
            format!("pool {BOSUN_POOL}: created")
        }
        Step::Acl(change) => {
            let what = if change.delete { "removed" } else { "written" };
            client.update_acl(change).await.map_err(api(format!(
                "writing the ACL entry {} {} {}",
                change.path, change.subject, change.role
            )))?;
            format!(
                "acl {} {} {}: {what}{}",
                change.path,
                change.subject,
                change.role,
                if change.delete { "" } else { ", propagated" }
            )
        }
    })
}

/// Runs setup against the node, recording what it did in `outcome` as it goes: when a step
/// fails, `outcome` still holds what was done before it (a new token's secret among it).
pub async fn setup(
    args: &PveSetupArgs,
    policy: RetryPolicy,
    outcome: &mut Outcome,
) -> Result<(), PveSetupError> {
    let base_url = api_base(&args.url)?;
    let trust = tls_trust(args.fingerprint.as_ref(), args.ca_file.as_ref())?;
    if let Some(path) = &args.secret_out
        && path.symlink_metadata().is_ok()
    {
        return Err(PveSetupError::SecretOutExists { path: path.clone() });
    }
    let (token_id, token_secret) = admin_token(args)?;
    let node = NodeName::new("localhost").map_err(|e| PveSetupError::Api {
        step: "the client".to_owned(),
        source: PveError::Setup {
            what: e.to_string(),
            source: None,
        },
    })?;
    let client = PveClient::new(PveConfig {
        base_url,
        node,
        token_id: token_id.clone(),
        token_secret,
        trust,
        policy,
    })
    .map_err(api("the client"))?;
    let version = client
        .version()
        .await
        .map_err(api(format!("connecting as {token_id}")))?;
    let observed = observe(&client).await?;
    let plan = plan::plan(
        &observed,
        &version.release,
        BOSUN_AGENT_TOKEN_ID,
        args.remove_wider,
    )?;
    tracing::info!(
        release = %version.release,
        admin = %token_id,
        steps = plan.steps.len(),
        wider = plan.wider.len(),
        "pve setup planned"
    );
    for w in &plan.wider {
        outcome.lines.push(wider_line(w, args.remove_wider));
        if !(args.remove_wider && w.removable()) {
            outcome.wider_left += 1;
        }
    }
    for step in &plan.steps {
        let line = apply(&client, step, args, outcome).await?;
        tracing::info!(step = %line, "pve setup");
        outcome.lines.push(line);
        outcome.changed = true;
    }
    outcome.lines.push(if outcome.changed {
        format!(
            "changed: Proxmox VE {} now holds what Bosun needs; check it with `bosunctl pve check`",
            version.release
        )
    } else {
        "nothing changed: the node already holds what Bosun needs".to_owned()
    });
    Ok(())
}

/// The `--output json` document: what the text prints, as one object.
#[derive(Debug, serde::Serialize)]
pub struct OutcomeJson<'a> {
    /// The document's version.
    pub format: u32,
    /// Whether anything was written on the node.
    pub changed: bool,
    /// How many things wider than Bosun needs are left on the node.
    pub wider_left: usize,
    /// The lines the text prints.
    pub lines: &'a [String],
    /// The new token, `bosun@pve!agent=SECRET`, when it was made and `--secret-out` was not
    /// given: shown this once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

#[cfg(test)]
mod tests;
