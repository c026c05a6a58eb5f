//! The hub's day-two commands, run exactly as the docs print them, as root, against the
//! layout an installed hub has: the `bosun-hub` account made from the package's sysusers.d
//! entry by the real `systemd-sysusers`, the state and configuration directories where and
//! how `bosun-hubd.service` has systemd make them (under `/var/lib/private` if the unit used
//! `DynamicUser=`), the packaged `hub.toml`, and the real `runuser`. The blocks run are the
//! guide's `init` (§1.3), `hub-backup.md`'s SQLite backup and restore, and
//! `hub-key-rotation.md`'s whole rotation, signed with a key the test makes.
//!
//! No systemd runs here, so `systemctl stop|start bosun-hubd` (the restore's first and last
//! lines) is recorded rather than run, and the test checks they are the only such lines.
//! The one substitution: the restore's example archive name becomes the archive the backup
//! block wrote.
//!
//! Needs root (CI runs as root); skips, saying why, otherwise. Runs in the `packaging`
//! nextest group (it makes the same account and paths as the packaging test), refuses to
//! start if any of them exists, and removes all it made however it ends.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, Result, bail, ensure};

const UNIT: &str = "systemd/bosun-hubd.service";
const SYSUSERS: &str = "helper/debian/bosun-hub.sysusers";
const EXAMPLE_CONFIG: &str = "helper/debian/examples/hub.toml";
const BACKUPS: &str = "/var/backups/bosun-hub";
/// The archive name `hub-backup.md`'s restore block uses as its example.
const EXAMPLE_ARCHIVE: &str = "/var/backups/bosun-hub/hub-2026-11-25-0300.tar";
/// Paths the docs' commands make or use outside the hub's directories.
const DOC_PATHS: [&str; 4] = [
    BACKUPS,
    "/var/lib/bosun-hub.lost",
    "/tmp/hub-pins.json",
    "/tmp/hub-pins.json.sig",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits inside the workspace")
        .to_owned()
}

fn read(path: &str) -> Result<String> {
    std::fs::read_to_string(workspace().join(path)).with_context(|| format!("reading {path}"))
}

/// `Key=value` settings of a unit file.
fn settings(unit: &str, key: &str) -> Vec<String> {
    unit.lines()
        .filter_map(|l| l.trim().strip_prefix(key)?.strip_prefix('='))
        .map(|v| v.trim().to_owned())
        .collect()
}

fn setting(unit: &str, key: &str) -> Option<String> {
    settings(unit, key).pop()
}

/// Where an installed hub keeps its files, as the unit has systemd make them.
struct Layout {
    user: String,
    /// `/var/lib/<StateDirectory>`: the path the docs and `hub.toml` use.
    state: PathBuf,
    /// The real directory: `state` itself, or `/var/lib/private/<name>` under `DynamicUser=`.
    state_real: PathBuf,
    state_mode: u32,
    config: PathBuf,
    config_mode: u32,
}

fn layout(unit: &str) -> Result<Layout> {
    let user = setting(unit, "User").context("the hub unit names its User=")?;
    let state = setting(unit, "StateDirectory").context("StateDirectory=")?;
    let config = setting(unit, "ConfigurationDirectory").context("ConfigurationDirectory=")?;
    let mode = |key: &str, default: u32| -> Result<u32> {
        setting(unit, key).map_or(Ok(default), |m| {
            u32::from_str_radix(&m, 8).with_context(|| format!("{key}={m}"))
        })
    };
    let dynamic = setting(unit, "DynamicUser").is_some_and(|v| v == "yes" || v == "true");
    let public = Path::new("/var/lib").join(&state);
    Ok(Layout {
        user,
        state_real: if dynamic {
            Path::new("/var/lib/private").join(&state)
        } else {
            public.clone()
        },
        state: public,
        state_mode: mode("StateDirectoryMode", 0o755)?,
        config: Path::new("/etc").join(config),
        config_mode: mode("ConfigurationDirectoryMode", 0o755)?,
    })
}

/// The ```sh blocks of a Markdown document.
fn sh_blocks(doc: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in doc.lines() {
        match (&mut current, line.trim_start()) {
            (None, "```sh") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

/// The one ```sh block of `doc` holding every one of `needles`.
fn block(doc: &str, needles: &[&str]) -> Result<String> {
    let text = read(doc)?;
    let found: Vec<String> = sh_blocks(&text)
        .into_iter()
        .filter(|b| needles.iter().all(|n| b.contains(n)))
        .collect();
    match found.as_slice() {
        [one] => Ok(one.clone()),
        _ => bail!("{doc}: {} sh blocks hold {needles:?}", found.len()),
    }
}

fn run(cmd: &mut Command) -> Result<Output> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    ensure!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out)
}

/// `target/<profile>/NAME`.
fn binary(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let path = exe
        .parent()
        .and_then(Path::parent)
        .context("the test runs from target/<profile>/deps")?
        .join(name);
    ensure!(
        path.is_file(),
        "{} is missing: build it first (cargo build -p bosun-hubd --bins)",
        path.display()
    );
    Ok(path)
}

/// What the test made on the machine; removed on drop however the test ends.
#[derive(Default)]
struct Made {
    paths: Vec<PathBuf>,
    user: Option<String>,
}

impl Drop for Made {
    fn drop(&mut self) {
        for path in self.paths.iter().rev() {
            let _ = match std::fs::symlink_metadata(path) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
                Ok(_) => std::fs::remove_file(path),
                Err(_) => Ok(()),
            };
        }
        if let Some(user) = &self.user {
            let _ = Command::new("userdel").arg(user).status();
            let _ = Command::new("groupdel").arg(user).status();
        }
    }
}

fn account_exists(name: &str) -> Result<bool> {
    let passwd = Command::new("getent").args(["passwd", name]).output()?;
    let group = Command::new("getent").args(["group", name]).output()?;
    Ok(passwd.status.success() || group.status.success())
}

fn owner_and_mode(path: &Path) -> Result<(u32, u32)> {
    let meta = std::fs::metadata(path).with_context(|| format!("{}", path.display()))?;
    Ok((meta.uid(), meta.permissions().mode() & 0o7777))
}

fn uid(name: &str) -> Result<u32> {
    let out = run(Command::new("id").args(["-u", name]))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().parse()?)
}

/// Makes the installed hub's layout; records all it makes in `made`.
fn install_layout(layout: &Layout, made: &mut Made) -> Result<()> {
    // The account, from the package's own sysusers.d entry.
    made.user = Some(layout.user.clone());
    run(Command::new("systemd-sysusers").arg(workspace().join(SYSUSERS)))?;
    let chown = |path: &Path, user: &str, group: &str, mode: u32| -> Result<()> {
        run(Command::new("chown")
            .arg(format!("{user}:{group}"))
            .arg(path))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
        Ok(())
    };
    if layout.state_real != layout.state {
        // DynamicUser=: systemd keeps the directory in root-only /var/lib/private and links it.
        let private = layout.state_real.parent().context("private dir")?;
        if !private.exists() {
            std::fs::create_dir(private)?;
            std::fs::set_permissions(private, std::fs::Permissions::from_mode(0o700))?;
            made.paths.push(private.to_owned());
        }
        made.paths.push(layout.state_real.clone());
        std::fs::create_dir(&layout.state_real)?;
        made.paths.push(layout.state.clone());
        std::os::unix::fs::symlink(layout.state_real.strip_prefix("/var/lib")?, &layout.state)?;
    } else {
        made.paths.push(layout.state.clone());
        std::fs::create_dir(&layout.state)?;
    }
    chown(
        &layout.state_real,
        &layout.user,
        &layout.user,
        layout.state_mode,
    )?;
    // The configuration directory: root's, readable by the hub's group (the package's
    // postinst; systemd sets the mode and leaves the owner).
    made.paths.push(layout.config.clone());
    std::fs::create_dir(&layout.config)?;
    chown(&layout.config, "root", &layout.user, layout.config_mode)?;
    let config = layout.config.join("hub.toml");
    std::fs::copy(workspace().join(EXAMPLE_CONFIG), &config)?;
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644))?;
    Ok(())
}

/// A bin directory (world-readable, so `runuser` finds it for the hub's user) with the
/// built `bosun-hubd` and a `systemctl` that records its arguments.
fn bin_dir(scratch: &Path) -> Result<PathBuf> {
    std::fs::set_permissions(scratch, std::fs::Permissions::from_mode(0o755))?;
    let bin = scratch.join("bin");
    std::fs::create_dir(&bin)?;
    std::fs::copy(binary("bosun-hubd")?, bin.join("bosun-hubd"))?;
    let log = scratch.join("systemctl.log");
    std::fs::write(
        bin.join("systemctl"),
        format!("#!/bin/sh\necho \"$*\" >> {}\n", log.display()),
    )?;
    for file in ["bosun-hubd", "systemctl"] {
        std::fs::set_permissions(bin.join(file), std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(bin)
}

/// Runs one documented block with bash, as root, stopping at the first failing line.
fn run_block(name: &str, block: &str, bin: &Path, home: &Path) -> Result<String> {
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", block])
        .current_dir(home)
        .env_clear()
        .env(
            "PATH",
            format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin.display()),
        )
        .env("HOME", home)
        .env("LANG", "C.UTF-8")
        .output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        out.status.success(),
        "{name}, as documented, failed ({}):\n{block}\n--- output:\n{text}",
        out.status
    );
    Ok(text)
}

#[test]
fn documented_day_two_commands_work_on_the_installed_layout() -> Result<()> {
    let euid = rustix::process::geteuid().as_raw();
    if euid != 0 {
        eprintln!("skipping: the documented commands run as root (euid {euid}); CI runs as root");
        return Ok(());
    }
    let unit = read(UNIT)?;
    let layout = layout(&unit)?;
    ensure!(
        !account_exists(&layout.user)?,
        "the account {} exists here; the test would remove it, so it refuses",
        layout.user
    );
    for path in DOC_PATHS.iter().map(PathBuf::from).chain([
        layout.state.clone(),
        layout.state_real.clone(),
        layout.config.clone(),
    ]) {
        ensure!(
            std::fs::symlink_metadata(&path).is_err(),
            "{} exists, and the test would remove it, so it refuses",
            path.display()
        );
    }
    let blocks = [
        (
            "operator-guide.md §1.3 init",
            block("docs/operator-guide.md", &["bosun-hubd init"])?,
        ),
        (
            "hub-backup.md backup",
            block("docs/hub-backup.md", &["bosun-hubd backup"])?,
        ),
        (
            "hub-backup.md restore",
            block(
                "docs/hub-backup.md",
                &["mv /var/lib/bosun-hub", "bosun-hubd restore"],
            )?,
        ),
        (
            "hub-key-rotation.md rotation",
            block("docs/hub-key-rotation.md", &["cert rotate stage"])?,
        ),
    ];

    let mut made = Made::default();
    made.paths.extend(DOC_PATHS.iter().map(PathBuf::from));
    install_layout(&layout, &mut made)?;
    let hub_uid = uid(&layout.user)?;
    let scratch = tempfile::tempdir()?;
    let bin = bin_dir(scratch.path())?;
    let home = scratch.path().join("home");
    std::fs::create_dir_all(home.join(".ssh"))?;
    run(Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "operator", "-f"])
        .arg(home.join(".ssh/id_ed25519")))?;

    let [init, backup, restore, rotation] = blocks;
    run_block(init.0, &init.1, &bin, &home)?;
    let database = layout.state.join("hub.sqlite");
    ensure!(
        owner_and_mode(&database)?.0 == hub_uid,
        "init, run as the hub's user, leaves the database the hub's"
    );

    run_block(backup.0, &backup.1, &bin, &home)?;
    let archives: Vec<PathBuf> = std::fs::read_dir(BACKUPS)?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    let [archive] = archives.as_slice() else {
        bail!("the backup block wrote {archives:?} into {BACKUPS}");
    };
    ensure!(
        owner_and_mode(archive)? == (hub_uid, 0o600),
        "the archive is the hub user's, mode 0600"
    );

    ensure!(
        restore.1.contains(EXAMPLE_ARCHIVE),
        "the restore block names {EXAMPLE_ARCHIVE}, which the test replaces by the archive made"
    );
    let restore_text = restore
        .1
        .replace(EXAMPLE_ARCHIVE, &archive.display().to_string());
    run_block(restore.0, &restore_text, &bin, &home)?;
    ensure!(
        Path::new("/var/lib/bosun-hub.lost/hub.sqlite").exists(),
        "the restore block kept what was there"
    );
    ensure!(
        owner_and_mode(&database)?.0 == hub_uid,
        "the restored database is the hub user's"
    );

    let out = run_block(rotation.0, &rotation.1, &bin, &home)?;
    ensure!(
        out.matches("published:").count() == 2,
        "both signed pin sets were published:\n{out}"
    );
    // The restored hub, rotated, still backs up as documented.
    std::fs::remove_file(archive)?;
    run_block(backup.0, &backup.1, &bin, &home)?;

    let systemctl = std::fs::read_to_string(scratch.path().join("systemctl.log"))?;
    ensure!(
        systemctl == "stop bosun-hubd\nstart bosun-hubd\n",
        "the documented lines ask systemd only to stop and start the hub: {systemctl:?}"
    );
    drop(made);
    ensure!(
        !account_exists(&layout.user)?,
        "the test removed the account it made"
    );
    Ok(())
}

#[test]
fn the_unit_runs_as_the_packaged_static_user() -> Result<()> {
    let unit = read(UNIT)?;
    // DynamicUser= would put the state under root-only /var/lib/private, where
    // `runuser -u bosun-hub --` cannot reach it (decision 0067).
    ensure!(
        settings(&unit, "DynamicUser").iter().all(|v| v == "no"),
        "the hub unit uses no DynamicUser="
    );
    let sysusers = read(SYSUSERS)?;
    let entry = sysusers
        .lines()
        .find(|l| l.starts_with("u "))
        .context("a `u` line")?;
    let fields: Vec<&str> = entry.split_whitespace().collect();
    ensure!(
        Some(fields[1]) == setting(&unit, "User").as_deref(),
        "the sysusers.d entry makes the unit's User="
    );
    let home = entry
        .rsplit_once('"')
        .map(|(_, rest)| rest.trim())
        .unwrap_or("");
    ensure!(
        home.starts_with(&format!(
            "/var/lib/{} ",
            setting(&unit, "StateDirectory").unwrap_or_default()
        )),
        "the account's home is the unit's state directory: {entry}"
    );
    let hubd = read("hubd/Cargo.toml")?;
    ensure!(
        hubd.contains(
            "\"../helper/debian/bosun-hub.sysusers\", \"usr/lib/sysusers.d/bosun-hub.conf\""
        ),
        "the hub package installs the sysusers.d entry"
    );
    Ok(())
}
