//! `bosun-demo`: parse, run the demo, map the outcome to an exit code.

use std::process::ExitCode;

use clap::Parser;

/// A step failed (the message names it).
const STEP_FAILED: u8 = 10;

fn main() -> ExitCode {
    let args = bosun_demo::DemoArgs::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("BOSUN_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .log_internal_errors(false)
        .init();
    bosunctl::install_crypto_provider();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("bosun-demo: starting the runtime: {err}");
            return ExitCode::from(STEP_FAILED);
        }
    };
    match runtime.block_on(bosun_demo::run(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("bosun-demo: {}", bosun_errchain::error_chain(&err));
            ExitCode::from(STEP_FAILED)
        }
    }
}
