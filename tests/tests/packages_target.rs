//! `make packages` (scripts/packages) against what the operator guide promises, without
//! building anything: every workspace binary the guide names is shipped by a package whose
//! crate has `[package.metadata.deb]`, and the script builds that binary and packs that
//! package. The package descriptions say what an operator must know before installing.
//! (`make packages` itself is too slow for `make test`; it runs lintian --pedantic.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, ensure};
use serde_json::Value;

/// Binaries the guide may name that no package ships, each with why.
const NOT_PACKAGED: &[(&str, &str)] = &[
    (
        "bosun-demo",
        "`make demo` runs it from the source tree against simulated nodes",
    ),
    (
        "bosun-pvesim",
        "the simulated Proxmox node of the demo and the tests",
    ),
    (
        "hub-bench",
        "the hub's load generator, run from the source tree",
    ),
    (
        "bosun-hubd-next",
        "a test double of the hub's next release for the upgrade rehearsal",
    ),
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits inside the workspace")
        .to_owned()
}

/// A crate of the workspace: its binaries and its deb metadata, if any.
struct Crate {
    bins: Vec<String>,
    deb: Option<Value>,
}

fn crates() -> Result<BTreeMap<String, Crate>> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(workspace())
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .output()
        .context("running cargo metadata")?;
    ensure!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout)?;
    let mut crates = BTreeMap::new();
    for package in meta["packages"].as_array().context("packages")? {
        let name = package["name"].as_str().context("name")?.to_owned();
        let bins = package["targets"]
            .as_array()
            .context("targets")?
            .iter()
            .filter(|t| {
                t["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "bin"))
            })
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect();
        let deb = package["metadata"]
            .get("deb")
            .cloned()
            .filter(|d| !d.is_null());
        crates.insert(name, Crate { bins, deb });
    }
    Ok(crates)
}

/// Whether `text` names `word` as a whole program name (not as part of a longer one).
fn names(text: &str, word: &str) -> bool {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(is_name) && !after.is_some_and(|c| is_name(c) || c == '.')
    })
}

/// The words of a bash array or associative array `name=( … )` in `script`.
pub(crate) fn bash_array(script: &str, name: &str) -> Result<Vec<String>> {
    let start = script
        .find(&format!("{name}=("))
        .with_context(|| format!("scripts/packages has no {name}=("))?;
    let body = &script[start + name.len() + 2..];
    let body = &body[..body.find(')').context("unclosed array")?];
    Ok(body
        .split_whitespace()
        .filter(|w| !w.starts_with('#'))
        .map(|w| {
            w.strip_prefix('[')
                .and_then(|w| w.split_once("]="))
                .map_or(w, |(key, _)| key)
                .to_owned()
        })
        .collect())
}

/// The source paths of a package's assets.
fn asset_sources(deb: &Value) -> Vec<String> {
    deb["assets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.get(0).and_then(Value::as_str).map(str::to_owned))
        .collect()
}

#[test]
fn every_binary_the_guide_names_is_packed_by_make_packages() -> Result<()> {
    let root = workspace();
    let guide = std::fs::read_to_string(root.join("docs/operator-guide.md"))?;
    let script = std::fs::read_to_string(root.join("scripts/packages"))?;
    let makefile = std::fs::read_to_string(root.join("Makefile"))?;
    ensure!(
        makefile.contains("\npackages:") && makefile.contains("scripts/packages"),
        "the Makefile's packages target runs scripts/packages"
    );
    let packed: BTreeSet<String> = bash_array(&script, "package_profile")?
        .into_iter()
        .collect();
    let built: BTreeSet<String> = bash_array(&script, "agent_bins")?
        .into_iter()
        .chain(bash_array(&script, "release_bins")?)
        .collect();
    // Both lists are built, each with its profile: a list named and never built would pack
    // whatever an earlier build left in target/.
    for (profile, list) in [("agent", "agent_args"), ("release", "release_args")] {
        let build =
            format!("\"$cargo\" build --locked --profile {profile} --bins \"${{{list}[@]}}\"");
        ensure!(
            script.lines().any(|l| l.trim() == build),
            "scripts/packages has no line `{build}`"
        );
    }
    let crates = crates()?;

    for (name, krate) in &crates {
        ensure!(
            krate.deb.is_none() || packed.contains(name),
            "{name} has [package.metadata.deb] but scripts/packages does not pack it"
        );
    }
    let mut checked = 0;
    for (crate_name, krate) in &crates {
        for bin in krate.bins.iter().filter(|b| names(&guide, b)) {
            if NOT_PACKAGED.iter().any(|(n, _)| n == bin) {
                continue;
            }
            let shipping: Vec<&String> = crates
                .iter()
                .filter(|(_, c)| {
                    c.deb.as_ref().is_some_and(|deb| {
                        asset_sources(deb)
                            .iter()
                            .any(|s| s == &format!("target/release/{bin}"))
                    })
                })
                .map(|(n, _)| n)
                .collect();
            ensure!(
                !shipping.is_empty(),
                "the guide names {bin} (crate {crate_name}), but no crate's \
                 [package.metadata.deb] ships target/release/{bin}"
            );
            for package_crate in shipping {
                ensure!(
                    packed.contains(package_crate),
                    "{bin} is in {package_crate}'s package, which scripts/packages does not pack"
                );
            }
            ensure!(
                built.contains(crate_name),
                "scripts/packages does not build {crate_name}, whose {bin} a package ships"
            );
            checked += 1;
        }
    }
    // The guide names the agent, agentctl, hub, bosunctl, the helper, the update gate, the
    // support shell and the in-guest controller.
    ensure!(
        checked >= 8,
        "only {checked} packaged binaries named in the guide"
    );
    Ok(())
}

#[test]
fn descriptions_say_what_the_operator_must_know_before_installing() -> Result<()> {
    let crates = crates()?;
    let deb = |name: &str| -> Result<&Value> {
        crates
            .get(name)
            .and_then(|c| c.deb.as_ref())
            .with_context(|| format!("{name} has no deb metadata"))
    };
    let text = |v: &Value| v["extended-description"].as_str().unwrap_or("").to_owned();

    // Where bosunctl comes from: the hub package and the guide both name bosun-ctl.
    let ctl = deb("bosunctl")?["name"]
        .as_str()
        .context("name")?
        .to_owned();
    ensure!(
        text(deb("bosun-hubd")?).contains(&ctl),
        "the hub package's description names {ctl}, the package bosunctl is in"
    );
    let guide = std::fs::read_to_string(workspace().join("docs/operator-guide.md"))?;
    ensure!(
        guide.contains(&format!("`{ctl}_*.deb` (`bosunctl`")),
        "the guide's list of packages names {ctl} as bosunctl's"
    );

    // The agent package makes a login account and opens sshd to it: the description shown
    // before install says so, naming both.
    let agent = deb("bosun-agentd")?;
    let description = text(agent).replace('\n', " ");
    let drop_ins: Vec<String> = agent["assets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.get(1).and_then(Value::as_str))
        .filter(|dest| dest.starts_with("etc/ssh/"))
        .map(|dest| format!("/{dest}"))
        .collect();
    ensure!(
        !drop_ins.is_empty(),
        "the agent package ships an sshd drop-in"
    );
    for needed in drop_ins
        .iter()
        .map(String::as_str)
        .chain(["bosun-breakglass"])
    {
        ensure!(
            description.contains(needed),
            "the agent package's description names {needed}: {description}"
        );
    }
    Ok(())
}

/// The `unit-name`s of a package's `systemd-units` (one table or an array of them).
fn unit_names(deb: &Value) -> Vec<String> {
    let units = &deb["systemd-units"];
    let list: Vec<&Value> = match units.as_array() {
        Some(array) => array.iter().collect(),
        None => vec![units],
    };
    list.iter()
        .filter_map(|u| u["unit-name"].as_str().map(str::to_owned))
        .collect()
}

/// Every unit file in `systemd/` ships in a package: cargo-deb collects `<unit-name>.<kind>`
/// of each `systemd-units` entry, and a template (`name@.service`) must be an asset. A unit
/// left out (the helper's guest and golden units of decision 0071, say) would leave a socket
/// with no service behind it, or the agent with no socket for a verb.
#[test]
fn every_unit_file_ships_in_a_package() -> Result<()> {
    let crates = crates()?;
    let (mut collected, mut assets) = (BTreeSet::new(), BTreeSet::new());
    for deb in crates.values().filter_map(|c| c.deb.as_ref()) {
        collected.extend(unit_names(deb));
        assets.extend(asset_sources(deb));
    }
    let mut checked = 0;
    for entry in std::fs::read_dir(workspace().join("systemd"))? {
        let file = entry?.file_name().to_string_lossy().into_owned();
        let (stem, kind) = file.rsplit_once('.').context("a unit file has a kind")?;
        let shipped = if stem.ends_with('@') {
            assets.contains(&format!("../systemd/{file}"))
        } else {
            ["service", "socket", "path", "timer"].contains(&kind) && collected.contains(stem)
        };
        ensure!(shipped, "systemd/{file} is in no package");
        checked += 1;
    }
    ensure!(checked >= 10, "only {checked} unit files found");
    Ok(())
}

#[test]
fn a_program_name_is_found_whole() {
    assert!(names("run `bosun-hubd backup`", "bosun-hubd"));
    assert!(!names("the bosun-hubd-next binary", "bosun-hubd"));
    assert!(!names("bosun-hubd.service", "bosun-hubd"));
    assert!(names(
        "bosun-helper@.service runs bosun-helper.",
        "bosun-helper"
    ));
}
