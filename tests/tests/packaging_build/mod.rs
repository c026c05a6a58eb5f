//! Building the packages from the workspace's dev build (the binaries `make test` built
//! before its suites ran, stripped by `cargo deb --strip`), `scripts/cli-assets` and
//! `cargo deb --no-build`, lintian over them, and the files the packages carry for it: the
//! Debian changelogs (their newest entry is the workspace version) and the command-line
//! documentation `scripts/cli-assets` writes from the binaries.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};

use super::{check as check_command, run, stderr, workspace};

pub mod guest;

/// Tags lintian may report that the packages mean, each with why. Everything else, error or
/// warning, fails the test.
const INTENDED: &[(&str, &str)] = &[];

/// Runs lintian on `deb` and fails on any error or warning not in [`INTENDED`].
pub fn lintian(deb: &Path) -> Result<()> {
    let out = Command::new("lintian")
        .args([
            "--no-cfg",
            "--display-level",
            ">=warning",
            "--tag-display-limit",
            "0",
        ])
        .arg(deb)
        .output();
    let out = match out {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("lintian is not installed; scripts/install-deps installs it")
        }
        Err(e) => return Err(e).context("running lintian"),
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let findings: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("E: ") || l.starts_with("W: "))
        .filter(|l| {
            !INTENDED
                .iter()
                .any(|(tag, _)| l.contains(&format!(" {tag}")))
        })
        .collect();
    ensure!(
        findings.is_empty(),
        "lintian {}: {}\n{text}",
        deb.display(),
        findings.join("\n")
    );
    Ok(())
}

/// The newest entry of a Debian changelog: `(package, version)`.
pub fn newest_entry(changelog: &str) -> Result<(String, String)> {
    let first = changelog.lines().next().context("the changelog is empty")?;
    let (package, rest) = first
        .split_once(" (")
        .context("no `(version)` on the first line")?;
    let (version, _) = rest.split_once(')').context("no `)` on the first line")?;
    Ok((package.to_owned(), version.to_owned()))
}

/// The files `scripts/cli-assets` writes for `binaries` under `dir` (`<target>/<profile>/cli`),
/// and the daemons' configuration file pages (section 5).
pub fn check_cli_assets(dir: &Path, binaries: &[&str]) -> Result<()> {
    for (binary, page) in [("bosun-agentd", "agent.toml"), ("bosun-hubd", "hub.toml")] {
        if binaries.contains(&binary) {
            let path = dir.join(format!("man/{page}.5.gz"));
            let len = std::fs::metadata(&path)
                .with_context(|| format!("{} was written", path.display()))?
                .len();
            ensure!(len > 0, "{} is empty", path.display());
        }
    }
    for name in binaries {
        for file in [
            format!("man/{name}.1.gz"),
            format!("bash/{name}"),
            format!("zsh/_{name}"),
            format!("fish/{name}.fish"),
        ] {
            let path = dir.join(&file);
            let len = std::fs::metadata(&path)
                .with_context(|| format!("{} was written", path.display()))?
                .len();
            ensure!(len > 0, "{} is empty", path.display());
        }
    }
    Ok(())
}

/// Where to build: the test's own target directory under nextest (it holds no cargo
/// lock while tests run); a directory of its own under `cargo test`, which does.
fn target_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        // <target>/<profile>/deps/<test binary>
        None => exe
            .ancestors()
            .nth(3)
            .context("the test binary sits in <target>/<profile>/deps")?
            .to_owned(),
    };
    if std::env::var_os("NEXTEST").is_some() {
        Ok(target)
    } else {
        Ok(target.join("packaging"))
    }
}

/// The four packages `cargo deb` made.
pub struct Packages {
    /// `bosun-agent`.
    pub agent: PathBuf,
    /// `bosun-hub`.
    pub hub: PathBuf,
    /// `bosun-ctl`.
    pub ctl: PathBuf,
    /// `bosun-guest`.
    pub guest: PathBuf,
}

/// The cargo profile the packages are made from: the dev build every suite runs, so the
/// packaging tests compile nothing of their own (a build of another profile was a second
/// whole compilation of the workspace, minutes of CI's two cores). `make packages` makes
/// the production packages from the release and agent profiles.
const PROFILE: &str = "dev";

/// `scripts/cli-assets`' arguments: the profile, then every program a package documents.
const CLI_ASSETS_ARGS: [&str; 6] = [
    PROFILE,
    "bosun-agentd",
    "bosun-agentctl",
    "bosun-hubd",
    "bosunctl",
    "bosun-guest",
];

pub fn build_packages(out: &Path) -> Result<Packages> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target = target_dir()?;
    let started = Instant::now();
    let mut build = Command::new(&cargo);
    build
        .current_dir(workspace())
        .env("CARGO_TARGET_DIR", &target)
        // What `make nextest` built before the suites: the same command, so nothing is
        // compiled again.
        .args(["build", "--workspace", "--locked", "--bins"]);
    // The variables cargo gave this test binary: build scripts that watch them (ring's watch
    // CARGO_MANIFEST_DIR and CARGO_PKG_NAME) would run again and rebuild what the suite runs.
    for (name, _) in std::env::vars_os() {
        let name_text = name.to_string_lossy();
        if [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
            "CARGO_CFG_",
        ]
        .iter()
        .any(|prefix| name_text.starts_with(prefix))
            || name_text == "OUT_DIR"
        {
            build.env_remove(&name);
        }
    }
    check_command(&mut build)?;
    // The man pages and completions the packages install, from the binaries just built.
    check_command(
        Command::new(workspace().join("scripts/cli-assets"))
            .env("CARGO_TARGET_DIR", &target)
            .args(CLI_ASSETS_ARGS),
    )?;
    check_cli_assets(&target.join("debug/cli"), &CLI_ASSETS_ARGS[1..])?;
    let built = started.elapsed();
    let mut debs = Vec::new();
    for crate_name in ["bosun-agentd", "bosun-hubd", "bosunctl", "bosun-guest"] {
        let mut deb = Command::new(&cargo);
        deb.current_dir(workspace())
            .env("CARGO_TARGET_DIR", &target)
            .args([
                "deb",
                "--no-build",
                "--locked",
                "--fast",
                // The dev build keeps its symbols; a package's programs are stripped.
                "--strip",
                "--profile",
                PROFILE,
            ])
            .args(["-p", crate_name, "--output"])
            .arg(out);
        let made = run(&mut deb)?;
        if !made.status.success() {
            let text = stderr(&made);
            if text.contains("no such command") {
                bail!("cargo-deb is not installed; scripts/install-deps installs it");
            }
            bail!("cargo deb -p {crate_name} failed: {text}");
        }
        let path = String::from_utf8_lossy(&made.stdout).trim().to_owned();
        ensure!(path.ends_with(".deb"), "cargo deb printed {path:?}");
        debs.push(PathBuf::from(path));
    }
    eprintln!(
        "packaging: build {:.1}s, build + cargo deb {:.1}s",
        built.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    let [agent, hub, ctl, guest] =
        <[PathBuf; 4]>::try_from(debs).expect("four crates, four packages");
    Ok(Packages {
        agent,
        hub,
        ctl,
        guest,
    })
}
