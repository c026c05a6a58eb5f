//! `bosunctl`: parse, dispatch, map the outcome to an exit code.

use std::process::ExitCode;

use bosunctl::cli::Cli;
use bosunctl::error::exit;

fn main() -> ExitCode {
    let cli = match Cli::try_parse_line() {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return ExitCode::from(if err.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            });
        }
    };
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
            eprintln!("bosunctl: starting the runtime: {err}");
            return ExitCode::from(exit::HUB_ERROR);
        }
    };
    match runtime.block_on(bosunctl::dispatch(cli)) {
        Ok(()) => ExitCode::from(exit::OK),
        Err(err) if err.is_closed_pipe() || err.already_reported() => {
            ExitCode::from(err.exit_code())
        }
        Err(err) => {
            bosunctl::errln!("bosunctl: {}", bosun_errchain::error_chain(&err));
            ExitCode::from(err.exit_code())
        }
    }
}
