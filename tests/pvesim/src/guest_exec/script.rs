//! What a guest's restore check needs from `pct exec`: a `#!/bin/sh` script, `test -x|-f|-e`
//! and `sha256sum --check`.
//!
//! A script is run the way `sh` would run a plain one: each line that is not blank or a
//! comment is one command, split on whitespace into its argument vector and run as `pct exec`
//! runs a program; `#!/bin/sh -e` (or a `set -e` line) stops at the first command that fails,
//! with its status; `exit N` ends the script. Quoting, variables, pipes, redirections and
//! other shell syntax are not simulated: a line using them fails and says so.

use sha2::{Digest, Sha256};

use super::{Outcome, not_found};
use crate::files::{FileTree, canonical};

/// Characters whose meaning in a shell line the simulator does not model.
const SHELL_SYNTAX: &[char] = &[
    '|', '&', ';', '<', '>', '(', ')', '$', '`', '\\', '"', '\'', '*', '?', '[', ']', '{', '}', '~',
];
/// Interpreters a script may name (Debian's `sh` is `dash`).
const SHELLS: [&str; 4] = ["/bin/sh", "/usr/bin/sh", "/bin/dash", "/usr/bin/dash"];
/// How deep scripts may run scripts.
const MAX_DEPTH: usize = 8;

/// Whether the file at `path` is a script (`#!` first).
pub(super) fn is_script(tree: &FileTree, path: &str) -> bool {
    tree.content(path).is_some_and(|c| c.starts_with(b"#!"))
}

/// Runs the script at `path` (arguments are not simulated: `$1` is syntax).
pub(super) fn run(tree: &mut FileTree, program: &str, path: &str, depth: usize) -> Outcome {
    if !tree.executable(path) {
        return Outcome::fail(
            126,
            format!("lxc-attach: Failed to exec \"{program}\": Permission denied"),
        );
    }
    let text = String::from_utf8_lossy(tree.content(path).unwrap_or_default()).into_owned();
    let mut lines = text.lines();
    let shebang = lines.next().unwrap_or_default();
    let mut words = shebang.trim_start_matches("#!").split_whitespace();
    let interpreter = words.next().unwrap_or_default();
    if !SHELLS.contains(&interpreter) || !tree.executable(interpreter) {
        return not_found(program);
    }
    let mut errexit = false;
    for flag in words {
        match flag {
            "-e" => errexit = true,
            other => {
                return Outcome::fail(2, format!("{interpreter}: 0: Illegal option {other}"));
            }
        }
    }
    if depth >= MAX_DEPTH {
        return Outcome::fail(2, "bosun-pvesim: scripts nested too deep");
    }
    let mut out = Outcome::ok("");
    for (number, line) in lines.enumerate().map(|(i, l)| (i + 2, l.trim())) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.contains(SHELL_SYNTAX) {
            let mut failed = Outcome::fail(
                2,
                format!("{path}: {number}: bosun-pvesim: shell syntax is not simulated: {line}"),
            );
            failed.stdout = std::mem::take(&mut out.stdout);
            failed.stderr.insert_str(0, &out.stderr);
            return failed;
        }
        let argv: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        let step = match argv
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice()
        {
            ["set", "-e"] => {
                errexit = true;
                continue;
            }
            ["exit"] => Outcome {
                exit: out.exit,
                ..Outcome::default()
            },
            ["exit", code] => Outcome {
                exit: code.parse::<u8>().map_or(2, i32::from),
                ..Outcome::default()
            },
            _ => super::run_at(tree, &argv, depth + 1),
        };
        out.stdout.push_str(&step.stdout);
        out.stderr.push_str(&step.stderr);
        out.exit = step.exit;
        if argv[0] == "exit" || (errexit && step.exit != 0) {
            return out;
        }
    }
    out
}

/// Where a path a command names leads, relative to the guest's `/` (its working directory
/// under `pct exec`).
fn lookup(tree: &FileTree, raw: &str) -> Option<String> {
    let absolute = if raw.starts_with('/') {
        raw.to_owned()
    } else {
        format!("/{raw}")
    };
    tree.resolve(&canonical(&absolute).ok()?)
}

/// `test -x|-f|-e PATH`: 0 when it holds, 1 when not.
pub(super) fn test(tree: &FileTree, args: &[String]) -> Outcome {
    let [flag, path] = args else {
        return Outcome::fail(2, "bosun-pvesim: only 'test -x|-f|-e PATH' is simulated");
    };
    let holds = match flag.as_str() {
        "-x" => lookup(tree, path).is_some_and(|p| tree.executable(&p)),
        "-f" => lookup(tree, path).is_some_and(|p| tree.is_file(&p)),
        "-e" => lookup(tree, path).is_some(),
        other => {
            return Outcome::fail(2, format!("bosun-pvesim: 'test {other}' is not simulated"));
        }
    };
    Outcome {
        exit: i32::from(!holds),
        ..Outcome::default()
    }
}

/// `sha256sum --check [--strict] [--quiet] [--status] FILE`: each `HASH  PATH` line of FILE
/// checked against the file's bytes, with sha256sum's own lines and warnings.
pub(super) fn sha256sum(tree: &FileTree, args: &[String]) -> Outcome {
    let (mut check, mut strict, mut quiet, mut status, mut files) =
        (false, false, false, false, Vec::new());
    for arg in args {
        match arg.as_str() {
            "-c" | "--check" => check = true,
            "--strict" => strict = true,
            "--quiet" => quiet = true,
            "--status" => status = true,
            flag if flag.starts_with('-') => {
                return Outcome::fail(1, format!("sha256sum: option '{flag}' is not simulated"));
            }
            file => files.push(file),
        }
    }
    let (true, [list]) = (check, files.as_slice()) else {
        return Outcome::fail(
            1,
            "bosun-pvesim: only 'sha256sum --check FILE' is simulated",
        );
    };
    let Some(text) = lookup(tree, list).and_then(|p| tree.content(&p)) else {
        return Outcome::fail(1, format!("sha256sum: {list}: No such file or directory"));
    };
    let text = String::from_utf8_lossy(text).into_owned();
    let (mut out, mut err) = (String::new(), String::new());
    let (mut bad_lines, mut mismatched, mut unreadable, mut checked) = (0, 0, 0, 0);
    for line in text.lines() {
        let parsed = line
            .split_once("  ")
            .or_else(|| line.split_once(" *"))
            .filter(|(hash, path)| {
                hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()) && !path.is_empty()
            });
        let Some((hash, path)) = parsed else {
            bad_lines += 1;
            continue;
        };
        checked += 1;
        match lookup(tree, path).and_then(|p| tree.content(&p)) {
            None => {
                unreadable += 1;
                err.push_str(&format!("sha256sum: {path}: No such file or directory\n"));
                out.push_str(&format!("{path}: FAILED open or read\n"));
            }
            Some(bytes) if hex::encode(Sha256::digest(bytes)) == hash.to_ascii_lowercase() => {
                if !quiet {
                    out.push_str(&format!("{path}: OK\n"));
                }
            }
            Some(_) => {
                mismatched += 1;
                out.push_str(&format!("{path}: FAILED\n"));
            }
        }
    }
    if checked == 0 {
        return Outcome::fail(
            1,
            format!("sha256sum: {list}: no properly formatted checksum lines found"),
        );
    }
    let plural = |n: usize, one: &str, many: &str| {
        if n == 1 {
            format!("1 {one}")
        } else {
            format!("{n} {many}")
        }
    };
    if bad_lines > 0 {
        err.push_str(&format!(
            "sha256sum: WARNING: {} improperly formatted\n",
            plural(bad_lines, "line is", "lines are")
        ));
    }
    if unreadable > 0 {
        err.push_str(&format!(
            "sha256sum: WARNING: {} could not be read\n",
            plural(unreadable, "listed file", "listed files")
        ));
    }
    if mismatched > 0 {
        err.push_str(&format!(
            "sha256sum: WARNING: {} did NOT match\n",
            plural(mismatched, "computed checksum", "computed checksums")
        ));
    }
    let failed = mismatched > 0 || unreadable > 0 || (strict && bad_lines > 0);
    if status {
        (out, err) = (String::new(), String::new());
    }
    Outcome {
        exit: i32::from(failed),
        stdout: out,
        stderr: err,
        ..Outcome::default()
    }
}
