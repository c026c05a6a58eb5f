//! Printing the page to PDF with headless Chromium: the private scratch directory, the
//! child process (cleared environment, own process group, timeout) and the PDF moved
//! into place.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs::{File, OpenOptions, Permissions};
use std::io::{BufRead as _, BufReader, Read, Write as _};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{Printer, SheetContent, SheetError, render_html};

/// The `PATH` Chromium's launcher script runs with.
const CHILD_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// How many lines of Chromium's stderr an error keeps, and how long each may be.
const STDERR_TAIL_LINES: usize = 8;
const STDERR_LINE_CHARS: usize = 300;

/// How long to wait for Chromium's stderr to close once Chromium itself has exited
/// (its helper processes hold it open for a moment).
const STDERR_GRACE: Duration = Duration::from_secs(5);

const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// Renders the sheet and prints it to `recovery-sheet-<hostname>.pdf` (mode 0600) in
/// `dir`, replacing a file of that name, and returns the PDF's path.
///
/// The host name is reduced to ASCII letters, digits, `-`, `.` and `_` for the file
/// name. The HTML exists only in a private scratch directory that is removed before
/// this returns. Blocks while Chromium runs (about a second).
///
/// # Errors
///
/// A validation variant when the content is unfit, otherwise what failed: the scratch
/// directory, Chromium (with its exit status and the end of its stderr) or the PDF.
pub fn print_sheet(
    dir: &Path,
    content: &SheetContent<'_>,
    printer: &Printer,
) -> Result<PathBuf, SheetError> {
    let html = render_html(content)?;
    let started = Instant::now();
    let destination = dir.join(pdf_file_name(content.hostname));

    let scratch_parent = printer
        .scratch_parent
        .clone()
        .unwrap_or_else(std::env::temp_dir);
    let scratch = tempfile::Builder::new()
        .prefix("bosun-sheet-")
        .permissions(Permissions::from_mode(0o700))
        .tempdir_in(&scratch_parent)
        .map_err(|source| SheetError::Io {
            what: "creating a private scratch directory in",
            path: scratch_parent.clone(),
            source,
        })?;
    let html_path = scratch.path().join("sheet.html");
    let pdf_path = scratch.path().join("sheet.pdf");
    write_private(&html_path, html.as_bytes())?;
    drop(html);

    let printed = run_chromium(printer, scratch.path(), &html_path, &pdf_path)
        .and_then(|()| copy_pdf(&printer.binary, &pdf_path, dir));
    // The scratch directory holds the words twice (HTML and PDF): it goes before the
    // sheet is put in place, so a sheet never exists while its scratch copy does.
    let scratch_path = scratch.path().to_path_buf();
    let removed = scratch.close().map_err(|source| SheetError::Io {
        what: "removing the scratch directory",
        path: scratch_path,
        source,
    });
    let staged = match (printed, removed) {
        (Ok(staged), Ok(())) => staged,
        // Dropping the staged copy removes it.
        (Ok(_), Err(error)) | (Err(error), Ok(())) => return Err(error),
        (Err(error), Err(removal)) => {
            // Only one error goes back; this one means the words may still be on disk.
            tracing::error!(
                error = %bosun_proto::error_chain(&removal),
                "the recovery sheet's scratch directory was not removed"
            );
            return Err(error);
        }
    };
    staged
        .persist(&destination)
        .map_err(|error| SheetError::Io {
            what: "moving the recovery sheet into place at",
            path: destination.clone(),
            source: error.error,
        })?;
    tracing::debug!(
        pdf = %destination.display(),
        elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "recovery sheet printed"
    );
    Ok(destination)
}

/// `recovery-sheet-<hostname>.pdf`, the host name reduced to `[A-Za-z0-9._-]`.
pub(super) fn pdf_file_name(hostname: &str) -> String {
    let safe: String = hostname
        .chars()
        .take(100)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("recovery-sheet-{safe}.pdf")
}

pub(super) fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Creates `path` (mode 0600, which must not exist) holding `bytes`.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), SheetError> {
    let io = |source| SheetError::Io {
        what: "writing the sheet's HTML to",
        path: path.to_path_buf(),
        source,
    };
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io)?;
    file.write_all(bytes).map_err(io)
}

/// Runs Chromium on `html`, printing to `pdf`, within the printer's timeout.
fn run_chromium(
    printer: &Printer,
    scratch: &Path,
    html: &Path,
    pdf: &Path,
) -> Result<(), SheetError> {
    let binary = &printer.binary;
    let url = url::Url::from_file_path(html).map_err(|()| SheetError::Io {
        what: "making a file URL of",
        path: html.to_path_buf(),
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    })?;
    let mut command = Command::new(binary);
    command.args([
        "--headless=new",
        "--disable-gpu",
        "--no-pdf-header-footer",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
    ]);
    // Chromium's sandbox refuses to run as root; it is wanted everywhere else.
    if rustix::process::geteuid().is_root() {
        command.arg("--no-sandbox");
    }
    command
        .arg(flag("--user-data-dir=", &scratch.join("profile")))
        .arg(flag("--print-to-pdf=", pdf))
        .arg(url.as_str())
        .env_clear()
        .env("PATH", CHILD_PATH)
        .env("HOME", scratch)
        .env("LANG", "C.UTF-8")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = command
        .spawn()
        .map_err(|source| SheetError::SpawnChromium {
            binary: binary.clone(),
            source,
        })?;

    let (tail_tx, tail_rx) = mpsc::channel();
    if let Some(stderr) = child.stderr.take() {
        let reader = std::thread::Builder::new()
            .name("chromium-stderr".into())
            .spawn(move || {
                let _ = tail_tx.send(stderr_tail(stderr));
            });
        if let Err(source) = reader {
            kill_group(&mut child);
            return Err(SheetError::WaitChromium {
                binary: binary.clone(),
                source,
            });
        }
    }

    let deadline = Instant::now() + printer.timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => {
                kill_group(&mut child);
                break None;
            }
            Ok(None) => std::thread::sleep(POLL_INTERVAL),
            Err(source) => {
                kill_group(&mut child);
                return Err(SheetError::WaitChromium {
                    binary: binary.clone(),
                    source,
                });
            }
        }
    };
    let stderr = tail_rx
        .recv_timeout(STDERR_GRACE)
        .unwrap_or_else(|_| "(stderr still open)".to_owned());

    match status {
        None => Err(SheetError::ChromiumTimeout {
            binary: binary.clone(),
            timeout: printer.timeout,
            stderr,
        }),
        Some(status) if !status.success() => Err(SheetError::ChromiumFailed {
            binary: binary.clone(),
            status,
            stderr,
        }),
        Some(_) => match std::fs::metadata(pdf) {
            Ok(meta) if meta.is_file() && meta.len() > 0 => Ok(()),
            _ => Err(SheetError::NoPdf {
                binary: binary.clone(),
                path: pdf.to_path_buf(),
            }),
        },
    }
}

fn flag(name: &str, path: &Path) -> OsString {
    let mut flag = OsString::from(name);
    flag.push(path);
    flag
}

/// Kills the child's process group (Chromium and its helpers) and reaps the child.
/// The child is not yet reaped, so its pid, the group's id, cannot have been reused.
fn kill_group(child: &mut Child) {
    if let Some(pid) = i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The last lines of Chromium's stderr, without its harmless D-Bus complaints, joined
/// by " | ".
fn stderr_tail(stderr: impl Read) -> String {
    let mut tail = VecDeque::with_capacity(STDERR_TAIL_LINES);
    for line in BufReader::new(stderr).split(b'\n') {
        let Ok(line) = line else { break };
        let line = String::from_utf8_lossy(&line);
        let line = line.trim();
        if line.is_empty() || line.contains(":ERROR:dbus/") {
            continue;
        }
        if tail.len() == STDERR_TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line.chars().take(STDERR_LINE_CHARS).collect::<String>());
    }
    if tail.is_empty() {
        "(empty)".to_owned()
    } else {
        Vec::from(tail).join(" | ")
    }
}

/// Checks that `pdf` is a PDF and copies it into a new 0600 temporary file in `dir`,
/// which the caller renames into place.
fn copy_pdf(binary: &Path, pdf: &Path, dir: &Path) -> Result<tempfile::NamedTempFile, SheetError> {
    let read_err = |source| SheetError::Io {
        what: "reading the printed PDF",
        path: pdf.to_path_buf(),
        source,
    };
    let mut source = File::open(pdf).map_err(read_err)?;
    let mut magic = [0u8; 5];
    source.read_exact(&mut magic).map_err(read_err)?;
    if &magic != b"%PDF-" {
        return Err(SheetError::NoPdf {
            binary: binary.to_path_buf(),
            path: pdf.to_path_buf(),
        });
    }
    let write_err = |source| SheetError::Io {
        what: "writing the recovery sheet into",
        path: dir.to_path_buf(),
        source,
    };
    let mut staged = tempfile::Builder::new()
        .prefix(".recovery-sheet-")
        .suffix(".pdf.tmp")
        .permissions(Permissions::from_mode(0o600))
        .tempfile_in(dir)
        .map_err(write_err)?;
    staged.write_all(&magic).map_err(write_err)?;
    std::io::copy(&mut source, staged.as_file_mut()).map_err(write_err)?;
    staged.as_file().sync_all().map_err(write_err)?;
    Ok(staged)
}
