//! The operator guide against the hub binary: no command `bosun-hubd --help` lists is said
//! to be missing, and the guide's "what to back up" section (§12) backs the hub up with the
//! command the hub has.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

/// The subcommands `bosun-hubd --help` lists.
fn hub_commands() -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_bosun-hubd"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8(out.stdout).unwrap();
    let listed: Vec<String> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|name| name != "help")
        .collect();
    assert!(listed.iter().any(|c| c == "backup"), "{help}");
    listed
}

#[test]
fn the_guide_denies_no_command_the_hub_has() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operator-guide.md");
    let text = std::fs::read_to_string(path).unwrap();
    let guide = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for command in hub_commands() {
        for denial in [
            format!("no `bosun-hubd {command}`"),
            format!("no bosun-hubd {command}"),
        ] {
            assert!(
                !guide.contains(&denial),
                "the guide says there is {denial}, and `bosun-hubd --help` lists it"
            );
        }
    }
    let start = guide.find("## 12.").unwrap();
    let end = guide[start..]
        .find("## 13.")
        .map_or(guide.len(), |i| start + i);
    let section = &guide[start..end];
    assert!(
        section.contains("`bosun-hubd backup --out FILE`"),
        "§12 backs the hub up without its backup command:\n{section}"
    );
}
