//! `bosun-helper`: the closed set of root operations.
//!
//! One process per request. [`run`] takes every call through the same steps, in
//! this order, before anything the caller asked for happens:
//!
//! 1. keep the only environment variable consulted (`SUDO_UID`, read by `main`), then
//!    empty the environment and fix `PATH` ([`sys`]); programs start with an empty
//!    environment plus that `PATH` ([`exec`]);
//! 2. close inherited descriptors above stderr ([`sys`]);
//! 3. pick the transport from the command line and load the root-owned configuration
//!    ([`config`]);
//! 4. check the caller: socket peer credentials, or `SUDO_UID`, must be the agent user
//!    ([`caller`]);
//! 5. read exactly one bounded request and parse it into the closed [`Request`] enum,
//!    whose arguments validate as they parse;
//! 6. drop to the verb's capability set and set `no_new_privs` ([`privs`]);
//! 7. act ([`verbs`]), answer on stdout, then write one audit line on stderr
//!    ([`audit`]).
//!
//! Under socket activation the helper runs in the host's mount namespace (the socket
//! unit has no sandboxing that would give it a private one), so its mounts are visible
//! to Proxmox; the agent's own unit (`ProtectSystem=strict`, private mounts) would hide
//! them, which is why the agent never mounts anything itself.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod audit;
pub mod caller;
pub mod config;
pub mod error;
pub mod exec;
pub mod fsops;
pub mod privs;
pub mod sys;
pub mod verbs;

use std::ffi::OsString;
use std::io::Write;

use bosun_proto::helper::{HelperUnit, Request, Response};

use crate::audit::Record;
use crate::caller::Transport;
use crate::error::HelperError;

/// Handles one call: `args` are the arguments after the program name, `sudo_uid`
/// the value of `SUDO_UID` at start. Must be called before any thread is started
/// (it resets the process environment). Returns the exit code: 0 done, 1 failed (or the
/// answer could not be written), 2 refused.
pub fn run(args: &[OsString], sudo_uid: Option<OsString>) -> u8 {
    sys::reset_environment();
    let transport = "unknown";
    let mut record = Record {
        transport,
        ..Record::default()
    };
    let response = match serve(args, sudo_uid, &mut record) {
        Ok(output) => Response::Ok { output },
        Err(err) => err.to_response(),
    };
    let mut code = match response {
        Response::Ok { .. } => 0,
        Response::Failed { .. } => 1,
        Response::Refused { .. } => 2,
    };
    if let Err(err) = answer(&response) {
        code = 1;
        eprintln!("bosun-helper: {}", bosun_errchain::error_chain(&err));
    }
    eprintln!("{}", audit::line(&record, &response));
    code
}

fn serve(
    args: &[OsString],
    sudo_uid: Option<OsString>,
    record: &mut Record,
) -> Result<bosun_proto::helper::Output, HelperError> {
    sys::close_inherited_fds().map_err(HelperError::setup("closing inherited descriptors"))?;
    let euid = rustix::process::geteuid().as_raw();
    if euid != 0 {
        return Err(HelperError::NotRoot(euid));
    }
    let transport = Transport::from_args(args)?;
    record.transport = transport.name();
    if let Transport::Sudo { verb } = transport {
        record.verb = Some(verb.as_str());
    }
    let loaded = config::load().map_err(HelperError::Config)?;
    let uid = caller::caller_uid(transport, sudo_uid.as_ref())?;
    record.caller_uid = Some(uid);
    caller::check(transport, uid, loaded.agent_uid)?;

    let bytes = caller::read_request(transport)?;
    let request: Request = serde_json::from_slice(&bytes).map_err(HelperError::ParseRequest)?;
    let verb = request.verb();
    record.verb = Some(verb.as_str());
    record.args = Some(audit::redacted_args(&request));
    match transport {
        Transport::Sudo { verb: argv } if argv != verb => {
            let (request, argv) = (verb.as_str(), argv.as_str());
            return Err(HelperError::VerbMismatch(request, argv));
        }
        // A unit's sandbox is sized to its own verbs (decision 0071).
        Transport::Socket { unit } if HelperUnit::of(verb) != unit => {
            return Err(HelperError::WrongUnit(verb.as_str(), unit.unit_name()));
        }
        _ => {}
    }

    record.caps = Some(privs::enter(verb)?);
    verbs::act(&request, &loaded.config)
}

fn answer(response: &Response) -> Result<(), HelperError> {
    let mut text = serde_json::to_vec(response).map_err(std::io::Error::from);
    let _ = text.as_mut().map(|t| t.push(b'\n'));
    let mut stdout = std::io::stdout().lock();
    let written = text
        .and_then(|t| stdout.write_all(&t))
        .and_then(|()| stdout.flush());
    written.map_err(HelperError::setup("writing the response"))
}

#[cfg(test)]
mod tests;
