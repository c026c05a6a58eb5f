//! bosunctl's suites, built as one test binary: every `*.rs` file beside this one
//! is a suite module, and `common/` the harness they share.
//! One binary instead of one per suite keeps a clean build's target directory small and links
//! once (decision 0089). Run one suite with a filter on its module:
//! `cargo nextest run -p bosunctl cli::`.

mod common;

mod cli;
mod conventions;
mod fleet_dry_run;
mod golden_sign;
mod host_labels;
mod hosts_history;
mod hosts_remove;
mod hosts_rotate_key;
mod id_prefixes;
mod list_order;
mod remote_text;
mod secret_seal;
mod sign_floor;
mod text_width;
mod tokens;
mod views_agree;
