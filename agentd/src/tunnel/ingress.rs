//! The tunnel's configuration file, as `cloudflared tunnel --config FILE run` reads it:
//!
//! ```yaml
//! tunnel: 6ff42ae2-765d-4adf-8112-31c55c1551ef
//! credentials-file: "/var/lib/bosun/tunnel/credentials.json"
//! ingress:
//!   - hostname: shop.example.com
//!     service: http://10.0.0.5:80
//!   - service: http_status:404
//! ```
//!
//! Rules are matched top to bottom; the last one must match every request (no hostname) and
//! only the last one may. Bosun checks what `cloudflared tunnel ingress validate` checks for
//! the subset it writes before the file is replaced ([`IngressConfig::validate`]): a file the
//! tunnel would refuse is never written, and the one in place keeps serving.

use std::collections::HashSet;
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use bosun_proto::tunnel::is_route_hostname;
use uuid::Uuid;

/// The catch-all rule's service: anything no hostname names gets a 404 from the tunnel.
pub const CATCH_ALL: &str = "http_status:404";

/// One hostname rule: the hostname and the guest address it reaches.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct IngressRule {
    /// The public hostname.
    pub hostname: String,
    /// The guest's address on the bridge.
    pub address: Ipv4Addr,
    /// The guest's port.
    pub port: u16,
}

impl IngressRule {
    /// The rule's `service:` (`http://ADDRESS:PORT`, never a path).
    pub fn service(&self) -> String {
        format!("http://{}:{}", self.address, self.port)
    }
}

/// A whole configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngressConfig {
    /// The tunnel's UUID.
    pub tunnel_id: Uuid,
    /// The credentials file the tunnel reads.
    pub credentials_file: PathBuf,
    /// The hostname rules, in file order (the catch-all follows them).
    pub rules: Vec<IngressRule>,
}

/// Why a configuration is not written.
#[derive(Debug, thiserror::Error)]
pub enum IngressError {
    /// A rule would be refused by the tunnel, or is not one Bosun writes.
    #[error("ingress rule {index} ({hostname}): {reason}")]
    Rule {
        /// The rule's position (1-based, as cloudflared counts).
        index: usize,
        /// Its hostname.
        hostname: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// The credentials path is not a plain absolute path.
    #[error("the credentials file {path} is not a plain absolute path")]
    CredentialsPath {
        /// The path.
        path: PathBuf,
    },
    /// The file could not be written.
    #[error("writing the tunnel configuration {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl IngressConfig {
    /// Checks the rules as `cloudflared tunnel ingress validate` would, for what Bosun writes:
    /// each hostname rule names one lowercase DNS hostname (no wildcard, no port) once, and a
    /// service with a host and port but no path; the catch-all is added last by [`Self::render`].
    pub fn validate(&self) -> Result<(), IngressError> {
        let path = self.credentials_file.to_string_lossy();
        if !self.credentials_file.is_absolute()
            || path
                .chars()
                .any(|c| bosun_proto::inert::is_control(c) || c == '"' || c == '\\')
        {
            return Err(IngressError::CredentialsPath {
                path: self.credentials_file.clone(),
            });
        }
        let mut seen = HashSet::new();
        for (i, rule) in self.rules.iter().enumerate() {
            let bad = |reason| IngressError::Rule {
                index: i + 1,
                hostname: rule.hostname.chars().take(64).collect(),
                reason,
            };
            if !is_route_hostname(&rule.hostname) {
                return Err(bad("not a lowercase DNS hostname (no wildcard, no port)"));
            }
            if !seen.insert(rule.hostname.as_str()) {
                return Err(bad("a second rule for one hostname is never matched"));
            }
            if rule.port == 0 {
                return Err(bad("the service has no port"));
            }
            if rule.address.is_unspecified()
                || rule.address.is_broadcast()
                || rule.address.is_multicast()
                || rule.address.is_loopback()
            {
                return Err(bad(
                    "the service address is not a guest's address on the bridge",
                ));
            }
        }
        Ok(())
    }

    /// The file's text: the hostname rules in order, then the catch-all.
    pub fn render(&self) -> String {
        let path = self.credentials_file.to_string_lossy();
        let mut out = String::with_capacity(128 + 96 * self.rules.len());
        out.push_str(
            "# Written by bosun-agentd from the host's signed data plan; edits are replaced.\n",
        );
        out.push_str(&format!("tunnel: {}\n", self.tunnel_id));
        out.push_str(&format!("credentials-file: \"{path}\"\n"));
        out.push_str("ingress:\n");
        for rule in &self.rules {
            out.push_str(&format!(
                "  - hostname: {}\n    service: {}\n",
                rule.hostname,
                rule.service()
            ));
        }
        out.push_str(&format!("  - service: {CATCH_ALL}\n"));
        out
    }

    /// Validates, then replaces `path` atomically (a sibling written, synced and renamed over
    /// it, mode 0640): the tunnel reads either the old file or the new one, never half.
    pub fn write(&self, path: &Path) -> Result<(), IngressError> {
        self.validate()?;
        write_atomic(path, self.render().as_bytes()).map_err(|source| IngressError::Write {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// The tunnel a configuration this agent wrote names (its `tunnel:` line).
pub fn tunnel_of(text: &str) -> Option<Uuid> {
    text.lines()
        .find_map(|l| l.strip_prefix("tunnel: "))
        .and_then(|id| Uuid::parse_str(id.trim()).ok())
}

/// Replaces `path` atomically with `bytes`: a sibling `NAME.tmp` written (mode 0640, so the
/// tunnel's group of the setgid directory reads it and nobody else), synced and renamed over
/// it, then the directory synced. The tunnel reads the old file or the new one, never half.
pub(super) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("no file name"))?
        .to_owned();
    name.push(".tmp");
    let tmp = path.with_file_name(name);
    let _ = std::fs::remove_file(&tmp);
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o640)
            .open(&tmp)?;
        // The agent's umask (0077) would leave the tunnel's group unable to read it.
        file.set_permissions(std::fs::Permissions::from_mode(0o640))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        // Never leave a half-written sibling (it may hold the tunnel's credentials).
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    if let Some(dir) = path.parent()
        && let Ok(d) = std::fs::File::open(dir)
    {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(rules: Vec<IngressRule>) -> IngressConfig {
        IngressConfig {
            tunnel_id: Uuid::from_u128(0x6ff4),
            credentials_file: "/var/lib/bosun/tunnel/credentials.json".into(),
            rules,
        }
    }

    #[test]
    fn the_tunnel_a_written_configuration_names_is_read_back() {
        let written = config(vec![rule("a.example.com", 1)]).render();
        assert_eq!(tunnel_of(&written), Some(Uuid::from_u128(0x6ff4)));
        assert_eq!(tunnel_of("ingress:\n  - service: http_status:404\n"), None);
        assert_eq!(tunnel_of("tunnel: not-a-uuid\n"), None);
    }

    fn rule(hostname: &str, last: u8) -> IngressRule {
        IngressRule {
            hostname: hostname.into(),
            address: Ipv4Addr::new(10, 0, 0, last),
            port: 8080,
        }
    }

    #[test]
    fn the_file_lists_each_hostname_then_the_catch_all() {
        let c = config(vec![rule("a.example.com", 5), rule("b.example.com", 6)]);
        c.validate().unwrap();
        assert_eq!(
            c.render(),
            "# Written by bosun-agentd from the host's signed data plan; edits are replaced.\n\
             tunnel: 00000000-0000-0000-0000-000000006ff4\n\
             credentials-file: \"/var/lib/bosun/tunnel/credentials.json\"\n\
             ingress:\n  - hostname: a.example.com\n    service: http://10.0.0.5:8080\n  \
             - hostname: b.example.com\n    service: http://10.0.0.6:8080\n  \
             - service: http_status:404\n"
        );
        // No guest: the catch-all alone, which cloudflared accepts.
        assert!(
            config(vec![])
                .render()
                .ends_with("ingress:\n  - service: http_status:404\n")
        );
    }

    #[test]
    fn what_the_tunnel_would_refuse_is_never_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yml");
        config(vec![rule("a.example.com", 5)]).write(&path).unwrap();
        let good = std::fs::read_to_string(&path).unwrap();
        let mut loopback = rule("c.example.com", 1);
        loopback.address = Ipv4Addr::LOCALHOST;
        let mut portless = rule("d.example.com", 1);
        portless.port = 0;
        for (bad, index) in [
            (vec![rule("*.example.com", 5)], 1),
            (vec![rule("a.example.com:80", 5)], 1),
            (vec![rule("a.example.com", 5), rule("a.example.com", 6)], 2),
            (vec![loopback], 1),
            (vec![portless], 1),
        ] {
            let err = config(bad).write(&path).unwrap_err();
            assert!(
                matches!(err, IngressError::Rule { index: i, .. } if i == index),
                "{err}"
            );
        }
        let mut quoted = config(vec![]);
        quoted.credentials_file = "/x/\"y".into();
        assert!(matches!(
            quoted.write(&path).unwrap_err(),
            IngressError::CredentialsPath { .. }
        ));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), good, "kept");
        assert!(!dir.path().join("config.yml.tmp").exists());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o640, "the tunnel's group reads it");
    }
}
