//! Client for `bosun-helper`, the agent's only route to root.
//!
//! One [`Request`] per call, over either transport:
//! - [`HelperTransport::Socket`]: connect to the socket of the unit the verb runs under
//!   (`bosun-helper.socket`, or `bosun-helper-guest.socket` / `bosun-helper-golden.socket`
//!   beside it: [`HelperUnit::of`], decision 0071; systemd starts one helper per
//!   connection), write one JSON line, half-close, read one JSON line. This is the
//!   production route; it works from the hardened agent unit.
//! - [`HelperTransport::Sudo`]: `sudo -n /usr/libexec/bosun/bosun-helper <verb>` with the
//!   request on stdin, for an agent running outside systemd (sudo refuses to work under
//!   `NoNewPrivileges=yes`).
//!
//! Errors say whether the helper answered: [`HelperClientError::Refused`] and
//! [`HelperClientError::Failed`] carry the helper's own reason; every other variant is
//! a transport failure ([`HelperClientError::is_transport`]).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use bosun_proto::helper::{HELPER_PATH, HelperUnit, Output, Refusal, Request, Response, VerbName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Where `bosun-helper.socket` listens.
pub const DEFAULT_SOCKET: &str = "/run/bosun/helper.sock";
/// The sudo binary used by the sudo transport.
pub const DEFAULT_SUDO: &str = "/usr/bin/sudo";
/// Default limit for one call; `build_golden` callers pass a longer one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// Largest answer read (a SMART report is the largest).
const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;
/// How much of sudo's stderr an error keeps.
const STDERR_TAIL: usize = 1000;

/// How the request reaches the helper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HelperTransport {
    /// The socket-activated helper.
    Socket {
        /// Path of `bosun-helper.socket`'s listening socket; the other units' sockets are
        /// its siblings ([`unit_socket`]).
        path: PathBuf,
    },
    /// `sudo -n <helper> <verb>`.
    Sudo {
        /// Absolute path of `sudo`.
        sudo: PathBuf,
        /// Absolute path of the helper, exactly as sudoers names it.
        helper: PathBuf,
    },
}

impl HelperTransport {
    fn name(&self) -> &'static str {
        match self {
            Self::Socket { .. } => "socket",
            Self::Sudo { .. } => "sudo",
        }
    }
}

/// Why a helper call did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum HelperClientError {
    /// The socket could not be reached; the request was not sent.
    #[error("connecting to the helper socket {path}")]
    Connect {
        /// Socket path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// sudo could not be started; the request was not sent.
    #[error("starting {sudo} for verb {verb}")]
    SpawnSudo {
        /// sudo's path.
        sudo: PathBuf,
        /// The verb.
        verb: &'static str,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Reading the answer failed; the helper may or may not have acted.
    #[error("reading the helper's answer to {verb} over {transport}")]
    Receive {
        /// The verb.
        verb: &'static str,
        /// `socket` or `sudo`.
        transport: &'static str,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// No answer at all (e.g. sudo refused to run the helper).
    #[error("no answer to {verb} over {transport} ({status}): {stderr}")]
    NoAnswer {
        /// The verb.
        verb: &'static str,
        /// `socket` or `sudo`.
        transport: &'static str,
        /// Exit status of sudo, or `connection closed`.
        status: String,
        /// The end of sudo's stderr.
        stderr: String,
    },
    /// The answer was not a helper response.
    #[error("unreadable answer to {verb} over {transport}")]
    Decode {
        /// The verb.
        verb: &'static str,
        /// `socket` or `sudo`.
        transport: &'static str,
        /// Cause.
        #[source]
        source: serde_json::Error,
    },
    /// The helper did not answer in time; it may still be acting.
    #[error("no answer to {verb} over {transport} within {timeout:?}")]
    Timeout {
        /// The verb.
        verb: &'static str,
        /// `socket` or `sudo`.
        transport: &'static str,
        /// The limit.
        timeout: Duration,
    },
    /// The helper refused the request; nothing happened.
    #[error("helper refused {verb} ({reason:?}): {message}")]
    Refused {
        /// The verb.
        verb: &'static str,
        /// Category.
        reason: Refusal,
        /// The helper's explanation.
        message: String,
    },
    /// The helper tried and failed.
    #[error("helper failed {verb}: {message}")]
    Failed {
        /// The verb.
        verb: &'static str,
        /// The helper's explanation.
        message: String,
    },
}

impl HelperClientError {
    /// True when the helper's answer is unknown (the transport failed), false when
    /// the helper itself refused or failed.
    pub fn is_transport(&self) -> bool {
        !matches!(self, Self::Refused { .. } | Self::Failed { .. })
    }

    /// True when the request certainly never reached the helper (safe to retry).
    pub fn not_sent(&self) -> bool {
        matches!(self, Self::Connect { .. } | Self::SpawnSudo { .. })
    }
}

/// A typed client for `bosun-helper`.
#[derive(Debug, Clone)]
pub struct HelperClient {
    transport: HelperTransport,
    timeout: Duration,
}

impl HelperClient {
    /// A client for the socket at `path`.
    pub fn socket(path: impl Into<PathBuf>) -> Self {
        Self::new(HelperTransport::Socket { path: path.into() })
    }

    /// A client using `sudo -n` and the installed helper.
    pub fn sudo() -> Self {
        Self::new(HelperTransport::Sudo {
            sudo: DEFAULT_SUDO.into(),
            helper: HELPER_PATH.into(),
        })
    }

    /// A client for `transport` with [`DEFAULT_TIMEOUT`].
    pub fn new(transport: HelperTransport) -> Self {
        Self {
            transport,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The same client with another per-call limit.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The transport in use.
    pub fn transport(&self) -> &HelperTransport {
        &self.transport
    }

    /// Sends `request` and returns what the helper did.
    pub async fn call(&self, request: &Request) -> Result<Output, HelperClientError> {
        let verb = request.verb().as_str();
        let transport = self.transport.name();
        let mut line = serde_json::to_vec(request).map_err(|source| HelperClientError::Decode {
            verb,
            transport,
            source,
        })?;
        line.push(b'\n');
        let exchange = async {
            match &self.transport {
                HelperTransport::Socket { path } => {
                    over_socket(&unit_socket(path, request.verb()), verb, &line).await
                }
                HelperTransport::Sudo { sudo, helper } => {
                    over_sudo(sudo, helper, verb, &line).await
                }
            }
        };
        let answer = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| HelperClientError::Timeout {
                verb,
                transport,
                timeout: self.timeout,
            })??;
        let response: Response =
            serde_json::from_slice(&answer).map_err(|source| HelperClientError::Decode {
                verb,
                transport,
                source,
            })?;
        match response {
            Response::Ok { output } => {
                tracing::debug!(verb, transport, "helper call done");
                Ok(output)
            }
            Response::Refused { reason, message } => Err(HelperClientError::Refused {
                verb,
                reason,
                message,
            }),
            Response::Failed { message } => Err(HelperClientError::Failed { verb, message }),
        }
    }
}

/// The socket of the unit `verb` runs under, given `bosun-helper.socket`'s `path`: that path
/// itself, or the unit's socket file beside it (the units' sockets share a directory,
/// `/run/bosun/`).
pub fn unit_socket(path: &Path, verb: VerbName) -> PathBuf {
    match HelperUnit::of(verb) {
        HelperUnit::Host => path.to_path_buf(),
        unit => path.with_file_name(unit.socket_file()),
    }
}

/// The first line of `bytes` (the helper writes exactly one).
fn first_line(mut bytes: Vec<u8>) -> Vec<u8> {
    if let Some(end) = bytes.iter().position(|b| *b == b'\n') {
        bytes.truncate(end);
    }
    bytes
}

async fn over_socket(
    path: &Path,
    verb: &'static str,
    line: &[u8],
) -> Result<Vec<u8>, HelperClientError> {
    let mut stream = tokio::net::UnixStream::connect(path)
        .await
        .map_err(|source| HelperClientError::Connect {
            path: path.into(),
            source,
        })?;
    // A refused caller is answered without the helper reading the request, so a
    // failed write is not the end: the answer may be waiting.
    if stream.write_all(line).await.is_ok() {
        let _ = stream.shutdown().await;
    }
    // Read up to the answer's newline. A helper that answered without reading the
    // request closes with unread data, which Linux reports to us as a reset after the
    // answer: what arrived before it counts.
    let mut answer = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match stream.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&chunk[..n]);
                if answer.contains(&b'\n') {
                    break;
                }
                if answer.len() > MAX_ANSWER_BYTES {
                    return Err(HelperClientError::Receive {
                        verb,
                        transport: "socket",
                        source: std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            "answer larger than 8 MiB",
                        ),
                    });
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset && !answer.is_empty() => {
                break;
            }
            Err(source) => {
                return Err(HelperClientError::Receive {
                    verb,
                    transport: "socket",
                    source,
                });
            }
        }
    }
    if answer.is_empty() {
        return Err(HelperClientError::NoAnswer {
            verb,
            transport: "socket",
            status: "connection closed".into(),
            stderr: String::new(),
        });
    }
    Ok(first_line(answer))
}

async fn over_sudo(
    sudo: &Path,
    helper: &Path,
    verb: &'static str,
    line: &[u8],
) -> Result<Vec<u8>, HelperClientError> {
    let mut child = tokio::process::Command::new(sudo)
        .arg("-n")
        .arg(helper)
        .arg(verb)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| HelperClientError::SpawnSudo {
            sudo: sudo.into(),
            verb,
            source,
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        // As on the socket: a refusal may come before the request is read.
        let _ = stdin.write_all(line).await;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|source| HelperClientError::Receive {
            verb,
            transport: "sudo",
            source,
        })?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The helper's audit line goes to stderr too; it is redacted by the helper.
    for audit in stderr
        .lines()
        .filter(|l| l.starts_with("bosun-helper audit: "))
    {
        tracing::debug!(verb, audit, "helper audit");
    }
    if out.stdout.iter().all(u8::is_ascii_whitespace) {
        let tail: String = {
            let chars: Vec<char> = stderr.trim().chars().collect();
            chars[chars.len().saturating_sub(STDERR_TAIL)..]
                .iter()
                .collect()
        };
        return Err(HelperClientError::NoAnswer {
            verb,
            transport: "sudo",
            status: out.status.to_string(),
            stderr: tail,
        });
    }
    Ok(first_line(out.stdout))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use bosun_proto::helper::{TargetId, Unmount};

    use super::*;

    fn unmount(target: &str) -> Request {
        Request::Unmount(Unmount {
            target_id: TargetId::new(target).unwrap(),
        })
    }

    const OK: &str =
        r#"{"status":"ok","output":{"kind":"unmounted","target":"/var/lib/bosun-helper/mnt/nas"}}"#;

    /// A one-shot socket server that records the request and sends `answer`, after
    /// reading the request or (`read_first == false`) without reading it.
    async fn serve_once(
        path: PathBuf,
        answer: &'static str,
        read_first: bool,
    ) -> tokio::task::JoinHandle<Vec<u8>> {
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            if read_first {
                stream.read_to_end(&mut got).await.unwrap();
            }
            stream.write_all(answer.as_bytes()).await.unwrap();
            stream.write_all(b"\n").await.unwrap();
            got
        })
    }

    #[tokio::test]
    async fn socket_round_trip_sends_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("helper.sock");
        let server = serve_once(path.clone(), OK, true).await;
        let output = HelperClient::socket(&path)
            .call(&unmount("nas"))
            .await
            .unwrap();
        assert_eq!(
            output,
            Output::Unmounted {
                target: "/var/lib/bosun-helper/mnt/nas".into()
            }
        );
        let got = server.await.unwrap();
        assert_eq!(
            got,
            b"{\"verb\":\"unmount\",\"args\":{\"target_id\":\"nas\"}}\n"
        );
    }

    #[tokio::test]
    async fn a_refusal_sent_before_reading_is_still_received() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("helper.sock");
        let refused = r#"{"status":"refused","reason":"caller","message":"caller uid 0 over socket is not the agent user (uid 999)"}"#;
        let _server = serve_once(path.clone(), refused, false).await;
        let err = HelperClient::socket(&path)
            .call(&unmount("nas"))
            .await
            .unwrap_err();
        match &err {
            HelperClientError::Refused {
                verb,
                reason,
                message,
            } => {
                assert_eq!(*verb, "unmount");
                assert_eq!(*reason, Refusal::Caller);
                assert!(message.contains("not the agent user"));
            }
            other => panic!("{other:?}"),
        }
        assert!(!err.is_transport());
    }

    #[tokio::test]
    async fn transport_failures_are_typed() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("absent.sock");
        let err = HelperClient::socket(&missing)
            .call(&unmount("a"))
            .await
            .unwrap_err();
        assert!(matches!(err, HelperClientError::Connect { .. }), "{err:?}");
        assert!(err.is_transport() && err.not_sent());

        let path = dir.path().join("garbage.sock");
        let _server = serve_once(path.clone(), "HTTP/1.1 400 Bad Request", true).await;
        let err = HelperClient::socket(&path)
            .call(&unmount("a"))
            .await
            .unwrap_err();
        assert!(matches!(err, HelperClientError::Decode { .. }), "{err:?}");
        assert!(err.is_transport() && !err.not_sent());

        let path = dir.path().join("silent.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let _hold = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(stream);
        });
        let err = HelperClient::socket(&path)
            .with_timeout(Duration::from_millis(200))
            .call(&unmount("a"))
            .await
            .unwrap_err();
        assert!(matches!(err, HelperClientError::Timeout { .. }), "{err:?}");
    }

    /// Installs a stand-in `sudo` (shell text) through install(1), so no descriptor
    /// open for writing leaks into a child forked by a parallel test.
    fn fake_sudo(dir: &Path, body: &str) -> PathBuf {
        let source = dir.join("sudo.src");
        std::fs::write(&source, format!("#!/bin/sh\n{body}\n")).unwrap();
        let path = dir.join("sudo");
        let status = std::process::Command::new("install")
            .args(["-m", "0755"])
            .arg(&source)
            .arg(&path)
            .status()
            .unwrap();
        assert!(status.success());
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o755
        );
        path
    }

    #[tokio::test]
    async fn sudo_transport_passes_the_verb_and_the_request() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("argv");
        let input = dir.path().join("stdin");
        let sudo = fake_sudo(
            dir.path(),
            &format!(
                "printf '%s|' \"$@\" > '{}'; cat > '{}'; echo 'bosun-helper audit: {{}}' >&2; echo '{OK}'",
                log.display(),
                input.display()
            ),
        );
        let client = HelperClient::new(HelperTransport::Sudo {
            sudo,
            helper: HELPER_PATH.into(),
        });
        let output = client.call(&unmount("nas")).await.unwrap();
        assert!(matches!(output, Output::Unmounted { .. }));
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            format!("-n|{HELPER_PATH}|unmount|")
        );
        assert_eq!(
            std::fs::read_to_string(&input).unwrap(),
            "{\"verb\":\"unmount\",\"args\":{\"target_id\":\"nas\"}}\n"
        );
    }

    #[tokio::test]
    async fn sudo_refusing_to_run_is_a_transport_error_with_its_message() {
        let dir = tempfile::tempdir().unwrap();
        let sudo = fake_sudo(
            dir.path(),
            "echo 'sudo: a password is required' >&2; exit 1",
        );
        let client = HelperClient::new(HelperTransport::Sudo {
            sudo,
            helper: HELPER_PATH.into(),
        });
        let err = client.call(&unmount("nas")).await.unwrap_err();
        match &err {
            HelperClientError::NoAnswer { stderr, .. } => {
                assert!(stderr.contains("a password is required"), "{stderr}");
            }
            other => panic!("{other:?}"),
        }
        assert!(err.is_transport());

        let failed = r#"{"status":"failed","message":"pct exited with 2"}"#;
        let sudo = fake_sudo(
            dir.path(),
            &format!("cat > /dev/null; echo '{failed}'; exit 1"),
        );
        let client = HelperClient::new(HelperTransport::Sudo {
            sudo,
            helper: HELPER_PATH.into(),
        });
        let err = client.call(&unmount("nas")).await.unwrap_err();
        assert!(
            matches!(&err, HelperClientError::Failed { message, .. } if message.contains("pct")),
            "{err:?}"
        );
        let missing = HelperClient::new(HelperTransport::Sudo {
            sudo: dir.path().join("no-sudo"),
            helper: HELPER_PATH.into(),
        });
        assert!(missing.call(&unmount("a")).await.unwrap_err().not_sent());
    }
}
