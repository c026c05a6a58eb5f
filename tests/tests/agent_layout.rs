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

/// The hash at the end of a legacy-mangled name (`17h`, 16 hex digits, `E`), and the name
/// without it.
fn without_hash(name: &str) -> Option<&str> {
    let bare = name.strip_suffix('E')?;
    let (bare, hash) = bare.split_at_checked(bare.len().checked_sub(19)?)?;
    let digits = hash.strip_prefix("17h")?;
    digits
        .bytes()
        .all(|b| b.is_ascii_hexdigit())
        .then_some(bare)
}

/// `scripts/agent-hot-code --resolve` on `binary` with the list `names`: what it wrote to its
/// output (when it succeeded), and what it said.
fn resolve(binary: &Path, names: &[String]) -> Result<(Option<String>, String)> {
    let dir = tempfile::tempdir()?;
    let (listed, resolved) = (dir.path().join("list.txt"), dir.path().join("out.txt"));
    std::fs::write(&listed, names.join("\n") + "\n")?;
    let out = Command::new(workspace().join("scripts/agent-hot-code"))
        .arg("--resolve")
        .arg(binary)
        .arg(&resolved)
        .env("AGENT_HOT_CODE_LIST", &listed)
        .output()?;
    let said = text(&out.stdout) + &text(&out.stderr);
    let written = match out.status.success() {
        true => Some(std::fs::read_to_string(&resolved)?),
        false => None,
    };
    Ok((written, said))
}

/// `--resolve` (decision 0137) keeps a name the binary has, finds a moved function by its name
/// without the hash, keeps every instance of a generic function whose instance moved (they
/// share that name), drops a name the binary has no function of, and fails when more than a
/// tenth of the names are dropped. Run on this suite's own binary.
#[test]
fn the_list_is_resolved_against_the_agent_as_linked() -> Result<()> {
    let binary = std::env::current_exe()?;
    let out = Command::new("nm")
        .args(["--defined-only"])
        .arg(&binary)
        .output()?;
    ensure!(out.status.success(), "nm: {}", text(&out.stderr));
    let symbols = text(&out.stdout);
    let mut by_bare: std::collections::HashMap<&str, Vec<&str>> = Default::default();
    for name in symbols.lines().filter_map(|l| l.split_whitespace().nth(2)) {
        if let Some(bare) = without_hash(name) {
            by_bare.entry(bare).or_default().push(name);
        }
    }
    let unique: Vec<&str> = by_bare
        .values()
        .filter(|names| names.len() == 1)
        .map(|n| n[0])
        .take(9)
        .collect();
    let [kept @ .., moved] = &unique[..] else {
        anyhow::bail!("nine functions of a name of their own: {unique:?}");
    };
    let (generic, instances) = by_bare
        .iter()
        .find(|(_, names)| names.len() > 1)
        .context("a generic function's instances")?;
    let other_hash = |bare: &str| {
        let name = format!("{bare}17h0123456789abcdefE");
        assert!(!symbols.contains(&name), "a hash of this binary: {name}");
        name
    };
    let gone = |n: u32| {
        format!(
            "_ZN5bosun7removed{}gone{n}17hfedcba9876543210E",
            4 + n.to_string().len()
        )
    };
    // Eight names the binary has, one of them twice; one moved; one generic; one lost.
    let mut list: Vec<String> = kept.iter().map(|name| (*name).to_owned()).collect();
    list.extend([
        other_hash(without_hash(moved).context("hashed")?),
        other_hash(generic),
        gone(1),
        kept[0].to_owned(),
    ]);

    let (written, said) = resolve(&binary, &list)?;
    let written = written.with_context(|| said.clone())?;
    let lines: Vec<&str> = written.lines().collect();
    let mut rest = lines.get(kept.len() + 1..).unwrap_or_default().to_vec();
    let mut instances = instances.clone();
    rest.sort_unstable();
    instances.sort_unstable();
    ensure!(
        lines.get(..kept.len()) == Some(kept)
            && lines.get(kept.len()) == Some(moved)
            && rest == instances,
        "resolved to:\n{written}"
    );
    ensure!(
        said.contains(&format!(
            "of the list's 12 names: 9 the agent's, 1 found without the hash, \
             1 a generic function's (all its instances kept), 1 lost (8 %); {} functions",
            instances.len() + 9
        )),
        "{said}"
    );

    // One more lost: two of thirteen is more than a tenth.
    list.push(gone(2));
    let (written, said) = resolve(&binary, &list)?;
    ensure!(
        written.is_none(),
        "resolved with two of thirteen lost: {said}"
    );
    ensure!(
        said.contains("2 lost (15 %)") && said.contains("run scripts/agent-hot-code"),
        "{said}"
    );
    Ok(())
}
