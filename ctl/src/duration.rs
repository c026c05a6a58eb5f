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

/// [`parse_duration`], refused outside `min..=max` seconds: said in the units the operator
/// types (`` `90d` is outside 1m to 30d ``), never as a count of seconds they did not type.
pub fn parse_within(what: &'static str, text: &str, min: u32, max: u32) -> Result<u32, CtlError> {
    let seconds = parse_duration(what, text)?;
    if !(min..=max).contains(&seconds) {
        return Err(CtlError::BadArgument {
            what,
            reason: format!(
                "`{}` is outside {} to {}",
                text.trim(),
                human(min),
                human(max)
            ),
        });
    }
    Ok(seconds)
}

/// `seconds` in the largest unit that says it whole: `30d`, `24h`, `90m`, `45s`.
pub fn human(seconds: u32) -> String {
    match [(86_400, 'd'), (3600, 'h'), (60, 'm')]
        .into_iter()
        .find(|(unit, _)| seconds > 0 && seconds.is_multiple_of(*unit))
    {
        Some((unit, name)) => format!("{}{name}", seconds / unit),
        None => format!("{seconds}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_said_in_the_largest_whole_unit() {
        for (seconds, said) in [
            (0, "0s"),
            (45, "45s"),
            (60, "1m"),
            (5400, "90m"),
            (86_400, "1d"),
            (90_000, "25h"),
            (2_592_000, "30d"),
        ] {
            assert_eq!(human(seconds), said);
        }
    }

    #[test]
    fn a_duration_out_of_bounds_is_refused_in_the_units_typed() {
        let err = parse_within("--for", "90d", 60, 2_592_000).unwrap_err();
        assert_eq!(err.to_string(), "--for: `90d` is outside 1m to 30d");
        let err = parse_within("--for", "30s", 60, 2_592_000).unwrap_err();
        assert_eq!(err.to_string(), "--for: `30s` is outside 1m to 30d");
        assert_eq!(
            parse_within("--for", "30d", 60, 2_592_000).unwrap(),
            2_592_000
        );
        assert_eq!(parse_within("--for", "1m", 60, 2_592_000).unwrap(), 60);
    }
}
