//! `bosun-agentctl`: what an operator runs on the host beside the agent: where the hub link
//! stands, the local API's certificate rotation, the escrow of the PBS encryption key
//! under the customer's recovery code, and an operation's steps in the agent's journal. A program of its own, so the daemon `bosun-agentd`
//! (which the self-update replaces) maps none of it: the escrow's recovery sheet (PDF,
//! fonts), the recovery code's words and its scrypt wrapping
//! (docs/decisions/0046-agent-commands-in-bosun-agentctl.md). It parses its arguments, logs
//! to standard error (standard output is its answer) and runs each command on the agent's
//! runtime ([`bosun_agentd::runtime::program`]).

use std::path::Path;
use std::process::ExitCode;

use bosun_agentctl::cli::{Args, BreakGlassCommand, Command, EscrowCommand, SheetArgs};
use bosun_agentd::config::AgentConfig;
use bosun_agentd::runtime::program::{self, LogTo};
use clap::{CommandFactory as _, Parser as _};

mod enroll_command;

fn main() -> ExitCode {
    let args = Args::parse();
    // Documentation of the command line needs no config.
    match &args.command {
        Command::Completions(docs) => return program::completions(Args::command(), docs),
        Command::Man(docs) => return program::man_pages(Args::command(), docs, &MAN_EXTRAS, false),
        Command::Explain(explain_args) if explain_args.state_dir.is_some() => {
            return explain(explain_args, None);
        }
        Command::Status
        | Command::Enroll(_)
        | Command::RotateLocalApiCert
        | Command::Escrow(_)
        | Command::BreakGlass(_)
        | Command::Explain(_) => {}
    }
    program::init_logging(LogTo::Stderr);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = match program::load_config("bosun-agentctl", &args.config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    match args.command {
        Command::Status => status(&config),
        Command::Enroll(enroll_args) => enroll_command::run(&config, &enroll_args),
        Command::RotateLocalApiCert => rotate(&config),
        Command::Escrow(command) => escrow(&config, command),
        Command::BreakGlass(command) => break_glass(&config, &command),
        Command::Explain(explain_args) => explain(&explain_args, Some(&config.state_dir)),
        Command::Completions(_) | Command::Man(_) => ExitCode::SUCCESS,
    }
}

/// What the man pages say besides the options.
const MAN_EXTRAS: bosun_clidoc::ManExtras<'static> = bosun_clidoc::ManExtras {
    exit_status: &[
        (0, "done"),
        (
            1,
            "failed (rotate-local-api-cert: a guest's new bootstrap could not be pushed; the agent pushes it once it runs; break-glass open: the door could not be written)",
        ),
        (
            64,
            "explain: the operation id or correlation id is not one; break-glass open: the job is not a break-glass-enable",
        ),
        (
            65,
            "escrow, enroll: the words or the blob do not fit (mistyped, another code, another host's blob)",
        ),
        (
            66,
            "explain: no journal, or no such operation in it; break-glass open: the job or its signature cannot be read",
        ),
        (69, "escrow, enroll: the hub could not be reached"),
        (70, "the runtime could not start"),
        (
            77,
            "break-glass open: the job was refused (signature, expiry, another host, a reused nonce, already run); the refusal is audited",
        ),
        (
            75,
            "the state does not allow it now: the agent runs (stop it first), an escrow exists (use rotate), nothing to rotate, not enrolled, the host waits for approval (enroll: run it again once approved), the journal cannot be opened (break-glass open)",
        ),
        (
            78,
            "the configuration is invalid (break-glass open: it names no helper)",
        ),
    ],
    environment: &[
        ("BOSUN_AGENT_CONFIG", "the agent's config file, as --config"),
        (
            "RUST_LOG",
            "what a command logs on standard error (a tracing filter; default info)",
        ),
    ],
    files: &[
        (
            "/etc/bosun/agent.toml",
            "the agent's configuration (agent.toml(5))",
        ),
        (
            "/var/lib/bosun",
            "the agent's state (0700, user bosun): its identity, the hub link as the agent last wrote it, the PBS key and its escrow record",
        ),
    ],
    examples: &[
        (
            "bosun-agentctl",
            &[(
                "sudo -u bosun bosun-agentctl status",
                "the host's id, its sealing recipient (what bosunctl hosts approve --recipient pins) and its link to the hub",
            )],
        ),
        (
            "bosun-agentctl-enroll",
            &[
                (
                    "sudo -u bosun bosun-agentctl enroll --sheet /run/bosun-recovery --customer \"Acme\" --operator-name \"Example Hosting\" --operator-contact \"+49 30 1234567\"",
                    "enroll with the customer present: the recovery sheet is printed once, here",
                ),
                (
                    "sudo -u bosun bosun-agentctl enroll --escrow-later",
                    "enroll without the customer; the hub alerts escrow_missing until `escrow create` runs",
                ),
            ],
        ),
        (
            "bosun-agentctl-escrow-create",
            &[(
                "sudo -u bosun bosun-agentctl escrow create --sheet /run/bosun-recovery --customer \"Acme\" --operator-name \"Example Hosting\" --operator-contact \"+49 30 1234567\"",
                "make the recovery code with the customer present and print its sheet",
            )],
        ),
        (
            "bosun-agentctl-escrow-recover",
            &[(
                "sudo -u bosun bosun-agentctl escrow recover",
                "on a box that took over a lost host: type the customer's words to bring the key back",
            )],
        ),
        (
            "bosun-agentctl-break-glass-open",
            &[(
                "sudo -u bosun bosun-agentctl break-glass open --file door.json",
                "the agent is wedged: open the door with the operator's signed break-glass-enable (door.json and door.json.sig, from bosunctl job new and job sign)",
            )],
        ),
        (
            "bosun-agentctl-explain",
            &[(
                "sudo -u bosun bosun-agentctl explain --correlation-id 01J9Z3",
                "the operations a desired-state change caused on this host, with their steps",
            )],
        ),
        (
            "bosun-agentctl-rotate-local-api-cert",
            &[(
                "systemctl stop bosun-agentd && sudo -u bosun bosun-agentctl rotate-local-api-cert; systemctl start bosun-agentd",
                "a new local API certificate, every guest's bootstrap re-issued",
            )],
        ),
    ],
};

/// Runs the rotation and prints one line per guest; exit 0 when every running guest got its
/// new bootstrap, 1 when a push failed (those guests get theirs once the agent runs again),
/// 75 (EX_TEMPFAIL) when the agent is running.
fn rotate(config: &AgentConfig) -> ExitCode {
    use bosun_agentd::guests::credentials::rotate::{
        GuestRotation, RotateError, rotate_local_api_cert,
    };
    let runtime = match program::tokio_runtime("bosun-agentctl") {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match runtime.block_on(rotate_local_api_cert(&config.rotation())) {
        Ok(report) => {
            println!("new local api fingerprint: {}", report.fingerprint);
            for (guest_id, vmid, outcome) in &report.guests {
                match outcome {
                    GuestRotation::Reissued => println!("{guest_id} vmid {vmid}: re-issued"),
                    GuestRotation::Deferred { reason } => println!(
                        "{guest_id} vmid {vmid}: deferred ({reason}); the agent pushes a new bootstrap once it runs"
                    ),
                    GuestRotation::Failed { error } => println!(
                        "{guest_id} vmid {vmid}: FAILED ({error}); the agent retries once it runs"
                    ),
                }
            }
            if report.has_failures() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            let code = match e {
                RotateError::DaemonRunning { .. } => 75,
                _ => 1,
            };
            eprintln!("bosun-agentctl: {:#}", anyhow::Error::new(e));
            ExitCode::from(code)
        }
    }
}

/// `status`: what the running agent last wrote of its hub link (it holds the state lock, so
/// this reads a file of its own, never the journal). Exit 0 when it could be read, 1 when not.
fn status(config: &AgentConfig) -> ExitCode {
    use bosun_agentd::links::hub::link::LinkRecord;
    use bosun_agentd::links::hub_client::identity::HostIdentity;
    let read = HostIdentity::load(&config.state_dir)
        .map_err(anyhow::Error::new)
        .and_then(|identity| {
            LinkRecord::load(&config.state_dir)
                .map(|record| (identity, record))
                .map_err(anyhow::Error::new)
        });
    let (identity, record) = match read {
        Ok(found) => found,
        Err(e) => {
            eprintln!("bosun-agentctl: {e:#}");
            return ExitCode::from(1);
        }
    };
    match &identity {
        Some(identity) => println!("host: {}", identity.host_id),
        None => println!("host: not enrolled yet (run `bosun-agentctl enroll`)"),
    }
    println!("hub: {}", config.hub.url);
    // What secrets for this host are sealed to: the operator pins it in bosunctl (`hosts
    // approve --recipient`, `hosts pin-recipient`) from here, never from the hub's word.
    match bosun_agentd::trust::keys::sealing::StorageIdentity::load(&config.state_dir) {
        Ok(Some(identity)) => println!("sealing recipient: {}", identity.recipient()),
        Ok(None) => println!("sealing recipient: none yet (the agent makes it on its first start)"),
        Err(e) => println!(
            "sealing recipient: unreadable ({})",
            bosun_errchain::error_chain(&e)
        ),
    }
    match record {
        Some(record) => {
            for line in record.describe(config.poll.pending_interval) {
                println!("{line}");
            }
        }
        None => println!("hub link: unknown (the agent has not run since it enrolled)"),
    }
    ExitCode::SUCCESS
}

/// `break-glass open`: the door's account, key and deadline on success; exit codes in
/// [`BreakGlassError::exit_code`](bosun_agentctl::break_glass::BreakGlassError::exit_code).
fn break_glass(config: &AgentConfig, command: &BreakGlassCommand) -> ExitCode {
    let runtime = match program::tokio_runtime("bosun-agentctl") {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let BreakGlassCommand::Open(args) = command;
    match runtime.block_on(bosun_agentctl::break_glass::open(config, args)) {
        Ok(result) => {
            for line in bosun_agentctl::break_glass::describe(&result) {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            let code = e.exit_code();
            eprintln!("bosun-agentctl: {:#}", anyhow::Error::new(e));
            ExitCode::from(code)
        }
    }
}

/// `explain`: prints the operation's records from the journal in `--state-dir`, else in the
/// config's state directory; exit codes in
/// [`ExplainError::exit_code`](bosun_agentctl::explain::ExplainError::exit_code).
fn explain(args: &bosun_agentctl::explain::ExplainArgs, config_dir: Option<&Path>) -> ExitCode {
    let state_dir = args
        .state_dir
        .as_deref()
        .or(config_dir)
        .unwrap_or(Path::new(""));
    let answer = args
        .wanted()
        .and_then(|wanted| bosun_agentctl::explain::explain(state_dir, &wanted, args.json));
    match answer {
        Ok(text) => {
            // The journal holds words of Proxmox and of guests: printed inert.
            let text = if args.json {
                bosun_proto::inert::escape_json_text(&text)
            } else {
                bosun_proto::inert::escape_but_newlines(&text)
            };
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            let code = e.exit_code();
            eprintln!("bosun-agentctl: {:#}", anyhow::Error::new(e));
            ExitCode::from(code)
        }
    }
}

/// Runs an escrow command; exit codes in
/// [`EscrowError::exit_code`](bosun_agentctl::escrow::command::EscrowError::exit_code).
fn escrow(config: &AgentConfig, command: EscrowCommand) -> ExitCode {
    use bosun_agentctl::escrow::command;
    use bosun_agentctl::escrow::command::{SheetOptions, WordSource};
    use bosun_agentd::trust::keys::pbs_key::Installed;
    let runtime = match program::tokio_runtime("bosun-agentctl") {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let sheet = |args: &SheetArgs| SheetOptions {
        dir: args.sheet.clone(),
        include_blob: args.include_blob,
        paper_key: args.paper_key,
        customer: args.customer.clone(),
        operator: args.operator_name.clone(),
        operator_contact: args.operator_contact.clone(),
        work_factor: args.work_factor,
    };
    let hostname = bosun_agentd::runtime::local_hostname(config);
    let result = match command {
        EscrowCommand::Create(args) => runtime
            .block_on(command::create(config, &sheet(&args), &hostname))
            .map(|created| {
                println!("recovery sheet: {}", created.sheet.display());
                println!("key fingerprint: {}", created.fingerprint);
                print_sheet_advice(&created.sheet);
            }),
        EscrowCommand::Rotate(args) => runtime
            .block_on(bosun_agentctl::escrow::rotate::rotate(
                config,
                &sheet(&args),
                &hostname,
            ))
            .map(|rotated| print_rotated(&rotated)),
        EscrowCommand::Recover { blob, paper_key } => {
            let mut stdin = std::io::stdin();
            let words = if rustix::termios::isatty(&stdin) {
                WordSource::Terminal
            } else {
                WordSource::Reader(&mut stdin)
            };
            let recovered = if paper_key {
                command::recover_paper_key(config, words)
            } else {
                runtime.block_on(command::recover(config, blob.as_deref(), words))
            };
            recovered.map(|recovered| {
                    match recovered.installed {
                        Installed::New => println!("pbs encryption key recovered and installed"),
                        Installed::AlreadyThere => println!("pbs encryption key already installed"),
                    }
                    println!("key fingerprint: {}", recovered.fingerprint);
                    for older in &recovered.older {
                        println!("older key: {older}");
                    }
                    println!(
                        "The agent adds the PBS storage with it at its next storage check (once the \
                         storage credentials are sealed to this host) and restores the host's guests \
                         from their newest PBS backups."
                    );
                })
        }
        EscrowCommand::Status => command::status(config).map(|status| {
            match &status.record {
                Some(r) => {
                    println!("escrow: stored for key {}", r.key_fingerprint);
                    println!("created: {}", r.created_at);
                    println!(
                        "current code made: {} (rotations: {})",
                        r.code_made_at, r.rotations
                    );
                }
                None => println!("escrow: none (run `bosun-agentctl escrow create --sheet DIR`)"),
            }
            if let Some(current) = &status.current {
                println!("current key: {current}");
            }
            for older in &status.older {
                println!("older key: {older}");
            }
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = e.exit_code();
            eprintln!("bosun-agentctl: {:#}", anyhow::Error::new(e));
            ExitCode::from(code)
        }
    }
}

pub(crate) fn print_sheet_advice(sheet: &std::path::Path) {
    println!(
        "Print the sheet now, twice; the customer keeps both copies offline, in different places. \
         Then delete the file (it holds the recovery code): shred -u {}",
        sheet.display()
    );
    println!(
        "The hub holds only the wrapped keys. If this host and every copy of the code are lost, \
         nobody (not the operator, not Bosun) can read the offsite backups."
    );
}

fn print_rotated(rotated: &bosun_agentctl::escrow::rotate::Rotated) {
    println!("recovery sheet: {}", rotated.sheet.display());
    println!("key fingerprint: {}", rotated.fingerprint);
    println!("previous key fingerprint: {}", rotated.previous);
    for older in &rotated.older {
        println!(
            "older key: {} (retired {})",
            older.fingerprint,
            older.retired_at.strftime("%Y-%m-%d %H:%M:%S UTC")
        );
    }
    print_sheet_advice(&rotated.sheet);
    println!(
        "The code was rotated with a new key: the new code opens the new key and every older \
         one. The old code still opens only the keys up to {} (backups made before this \
         rotation), never the new key. The agent switches the PBS storages to the new key at its \
         next storage check; backups from then on are encrypted with it.",
        rotated.previous
    );
}
