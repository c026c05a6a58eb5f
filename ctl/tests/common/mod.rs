//! What the `bosunctl` suites share: checking a signature the way an operator would, with the
//! stock `ssh-keygen -Y verify`, and a real hub to run against ([`hub`]).

#![allow(dead_code, clippy::unwrap_used)]

pub mod hub;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// What a `bosunctl` run said, for a failure message: its exit code, stdout and stderr.
pub fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Whether `ssh-keygen -Y verify` accepts `signature` over `document` in `namespace` for
/// the key `dir/key.pub` (as `op@example`). Leaves no file behind.
pub fn verify(dir: &Path, namespace: &str, document: &[u8], signature: &str) -> bool {
    let public = std::fs::read_to_string(dir.join("key.pub")).unwrap();
    std::fs::write(dir.join("allowed"), format!("op@example {}", public.trim())).unwrap();
    std::fs::write(dir.join("check.sig"), signature).unwrap();
    let mut child = Command::new("ssh-keygen")
        .args(["-Y", "verify", "-f"])
        .arg(dir.join("allowed"))
        .args(["-I", "op@example", "-n", namespace, "-s"])
        .arg(dir.join("check.sig"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(document).unwrap();
    let ok = child.wait().unwrap().success();
    for name in ["allowed", "check.sig"] {
        std::fs::remove_file(dir.join(name)).unwrap();
    }
    ok
}
