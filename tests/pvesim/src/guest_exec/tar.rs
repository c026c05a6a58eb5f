//! `tar --create --file=- [--one-file-system] [--numeric-owner] [--exclude=PATTERN]
//! --directory=DIR .`, the guest's
//! own tar that the helper's `bulk_archive` runs (decision 0090): a GNU-format archive of the
//! CT's files below `DIR` on standard output, members named `./…` as GNU tar names them, owners
//! numeric, padded to tar's 10 KiB records. A symlink is archived as a link (never followed).
//! The tree keeps no times: every member has mtime 0.
//!
//! A directory the tree does not hold is archived as an empty one: the simulator models a mount
//! point's volume only through the files a test put at its path, and a fresh volume is empty.
//! A path that is not a directory fails as GNU tar does.

use crate::files::{FileTree, Kind, canonical};

use super::Outcome;

/// GNU tar's record: archives are padded to a multiple of it.
const RECORD: usize = 10 * 1024;

/// Runs `tar` with `args` on the CT's tree (see the module docs).
pub(super) fn create(tree: &FileTree, args: &[String]) -> Outcome {
    let (mut created, mut to_stdout, mut dir, mut members) = (false, false, None, Vec::new());
    let mut excluded = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--create" | "-c" => created = true,
            "--file=-" => to_stdout = true,
            "-f" | "--file" => to_stdout = it.next().is_some_and(|f| f == "-"),
            "--one-file-system" | "--numeric-owner" => {}
            other if other.starts_with("--exclude=") => {
                excluded.push(other["--exclude=".len()..].to_owned());
            }
            "-C" | "--directory" => dir = it.next().cloned(),
            other if other.starts_with("--directory=") => {
                dir = Some(other["--directory=".len()..].to_owned());
            }
            other if other.starts_with('-') => {
                let why = format!("bosun-pvesim: tar option '{other}' is not simulated");
                return Outcome::fail(2, why);
            }
            member => members.push(member),
        }
    }
    if !created {
        let why = "tar: You must specify one of the '-Acdtrux', '--delete' or '--test-label' options\nTry 'tar --help' or 'tar --usage' for more information.";
        return Outcome::fail(2, why);
    }
    if !to_stdout || members != ["."] {
        let why =
            "bosun-pvesim: tar creates only '--file=- .' (an archive of one directory on stdout)";
        return Outcome::fail(2, why);
    }
    let Some(dir) = dir.and_then(|d| canonical(&d).ok()) else {
        return Outcome::fail(2, "bosun-pvesim: tar needs an absolute --directory=");
    };
    let real = tree.resolve(&dir).unwrap_or_else(|| dir.clone());
    if tree.get(&real).is_some() && !tree.is_dir(&real) {
        let why = format!(
            "tar: {dir}: Cannot open: Not a directory\ntar: Error is not recoverable: exiting now"
        );
        return Outcome::fail(2, why);
    }
    match archive(tree, &real, &excluded) {
        Ok(bytes) => Outcome {
            bytes: Some(bytes),
            ..Outcome::default()
        },
        Err(e) => Outcome::fail(2, format!("tar: {e}")),
    }
}

/// The archive of every node below `dir` (itself as `./`), in path order, but for those a
/// pattern of `excluded` matches (`./name`, as GNU tar matches a member or a directory above it).
fn archive(tree: &FileTree, dir: &str, excluded: &[String]) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    let root = tree
        .get(dir)
        .map_or((0o755, 0, 0), |n| (n.mode, n.uid, n.gid));
    append(&mut builder, "./", &Kind::Dir, root)?;
    let prefix = if dir == "/" {
        "/".to_owned()
    } else {
        format!("{dir}/")
    };
    let mut below = tree.below(dir, usize::MAX);
    below.sort();
    for path in below {
        let Some(node) = tree.get(&path) else {
            continue;
        };
        let rel = &path[prefix.len()..];
        let skipped = rel
            .match_indices('/')
            .map(|(i, _)| i)
            .chain([rel.len()])
            .any(|end| {
                let member = format!("./{}", &rel[..end]);
                excluded
                    .iter()
                    .any(|p| super::glob(p.as_bytes(), member.as_bytes()))
            });
        if skipped {
            continue;
        }
        let mut name = format!("./{rel}");
        if node.kind == Kind::Dir {
            name.push('/');
        }
        append(
            &mut builder,
            &name,
            &node.kind,
            (node.mode, node.uid, node.gid),
        )?;
    }
    let mut bytes = builder.into_inner()?;
    bytes.resize(bytes.len().div_ceil(RECORD) * RECORD, 0);
    Ok(bytes)
}

/// Appends one member named `name` (GNU tar's `./…`, kept as it is when it fits the header).
fn append(
    builder: &mut tar::Builder<Vec<u8>>,
    name: &str,
    kind: &Kind,
    (mode, uid, gid): (u32, u32, u32),
) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_mode(mode);
    header.set_uid(u64::from(uid));
    header.set_gid(u64::from(gid));
    header.set_mtime(0);
    let data: &[u8] = match kind {
        Kind::Dir => {
            header.set_entry_type(tar::EntryType::Directory);
            &[]
        }
        Kind::File(bytes) => {
            header.set_entry_type(tar::EntryType::Regular);
            bytes
        }
        Kind::Symlink(target) => {
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_link_name(target)?;
            &[]
        }
    };
    header.set_size(data.len() as u64);
    if name.len() < 100 {
        header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        header.set_cksum();
        builder.append(&header, data)
    } else {
        builder.append_data(&mut header, name, data)
    }
}
