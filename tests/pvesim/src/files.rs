//! A guest's files: a small in-memory tree of directories, regular files and symlinks with
//! mode and owner, enough for what root does to a CT from the node (`pct push`, the few
//! programs `pct exec` models) and for archives, snapshots and rollbacks to carry it.
//!
//! Paths are absolute and canonical (`/etc/ssh`); owners are the guest's own ids (root = 0),
//! as `pct push --user`/`--group` and the guest see them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What one path is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    Dir,
    File(Vec<u8>),
    Symlink(String),
}

/// One entry of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Node {
    pub(crate) kind: Kind,
    /// Permission bits (`0o644`), without the file type.
    pub(crate) mode: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

/// A guest's file as tests and the admin endpoint see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestFile {
    /// Canonical path inside the guest.
    pub path: String,
    /// `file`, `dir` or `symlink`.
    pub kind: String,
    /// Permission bits, e.g. `0o600`.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// A file's bytes (hex on the wire); a symlink's target; empty for a directory.
    #[serde(with = "hex_bytes")]
    pub content: Vec<u8>,
}

mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(bytes))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        hex::decode(text).map_err(serde::de::Error::custom)
    }
}

/// The tree; `/` always exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileTree {
    nodes: BTreeMap<String, Node>,
}

impl Default for FileTree {
    fn default() -> Self {
        let mut nodes = BTreeMap::new();
        nodes.insert("/".to_owned(), dir_node(0o755));
        Self { nodes }
    }
}

fn dir_node(mode: u32) -> Node {
    Node {
        kind: Kind::Dir,
        mode,
        uid: 0,
        gid: 0,
    }
}

/// `/a//b/./c/` → `/a/b/c`; relative paths and `..` are refused.
pub(crate) fn canonical(path: &str) -> Result<String, String> {
    if !path.starts_with('/') {
        return Err(format!("'{path}' is not an absolute path"));
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(format!("'{path}' contains '..'")),
            p if p.contains('\0') => return Err("a path contains a NUL byte".to_owned()),
            p => parts.push(p),
        }
    }
    Ok(format!("/{}", parts.join("/")))
}

/// The parent of a canonical path (`/` for `/etc`).
pub(crate) fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// The last component of a canonical path.
pub(crate) fn name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

impl FileTree {
    pub(crate) fn get(&self, path: &str) -> Option<&Node> {
        self.nodes.get(path)
    }

    pub(crate) fn is_dir(&self, path: &str) -> bool {
        matches!(self.nodes.get(path).map(|n| &n.kind), Some(Kind::Dir))
    }

    pub(crate) fn is_file(&self, path: &str) -> bool {
        matches!(self.nodes.get(path).map(|n| &n.kind), Some(Kind::File(_)))
    }

    /// A file's bytes.
    pub(crate) fn content(&self, path: &str) -> Option<&[u8]> {
        match self.nodes.get(path).map(|n| &n.kind) {
            Some(Kind::File(bytes)) => Some(bytes),
            _ => None,
        }
    }

    /// The entry as [`GuestFile`].
    pub(crate) fn describe(&self, path: &str) -> Option<GuestFile> {
        let node = self.nodes.get(path)?;
        let (kind, content) = match &node.kind {
            Kind::Dir => ("dir", Vec::new()),
            Kind::File(bytes) => ("file", bytes.clone()),
            Kind::Symlink(target) => ("symlink", target.clone().into_bytes()),
        };
        Some(GuestFile {
            path: path.to_owned(),
            kind: kind.to_owned(),
            mode: node.mode,
            uid: node.uid,
            gid: node.gid,
            content,
        })
    }

    /// Every entry, `/` first and parents before their children, as [`GuestFile`]s (how an
    /// archive's files travel in a remote server's store).
    pub(crate) fn entries(&self) -> Vec<GuestFile> {
        self.nodes
            .keys()
            .filter_map(|path| self.describe(path))
            .collect()
    }

    /// The tree `entries` describe, in any order: each path canonical and listed once, a kind
    /// of `dir`, `file` or `symlink`, permission bits only, `/` and every parent a directory.
    pub(crate) fn from_entries(entries: Vec<GuestFile>) -> Result<Self, String> {
        let mut nodes = BTreeMap::new();
        for entry in entries {
            let path = entry.path;
            if canonical(&path).ok().as_deref() != Some(path.as_str()) {
                return Err(format!("'{path}' is not a canonical absolute path"));
            }
            if entry.mode & !0o7777 != 0 {
                return Err(format!(
                    "'{path}': mode {:#o} has more than permission bits",
                    entry.mode
                ));
            }
            let kind = match entry.kind.as_str() {
                "dir" if entry.content.is_empty() => Kind::Dir,
                "dir" => return Err(format!("'{path}': a directory has no content")),
                "file" => Kind::File(entry.content),
                "symlink" => match String::from_utf8(entry.content) {
                    Ok(target) if !target.is_empty() && !target.contains('\0') => {
                        Kind::Symlink(target)
                    }
                    _ => return Err(format!("'{path}': a symlink needs a target")),
                },
                other => return Err(format!("'{path}': unknown kind '{other}'")),
            };
            let node = Node {
                kind,
                mode: entry.mode,
                uid: entry.uid,
                gid: entry.gid,
            };
            if nodes.insert(path.clone(), node).is_some() {
                return Err(format!("'{path}' is listed twice"));
            }
        }
        let tree = Self { nodes };
        if !tree.is_dir("/") {
            return Err("'/' is missing or not a directory".to_owned());
        }
        if let Some(orphan) = tree
            .nodes
            .keys()
            .find(|p| p.as_str() != "/" && !tree.is_dir(parent(p)))
        {
            return Err(format!("the parent of '{orphan}' is not a directory"));
        }
        Ok(tree)
    }

    /// Every path below `dir` (not `dir` itself), at most `depth` levels down.
    pub(crate) fn below(&self, dir: &str, depth: usize) -> Vec<String> {
        let prefix = if dir == "/" {
            "/".to_owned()
        } else {
            format!("{dir}/")
        };
        self.nodes
            .keys()
            .filter(|p| p.len() > prefix.len() && p.starts_with(&prefix))
            .filter(|p| p[prefix.len()..].split('/').count() <= depth)
            .cloned()
            .collect()
    }

    /// Creates one directory; its parent must be a directory. `Ok(false)` if it existed.
    pub(crate) fn mkdir(&mut self, path: &str, mode: u32) -> Result<bool, &'static str> {
        match self.nodes.get(path).map(|n| &n.kind) {
            Some(Kind::Dir) => return Ok(false),
            Some(_) => return Err("File exists"),
            None => {}
        }
        match self.nodes.get(parent(path)).map(|n| &n.kind) {
            Some(Kind::Dir) => {}
            Some(_) => return Err("Not a directory"),
            None => return Err("No such file or directory"),
        }
        self.nodes.insert(path.to_owned(), dir_node(mode));
        Ok(true)
    }

    /// `mkdir -p`: every missing component is created with `mode`.
    pub(crate) fn mkdir_all(&mut self, path: &str, mode: u32) -> Result<(), &'static str> {
        let mut at = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            at.push('/');
            at.push_str(part);
            self.mkdir(&at, mode)?;
        }
        Ok(())
    }

    /// Writes a regular file. A new file gets `new_mode`; an existing one is truncated and
    /// keeps its mode and owner. The parent must be a directory.
    pub(crate) fn write(
        &mut self,
        path: &str,
        content: Vec<u8>,
        new_mode: u32,
    ) -> Result<(), &'static str> {
        match self.nodes.get_mut(path) {
            Some(Node {
                kind: kind @ Kind::File(_),
                ..
            }) => {
                *kind = Kind::File(content);
                return Ok(());
            }
            Some(Node {
                kind: Kind::Dir, ..
            }) => return Err("Is a directory"),
            Some(_) | None => {}
        }
        match self.nodes.get(parent(path)).map(|n| &n.kind) {
            Some(Kind::Dir) => {}
            Some(_) => return Err("Not a directory"),
            None => return Err("No such file or directory"),
        }
        self.nodes.insert(
            path.to_owned(),
            Node {
                kind: Kind::File(content),
                mode: new_mode,
                uid: 0,
                gid: 0,
            },
        );
        Ok(())
    }

    /// Sets mode and/or owner of an existing path.
    pub(crate) fn set_attrs(
        &mut self,
        path: &str,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
    ) {
        if let Some(node) = self.nodes.get_mut(path) {
            node.mode = mode.unwrap_or(node.mode);
            node.uid = uid.unwrap_or(node.uid);
            node.gid = gid.unwrap_or(node.gid);
        }
    }

    /// Creates or replaces a symlink (`ln -sf`).
    pub(crate) fn symlink(&mut self, path: &str, target: &str) -> Result<(), &'static str> {
        if self.is_dir(path) {
            return Err("Is a directory");
        }
        if !self.is_dir(parent(path)) {
            return Err("No such file or directory");
        }
        self.nodes.insert(
            path.to_owned(),
            Node {
                kind: Kind::Symlink(target.to_owned()),
                mode: 0o777,
                uid: 0,
                gid: 0,
            },
        );
        Ok(())
    }

    /// Removes `path` and everything below it (`rm -rf`); whether there was anything.
    pub(crate) fn remove_all(&mut self, path: &str) -> bool {
        let below = format!("{path}/");
        let before = self.nodes.len();
        self.nodes
            .retain(|p, _| p == "/" || (p != path && !p.starts_with(&below)));
        self.nodes.len() != before
    }

    /// Renames `from` (and everything below it) to `to`, which must not exist and whose
    /// parent must be a directory (`mv -T`).
    pub(crate) fn rename(&mut self, from: &str, to: &str) -> Result<(), &'static str> {
        if !self.nodes.contains_key(from) {
            return Err("No such file or directory");
        }
        if self.nodes.contains_key(to) {
            return Err("File exists");
        }
        if !self.is_dir(parent(to)) {
            return Err("No such file or directory");
        }
        let below = format!("{from}/");
        let moved: Vec<String> = self
            .nodes
            .keys()
            .filter(|p| *p == from || p.starts_with(&below))
            .cloned()
            .collect();
        for old in moved {
            if let Some(node) = self.nodes.remove(&old) {
                self.nodes
                    .insert(format!("{to}{}", &old[from.len()..]), node);
            }
        }
        Ok(())
    }

    /// Removes a file or symlink. `Ok(false)` if it did not exist.
    pub(crate) fn remove_file(&mut self, path: &str) -> Result<bool, &'static str> {
        match self.nodes.get(path).map(|n| &n.kind) {
            None => Ok(false),
            Some(Kind::Dir) => Err("Is a directory"),
            Some(_) => {
                self.nodes.remove(path);
                Ok(true)
            }
        }
    }

    /// Where `path` leads once every symlink on the way is followed, the last component
    /// included (absolute targets from the guest's root, relative ones from the link's
    /// directory), as `execve` resolves it. `None` when a component is missing, a file stands
    /// where a directory is needed, or more than 40 links are followed (`ELOOP`).
    pub(crate) fn resolve(&self, path: &str) -> Option<String> {
        const MAX_LINKS: usize = 40;
        let mut pending: std::collections::VecDeque<String> =
            path.split('/').map(str::to_owned).collect();
        let mut at = "/".to_owned();
        let mut links = 0;
        while let Some(part) = pending.pop_front() {
            match part.as_str() {
                "" | "." => continue,
                ".." => {
                    at = parent(&at).to_owned();
                    continue;
                }
                _ => {}
            }
            let next = if at == "/" {
                format!("/{part}")
            } else {
                format!("{at}/{part}")
            };
            match &self.nodes.get(&next)?.kind {
                Kind::Dir => at = next,
                Kind::File(_) if pending.iter().all(|p| p.is_empty() || p == ".") => at = next,
                Kind::File(_) => return None,
                Kind::Symlink(target) => {
                    links += 1;
                    if links > MAX_LINKS {
                        return None;
                    }
                    if target.starts_with('/') {
                        at = "/".to_owned();
                    }
                    for piece in target.split('/').rev() {
                        pending.push_front(piece.to_owned());
                    }
                }
            }
        }
        Some(at)
    }

    /// Whether the guest could exec `path`: it resolves to a regular file with an execute bit.
    pub(crate) fn executable(&self, path: &str) -> bool {
        self.resolve(path)
            .and_then(|real| self.nodes.get(&real))
            .is_some_and(|node| matches!(node.kind, Kind::File(_)) && node.mode & 0o111 != 0)
    }

    /// The uid of a user named in the guest's `/etc/passwd` (or a number).
    pub(crate) fn lookup_id(&self, name: &str, database: &str) -> Option<u32> {
        if let Ok(id) = name.parse::<u32>() {
            return Some(id);
        }
        let text = String::from_utf8_lossy(self.content(database)?).into_owned();
        text.lines().find_map(|line| {
            let mut fields = line.split(':');
            (fields.next() == Some(name))
                .then(|| fields.nth(1)?.parse().ok())
                .flatten()
        })
    }
}

/// What LXC execs as the container's init; a CT without it does not start.
pub(crate) const INIT: &str = "/sbin/init";

/// The Debian 12 standard template (`debian-12-standard_12.7-1_amd64.tar.zst`): the
/// directories and files the simulated programs touch, and the init LXC starts
/// (`/sbin/init` → `/lib/systemd/systemd`, as `systemd-sysv` installs it).
pub(crate) fn debian_template() -> FileTree {
    let mut tree = FileTree::default();
    let dirs: &[(&str, u32)] = &[
        ("/etc", 0o755),
        ("/etc/apt", 0o755),
        ("/etc/ssh", 0o755),
        ("/etc/systemd", 0o755),
        ("/etc/systemd/system", 0o755),
        ("/etc/systemd/system/multi-user.target.wants", 0o755),
        ("/lib", 0o755),
        ("/lib/systemd", 0o755),
        ("/root", 0o700),
        ("/run", 0o755),
        ("/sbin", 0o755),
        ("/tmp", 0o1777),
        ("/usr", 0o755),
        ("/usr/bin", 0o755),
        ("/usr/lib", 0o755),
        ("/usr/lib/systemd", 0o755),
        ("/usr/lib/systemd/system", 0o755),
        ("/var", 0o755),
        ("/var/lib", 0o755),
        ("/var/lib/apt", 0o755),
    ];
    for (dir, mode) in dirs {
        // The list is ordered parent-first, so every parent exists.
        let _ = tree.mkdir(dir, *mode);
    }
    let files: &[(&str, &str, u32)] = &[
        ("/etc/hostname", "localhost\n", 0o644),
        (
            "/etc/machine-id",
            "6f1c2be0d1a94b7c9a1f0e3d5c7b9a21\n",
            0o444,
        ),
        (
            "/etc/os-release",
            "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\nVERSION_ID=\"12\"\n",
            0o644,
        ),
        (
            "/etc/passwd",
            "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
            0o644,
        ),
        (
            "/etc/group",
            "root:x:0:\ndaemon:x:1:\nnogroup:x:65534:\n",
            0o644,
        ),
    ];
    for (path, text, mode) in files {
        let _ = tree.write(path, text.as_bytes().to_vec(), *mode);
    }
    for program in [
        "apt-get",
        "dash",
        "env",
        "find",
        "mkdir",
        "rm",
        "sha256sum",
        "systemctl",
        "tar",
        "test",
        "truncate",
    ] {
        let _ = tree.write(&format!("/usr/bin/{program}"), elf(program), 0o755);
    }
    // Merged /usr: `/bin` is `usr/bin`, and `sh` is `dash`.
    let _ = tree.symlink("/usr/bin/sh", "dash");
    let _ = tree.symlink("/bin", "usr/bin");
    let _ = tree.write("/lib/systemd/systemd", elf("systemd"), 0o755);
    let _ = tree.symlink(INIT, "/lib/systemd/systemd");
    // The standard template ships the SSH server; PVE creates its host keys at create time.
    for (path, content, mode) in
        crate::guest_exec::package_files("openssh-server").unwrap_or_default()
    {
        let _ = match content {
            Some(bytes) => tree.write(path, bytes, mode),
            None => tree.mkdir(path, mode).map(|_| ()),
        };
    }
    tree
}

/// Stand-in bytes for an installed program.
pub(crate) fn elf(program: &str) -> Vec<u8> {
    format!("\u{7f}ELF {program} (simulated)\n").into_bytes()
}

#[cfg(test)]
mod tests;

/// Reads one path of a running simulator's CT over the admin endpoint
/// (`GET /_sim/guests/{vmid}/file?path=…`), for tests and the demo outside the simulator's
/// process; `Ok(None)` when the CT or the path does not exist. `client` must trust the
/// simulator's certificate.
pub async fn fetch_guest_file(
    client: &reqwest::Client,
    endpoint: &crate::Endpoint,
    vmid: u32,
    path: &str,
) -> Result<Option<GuestFile>, reqwest::Error> {
    let response = client
        .get(format!("{}/guests/{vmid}/file", endpoint.admin_url))
        .query(&[("path", path)])
        .bearer_auth(&endpoint.admin_token)
        .send()
        .await?;
    if response.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    response.error_for_status()?.json().await.map(Some)
}
