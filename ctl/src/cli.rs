//! The command line.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// `bosunctl`: the Bosun operator CLI.
#[derive(Debug, Parser)]
#[command(name = "bosunctl", version, about = "Bosun operator CLI")]
pub struct Cli {
    /// Connection and output options.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command accepts.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Hub URL (`https://host:port`).
    #[arg(long, global = true, env = "BOSUN_HUB_URL")]
    pub hub_url: Option<String>,
    /// SHA-256 fingerprint of the hub's certificate (printed by `bosun-hubd init`).
    #[arg(long, global = true, env = "BOSUN_HUB_FINGERPRINT")]
    pub fingerprint: Option<String>,
    /// Admin token (prefer the environment variable or --admin-token-file).
    #[arg(
        long,
        global = true,
        env = "BOSUN_ADMIN_TOKEN",
        hide_env_values = true,
        hide = true
    )]
    pub admin_token: Option<String>,
    /// File holding the admin token.
    #[arg(long, global = true)]
    pub admin_token_file: Option<PathBuf>,
    /// Config file (default `~/.config/bosun/ctl.json`).
    #[arg(long, global = true, env = "BOSUN_CTL_CONFIG")]
    pub config: Option<PathBuf>,
    /// Output format: `text` (tables for people) or `json` (the hub's JSON bodies, stable;
    /// see docs/bosunctl-json.md).
    #[arg(long, global = true, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    /// Same as `--output json`.
    #[arg(long = "json", id = "json", global = true)]
    pub json_flag: bool,
}

impl GlobalArgs {
    /// Whether the output is JSON (`--output json` or `--json`).
    pub fn json(&self) -> bool {
        self.json_flag || self.output == OutputFormat::Json
    }
}

/// What printing commands write to stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OutputFormat {
    /// Tables and sentences for people.
    #[default]
    Text,
    /// The hub's JSON bodies, one document per command (docs/bosunctl-json.md).
    Json,
}

/// Command groups.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Hub connection setup.
    #[command(subcommand)]
    Hub(crate::hub::HubCommand),
    /// One-time enrollment tokens.
    #[command(subcommand, name = "enroll-token")]
    EnrollToken(crate::enroll_token::EnrollTokenCommand),
    /// Enrolled hosts.
    #[command(subcommand)]
    Hosts(crate::hosts::HostsCommand),
    /// Desired state.
    #[command(subcommand)]
    Desired(crate::desired::DesiredCommand),
    /// Signed jobs.
    #[command(subcommand)]
    Job(crate::job::JobCommand),
    /// Secrets sealed to one host (storage credentials).
    #[command(subcommand)]
    Secret(crate::secret::SecretCommand),
    /// Golden archives: sign the choice of the archive new guests start from.
    #[command(subcommand)]
    Golden(crate::golden::GoldenCommand),
    /// Backup policy: sign a host's retention floor.
    #[command(subcommand)]
    Policy(crate::policy::PolicyCommand),
    /// Print operations and their journal steps, from this host's agent state or, with
    /// `--host`, through the hub.
    Explain(crate::explain::ExplainArgs),
    /// Hosts, guests, last backup and restore-test, alerts: one screen.
    Status(crate::status::StatusArgs),
    /// List alerts.
    Alerts(crate::alerts::AlertsArgs),
    /// List the event log.
    Events(crate::alerts::EventsArgs),
    /// Read the audit trail: what the agents did, newest first, by host, guest and time.
    Audit(crate::audit::AuditArgs),
    /// Run Bosun on this machine against a simulated Proxmox node, narrated.
    Demo(crate::demo::DemoArgs),
    /// A Proxmox VE node, directly (no hub): `pve check` before enrolling it.
    #[command(subcommand)]
    Pve(crate::pve_check::PveCommand),
    /// Print the shell completion script (the packages install them; this is for a
    /// copied binary): `bosunctl completions bash > ~/.local/share/bash-completion/completions/bosunctl`.
    Completions(bosun_clidoc::CompletionsArgs),
    /// Write bosunctl's man pages into a directory (the packages install them).
    #[command(hide = true)]
    Man(bosun_clidoc::ManArgs),
    /// The hub's host names, one a line, for the bash completion; prints nothing when the hub
    /// cannot be asked within 2 s.
    #[command(hide = true, name = "complete-hosts")]
    CompleteHosts,
    /// Files agents fetch from the hub (a new agent binary for a signed agent-update).
    #[command(subcommand)]
    Artifact(crate::artifact::ArtifactCommand),
}
