//! Durations on the command line: `90`, `90s`, `30m`, `24h`, `7d`.

use crate::error::CtlError;

/// Parses the duration argument `what` (`90`, `90s`, `30m`, `24h`, `7d`) into seconds.
pub fn parse_duration(what: &'static str, text: &str) -> Result<u32, CtlError> {
    let text = text.trim();
    let (digits, unit) = match text.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&text[..i], c),
        _ => (text, 's'),
    };
    let bad = |reason: String| CtlError::BadArgument { what, reason };
    let value: u32 = digits
        .parse()
        .map_err(|_| bad(format!("`{text}` is not a duration like 30m or 24h")))?;
    let factor = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        other => return Err(bad(format!("unknown unit `{other}` (use s, m, h or d)"))),
    };
    value
        .checked_mul(factor)
        .ok_or_else(|| bad(format!("`{text}` is too long")))
}
