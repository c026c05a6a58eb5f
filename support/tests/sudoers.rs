//! `sudoers/bosun-breakglass` grants exactly the command lines bosun-support runs, and
//! visudo accepts it.

use std::path::PathBuf;
use std::process::Command;

fn fragment() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sudoers/bosun-breakglass")
}

/// The entries of the `BOSUN_SUPPORT` alias, one per command line.
fn granted(text: &str) -> Vec<String> {
    let joined = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("\\\n", " ");
    let alias = joined
        .lines()
        .find_map(|l| l.trim().strip_prefix("Cmnd_Alias BOSUN_SUPPORT ="))
        .expect("the fragment defines BOSUN_SUPPORT");
    alias
        .split(", ")
        .map(|e| e.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

#[test]
fn the_fragment_grants_exactly_the_shells_command_lines() {
    let text = std::fs::read_to_string(fragment()).expect("read the fragment");
    assert_eq!(granted(&text), bosun_support::sudoers_commands());
}

#[test]
fn the_fragment_grants_no_shell_pager_or_environment() {
    let text = std::fs::read_to_string(fragment()).expect("read the fragment");
    assert!(!text.contains("SETENV"));
    assert!(!text.contains("ALL = (root) NOPASSWD: ALL"));
    assert!(text.contains("env_reset"));
    for entry in granted(&text) {
        assert!(
            !entry.contains("pct enter") && !entry.contains("pct exec"),
            "{entry}"
        );
        assert!(
            !entry.contains('*') || entry.contains("[*]"),
            "no wildcard: {entry}"
        );
    }
}

#[test]
fn visudo_accepts_the_fragment() {
    let out = Command::new("visudo")
        .arg("-cf")
        .arg(fragment())
        .output()
        .expect("visudo runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
