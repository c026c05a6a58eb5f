//! The stand-ins for root's CLI on the node (`bosun-pvesim-pct` for `/usr/sbin/pct`,
//! `bosun-pvesim-vzdump` for `/usr/bin/vzdump`): each posts its argument vector to the
//! simulator's admin endpoint (`POST /_sim/pct`, `POST /_sim/vzdump`), prints what the
//! command printed and exits with its status.
//!
//! `bosun-helper` runs programs with a cleared environment, so where the simulator is comes
//! from a file beside the program: `<its own path>.endpoint.json`, a copy of the simulator's
//! `endpoint.json` (only `admin_url`, `admin_token` and `fingerprint` are read).
//!
//! `pct push` reads `<file>` here, on the host, as the real `pct` does (a root-only staging
//! file, possibly holding a token), sends its bytes in the request body and keeps no copy;
//! neither the content nor the admin token is ever printed.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::cli::CliOutput;

/// Exit status for arguments the command would not accept.
pub const EXIT_USAGE: i32 = 2;
/// Exit status when the simulator could not be reached or refused the stand-in itself.
pub const EXIT_UNREACHABLE: i32 = 1;
/// PVE's `exit(-1)`.
pub const EXIT_FAILED: i32 = 255;

#[derive(Deserialize)]
struct Target {
    admin_url: String,
    admin_token: String,
    fingerprint: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("admin_url", &self.admin_url)
            .field("admin_token", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// Why the stand-in could not ask the simulator.
#[derive(Debug, thiserror::Error)]
pub enum StandInError {
    #[error("locating this program")]
    Locate(#[source] std::io::Error),
    #[error("reading {path}")]
    ReadTarget {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("parsing {path}")]
    ParseTarget {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("the simulator's certificate fingerprint")]
    Fingerprint(#[source] bosun_pin::BadFingerprint),
    #[error("calling {url}")]
    Call {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("the simulator answered {status}: {body}")]
    Refused { status: u16, body: String },
}

/// The endpoint file beside the running program.
fn target_file() -> Result<PathBuf, StandInError> {
    let exe = std::env::current_exe().map_err(StandInError::Locate)?;
    let mut name = exe.into_os_string();
    name.push(".endpoint.json");
    Ok(PathBuf::from(name))
}

/// The whole `main` of a stand-in binary: runs [`run`] for `program` with this process's
/// arguments on a small runtime and turns its status into the process's exit code.
pub fn main(program: &str) -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("bosun-pvesim-{program}: starting the runtime: {err}");
            return std::process::ExitCode::from(1);
        }
    };
    let code = runtime.block_on(run(program, args));
    std::process::ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
}

/// Runs the stand-in for `program` (`pct` or `vzdump`) and returns the exit status.
pub async fn run(program: &str, args: Vec<String>) -> i32 {
    let input = if program == "pct" && args.first().map(String::as_str) == Some("push") {
        let Some(file) = args.get(2) else {
            eprintln!("400 not enough arguments\npct push <vmid> <file> <destination> [OPTIONS]");
            return EXIT_USAGE;
        };
        match std::fs::read(file) {
            Ok(bytes) => Some(bytes),
            Err(_) => {
                eprintln!("failed to open {file} for reading");
                return EXIT_FAILED;
            }
        }
    } else if program == "pct"
        && args.first().map(String::as_str) == Some("exec")
        && args
            .iter()
            .any(|a| a == bosun_proto::helper::BULK_RESTORE_SCRIPT)
    {
        // The one program `pct exec` hands standard input to here: the bulk restore's script.
        let mut bytes = Vec::new();
        if let Err(e) = std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes) {
            eprintln!("bosun-pvesim-pct: reading standard input: {e}");
            return EXIT_FAILED;
        }
        Some(bytes)
    } else {
        None
    };
    match call(program, &args, input).await {
        Ok(output) if output.exit == 0 && output.file_hex.is_some() => write_pulled(&args, &output),
        Ok(output) => {
            // Output that cannot be written (a closed pipe) changes nothing about the result.
            let bytes = output
                .stdout_hex
                .as_deref()
                .and_then(|h| hex::decode(h).ok());
            let stdout = bytes.as_deref().unwrap_or(output.stdout.as_bytes());
            let _ = std::io::stdout().write_all(stdout);
            let _ = std::io::stderr().write_all(output.stderr.as_bytes());
            output.exit
        }
        Err(StandInError::Refused { status: 400, body }) => {
            eprint!("{body}");
            EXIT_USAGE
        }
        Err(err) => {
            let mut text = format!("bosun-pvesim-{program}: {err}");
            let mut source = std::error::Error::source(&err);
            while let Some(cause) = source {
                text.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            eprintln!("{text}");
            EXIT_UNREACHABLE
        }
    }
}

/// `pct pull`'s end on the host: the file's bytes into `<destination>`, opened for writing as
/// PVE's `create_file` opens an existing path (so a FIFO there is written into, not replaced).
fn write_pulled(args: &[String], output: &CliOutput) -> i32 {
    let (Some(destination), Some(Ok(bytes))) =
        (args.get(3), output.file_hex.as_deref().map(hex::decode))
    else {
        eprintln!("bosun-pvesim-pct: pull: no destination or no content");
        return EXIT_FAILED;
    };
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(destination)
        .and_then(|mut f| f.write_all(&bytes));
    match written {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("failed to create file: {destination}: {e}");
            EXIT_FAILED
        }
    }
}

async fn call(
    program: &str,
    args: &[String],
    input: Option<Vec<u8>>,
) -> Result<CliOutput, StandInError> {
    let path = target_file()?;
    let text = std::fs::read_to_string(&path).map_err(|source| StandInError::ReadTarget {
        path: path.clone(),
        source,
    })?;
    let target: Target =
        serde_json::from_str(&text).map_err(|source| StandInError::ParseTarget {
            path: path.clone(),
            source,
        })?;
    let url = format!("{}/{program}", target.admin_url);
    let call_err = |source| StandInError::Call {
        url: url.clone(),
        source,
    };
    let tls = bosun_pin::client_config(&target.fingerprint).map_err(StandInError::Fingerprint)?;
    let client = reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .timeout(Duration::from_secs(900))
        .build()
        .map_err(call_err)?;
    let body = serde_json::json!({ "args": args, "input_hex": input.map(hex::encode) });
    let response = client
        .post(&url)
        .bearer_auth(&target.admin_token)
        .json(&body)
        .send()
        .await
        .map_err(call_err)?;
    let status = response.status();
    if !status.is_success() {
        let body = response.text().await.unwrap_or_default();
        return Err(StandInError::Refused {
            status: status.as_u16(),
            body,
        });
    }
    response.json::<CliOutput>().await.map_err(call_err)
}
