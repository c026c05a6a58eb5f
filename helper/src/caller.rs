//! Transport selection from the command line and the caller check.

use std::ffi::OsString;
use std::io::Read;
use std::time::Duration;

use bosun_proto::helper::{HelperUnit, MAX_REQUEST_BYTES, VerbName};

use crate::error::HelperError;

/// How the request reaches the helper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// A socket unit's service (`bosun-helper@.service` or a sibling, decision 0071) with
    /// the accepted connection on stdin/stdout: it serves only that unit's verbs.
    Socket {
        /// The unit, from the argument its `ExecStart=` gives.
        unit: HelperUnit,
    },
    /// `sudo -n bosun-helper <verb>`: sudoers allows exactly one verb per call.
    Sudo {
        /// The verb on the command line.
        verb: VerbName,
    },
}

impl Transport {
    /// Parses the arguments after the program name.
    pub fn from_args(args: &[OsString]) -> Result<Self, HelperError> {
        let shown = args
            .iter()
            .map(|a| a.to_string_lossy().chars().take(64).collect());
        let usage = || HelperError::Usage(shown.clone().collect());
        let [arg] = args else { return Err(usage()) };
        let arg = arg.to_str().ok_or_else(usage)?;
        HelperUnit::from_arg(arg)
            .map(|unit| Self::Socket { unit })
            .or_else(|| VerbName::parse(arg).map(|verb| Self::Sudo { verb }))
            .ok_or_else(usage)
    }

    /// `socket` or `sudo`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Socket { .. } => "socket",
            Self::Sudo { .. } => "sudo",
        }
    }
}

/// Establishes the caller's uid: the socket peer's credentials, or `SUDO_UID`.
pub fn caller_uid(transport: Transport, sudo_uid: Option<&OsString>) -> Result<u32, HelperError> {
    let unknown = |source| HelperError::CallerUnknown(transport.name(), source);
    match transport {
        Transport::Socket { .. } => {
            let cred = rustix::net::sockopt::socket_peercred(std::io::stdin())
                .map_err(|e| unknown(e.into()))?;
            Ok(cred.uid.as_raw())
        }
        Transport::Sudo { .. } => {
            let text = sudo_uid
                .and_then(|v| v.to_str())
                .ok_or_else(|| unknown(std::io::Error::other("SUDO_UID is not set")))?;
            text.parse::<u32>()
                .map_err(|_| unknown(std::io::Error::other("SUDO_UID is not a number")))
        }
    }
}

/// Refuses any caller but the agent user.
pub fn check(transport: Transport, uid: u32, agent_uid: u32) -> Result<(), HelperError> {
    let (transport, expected) = (transport.name(), agent_uid);
    let rejected = HelperError::CallerRejected(transport, uid, expected);
    (uid == agent_uid).then_some(()).ok_or(rejected)
}

/// Reads one request: bytes up to the first newline or end of input, at most
/// [`MAX_REQUEST_BYTES`]. Anything but whitespace after the newline is refused.
pub fn read_request(transport: Transport) -> Result<Vec<u8>, HelperError> {
    let stdin = std::io::stdin();
    if matches!(transport, Transport::Socket { .. }) {
        let (recv, limit) = (rustix::net::sockopt::Timeout::Recv, Duration::from_secs(10));
        let set = rustix::net::sockopt::set_socket_timeout(&stdin, recv, Some(limit));
        set.map_err(|e| HelperError::ReadRequest(e.into()))?;
    }
    read_bounded(&mut stdin.lock())
}

/// [`read_request`] over any reader.
pub fn read_bounded(input: &mut impl Read) -> Result<Vec<u8>, HelperError> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    while !buf.contains(&b'\n') && buf.len() <= MAX_REQUEST_BYTES {
        match input.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(source) => return Err(HelperError::ReadRequest(source)),
        }
    }
    let end = buf.iter().position(|b| *b == b'\n').unwrap_or(buf.len());
    if end > MAX_REQUEST_BYTES {
        let limit = MAX_REQUEST_BYTES;
        return Err(HelperError::Oversized(limit));
    }
    if buf[end..].iter().any(|b| !b.is_ascii_whitespace()) {
        return Err(HelperError::TrailingData);
    }
    buf.truncate(end);
    Ok(buf)
}
