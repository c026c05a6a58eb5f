//! The programs `pct exec` can run in a simulated CT. The simulator runs nothing: the handful
//! of commands Bosun's golden recipe uses are modelled on the CT's file tree (`mkdir`, `rm`,
//! `find … -delete`, `truncate`, `systemctl enable|restart`, `apt-get`, `docker load|tag`) with the
//! programs' own error texts and exit codes, and so is what a guest's restore check needs (a
//! `#!/bin/sh` script, `test`, `sha256sum --check`: [`script`]), and so is a bulk volume's
//! archive (`tar --create --file=-`: [`tar`]) and its restore (the helper's fixed script:
//! [`bulk_restore`]); anything else fails and says so.

mod bulk_restore;
mod script;
mod tar;

use sha2::{Digest, Sha256};

use crate::files::{FileTree, Kind, canonical, elf, name, parent};

/// What a program printed and its exit code.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) exit: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    /// Standard output that is bytes, not text (a tar archive); printed instead of `stdout`.
    pub(crate) bytes: Option<Vec<u8>>,
}

impl Outcome {
    fn ok(stdout: impl Into<String>) -> Self {
        Self {
            stdout: stdout.into(),
            ..Self::default()
        }
    }

    fn fail(exit: i32, stderr: impl Into<String>) -> Self {
        let mut stderr = stderr.into();
        if !stderr.ends_with('\n') {
            stderr.push('\n');
        }
        Self {
            exit,
            stderr,
            ..Self::default()
        }
    }
}

/// Where the simulated Docker keeps what was loaded and tagged.
pub(crate) const DOCKER_IMAGES: &str = "/var/lib/docker/bosun-sim-images";
const APT_LISTS: &str = "/var/lib/apt/lists";

/// Runs `argv` (after `pct exec <vmid> --`) in the CT's tree.
pub(crate) fn run(tree: &mut FileTree, argv: &[String]) -> Outcome {
    run_at(tree, argv, 0)
}

/// [`run`] with `input` on the program's standard input: the bulk restore's script
/// ([`bulk_restore`]) reads it; every other program runs as [`run`] runs it.
pub(crate) fn run_with_input(tree: &mut FileTree, argv: &[String], input: &[u8]) -> Outcome {
    let shell = tree.resolve("/bin/sh").is_some_and(|sh| tree.is_file(&sh));
    if bulk_restore::is_script(argv) && shell {
        return bulk_restore::run(tree, argv, input);
    }
    run_at(tree, argv, 0)
}

/// [`run`] from a script `depth` scripts deep.
fn run_at(tree: &mut FileTree, argv: &[String], depth: usize) -> Outcome {
    let Some((program, args)) = argv.split_first() else {
        return Outcome::fail(255, "missing command");
    };
    if program == "/usr/bin/env" || program == "env" {
        if !tree.is_file("/usr/bin/env") {
            return not_found(program);
        }
        let rest: Vec<String> = args
            .iter()
            .skip_while(|a| a.contains('=') && !a.starts_with('/'))
            .cloned()
            .collect();
        return run_at(tree, &rest, depth);
    }
    let path = if program.starts_with('/') {
        program.clone()
    } else {
        ["/usr/bin", "/usr/sbin"]
            .iter()
            .map(|d| format!("{d}/{program}"))
            .find(|p| tree.is_file(p))
            .unwrap_or_else(|| format!("/usr/bin/{program}"))
    };
    if !tree.is_file(&path) {
        return not_found(program);
    }
    if script::is_script(tree, &path) {
        return script::run(tree, program, &path, depth);
    }
    match name(&path) {
        "mkdir" => mkdir(tree, args),
        "rm" => rm(tree, args),
        "find" => find(tree, args),
        "truncate" => truncate(tree, args),
        "systemctl" => systemctl(tree, args),
        "apt-get" => apt_get(tree, args),
        "docker" => docker(tree, args),
        "test" => script::test(tree, args),
        "sha256sum" => script::sha256sum(tree, args),
        "tar" => tar::create(tree, args),
        other => Outcome::fail(
            1,
            format!(
                "bosun-pvesim: '{other}' is installed but not simulated (pct exec models mkdir, rm, find, truncate, systemctl enable|restart, apt-get, docker load|tag, test, sha256sum --check, tar --create --file=- and #!/bin/sh scripts)"
            ),
        ),
    }
}

fn not_found(program: &str) -> Outcome {
    Outcome::fail(
        127,
        format!("lxc-attach: Failed to exec \"{program}\": No such file or directory"),
    )
}

fn mkdir(tree: &mut FileTree, args: &[String]) -> Outcome {
    let (mut parents, mut mode, mut paths) = (false, 0o755, Vec::new());
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-p" | "--parents" => parents = true,
            "-m" | "--mode" => {
                let Some(m) = it.next().and_then(|m| u32::from_str_radix(m, 8).ok()) else {
                    return Outcome::fail(1, "mkdir: invalid mode");
                };
                mode = m;
            }
            flag if flag.starts_with('-') => {
                return Outcome::fail(1, format!("mkdir: invalid option -- '{flag}'"));
            }
            path => paths.push(path),
        }
    }
    if paths.is_empty() {
        return Outcome::fail(1, "mkdir: missing operand");
    }
    let mut errors = String::new();
    for raw in paths {
        let Ok(path) = canonical(raw) else {
            errors.push_str(&format!(
                "mkdir: cannot create directory '{raw}': Invalid argument\n"
            ));
            continue;
        };
        let result = if parents {
            tree.mkdir_all(&path, mode)
        } else {
            tree.mkdir(&path, mode).and_then(
                |created| {
                    if created { Ok(()) } else { Err("File exists") }
                },
            )
        };
        if let Err(reason) = result {
            errors.push_str(&format!(
                "mkdir: cannot create directory '{raw}': {reason}\n"
            ));
        }
    }
    if errors.is_empty() {
        Outcome::ok("")
    } else {
        Outcome::fail(1, errors)
    }
}

fn rm(tree: &mut FileTree, args: &[String]) -> Outcome {
    let force = args.iter().any(|a| a == "-f" || a == "--force");
    if let Some(flag) = args
        .iter()
        .find(|a| a.starts_with('-') && *a != "-f" && *a != "--force")
    {
        return Outcome::fail(1, format!("rm: option '{flag}' is not simulated"));
    }
    let mut errors = String::new();
    for raw in args.iter().filter(|a| !a.starts_with('-')) {
        let path = canonical(raw).unwrap_or_else(|_| raw.clone());
        match tree.remove_file(&path) {
            Ok(true) => {}
            Ok(false) if force => {}
            Ok(false) => errors.push_str(&format!(
                "rm: cannot remove '{raw}': No such file or directory\n"
            )),
            Err(reason) => errors.push_str(&format!("rm: cannot remove '{raw}': {reason}\n")),
        }
    }
    if errors.is_empty() {
        Outcome::ok("")
    } else {
        Outcome::fail(1, errors)
    }
}

/// `*` and `?` as in `find -name`.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    match (pattern.first(), text.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            glob(&pattern[1..], text) || (!text.is_empty() && glob(pattern, &text[1..]))
        }
        (Some(b'?'), Some(_)) => glob(&pattern[1..], &text[1..]),
        (Some(p), Some(t)) if p == t => glob(&pattern[1..], &text[1..]),
        _ => false,
    }
}

/// `find DIR [-maxdepth N] [-name PATTERN] [-type f|d] [-delete]`.
fn find(tree: &mut FileTree, args: &[String]) -> Outcome {
    let Some((start, rest)) = args.split_first() else {
        return Outcome::fail(1, "find: no starting point given");
    };
    let (mut depth, mut pattern, mut kind, mut delete) = (usize::MAX, None, None, false);
    let mut it = rest.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-maxdepth" => match it.next().and_then(|n| n.parse().ok()) {
                Some(n) => depth = n,
                None => {
                    return Outcome::fail(
                        1,
                        "find: Expected a positive decimal integer argument to -maxdepth",
                    );
                }
            },
            "-name" => pattern = it.next().cloned(),
            "-type" => kind = it.next().cloned(),
            "-delete" => delete = true,
            other => {
                return Outcome::fail(1, format!("find: predicate '{other}' is not simulated"));
            }
        }
    }
    let Ok(dir) = canonical(start) else {
        return Outcome::fail(1, format!("find: '{start}': No such file or directory"));
    };
    if tree.get(&dir).is_none() {
        return Outcome::fail(1, format!("find: '{start}': No such file or directory"));
    }
    let matches: Vec<String> = tree
        .below(&dir, depth)
        .into_iter()
        .filter(|p| {
            pattern
                .as_deref()
                .is_none_or(|pat| glob(pat.as_bytes(), name(p).as_bytes()))
        })
        .filter(|p| match kind.as_deref() {
            Some("f") => tree.is_file(p),
            Some("d") => tree.is_dir(p),
            _ => true,
        })
        .collect();
    let mut out = String::new();
    for path in &matches {
        if delete {
            if let Err(reason) = tree.remove_file(path) {
                return Outcome::fail(1, format!("find: cannot delete '{path}': {reason}"));
            }
        } else {
            out.push_str(path);
            out.push('\n');
        }
    }
    Outcome::ok(out)
}

/// `truncate -s SIZE FILE…` (creates missing files, as truncate does).
fn truncate(tree: &mut FileTree, args: &[String]) -> Outcome {
    let mut size = None;
    let mut files = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-s" | "--size" => size = it.next().and_then(|s| s.parse::<usize>().ok()),
            path => files.push(path),
        }
    }
    let Some(size) = size else {
        return Outcome::fail(
            1,
            "truncate: you must specify either '--size' or '--reference'",
        );
    };
    for raw in files {
        let path = canonical(raw).unwrap_or_else(|_| raw.to_owned());
        let mut content = tree.content(&path).map(<[u8]>::to_vec).unwrap_or_default();
        content.resize(size, 0);
        if let Err(reason) = tree.write(&path, content, 0o644) {
            return Outcome::fail(
                1,
                format!("truncate: cannot open '{raw}' for writing: {reason}"),
            );
        }
    }
    Outcome::ok("")
}

const NO_INSTALL_CONFIG: &str = "The unit files have no installation config (WantedBy=, RequiredBy=, Also=,\nAlias= settings in the [Install] section, and DefaultInstance= for template\nunits). This means they are not meant to be enabled or disabled using systemctl.\n";

/// What a package installs: (path, content, mode); `None` content = a directory.
pub(crate) type PackageFile = (&'static str, Option<Vec<u8>>, u32);

const UNIT_DIRS: [&str; 3] = [
    "/etc/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
];

/// `systemctl enable UNIT…`: the `[Install]` section's `WantedBy=`/`RequiredBy=` links.
fn systemctl(tree: &mut FileTree, args: &[String]) -> Outcome {
    let Some((verb, units)) = args.split_first() else {
        return Outcome::fail(1, "systemctl: no verb given");
    };
    if verb == "restart" {
        return restart(tree, units);
    }
    if verb != "enable" {
        return Outcome::fail(
            1,
            format!("bosun-pvesim: 'systemctl {verb}' is not simulated (only enable, restart)"),
        );
    }
    let mut stderr = String::new();
    for unit in units {
        let Some(file) = UNIT_DIRS
            .iter()
            .map(|d| format!("{d}/{unit}"))
            .find(|p| tree.is_file(p))
        else {
            return Outcome::fail(
                1,
                format!("Failed to enable unit: Unit file {unit} does not exist."),
            );
        };
        let text = String::from_utf8_lossy(tree.content(&file).unwrap_or_default()).into_owned();
        let links = install_links(&text);
        if links.is_empty() {
            stderr.push_str(NO_INSTALL_CONFIG);
        }
        for (suffix, target) in links {
            let dir = format!("/etc/systemd/system/{target}.{suffix}");
            let link = format!("{dir}/{unit}");
            let already =
                matches!(tree.get(&link).map(|n| &n.kind), Some(Kind::Symlink(t)) if *t == file);
            if already {
                continue;
            }
            if let Err(reason) = tree
                .mkdir(&dir, 0o755)
                .and_then(|_| tree.symlink(&link, &file))
            {
                return Outcome::fail(1, format!("Failed to enable unit: {link}: {reason}"));
            }
            stderr.push_str(&format!("Created symlink {link} → {file}.\n"));
        }
    }
    Outcome {
        stderr,
        ..Outcome::default()
    }
}

/// Where the simulator counts `systemctl restart` per unit (nothing runs in a simulated CT:
/// a test standing in for the guest's systemd reads the count with `SimHandle::guest_file`).
pub const RESTART_COUNTS: &str = "/run/bosun-pvesim/restarts";

/// `systemctl restart UNIT…`: each unit must exist (systemctl's exit 5 otherwise); its
/// restart is counted in [`RESTART_COUNTS`]`/UNIT`.
fn restart(tree: &mut FileTree, units: &[String]) -> Outcome {
    if units.is_empty() {
        return Outcome::fail(1, "Too few arguments.");
    }
    for unit in units {
        if !UNIT_DIRS
            .iter()
            .any(|d| tree.is_file(&format!("{d}/{unit}")))
        {
            return Outcome::fail(
                5,
                format!("Failed to restart {unit}: Unit {unit} not found."),
            );
        }
        let path = format!("{RESTART_COUNTS}/{unit}");
        let count = tree
            .content(&path)
            .and_then(|c| std::str::from_utf8(c).ok())
            .and_then(|c| c.trim().parse::<u64>().ok())
            .unwrap_or(0);
        let written = tree
            .mkdir_all(RESTART_COUNTS, 0o755)
            .and_then(|()| tree.write(&path, format!("{}\n", count + 1).into_bytes(), 0o644));
        if let Err(reason) = written {
            return Outcome::fail(1, format!("Failed to restart {unit}: {reason}"));
        }
    }
    Outcome::ok("")
}

/// `(wants|requires, target)` pairs from a unit's `[Install]` section.
fn install_links(unit: &str) -> Vec<(&'static str, String)> {
    let mut section = "";
    let mut links = Vec::new();
    for line in unit.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
            continue;
        }
        if section != "[Install]" {
            continue;
        }
        let suffix = if let Some(v) = line.strip_prefix("WantedBy=") {
            ("wants", v)
        } else if let Some(v) = line.strip_prefix("RequiredBy=") {
            ("requires", v)
        } else {
            continue;
        };
        links.extend(
            suffix
                .1
                .split_whitespace()
                .map(|t| (suffix.0, t.to_owned())),
        );
    }
    links
}

/// What installing a package adds.
pub(crate) fn package_files(package: &str) -> Option<Vec<PackageFile>> {
    let docker_unit = b"[Unit]\nDescription=Docker Application Container Engine\nAfter=network-online.target containerd.service\n\n[Service]\nExecStart=/usr/bin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock\n\n[Install]\nWantedBy=multi-user.target\n";
    let ssh_unit = b"[Unit]\nDescription=OpenBSD Secure Shell server\n\n[Service]\nExecStart=/usr/sbin/sshd -D\n\n[Install]\nWantedBy=multi-user.target\nAlias=sshd.service\n";
    Some(match package {
        "docker.io" => vec![
            ("/usr/bin/docker", Some(elf("docker")), 0o755),
            ("/usr/sbin", None, 0o755),
            ("/usr/sbin/dockerd", Some(elf("dockerd")), 0o755),
            ("/usr/lib/systemd/system/docker.service", Some(docker_unit.to_vec()), 0o644),
            ("/var/lib/docker", None, 0o710),
        ],
        "openssh-server" => vec![
            ("/usr/sbin", None, 0o755),
            ("/usr/sbin/sshd", Some(elf("sshd")), 0o755),
            ("/usr/bin/ssh-keygen", Some(elf("ssh-keygen")), 0o755),
            ("/etc/ssh/sshd_config.d", None, 0o755),
            ("/etc/ssh/sshd_config", Some(b"Include /etc/ssh/sshd_config.d/*.conf\nKbdInteractiveAuthentication no\nUsePAM yes\n".to_vec()), 0o644),
            ("/usr/lib/systemd/system/ssh.service", Some(ssh_unit.to_vec()), 0o644),
        ],
        "ca-certificates" => vec![
            ("/etc/ssl", None, 0o755),
            ("/etc/ssl/certs", None, 0o755),
            ("/etc/ssl/certs/ca-certificates.crt", Some(b"# simulated CA bundle\n".to_vec()), 0o644),
        ],
        _ => return None,
    })
}

fn apt_get(tree: &mut FileTree, args: &[String]) -> Outcome {
    let mut words = Vec::new();
    let mut assume_yes = false;
    for arg in args {
        match arg.as_str() {
            "-y" | "--yes" | "--assume-yes" => assume_yes = true,
            "-q" | "-qq" | "--no-install-recommends" => {}
            flag if flag.starts_with('-') => {
                return Outcome::fail(
                    100,
                    format!(
                        "E: Command line option '{flag}' is not understood in combination with the other options"
                    ),
                );
            }
            word => words.push(word),
        }
    }
    match words.split_first() {
        Some((&"update", [])) => {
            if let Err(reason) = tree.mkdir_all(APT_LISTS, 0o755).and_then(|()| {
                tree.write(
                    &format!("{APT_LISTS}/deb.debian.org_debian_dists_bookworm_InRelease"),
                    b"Origin: Debian\nSuite: stable\nCodename: bookworm\n".to_vec(),
                    0o644,
                )
            }) {
                return Outcome::fail(
                    100,
                    format!("E: Could not open lock file {APT_LISTS}/lock - open ({reason})"),
                );
            }
            Outcome::ok(
                "Get:1 http://deb.debian.org/debian bookworm InRelease [151 kB]\nReading package lists...\n",
            )
        }
        Some((&"install", packages)) if !packages.is_empty() => {
            let have_lists = !tree.below(APT_LISTS, 1).is_empty();
            let mut planned = Vec::new();
            for package in packages {
                match package_files(package).filter(|_| have_lists) {
                    Some(files) => planned.push((*package, files)),
                    None => {
                        return Outcome::fail(
                            100,
                            format!("E: Unable to locate package {package}"),
                        );
                    }
                }
            }
            if !assume_yes {
                return Outcome {
                    exit: 1,
                    stdout: "Do you want to continue? [Y/n] Abort.\n".to_owned(),
                    ..Outcome::default()
                };
            }
            let mut out = String::from("Reading package lists...\nBuilding dependency tree...\n");
            for (package, files) in planned {
                for (path, content, mode) in files {
                    let _ = tree.mkdir_all(parent(path), 0o755);
                    let _ = match content {
                        Some(bytes) => tree.write(path, bytes, mode),
                        None => tree.mkdir(path, mode).map(|_| ()),
                    };
                }
                if package == "openssh-server" {
                    generate_host_keys(tree, None);
                }
                out.push_str(&format!("Setting up {package} ...\n"));
            }
            Outcome::ok(out)
        }
        _ => Outcome::fail(100, format!("E: Invalid operation {}", words.join(" "))),
    }
}

/// Writes the SSH host keys that are missing; returns the names created. `log` receives
/// PVE's create-time lines when given.
pub(crate) fn generate_host_keys(
    tree: &mut FileTree,
    mut log: Option<&mut Vec<String>>,
) -> Vec<String> {
    if !tree.is_dir("/etc/ssh") {
        return Vec::new();
    }
    let mut created = Vec::new();
    for kind in ["rsa", "ecdsa", "ed25519"] {
        let key = format!("/etc/ssh/ssh_host_{kind}_key");
        if tree.get(&key).is_some() {
            continue;
        }
        let secret = format!(
            "-----BEGIN OPENSSH PRIVATE KEY-----\nsimulated {kind} host key\n-----END OPENSSH PRIVATE KEY-----\n"
        );
        let fingerprint = hex::encode(Sha256::digest(secret.as_bytes()));
        let _ = tree.write(&key, secret.into_bytes(), 0o600);
        let _ = tree.write(
            &format!("{key}.pub"),
            format!("ssh-{kind} AAAA{} root@localhost\n", &fingerprint[..32]).into_bytes(),
            0o644,
        );
        if let Some(lines) = log.as_deref_mut() {
            lines.push(format!(
                "Creating SSH host key 'ssh_host_{kind}_key' - this may take some time ..."
            ));
            lines.push(format!(
                "done: SHA256:{} root@localhost",
                &fingerprint[..43]
            ));
        }
        created.push(format!("ssh_host_{kind}_key"));
    }
    created
}

/// `docker load --input FILE` and `docker tag SOURCE TARGET`, kept in [`DOCKER_IMAGES`].
fn docker(tree: &mut FileTree, args: &[String]) -> Outcome {
    let images = tree
        .content(DOCKER_IMAGES)
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let line = match args.as_slice() {
        ["load", "--input" | "-i", file] => {
            let path = canonical(file).unwrap_or_else(|_| (*file).to_owned());
            let Some(bytes) = tree.content(&path) else {
                return Outcome::fail(1, format!("open {file}: no such file or directory"));
            };
            let id = format!("sha256:{}", hex::encode(Sha256::digest(bytes)));
            let line = format!("loaded {id}\n");
            let _ = tree.mkdir_all("/var/lib/docker", 0o710);
            let _ = tree.write(DOCKER_IMAGES, format!("{images}{line}").into_bytes(), 0o600);
            return Outcome::ok(format!("Loaded image ID: {id}\n"));
        }
        ["tag", source, target] => {
            if !images.lines().any(|l| l.starts_with("loaded ")) {
                return Outcome::fail(
                    1,
                    format!("Error response from daemon: No such image: {source}"),
                );
            }
            format!("tag {target} {source}\n")
        }
        _ => {
            return Outcome::fail(
                1,
                format!(
                    "bosun-pvesim: 'docker {}' is not simulated (only load --input and tag)",
                    args.join(" ")
                ),
            );
        }
    };
    let _ = tree.write(DOCKER_IMAGES, format!("{images}{line}").into_bytes(), 0o600);
    Outcome::ok("")
}

#[cfg(test)]
mod tests;
