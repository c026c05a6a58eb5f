//! How PVE unpacks an archive into a new CT's root filesystem (pve-container's
//! `PVE::LXC::Create::restore_archive`): `tar xpf -` fed from the file on a dir, NFS or CIFS
//! storage, or `proxmox-backup-client restore … root.pxar` for a PBS storage, both under
//! `lxc-usernsexec` for an unprivileged CT. What the task log shows on the way, and how the
//! unpacking fails when the archive cannot be read to its end.

use crate::state::{NodeState, StorageKind};

/// PVE's default id map of an unprivileged CT, as `lxc-usernsexec` arguments.
const USERNS: [&str; 6] = [
    "lxc-usernsexec",
    "-m",
    "u:0:100000:65536",
    "-m",
    "g:0:100000:65536",
    "--",
];

/// pve-storage's `@COMMON_TAR_FLAGS`.
const COMMON_TAR_FLAGS: [&str; 10] = [
    "--one-file-system",
    "-p",
    "--sparse",
    "--numeric-owner",
    "--acls",
    "--xattrs",
    "--xattrs-include=user.*",
    "--xattrs-include=security.capability",
    "--warning=no-file-ignored",
    "--warning=no-xattr-write",
];

/// The file PBS restores an entry of a CT backup from, and the entry the error names.
const PBS_ARCHIVE: &str = "root.pxar";
const PBS_FAILED_ENTRY: &str = "libc.so.6";

/// The compression GNU tar is told about (it does not detect it when reading a pipe).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compression {
    None,
    Gzip,
    Lzo,
    Zstd,
    Xz,
    Bzip2,
}

impl Compression {
    /// From the archive's name, as `tar_compression_option` reads it.
    fn of(name: &str) -> Self {
        match name.rsplit_once(".tar").map(|(_, ext)| ext) {
            Some(".gz") => Self::Gzip,
            Some(".lzo") => Self::Lzo,
            Some(".zst") => Self::Zstd,
            Some(".xz") => Self::Xz,
            Some(".bz2") => Self::Bzip2,
            _ => Self::None,
        }
    }

    fn tar_option(self) -> Option<&'static str> {
        match self {
            Self::None => None,
            Self::Gzip => Some("-z"),
            Self::Lzo => Some("--lzop"),
            Self::Zstd => Some("--zstd"),
            Self::Xz => Some("-J"),
            Self::Bzip2 => Some("-j"),
        }
    }

    /// What the decompressor tar runs prints when its input ends early.
    fn truncated(self) -> Option<&'static str> {
        match self {
            Self::Gzip => Some("gzip: stdin: unexpected end of file"),
            Self::Zstd => Some("zstd: /*stdin*\\: unexpected end of file"),
            Self::Xz => Some("xz: (stdin): Unexpected end of input"),
            Self::None | Self::Lzo | Self::Bzip2 => None,
        }
    }
}

/// How one archive is unpacked.
#[derive(Debug, Clone)]
pub(crate) enum Unpacker {
    /// `tar xpf -` reading the archive file (`path` is `None` where PVE has no file path).
    Tar {
        path: Option<String>,
        compression: Compression,
    },
    /// `proxmox-backup-client restore <snapshot> root.pxar`.
    Pbs {
        /// `ct/<vmid>/<time>`.
        snapshot: String,
        /// `user@server[:port]:datastore`, as PVE's `get_repository` builds it.
        repository: String,
        namespace: Option<String>,
        encrypted: bool,
    },
}

impl Unpacker {
    /// The unpacker for a backup or template volume (`storage:backup/…`, `storage:vztmpl/…`).
    pub(crate) fn for_volume(st: &NodeState, volid: &str) -> Self {
        let (sid, name) = volid.split_once(':').unwrap_or(("", volid));
        let storage = st.storages.get(sid);
        if let Some((StorageKind::Pbs { server, datastore }, storage)) =
            storage.map(|s| (&s.kind, s))
        {
            let user = storage
                .options
                .get("username")
                .map_or("root@pam", String::as_str);
            let host = if server.contains(':') {
                format!("[{server}]")
            } else {
                server.clone()
            };
            let port = match storage.options.get("port").map(String::as_str) {
                Some(port) if port != "8007" => format!(":{port}"),
                _ => String::new(),
            };
            return Self::Pbs {
                snapshot: name.strip_prefix("backup/").unwrap_or(name).to_owned(),
                repository: format!("{user}@{host}{port}:{datastore}"),
                namespace: Some(storage.namespace())
                    .filter(|ns| !ns.is_empty())
                    .map(str::to_owned),
                encrypted: storage.options.contains_key("encryption-key"),
            };
        }
        let path =
            storage
                .and_then(|s| s.kind.dir_path())
                .map(|dir| match name.strip_prefix("backup/") {
                    Some(file) => format!("{dir}/dump/{file}"),
                    None => format!(
                        "{dir}/template/cache/{}",
                        name.strip_prefix("vztmpl/").unwrap_or(name)
                    ),
                });
        Self::Tar {
            path,
            compression: Compression::of(name),
        }
    }

    /// The line PVE logs before it unpacks (`extracting archive '<path>'`), if any.
    pub(crate) fn announcement(&self) -> Option<String> {
        match self {
            Self::Tar {
                path: Some(path), ..
            } => Some(format!("extracting archive '{path}'")),
            Self::Tar { path: None, .. } | Self::Pbs { .. } => None,
        }
    }

    /// The command's arguments, as `restore_tar_archive_command` and `do_raw_client_cmd`
    /// build them.
    fn argv(&self, vmid: u32, unprivileged: bool) -> Vec<String> {
        let mut argv: Vec<String> = Vec::new();
        if unprivileged {
            argv.extend(USERNS.map(str::to_owned));
        }
        let rootfs = format!("/var/lib/lxc/{vmid}/rootfs");
        match self {
            Self::Tar { compression, .. } => {
                argv.extend(["tar", "xpf", "-"].map(str::to_owned));
                argv.extend(compression.tar_option().map(str::to_owned));
                argv.push("--totals".to_owned());
                argv.extend(COMMON_TAR_FLAGS.map(str::to_owned));
                argv.extend(["-C".to_owned(), rootfs]);
                argv.extend(
                    ["--skip-old-files", "--anchored", "--exclude", "./dev/*"].map(str::to_owned),
                );
            }
            Self::Pbs {
                snapshot,
                repository,
                namespace,
                encrypted,
            } => {
                argv.extend(["/usr/bin/proxmox-backup-client", "restore"].map(str::to_owned));
                if *encrypted {
                    argv.extend(["--crypt-mode=encrypt", "--keyfd=10"].map(str::to_owned));
                } else {
                    argv.push("--crypt-mode=none".to_owned());
                }
                argv.extend([snapshot.clone(), PBS_ARCHIVE.to_owned(), rootfs]);
                argv.push("--allow-existing-dirs".to_owned());
                argv.extend(["--repository".to_owned(), repository.clone()]);
                if let Some(ns) = namespace {
                    argv.extend(["--ns".to_owned(), ns.clone()]);
                }
            }
        }
        argv
    }

    /// The `proxmox-backup-client restore <snapshot> pct.conf -` that recovers a PBS
    /// backup's config at the start of a restore (`recover_config_from_proxmox_backup`), as
    /// PVE's error message shows it; `None` for a file archive.
    pub(crate) fn config_command(&self) -> Option<String> {
        let Self::Pbs {
            snapshot,
            repository,
            namespace,
            encrypted,
        } = self
        else {
            return None;
        };
        let mut argv = vec![
            "/usr/bin/proxmox-backup-client".to_owned(),
            "restore".to_owned(),
        ];
        if *encrypted {
            argv.extend(["--crypt-mode=encrypt", "--keyfd=10"].map(str::to_owned));
        } else {
            argv.push("--crypt-mode=none".to_owned());
        }
        argv.extend([snapshot.clone(), "pct.conf".to_owned(), "-".to_owned()]);
        argv.extend(["--repository".to_owned(), repository.clone()]);
        if let Some(ns) = namespace {
            argv.extend(["--ns".to_owned(), ns.clone()]);
        }
        Some(
            argv.iter()
                .map(|arg| shell_quote(arg))
                .collect::<Vec<_>>()
                .join(" "),
        )
    }

    /// The command as PVE's error message shows it (`PVE::Tools::cmd2string`).
    pub(crate) fn command(&self, vmid: u32, unprivileged: bool) -> String {
        self.argv(vmid, unprivileged)
            .iter()
            .map(|arg| shell_quote(arg))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The exit code of a failed unpack: GNU tar's 2, `proxmox-backup-client`'s 255.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            Self::Tar { .. } => 2,
            Self::Pbs { .. } => 255,
        }
    }

    /// What the unpacking prints (stderr, into the task log) when the archive cannot be read
    /// to its end: a truncated file, or a PBS chunk whose digest does not match.
    pub(crate) fn unreadable_output(&self) -> Vec<String> {
        match self {
            Self::Tar { compression, .. } => compression
                .truncated()
                .into_iter()
                .chain([
                    "tar: Unexpected EOF in archive",
                    "tar: Unexpected EOF in archive",
                    "tar: Error is not recoverable: exiting now",
                ])
                .map(str::to_owned)
                .collect(),
            Self::Pbs { .. } => vec![format!(
                "Error: error extracting archive - encountered unexpected error during \
                 extraction: error at entry \"{PBS_FAILED_ENTRY}\": failed to extract file: \
                 failed to copy file contents: detected chunk with wrong digest."
            )],
        }
    }

    /// The task error when unpacking fails: `unable to restore CT <vmid> - command '…' failed:
    /// exit code N` (`create` for a template).
    pub(crate) fn failure(&self, vmid: u32, unprivileged: bool, restore: bool) -> String {
        let verb = if restore { "restore" } else { "create" };
        format!(
            "unable to {verb} CT {vmid} - command '{}' failed: exit code {}",
            self.command(vmid, unprivileged),
            self.exit_code()
        )
    }
}

/// What the PBS client says when a backup made with the key `archive` (its fingerprint, as
/// PVE lists it) is read with the storage's key `storage` (`None`: the storage has none):
/// `DataBlob`'s manifest check in proxmox-backup (`pbs-datastore/src/manifest.rs`,
/// `check_fingerprint`), which names each key by its short ID (the first 8 bytes). `None`
/// when it reads: an unencrypted backup, the same key, or a storage whose key file named no
/// fingerprint (`encryption-key 1` in `storage.cfg`).
pub(crate) fn key_mismatch(archive: Option<&str>, storage: Option<&str>) -> Option<String> {
    let archive = archive?;
    let short = |fingerprint: &str| {
        fingerprint
            .get(..23)
            .unwrap_or(fingerprint)
            .to_ascii_lowercase()
    };
    match storage {
        None => Some(format!(
            "Error: missing key - manifest was created with key {}",
            short(archive)
        )),
        Some("1") => None,
        Some(key) if key.eq_ignore_ascii_case(archive) => None,
        Some(key) => Some(format!(
            "Error: wrong key - manifest's key {} does not match provided key {}",
            short(archive),
            short(key)
        )),
    }
}

/// One argument quoted as `String::ShellQuote::shell_quote` quotes a single argument: in
/// single quotes when it holds anything but word characters and `!%+,-./:=@^`, or any `=` (a
/// lone argument is in command position, where `=` would set a variable).
fn shell_quote(arg: &str) -> String {
    if arg.is_empty() {
        return "''".to_owned();
    }
    let plain = |c: char| c.is_alphanumeric() || "_!%+,-./:@^".contains(c);
    if arg.chars().all(plain) {
        return arg.to_owned();
    }
    format!("'{}'", arg.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::{Compression, Unpacker, key_mismatch, shell_quote};

    #[test]
    fn a_backup_is_read_only_with_the_key_it_was_made_with() {
        let k = "0e:ab:d4:46:0b:6e:b9:ca:34:50:23:de:e2:b7:78:c7:90:e5:4a:16:83:b9:65:9c:0a:57:ae:19:90:90:15:9b";
        let other = "aa:bb:cc:dd:ee:ff:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22:33:44:55:66:77:88:99";
        assert_eq!(key_mismatch(None, None), None);
        assert_eq!(key_mismatch(None, Some(other)), None);
        assert_eq!(key_mismatch(Some(k), Some(&k.to_uppercase())), None);
        assert_eq!(key_mismatch(Some(k), Some("1")), None);
        assert_eq!(
            key_mismatch(Some(k), Some(other)).as_deref(),
            Some(
                "Error: wrong key - manifest's key 0e:ab:d4:46:0b:6e:b9:ca does not match \
                 provided key aa:bb:cc:dd:ee:ff:00:11"
            )
        );
        assert_eq!(
            key_mismatch(Some(k), None).as_deref(),
            Some("Error: missing key - manifest was created with key 0e:ab:d4:46:0b:6e:b9:ca")
        );
        let pbs = Unpacker::Pbs {
            snapshot: "ct/100/2025-01-01T00:00:00Z".to_owned(),
            repository: "root@pam@pbs.example:store".to_owned(),
            namespace: Some("site-a".to_owned()),
            encrypted: true,
        };
        assert_eq!(
            pbs.config_command().as_deref(),
            Some(
                "/usr/bin/proxmox-backup-client restore '--crypt-mode=encrypt' '--keyfd=10' \
                 ct/100/2025-01-01T00:00:00Z pct.conf - --repository root@pam@pbs.example:store \
                 --ns site-a"
            )
        );
    }

    #[test]
    fn arguments_are_quoted_as_pve_quotes_them() {
        assert_eq!(shell_quote("-C"), "-C");
        assert_eq!(shell_quote("root@pam@pbs:store"), "root@pam@pbs:store");
        assert_eq!(shell_quote("./dev/*"), "'./dev/*'");
        assert_eq!(shell_quote("--crypt-mode=none"), "'--crypt-mode=none'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn compression_follows_the_archive_name() {
        assert_eq!(
            Compression::of("vzdump-lxc-1-2025_01_01-00_00_00.tar.zst"),
            Compression::Zstd
        );
        assert_eq!(Compression::of("x.tar.gz"), Compression::Gzip);
        assert_eq!(Compression::of("x.tar.lzo"), Compression::Lzo);
        assert_eq!(Compression::of("x.tar"), Compression::None);
    }

    #[test]
    fn a_truncated_zstd_archive_fails_as_tar_reports_it() {
        let tar = Unpacker::Tar {
            path: Some("/var/lib/vz/dump/vzdump-lxc-100-2025_01_01-00_00_00.tar.zst".to_owned()),
            compression: Compression::Zstd,
        };
        assert_eq!(
            tar.unreadable_output(),
            [
                "zstd: /*stdin*\\: unexpected end of file",
                "tar: Unexpected EOF in archive",
                "tar: Unexpected EOF in archive",
                "tar: Error is not recoverable: exiting now",
            ]
        );
        assert_eq!(
            tar.failure(101, true, true),
            "unable to restore CT 101 - command 'lxc-usernsexec -m u:0:100000:65536 -m \
             g:0:100000:65536 -- tar xpf - --zstd --totals --one-file-system -p --sparse \
             --numeric-owner --acls --xattrs '--xattrs-include=user.*' \
             '--xattrs-include=security.capability' '--warning=no-file-ignored' \
             '--warning=no-xattr-write' -C /var/lib/lxc/101/rootfs --skip-old-files --anchored \
             --exclude './dev/*'' failed: exit code 2"
        );
        let plain = Unpacker::Tar {
            path: None,
            compression: Compression::None,
        };
        assert!(plain.command(7, false).starts_with("tar xpf - --totals "));
        assert_eq!(plain.announcement(), None);
    }

    #[test]
    fn a_pbs_restore_names_the_client_command() {
        let pbs = Unpacker::Pbs {
            snapshot: "ct/100/2025-01-01T00:00:00Z".to_owned(),
            repository: "root@pam@pbs.example:store".to_owned(),
            namespace: Some("site-a".to_owned()),
            encrypted: false,
        };
        assert_eq!(
            pbs.failure(101, false, true),
            "unable to restore CT 101 - command '/usr/bin/proxmox-backup-client restore \
             '--crypt-mode=none' ct/100/2025-01-01T00:00:00Z root.pxar /var/lib/lxc/101/rootfs \
             --allow-existing-dirs --repository root@pam@pbs.example:store --ns site-a' \
             failed: exit code 255"
        );
        assert_eq!(pbs.announcement(), None);
    }
}
