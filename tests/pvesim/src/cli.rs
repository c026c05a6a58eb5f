//! Root's CLI on the node: what `pct` and `vzdump` run as `root@pam` on a real host do, for
//! `bosun-helper` and the demo (there is no `pct` or `vzdump` here; the stand-ins
//! `bosun-pvesim-pct` and `bosun-pvesim-vzdump` post their argument vectors to
//! `POST /_sim/pct` and `POST /_sim/vzdump`).
//!
//! Commands that are API methods in PVE (`set`, `create`, `start`, `stop`, `shutdown`,
//! `destroy`, `vzdump`) go through that route's schema validation and handler under the
//! identity `root@pam`, wait for the task like the CLI does and are logged as a non-token
//! request on the route. `push` and `exec` act on the CT's file tree and are logged with
//! method `CLI` and path `pct push` / `pct exec`. `config` reads `GET …/config` (with
//! `current`) and prints it as `pct config` does: `key: value` lines in key order, the
//! description as `#` lines first, no digest. `/api2` itself is unchanged: no token can
//! become root through it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::LoggedRequest;
use crate::api::{ApiError, Ctx, Reply};
use crate::files::canonical;
use crate::guest_exec;
use crate::lxc_config::missing_config;
use crate::pct::{Command, Options, Power};
use crate::request::Decoded;
use crate::routes::lookup;
use crate::schema::RawValue;
use crate::server::{dispatch, validate};
use crate::state::{FLOCK_WAIT, Shared};
use crate::tasks;

/// The body of `POST /_sim/pct` and `POST /_sim/vzdump`.
#[derive(Debug, Deserialize)]
pub(crate) struct CliRequest {
    /// The program's own argument vector, e.g. `["push", "101", "/host/f", "/etc/f"]`.
    pub(crate) args: Vec<String>,
    /// `pct push`: the bytes of `<file>`, which the stand-in read on the host (hex).
    #[serde(default)]
    pub(crate) input_hex: Option<String>,
}

/// What the program printed and its exit status (255 is PVE's `exit(-1)`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CliOutput {
    pub exit: i32,
    pub stdout: String,
    pub stderr: String,
    /// `pct pull`: the file's bytes (hex), for the stand-in to write on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_hex: Option<String>,
    /// `pct exec` of a program whose standard output is bytes (a tar archive): them (hex), for
    /// the stand-in to print instead of `stdout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_hex: Option<String>,
}

impl CliOutput {
    fn failed(message: &str) -> Self {
        let mut stderr = message.to_owned();
        if !stderr.ends_with('\n') {
            stderr.push('\n');
        }
        Self {
            exit: 255,
            stderr,
            ..Self::default()
        }
    }
}

/// A failure injected into root's CLI: a call of `program` whose arguments start with `args`
/// (`*` matches any one argument) fails with `exit` and `message` on stderr, changing nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CliFault {
    /// `pct` or `vzdump`.
    pub program: String,
    pub args: Vec<String>,
    #[serde(default = "default_fault_exit")]
    pub exit: i32,
    pub message: String,
}

fn default_fault_exit() -> i32 {
    1
}

impl CliFault {
    fn matches(&self, program: &str, args: &[String]) -> bool {
        self.program == program
            && self.args.len() <= args.len()
            && self
                .args
                .iter()
                .zip(args)
                .all(|(want, got)| want == "*" || want == got)
    }
}

/// How long the CLI waits for a task it started (real time).
const TASK_WAIT: Duration = Duration::from_secs(600);

/// Runs one CLI call. `Err` is a usage error (nothing ran, nothing logged).
pub(crate) async fn run(
    shared: &Arc<Shared>,
    program: &str,
    request: &CliRequest,
) -> Result<CliOutput, String> {
    let command = match program {
        "vzdump" => crate::pct::parse_vzdump(&request.args)?,
        _ => crate::pct::parse_pct(&request.args)?,
    };
    let fault = shared
        .state
        .lock()
        .cli_faults
        .iter()
        .find(|f| f.matches(program, &request.args))
        .cloned();
    if let Some(fault) = fault {
        let (method, path, params) = log_shape(shared, &command);
        log(shared, method, path, params, 500);
        tracing::info!(program, exit = fault.exit, "injected cli failure");
        return Ok(CliOutput {
            exit: fault.exit,
            stderr: format!("{}\n", fault.message.trim_end()),
            ..CliOutput::default()
        });
    }
    let output = match &command {
        Command::Set { vmid, options } => {
            let path = format!("/nodes/{}/lxc/{vmid}/config", shared.node());
            api_call(shared, "PUT", &path, options)
                .await
                .map_or_else(|e| CliOutput::failed(&render(&e)), |_| CliOutput::default())
        }
        Command::Create { options, vmid } => {
            let path = format!("/nodes/{}/lxc", shared.node());
            let mut options = options.clone();
            options.insert(0, ("vmid".to_owned(), vmid.to_string()));
            task_call(shared, "POST", &path, &options).await
        }
        Command::Power {
            vmid,
            action,
            options,
        } => {
            let node = shared.node();
            let (method, path) = match action {
                Power::Destroy => ("DELETE", format!("/nodes/{node}/lxc/{vmid}")),
                other => (
                    "POST",
                    format!("/nodes/{node}/lxc/{vmid}/status/{}", other.word()),
                ),
            };
            task_call(shared, method, &path, options).await
        }
        Command::Vzdump { vmids, options } => {
            let path = format!("/nodes/{}/vzdump", shared.node());
            let mut options = options.clone();
            if !vmids.is_empty() {
                let list: Vec<String> = vmids.iter().map(u32::to_string).collect();
                options.insert(0, ("vmid".to_owned(), list.join(",")));
            }
            task_call(shared, "POST", &path, &options).await
        }
        Command::Push {
            vmid,
            destination,
            options,
            ..
        } => {
            let content = match request.input_hex.as_deref().map(hex::decode) {
                Some(Ok(bytes)) => bytes,
                Some(Err(_)) => return Err("pct push: input_hex is not hex".to_owned()),
                None => {
                    return Err("pct push: the file's content (input_hex) is missing".to_owned());
                }
            };
            let output = push(shared, *vmid, destination, options, content).await;
            let (method, path, params) = log_shape(shared, &command);
            log(shared, method, path, params, status_of(&output));
            output
        }
        Command::Pull { vmid, path, .. } => {
            let output = pull(shared, *vmid, path);
            let (method, path, params) = log_shape(shared, &command);
            log(shared, method, path, params, status_of(&output));
            output
        }
        Command::Exec { vmid, argv } => {
            let input = match request.input_hex.as_deref().map(hex::decode) {
                Some(Ok(bytes)) => bytes,
                Some(Err(_)) => return Err("pct exec: input_hex is not hex".to_owned()),
                None => Vec::new(),
            };
            let output = exec(shared, *vmid, argv, &input);
            let (method, path, params) = log_shape(shared, &command);
            log(shared, method, path, params, status_of(&output));
            output
        }
        Command::Config { vmid, current } => {
            let path = format!("/nodes/{}/lxc/{vmid}/config", shared.node());
            let options = if *current {
                vec![("current".to_owned(), "1".to_owned())]
            } else {
                Vec::new()
            };
            api_call(shared, "GET", &path, &options)
                .await
                .map_or_else(|e| CliOutput::failed(&render(&e)), |v| print_config(&v))
        }
    };
    tracing::info!(
        program,
        command = request.args.first().map(String::as_str).unwrap_or_default(),
        exit = output.exit,
        "cli call applied as root@pam"
    );
    Ok(output)
}

fn status_of(output: &CliOutput) -> u16 {
    if output.exit == 0 { 200 } else { 500 }
}

/// How a call appears in the request log when it is not (or not yet) an API call.
fn log_shape(shared: &Shared, command: &Command) -> (&'static str, String, Options) {
    let node = shared.node();
    match command {
        Command::Set { vmid, options } => (
            "PUT",
            format!("/nodes/{node}/lxc/{vmid}/config"),
            options.clone(),
        ),
        Command::Create { vmid, options } => {
            let mut params = vec![("vmid".to_owned(), vmid.to_string())];
            params.extend(options.iter().cloned());
            ("POST", format!("/nodes/{node}/lxc"), params)
        }
        Command::Power {
            vmid,
            action: Power::Destroy,
            options,
        } => (
            "DELETE",
            format!("/nodes/{node}/lxc/{vmid}"),
            options.clone(),
        ),
        Command::Power {
            vmid,
            action,
            options,
        } => (
            "POST",
            format!("/nodes/{node}/lxc/{vmid}/status/{}", action.word()),
            options.clone(),
        ),
        Command::Vzdump { vmids, options } => {
            let list: Vec<String> = vmids.iter().map(u32::to_string).collect();
            let mut params = vec![("vmid".to_owned(), list.join(","))];
            params.extend(options.iter().cloned());
            ("POST", format!("/nodes/{node}/vzdump"), params)
        }
        Command::Push {
            vmid,
            file,
            destination,
            options,
        } => {
            let mut params = vec![
                ("vmid".to_owned(), vmid.to_string()),
                ("file".to_owned(), file.clone()),
                ("destination".to_owned(), destination.clone()),
            ];
            params.extend(options.iter().cloned());
            ("CLI", "pct push".to_owned(), params)
        }
        Command::Pull {
            vmid,
            path,
            destination,
        } => {
            let params = vec![
                ("vmid".to_owned(), vmid.to_string()),
                ("path".to_owned(), path.clone()),
                ("destination".to_owned(), destination.clone()),
            ];
            ("CLI", "pct pull".to_owned(), params)
        }
        Command::Exec { vmid, argv } => {
            let mut params = vec![("vmid".to_owned(), vmid.to_string())];
            params.extend(argv.iter().map(|a| ("extra-args".to_owned(), a.clone())));
            ("CLI", "pct exec".to_owned(), params)
        }
        Command::Config { vmid, current } => {
            let params = if *current {
                vec![("current".to_owned(), "1".to_owned())]
            } else {
                Vec::new()
            };
            ("GET", format!("/nodes/{node}/lxc/{vmid}/config"), params)
        }
    }
}

/// `pct config`'s printout of a `GET …/config` answer: the description's lines as `#` lines,
/// then `key: value` in key order (raw `lxc` entries as `lxc.key: value`), no digest.
fn print_config(config: &Value) -> CliOutput {
    let mut stdout = String::new();
    let Some(map) = config.as_object() else {
        return CliOutput::failed("unexpected answer to GET config");
    };
    if let Some(description) = map.get("description").and_then(Value::as_str) {
        for line in description.lines() {
            stdout.push_str(&format!("#{line}\n"));
        }
    }
    for (key, value) in map {
        match (key.as_str(), value) {
            ("description" | "digest", _) => {}
            ("lxc", Value::Array(raw)) => {
                for pair in raw.iter().filter_map(Value::as_array) {
                    if let [Value::String(k), Value::String(v)] = pair.as_slice() {
                        stdout.push_str(&format!("{k}: {v}\n"));
                    }
                }
            }
            (_, Value::String(text)) => stdout.push_str(&format!("{key}: {text}\n")),
            (_, other) => stdout.push_str(&format!("{key}: {other}\n")),
        }
    }
    CliOutput {
        exit: 0,
        stdout,
        stderr: String::new(),
        ..CliOutput::default()
    }
}

fn log(shared: &Shared, method: &str, path: String, params: Options, status: u16) {
    shared.state.lock().requests.push(LoggedRequest {
        method: method.to_owned(),
        path,
        params,
        token_id: None,
        status,
    });
}

/// PVE's CLI rendering of an API error: `400 Parameter verification failed.` with one line
/// per parameter, or the handler's message.
fn render(err: &ApiError) -> String {
    if err.errors.is_empty() {
        return err.message.clone();
    }
    let mut text = format!("{} {}", err.status, err.message);
    if !text.ends_with('\n') {
        text.push('\n');
    }
    for (key, msg) in &err.errors {
        text.push_str(&format!("{key}: {}", msg.trim_end()));
        text.push('\n');
    }
    text
}

/// One API call as `root@pam`, logged like a request from a non-token user.
async fn api_call(
    shared: &Arc<Shared>,
    method: &str,
    path: &str,
    options: &Options,
) -> Result<Value, ApiError> {
    let result = dispatch_as_root(shared, method, path, options).await;
    let status = match &result {
        Ok(_) => 200,
        Err(e) => e.status,
    };
    log(shared, method, path.to_owned(), options.clone(), status);
    result
}

async fn dispatch_as_root(
    shared: &Arc<Shared>,
    method: &str,
    path: &str,
    options: &Options,
) -> Result<Value, ApiError> {
    let segments: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let matched = lookup(method, &segments)
        .ok_or_else(|| ApiError::internal(&format!("no route {method} {path} in the simulator")))?;
    let mut params = Decoded::default();
    for (key, value) in options {
        params.push(key.clone(), RawValue::One(value.clone()));
    }
    let validated = validate(&matched, &params)?;
    let ctx = Ctx {
        shared: shared.clone(),
        authid: "root@pam".to_owned(),
        params: validated,
        explicit: options
            .iter()
            .map(|(k, _)| k.clone())
            .collect::<BTreeSet<_>>(),
    };
    match dispatch(matched.spec.handler, &ctx).await? {
        Reply::Data(v) | Reply::DataWithTotal(v, _) => Ok(v),
    }
}

/// An API call that starts a task, then the task's output as the CLI prints it.
async fn task_call(shared: &Arc<Shared>, method: &str, path: &str, options: &Options) -> CliOutput {
    match api_call(shared, method, path, options).await {
        Ok(Value::String(upid)) => task_output(shared, &upid).await,
        Ok(other) => CliOutput::failed(&format!("unexpected answer {other}")),
        Err(err) => CliOutput::failed(&render(&err)),
    }
}

/// Waits for a task and renders it as the CLI does: the log on stdout (without the final
/// `TASK …` line), the error on stderr and exit 255 when it failed.
async fn task_output(shared: &Arc<Shared>, upid: &str) -> CliOutput {
    let deadline = tokio::time::Instant::now() + TASK_WAIT;
    let (lines, exit) = loop {
        let finished = {
            let st = shared.state.lock();
            st.tasks
                .iter()
                .find(|t| t.upid == upid)
                .and_then(|t| Some((t.log.lock().lines.clone(), t.exitstatus.clone()?)))
        };
        if let Some(done) = finished {
            break done;
        }
        if tokio::time::Instant::now() >= deadline || shared.cancel.is_cancelled() {
            return CliOutput::failed(&format!("gave up waiting for {upid}"));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let shown = lines.len().saturating_sub(1);
    let mut stdout = String::new();
    for line in &lines[..shown] {
        stdout.push_str(line);
        stdout.push('\n');
    }
    let ok = exit == "OK" || exit.starts_with("WARNINGS");
    CliOutput {
        exit: if ok { 0 } else { 255 },
        stdout,
        stderr: if ok {
            String::new()
        } else {
            format!("{exit}\n")
        },
        ..CliOutput::default()
    }
}

/// `pct push`: PVE's `create_file` inside the CT, in a `push_file` task under the CT's lock.
async fn push(
    shared: &Arc<Shared>,
    vmid: u32,
    destination: &str,
    options: &Options,
    content: Vec<u8>,
) -> CliOutput {
    let get = |k: &str| {
        options
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    let _flock = match shared.flock(vmid, FLOCK_WAIT).await {
        Ok(guard) => guard,
        Err(msg) => return CliOutput::failed(&msg),
    };
    {
        let st = shared.state.lock();
        match st.guests.get(&vmid) {
            None => return CliOutput::failed(&missing_config(shared.node(), vmid).message),
            Some(g) if !g.running() => {
                return CliOutput::failed("can only push files to a running CT");
            }
            Some(_) => {}
        }
    }
    // The octal default: `600` means `0600`; `0x…` is hex.
    let perms = get("perms").map(|p| {
        if p.starts_with('0') {
            p
        } else {
            format!("0{p}")
        }
    });
    let (user, group) = (get("user"), get("group"));
    let destination = destination.to_owned();
    let shared2 = shared.clone();
    let upid = tasks::spawn(
        shared,
        "root@pam",
        "push_file",
        &vmid.to_string(),
        "failed to copy the file into the container".to_owned(),
        move |t| async move {
            let mode = match perms.as_deref() {
                None => None,
                Some(p) => Some(parse_mode(p).ok_or_else(|| format!("invalid mode: '{p}'"))?),
            };
            let dest = canonical(&format!("/{}", destination.trim_start_matches('/')))
                .map_err(|e| format!("failed to create file: {destination}: {e}"))?;
            t.checkpoint()?;
            let mut st = shared2.state.lock();
            let guest = st
                .guests
                .get_mut(&vmid)
                .ok_or_else(|| format!("CT {vmid} does not exist"))?;
            let tree = &mut guest.files;
            let uid = match &user {
                Some(u) => Some(
                    tree.lookup_id(u, "/etc/passwd")
                        .ok_or_else(|| format!("failed to get uid for: {u}"))?,
                ),
                None => None,
            };
            let gid = match &group {
                Some(g) => Some(
                    tree.lookup_id(g, "/etc/group")
                        .ok_or_else(|| format!("failed to get gid for: {g}"))?,
                ),
                None => None,
            };
            tree.write(&dest, content, 0o644)
                .map_err(|reason| format!("failed to create file: {destination}: {reason}"))?;
            tree.set_attrs(&dest, mode, uid, gid);
            Ok(())
        },
    );
    task_output(shared, &upid).await
}

/// `strtoul(perms, 0)`: `0…` octal, `0x…` hex, else decimal.
fn parse_mode(text: &str) -> Option<u32> {
    let mode = if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        u32::from_str_radix(hex, 16).ok()?
    } else if text.len() > 1 && text.starts_with('0') {
        u32::from_str_radix(&text[1..], 8).ok()?
    } else {
        text.parse().ok()?
    };
    (mode <= 0o7777).then_some(mode)
}

/// `pct pull`: the CT must run; the file is opened inside it (links resolved within the CT)
/// and its bytes copied out. No program of the CT runs.
fn pull(shared: &Shared, vmid: u32, path: &str) -> CliOutput {
    let st = shared.state.lock();
    let Some(guest) = st.guests.get(&vmid) else {
        return CliOutput::failed(&missing_config(shared.node(), vmid).message);
    };
    if !guest.running() {
        return CliOutput::failed("can only pull files from a running VM");
    }
    let real = guest.files.resolve(path);
    match real.as_deref().and_then(|p| guest.files.content(p)) {
        Some(bytes) => CliOutput {
            exit: 0,
            file_hex: Some(hex::encode(bytes)),
            ..CliOutput::default()
        },
        None => CliOutput::failed(&format!("failed to open {path}: No such file or directory")),
    }
}

/// `pct exec`: the CT must exist and run; the program runs on its file tree, `input` on its
/// standard input.
fn exec(shared: &Shared, vmid: u32, argv: &[String], input: &[u8]) -> CliOutput {
    let mut st = shared.state.lock();
    let Some(guest) = st.guests.get_mut(&vmid) else {
        return CliOutput::failed(&missing_config(shared.node(), vmid).message);
    };
    if !guest.running() {
        return CliOutput::failed(&format!("container '{vmid}' not running!"));
    }
    let outcome = guest_exec::run_with_input(&mut guest.files, argv, input);
    CliOutput {
        exit: outcome.exit,
        stdout: outcome.stdout,
        stderr: outcome.stderr,
        stdout_hex: outcome.bytes.map(hex::encode),
        file_hex: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_like_strtoul_with_the_octal_default() {
        assert_eq!(parse_mode("0600"), Some(0o600));
        assert_eq!(parse_mode("0x1a4"), Some(0o644));
        assert_eq!(parse_mode("0"), Some(0));
        assert_eq!(parse_mode("0999"), None);
        assert_eq!(parse_mode("0rw"), None);
        assert_eq!(parse_mode("077777"), None);
    }

    #[test]
    fn cli_faults_match_by_prefix_with_wildcards() {
        let fault = CliFault {
            program: "pct".into(),
            args: vec![
                "exec".into(),
                "*".into(),
                "--".into(),
                "/usr/bin/docker".into(),
            ],
            exit: 1,
            message: "boom".into(),
        };
        let call = |line: &str| line.split(' ').map(str::to_owned).collect::<Vec<_>>();
        assert!(fault.matches("pct", &call("exec 9000 -- /usr/bin/docker load --input /x")));
        assert!(!fault.matches("pct", &call("exec 9000 -- /usr/bin/rm -f /x")));
        assert!(!fault.matches("vzdump", &call("exec 9000 -- /usr/bin/docker")));
        assert!(!fault.matches("pct", &call("exec 9000")));
    }

    #[test]
    fn api_errors_render_like_the_cli() {
        let err = ApiError::param("nosuch", "property is not defined in schema");
        assert_eq!(
            render(&err),
            "400 Parameter verification failed.\nnosuch: property is not defined in schema\n"
        );
        assert_eq!(
            render(&ApiError::internal("CT is locked")),
            "CT is locked\n"
        );
    }
}
