//! What the packaged units make systemd do, checked against the unit files and the real
//! binaries: which exit codes end the restart loop, and what stopping the agent stops.
//! (`helper/tests/units.rs` runs `systemd-analyze verify` and `security` over the same
//! files.)
//!
//! The binaries come from the same target directory as this test (`cargo nextest run
//! --workspace` and `make test` build them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits inside the workspace")
        .to_owned()
}

/// `target/<profile>/<name>`, where cargo puts the workspace's binaries.
fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test runs from target/<profile>/deps")
        .join(name);
    assert!(
        path.is_file(),
        "{} is missing: build the workspace's binaries first (`cargo build --workspace --bins`)",
        path.display()
    );
    path
}

/// Every `systemd/*` unit: file name → its text.
fn units() -> BTreeMap<String, String> {
    let mut units = BTreeMap::new();
    for entry in std::fs::read_dir(workspace().join("systemd")).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        units.insert(name, std::fs::read_to_string(entry.path()).unwrap());
    }
    assert!(units.contains_key("bosun-agentd.service"), "{units:?}");
    units
}

/// The space-separated values of every `key=` line (continuation lines joined).
fn values(text: &str, key: &str) -> Vec<String> {
    text.replace("\\\n", " ")
        .lines()
        .filter_map(|l| l.trim().strip_prefix(key)?.strip_prefix('='))
        .flat_map(|v| v.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .collect()
}

/// The units systemd stops when `stopped` is stopped: those that are `PartOf=`,
/// `BindsTo=` or `Requires=` it or name it in `StopPropagatedFrom=`, those it names in
/// `PropagatesStopTo=`, and so on transitively.
fn stopped_with(units: &BTreeMap<String, String>, stopped: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::from([stopped.to_owned()]);
    loop {
        let mut next = found.clone();
        for (name, text) in units {
            for key in ["PartOf", "BindsTo", "Requires", "StopPropagatedFrom"] {
                if values(text, key).iter().any(|v| found.contains(v)) {
                    next.insert(name.clone());
                }
            }
            if found.contains(name) {
                next.extend(values(text, "PropagatesStopTo"));
            }
        }
        if next == found {
            return found;
        }
        found = next;
    }
}

#[test]
fn stopping_the_agent_leaves_the_helper_socket_listening() {
    let units = units();
    // A certificate rotation runs with the agent stopped and needs the socket
    // (helper/debian/bosun-agent.README, "Rotating the local API certificate").
    let stopped = stopped_with(&units, "bosun-agentd.service");
    assert!(
        !stopped.contains("bosun-helper.socket"),
        "stopping bosun-agentd.service stops {stopped:?}"
    );
    // The closure does see a PartOf= when one is there.
    let mut with_part_of = units.clone();
    with_part_of.insert(
        "bosun-helper.socket".to_owned(),
        "[Unit]\nPartOf=bosun-agentd.service\n".to_owned(),
    );
    assert!(stopped_with(&with_part_of, "bosun-agentd.service").contains("bosun-helper.socket"));
    // And the agent still pulls the socket in when it starts.
    let agent = &units["bosun-agentd.service"];
    assert!(values(agent, "Wants").contains(&"bosun-helper.socket".to_owned()));
    assert!(values(agent, "After").contains(&"bosun-helper.socket".to_owned()));
}

#[test]
fn a_config_the_agent_cannot_load_ends_the_restart_loop() {
    let units = units();
    let agent = &units["bosun-agentd.service"];
    assert_eq!(values(agent, "Restart"), ["on-failure"]);
    let prevented: BTreeSet<String> = values(agent, "RestartPreventExitStatus")
        .into_iter()
        .collect();

    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("agent.toml");
    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, "state_dir = [not toml\n").unwrap();
    for config in [&missing, &broken] {
        let mut child = Command::new(binary("bosun-agentd"))
            .arg("--config")
            .arg(config)
            .env_remove("NOTIFY_SOCKET")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "bosun-agentd with {} did not exit in 20 s",
                    config.display()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let code = status
            .code()
            .expect("the agent exits, not killed by a signal");
        assert_ne!(code, 0, "{}", config.display());
        assert!(
            prevented.contains(&code.to_string()),
            "bosun-agentd exits {code} for {}, but the unit restarts on every exit \
             status but {prevented:?}: systemd would restart it every RestartSec forever",
            config.display()
        );
    }
}
