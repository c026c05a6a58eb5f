//! The servers the node pretends to reach: Proxmox Backup Servers, NFS and CIFS servers,
//! keyed by host name or address. A storage of type `pbs`, `nfs` or `cifs` is active only while
//! its server is reachable and accepts what the storage presents; a PBS server also keeps the
//! backups, per (datastore, namespace), so two storages on the same triple see the same
//! backups and a storage removed and added again finds them.
//!
//! A server no test declared is an implicit remote: reachable, accepting any credentials,
//! fingerprint, datastore, export or share (tests that do not care about remotes keep
//! working). Declaring it (admin `PUT /_sim/remotes/{server}` or the `SimHandle` methods) makes
//! it strict; [`Remotes::strict`] makes undeclared servers unknown hosts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::state::Volume;

/// What a declared server offers (the admin endpoint's JSON body, tagged by `type`).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum RemoteSpec {
    /// A Proxmox Backup Server.
    Pbs {
        /// SHA-256 of its certificate, colon-separated hex (compared case-insensitively).
        fingerprint: String,
        /// Datastore names.
        datastores: Vec<String>,
        /// The user or API token it accepts (`user@realm!token`, `user@pbs`); any if absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        username: Option<String>,
        /// The password or token secret it accepts; never listed.
        #[serde(default, skip_serializing)]
        password: String,
    },
    /// An NFS server.
    Nfs {
        /// Export paths (`/srv/backup`).
        exports: Vec<String>,
    },
    /// A CIFS/SMB server.
    Cifs {
        /// Share names.
        shares: Vec<String>,
        /// The user it accepts; any if absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        username: Option<String>,
        /// The password it accepts (`None`: guest access); never listed.
        #[serde(default, skip_serializing)]
        password: Option<String>,
    },
}

impl std::fmt::Debug for RemoteSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RemoteSpec::Pbs {
                fingerprint,
                datastores,
                username,
                ..
            } => f
                .debug_struct("Pbs")
                .field("fingerprint", fingerprint)
                .field("datastores", datastores)
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
            RemoteSpec::Nfs { exports } => f.debug_struct("Nfs").field("exports", exports).finish(),
            RemoteSpec::Cifs {
                shares, username, ..
            } => f
                .debug_struct("Cifs")
                .field("shares", shares)
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
        }
    }
}

/// One server as the admin endpoint lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteInfo {
    pub server: String,
    pub reachable: bool,
    /// Answers connection checks but not I/O (`hung_mounts.rs`).
    #[serde(default)]
    pub hanging: bool,
    /// `None` for an implicit remote (never declared).
    pub spec: Option<RemoteSpec>,
}

/// The admin endpoint's `PUT /_sim/remotes/{server}` body: the spec plus `reachable`
/// (default true).
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct RemoteDeclaration {
    #[serde(flatten)]
    pub(crate) spec: RemoteSpec,
    #[serde(default = "yes")]
    pub(crate) reachable: bool,
}

fn yes() -> bool {
    true
}

/// A PBS server's backups per (datastore, namespace), volids without the storage
/// (`backup/ct/…`).
pub(crate) type Backups = BTreeMap<(String, String), Vec<Volume>>;

/// A declared or implicit server and the backups it holds.
#[derive(Debug, Clone)]
struct Remote {
    spec: Option<RemoteSpec>,
    reachable: bool,
    /// Answers connection checks but not I/O on its mounts.
    hanging: bool,
    backups: Backups,
}

/// The registry of servers.
#[derive(Debug, Default)]
pub(crate) struct Remotes {
    servers: BTreeMap<String, Remote>,
    /// Whether an undeclared server is an unknown host rather than an implicit remote.
    pub(crate) strict: bool,
}

/// What a storage presents to its server when it is activated.
#[derive(Debug)]
pub(crate) enum Access<'a> {
    Pbs {
        datastore: &'a str,
        username: &'a str,
        password: Option<&'a str>,
        fingerprint: Option<&'a str>,
        port: &'a str,
    },
    Nfs {
        export: &'a str,
    },
    Cifs {
        share: &'a str,
        username: Option<&'a str>,
        password: Option<&'a str>,
    },
}

impl Remotes {
    /// Declares or replaces a server; a PBS server keeps the backups it held.
    pub(crate) fn declare(&mut self, server: &str, spec: RemoteSpec, reachable: bool) {
        let entry = self
            .servers
            .entry(server.to_owned())
            .or_insert_with(|| Remote {
                spec: None,
                reachable,
                hanging: false,
                backups: BTreeMap::new(),
            });
        entry.spec = Some(spec);
        entry.reachable = reachable;
    }

    /// Flips reachability; an undeclared server becomes an implicit remote.
    pub(crate) fn set_reachable(&mut self, server: &str, reachable: bool) {
        self.entry(server).reachable = reachable;
    }

    /// Makes a server hang (answer connection checks, not I/O) or answer again; an
    /// undeclared one becomes an implicit remote.
    pub(crate) fn set_hanging(&mut self, server: &str, hanging: bool) {
        self.entry(server).hanging = hanging;
    }

    /// Whether I/O on `server`'s mounts hangs.
    pub(crate) fn is_hanging(&self, server: &str) -> bool {
        self.servers.get(server).is_some_and(|r| r.hanging)
    }

    pub(crate) fn list(&self) -> Vec<RemoteInfo> {
        self.servers
            .iter()
            .map(|(server, r)| RemoteInfo {
                server: server.clone(),
                reachable: r.reachable,
                hanging: r.hanging,
                spec: r.spec.clone(),
            })
            .collect()
    }

    /// A known server's spec (`None`: implicit) and backups; `None` for a server no test
    /// declared and no storage used.
    pub(crate) fn store(&self, server: &str) -> Option<(Option<&RemoteSpec>, &Backups)> {
        self.servers
            .get(server)
            .map(|r| (r.spec.as_ref(), &r.backups))
    }

    /// Makes `server` exactly this: declared with `spec` (`None`: an implicit remote),
    /// reachable, holding `backups` and nothing else.
    pub(crate) fn replace(&mut self, server: &str, spec: Option<RemoteSpec>, backups: Backups) {
        self.servers.insert(
            server.to_owned(),
            Remote {
                spec,
                reachable: true,
                hanging: false,
                backups,
            },
        );
    }

    fn entry(&mut self, server: &str) -> &mut Remote {
        self.servers
            .entry(server.to_owned())
            .or_insert_with(|| Remote {
                spec: None,
                reachable: true,
                hanging: false,
                backups: BTreeMap::new(),
            })
    }

    /// The backups of one (server, datastore, namespace).
    pub(crate) fn backups(&self, server: &str, datastore: &str, ns: &str) -> &[Volume] {
        self.servers
            .get(server)
            .and_then(|r| r.backups.get(&(datastore.to_owned(), ns.to_owned())))
            .map_or(&[], Vec::as_slice)
    }

    pub(crate) fn backups_mut(
        &mut self,
        server: &str,
        datastore: &str,
        ns: &str,
    ) -> &mut Vec<Volume> {
        self.entry(server)
            .backups
            .entry((datastore.to_owned(), ns.to_owned()))
            .or_default()
    }

    /// Bytes the backups of one datastore take (every namespace).
    pub(crate) fn datastore_used(&self, server: &str, datastore: &str) -> u64 {
        self.servers.get(server).map_or(0, |r| {
            r.backups
                .iter()
                .filter(|((ds, _), _)| ds == datastore)
                .flat_map(|(_, vols)| vols.iter().map(|v| v.size))
                .sum()
        })
    }

    /// Activates storage `sid` on `server`: `Err` carries PVE's message (without the
    /// `create storage failed: ` a create adds).
    pub(crate) fn activate(
        &self,
        sid: &str,
        server: &str,
        access: &Access<'_>,
    ) -> Result<(), String> {
        let remote = match self.servers.get(server) {
            Some(r) => r,
            None if self.strict => {
                return Err(unreachable(
                    sid,
                    server,
                    access,
                    "Name or service not known",
                ));
            }
            None => return Ok(()),
        };
        if !remote.reachable {
            return Err(unreachable(sid, server, access, "No route to host"));
        }
        let Some(spec) = &remote.spec else {
            return Ok(());
        };
        match (spec, access) {
            (
                RemoteSpec::Pbs {
                    fingerprint,
                    datastores,
                    username: accepted_user,
                    password: accepted,
                },
                Access::Pbs {
                    datastore,
                    username,
                    password,
                    fingerprint: given,
                    ..
                },
            ) => {
                let fetch = |e: &str| format!("{sid}: error fetching datastores - {e}");
                // PVE::APIClient::LWP trusts only the configured fingerprint; a self-signed
                // PBS certificate with no (or another) fingerprint is refused.
                if !given.is_some_and(|g| g.eq_ignore_ascii_case(fingerprint)) {
                    return Err(fetch(&format!(
                        "fingerprint '{}' not verified, abort!",
                        fingerprint.to_ascii_uppercase()
                    )));
                }
                let user_ok = accepted_user.as_deref().is_none_or(|u| u == *username);
                if !user_ok || *password != Some(accepted.as_str()) {
                    // A token calls the API directly (the reason phrase); a user logs in
                    // first (the status line).
                    return Err(fetch(if username.contains('!') {
                        "Unauthorized"
                    } else {
                        "401 Unauthorized"
                    }));
                }
                if !datastores.iter().any(|d| d == datastore) {
                    return Err(format!(
                        "{sid}: Cannot find datastore '{datastore}', check permissions and existence!"
                    ));
                }
                Ok(())
            }
            (RemoteSpec::Nfs { exports }, Access::Nfs { export }) => {
                if exports
                    .iter()
                    .any(|e| e.trim_end_matches('/') == export.trim_end_matches('/'))
                {
                    Ok(())
                } else {
                    Err(format!(
                        "mount error: mount.nfs: access denied by server while mounting {server}:{export}"
                    ))
                }
            }
            (
                RemoteSpec::Cifs {
                    shares,
                    username: accepted_user,
                    password: accepted,
                },
                Access::Cifs {
                    share,
                    username,
                    password,
                },
            ) => {
                let user_ok = accepted_user.is_none() || accepted_user.as_deref() == *username;
                if accepted.is_some() && (!user_ok || accepted.as_deref() != *password) {
                    return Err(format!(
                        "connection check for storage '{sid}' failed - session setup failed: NT_STATUS_LOGON_FAILURE"
                    ));
                }
                // smbclient's `tree connect failed: NT_STATUS_BAD_NETWORK_NAME` is not one
                // of the failures PVE reports; the storage is just not online.
                if shares.iter().any(|s| s == share) {
                    Ok(())
                } else {
                    Err(format!("storage '{sid}' is not online"))
                }
            }
            _ => Err(format!("storage '{sid}' is not online")),
        }
    }
}

/// What activation says when the server cannot be reached at all.
fn unreachable(sid: &str, server: &str, access: &Access<'_>, why: &str) -> String {
    match access {
        Access::Pbs { username, port, .. } => {
            let text = format!("Can't connect to {server}:{port} ({why})");
            if username.contains('!') {
                format!("{sid}: error fetching datastores - {text}")
            } else {
                format!("{sid}: error fetching datastores - 500 {text}")
            }
        }
        // showmount / smbclient fail: the connection check answers "not online".
        Access::Nfs { .. } | Access::Cifs { .. } => format!("storage '{sid}' is not online"),
    }
}

/// Whether `path` is a mount point now (PVE's `path_is_mounted`: the real path must be the
/// mount point of an entry in `/proc/self/mountinfo`).
pub(crate) fn path_is_mounted(path: &str) -> bool {
    let Ok(real) = std::fs::canonicalize(path) else {
        return false;
    };
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let real = real.to_string_lossy();
    info.lines()
        .filter_map(|line| line.split(' ').nth(4))
        .any(|mp| unescape_mount(mp) == real)
}

/// Mount table fields escape space, tab, newline and backslash as `\ooo`.
fn unescape_mount(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(u8::is_ascii_digit));
        if bytes[i] == b'\\'
            && let Some(code) = octal.and_then(|d| {
                u8::from_str_radix(std::str::from_utf8(d).unwrap_or_default(), 8).ok()
            })
        {
            out.push(code);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount point `is_mountpoint` names (PVE's `parse_is_mountpoint`): a boolean stands for
/// the storage's path, anything else is a path.
pub(crate) fn mountpoint_of(is_mountpoint: &str, path: &str) -> Option<String> {
    match is_mountpoint {
        "1" | "on" | "yes" | "true" => Some(path.to_owned()),
        "0" | "off" | "no" | "false" => None,
        other => Some(other.to_owned()),
    }
}
