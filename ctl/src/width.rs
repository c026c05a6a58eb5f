//! How wide `bosunctl`'s text may be (decision 0105). By default every line fits [`COLUMNS`]
//! columns: a table too wide prints its last column (a message, a detail) wrapped under each
//! row and narrows its widest other columns until they fit, cutting a cell at its end (`…`),
//! so an id or a subject keeps the prefix the hub resolves; a `key: value` line and a sentence
//! wrap at spaces, indented under their start; a long hex fingerprint keeps its first bytes.
//! `--wide` prints every field whole. JSON is never cut: `--output json` keeps everything.
//!
//! The one line `status --check` prints is a monitoring plugin's, bounded by its own
//! [`MONITORING_LINE`] and never wrapped.

use std::sync::atomic::{AtomicBool, Ordering};

/// The columns text output fits by default.
pub const COLUMNS: usize = 100;

/// The most characters of the line a Nagios-style plugin prints first (their parsers keep
/// 255 and cut the rest).
pub const MONITORING_LINE: usize = 254;

/// The narrowest a table column is cut to (its header is never cut).
const MIN_COLUMN: usize = 8;

/// The mark a cut cell or line ends with.
pub const CUT: char = '…';

static WIDE: AtomicBool = AtomicBool::new(false);

/// Sets `--wide` for the process: every field whole, however wide.
pub fn set_wide(wide: bool) {
    WIDE.store(wide, Ordering::Relaxed);
}

/// The columns text may take, or `None` under `--wide`.
pub fn limit() -> Option<usize> {
    (!WIDE.load(Ordering::Relaxed)).then_some(COLUMNS)
}

/// How many columns `text` takes (one a character: what the tables count).
pub fn len(text: &str) -> usize {
    text.chars().count()
}

/// The bytes of a fingerprint (`AA:BB:…`, a PBS certificate's in a target's id) kept when
/// text is shortened: enough to tell two apart, and a prefix the hub still matches.
const FINGERPRINT_KEPT: usize = 4;

/// The fewest bytes a `AA:BB:…` run has to be shortened as a fingerprint (a MAC address has 6).
const FINGERPRINT_MIN: usize = 8;

/// `text` with every long colon-separated hex fingerprint (`2E:06:82:20:…:CC`) shortened to
/// its first bytes and [`CUT`]; whole under `--wide`.
pub fn short_fingerprints(text: &str) -> std::borrow::Cow<'_, str> {
    if limit().is_none() {
        return std::borrow::Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let pair = |i: usize| {
        i + 1 < bytes.len() && bytes[i].is_ascii_hexdigit() && bytes[i + 1].is_ascii_hexdigit()
    };
    let mut out = String::new();
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        let starts =
            pair(i) && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b':'));
        if !starts {
            i += 1;
            continue;
        }
        // Count `HH(:HH)*`, ending where the next character is not part of a word.
        let mut count = 1;
        let mut end = i + 2;
        while end < bytes.len() && bytes[end] == b':' && pair(end + 1) {
            count += 1;
            end += 3;
        }
        let bounded = end == bytes.len() || !bytes[end].is_ascii_alphanumeric();
        if count >= FINGERPRINT_MIN && bounded {
            let keep = i + FINGERPRINT_KEPT * 3 - 1;
            out.push_str(&text[copied..keep]);
            out.push(CUT);
            copied = end;
        }
        i = end;
    }
    if copied == 0 {
        return std::borrow::Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    std::borrow::Cow::Owned(out)
}

/// `text` cut to `width` columns, ending in [`CUT`] when cut.
pub fn elide(text: &str, width: usize) -> String {
    if len(text) <= width {
        return text.to_owned();
    }
    let kept: String = text.chars().take(width.saturating_sub(1)).collect();
    format!("{kept}{CUT}")
}

/// `text` in lines of at most `width` columns, broken at spaces; a word longer than a line is
/// broken inside it. Never empty: an empty text is one empty line.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    wrap_after(text, width, width)
}

/// [`wrap`] with a first line of `first` columns and the others of `rest`.
fn wrap_after(text: &str, first: usize, rest: usize) -> Vec<String> {
    let room = |lines: &Vec<String>| if lines.is_empty() { first } else { rest }.max(1);
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let sep = usize::from(!line.is_empty());
        if !line.is_empty() && len(&line) + sep + len(word) > room(&lines) {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        let mut word = word;
        while len(&line) + len(word) > room(&lines) {
            let space = room(&lines) - len(&line);
            let split = word
                .char_indices()
                .nth(space)
                .map_or(word.len(), |(i, _)| i);
            line.push_str(&word[..split]);
            lines.push(std::mem::take(&mut line));
            word = &word[split..];
        }
        line.push_str(word);
    }
    lines.push(line);
    lines
}

/// A line of text as it is printed: whole under `--wide` or when it fits, else wrapped at
/// spaces with each further line indented two columns past the line's own indentation.
pub fn fold(text: &str) -> Vec<String> {
    let Some(limit) = limit() else {
        return vec![text.to_owned()];
    };
    if len(text) <= limit {
        return vec![text.to_owned()];
    }
    let body = text.trim_start_matches(' ');
    let indent = text.len() - body.len();
    // Deeply indented text still gets half the line.
    let indent = indent.min(limit / 2);
    let first = limit - indent;
    let rest = first.saturating_sub(2).max(1);
    wrap_after(body, first, rest)
        .into_iter()
        .enumerate()
        .map(|(i, piece)| {
            let pad = if i == 0 { indent } else { indent + 2 };
            format!("{:pad$}{piece}", "")
        })
        .collect()
}

/// The widths a table's columns get so that the table, `sep` columns between two cells, fits
/// `limit`: the widest columns are narrowed to one cap, never below their header nor
/// eight columns (a table of many headers may still be wider).
pub fn fit_columns(natural: &[usize], headers: &[usize], sep: usize, limit: usize) -> Vec<usize> {
    let room = limit.saturating_sub(sep * natural.len().saturating_sub(1));
    let floor = |i: usize| headers.get(i).copied().unwrap_or(0).max(MIN_COLUMN);
    let capped = |cap: usize| -> Vec<usize> {
        natural
            .iter()
            .enumerate()
            .map(|(i, &w)| w.min(cap.max(floor(i))))
            .collect()
    };
    let widest = natural.iter().copied().max().unwrap_or(0);
    let mut cap = widest;
    while cap > 1 && capped(cap).iter().sum::<usize>() > room {
        cap -= 1;
    }
    capped(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elide_keeps_a_prefix_and_marks_the_cut() {
        assert_eq!(elide("backup@pbs!bosun@pbs.demo:store1", 10), "backup@pb…");
        assert_eq!(elide("short", 10), "short");
        assert_eq!(len(&elide(&"x".repeat(300), 24)), 24);
    }

    #[test]
    fn wrap_breaks_at_spaces_and_inside_a_long_word() {
        assert_eq!(wrap("one two three", 7), ["one two", "three"]);
        let long = "AA:BB:CC:DD:EE:FF:00:11";
        let lines = wrap(&format!("fp {long}"), 10);
        assert!(lines.iter().all(|l| len(l) <= 10), "{lines:?}");
        assert_eq!(lines.concat().replace(' ', ""), format!("fp{long}"));
        assert_eq!(wrap("", 5), [""]);
    }

    #[test]
    fn fingerprints_keep_their_first_bytes() {
        set_wide(false);
        let id = "backup@pbs!bosun@pbs.demo:store1#AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99";
        assert_eq!(
            short_fingerprints(id),
            "backup@pbs!bosun@pbs.demo:store1#AA:BB:CC:DD…"
        );
        assert_eq!(
            short_fingerprints(&format!("tier={id}, next")),
            "tier=backup@pbs!bosun@pbs.demo:store1#AA:BB:CC:DD…, next"
        );
        // A MAC address, an IPv6 address, a UUID and a time are left as they are.
        for kept in [
            "nic 52:54:00:12:34:56",
            "fe80::1:2:3:4:5:6:7",
            "fdd18be5-8d55-47c6-8226-d6e879d9facc",
            "09:45:05Z",
        ] {
            assert_eq!(short_fingerprints(kept), kept);
        }
    }

    #[test]
    fn fold_indents_what_it_wraps() {
        set_wide(false);
        let text = format!("  storage {}", "word ".repeat(40));
        let lines = fold(&text);
        assert!(lines.len() > 1);
        assert!(lines.iter().all(|l| len(l) <= COLUMNS), "{lines:?}");
        assert!(lines[1].starts_with("    word"), "{lines:?}");
        assert_eq!(fold("fits"), ["fits"]);
    }

    #[test]
    fn columns_narrow_the_widest_first_and_keep_headers() {
        // SINCE, KIND, HOST, SUBJECT (130), MARKS, MESSAGE (300) in 100 columns.
        let widths = fit_columns(&[20, 15, 5, 130, 5, 300], &[5, 4, 4, 7, 5, 7], 2, 100);
        assert_eq!(widths[..3], [20, 15, 5]);
        assert!(widths.iter().sum::<usize>() + 10 <= 100, "{widths:?}");
        assert_eq!(widths[3], widths[5]);
        // A table that fits is left as it is.
        assert_eq!(fit_columns(&[3, 4], &[2, 2], 2, 100), [3, 4]);
    }
}
