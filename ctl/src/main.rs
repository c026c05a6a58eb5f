//! `bosunctl`: parse, dispatch, map the outcome to an exit code.

use std::process::ExitCode;

use bosunctl::cli::{Cli, Command};
use bosunctl::error::exit;
use bosunctl::status::health::PLUGIN_UNKNOWN;
use bosunctl::status::{check_requested, unknown_line};

fn main() -> ExitCode {
    let cli = match Cli::try_parse_line() {
        Ok(cli) => cli,
        // A monitoring plugin answers a usage error UNKNOWN, with one line on stdout.
        Err(err) if err.use_stderr() && check_requested(std::env::args_os()) => {
            let _ = err.print();
            let first = err.to_string();
            let first = first.lines().next().unwrap_or_default();
            let _ = bosunctl::table::plugin_line(&unknown_line(&format!("usage: {first}")));
            return ExitCode::from(PLUGIN_UNKNOWN);
        }
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
    let check = matches!(&cli.command, Command::Status(args) if args.check);
    match runtime.block_on(bosunctl::dispatch(cli)) {
        Ok(()) => ExitCode::from(exit::OK),
        Err(err) if err.is_closed_pipe() || err.already_reported() => {
            ExitCode::from(err.exit_code())
        }
        // A config error (or any other) of a monitoring check: UNKNOWN, one line on stdout.
        Err(err) if check => {
            let chain = bosun_errchain::error_chain(&err);
            bosunctl::errln!("bosunctl: {chain}");
            let _ = bosunctl::table::plugin_line(&unknown_line(&chain));
            ExitCode::from(PLUGIN_UNKNOWN)
        }
        Err(err) => {
            bosunctl::errln!("bosunctl: {}", bosun_errchain::error_chain(&err));
            ExitCode::from(err.exit_code())
        }
    }
}
