//! `bosun-agentctl enroll`: its arguments and what it prints
//! ([`bosun_agentctl::enroll`] does the work).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use bosun_agentctl::enroll::{EnrollOptions, EscrowOutcome};
use bosun_agentctl::escrow::command::SheetOptions;
use bosun_agentd::config::AgentConfig;
use bosun_agentd::runtime::program;

/// `enroll`'s arguments: the sheet's (as `escrow create`'s), or `--escrow-later`.
#[derive(Debug, clap::Args)]
pub struct EnrollArgs {
    /// The directory the recovery sheet's PDF is written to.
    #[arg(long, value_name = "DIR", required_unless_present = "escrow_later")]
    sheet: Option<PathBuf>,
    /// Enroll without the customer: no recovery code now. The hub alerts `escrow_missing`
    /// (once the host backs up to PBS) until `bosun-agentctl escrow create` runs with them.
    #[arg(long, conflicts_with_all = ["sheet", "include_blob", "paper_key", "customer"])]
    escrow_later: bool,
    /// Also print the wrapped key on the sheet, so recovery works even without the hub.
    #[arg(long)]
    include_blob: bool,
    /// Also print the key itself on the sheet (14 groups of 4 characters): anyone holding the
    /// paper reads every backup, and it cannot be revoked.
    #[arg(long)]
    paper_key: bool,
    /// The customer the server belongs to, printed on the sheet.
    #[arg(long, value_name = "NAME", value_parser = crate::party)]
    customer: Option<String>,
    /// The hoster's name, printed on the sheet.
    #[arg(long, value_name = "NAME", value_parser = crate::party)]
    operator_name: Option<String>,
    /// How the customer reaches the hoster on the day of a loss, printed on the sheet.
    #[arg(long, value_name = "TEXT", value_parser = crate::party)]
    operator_contact: Option<String>,
    /// How long to wait, in seconds, for an operator to approve the host (a token made with
    /// `--require-approval`) before the escrow can be stored at the hub.
    #[arg(long, value_name = "SECONDS", default_value_t = 900,
          value_parser = clap::value_parser!(u64).range(0..=86_400))]
    approval_wait: u64,
    /// The scrypt work factor (log2 N).
    #[arg(long, hide = true, default_value_t = bosun_agentctl::escrow::wrap::WORK_FACTOR,
          value_parser = clap::value_parser!(u8).range(10..=i64::from(bosun_agentctl::escrow::wrap::MAX_WORK_FACTOR)))]
    work_factor: u8,
}

impl EnrollArgs {
    fn options(&self) -> EnrollOptions {
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

/// Runs `enroll`; exit codes in
/// [`EnrollError::exit_code`](bosun_agentctl::enroll::EnrollError::exit_code).
pub fn run(config: &AgentConfig, args: &EnrollArgs) -> ExitCode {
    let runtime = match program::tokio_runtime("bosun-agentctl") {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let hostname = bosun_agentd::runtime::local_hostname(config);
    let enrolled = match runtime.block_on(bosun_agentctl::enroll::enroll(
        config,
        &args.options(),
        &hostname,
    )) {
        Ok(enrolled) => enrolled,
        Err(e) => {
            let code = e.exit_code();
            eprintln!("bosun-agentctl: {:#}", anyhow::Error::new(e));
            return ExitCode::from(code);
        }
    };
    let how = if enrolled.enrolled_now {
        "enrolled now"
    } else {
        "enrolled before"
    };
    println!("host: {} ({how})", enrolled.host_id);
    println!("sealing recipient: {}", enrolled.recipient);
    match &enrolled.escrow {
        EscrowOutcome::Made { sheet, fingerprint } => {
            println!("recovery sheet: {}", sheet.display());
            println!("key fingerprint: {fingerprint}");
            crate::print_sheet_advice(sheet);
        }
        EscrowOutcome::Exists {
            fingerprint,
            created_at,
        } => println!(
            "escrow: stored for key {fingerprint} since {created_at}; its recovery code is not \
             shown again (`bosun-agentctl escrow rotate` makes a new one)"
        ),
        EscrowOutcome::Deferred => println!(
            "escrow: none yet (--escrow-later). Make it with the customer: bosun-agentctl \
             escrow create --sheet DIR; until then the hub alerts escrow_missing once this host \
             backs up to PBS"
        ),
        EscrowOutcome::RestoreMode { replaces } => println!(
            "escrow: this box takes over the lost host {replaces}; bring its key back with \
             the customer's words: bosun-agentctl escrow recover"
        ),
    }
    println!("next: systemctl enable --now bosun-agentd");
    ExitCode::SUCCESS
}
