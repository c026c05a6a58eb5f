//! `bosun-agentctl`'s command line: the program (`src/main.rs`) parses it, and the
//! workspace's command census parses every `bosun-agentctl …` the sources and docs name with
//! it.

use std::path::PathBuf;
use std::time::Duration;

use bosun_agentd::config::DEFAULT_PATH;
use clap::{Parser, Subcommand};

use crate::enroll::EnrollOptions;
use crate::escrow::command::SheetOptions;

/// What an operator runs on a Bosun host beside the agent, as the agent's user (`sudo -u
/// bosun`).
#[derive(Debug, Parser)]
#[command(name = "bosun-agentctl", version)]
pub struct Args {
    /// The agent's config file.
    #[arg(long, global = true, default_value = DEFAULT_PATH, env = "BOSUN_AGENT_CONFIG")]
    pub config: PathBuf,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// What `bosun-agentctl` does.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show this host's id, its sealing recipient (what `bosunctl hosts approve --recipient`
    /// pins) and where its link to the hub stands (connected, unreachable, pending approval,
    /// refused, stopped), as the running agent last wrote it.
    Status,
    /// Enroll this host at the hub and make the escrow of its PBS key with the customer
    /// present: the recovery sheet is printed once, here. Run it before the agent's first
    /// start (it refuses while the agent runs); run it again to finish one that stopped.
    Enroll(EnrollArgs),
    /// Replace the local API certificate and re-issue every guest's bootstrap (new pin, new
    /// token). Refuses while the agent runs: stop bosun-agentd first, start it afterwards.
    RotateLocalApiCert,
    /// The escrow of the PBS encryption key under the customer's recovery code.
    #[command(subcommand)]
    Escrow(EscrowCommand),
    /// Break-glass from the node's console, for when the agent itself is wedged and the hub
    /// cannot deliver the operator's signed job through it.
    #[command(subcommand)]
    BreakGlass(BreakGlassCommand),
    /// Show an operation (or every operation of a correlation id) and its steps, from this
    /// host's agent journal. `bosunctl explain --host H` reads them through the hub.
    Explain(crate::explain::ExplainArgs),
    /// Print the shell completion script (the package installs them).
    Completions(bosun_clidoc::CompletionsArgs),
    /// Write the man pages into a directory (the package installs them).
    #[command(hide = true)]
    Man(bosun_clidoc::ManArgs),
}

/// `bosun-agentctl break-glass …`.
#[derive(Debug, Subcommand)]
pub enum BreakGlassCommand {
    /// Open the break-glass door with the operator's signed `break-glass-enable` job (and its
    /// `.sig`): checked exactly as the agent checks the job the hub delivers (signature by
    /// allowed_signers, expiry, this host, nonce and replay), audited, and refused otherwise.
    Open(crate::break_glass::OpenArgs),
}

/// `bosun-agentctl escrow …`.
#[derive(Debug, Subcommand)]
pub enum EscrowCommand {
    /// Make the recovery code, print its sheet, store the wrapped key at the hub. Run once,
    /// at enrollment, with the customer present; refuses when an escrow exists.
    Create(SheetArgs),
    /// Replace the recovery code and make a new key for future backups: the new code opens
    /// the new key and every older one; the old code opens only the keys it always opened.
    Rotate(SheetArgs),
    /// Bring the PBS encryption key back with the recovery code (on a box that took over a
    /// lost host). Prompts on a terminal; reads the words from stdin otherwise.
    Recover {
        /// The wrapped key from a file (the hub's JSON, or the block printed on the sheet)
        /// instead of from the hub.
        #[arg(long, value_name = "FILE", conflicts_with = "paper_key")]
        blob: Option<PathBuf>,
        /// Read the paper key printed on the sheet (14 groups of 4 characters) instead of
        /// the 12 words; it brings back the key the sheet was made with, without the hub.
        #[arg(long)]
        paper_key: bool,
    },
    /// Show whether this host's key has an escrow.
    Status,
}

/// The recovery sheet's arguments (`escrow create` and `escrow rotate`).
#[derive(Debug, clap::Args)]
pub struct SheetArgs {
    /// The directory the recovery sheet's PDF is written to.
    #[arg(long, value_name = "DIR")]
    pub sheet: PathBuf,
    /// Also print the wrapped key on the sheet, so recovery works even without the hub.
    #[arg(long)]
    pub include_blob: bool,
    /// Also print the key itself on the sheet, as 14 groups of 4 characters that
    /// `escrow recover --paper-key` reads back: anyone holding the paper reads every backup,
    /// and it cannot be revoked.
    #[arg(long)]
    pub paper_key: bool,
    /// The customer the server belongs to, printed on the sheet (at most 64 characters).
    #[arg(long, value_name = "NAME", value_parser = party)]
    pub customer: Option<String>,
    /// The hoster's name, printed on the sheet in place of any branding and in its steps.
    #[arg(long, value_name = "NAME", value_parser = party)]
    pub operator_name: Option<String>,
    /// How the customer reaches the hoster on the day of a loss (a phone number, an
    /// address), printed on the sheet.
    #[arg(long, value_name = "TEXT", value_parser = party)]
    pub operator_contact: Option<String>,
    /// The scrypt work factor (log2 N).
    #[arg(long, hide = true, default_value_t = crate::escrow::wrap::WORK_FACTOR,
          value_parser = clap::value_parser!(u8).range(10..=i64::from(crate::escrow::wrap::MAX_WORK_FACTOR)))]
    pub work_factor: u8,
}

/// A customer or operator field that is not one.
#[derive(Debug, thiserror::Error)]
#[error(
    "must be 1 to {} characters, not all blank, without control characters",
    crate::escrow::sheet::MAX_PARTY_CHARS
)]
pub struct NotAParty;

/// A customer or operator field: 1 to 120 characters, no control characters.
pub fn party(value: &str) -> Result<String, NotAParty> {
    if crate::escrow::sheet::is_party(value) {
        Ok(value.to_owned())
    } else {
        Err(NotAParty)
    }
}

/// `enroll`'s arguments: the sheet's (as `escrow create`'s), or `--escrow-later`.
#[derive(Debug, clap::Args)]
pub struct EnrollArgs {
    /// The directory the recovery sheet's PDF is written to.
    #[arg(long, value_name = "DIR", required_unless_present = "escrow_later")]
    pub sheet: Option<PathBuf>,
    /// Enroll without the customer: no recovery code now. The hub alerts `escrow_missing`
    /// (once the host backs up to PBS) until `bosun-agentctl escrow create` runs with them.
    #[arg(long, conflicts_with_all = ["sheet", "include_blob", "paper_key", "customer"])]
    pub escrow_later: bool,
    /// Also print the wrapped key on the sheet, so recovery works even without the hub.
    #[arg(long)]
    pub include_blob: bool,
    /// Also print the key itself on the sheet (14 groups of 4 characters): anyone holding the
    /// paper reads every backup, and it cannot be revoked.
    #[arg(long)]
    pub paper_key: bool,
    /// The customer the server belongs to, printed on the sheet.
    #[arg(long, value_name = "NAME", value_parser = party)]
    pub customer: Option<String>,
    /// The hoster's name, printed on the sheet.
    #[arg(long, value_name = "NAME", value_parser = party)]
    pub operator_name: Option<String>,
    /// How the customer reaches the hoster on the day of a loss, printed on the sheet.
    #[arg(long, value_name = "TEXT", value_parser = party)]
    pub operator_contact: Option<String>,
    /// How long to wait, in seconds, for an operator to approve the host (a token made with
    /// `--require-approval`) before the escrow can be stored at the hub.
    #[arg(long, value_name = "SECONDS", default_value_t = 900,
          value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub approval_wait: u64,
    /// The scrypt work factor (log2 N).
    #[arg(long, hide = true, default_value_t = crate::escrow::wrap::WORK_FACTOR,
          value_parser = clap::value_parser!(u8).range(10..=i64::from(crate::escrow::wrap::MAX_WORK_FACTOR)))]
    pub work_factor: u8,
}

impl EnrollArgs {
    /// What `enroll` is asked to do.
    pub fn options(&self) -> EnrollOptions {
        EnrollOptions {
            sheet: self.sheet.clone().map(|dir| SheetOptions {
                dir,
                include_blob: self.include_blob,
                paper_key: self.paper_key,
                customer: self.customer.clone(),
                operator: self.operator_name.clone(),
                operator_contact: self.operator_contact.clone(),
                work_factor: self.work_factor,
            }),
            approval_wait: Duration::from_secs(self.approval_wait),
        }
    }
}
