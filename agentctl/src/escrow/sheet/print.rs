//! The rendered sheet put in place: created 0600 under a temporary name in the destination
//! directory, synced, and renamed to `recovery-sheet-<hostname>.pdf`.

use std::fs::Permissions;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::{SheetContent, SheetError, render_pdf};

/// Renders the sheet and writes it to `recovery-sheet-<hostname>.pdf` (mode 0600) in
/// `dir`, replacing a file of that name, and returns the PDF's path.
///
/// The host name is reduced to ASCII letters, digits, `-`, `.` and `_` for the file
/// name. Nothing but that file is written. Takes a few milliseconds.
///
/// # Errors
///
/// A validation variant when the content is unfit, [`SheetError::TooLong`] when it does
/// not fit on the page, otherwise what failed writing the file.
pub fn print_sheet(dir: &Path, content: &SheetContent<'_>) -> Result<PathBuf, SheetError> {
    let started = Instant::now();
    let pdf = render_pdf(content)?;
    let destination = dir.join(pdf_file_name(content.hostname));
    let write_err = |source| SheetError::Io {
        what: "writing the recovery sheet into",
        path: dir.to_path_buf(),
        source,
    };
    // Dropping the staged file on an error removes it.
    let mut staged = tempfile::Builder::new()
        .prefix(".recovery-sheet-")
        .suffix(".pdf.tmp")
        .permissions(Permissions::from_mode(0o600))
        .tempfile_in(dir)
        .map_err(write_err)?;
    staged.write_all(&pdf).map_err(write_err)?;
    staged.as_file().sync_all().map_err(write_err)?;
    drop(pdf);
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
        "recovery sheet written"
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
