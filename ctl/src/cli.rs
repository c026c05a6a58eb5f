//! The command line.

use clap::{Parser, Subcommand};

use crate::global::GlobalArgs;

/// `bosunctl`: the Bosun operator CLI.
#[derive(Debug, Parser)]
#[command(
    name = "bosunctl",
    version,
    about = "Bosun operator CLI",
    long_about = "Bosun operator CLI.\n\nEvery list of things that happened (alerts, open \
                  alerts, silences, events, jobs, the audit trail, artifacts, enrollment \
                  tokens) is printed newest first, in text and JSON alike; --limit keeps the \
                  newest N. Hosts and operator tokens are listed by name."
)]
pub struct Cli {
    /// Connection and output options.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The command line as it parses and as help, completions and man pages show it: clap's,
    /// with the hub's connection options (`HUB_ONLY`) hidden under `pve check`, which talks
    /// to a Proxmox node and never to the hub (they still parse there, and do nothing).
    pub fn command_line() -> clap::Command {
        let cmd = <Self as clap::CommandFactory>::command();
        // A subcommand that already has an option of a global's id keeps its own when the
        // globals are propagated: `pve check` gets hidden copies of the hub's.
        let hidden: Vec<clap::Arg> = cmd
            .get_arguments()
            .filter(|arg| HUB_ONLY.contains(&arg.get_id().as_str()))
            .map(|arg| arg.clone().hide(true))
            .collect();
        cmd.mut_subcommand("pve", |pve| {
            pve.mut_subcommand("check", |check| check.args(hidden))
        })
    }

    /// Parses the process's arguments with [`Cli::command_line`].
    pub fn try_parse_line() -> Result<Self, clap::Error> {
        let matches = Self::command_line().try_get_matches()?;
        <Self as clap::FromArgMatches>::from_arg_matches(&matches)
    }
}

/// The global options that only say how to reach the hub.
const HUB_ONLY: [&str; 4] = ["hub_url", "admin_token", "admin_token_file", "config"];

/// Command groups.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Hub connection setup.
    #[command(subcommand)]
    Hub(crate::hub::HubCommand),
    /// One-time enrollment tokens.
    #[command(subcommand, name = "enroll-token")]
    EnrollToken(crate::enroll_token::EnrollTokenCommand),
    /// Operator tokens: who may call the hub, with which role.
    #[command(subcommand)]
    Tokens(crate::tokens::TokensCommand),
    /// Enrolled hosts.
    #[command(subcommand)]
    Hosts(crate::hosts::HostsCommand),
    /// Desired state.
    #[command(subcommand)]
    Desired(crate::desired::DesiredCommand),
    /// Signed jobs.
    #[command(subcommand)]
    Job(crate::job::JobCommand),
    /// The hosts a label and capability selector matches, at once: an agent update or a
    /// controller rollout in waves, canary first.
    #[command(subcommand)]
    Fleet(crate::fleet::FleetCommand),
    /// Secrets sealed to one host (storage credentials).
    #[command(subcommand)]
    Secret(crate::secret::SecretCommand),
    /// Golden archives: sign the choice of the archive new guests start from.
    #[command(subcommand)]
    Golden(crate::golden::GoldenCommand),
    /// Backup policy: sign a host's retention floor.
    #[command(subcommand)]
    Policy(crate::policy::PolicyCommand),
    /// Print operations and their journal steps, through the hub (`--host`); on the host
    /// itself, `bosun-agentctl explain` reads the agent's journal.
    Explain(crate::explain::ExplainArgs),
    /// Hosts, guests, last backup and restore-test, alerts: one screen.
    Status(crate::status::StatusArgs),
    /// List alerts, newest first.
    Alerts(crate::alerts::AlertsArgs),
    /// List the event log, newest first.
    Events(crate::alerts::EventsArgs),
    /// Read the audit trail: what the agents did, newest first, by host, guest and time.
    Audit(crate::audit::AuditArgs),
    /// A Proxmox VE node, directly (no hub): `pve setup` and `pve check` before enrolling it.
    #[command(subcommand)]
    Pve(crate::pve_check::PveCommand),
    /// Print the shell completion script (the packages install them; this is for a
    /// copied binary): `bosunctl completions bash > ~/.local/share/bash-completion/completions/bosunctl`.
    Completions(bosun_clidoc::CompletionsArgs),
    /// Write bosunctl's man pages into a directory (the packages install them; `make man`
    /// installs every program's from a source build).
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

#[cfg(test)]
mod tests {
    use super::*;

    fn long_help(path: &[&str]) -> String {
        let mut cmd = Cli::command_line();
        cmd.build();
        for name in path {
            cmd = cmd
                .find_subcommand(name)
                .unwrap_or_else(|| panic!("no subcommand {name}"))
                .clone();
        }
        cmd.render_long_help().to_string()
    }

    #[test]
    fn pve_check_shows_no_hub_options_and_still_parses_them() {
        let help = long_help(&["pve", "check"]);
        for hidden in ["--hub-url", "--admin-token-file", "--config"] {
            assert!(!help.contains(hidden), "{hidden} in:\n{help}");
        }
        for shown in ["--url", "--token-file", "--fingerprint", "--json"] {
            assert!(help.contains(shown), "{shown} missing from:\n{help}");
        }
        let hosts = long_help(&["hosts", "list"]);
        assert!(
            hosts.contains("--hub-url") && hosts.contains("--config"),
            "{hosts}"
        );

        let matches = Cli::command_line()
            .try_get_matches_from([
                "bosunctl",
                "pve",
                "check",
                "--url",
                "https://pve.example:8006",
                "--token-file",
                "/dev/null",
                "--fingerprint",
                "AA",
                "--hub-url",
                "https://hub.example",
            ])
            .unwrap();
        let cli = <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap();
        assert_eq!(cli.global.hub_url.as_deref(), Some("https://hub.example"));
        assert!(matches!(cli.command, Command::Pve(_)));
    }
}
