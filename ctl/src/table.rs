//! Everything a command prints on stdout: plain-text tables, `key: value` lines, JSON, and
//! [`outln!`](crate::outln) for a sentence. Each returns [`CtlError::Output`] when stdout
//! fails; a reader that went away (`bosunctl hosts list | head -1`) is not an error
//! ([`CtlError::exit_code`]), and nothing here panics on it as `println!` would.

use std::io::Write as _;

use serde_json::Value;

use crate::error::CtlError;

/// Writes rows as aligned columns under a header.
pub fn print(header: &[&str], rows: &[Vec<String>]) -> Result<(), CtlError> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = std::io::stdout().lock();
    let line = |cells: &mut dyn Iterator<Item = &str>| -> String {
        // A cell is one line: a control character (a newline in a message) would break the
        // table, so it prints as a space.
        let text: Vec<String> = cells
            .zip(&widths)
            .map(|(cell, width)| {
                let cell: String = cell
                    .chars()
                    .map(|c| if c.is_control() { ' ' } else { c })
                    .collect();
                format!("{cell:<width$}")
            })
            .collect();
        text.join("  ").trim_end().to_owned()
    };
    writeln!(out, "{}", line(&mut header.iter().copied())).map_err(CtlError::Output)?;
    for row in rows {
        writeln!(out, "{}", line(&mut row.iter().map(String::as_str))).map_err(CtlError::Output)?;
    }
    Ok(())
}

/// Writes one line to stdout; [`outln!`](crate::outln) formats it.
pub fn line(args: std::fmt::Arguments<'_>) -> Result<(), CtlError> {
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .map_err(CtlError::Output)
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
    writeln!(std::io::stdout().lock(), "{text}").map_err(CtlError::Output)
}

/// Prints `key: value` lines.
pub fn print_fields(fields: &[(&str, String)]) -> Result<(), CtlError> {
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    let mut out = std::io::stdout().lock();
    for (key, value) in fields {
        writeln!(out, "{:<width$} {value}", format!("{key}:")).map_err(CtlError::Output)?;
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
