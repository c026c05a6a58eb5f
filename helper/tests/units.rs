//! The systemd units, the golden units and the sudoers fragment, checked with the
//! real tools (`systemd-analyze`, `visudo`) and against the helper's verb list.
// Test harness code: a panic is a failed test with its location.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use bosun_proto::helper::{HELPER_PATH, HelperUnit, VerbName};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap()
}

/// `Key=value` settings of a unit file (continuation lines joined).
fn settings(text: &str, key: &str) -> Vec<String> {
    let joined = text.replace("\\\n", " ");
    joined
        .lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// A throw-away root for `systemd-analyze verify --root`: the system's own units (for
/// targets such as sysinit.target), the units under test, stand-in units they depend
/// on, and an executable at every `ExecStart*=` path they name, so `verify` checks the
/// real unit files without the binaries being installed on this machine.
fn verify_root(units: &[PathBuf], dependencies: &[&str]) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let system = root.path().join("etc/systemd/system");
    std::fs::create_dir_all(&system).unwrap();
    std::fs::create_dir_all(root.path().join("usr/lib/systemd")).unwrap();
    let status = Command::new("cp")
        .args(["-a", "/usr/lib/systemd/system"])
        .arg(root.path().join("usr/lib/systemd/"))
        .status()
        .unwrap();
    assert!(status.success());
    let mut programs = BTreeSet::new();
    for unit in units {
        let text = std::fs::read_to_string(unit).unwrap();
        for key in ["ExecStart", "ExecStartPre", "ExecStop"] {
            for value in settings(&text, key) {
                programs.insert(
                    value
                        .trim_start_matches('-')
                        .split(' ')
                        .next()
                        .unwrap()
                        .to_string(),
                );
            }
        }
        std::fs::copy(unit, system.join(unit.file_name().unwrap())).unwrap();
    }
    for dep in dependencies {
        std::fs::write(system.join(dep), "[Service]\nExecStart=/usr/bin/true\n").unwrap();
        programs.insert("/usr/bin/true".into());
    }
    for program in programs {
        assert!(program.starts_with('/'), "{program} must be absolute");
        let path = root.path().join(program.trim_start_matches('/'));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    root
}

fn verify(units: &[&str], dependencies: &[&str]) {
    let paths: Vec<PathBuf> = units.iter().map(|u| repo(u)).collect();
    let root = verify_root(&paths, dependencies);
    let names: Vec<&str> = units
        .iter()
        .map(|u| u.rsplit('/').next().unwrap())
        .collect();
    let names: Vec<String> = names
        .iter()
        .map(|n| n.replace("@.service", "@x.service"))
        .collect();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", root.path().display()))
        .args(&names)
        .current_dir(root.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "verify {names:?}: {stderr}"
    );
}

#[test]
fn bosun_units_verify_clean() {
    verify(
        &[
            "systemd/bosun-agentd.service",
            "systemd/bosun-hubd.service",
            "systemd/bosun-helper.socket",
            "systemd/bosun-helper@.service",
            "systemd/bosun-helper-guest.socket",
            "systemd/bosun-helper-guest@.service",
            "systemd/bosun-helper-golden.socket",
            "systemd/bosun-helper-golden@.service",
            "systemd/bosun-update-gate.service",
            "systemd/bosun-update-gate.path",
        ],
        &[],
    );
}

#[test]
fn golden_units_verify_clean() {
    verify(
        &[
            "golden/bosun-ssh-hostkeys.service",
            "golden/bosun-bootstrap.service",
            "golden/bosun-bootstrap-restart.service",
            "golden/bosun-bootstrap.path",
        ],
        &["docker.service", "ssh.service"],
    );
}

#[test]
fn verify_catches_a_broken_unit() {
    let broken = tempfile::tempdir().unwrap();
    let unit = broken.path().join("bosun-broken.service");
    std::fs::write(&unit, "[Service]\nType=notify\nExecStart=relative/path\n").unwrap();
    let root = verify_root(&[], &[]);
    std::fs::copy(
        &unit,
        root.path().join("etc/systemd/system/bosun-broken.service"),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", root.path().display()))
        .arg("bosun-broken.service")
        .output()
        .unwrap();
    assert!(!out.status.success() || !out.stderr.is_empty());
}

fn exposure(unit: &str) -> f64 {
    exposure_of(&repo(unit))
}

fn exposure_of(unit: &Path) -> f64 {
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(unit)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| panic!("no exposure for {}: {out:?}", unit.display()));
    line.split(':')
        .nth(1)
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("cannot parse {line}"))
}

#[test]
fn agent_and_hub_exposure_is_at_most_two() {
    for unit in [
        "systemd/bosun-agentd.service",
        "systemd/bosun-hubd.service",
        "systemd/bosun-update-gate.service",
    ] {
        let score = exposure(unit);
        assert!(score <= 2.0, "{unit}: exposure {score}");
    }
    // The scorer itself distinguishes: the root helper is far above the threshold.
    assert!(exposure("systemd/bosun-helper@.service") > 2.0);
}

/// The packaged in-guest controller's unit (decision 0088): verified, sandboxed around the
/// root its apps' stop and start commands need, waiting for the bootstrap the agent pushes,
/// and keeping its state where a backup of the guest holds it.
#[test]
fn the_guest_controller_unit_verifies_and_is_sandboxed() {
    verify(&["systemd/bosun-guest.service"], &[]);
    let score = exposure("systemd/bosun-guest.service");
    assert!(score <= 2.2, "bosun-guest.service: exposure {score}");
    let text = read("systemd/bosun-guest.service");
    assert_eq!(
        settings(&text, "ConditionPathExists"),
        [bosun_proto::helper::GUEST_BOOTSTRAP_PATH]
    );
    assert_eq!(
        settings(&text, "ExecStart"),
        ["/usr/bin/bosun-guest --apps /etc/bosun-guest/apps.json run"]
    );
    for (key, value) in [
        ("StateDirectory", "bosun-guest"),
        // The restore check's directory (RESTORE_CHECK_PATH), writable under ProtectSystem.
        ("ConfigurationDirectory", "bosun"),
        ("ProtectSystem", "strict"),
        ("NoNewPrivileges", "yes"),
        ("CapabilityBoundingSet", "CAP_DAC_READ_SEARCH CAP_KILL"),
    ] {
        assert_eq!(settings(&text, key), [value], "{key}");
    }
    assert_eq!(
        Path::new(bosun_proto::helper::RESTORE_CHECK_PATH).parent(),
        Some(Path::new("/etc/bosun"))
    );
}

/// The sandbox shared by every helper unit (decisions 0068, 0071).
const COMMON_SANDBOX: [(&str, &str); 7] = [
    ("NoNewPrivileges", "yes"),
    ("AmbientCapabilities", ""),
    ("ProtectHostname", "yes"),
    ("RestrictRealtime", "yes"),
    ("SystemCallArchitectures", "native"),
    ("LockPersonality", "yes"),
    ("SystemCallErrorNumber", "EPERM"),
];

/// What each helper unit holds beyond [`COMMON_SANDBOX`], and the most `systemd-analyze
/// security` may score it (9.6 for the one unit there was, with no sandbox). Decision 0071
/// names the verb behind every setting, and behind every one left out.
fn sandbox(unit: HelperUnit) -> (Vec<(&'static str, &'static str)>, f64) {
    const FILTER: &str = "~@clock @cpu-emulation @debug @module @obsolete @raw-io @reboot @swap";
    match unit {
        HelperUnit::Host => (
            vec![
                ("PrivateNetwork", "yes"),
                ("PrivateMounts", "no"),
                ("IPAddressDeny", "any"),
                ("RestrictAddressFamilies", "AF_UNIX"),
                ("RestrictNamespaces", "yes"),
                ("ProtectClock", "yes"),
                ("DevicePolicy", "closed"),
                ("RestrictSUIDSGID", "yes"),
                ("MemoryDenyWriteExecute", "yes"),
                (
                    "SystemCallFilter",
                    "~@clock @cpu-emulation @debug @module @obsolete @raw-io @reboot @resources @swap",
                ),
            ],
            5.0,
        ),
        HelperUnit::Guest => (
            vec![
                (
                    "RestrictAddressFamilies",
                    "AF_UNIX AF_NETLINK AF_INET AF_INET6",
                ),
                ("IPAddressDeny", "any"),
                ("ProtectSystem", "yes"),
                ("ProtectHome", "yes"),
                ("PrivateTmp", "yes"),
                ("ProtectKernelModules", "yes"),
                ("ProtectKernelLogs", "yes"),
                ("RestrictSUIDSGID", "yes"),
                ("SystemCallFilter", FILTER),
            ],
            5.2,
        ),
        HelperUnit::Golden => (
            vec![
                (
                    "RestrictAddressFamilies",
                    "AF_UNIX AF_NETLINK AF_INET AF_INET6",
                ),
                ("SystemCallFilter", FILTER),
            ],
            7.0,
        ),
    }
}

fn service_of(unit: HelperUnit) -> String {
    format!("systemd/{}@.service", unit.unit_name())
}

#[test]
fn each_helper_unit_is_sandboxed_as_far_as_its_verbs_allow() {
    for unit in HelperUnit::ALL {
        let path = service_of(unit);
        let service = read(&path);
        let (own, max) = sandbox(unit);
        for (key, want) in COMMON_SANDBOX.iter().chain(&own) {
            assert_eq!(
                settings(&service, key),
                vec![want.to_string()],
                "{path}: {key}"
            );
        }
        // The bounding set is exactly the union of the unit's verbs' own sets, and the
        // capability the helper's drop to them needs: a verb given a new capability in
        // privs.rs needs it here too, and nothing else stays.
        let union: BTreeSet<String> = unit
            .verbs()
            .flat_map(bosun_helper::privs::declared)
            .map(|cap| cap.to_string())
            .chain(["CAP_SETPCAP".to_string()])
            .collect();
        let bounding: BTreeSet<String> = settings(&service, "CapabilityBoundingSet")
            .iter()
            .flat_map(|line| line.split_whitespace().map(str::to_owned))
            .collect();
        assert_eq!(bounding, union, "{path}: CapabilityBoundingSet=");

        let score = exposure(&path);
        assert!(score <= max, "{path}: exposure {score} > {max}");
        // Without its sandbox the same unit scores as the helper's one unit did before (9.6).
        let keys: Vec<&str> = COMMON_SANDBOX
            .iter()
            .chain(&own)
            .map(|(key, _)| *key)
            .chain(["CapabilityBoundingSet", "DeviceAllow"])
            .collect();
        let bare: String = service
            .lines()
            .filter(|l| !keys.iter().any(|k| l.starts_with(&format!("{k}="))))
            .map(|l| format!("{l}\n"))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let bare_path = dir.path().join(format!("{}@.service", unit.unit_name()));
        std::fs::write(&bare_path, bare).unwrap();
        let unsandboxed = exposure_of(&bare_path);
        assert!(
            unsandboxed >= 9.5,
            "{path} unsandboxed scores {unsandboxed}"
        );
    }
    // The unit every everyday verb runs under meets the mark; the split is what
    // lets it (decision 0071).
    assert!(exposure("systemd/bosun-helper@.service") <= 5.0);
}

/// A unit's byte size (`256M`, `1G`, `524288K`, plain bytes) in bytes.
fn unit_bytes(value: &str) -> u64 {
    let (number, scale) = match value.chars().last() {
        Some('K') => (&value[..value.len() - 1], 1 << 10),
        Some('M') => (&value[..value.len() - 1], 1 << 20),
        Some('G') => (&value[..value.len() - 1], 1 << 30),
        _ => (value, 1),
    };
    number.parse::<u64>().unwrap() * scale
}

#[test]
fn agent_unit_limits_its_resources_as_the_benchmarks_document() {
    let text = read("systemd/bosun-agentd.service");
    let one = |key: &str| {
        let values = settings(&text, key);
        assert_eq!(values.len(), 1, "{key}: {values:?}");
        values[0].clone()
    };
    let memory = one("MemoryMax");
    let tasks = one("TasksMax");
    let cpu = one("CPUQuota");
    // Room above the measured peak (≤ 40 MB under a forged-job flood) and idle (~11 MB).
    assert!(unit_bytes(&memory) >= 4 * (40 << 20), "MemoryMax={memory}");
    // The runtime's thread, the journal's and 16 blocking threads, twice over.
    assert!(
        tasks.parse::<u32>().unwrap() >= 2 * (2 + 16),
        "TasksMax={tasks}"
    );
    let quota: u32 = cpu.strip_suffix('%').unwrap().parse().unwrap();
    assert!((50..=400).contains(&quota), "CPUQuota={cpu}");
    // The benchmarks' table gives the reasons for these very values.
    let doc = read("docs/benchmarks.md");
    for (key, value) in [
        ("MemoryMax", &memory),
        ("TasksMax", &tasks),
        ("CPUQuota", &cpu),
    ] {
        assert!(
            doc.contains(&format!("| `{key}` | `{value}` |")),
            "docs/benchmarks.md does not explain {key}={value}"
        );
    }
}

#[test]
fn agent_unit_holds_no_privilege() {
    let text = read("systemd/bosun-agentd.service");
    for (key, want) in [
        ("Type", "notify"),
        ("User", "bosun"),
        ("NoNewPrivileges", "yes"),
        ("CapabilityBoundingSet", ""),
        ("ProtectSystem", "strict"),
        ("StateDirectory", "bosun"),
    ] {
        assert_eq!(settings(&text, key), vec![want.to_string()], "{key}");
    }
    assert_eq!(settings(&text, "WatchdogSec").len(), 1);
}

#[test]
fn the_agent_runs_from_its_slot_and_the_gate_watches_the_record() {
    use bosun_proto::update::{CURRENT_LINK, DEFAULT_SLOTS_ROOT, RECORD_FILE, SLOT_BINARY};
    let slots = DEFAULT_SLOTS_ROOT;
    let agent = read("systemd/bosun-agentd.service");
    let exec = settings(&agent, "ExecStart");
    assert_eq!(exec.len(), 1);
    assert!(
        exec[0].starts_with(&format!("{slots}/{CURRENT_LINK}/{SLOT_BINARY} ")),
        "{exec:?}"
    );
    let path = read("systemd/bosun-update-gate.path");
    assert_eq!(
        settings(&path, "PathChanged"),
        vec![format!("{slots}/{RECORD_FILE}")]
    );
    assert_eq!(
        settings(&path, "Unit"),
        vec!["bosun-update-gate.service".to_string()]
    );
    let gate = read("systemd/bosun-update-gate.service");
    assert_eq!(
        settings(&gate, "ExecStart"),
        vec!["/usr/libexec/bosun/bosun-update-gate".to_string()]
    );
    // The gate writes only the slots; the defaults of its config name the same places.
    assert_eq!(settings(&gate, "ReadWritePaths"), vec![slots.to_string()]);
    let defaults = bosun_helper::config::Config::default();
    assert_eq!(defaults.slots_root, Path::new(slots));
    assert_eq!(
        settings(&gate, "CapabilityBoundingSet"),
        vec!["CAP_DAC_READ_SEARCH".to_string()]
    );
}

#[test]
fn helper_sockets_and_services_match_the_helper() {
    for unit in HelperUnit::ALL {
        let name = unit.unit_name();
        let socket = read(&format!("systemd/{name}.socket"));
        let listen = format!("/run/bosun/{}", unit.socket_file());
        for (key, want) in [
            ("ListenStream", listen.as_str()),
            ("Accept", "yes"),
            ("SocketUser", "root"),
            ("SocketGroup", "bosun"),
            ("SocketMode", "0660"),
        ] {
            assert_eq!(
                settings(&socket, key),
                vec![want.to_string()],
                "{name}: {key}"
            );
        }
        let service = read(&service_of(unit));
        assert_eq!(
            settings(&service, "ExecStart"),
            vec![format!("{HELPER_PATH} {}", unit.socket_arg())],
            "{name}"
        );
        assert_eq!(
            settings(&service, "StandardInput"),
            vec!["socket".to_string()]
        );
    }
    // The agent's unit wants every socket the agent picks from, and starts after them.
    let agent = read("systemd/bosun-agentd.service");
    for key in ["Wants", "After"] {
        let listed: Vec<String> = settings(&agent, key)
            .iter()
            .flat_map(|l| l.split_whitespace().map(str::to_owned))
            .collect();
        for unit in HelperUnit::ALL {
            let socket = format!("{}.socket", unit.unit_name());
            assert!(
                listed.contains(&socket),
                "bosun-agentd.service {key}= lacks {socket}"
            );
        }
    }
    // mount_by_uuid's mounts must be visible to Proxmox: nothing that makes a private
    // namespace in the unit it runs under.
    let service = read(&service_of(HelperUnit::of(VerbName::MountByUuid)));
    for key in [
        "ProtectSystem",
        "PrivateTmp",
        "ProtectHome",
        "ReadOnlyPaths",
        "TemporaryFileSystem",
        "MountFlags",
        "PrivateDevices",
        "ProtectKernelTunables",
        "ProtectKernelModules",
        "ProtectKernelLogs",
        "ProtectControlGroups",
        "ProtectProc",
        "ProcSubset",
    ] {
        assert!(
            settings(&service, key).is_empty(),
            "{key} would hide the helper's mounts"
        );
    }
    // PrivateNetwork= brings a mount namespace unless PrivateMounts= says no.
    assert_eq!(settings(&service, "PrivateMounts"), vec!["no".to_string()]);
}

#[test]
fn sudoers_names_exactly_the_helper_path_and_verbs() {
    let text = read("sudoers/bosun");
    let out = Command::new("visudo")
        .args(["-c", "-f"])
        .arg(repo("sudoers/bosun"))
        .output()
        .unwrap();
    assert!(out.status.success(), "visudo: {out:?}");

    let joined = text.replace("\\\n", " ");
    let alias = joined
        .lines()
        .find_map(|l| l.trim().strip_prefix("Cmnd_Alias BOSUN_HELPER ="))
        .expect("Cmnd_Alias BOSUN_HELPER");
    let commands: BTreeSet<String> = alias
        .split(',')
        .map(|c| c.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let expected: BTreeSet<String> = VerbName::ALL
        .iter()
        .map(|v| format!("{HELPER_PATH} {v}"))
        .collect();
    assert_eq!(commands, expected);
    // Nothing else may be granted: one user alias, one rule, for that alias only.
    let rules: Vec<&str> = joined
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter(|l| {
            !l.starts_with("Cmnd_Alias")
                && !l.starts_with("User_Alias")
                && !l.starts_with("Defaults")
        })
        .collect();
    assert_eq!(
        rules,
        vec!["BOSUN_AGENT ALL = (root) NOPASSWD: BOSUN_HELPER"]
    );
    assert!(joined.contains("User_Alias BOSUN_AGENT = bosun\n"));
}

#[test]
fn visudo_rejects_a_broken_fragment() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken");
    std::fs::write(&path, "bosun ALL = (root NOPASSWD: /usr/bin/true\n").unwrap();
    let out = Command::new("visudo")
        .args(["-c", "-f"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn maintainer_scripts_parse_and_keep_the_debhelper_token() {
    for script in [
        "helper/debian/bosun-agent/postinst",
        "helper/debian/bosun-agent/postrm",
        "helper/debian/bosun-hub/postinst",
        "helper/debian/bosun-hub/postrm",
    ] {
        let out = Command::new("sh")
            .arg("-n")
            .arg(repo(script))
            .output()
            .unwrap();
        assert!(out.status.success(), "{script}: {out:?}");
        let text = read(script);
        assert!(text.starts_with("#!/bin/sh\n"), "{script}");
        assert_eq!(text.matches("#DEBHELPER#").count(), 1, "{script}");
        assert!(
            !text.contains("rm -rf /var/lib/bosun-helper/mnt"),
            "{script} must never remove mounted storage"
        );
    }
}
