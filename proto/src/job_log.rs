//! A job result's log tail: the last lines of what the job did, bounded, inert and without
//! secrets, written by the agent and bounded again by the hub, which does not trust the
//! agent's sizes ([`bound_tail`] runs on both sides).
//!
//! A line comes from the job's journaled steps (a step's name, how it ended, its error) and
//! so may repeat what a Proxmox task, the helper or a guest program printed. Each line is cut
//! to [`MAX_LINE_CHARS`] characters, its control characters written as visible text
//! ([`crate::inert::escape`]), and every value that follows a secret-looking key
//! (`password=…`, `token: …`, `Authorization: Bearer …`, `PVEAPIToken=…`) replaced with
//! [`REDACTED`]. At most [`MAX_LINES`] lines are kept, the newest, and at most
//! [`MAX_TAIL_BYTES`] bytes in all.

use crate::inert;

/// Most lines a log tail keeps (the newest).
pub const MAX_LINES: usize = 40;
/// Most characters one line keeps.
pub const MAX_LINE_CHARS: usize = 240;
/// Most bytes of all lines together.
pub const MAX_TAIL_BYTES: usize = 8 * 1024;
/// What a secret's value is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Keys whose value is a secret, lowercase; a key matches when it ends with one of these
/// (so `api_token`, `x-auth-password` and `PVEAPIToken` all match).
const SECRET_KEYS: [&str; 8] = [
    "password",
    "passwd",
    "secret",
    "token",
    "apikey",
    "api_key",
    "authorization",
    "bearer",
];

/// `lines` bounded to the log tail's limits: the newest [`MAX_LINES`] lines, each cut,
/// escaped and redacted, then the oldest dropped until the total fits [`MAX_TAIL_BYTES`].
pub fn bound_tail<S: AsRef<str>>(lines: &[S]) -> Vec<String> {
    let start = lines.len().saturating_sub(MAX_LINES);
    let mut kept: Vec<String> = lines[start..]
        .iter()
        .map(|line| bound_line(line.as_ref()))
        .collect();
    let mut total: usize = kept.iter().map(String::len).sum();
    while total > MAX_TAIL_BYTES && !kept.is_empty() {
        total -= kept.remove(0).len();
    }
    kept
}

/// One line cut to [`MAX_LINE_CHARS`], escaped, redacted and cut again (escaping lengthens).
pub fn bound_line(line: &str) -> String {
    let cut: String = line.chars().take(MAX_LINE_CHARS).collect();
    let escaped = inert::escape(&cut);
    redact(&escaped).chars().take(MAX_LINE_CHARS).collect()
}

/// Whether `lines` already keeps the limits [`bound_tail`] sets (what
/// [`crate::job::JobResult::validate`] checks).
pub fn within_bounds<S: AsRef<str>>(lines: &[S]) -> bool {
    lines.len() <= MAX_LINES
        && lines.iter().map(|l| l.as_ref().len()).sum::<usize>() <= MAX_TAIL_BYTES
        && lines.iter().all(|l| {
            let l = l.as_ref();
            l.chars().count() <= MAX_LINE_CHARS && !inert::has_control(l)
        })
}

/// `text` with the value after every secret-looking key replaced with [`REDACTED`]: a key is
/// a run of `[A-Za-z0-9_-]` followed by `=`, `:` or a space (`Bearer xyz`); the value runs to
/// the next space, `,`, `;`, `&`, quote or bracket.
pub fn redact(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if !is_key_char(chars[i]) {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && is_key_char(chars[i]) {
            i += 1;
        }
        let key: String = chars[start..i].iter().collect();
        out.push_str(&key);
        if !is_secret_key(&key) {
            continue;
        }
        // The separator: `=`, `:` (either followed by spaces or a quote) or spaces.
        let mut j = i;
        while j < chars.len() && matches!(chars[j], '=' | ':' | ' ' | '"' | '\'') {
            j += 1;
        }
        if j == i || j >= chars.len() {
            continue;
        }
        out.extend(&chars[i..j]);
        // `Authorization: Bearer xyz`: the scheme is kept, the credential after it is not.
        let mut k = j;
        while k < chars.len() && !is_value_end(chars[k]) {
            k += 1;
        }
        let value: String = chars[j..k].iter().collect();
        if is_secret_key(&value) && k < chars.len() && chars[k] == ' ' {
            out.push_str(&value);
            out.push(' ');
            k += 1;
            let from = k;
            while k < chars.len() && !is_value_end(chars[k]) {
                k += 1;
            }
            if k > from {
                out.push_str(REDACTED);
            }
        } else if k > j {
            out.push_str(REDACTED);
        }
        i = k;
    }
    out
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

fn is_value_end(c: char) -> bool {
    c.is_whitespace() || matches!(c, ',' | ';' | '&' | '"' | '\'' | ')' | ']' | '}' | '>')
}

fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECRET_KEYS.iter().any(|secret| key.ends_with(secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_after_their_keys_are_redacted() {
        let cases = [
            ("password=hunter2 next", "password=[redacted] next"),
            (
                "Authorization: PVEAPIToken=root@pam!b=1234-abcd",
                "Authorization: [redacted]",
            ),
            (
                "Authorization: Bearer abc.def, retry",
                "Authorization: Bearer [redacted], retry",
            ),
            (
                "{\"api_token\": \"s3cr3t\"}",
                "{\"api_token\": \"[redacted]\"}",
            ),
            (
                "cifs user=bosun,password=x;",
                "cifs user=bosun,password=[redacted];",
            ),
            ("bearer xyz", "bearer [redacted]"),
            ("step stop ok", "step stop ok"),
            ("tokens: 3 left", "tokens: 3 left"),
        ];
        for (line, want) in cases {
            assert_eq!(redact(line), want, "{line}");
        }
        assert!(!bound_line("x password=hunter2").contains("hunter2"));
    }

    #[test]
    fn a_tail_keeps_its_newest_lines_inert_and_within_bytes() {
        let lines: Vec<String> = (0..100)
            .map(|i| format!("{i} \u{1b}]0;title\u{7} {}", "y".repeat(400)))
            .collect();
        let tail = bound_tail(&lines);
        assert_eq!(tail.len(), 8 * 1024 / MAX_LINE_CHARS.max(1));
        assert!(tail.last().unwrap().starts_with("99 \\x1b]0;title\\x07"));
        assert!(tail.iter().all(|l| l.chars().count() <= MAX_LINE_CHARS));
        assert!(tail.iter().map(String::len).sum::<usize>() <= MAX_TAIL_BYTES);
        assert!(within_bounds(&tail));
        assert!(!within_bounds(&lines));
        let short = bound_tail(&["a", "b"]);
        assert_eq!(short, ["a", "b"]);
    }
}
