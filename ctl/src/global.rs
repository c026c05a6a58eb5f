//! The options every command accepts: how to reach the hub and what to print. A leaf that
//! every command module reads; the command line (`cli.rs`) flattens it in.

use std::path::PathBuf;

use clap::Args;

/// Options every command accepts.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Hub URL (`https://host:port`).
    #[arg(long, global = true, env = "BOSUN_HUB_URL")]
    pub hub_url: Option<String>,
    /// The hub's pin, as `bosun-hubd init` prints them: its key pin (`spki:…`) or its
    /// certificate's SHA-256 fingerprint.
    #[arg(long, global = true, env = "BOSUN_HUB_FINGERPRINT")]
    pub fingerprint: Option<String>,
    /// Operator token, of a role the command needs (prefer the environment variable or
    /// --admin-token-file).
    #[arg(
        long,
        global = true,
        env = "BOSUN_ADMIN_TOKEN",
        hide_env_values = true,
        hide = true
    )]
    pub admin_token: Option<String>,
    /// File holding the operator token (`bosun-hubd init`'s admin token, or one `bosunctl
    /// tokens create` made).
    #[arg(long, global = true)]
    pub admin_token_file: Option<PathBuf>,
    /// Config file (default `~/.config/bosun/ctl.json`).
    #[arg(long, global = true, env = "BOSUN_CTL_CONFIG")]
    pub config: Option<PathBuf>,
    /// Output format: `text` (tables for people) or `json` (the hub's JSON bodies, stable;
    /// see docs/bosunctl-json.md). `--output-format` is the same option under `pvesh`'s name.
    #[arg(
        long,
        visible_alias = "output-format",
        global = true,
        value_enum,
        default_value_t = OutputFormat::Text
    )]
    pub output: OutputFormat,
    /// Same as `--output json`.
    #[arg(long = "json", id = "json", global = true)]
    pub json_flag: bool,
    /// Text output: print every field whole, however wide. Without it lines fit 100 columns:
    /// ids are shortened to a prefix the hub resolves, a sealed secret is shown as its size
    /// and fingerprint, long fields are wrapped or cut with `…` (JSON is never cut).
    #[arg(long, global = true)]
    pub wide: bool,
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
