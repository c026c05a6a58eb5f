//! `/bin/sh -c <BULK_RESTORE_SCRIPT> bosun-bulk-restore STEP PATH`, the guest's own script that
//! the helper's `bulk_restore` runs (decision 0108), modelled on the CT's tree as the script
//! acts: `extract` finishes an approved swap, clears an unapproved extraction, unpacks the tar
//! on standard input into `PATH/.bosun-restore-partial` and renames it `…-ready`; `swap`
//! renames it `…-moving`, moves the volume's other entries into `…-old`, renames it
//! `…-swapping`, moves its entries out into `PATH` and removes `…-old`; `discard` removes an
//! unapproved extraction. Only the script's exact text is modelled: the simulator runs no shell.

use bosun_proto::helper::{BULK_RESTORE_DIRS, BULK_RESTORE_SCRIPT};

use crate::files::{FileTree, canonical, name};

use super::Outcome;

/// Whether `argv` is the helper's bulk restore script with its two arguments.
pub(super) fn is_script(argv: &[String]) -> bool {
    argv.len() == 6 && argv[1] == "-c" && argv[2] == BULK_RESTORE_SCRIPT
}

/// Runs the script's step on the tree (see the module docs).
pub(super) fn run(tree: &mut FileTree, argv: &[String], input: &[u8]) -> Outcome {
    let (step, path) = (argv[4].as_str(), argv[5].as_str());
    let Some(root) = canonical(path).ok().and_then(|p| tree.resolve(&p)) else {
        return Outcome::fail(2, format!("bosun-bulk-restore: 2: cd: can't cd to {path}"));
    };
    if !tree.is_dir(&root) {
        return Outcome::fail(2, format!("bosun-bulk-restore: 2: cd: can't cd to {path}"));
    }
    let at = |n: usize| format!("{}/{}", root.trim_end_matches('/'), BULK_RESTORE_DIRS[n]);
    let (partial, ready, moving) = (at(0), at(1), at(2));
    let done = match step {
        "extract" => finish(tree, &root).and_then(|()| {
            tree.remove_all(&partial);
            tree.remove_all(&ready);
            tree.mkdir(&partial, 0o700)
                .map_err(|e| format!("mkdir: {e}"))?;
            unpack(tree, &partial, input)?;
            tree.rename(&partial, &ready)
                .map_err(|e| format!("mv: {e}"))
        }),
        "swap" => {
            let approved = if tree.is_dir(&ready) {
                tree.rename(&ready, &moving).map_err(|e| format!("mv: {e}"))
            } else {
                Ok(())
            };
            approved.and_then(|()| finish(tree, &root))
        }
        "discard" => {
            tree.remove_all(&partial);
            tree.remove_all(&ready);
            Ok(())
        }
        _ => return Outcome::fail(2, ""),
    };
    match done {
        Ok(()) => Outcome::ok(""),
        Err(why) => Outcome::fail(2, why),
    }
}

/// The script's `finish`: an approved swap carried to its end.
fn finish(tree: &mut FileTree, root: &str) -> Result<(), String> {
    let base = root.trim_end_matches('/');
    let at = |n: usize| format!("{base}/{}", BULK_RESTORE_DIRS[n]);
    let (moving, swapping, old) = (at(2), at(3), at(4));
    let mv = |e: &str| format!("mv: {e}");
    if tree.is_dir(&moving) {
        tree.mkdir(&old, 0o755).map_err(|e| format!("mkdir: {e}"))?;
        for child in tree.below(root, 1) {
            if !BULK_RESTORE_DIRS.contains(&name(&child)) {
                tree.rename(&child, &format!("{old}/{}", name(&child)))
                    .map_err(mv)?;
            }
        }
        tree.rename(&moving, &swapping).map_err(mv)?;
    }
    if tree.is_dir(&swapping) {
        for child in tree.below(&swapping, 1) {
            tree.rename(&child, &format!("{base}/{}", name(&child)))
                .map_err(mv)?;
        }
        tree.remove_all(&swapping);
    }
    tree.remove_all(&old);
    Ok(())
}

/// `tar --extract --file=- … --directory=DIR` of `input` into `dir`: members named `./…` (the
/// archive's `./` itself sets `dir`'s mode and owner), directories, files and symlinks; a name
/// leaving `dir` fails as GNU tar refuses it.
fn unpack(tree: &mut FileTree, dir: &str, input: &[u8]) -> Result<(), String> {
    let mut archive = tar::Archive::new(input);
    let entries = archive.entries().map_err(|e| format!("tar: {e}"))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| format!("tar: {e}"))?;
        let header = entry.header().clone();
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let rel = raw.trim_start_matches("./").trim_end_matches('/');
        if rel.starts_with('/') || rel.split('/').any(|c| c == "..") {
            return Err(format!("tar: {raw}: Member name contains '..'"));
        }
        let path = if rel.is_empty() || rel == "." {
            dir.to_owned()
        } else {
            format!("{dir}/{rel}")
        };
        let mode = header.mode().unwrap_or(0o644) & 0o7777;
        let (uid, gid) = (header.uid().unwrap_or(0), header.gid().unwrap_or(0));
        let made = match header.entry_type() {
            tar::EntryType::Directory => tree.mkdir(&path, mode).map(|_| ()),
            tar::EntryType::Symlink => {
                let target = entry.link_name().ok().flatten();
                let target = target.map(|t| t.display().to_string()).unwrap_or_default();
                tree.symlink(&path, &target)
            }
            tar::EntryType::Regular => {
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut entry, &mut bytes)
                    .map_err(|e| format!("tar: {e}"))?;
                tree.write(&path, bytes, mode)
            }
            other => {
                return Err(format!(
                    "tar: {raw}: member type {other:?} is not simulated"
                ));
            }
        };
        made.map_err(|e| format!("tar: {raw}: Cannot open: {e}"))?;
        let (uid, gid) = (u32::try_from(uid).ok(), u32::try_from(gid).ok());
        tree.set_attrs(&path, Some(mode), uid, gid);
    }
    Ok(())
}
