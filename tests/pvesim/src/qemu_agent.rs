//! The QEMU guest agent's endpoints (`…/qemu/{vmid}/agent/…`) with qemu-server's checks in
//! its order ("No QEMU guest agent configured", "VM … is not running", "QEMU guest agent is not
//! running") and the agent's own answers and limits: `exec` captures at most 16 MiB of each
//! stream and marks the rest truncated, a process is forgotten once its exit was read, a frozen
//! guest refuses everything but the freeze commands and `ping`, `file-read` reads at most 16 MiB
//! and files are written into the named VM's tree only.

use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::api::{ApiError, Ctx, HandlerResult, data};
use crate::qemu::{Process, Vm, missing_config};

/// What the agent captures of each output stream of a `guest-exec` (QEMU's
/// `GUEST_EXEC_MAX_OUTPUT`).
pub(crate) const EXEC_MAX_OUTPUT: usize = 16 * 1024 * 1024;

/// The most `file-read` returns in one call (PVE's read loop stops at 16 MiB).
pub(crate) const FILE_READ_MAX: usize = 16 * 1024 * 1024;

const B64: base64::engine::general_purpose::GeneralPurpose =
    base64::engine::general_purpose::STANDARD;

fn agent_error(desc: &str) -> ApiError {
    ApiError::internal(&format!("Agent error: {desc}"))
}

/// Runs `f` on VM `vmid` once qemu-server's `assert_agent_available` holds; `command` is the
/// QGA command (`guest-…`) for the frozen-state refusal.
fn with_agent<T>(
    ctx: &Ctx,
    command: &str,
    f: impl FnOnce(&mut Vm) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    let vmid = ctx.vmid()?;
    let mut st = ctx.shared.state.lock();
    let vm = st
        .vms
        .get_mut(&vmid)
        .ok_or_else(|| ApiError::internal(&missing_config(ctx.node(), vmid)))?;
    if !vm.conf.contains_key("agent") {
        return Err(ApiError::internal("No QEMU guest agent configured"));
    }
    if !vm.running() {
        return Err(ApiError::internal(&format!("VM {vmid} is not running")));
    }
    if !vm.agent_answers() {
        return Err(ApiError::internal("QEMU guest agent is not running"));
    }
    let allowed_frozen = matches!(
        command,
        "guest-ping" | "guest-fsfreeze-status" | "guest-fsfreeze-thaw" | "guest-fsfreeze-freeze"
    );
    if vm.frozen && !allowed_frozen {
        return Err(agent_error(&format!(
            "Command {command} has been disabled: the agent is in frozen state"
        )));
    }
    f(vm)
}

/// `POST …/agent/ping`.
pub(crate) fn ping(ctx: &Ctx) -> HandlerResult {
    with_agent(ctx, "guest-ping", |_| Ok(()))?;
    data(json!({ "result": {} }))
}

/// `POST …/agent/fsfreeze-freeze`: the number of filesystems frozen.
pub(crate) fn fsfreeze(ctx: &Ctx) -> HandlerResult {
    let n = with_agent(ctx, "guest-fsfreeze-freeze", |vm| {
        if vm.frozen {
            return Err(agent_error(
                "Command guest-fsfreeze-freeze has been disabled: the agent is in frozen state",
            ));
        }
        vm.frozen = true;
        Ok(1)
    })?;
    data(json!({ "result": n }))
}

/// `POST …/agent/fsfreeze-thaw`: the number of filesystems thawed (0 when none was frozen).
pub(crate) fn fsthaw(ctx: &Ctx) -> HandlerResult {
    let n = with_agent(ctx, "guest-fsfreeze-thaw", |vm| {
        let n = u8::from(vm.frozen);
        vm.frozen = false;
        Ok(n)
    })?;
    data(json!({ "result": n }))
}

/// `POST …/agent/fsfreeze-status`.
pub(crate) fn fsstatus(ctx: &Ctx) -> HandlerResult {
    let frozen = with_agent(ctx, "guest-fsfreeze-status", |vm| Ok(vm.frozen))?;
    data(json!({ "result": if frozen { "frozen" } else { "thawed" } }))
}

/// How long a `sleep` the guest runs lasts (`sleep N` in seconds, the simulator's time scale
/// applied); `None` for any other program.
fn sleep_time(ctx: &Ctx, argv: &[String]) -> Option<Duration> {
    let (program, args) = argv.split_first()?;
    if !matches!(program.as_str(), "/bin/sleep" | "/usr/bin/sleep") {
        return None;
    }
    let secs: u64 = args.first()?.parse().ok()?;
    Some(ctx.shared.config.scaled(Duration::from_secs(secs)))
}

fn capped(mut bytes: Vec<u8>) -> (Vec<u8>, bool) {
    if bytes.len() > EXEC_MAX_OUTPUT {
        bytes.truncate(EXEC_MAX_OUTPUT);
        (bytes, true)
    } else {
        (bytes, false)
    }
}

/// `POST …/agent/exec`: starts the program in the guest's tree; answers its guest pid.
pub(crate) fn exec(ctx: &Ctx) -> HandlerResult {
    let argv: Vec<String> = serde_json::from_str(ctx.required("command")?)
        .map_err(|_| ApiError::param("command", "type check ('array') failed"))?;
    let input = ctx.get("input-data").map(str::to_owned);
    if argv.is_empty() && input.is_none() {
        return Err(ApiError::internal(
            "command or input-data (or both) required",
        ));
    }
    let sleep = sleep_time(ctx, &argv);
    let pid = with_agent(ctx, "guest-exec", |vm| {
        let (exit, stdout, stderr) = match sleep {
            Some(_) => (0, Vec::new(), Vec::new()),
            None => {
                let program = argv.first().map(String::as_str).unwrap_or_default();
                if !vm.files.executable(program) {
                    // What glib's spawn reports to the agent for a missing program.
                    return Err(agent_error(&format!(
                        "Failed to execute child process \u{201c}{program}\u{201d} (No such file or directory)"
                    )));
                }
                let out = crate::guest_exec::run(&mut vm.files, &argv);
                let stdout = out.bytes.unwrap_or_else(|| out.stdout.into_bytes());
                (out.exit, stdout, out.stderr.into_bytes())
            }
        };
        let pid = vm.next_pid;
        vm.next_pid += 1;
        vm.processes.insert(
            pid,
            Process {
                exit,
                stdout,
                stderr,
                ends_at: Instant::now() + sleep.unwrap_or_default(),
            },
        );
        Ok(pid)
    })?;
    data(json!({ "pid": pid }))
}

/// `GET …/agent/exec-status`: `exited` 0 while the program runs; once it has exited, its code
/// and output (PVE decodes the agent's base64), and the agent forgets the pid.
pub(crate) fn exec_status(ctx: &Ctx) -> HandlerResult {
    let pid: u64 = ctx
        .required("pid")?
        .parse()
        .map_err(|_| ApiError::param("pid", "type check ('integer') failed"))?;
    let answer = with_agent(ctx, "guest-exec-status", |vm| {
        let Some(process) = vm.processes.get(&pid) else {
            return Err(agent_error("Invalid parameter 'pid'"));
        };
        if Instant::now() < process.ends_at {
            return Ok(json!({ "exited": 0 }));
        }
        let process = vm
            .processes
            .remove(&pid)
            .ok_or_else(|| agent_error("Invalid parameter 'pid'"))?;
        let (out, out_truncated) = capped(process.stdout);
        let (err, err_truncated) = capped(process.stderr);
        let mut v = json!({ "exited": 1, "exitcode": process.exit });
        if !out.is_empty() {
            v["out-data"] = json!(String::from_utf8_lossy(&out));
        }
        if !err.is_empty() {
            v["err-data"] = json!(String::from_utf8_lossy(&err));
        }
        if out_truncated {
            v["out-truncated"] = json!(1);
        }
        if err_truncated {
            v["err-truncated"] = json!(1);
        }
        Ok(v)
    })?;
    data(answer)
}

/// `POST …/agent/file-write`: `content` is base64-encoded by PVE (`encode=1`, the default) or
/// already base64 (`encode=0`); the file is created or truncated, 0644 when new, in this VM's
/// tree only.
pub(crate) fn file_write(ctx: &Ctx) -> HandlerResult {
    let path = ctx.required("file")?.to_owned();
    let content = ctx.required("content")?;
    let encode = ctx.get("encode") != Some("0");
    let bytes = if encode {
        content.as_bytes().to_vec()
    } else {
        B64.decode(content.as_bytes())
            .map_err(|_| agent_error("Invalid parameter type for 'buf-b64', expected: base64"))?
    };
    with_agent(ctx, "guest-file-open", |vm| {
        let canonical = crate::files::canonical(&path).map_err(|_| open_failed(&path, "wb"))?;
        let parent = crate::files::parent(&canonical);
        if !vm.files.is_dir(parent) {
            return Err(open_failed(&path, "wb"));
        }
        if vm.files.is_dir(&canonical) {
            return Err(agent_error(&format!(
                "failed to open file '{path}' (mode: 'wb'): Is a directory"
            )));
        }
        // qemu-ga creates a new file 0600 (`safe_open_or_create`); an existing one keeps
        // its mode.
        vm.files
            .write(&canonical, bytes, 0o600)
            .map_err(|_| open_failed(&path, "wb"))
    })?;
    data(Value::Null)
}

fn open_failed(path: &str, mode: &str) -> ApiError {
    agent_error(&format!(
        "failed to open file '{path}' (mode: '{mode}'): No such file or directory"
    ))
}

/// At most [`FILE_READ_MAX`] bytes of `content`, and whether the file goes on.
pub(crate) fn read_at_most(content: &[u8]) -> (&[u8], bool) {
    let end = content.len().min(FILE_READ_MAX);
    (&content[..end], end < content.len())
}

/// `GET …/agent/file-read`: PVE reads at most 16 MiB of the file through the agent and answers
/// the bytes decoded, each one character (Perl's string), `truncated` when the file goes on.
pub(crate) fn file_read(ctx: &Ctx) -> HandlerResult {
    let path = ctx.required("file")?.to_owned();
    let (content, truncated) = with_agent(ctx, "guest-file-open", |vm| {
        let canonical = crate::files::canonical(&path).map_err(|_| open_failed(&path, "r"))?;
        let content = vm
            .files
            .content(&canonical)
            .ok_or_else(|| open_failed(&path, "r"))?;
        let (chunk, truncated) = read_at_most(content);
        Ok((
            chunk.iter().map(|b| char::from(*b)).collect::<String>(),
            truncated,
        ))
    })?;
    let mut v = json!({ "content": content });
    if truncated {
        v["truncated"] = json!(1);
    }
    data(v)
}

/// `GET …/agent/network-get-interfaces`: `lo`, then one interface per `netN` with its MAC and
/// the address cloud-init gave it (`ipconfigN` as the drive was built), else the simulator's
/// DHCP lease.
pub(crate) fn interfaces(ctx: &Ctx) -> HandlerResult {
    let vmid = ctx.vmid()?;
    let list = with_agent(ctx, "guest-network-get-interfaces", |vm| {
        let mut out = vec![json!({
            "name": "lo",
            "hardware-address": "00:00:00:00:00:00",
            "ip-addresses": [{"ip-address": "127.0.0.1", "ip-address-type": "ipv4", "prefix": 8}],
        })];
        for (i, (key, value)) in vm
            .conf
            .iter()
            .filter(|(k, _)| {
                k.strip_prefix("net")
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            })
            .enumerate()
        {
            let mac = value
                .split(',')
                .next()
                .and_then(|m| m.split_once('='))
                .map(|(_, mac)| mac.to_lowercase())
                .unwrap_or_default();
            let index = &key[3..];
            let (address, prefix) = vm
                .cloudinit_drive
                .get(&format!("ipconfig{index}"))
                .and_then(|c| {
                    c.split(',')
                        .find_map(|p| p.strip_prefix("ip="))
                        .and_then(|ip| ip.split_once('/'))
                        .map(|(a, p)| (a.to_owned(), p.parse::<u8>().unwrap_or(24)))
                })
                .unwrap_or_else(|| (crate::lxc::dhcp_address(vmid).to_string(), 16));
            out.push(json!({
                "name": format!("eth{i}"),
                "hardware-address": mac,
                "ip-addresses": [{"ip-address": address, "ip-address-type": "ipv4", "prefix": prefix}],
            }));
        }
        Ok(out)
    })?;
    data(json!({ "result": list }))
}

#[cfg(test)]
mod tests;
