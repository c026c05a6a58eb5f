//! The `bosun-guest` package once installed, and the controller image recipe it ships
//! (`scripts/controller-image`, decision 0088): the archive a golden recipe signs, made from
//! the installed package as on a node and from the package file as `make controller-image`
//! does, byte for byte the same, and a root file system that runs bosun-guest on its own.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, ensure};
use serde_json::Value;

use super::super::{check, run, stderr};

/// The recipe as the package installs it.
pub const RECIPE: &str = "/usr/share/bosun-guest/controller-image";
/// What the package leaves at run time that purge must take away (the test writes them as
/// the controller would).
pub const RUNTIME_FILES: [&str; 2] = [
    "/var/lib/bosun-guest/quiesce.marker",
    "/etc/bosun/restore-check",
];

fn mode_of(path: &str) -> Result<(u32, u32, u32)> {
    let meta = std::fs::symlink_metadata(path).with_context(|| format!("{path} is installed"))?;
    Ok((meta.uid(), meta.gid(), meta.mode() & 0o7777))
}

/// What the installed package holds: the program, its unit (installed, not enabled), the
/// apps conffile, the man page and completions, the recipe.
pub fn installed_state() -> Result<()> {
    for (path, mode) in [
        ("/usr/bin/bosun-guest", 0o755),
        (RECIPE, 0o755),
        ("/usr/lib/systemd/system/bosun-guest.service", 0o644),
        ("/etc/bosun-guest/apps.json", 0o644),
        ("/usr/share/doc/bosun-guest/examples/apps.json", 0o644),
        ("/usr/share/man/man1/bosun-guest.1.gz", 0o644),
        ("/usr/share/man/man1/bosun-guest-watch.1.gz", 0o644),
        ("/usr/share/man/man1/bosun-guest-run.1.gz", 0o644),
        ("/usr/share/man/man1/bosun-guest-status.1.gz", 0o644),
        ("/usr/share/bash-completion/completions/bosun-guest", 0o644),
        ("/usr/share/zsh/vendor-completions/_bosun-guest", 0o644),
        (
            "/usr/share/fish/vendor_completions.d/bosun-guest.fish",
            0o644,
        ),
    ] {
        ensure!(
            mode_of(path)? == (0, 0, mode),
            "{path}: {:?}",
            mode_of(path)?
        );
    }
    ensure!(
        !Path::new("/etc/systemd/system/multi-user.target.wants/bosun-guest.service").exists(),
        "the controller's unit waits for the guest's owner to enable it"
    );
    let conffiles =
        check(Command::new("dpkg-query").args(["-W", "-f=${Conffiles}", "bosun-guest"]))?;
    ensure!(
        String::from_utf8_lossy(&conffiles.stdout).contains("/etc/bosun-guest/apps.json"),
        "apps.json is a conffile"
    );
    // The packaged list parses: no apps, so the unit quiesces nothing until it is edited.
    let apps: Value = serde_json::from_slice(&std::fs::read("/etc/bosun-guest/apps.json")?)?;
    ensure!(
        apps == serde_json::json!([]),
        "the packaged apps list: {apps}"
    );
    let out = check(Command::new("/usr/bin/bosun-guest").arg("--version"))?;
    let version = String::from_utf8_lossy(&out.stdout);
    ensure!(
        version.contains(env!("CARGO_PKG_VERSION")),
        "bosun-guest --version printed {version}"
    );
    Ok(())
}

/// Runs the recipe with `args`; the digest it prints last.
fn recipe(program: &Path, args: &[&std::ffi::OsStr]) -> Result<String> {
    let out = check(Command::new(program).args(args))?;
    let digest = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    ensure!(
        digest.len() == 71 && digest.starts_with("sha256:"),
        "the recipe printed {digest:?}"
    );
    Ok(digest)
}

fn sha256_of(path: &Path) -> Result<String> {
    let out = check(Command::new("sha256sum").arg(path))?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(format!(
        "sha256:{}",
        text.split_whitespace()
            .next()
            .context("sha256sum's output")?
    ))
}

/// The recipe from the installed package (as on a node) and from the package file give the
/// same archive, the digest printed is its SHA-256, the image is what the golden image's
/// unit runs, and its file system runs bosun-guest without anything of this machine's.
pub fn controller_image_from_the_package(deb: &Path, work: &Path) -> Result<()> {
    let tag = "bosun/controller:0.1-test";
    let installed = work.join("installed.tar");
    let from_deb = work.join("from-deb.tar");
    let printed = recipe(
        Path::new(RECIPE),
        &[
            "--tag".as_ref(),
            tag.as_ref(),
            "--output".as_ref(),
            installed.as_os_str(),
        ],
    )?;
    ensure!(
        printed == sha256_of(&installed)?,
        "the digest printed is the archive's"
    );
    let again = recipe(
        &super::workspace().join("scripts/controller-image"),
        &[
            "--tag".as_ref(),
            tag.as_ref(),
            "--deb".as_ref(),
            deb.as_os_str(),
            "--output".as_ref(),
            from_deb.as_os_str(),
        ],
    )?;
    ensure!(
        again == printed,
        "the installed package and the package file give the same archive: {printed} / {again}"
    );
    let image = work.join("image");
    std::fs::create_dir(&image)?;
    check(
        Command::new("tar")
            .arg("-xf")
            .arg(&installed)
            .arg("-C")
            .arg(&image),
    )?;
    let manifest: Value = serde_json::from_slice(&std::fs::read(image.join("manifest.json"))?)?;
    ensure!(
        manifest[0]["RepoTags"] == serde_json::json!([tag]),
        "{manifest}"
    );
    let config_path = manifest[0]["Config"].as_str().context("Config")?;
    let config: Value = serde_json::from_slice(&std::fs::read(image.join(config_path))?)?;
    ensure!(
        format!(
            "sha256:{}",
            config_path.rsplit('/').next().unwrap_or_default()
        ) == sha256_of(&image.join(config_path))?,
        "the config blob is named by its digest"
    );
    let layer = image.join(manifest[0]["Layers"][0].as_str().context("Layers")?);
    ensure!(
        config["rootfs"]["diff_ids"] == serde_json::json!([sha256_of(&layer)?]),
        "the layer's digest is the config's diff id: {config}"
    );
    ensure!(
        config["config"]["Entrypoint"] == serde_json::json!(["/usr/bin/bosun-guest"])
            && config["config"]["Cmd"].as_array().is_some_and(|c| {
                c.ends_with(&[
                    "run".into(),
                    "--state".into(),
                    "/var/lib/bosun-controller/controller.digest".into(),
                ])
            })
            && config["config"]["Env"]
                .as_array()
                .is_some_and(|env| env.iter().any(|e| {
                    e == &Value::from(format!(
                        "BOSUN_BOOTSTRAP={}",
                        bosun_proto::helper::GUEST_BOOTSTRAP_PATH
                    ))
                })),
        "the image runs bosun-guest run (quiesce watch and rollouts) with the bootstrap the golden unit names: {config}"
    );
    let root = work.join("rootfs");
    std::fs::create_dir(&root)?;
    check(
        Command::new("tar")
            .arg("-xf")
            .arg(&layer)
            .arg("-C")
            .arg(&root),
    )?;
    // Nothing but the image's own files: the program starts and reads its apps file there.
    let chroot = || {
        let mut cmd = Command::new("/usr/sbin/chroot");
        cmd.env_clear().arg(&root);
        cmd
    };
    let out = check(chroot().args(["/usr/bin/bosun-guest", "--version"]))?;
    ensure!(
        String::from_utf8_lossy(&out.stdout).contains(env!("CARGO_PKG_VERSION")),
        "bosun-guest in the image: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = run(chroot().args([
        "/usr/bin/bosun-guest",
        "--apps",
        "/etc/bosun-guest/apps.json",
        "--bootstrap",
        "/nonexistent/bootstrap.json",
        "recover",
    ]))?;
    let text = stderr(&out);
    ensure!(
        !out.status.success() && text.contains("/nonexistent/bootstrap.json"),
        "with the baked apps file parsed, the missing bootstrap is what stops it: {text}"
    );
    tampered_install_is_refused(work)
}

/// An installed package whose files changed is not what the recipe builds from.
fn tampered_install_is_refused(work: &Path) -> Result<()> {
    let readme = PathBuf::from("/usr/share/doc/bosun-guest/README");
    let kept = std::fs::read(&readme)?;
    std::fs::write(&readme, b"changed on the node\n")?;
    let out = run(Command::new(RECIPE)
        .args(["--tag", "bosun/controller:x", "--output"])
        .arg(work.join("no.tar")));
    std::fs::write(&readme, kept)?;
    let out = out?;
    ensure!(
        !out.status.success() && stderr(&out).contains("changed") && !work.join("no.tar").exists(),
        "a changed installed package is refused: {}",
        stderr(&out)
    );
    Ok(())
}
