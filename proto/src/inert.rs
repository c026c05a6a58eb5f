//! Text that came from a host or the hub, made inert before a person reads it.
//!
//! A report's text (a restore check's output, a backup's error, a guest's hostname) is data,
//! never instructions to the terminal or page that shows it. A compromised host that put
//! `ESC ] 0 ; … BEL` (a window title), `ESC [ 2 J` (clear the screen) or the one-character
//! C1 CSI (U+009B) into its report would otherwise drive the operator's terminal through
//! `bosunctl status`.
//!
//! [`escape`] is the one rendering of a control character everything uses: the hub for the
//! free-form fields of a report it stores (`StateReport::make_inert`), `bosunctl` for every
//! line it prints, the dashboard for every page. A control character is every character of
//! Unicode's `Cc` category: C0 (U+0000–U+001F), DEL (U+007F) and C1 (U+0080–U+009F). Each
//! becomes visible text: `\n`, `\r`, `\t`, `\x1b` for the rest of C0 and DEL, `\u{9b}` for
//! C1. A backslash is left as it is: the result is for reading, not for decoding back.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` is a control character: C0, DEL or C1 (Unicode's `Cc`).
pub fn is_control(c: char) -> bool {
    c.is_control()
}

/// Whether `text` holds a control character.
pub fn has_control(text: &str) -> bool {
    text.chars().any(is_control)
}

/// `text` with every control character written as visible text (see the module's doc).
pub fn escape(text: &str) -> Cow<'_, str> {
    escape_unless(text, |_| false)
}

/// `text` with every control character but the line feed written as visible text: for our
/// own multi-line output (an armored ciphertext, a whole page), where a line break is ours.
pub fn escape_but_newlines(text: &str) -> Cow<'_, str> {
    escape_unless(text, |c| c == '\n')
}

/// Escapes every control character `keep` does not keep.
fn escape_unless(text: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(|c| is_control(c) && !keep(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !is_control(c) || keep(c) {
            out.push(c);
            continue;
        }
        // Writing into a String cannot fail.
        let _ = match c {
            '\n' => out.write_str("\\n"),
            '\r' => out.write_str("\\r"),
            '\t' => out.write_str("\\t"),
            c if u32::from(c) < 0x80 => write!(out, "\\x{:02x}", u32::from(c)),
            c => write!(out, "\\u{{{:x}}}", u32::from(c)),
        };
    }
    Cow::Owned(out)
}

/// Replaces `text` by its [`escape`]d form when it holds a control character.
pub fn escape_in_place(text: &mut String) {
    if let Cow::Owned(escaped) = escape(text) {
        *text = escaped;
    }
}

/// [`escape_in_place`] for every string in a JSON value, object keys included.
pub fn escape_json_in_place(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(text) => escape_in_place(text),
        serde_json::Value::Array(items) => items.iter_mut().for_each(escape_json_in_place),
        serde_json::Value::Object(fields) => {
            if fields.keys().any(|k| has_control(k)) {
                let old = std::mem::take(fields);
                for (key, field) in old {
                    fields.insert(escape(&key).into_owned(), field);
                }
            }
            fields.values_mut().for_each(escape_json_in_place);
        }
        serde_json::Value::Null | serde_json::Value::Bool(_) | serde_json::Value::Number(_) => {}
    }
}

/// Serialized JSON with DEL and C1 written as `\u00XX` escapes, which `serde_json` leaves raw
/// (it escapes C0 itself): the same document, inert on a terminal.
pub fn escape_json_text(json: &str) -> Cow<'_, str> {
    if !json.chars().any(|c| is_control(c) && u32::from(c) >= 0x7f) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        if is_control(c) && u32::from(c) >= 0x7f {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &str = "ok\u{1b}]0;pwned\u{7}\u{1b}[2J\u{9b}31m\u{7f}\r\nnext\tcol";

    #[test]
    fn every_control_character_becomes_visible_text() {
        let escaped = escape(HOSTILE);
        assert_eq!(
            escaped,
            "ok\\x1b]0;pwned\\x07\\x1b[2J\\u{9b}31m\\x7f\\r\\nnext\\tcol"
        );
        assert!(!has_control(&escaped));
        for c in (0u32..0x20).chain(0x7f..0xa0).filter_map(char::from_u32) {
            assert!(!has_control(&escape(&c.to_string())), "{c:?}");
        }
        // Text without one is borrowed, untouched: letters, accents, emoji, backslashes.
        for plain in ["pve-a", "Größe 5 GiB", "✓ done", "C:\\path", ""] {
            assert!(matches!(escape(plain), Cow::Borrowed(_)), "{plain}");
        }
    }

    #[test]
    fn our_own_line_breaks_can_be_kept() {
        assert_eq!(escape_but_newlines("a\nb\u{1b}c"), "a\nb\\x1bc");
    }

    #[test]
    fn json_strings_and_keys_are_escaped_and_json_text_stays_json() {
        let mut value = serde_json::json!({
            "k\u{1b}": ["x\u{9b}y", {"n": 1, "s": "\u{7}"}],
        });
        escape_json_in_place(&mut value);
        assert_eq!(
            value,
            serde_json::json!({"k\\x1b": ["x\\u{9b}y", {"n": 1, "s": "\\x07"}]})
        );
        let raw = serde_json::to_string(&serde_json::json!({"t": "a\u{9b}b\u{7f}\u{1b}"})).unwrap();
        let text = escape_json_text(&raw);
        assert!(!has_control(&text), "{text}");
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back["t"], "a\u{9b}b\u{7f}\u{1b}");
    }
}
