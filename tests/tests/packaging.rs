//! The Debian packages: `cargo deb` builds `bosun-agent`, `bosun-hub`, `bosun-ctl` and
//! `bosun-guest`, `dpkg -i` installs them on this machine (and the controller image is built
//! from the installed `bosun-guest`, `packaging_build/guest.rs`), the test checks users,
//! files, modes and sudo, then `dpkg --purge` must remove what the packages made except what Debian practice keeps
//! (the system users and groups, the hub's database unless the operator says yes, the
//! operator's files). The test then removes those itself, and the machine is as it found
//! it: the test depends on nothing an earlier run left.
//!
//! The install test needs root (CI runs as root on a fresh Debian 12) and skips,
//! saying why, only when it is not root. It runs in the `packaging` nextest group
//! (one at a time), and a guard purges both packages and removes what the test made
//! however it ends.

use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, Result, bail, ensure};

#[path = "packaging_build/mod.rs"]
mod packaging_build;

use packaging_build::build_packages;

const PACKAGES: [&str; 4] = ["bosun-agent", "bosun-hub", "bosun-ctl", "bosun-guest"];
/// The accounts the packages create (purge keeps them; the test removes them afterwards).
const USERS: [&str; 4] = ["bosun", "bosun-hub", "bosun-breakglass", "bosun-tunnel"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits inside the workspace")
        .to_owned()
}

const SCRIPTS: [&str; 7] = [
    "helper/debian/bosun-agent/postinst",
    "helper/debian/bosun-agent/prerm",
    "helper/debian/bosun-agent/postrm",
    "helper/debian/bosun-hub/postinst",
    "helper/debian/bosun-hub/prerm",
    "helper/debian/bosun-hub/postrm",
    "helper/debian/bosun-guest/postrm",
];

#[test]
fn maintainer_scripts_are_posix_sh_with_one_debhelper_marker() -> Result<()> {
    for script in SCRIPTS {
        let path = workspace().join(script);
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {script}"))?;
        ensure!(
            text.starts_with("#!/bin/sh\n"),
            "{script} must start with #!/bin/sh"
        );
        ensure!(text.contains("\nset -e\n"), "{script} must set -e");
        // cargo-deb replaces every occurrence, comments included.
        ensure!(
            text.matches("#DEBHELPER#").count() == 1,
            "{script} must hold exactly one #DEBHELPER# marker"
        );
        let mode = std::fs::metadata(&path)?.permissions().mode();
        ensure!(
            mode & 0o111 != 0,
            "{script} must be executable, mode {mode:o}"
        );
        let out = run(Command::new("/bin/sh").arg("-n").arg(&path))?;
        ensure!(out.status.success(), "sh -n {script}: {}", stderr(&out));
    }
    Ok(())
}

#[test]
fn the_debian_changelogs_name_the_package_and_the_workspace_version() -> Result<()> {
    for package in PACKAGES {
        let path = workspace().join(format!("helper/debian/{package}.changelog"));
        let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
        let (name, version) = packaging_build::newest_entry(&text)?;
        ensure!(name == package, "{}: package {name}", path.display());
        // cargo-deb's default revision is 1.
        ensure!(
            version == format!("{}-1", env!("CARGO_PKG_VERSION")),
            "{}: version {version}: add an entry for {}-1",
            path.display(),
            env!("CARGO_PKG_VERSION")
        );
    }
    Ok(())
}

/// Lintian finds no error and no warning in either package (maintainer, changelog,
/// dependencies, a man page for every program in /usr/bin, the copyright file).
#[test]
fn packages_are_lintian_clean() -> Result<()> {
    let out = tempfile::tempdir()?;
    let debs = build_packages(out.path())?;
    packaging_build::lintian(&debs.agent)?;
    packaging_build::lintian(&debs.hub)?;
    packaging_build::lintian(&debs.ctl)?;
    packaging_build::lintian(&debs.guest)
}

/// The agent package asks for no browser and no font package: the agent renders the
/// recovery sheet itself with fonts built into the binary (decision 0037). Read from the
/// built package's control fields.
#[test]
fn the_agent_package_needs_no_browser_for_the_recovery_sheet() -> Result<()> {
    let out = tempfile::tempdir()?;
    let agent = build_packages(out.path())?.agent;
    let fields = run(Command::new("dpkg-deb").arg("--field").arg(&agent).args([
        "Depends",
        "Recommends",
        "Suggests",
    ]))?;
    ensure!(
        fields.status.success(),
        "dpkg-deb --field: {}",
        stderr(&fields)
    );
    let fields = String::from_utf8_lossy(&fields.stdout).to_lowercase();
    for unwanted in ["chromium", "fonts-", "browser"] {
        ensure!(
            !fields.contains(unwanted),
            "the agent package asks for {unwanted}: {fields}"
        );
    }
    ensure!(
        fields.contains("depends:"),
        "no Depends field read: {fields}"
    );
    Ok(())
}

#[test]
fn the_shipped_example_agent_config_loads() -> Result<()> {
    let example = workspace().join("helper/debian/examples/agent.toml");
    let text = std::fs::read_to_string(&example)?;
    let dir = tempfile::tempdir()?;
    let etc = format!("{}/", dir.path().display());
    let text = text.replace("/etc/bosun/", &etc);
    for secret in ["pve-token", "enroll-token"] {
        std::fs::write(dir.path().join(secret), "not-a-real-secret\n")?;
    }
    let config = dir.path().join("agent.toml");
    std::fs::write(&config, text)?;
    let loaded = bosun_agentd::config::AgentConfig::load(&config)
        .with_context(|| format!("loading {}", example.display()))?;
    assert_eq!(loaded.state_dir, Path::new("/var/lib/bosun"));
    assert!(
        matches!(
            &loaded.helper,
            Some(bosun_agentd::links::helper::HelperTransport::Socket { path })
                if path == Path::new("/run/bosun/helper.sock")
        ),
        "the example uses the packaged socket: {:?}",
        loaded.helper
    );
    Ok(())
}

fn run(cmd: &mut Command) -> Result<Output> {
    cmd.output()
        .with_context(|| format!("running {:?}", cmd.get_program()))
}

fn stderr(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn check(cmd: &mut Command) -> Result<Output> {
    let shown = format!("{cmd:?}");
    let out = run(cmd)?;
    ensure!(out.status.success(), "{shown} failed: {}", stderr(&out));
    Ok(out)
}

/// Runs a command that reads the whole sudo configuration. Other tests add fragments
/// to /etc/sudoers.d while this one runs, and one caught between its write and its
/// chmod makes sudo refuse the configuration for an instant; such a failure is retried
/// for up to 2 s. A failure that names the packaged fragment fails at once.
fn check_sudo_config(cmd: &mut Command) -> Result<Output> {
    let shown = format!("{cmd:?}");
    let mut attempts = 0;
    loop {
        let out = run(cmd)?;
        if out.status.success() {
            return Ok(out);
        }
        let text = stderr(&out);
        attempts += 1;
        if attempts == 20 || text.contains("/etc/sudoers.d/bosun:") || !text.contains("bosun-test")
        {
            bail!("{shown} failed after {attempts} attempts: {text}");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn effective_uid() -> Result<u32> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .context("/proc/self/status has a Uid line")?;
    let euid = line
        .split_whitespace()
        .nth(2)
        .context("the Uid line has an effective uid")?;
    Ok(euid.parse()?)
}

/// `dpkg` as the test runs it: debconf questions take their defaults, as in CI.
fn dpkg() -> Command {
    let mut cmd = Command::new("dpkg");
    cmd.env("DEBIAN_FRONTEND", "noninteractive");
    cmd
}

/// The hub's data directories: purge keeps them unless the operator says otherwise.
const HUB_DATA: [&str; 2] = ["/var/lib/bosun-hub", "/var/lib/private/bosun-hub"];
/// Where versions before decision 0039 kept the agent's slots; the test puts slots there
/// as such a version left them, and the install must move past them.
const OLD_SLOTS_PARENT: &str = "/usr/lib/bosun";
/// The operator's file the test writes into /etc/bosun.
const OPERATOR_CONFIG: &str = "/etc/bosun/agent.toml";

/// Undoes what the test made, however it ends: purges both packages, then removes the
/// operator file it wrote, the directories purge keeps on purpose (`/etc/bosun` while it
/// held that file, the hub's database) unless they were there before the test, and the
/// accounts purge keeps on purpose (the test refuses to run where they existed).
struct Cleanup {
    before: BTreeSet<PathBuf>,
}

impl Cleanup {
    fn clean(&self) -> Result<()> {
        check(dpkg().arg("--purge").args(PACKAGES))?;
        let made = |path: &str| !self.before.contains(Path::new(path));
        if made(OPERATOR_CONFIG) && Path::new(OPERATOR_CONFIG).exists() {
            std::fs::remove_file(OPERATOR_CONFIG)?;
        }
        // The test refuses to run where the old slots' parent exists, so it made this one.
        if std::fs::symlink_metadata(OLD_SLOTS_PARENT).is_ok() {
            std::fs::remove_dir_all(OLD_SLOTS_PARENT)
                .with_context(|| format!("removing {OLD_SLOTS_PARENT}"))?;
        }
        if made("/etc/bosun") && Path::new("/etc/bosun").exists() {
            std::fs::remove_dir("/etc/bosun").context("removing /etc/bosun")?;
        }
        for dir in HUB_DATA {
            if made(dir) && std::fs::symlink_metadata(dir).is_ok() {
                std::fs::remove_dir_all(dir).with_context(|| format!("removing {dir}"))?;
            }
        }
        for name in USERS {
            if run(Command::new("getent").args(["passwd", name]))?
                .status
                .success()
            {
                check(Command::new("userdel").arg(name))?;
            }
            if run(Command::new("getent").args(["group", name]))?
                .status
                .success()
            {
                check(Command::new("groupdel").arg(name))?;
            }
        }
        Ok(())
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Err(e) = self.clean() {
            eprintln!("packaging cleanup: {e:#}");
        }
    }
}

/// What debconf holds for `bosun-hub` (its questions and their values).
fn debconf_state() -> Result<String> {
    let out = check(Command::new("debconf-show").arg("bosun-hub"))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn group_line(name: &str) -> Result<String> {
    let out = check(Command::new("getent").args(["group", name]))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Every path under the places the packages touch whose name mentions bosun, except
/// other tests' `bosun-test*` users and sudoers fragments.
fn bosun_paths() -> BTreeSet<PathBuf> {
    fn walk(dir: &Path, found: &mut BTreeSet<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path == Path::new("/var/lib/dpkg") {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.contains("bosun") && !name.starts_with("bosun-test") {
                found.insert(path.clone());
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&path, found);
            }
        }
    }
    let mut found = BTreeSet::new();
    for root in [
        "/etc",
        "/var/lib",
        "/usr/bin",
        "/usr/libexec",
        "/usr/lib/systemd",
        "/usr/share/doc",
        "/usr/share/bosun",
        "/usr/share/bosun-guest",
        "/usr/share/man/man1",
        "/usr/share/bash-completion",
        "/usr/share/zsh",
        "/usr/share/fish",
    ] {
        walk(Path::new(root), &mut found);
    }
    found
}

fn account_lines() -> Result<Vec<String>> {
    let mut lines = Vec::new();
    for file in ["/etc/passwd", "/etc/group", "/etc/shadow", "/etc/gshadow"] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        lines.extend(
            text.lines()
                .filter(|l| USERS.iter().any(|u| l.starts_with(&format!("{u}:"))))
                .map(|l| format!("{file}: {l}")),
        );
    }
    Ok(lines)
}

fn ids(name: &str) -> Result<(u32, u32)> {
    ids_with_shell(name, "/usr/sbin/nologin")
}

fn ids_with_shell(name: &str, shell: &str) -> Result<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd")?;
    let line = passwd
        .lines()
        .find(|l| l.starts_with(&format!("{name}:")))
        .with_context(|| format!("user {name} exists"))?;
    let fields: Vec<&str> = line.split(':').collect();
    ensure!(fields.len() == 7, "malformed passwd line {line}");
    ensure!(
        fields[6] == shell,
        "{name} has the login shell {shell}, not {}",
        fields[6]
    );
    let uid: u32 = fields[2].parse()?;
    ensure!(uid < 1000, "{name} is a system user, uid {uid}");
    Ok((uid, fields[3].parse()?))
}

fn assert_mode(path: &str, uid: u32, gid: u32, mode: u32, dir: bool) -> Result<()> {
    let meta = std::fs::symlink_metadata(path).with_context(|| format!("{path} is installed"))?;
    ensure!(meta.is_dir() == dir, "{path}: expected a directory: {dir}");
    ensure!(
        (meta.uid(), meta.gid(), meta.mode() & 0o7777) == (uid, gid, mode),
        "{path}: owner {}:{} mode {:o}, expected {uid}:{gid} {mode:o}",
        meta.uid(),
        meta.gid(),
        meta.mode() & 0o7777
    );
    Ok(())
}

#[test]
fn packages_install_check_and_purge_cleanly() -> Result<()> {
    let euid = effective_uid()?;
    if euid != 0 {
        eprintln!(
            "skipping: installing packages with dpkg needs root (euid {euid}); CI runs as root"
        );
        return Ok(());
    }
    for package in PACKAGES {
        let status = run(Command::new("dpkg-query").args(["-W", "-f=${Status}", package]))?;
        ensure!(
            !String::from_utf8_lossy(&status.stdout).contains("installed"),
            "{package} is already installed here; the test would purge it, so it refuses"
        );
    }
    let before_paths = bosun_paths();
    let before_accounts = account_lines()?;
    ensure!(
        before_accounts.is_empty(),
        "users or groups the packages create already exist, and the test would remove them: \
         {before_accounts:?}"
    );
    for path in HUB_DATA.iter().chain(&[OPERATOR_CONFIG, OLD_SLOTS_PARENT]) {
        ensure!(
            std::fs::symlink_metadata(path).is_err(),
            "{path} exists, and the test would remove it, so it refuses"
        );
    }
    let before_debconf = debconf_state()?;

    let out = tempfile::tempdir()?;
    let debs = build_packages(out.path())?;
    let (agent_deb, hub_deb, ctl_deb, guest_deb) = (&debs.agent, &debs.hub, &debs.ctl, &debs.guest);

    let cleanup = Cleanup {
        before: before_paths.clone(),
    };
    // An upgrade from a version that kept the slots under /usr/lib/bosun: postinst removes
    // them (slot a is rebuilt from the package) and the unit runs the new place.
    let old_slot = Path::new(OLD_SLOTS_PARENT).join("slots/a");
    std::fs::create_dir_all(&old_slot)?;
    std::fs::write(old_slot.join("bosun-agentd"), b"an older agent")?;
    std::os::unix::fs::symlink("a", Path::new(OLD_SLOTS_PARENT).join("slots/current"))?;
    check(
        dpkg()
            .arg("-i")
            .args([agent_deb, hub_deb, ctl_deb, guest_deb]),
    )?;
    installed_state()?;
    // A second configure (a reinstall) converges to the same state.
    check(
        dpkg()
            .arg("-i")
            .args([agent_deb, hub_deb, ctl_deb, guest_deb]),
    )?;
    installed_state()?;
    packaging_build::guest::controller_image_from_the_package(guest_deb, out.path())?;
    let question = debconf_state()?;
    ensure!(
        question.contains("bosun-hub/purge_database: false"),
        "the hub's purge question is registered, default no: {question:?}"
    );

    // What the agent and the helper write at run time goes with the purge; the
    // operator's own config and the hub's database stay.
    let (bosun_uid, bosun_gid) = ids("bosun")?;
    let (hub_uid, hub_gid) = ids("bosun-hub")?;
    let groups = (group_line("bosun")?, group_line("bosun-hub")?);
    let journal = Path::new("/var/lib/bosun/journal.sqlite");
    std::fs::write(journal, b"journal")?;
    std::os::unix::fs::chown(journal, Some(bosun_uid), Some(bosun_gid))?;
    std::fs::create_dir_all("/run/bosun-helper")?;
    std::fs::write("/run/bosun-helper/bootstrap-101-1.json", b"{}")?;
    std::fs::create_dir("/var/lib/bosun-helper/mnt/target-a")?;
    std::fs::write("/etc/bosun/helper.json", b"{}")?;
    std::fs::write(OPERATOR_CONFIG, b"# the operator's\n")?;
    for file in packaging_build::guest::RUNTIME_FILES {
        std::fs::create_dir_all(Path::new(file).parent().context("a parent")?)?;
        std::fs::write(file, b"the controller's")?;
    }
    let database = Path::new("/var/lib/bosun-hub/hub.sqlite");
    std::fs::write(database, b"db")?;
    std::os::unix::fs::chown(database, Some(hub_uid), Some(hub_gid))?;

    check(dpkg().arg("--purge").args(PACKAGES))?;
    ensure!(
        Path::new(OPERATOR_CONFIG).exists(),
        "purge keeps the operator's {OPERATOR_CONFIG}"
    );
    // Debian keeps system accounts: the operator's root:bosun secret files outlive the
    // purge, and a group made later must not get their gid.
    ensure!(
        ids("bosun")? == (bosun_uid, bosun_gid) && ids("bosun-hub")? == (hub_uid, hub_gid),
        "purge keeps the bosun and bosun-hub users with their ids"
    );
    ensure!(
        (group_line("bosun")?, group_line("bosun-hub")?) == groups,
        "purge keeps the bosun and bosun-hub groups: {groups:?}"
    );
    ensure!(
        std::fs::read(database).ok().as_deref() == Some(&b"db"[..]),
        "purge keeps the hub's database unless the operator answers yes"
    );
    for gone in [
        "/var/lib/bosun",
        "/var/lib/bosun-helper",
        "/run/bosun-helper",
        "/etc/bosun/helper.json",
        "/etc/bosun/break-glass",
        "/var/lib/bosun-breakglass",
        "/var/lib/bosun-consent",
        "/var/lib/bosun-tunnel",
        "/etc/bosun-hub",
        "/var/lib/bosun-guest",
        "/etc/bosun-guest",
        packaging_build::guest::RUNTIME_FILES[1],
    ] {
        ensure!(!Path::new(gone).exists(), "purge removes {gone}");
    }
    ensure!(
        debconf_state()? == before_debconf,
        "purge leaves nothing in debconf: {:?}",
        debconf_state()?
    );
    packages_unknown_to_dpkg()?;

    // Installed again, the hub finds its account and its database; purged with the
    // question answered yes, the database goes.
    check(dpkg().arg("-i").arg(hub_deb))?;
    ensure!(
        ids("bosun-hub")? == (hub_uid, hub_gid),
        "a reinstall reuses the kept bosun-hub user"
    );
    assert_mode(
        "/var/lib/bosun-hub/hub.sqlite",
        hub_uid,
        hub_gid,
        0o644,
        false,
    )?;
    let mut preseed = Command::new("debconf-set-selections");
    preseed.stdin(std::process::Stdio::piped());
    let mut child = preseed.spawn()?;
    std::io::Write::write_all(
        child
            .stdin
            .as_mut()
            .context("debconf-set-selections stdin")?,
        b"bosun-hub bosun-hub/purge_database boolean true\n",
    )?;
    ensure!(child.wait()?.success(), "debconf-set-selections failed");
    check(dpkg().arg("--purge").arg("bosun-hub"))?;
    for dir in HUB_DATA {
        ensure!(
            std::fs::symlink_metadata(dir).is_err(),
            "purge answered yes removes {dir}"
        );
    }
    ensure!(
        debconf_state()? == before_debconf,
        "purge leaves nothing in debconf"
    );
    packages_unknown_to_dpkg()?;

    // What is left is what the test made on purpose; once it is gone, the machine is as
    // the test found it.
    cleanup.clean()?;
    ensure!(
        bosun_paths() == before_paths,
        "left behind {:?}",
        bosun_paths().difference(&before_paths).collect::<Vec<_>>()
    );
    ensure!(
        account_lines()? == before_accounts,
        "left accounts {:?}",
        account_lines()?
    );
    drop(cleanup);
    Ok(())
}

fn packages_unknown_to_dpkg() -> Result<()> {
    for package in PACKAGES {
        let status = run(Command::new("dpkg-query").args(["-W", "-f=${Status}", package]))?;
        ensure!(
            !String::from_utf8_lossy(&status.stdout).contains("installed"),
            "{package} is still known to dpkg after purge"
        );
    }
    Ok(())
}

fn installed_state() -> Result<()> {
    packaging_build::guest::installed_state()?;
    let (bosun_uid, bosun_gid) = ids("bosun")?;
    let (hub_uid, hub_gid) = ids("bosun-hub")?;
    assert_mode("/usr/bin/bosun-agentd", 0, 0, 0o755, false)?;
    assert_mode("/usr/bin/bosun-agentctl", 0, 0, 0o755, false)?;
    assert_mode("/usr/libexec/bosun/bosun-helper", 0, 0, 0o755, false)?;
    assert_mode("/usr/libexec/bosun/bosun-update-gate", 0, 0, 0o755, false)?;
    assert_mode("/usr/libexec/bosun/bosun-support", 0, 0, 0o755, false)?;
    assert_mode("/etc/sudoers.d/bosun-breakglass", 0, 0, 0o440, false)?;
    let (breakglass_uid, breakglass_gid) = ids_with_shell("bosun-breakglass", "/bin/bash")?;
    assert_mode(
        "/var/lib/bosun-breakglass",
        breakglass_uid,
        bosun_gid,
        0o2750,
        true,
    )?;
    assert_mode(
        "/var/lib/bosun-consent",
        bosun_uid,
        breakglass_gid,
        0o2750,
        true,
    )?;
    // The agent writes the tunnel's ingress; cloudflared's replicas read it by group.
    let tunnel_gid = ids_with_shell("bosun-tunnel", "/usr/sbin/nologin")?.1;
    assert_mode("/var/lib/bosun-tunnel", bosun_uid, tunnel_gid, 0o2750, true)?;
    // The packaged agent is slot a, the one `current` names (the unit runs it from there).
    assert_mode("/var/lib/bosun-helper/slots", 0, 0, 0o755, true)?;
    assert_mode(
        "/var/lib/bosun-helper/slots/a/bosun-agentd",
        0,
        0,
        0o755,
        false,
    )?;
    ensure!(
        std::fs::read_link("/var/lib/bosun-helper/slots/current")? == Path::new("a"),
        "current names slot a after install"
    );
    ensure!(
        std::fs::symlink_metadata(OLD_SLOTS_PARENT).is_err(),
        "{OLD_SLOTS_PARENT} is gone: the slots moved to /var/lib/bosun-helper/slots"
    );
    assert_mode(
        "/var/lib/bosun/update/incoming",
        bosun_uid,
        bosun_gid,
        0o700,
        true,
    )?;
    assert_mode("/etc/sudoers.d/bosun", 0, 0, 0o440, false)?;
    assert_mode("/var/lib/bosun", bosun_uid, bosun_gid, 0o700, true)?;
    for root in ["", "/mnt", "/golden"] {
        assert_mode(&format!("/var/lib/bosun-helper{root}"), 0, 0, 0o755, true)?;
    }
    assert_mode("/etc/bosun", 0, 0, 0o755, true)?;
    for unit in [
        "bosun-agentd.service",
        "bosun-helper.socket",
        "bosun-helper@.service",
        "bosun-helper-guest.socket",
        "bosun-helper-guest@.service",
        "bosun-helper-golden.socket",
        "bosun-helper-golden@.service",
        "bosun-hubd.service",
        "bosun-update-gate.service",
        "bosun-update-gate.path",
    ] {
        assert_mode(
            &format!("/usr/lib/systemd/system/{unit}"),
            0,
            0,
            0o644,
            false,
        )?;
    }
    let example = "/usr/share/doc/bosun-agent/examples/agent.toml";
    assert_mode(example, 0, 0, 0o644, false)?;
    // The helper's sockets (decision 0071) are enabled at install; the agent waits for its
    // config.
    for socket in [
        "bosun-helper.socket",
        "bosun-helper-guest.socket",
        "bosun-helper-golden.socket",
    ] {
        let wants = Path::new("/etc/systemd/system/sockets.target.wants").join(socket);
        let packaged = Path::new("/usr/lib/systemd/system").join(socket);
        ensure!(
            std::fs::symlink_metadata(&wants)?.is_symlink()
                && std::fs::canonicalize(&wants)? == std::fs::canonicalize(&packaged)?,
            "{} links to the packaged socket, not {:?}",
            wants.display(),
            std::fs::read_link(&wants)
        );
    }
    ensure!(
        !Path::new("/etc/systemd/system/multi-user.target.wants/bosun-agentd.service").exists(),
        "the agent is not enabled before it is configured"
    );

    check(Command::new("visudo").args(["-c", "-f", "/etc/sudoers.d/bosun"]))?;
    check_sudo_config(Command::new("visudo").arg("-c"))?;
    let listed = check_sudo_config(Command::new("sudo").args(["-n", "-l", "-U", "bosun"]))?;
    let listed = String::from_utf8_lossy(&listed.stdout);
    ensure!(
        listed.contains("/usr/libexec/bosun/bosun-helper mount_by_uuid"),
        "sudo grants bosun the helper's verbs: {listed}"
    );
    check(Command::new("visudo").args(["-c", "-f", "/etc/sudoers.d/bosun-breakglass"]))?;
    let listed =
        check_sudo_config(Command::new("sudo").args(["-n", "-l", "-U", "bosun-breakglass"]))?;
    let listed = String::from_utf8_lossy(&listed.stdout);
    ensure!(
        listed.contains("/usr/bin/systemctl restart bosun-agentd.service")
            && listed.contains("/usr/sbin/pct list")
            && !listed.contains("(ALL)"),
        "sudo grants bosun-breakglass the support commands, nothing more: {listed}"
    );

    assert_mode("/usr/bin/bosun-hubd", 0, 0, 0o755, false)?;
    assert_mode("/usr/bin/bosunctl", 0, 0, 0o755, false)?;
    // The operator CLI is its own package: a workstation installs it without the hub.
    let owner = check(Command::new("dpkg").args(["-S", "/usr/bin/bosunctl"]))?;
    let owner = String::from_utf8_lossy(&owner.stdout);
    ensure!(
        owner.starts_with("bosun-ctl: "),
        "bosunctl belongs to {owner}"
    );
    let hub_files = check(Command::new("dpkg").args(["-L", "bosun-hub"]))?;
    let hub_files = String::from_utf8_lossy(&hub_files.stdout);
    ensure!(
        !hub_files.contains("bosunctl"),
        "bosun-hub ships no bosunctl file: {hub_files}"
    );
    assert_mode("/var/lib/bosun-hub", hub_uid, hub_gid, 0o700, true)?;
    assert_mode("/etc/bosun-hub", 0, hub_gid, 0o750, true)?;
    // The hub's config is a conffile: an upgrade keeps the operator's edits.
    assert_mode("/etc/bosun-hub/hub.toml", 0, 0, 0o644, false)?;
    let conffiles = check(Command::new("dpkg-query").args(["-W", "-f=${Conffiles}", "bosun-hub"]))?;
    let conffiles = String::from_utf8_lossy(&conffiles.stdout);
    ensure!(
        conffiles.contains("/etc/bosun-hub/hub.toml"),
        "hub.toml is not a conffile: {conffiles}"
    );

    for name in ["bosun-agentd", "bosun-agentctl", "bosun-hubd", "bosunctl"] {
        for file in [
            format!("/usr/share/man/man1/{name}.1.gz"),
            format!("/usr/share/bash-completion/completions/{name}"),
            format!("/usr/share/zsh/vendor-completions/_{name}"),
            format!("/usr/share/fish/vendor_completions.d/{name}.fish"),
        ] {
            assert_mode(&file, 0, 0, 0o644, false)?;
        }
    }
    for page in ["bosunctl-hosts-list", "bosun-agentctl-escrow-create"] {
        assert_mode(
            &format!("/usr/share/man/man1/{page}.1.gz"),
            0,
            0,
            0o644,
            false,
        )?;
    }
    // The configuration files' pages, made from the types that parse them.
    for page in ["agent.toml", "hub.toml"] {
        assert_mode(
            &format!("/usr/share/man/man5/{page}.5.gz"),
            0,
            0,
            0o644,
            false,
        )?;
    }
    for binary in [
        "/usr/bin/bosun-agentd",
        "/usr/bin/bosun-agentctl",
        "/usr/bin/bosun-hubd",
        "/usr/bin/bosunctl",
    ] {
        let out = check(Command::new(binary).arg("--version"))?;
        let version = String::from_utf8_lossy(&out.stdout);
        ensure!(
            version.contains(env!("CARGO_PKG_VERSION")),
            "{binary} --version printed {version}"
        );
    }
    Ok(())
}
