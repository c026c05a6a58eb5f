//! `bosun-agentctl enroll`: its arguments and what it prints
//! ([`bosun_agentctl::enroll`] does the work).

use std::process::ExitCode;

use bosun_agentctl::cli::EnrollArgs;
use bosun_agentctl::enroll::EscrowOutcome;
use bosun_agentd::config::AgentConfig;
use bosun_agentd::runtime::program;

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
