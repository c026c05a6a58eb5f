//! The idle agent's code layout (decisions 0091 and 0116) holds for the agent `make packages`
//! builds and for `cargo build --profile agent -p bosun-agentd` alike, and `make test` says so
//! before a package is built: `agentd/hot-code.txt` names functions by their symbol names,
//! which hash in their crate's version, features, dependencies, profile and toolchain, so
//! - the agent built alone must resolve every crate of its build with the features the
//!   package's build of the five agent programs gives it, and
//! - the build the list was made from (`agentd/hot-code-build.txt`) must be today's.
//!
//! Either one wrong and the linker finds few of the list's names, skips them without a word,
//! and the agent at rest holds 12–14 MB of code instead of 8. `scripts/agent-hot-code --check`
//! is the check; these tests run it (cargo tree twice, a few seconds) and hold that it fails
//! on a list made from another build.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, Result, ensure};

use crate::packages_target::bash_array;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits inside the workspace")
        .to_owned()
}

/// `scripts/agent-hot-code` with `args`, the list's build read from `build_file` when given.
fn hot_code(args: &[&str], build_file: Option<&Path>) -> Result<Output> {
    let mut command = Command::new(workspace().join("scripts/agent-hot-code"));
    command.args(args);
    if let Some(file) = build_file {
        command.env("AGENT_HOT_CODE_BUILD", file);
    }
    command.output().context("running scripts/agent-hot-code")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_hot_code_list_was_made_from_todays_build_of_the_agent() -> Result<()> {
    let out = hot_code(&["--check"], None)?;
    ensure!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    Ok(())
}

/// The check describes the build `make packages` makes: the same five programs at once.
#[test]
fn the_check_builds_the_agent_programs_the_packages_do() -> Result<()> {
    let read = |path: &str| std::fs::read_to_string(workspace().join(path));
    let packaged = bash_array(&read("scripts/packages")?, "agent_bins")?;
    let described = bash_array(&read("scripts/agent-hot-code")?, "agent_bins")?;
    ensure!(
        packaged.len() >= 5 && packaged == described,
        "scripts/packages builds {packaged:?} with the agent profile, \
         scripts/agent-hot-code describes {described:?}"
    );
    Ok(())
}

/// What the check compares: the toolchain, the agent's profiles and every crate of the
/// agent's build with its features, `bosun-agentctl`'s in the shared crates included.
#[test]
fn the_description_names_what_a_symbol_name_hashes_in() -> Result<()> {
    let out = hot_code(&["--describe"], None)?;
    ensure!(out.status.success(), "{}", text(&out.stderr));
    let described = text(&out.stdout);
    let crates: Vec<&str> = described
        .lines()
        .filter_map(|l| l.strip_prefix("crate: "))
        .collect();
    ensure!(
        crates.len() > 200,
        "only {} crates described:\n{described}",
        crates.len()
    );
    for needed in [
        "release: ",
        "commit-hash: ",
        "target: x86_64-unknown-linux-gnu",
        "profile: [profile.agent]",
        "profile: opt-level = \"z\"",
        "profile: lto = \"fat\"",
    ] {
        ensure!(
            described.lines().any(|l| l.starts_with(needed)),
            "the description has no {needed:?} line:\n{described}"
        );
    }
    ensure!(
        crates.iter().any(|c| c.starts_with("bosun-agentd v")),
        "the agent itself is described"
    );
    // The features the package's build gives the agent's crates, from bosun-agentctl's
    // PDF renderer (decision 0116).
    ensure!(
        crates
            .iter()
            .any(|c| c.starts_with("smallvec v") && c.ends_with("union,write")),
        "smallvec with agentctl's features: {crates:?}"
    );
    ensure!(
        !crates
            .iter()
            .any(|c| c.contains(&workspace().display().to_string())),
        "a workspace crate's path is not part of its symbols' names: {crates:?}"
    );
    Ok(())
}

/// A list made from another build (here: another toolchain, one crate's other version)
/// fails the check, which names the difference and how to make the list again.
#[test]
fn a_list_made_from_another_build_fails_the_check() -> Result<()> {
    let today = text(&hot_code(&["--describe"], None)?.stdout);
    let other = today
        .lines()
        .map(|l| {
            if l.starts_with("release: ") {
                "release: 1.94.0".to_owned()
            } else if let Some(rest) = l.strip_prefix("crate: serde_json v") {
                format!("crate: serde_json v0{rest}")
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    ensure!(other != today, "nothing changed");
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("hot-code-build.txt");
    std::fs::write(&file, format!("{other}\n"))?;
    let out = hot_code(&["--check"], Some(&file))?;
    let said = text(&out.stderr);
    ensure!(!out.status.success(), "the check passed: {said}");
    for needed in [
        "release: 1.94.0",
        "crate: serde_json v0",
        "run scripts/agent-hot-code",
    ] {
        ensure!(
            said.contains(needed),
            "the check does not say {needed:?}: {said}"
        );
    }

    // Today's description, written back, passes: the check compares, nothing else.
    std::fs::write(&file, &today)?;
    let out = hot_code(&["--check"], Some(&file))?;
    ensure!(out.status.success(), "{}", text(&out.stderr));
    Ok(())
}
