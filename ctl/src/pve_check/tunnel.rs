//! The `tunnel` check: whether `cloudflared`, the tunnel the agent manages (decision 0082), is
//! installed on the machine `pve check` runs on (the node), and which version. A node without
//! it works; only a host whose data plan names a tunnel needs it, so its absence is a warning.
//!
//! `cloudflared --version` runs once, without a shell, within [`TIMEOUT`]; at most
//! [`MAX_OUTPUT`] bytes of its output are read.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use super::report::Check;

/// Longest `cloudflared --version` may take.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// Most bytes of its output read.
pub const MAX_OUTPUT: u64 = 4096;

/// The version `cloudflared --version` printed (`cloudflared version 2025.8.1 (built …)`):
/// the word after `version`, when it is letters, digits and `.+-_` only.
pub fn parse_version(output: &str) -> Option<&str> {
    let mut words = output.split_whitespace();
    words.find(|w| *w == "version")?;
    words.next().filter(|v| {
        !v.is_empty()
            && v.len() <= 64
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || ".+-_".contains(c))
    })
}

/// Runs the check with `program` (`cloudflared`, or the path `--cloudflared` gives).
pub async fn check(program: &Path) -> Check {
    let fix = vec![
        "install cloudflared from Cloudflare's package repository (apt install cloudflared)"
            .to_owned(),
    ];
    let child = tokio::process::Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Check::warn(
                "tunnel",
                format!(
                    "{} is not installed: needed only on a host whose data plan names a tunnel",
                    program.display()
                ),
                fix,
            );
        }
        Err(e) => {
            return Check::warn(
                "tunnel",
                format!("{} could not run: {e}", program.display()),
                fix,
            );
        }
    };
    let mut out = String::new();
    let read = async {
        if let Some(stdout) = child.stdout.take() {
            let _ = stdout.take(MAX_OUTPUT).read_to_string(&mut out).await;
        }
        child.wait().await
    };
    match tokio::time::timeout(TIMEOUT, read).await {
        Ok(Ok(status)) if status.success() => match parse_version(&out) {
            Some(version) => Check::ok("tunnel", format!("cloudflared {version} is installed")),
            None => Check::warn(
                "tunnel",
                "cloudflared is installed but did not name its version",
                Vec::new(),
            ),
        },
        Ok(Ok(status)) => Check::warn(
            "tunnel",
            format!("{} --version exited with {status}", program.display()),
            fix,
        ),
        Ok(Err(e)) => Check::warn(
            "tunnel",
            format!("{} --version: {e}", program.display()),
            fix,
        ),
        Err(_) => Check::warn(
            "tunnel",
            format!(
                "{} --version did not answer within {TIMEOUT:?}",
                program.display()
            ),
            fix,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_the_word_after_version() {
        assert_eq!(
            parse_version("cloudflared version 2025.8.1 (built 2025-08-20-1200 UTC)\n"),
            Some("2025.8.1")
        );
        assert_eq!(parse_version("cloudflared\n"), None);
        assert_eq!(parse_version("cloudflared version \u{1b}[2J\n"), None);
    }

    #[tokio::test]
    async fn installed_missing_and_hanging_are_told_apart() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let script = |name: &str, body: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            path
        };
        let ok = check(&script(
            "ok",
            "echo 'cloudflared version 2025.8.1 (built x)'",
        ))
        .await;
        assert_eq!(ok.status, super::super::Status::Ok);
        assert!(ok.detail.contains("2025.8.1"));
        let missing = check(&dir.path().join("absent")).await;
        assert_eq!(missing.status, super::super::Status::Warn);
        assert!(
            missing.detail.contains("not installed"),
            "{}",
            missing.detail
        );
        let failing = check(&script("fails", "exit 1")).await;
        assert_eq!(failing.status, super::super::Status::Warn);
    }
}
