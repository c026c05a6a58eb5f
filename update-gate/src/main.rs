//! `bosun-update-gate`: watches the agent update on trial to its verdict (see the library).

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.is_empty() {
        eprintln!(
            "usage: bosun-update-gate (no arguments; settings in /etc/bosun/update-gate.json)"
        );
        return ExitCode::from(64);
    }
    let config = match bosun_update_gate::config::load() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("bosun-update-gate: {}", bosun_errchain::error_chain(&e));
            return ExitCode::from(78);
        }
    };
    match bosun_update_gate::run(&config) {
        Ok(outcome) => {
            eprintln!("bosun-update-gate: done: {outcome:?}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bosun-update-gate: {}", bosun_errchain::error_chain(&e));
            ExitCode::FAILURE
        }
    }
}
