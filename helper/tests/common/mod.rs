//! Fixtures for the helper's integration tests: a throw-away install of the real
//! binary with its own root-owned configuration, stand-in programs that record their
//! command lines, loop devices and mounts that clean up after themselves, and the
//! unprivileged test user.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub mod sim;

use bosun_proto::helper::{Response, VerbName};
use serde_json::Value;

/// The unprivileged user the tests treat as the agent.
pub const TEST_USER: &str = "bosun-test";
/// Where the audit lines start.
pub const AUDIT_PREFIX: &str = "bosun-helper audit: ";

/// Creates [`TEST_USER`] when missing (idempotent, tolerant of parallel tests) and
/// returns its uid and gid.
pub fn test_user() -> (u32, u32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(ids) = lookup(TEST_USER) {
            return ids;
        }
        let _ = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                "--user-group",
                TEST_USER,
            ])
            .status();
        assert!(Instant::now() < deadline, "could not create {TEST_USER}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn lookup(user: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.first() == Some(&user)).then(|| (f[2].parse().unwrap(), f[3].parse().unwrap()))
    })
}

/// A fresh random filesystem UUID.
pub fn new_uuid() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/uuid")
        .unwrap()
        .trim()
        .to_string()
}

/// One helper call's result.
#[derive(Debug)]
pub struct Call {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Call {
    fn from_output(out: Output) -> Call {
        Call {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// The single JSON response on stdout.
    pub fn response(&self) -> Response {
        let lines: Vec<&str> = self.stdout.lines().collect();
        assert_eq!(lines.len(), 1, "expected one response line: {self:?}");
        serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("bad response {e}: {self:?}"))
    }

    /// The single audit line on stderr, parsed.
    pub fn audit(&self) -> Value {
        audit_of(&self.stderr)
    }
}

/// Parses the one audit line in `stderr`.
pub fn audit_of(stderr: &str) -> Value {
    let lines: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix(AUDIT_PREFIX))
        .collect();
    assert_eq!(lines.len(), 1, "expected one audit line in {stderr:?}");
    serde_json::from_str(lines[0]).unwrap()
}

/// Asserts a refusal of the given kind and returns its message.
pub fn expect_refused(call: &Call, reason: &str) -> String {
    let response = serde_json::to_value(call.response()).unwrap();
    assert_eq!(response["status"], "refused", "{call:?}");
    assert_eq!(response["reason"], reason, "{call:?}");
    assert_eq!(call.code, Some(2), "{call:?}");
    let audit = call.audit();
    assert_eq!(audit["result"], "refused");
    assert_eq!(audit["reason"], reason);
    response["message"].as_str().unwrap().to_string()
}

/// The capabilities a verb should hold here: its declared set within our bounding set.
pub fn expected_caps(verb: VerbName) -> Vec<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let bnd = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
        .unwrap();
    let mut caps: Vec<String> = bosun_helper::privs::declared(verb)
        .iter()
        .filter(|c| bnd & c.bitmask() != 0)
        .map(|c| c.to_string().to_lowercase())
        .collect();
    caps.sort();
    caps
}

/// A private install of the freshly built helper under a temporary prefix, with its
/// own configuration, roots and stand-in programs.
#[derive(Debug)]
pub struct Install {
    pub dir: tempfile::TempDir,
    pub helper: PathBuf,
    pub mount_root: PathBuf,
    /// The helper's `sysfs_root`: a tree of the install's own, where
    /// [`Install::mark_usb_disk`] makes a loop device look like a USB disk.
    pub sysfs_root: PathBuf,
    pub staging_root: PathBuf,
    pub golden_dir: PathBuf,
    pub image_archive: PathBuf,
    pub dump_root: PathBuf,
    pub calls_log: PathBuf,
    pub bin: PathBuf,
    pub break_glass_root: PathBuf,
    /// The agent's A/B slots (`a/` with `current` naming it).
    pub slots_root: PathBuf,
    /// Where the agent puts an update for `stage_agent_update` (its own directory).
    pub update_inbox: PathBuf,
}

impl Install {
    /// An install whose only accepted caller is `agent_user`.
    pub fn new(agent_user: &str) -> Install {
        let dir = tempfile::Builder::new()
            .prefix("bosun-helper-")
            .tempdir()
            .unwrap();
        let root = dir.path().to_path_buf();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let libexec = root.join("usr/libexec/bosun");
        for d in [
            libexec.clone(),
            root.join("etc/bosun"),
            root.join("mnt"),
            root.join("sys/dev/block"),
            root.join("run"),
            root.join("golden"),
            root.join("dump"),
            root.join("bin"),
            root.join("slots/a"),
            root.join("inbox"),
        ] {
            std::fs::create_dir_all(&d).unwrap();
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let helper = libexec.join("bosun-helper");
        copy_executable(Path::new(env!("CARGO_BIN_EXE_bosun-helper")), &helper);
        let golden_src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../golden");
        for unit in bosun_proto::helper::recipe::golden_inputs() {
            std::fs::copy(golden_src.join(unit), root.join("golden").join(unit)).unwrap();
        }
        let image_archive = root.join("golden/controller-image.tar");
        std::fs::write(&image_archive, IMAGE_ARCHIVE_BYTES).unwrap();
        std::os::unix::fs::symlink("a", root.join("slots/current")).unwrap();
        let install = Install {
            slots_root: root.join("slots"),
            update_inbox: root.join("inbox/bosun-agentd"),
            helper,
            mount_root: root.join("mnt"),
            sysfs_root: root.join("sys"),
            staging_root: root.join("run/bosun-helper"),
            golden_dir: root.join("golden"),
            image_archive,
            dump_root: root.join("dump"),
            calls_log: root.join("calls.log"),
            bin: root.join("bin"),
            break_glass_root: root.join("etc/bosun/break-glass"),
            dir,
        };
        for program in ["pct", "vzdump", "smartctl"] {
            install.stand_in(program, "");
        }
        install.write_config(agent_user, "/usr/sbin/blkid");
        let key = install.guest_key();
        std::fs::write(&key, GUEST_KEY).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        install
    }

    /// This install's guest stamp key (holding [`GUEST_KEY`]).
    pub fn guest_key(&self) -> PathBuf {
        self.dir.path().join("etc/bosun/guest-stamp.key")
    }

    /// The operator's adoption list of this install.
    pub fn adopt_file(&self) -> PathBuf {
        self.dir.path().join("etc/bosun/adopt-guests")
    }

    /// The root filesystem of simulated guest `vmid` of [`Install::guest_pct`].
    pub fn guest_root(&self, vmid: u32) -> PathBuf {
        self.dir.path().join("guests").join(vmid.to_string())
    }

    /// Gives guest `vmid` a stamp made with `key`, bound to `guest_id` or unbound.
    pub fn stamp_guest_with(&self, vmid: u32, key: &[u8; 32], guest_id: Option<&str>) {
        let guest = guest_id.map(|g| uuid::Uuid::parse_str(g).unwrap());
        let stamp = bosun_proto::helper::stamp::GuestStamp::sign(key, guest, [9; 16]);
        self.write_guest_file(vmid, GUEST_STAMP_PATH, stamp.line().as_bytes());
    }

    /// Gives guest `vmid` this install's stamp, bound to `guest_id` or unbound.
    pub fn stamp_guest(&self, vmid: u32, guest_id: Option<&str>) {
        self.stamp_guest_with(vmid, &GUEST_KEY, guest_id);
    }

    /// Writes `path` inside guest `vmid`'s root filesystem.
    pub fn write_guest_file(&self, vmid: u32, path: &str, bytes: &[u8]) {
        let file = self.guest_root(vmid).join(path.trim_start_matches('/'));
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, bytes).unwrap();
    }

    /// Reads `path` inside guest `vmid`'s root filesystem.
    pub fn guest_file(&self, vmid: u32, path: &str) -> Option<Vec<u8>> {
        std::fs::read(self.guest_root(vmid).join(path.trim_start_matches('/'))).ok()
    }

    /// A recording `pct` for guests kept as directories ([`Install::guest_root`]): `config`
    /// prints `<guests>/<vmid>.conf` (a plain guest when absent), `pull` and `push` copy files
    /// out of and into the guest's tree as Proxmox does (`failed to open` for a missing
    /// file), and `exec` runs `exec_body` with the guest's argv as `$@`.
    pub fn guest_pct(&self, exec_body: &str) {
        self.guest_pct_with("", exec_body);
    }

    /// [`Install::guest_pct`] that first runs `prelude` (shell text) on every call.
    pub fn guest_pct_with(&self, prelude: &str, exec_body: &str) {
        let guests = self.dir.path().join("guests");
        let body = format!(
            r#"{prelude}
g='{guests}'
case "$1" in
config) if [ -f "$g/$2.conf" ]; then cat "$g/$2.conf"; else printf 'arch: amd64
hostname: guest-%s
rootfs: local-lvm:vm-%s-disk-0,size=8G
' "$2" "$2"; fi ;;
pull) [ -f "$g/$2$3" ] || {{ echo "failed to open $3: No such file or directory" >&2; exit 255; }}; cat "$g/$2$3" > "$4" ;;
push) mkdir -p "$(dirname "$g/$2$4")"; cat "$3" > "$g/$2$4" ;;
exec) v="$2"; shift 3
{exec_body}
;;
esac"#,
            guests = guests.display()
        );
        self.stand_in("pct", &body);
    }

    /// Sets guest `vmid`'s `pct config --current` printout.
    pub fn guest_config(&self, vmid: u32, config: &str) {
        let guests = self.dir.path().join("guests");
        std::fs::create_dir_all(&guests).unwrap();
        std::fs::write(guests.join(format!("{vmid}.conf")), config).unwrap();
    }

    /// The recorded calls other than the admission steps every guest verb takes first
    /// (`pct config`, `pct pull` of the stamp).
    pub fn acting_calls(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter(|c| !c.starts_with("pct [config]") && !c.starts_with("pct [pull]"))
            .collect()
    }

    /// Writes the helper's configuration.
    pub fn write_config(&self, agent_user: &str, blkid: &str) {
        self.write_config_with(agent_user, blkid, serde_json::json!({}));
    }

    /// Writes the helper's configuration with `extra` settings on top (e.g. `limits`).
    pub fn write_config_with(&self, agent_user: &str, blkid: &str, extra: Value) {
        let mut config = serde_json::json!({
            "agent_user": agent_user,
            "mount_root": self.mount_root,
            "sysfs_root": self.sysfs_root,
            "staging_root": self.staging_root,
            "golden_dir": self.golden_dir,
            "controller_image_archive": self.image_archive,
            "dump_root": self.dump_root,
            "break_glass_root": self.break_glass_root,
            "slots_root": self.slots_root,
            "update_inbox": self.update_inbox,
            "guest_key": self.guest_key(),
            "adopt_file": self.adopt_file(),
            "programs": {
                "blkid": blkid,
                "pct": self.bin.join("pct"),
                "vzdump": self.bin.join("vzdump"),
                "smartctl": self.bin.join("smartctl"),
            }
        });
        for (key, value) in extra.as_object().unwrap() {
            config[key] = value.clone();
        }
        let path = self.config_path();
        std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }

    /// Makes `loopdev` a removable disk with serial [`TEST_SERIAL`] in the install's sysfs
    /// tree (`dev/block/<major>:<minor>/{removable,device/serial}`), as a USB stick's is.
    pub fn mark_usb_disk(&self, loopdev: &LoopDevice) {
        mark_usb_disk(&self.sysfs_root, &loopdev.device, TEST_SERIAL);
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("etc/bosun/helper.json")
    }

    /// Installs a stand-in for `program` that appends `program [arg] [arg]...` to the
    /// calls log, then runs `body` (shell text; `$1`... are the arguments).
    pub fn stand_in(&self, program: &str, body: &str) {
        let path = self.bin.join(program);
        let script = format!(
            "#!/bin/sh\n{{ printf '%s' '{program}'; for a in \"$@\"; do printf ' [%s]' \"$a\"; done; printf '\\n'; }} >> '{log}'\n{body}\nexit 0\n",
            log = self.calls_log.display()
        );
        let source = self.dir.path().join(format!("{program}.src"));
        std::fs::write(&source, script).unwrap();
        copy_executable(&source, &path);
    }

    /// The recorded command lines, one per call.
    pub fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(&self.calls_log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Runs the helper directly as root, the way sudo starts it (`SUDO_UID` set, the
    /// verb as its argument).
    pub fn run_as_sudo(&self, argv: &[&str], sudo_uid: u32, input: &[u8]) -> Call {
        let mut cmd = Command::new(&self.helper);
        cmd.args(argv)
            .env_clear()
            .env("SUDO_UID", sudo_uid.to_string());
        run_with_input(cmd, input)
    }

    /// Runs the helper through real `sudo -n` as the unprivileged `user`, with a
    /// sudoers fragment derived from `sudoers/bosun` for this install.
    pub fn run_via_sudo(&self, user: &str, verb: &str, input: &[u8]) -> Call {
        let (uid, gid) = lookup(user).unwrap();
        let mut cmd = Command::new("sudo");
        cmd.args(["-n", self.helper.to_str().unwrap(), verb])
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .current_dir("/")
            .uid(uid)
            .gid(gid);
        run_with_input(cmd, input)
    }

    /// The sudoers fragment of this install: `sudoers/bosun` with this install's helper
    /// path and `user` as the agent. Its aliases carry this install's own suffix: sudo's
    /// aliases are global across every fragment, so two tests at once (or an installed
    /// package's `/etc/sudoers.d/bosun`) would otherwise define them twice and break sudo.
    pub fn sudoers_for(&self, user: &str) -> String {
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../sudoers/bosun"))
                .unwrap();
        let suffix = format!(
            "_T{}_{}",
            std::process::id(),
            new_uuid().replace('-', "")[..8].to_uppercase()
        );
        let replaced = text
            .replace(
                bosun_proto::helper::HELPER_PATH,
                self.helper.to_str().unwrap(),
            )
            .replace(
                "User_Alias BOSUN_AGENT = bosun\n",
                &format!("User_Alias BOSUN_AGENT = {user}\n"),
            )
            .replace("BOSUN_AGENT", &format!("BOSUN_AGENT{suffix}"))
            .replace("BOSUN_HELPER", &format!("BOSUN_HELPER{suffix}"));
        assert_ne!(text, replaced);
        replaced
    }

    /// Names under the mount root (to prove a refusal left nothing behind).
    pub fn mount_root_entries(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.mount_root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// Mount points below this install, as seen by this (another) process.
    pub fn mounts(&self) -> Vec<(String, String)> {
        let prefix = self.dir.path().to_str().unwrap().to_string();
        mountinfo()
            .into_iter()
            .filter(|(target, _)| target.starts_with(&prefix))
            .collect()
    }
}

use std::os::unix::process::CommandExt as _;

/// Installs an executable with `install(1)`: the write descriptor then lives only in
/// that process, never in ours, where a thread forking for another test could inherit
/// it and make executing the file fail with "text file busy".
fn copy_executable(from: &Path, to: &Path) {
    let status = Command::new("install")
        .args(["-m", "0755"])
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success(), "install {from:?} {to:?}");
}

/// Installs a program (mode 0755) the way the fixtures do, e.g. a simulator stand-in.
pub fn install_executable(from: &Path, to: &Path) {
    copy_executable(from, to);
}

/// Runs `cmd` (the helper, however started) with `input` on stdin, bounded in time.
pub fn run_command(cmd: Command, input: &[u8]) -> Call {
    run_with_input(cmd, input)
}

fn run_with_input(mut cmd: Command, input: &[u8]) -> Call {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // The helper may stop reading early (oversized input): ignore a broken pipe.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = wait_bounded(child, Duration::from_secs(60));
    writer.join().unwrap();
    Call::from_output(out)
}

fn wait_bounded(mut child: std::process::Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("helper did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// (mount point, options) of every mount in our mount namespace.
pub fn mountinfo() -> Vec<(String, String)> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[4].replace("\\040", " "), f[5].to_string())
        })
        .collect()
}

/// A sudoers fragment installed in /etc/sudoers.d for the life of the value.
#[derive(Debug)]
pub struct SudoersGuard(PathBuf);

impl SudoersGuard {
    pub fn install(text: &str) -> SudoersGuard {
        let name = format!(
            "bosun-test-{}-{}",
            std::process::id(),
            new_uuid().replace('-', "")
        );
        let staged = std::env::temp_dir().join(format!("{name}.staged"));
        std::fs::write(&staged, text).unwrap();
        let check = Command::new("visudo")
            .args(["-c", "-q", "-f"])
            .arg(&staged)
            .output()
            .unwrap();
        std::fs::remove_file(&staged).unwrap();
        assert!(
            check.status.success(),
            "visudo rejected the fragment: {check:?}"
        );
        // sudo skips names containing a dot, so the fragment is complete and 0440 before it
        // appears under its real name: a concurrent `visudo -c` never sees it half-made.
        let dir = Path::new("/etc/sudoers.d");
        let path = dir.join(&name);
        let hidden = dir.join(format!(".{name}.tmp"));
        std::fs::write(&hidden, text).unwrap();
        std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o440)).unwrap();
        std::fs::rename(&hidden, &path).unwrap();
        SudoersGuard(path)
    }
}

impl Drop for SudoersGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// An ext4 image attached to a loop device; detached on drop.
#[derive(Debug)]
pub struct LoopDevice {
    pub device: String,
    pub uuid: String,
    _image: tempfile::NamedTempFile,
}

impl LoopDevice {
    pub fn ext4(uuid: &str) -> LoopDevice {
        let image = tempfile::NamedTempFile::new().unwrap();
        image.as_file().set_len(32 * 1024 * 1024).unwrap();
        let mkfs = Command::new("mkfs.ext4")
            .args(["-q", "-F", "-U", uuid])
            .arg(image.path())
            .output()
            .unwrap();
        assert!(mkfs.status.success(), "mkfs.ext4: {mkfs:?}");
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(image.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "losetup: {out:?}");
        LoopDevice {
            device: String::from_utf8(out.stdout).unwrap().trim().to_string(),
            uuid: uuid.to_string(),
            _image: image,
        }
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.device]).status();
    }
}

/// Unmounts `path` on drop if it is still a mount point (a failed test must not
/// leave mounts behind). Declare it after the [`LoopDevice`] so it drops first.
#[derive(Debug)]
pub struct MountGuard(pub PathBuf);

impl Drop for MountGuard {
    fn drop(&mut self) {
        let target = self.0.to_string_lossy().into_owned();
        if mountinfo().iter().any(|(t, _)| *t == target) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// The serial [`Install::mark_usb_disk`] gives a loop device.
pub const TEST_SERIAL: &str = "BOSUN-TEST-0001";

/// Makes `device` (a block device node) a removable disk with `serial` in the sysfs tree
/// at `sysfs_root`.
pub fn mark_usb_disk(sysfs_root: &Path, device: &str, serial: &str) {
    use std::os::unix::fs::MetadataExt;
    let rdev = std::fs::metadata(device).unwrap().rdev();
    let entry = sysfs_root.join("dev/block").join(format!(
        "{}:{}",
        rustix::fs::major(rdev),
        rustix::fs::minor(rdev)
    ));
    std::fs::create_dir_all(entry.join("device")).unwrap();
    std::fs::write(entry.join("removable"), "1\n").unwrap();
    std::fs::write(entry.join("device/serial"), format!("{serial}\n")).unwrap();
}

/// A mount request body for `uuid` at `target_id`, for the disk [`TEST_SERIAL`].
pub fn mount_request(uuid: &str, target_id: &str) -> Vec<u8> {
    mount_request_for(uuid, TEST_SERIAL, target_id)
}

/// A mount request body for `uuid` on the disk `serial`, at `target_id`.
pub fn mount_request_for(uuid: &str, serial: &str, target_id: &str) -> Vec<u8> {
    format!(
        r#"{{"verb":"mount_by_uuid","args":{{"uuid":"{uuid}","serial":"{serial}","target_id":"{target_id}","fstype":"ext4","class":"data","options":["noatime"]}}}}
"#
    )
    .into_bytes()
}

/// An unmount request body.
pub fn unmount_request(target_id: &str) -> Vec<u8> {
    format!(r#"{{"verb":"unmount","args":{{"target_id":"{target_id}"}}}}"#).into_bytes()
}

/// What an [`Install`]'s controller image archive holds.
pub const IMAGE_ARCHIVE_BYTES: &[u8] = b"not really a docker archive";

/// SHA-256 (lowercase hex) of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The `build_golden` request of the golden tests: builder 9000 from the Debian template,
/// archived to `local`, baking the install's controller image archive (its digest signed).
pub fn golden_request() -> Vec<u8> {
    golden_request_signing(&sha256_hex(IMAGE_ARCHIVE_BYTES))
}

/// [`golden_request`] with `controller_sha256` as the recipe's signed archive digest.
pub fn golden_request_signing(controller_sha256: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "verb": "build_golden",
        "args": {
            "vmid": 9000,
            "template": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
            "rootfs_storage": "local-lvm",
            "rootfs_gib": 8,
            "bridge": "vmbr0",
            "golden_storage": "local",
            "controller_image": "registry.example/bosun/controller:1.4.2",
            "controller_sha256": controller_sha256,
        },
    }))
    .unwrap()
}

/// The recipe's command lines for [`golden_request`], as the recording stand-ins write them.
pub fn expected_golden_calls(install: &Install) -> Vec<String> {
    let golden = install.golden_dir.display();
    let archive = install.image_archive.display();
    let exec = "pct [exec] [9000] [--]";
    vec![
        "pct [create] [9000] [local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst] [--hostname] [bosun-golden] [--unprivileged] [1] [--features] [nesting=1,keyctl=1] [--ostype] [debian] [--cores] [2] [--memory] [2048] [--rootfs] [local-lvm:8] [--net0] [name=eth0,bridge=vmbr0,ip=dhcp]".to_string(),
        "pct [start] [9000]".to_string(),
        format!("{exec} [/usr/bin/env] [DEBIAN_FRONTEND=noninteractive] [/usr/bin/apt-get] [update]"),
        format!("{exec} [/usr/bin/env] [DEBIAN_FRONTEND=noninteractive] [/usr/bin/apt-get] [install] [-y] [--no-install-recommends] [docker.io] [openssh-server] [ca-certificates]"),
        format!("{exec} [/usr/bin/mkdir] [-p] [-m] [0700] [/etc/bosun-bootstrap]"),
        format!("pct [push] [9000] [{archive}] [/etc/bosun-bootstrap/controller-image.tar]"),
        format!("{exec} [/usr/bin/docker] [load] [--input] [/etc/bosun-bootstrap/controller-image.tar]"),
        format!("{exec} [/usr/bin/docker] [tag] [registry.example/bosun/controller:1.4.2] [bosun/controller:golden]"),
        format!("pct [push] [9000] [{golden}/bosun-ssh-hostkeys.service] [/etc/systemd/system/bosun-ssh-hostkeys.service] [--perms] [0644]"),
        format!("pct [push] [9000] [{golden}/bosun-bootstrap.service] [/etc/systemd/system/bosun-bootstrap.service] [--perms] [0644]"),
        format!("pct [push] [9000] [{golden}/bosun-bootstrap-restart.service] [/etc/systemd/system/bosun-bootstrap-restart.service] [--perms] [0644]"),
        format!("pct [push] [9000] [{golden}/bosun-bootstrap.path] [/etc/systemd/system/bosun-bootstrap.path] [--perms] [0644]"),
        format!("pct [push] [9000] [{golden}/bosun-sshd.conf] [/etc/ssh/sshd_config.d/bosun.conf] [--perms] [0644]"),
        format!(
            "pct [push] [9000] [{}/guest-stamp-9000] [{GUEST_STAMP_PATH}] [--perms] [0600]",
            install.staging_root.display()
        ),
        format!("{exec} [/usr/bin/systemctl] [enable] [docker.service] [bosun-ssh-hostkeys.service] [bosun-bootstrap.service] [bosun-bootstrap.path]"),
        format!("{exec} [/usr/bin/find] [/etc/ssh] [-maxdepth] [1] [-name] [ssh_host_*] [-delete]"),
        format!("{exec} [/usr/bin/truncate] [-s] [0] [/etc/machine-id]"),
        "pct [shutdown] [9000] [--timeout] [120]".to_string(),
        "vzdump [9000] [--storage] [local] [--mode] [stop] [--compress] [zstd]".to_string(),
        "pct [destroy] [9000] [--purge] [1]".to_string(),
    ]
}

/// Asserts that `build_golden` failed at the step `load controller image` with `cause` in
/// its message, having run the recipe up to that step and then the builder's teardown.
pub fn assert_failed_at_docker_load(install: &Install, call: &Call, cause: &str) {
    match call.response() {
        Response::Failed { message } => {
            assert!(
                message.contains("golden image step load controller image failed"),
                "{message}"
            );
            assert!(message.contains(cause), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let mut expected: Vec<String> = expected_golden_calls(install)[..7].to_vec();
    expected.push("pct [stop] [9000]".into());
    expected.push("pct [destroy] [9000] [--purge] [1]".into());
    assert_eq!(install.calls(), expected);
}

/// A helper call measured: the call, the helper's peak resident set (KiB, from `wait4`) and how
/// long it took to answer.
#[allow(unsafe_code, clippy::zombie_processes)] // reaped by `wait4`, for its rusage
pub fn run_measured(
    install: &Install,
    verb: &str,
    uid: u32,
    input: &[u8],
) -> (Call, i64, Duration) {
    let started = Instant::now();
    let mut child = Command::new(&install.helper)
        .arg(verb)
        .env_clear()
        .env("SUDO_UID", uid.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let readers = (
        std::thread::spawn(move || {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut out, &mut s).unwrap();
            s
        }),
        std::thread::spawn(move || {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut err, &mut s).unwrap();
            s
        }),
    );
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value; both pointers are to live locals, for the call.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `pid` is our own child, not yet reaped.
    assert_eq!(unsafe { libc::wait4(pid, &mut status, 0, &mut usage) }, pid);
    let took = started.elapsed();
    let call = Call {
        code: Some(libc::WEXITSTATUS(status)),
        stdout: readers.0.join().unwrap(),
        stderr: readers.1.join().unwrap(),
    };
    (call, usage.ru_maxrss, took)
}

/// The processes whose process group is `pgid`, from `/proc`.
pub fn group_members(pgid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let fields: Vec<&str> = stat
                .rsplit_once(')')
                .map(|(_, rest)| rest.split_whitespace().collect())
                .unwrap_or_default();
            fields.get(2).and_then(|g| g.parse::<u32>().ok()) == Some(pgid)
                && fields.first() != Some(&"Z")
        })
        .collect()
}

/// The stamp key of every [`Install`].
pub const GUEST_KEY: [u8; 32] = *b"bosun-helper-tests-guest-key-32b";
/// Where a guest's stamp lives.
pub const GUEST_STAMP_PATH: &str = bosun_proto::helper::stamp::GUEST_STAMP_PATH;
/// The `pct exec` case of a guest's `/usr/bin/tar` for [`Install::guest_pct`]: the system
/// tar of the guest tree's `--directory=` to stdout, as the guest's own tar writes a volume.
pub const GUEST_TAR: &str = r#"/usr/bin/tar) for a in "$@"; do case "$a" in --directory=*) d="${a#--directory=}" ;; esac; done
cd "$g/$v$d" || exit 2
exec tar --create --file=- --numeric-owner . ;;"#;

/// The guest id of [`bootstrap_document`].
pub const DOC_GUEST: &str = "0b6f4f2e-6c1a-4d6e-9a51-2f0c8d3e7a10";

/// The token inside [`bootstrap_document`]: it must never reach an audit line.
pub const SECRET: &str = "tok_live_3b1f6a";

/// A valid `bosun.bootstrap/v1` document (the documented example) carrying [`SECRET`].
pub fn bootstrap_document() -> String {
    include_str!("../../../docs/proto/bootstrap.json")
        .replace("blt_Qm9zdW4gbG9jYWwgQVBJIHRva2VuIGV4YW1wbGU", SECRET)
}

/// A `push_bootstrap` request body for `vmid`.
pub fn push_request(vmid: u32) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "verb": "push_bootstrap",
        "args": {"vmid": vmid, "document": bootstrap_document()},
    }))
    .unwrap()
}
