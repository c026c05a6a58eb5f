//! Everything a command prints on stdout: plain-text tables, `key: value` lines, JSON, and
//! [`outln!`](crate::outln) for a sentence. Each returns [`CtlError::Output`] when stdout
//! fails; a reader that went away (`bosunctl hosts list | head -1`) is not an error
//! ([`CtlError::exit_code`]), and nothing here panics on it as `println!` would.
//!
//! Much of what is printed came from the hub or a host (hostnames, restore-check output, alert
//! messages, details): data, never instructions to the operator's terminal. Every writer here
//! passes its text through [`bosun_proto::inert::escape`], which writes each control
//! character (C0, DEL, C1: an escape sequence, a bell, the C1 CSI) and each invisible format
//! character (Unicode's `Cf`: a right-to-left override that makes a name read backwards, a
//! zero-width space) as visible text; a sentence
//! or a cell is one line, so a line feed in it is escaped too. [`block`] is for our own
//! multi-line text (an armored ciphertext), [`print_json`] keeps JSON valid, and
//! [`errln!`](crate::errln) does the same for standard error. No command writes to stdout or
//! stderr by another way.

use std::io::Write as _;

use bosun_proto::inert::{escape, escape_but_newlines, escape_json_text};
use serde_json::Value;

use crate::error::CtlError;
use crate::width;

/// Writes rows as aligned columns under a header, fitting [`crate::width::COLUMNS`] unless
/// `--wide`. A table too wide prints its last column (a message, a detail) under each row,
/// indented and wrapped, and narrows its widest other columns until they fit, a cell cut at its
/// end (`…`): an id or a subject keeps the prefix the hub resolves.
pub fn print(header: &[&str], rows: &[Vec<String>]) -> Result<(), CtlError> {
    // A cell is one line: a control character in it (a newline in a message, an escape
    // sequence a host sent) prints as visible text.
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| shown(cell)).collect())
        .collect();
    let natural = |columns: usize| -> Vec<usize> {
        let mut widths: Vec<usize> = header.iter().take(columns).map(|h| h.len()).collect();
        for row in &rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(width::len(cell));
            }
        }
        widths
    };
    let mut widths = natural(header.len());
    let table_width = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
    // The last column goes under its row when the table does not fit.
    let (columns, below) = match width::limit() {
        Some(limit) if table_width > limit && header.len() > 1 => {
            let columns = header.len() - 1;
            let headers: Vec<usize> = header.iter().take(columns).map(|h| h.len()).collect();
            widths = width::fit_columns(&natural(columns), &headers, 2, limit);
            (columns, Some(limit.saturating_sub(BELOW_INDENT)))
        }
        _ => (header.len(), None),
    };
    let mut out = std::io::stdout().lock();
    let line = |cells: &mut dyn Iterator<Item = &str>| -> String {
        let text: Vec<String> = cells
            .zip(&widths)
            .map(|(cell, width)| format!("{:<width$}", width::elide(cell, *width)))
            .collect();
        text.join("  ").trim_end().to_owned()
    };
    writeln!(out, "{}", line(&mut header.iter().copied().take(columns)))
        .map_err(CtlError::Output)?;
    for row in &rows {
        writeln!(
            out,
            "{}",
            line(&mut row.iter().map(String::as_str).take(columns))
        )
        .map_err(CtlError::Output)?;
        let Some(room) = below else { continue };
        let Some(cell) = row.get(columns).filter(|c| !c.is_empty() && *c != "-") else {
            continue;
        };
        for piece in width::wrap(cell, room) {
            writeln!(out, "{:BELOW_INDENT$}{piece}", "").map_err(CtlError::Output)?;
        }
    }
    Ok(())
}

/// How far a table's last column, printed under its row, is indented.
const BELOW_INDENT: usize = 4;

/// `text` as a line or cell shows it: every control character escaped, and (unless `--wide`)
/// each long fingerprint shortened to its first bytes.
fn shown(text: &str) -> String {
    width::short_fingerprints(&escape(text)).into_owned()
}

/// Writes one line to stdout, every control character in it escaped; [`outln!`](crate::outln)
/// formats it.
pub fn line(args: std::fmt::Arguments<'_>) -> Result<(), CtlError> {
    let text = std::fmt::format(args);
    let mut out = std::io::stdout().lock();
    for line in width::fold(&shown(&text)) {
        out.write_all(line.as_bytes())
            .and_then(|()| out.write_all(b"\n"))
            .map_err(CtlError::Output)?;
    }
    Ok(())
}

/// Writes one line to stdout as it is, never wrapped (every control character escaped): the
/// line a monitoring plugin reads, which bounds its own length.
pub fn plugin_line(text: &str) -> Result<(), CtlError> {
    let mut out = std::io::stdout().lock();
    out.write_all(escape(text).as_bytes())
        .and_then(|()| out.write_all(b"\n"))
        .map_err(CtlError::Output)
}

/// Writes our own multi-line text (an armored ciphertext) to stdout: its line breaks kept,
/// every other control character escaped.
pub fn block(text: &str) -> Result<(), CtlError> {
    let mut out = std::io::stdout().lock();
    out.write_all(escape_but_newlines(text.trim_end_matches('\n')).as_bytes())
        .and_then(|()| out.write_all(b"\n"))
        .map_err(CtlError::Output)
}

/// Writes JSON we serialized (pretty, over several lines) to stdout: valid JSON, with DEL, C1
/// and the format characters escaped as `serde_json` does not.
pub fn json_block(text: &str) -> Result<(), CtlError> {
    block(&escape_json_text(text))
}

/// Writes one line to stderr, every control character in it escaped; [`errln!`](crate::errln)
/// formats it. A stderr that fails is not worth failing the command for.
pub fn err_line(args: std::fmt::Arguments<'_>) {
    let text = std::fmt::format(args);
    let mut err = std::io::stderr().lock();
    let _ = err
        .write_all(escape(&text).as_bytes())
        .and_then(|()| err.write_all(b"\n"));
}

/// Writes a question to stderr without ending the line, every control character escaped, and
/// flushes it so that it shows before the answer is read.
pub fn err_prompt(args: std::fmt::Arguments<'_>) -> Result<(), CtlError> {
    let text = std::fmt::format(args);
    let mut err = std::io::stderr().lock();
    err.write_all(escape(&text).as_bytes())
        .and_then(|()| err.flush())
        .map_err(CtlError::Output)
}

/// `eprintln!` with every control character escaped (see [`err_line`]).
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::table::err_line(format_args!($($arg)*))
    };
}

/// `println!` that returns [`CtlError::Output`] instead of panicking when stdout fails.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::table::line(format_args!($($arg)*))
    };
}

/// Pretty-prints JSON.
pub fn print_json(value: &Value) -> Result<(), CtlError> {
    let text = serde_json::to_string_pretty(value).map_err(|source| CtlError::Decode {
        what: "output".to_owned(),
        source,
    })?;
    // serde_json escapes C0 in strings; DEL and C1 it leaves raw.
    writeln!(std::io::stdout().lock(), "{}", escape_json_text(&text)).map_err(CtlError::Output)
}

/// Prints `key: value` lines; a value too long for the line wraps at spaces onto lines
/// indented under it (unless `--wide`).
pub fn print_fields(fields: &[(&str, String)]) -> Result<(), CtlError> {
    let key_width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    let mut out = std::io::stdout().lock();
    for (key, value) in fields {
        let value = shown(value);
        let pieces = match width::limit() {
            Some(limit) => width::wrap(&value, limit.saturating_sub(key_width + 1).max(20)),
            None => vec![value],
        };
        for (i, piece) in pieces.iter().enumerate() {
            let key = if i == 0 {
                format!("{key}:")
            } else {
                String::new()
            };
            writeln!(out, "{key:<key_width$} {piece}").map_err(CtlError::Output)?;
        }
    }
    Ok(())
}

/// A timestamp or `-`.
pub fn when(ts: Option<jiff::Timestamp>) -> String {
    ts.map_or_else(
        || "-".to_owned(),
        |t| t.strftime("%Y-%m-%d %H:%M:%SZ").to_string(),
    )
}

/// An optional string or `-`.
pub fn or_dash(value: Option<&str>) -> String {
    value.unwrap_or("-").to_owned()
}

/// How long before `now` `then` was, coarsely: `45s ago`, `20m ago`, `3h ago`, `2d ago`
/// (`in 5m` for a time ahead of `now`).
pub fn ago(then: jiff::Timestamp, now: jiff::Timestamp) -> String {
    let secs = now.duration_since(then).as_secs();
    let (ahead, secs) = (secs < 0, secs.unsigned_abs());
    let span = match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3_600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3_600),
        s => format!("{}d", s / 86_400),
    };
    if ahead {
        format!("in {span}")
    } else {
        format!("{span} ago")
    }
}
