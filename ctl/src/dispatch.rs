//! Runs a parsed command line: the commands that need no hub connection first, then the
//! hub's, each in its own module.

use crate::cli::{Cli, Command};
use crate::client::connect;
use crate::error::CtlError;
use crate::{
    alerts, artifact, audit, completion, desired, enroll_token, explain, golden, hosts, hub, job,
    job_sign, man, outln, plan, policy, pve_check, resolve, secret, status, tokens,
};

/// Installs the ring crypto provider as the process default (idempotent).
pub fn install_crypto_provider() {
    // A second call finds a provider already installed; that is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Runs a parsed command line.
pub async fn dispatch(cli: Cli) -> Result<(), CtlError> {
    let global = &cli.global;
    crate::width::set_wide(global.wide);
    // Commands that need no hub connection.
    match &cli.command {
        Command::Hub(command) => return hub::run(global, command).await,
        Command::Completions(args) => {
            return completion::write(
                Cli::command_line(),
                args.shell,
                &mut std::io::stdout().lock(),
            );
        }
        Command::CompleteHosts => return completion::print_hosts(global).await,
        Command::Man(args) => {
            for page in bosun_clidoc::write_man_pages(
                Cli::command_line(),
                &args.dir,
                &args.date(),
                &man::extras(),
            )
            .map_err(CtlError::Docs)?
            {
                outln!("{}", page.display())?;
            }
            return Ok(());
        }
        Command::Pve(pve_check::PveCommand::Check(args)) => {
            return crate::pve_cmd::check(args, global.json()).await;
        }
        Command::Pve(pve_check::PveCommand::Setup(args)) => {
            return crate::pve_cmd::setup(args, global.json()).await;
        }
        Command::Explain(args) => return explain::run(args, global).await,
        Command::Golden(command) => return golden::run(command, global).await,
        Command::Policy(policy::PolicyCommand::SignFloor(args)) => {
            let host = resolve::host_id_offline(global, &args.host).await?;
            return policy::sign_floor(args, host);
        }
        Command::Policy(policy::PolicyCommand::SignPlan(args)) => {
            let host = resolve::host_id_offline(global, &args.host).await?;
            return plan::sign_plan(args, host);
        }
        Command::Policy(policy::PolicyCommand::DerivePlan(args)) => {
            return plan::derive_plan(args);
        }
        Command::Job(job::JobCommand::Authoring(command)) => {
            return job_sign::run(command, global).await;
        }
        _ => {}
    }
    let client = connect(global)?;
    let json = global.json();
    match &cli.command {
        Command::Hub(_)
        | Command::Explain(_)
        | Command::Pve(_)
        | Command::Completions(_)
        | Command::CompleteHosts
        | Command::Man(_)
        | Command::Golden(_)
        | Command::Policy(_) => Ok(()),
        Command::EnrollToken(command) => enroll_token::run(&client, json, command).await,
        Command::Tokens(command) => tokens::run(&client, json, command).await,
        Command::Hosts(command) => hosts::run(&client, global, command).await,
        Command::Desired(command) => desired::run(&client, json, command).await,
        Command::Job(command) => job::run(&client, global, command).await,
        Command::Fleet(command) => crate::fleet::run(&client, global, command).await,
        Command::Secret(command) => secret::run(&client, global, command).await,
        Command::Status(args) => status::run(&client, json, args).await,
        Command::Alerts(args) => alerts::alerts(&client, json, args).await,
        Command::Events(args) => alerts::events(&client, json, args).await,
        Command::Audit(args) => audit::run(&client, json, args).await,
        Command::Artifact(command) => artifact::run(&client, json, command).await,
    }
}
