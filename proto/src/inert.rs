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
//! line it prints, the dashboard for every page. A control character, here, is every character
//! of Unicode's `Cc` category — C0 (U+0000–U+001F), DEL (U+007F) and C1 (U+0080–U+009F) — and
//! every character of its `Cf` category, the invisible format characters ([`FORMAT`]): the
//! bidirectional embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069) that make a
//! host name read backwards, the zero-width space and joiners (U+200B–U+200F), the word joiner
//! and invisible operators (U+2060–U+2064), the byte order mark (U+FEFF), the soft hyphen
//! (U+00AD), the Arabic letter mark (U+061C), the Mongolian vowel separator (U+180E) and the
//! tag characters (U+E0001, U+E0020–U+E007F). Each becomes visible text: `\n`, `\r`, `\t`,
//! `\x1b` for the rest of C0 and DEL, `\u{9b}` for C1, `\u{202e}` for a format character. A
//! backslash is left as it is: the result is for reading, not for decoding back. A name (a host
//! name, a guest's hostname, a storage id) refuses them all ([`has_control`]).

use std::borrow::Cow;
use std::fmt::Write as _;

/// Unicode's `Cf` (format) category, as closed ranges in order: invisible characters that
/// change how the text around them is shown (its direction, its joins, its breaks) or show
/// nothing at all. Unicode 18.0; the test compares it with the `unicode-properties` crate's
/// table for every character, so a new Unicode version that adds one fails it.
pub const FORMAT: [(char, char); 21] = [
    ('\u{ad}', '\u{ad}'),
    ('\u{600}', '\u{605}'),
    ('\u{61c}', '\u{61c}'),
    ('\u{6dd}', '\u{6dd}'),
    ('\u{70f}', '\u{70f}'),
    ('\u{890}', '\u{891}'),
    ('\u{8e2}', '\u{8e2}'),
    ('\u{180e}', '\u{180e}'),
    ('\u{200b}', '\u{200f}'),
    ('\u{202a}', '\u{202e}'),
    ('\u{2060}', '\u{2064}'),
    ('\u{2066}', '\u{206f}'),
    ('\u{feff}', '\u{feff}'),
    ('\u{fff9}', '\u{fffb}'),
    ('\u{110bd}', '\u{110bd}'),
    ('\u{110cd}', '\u{110cd}'),
    ('\u{13430}', '\u{1343f}'),
    ('\u{1bca0}', '\u{1bca3}'),
    ('\u{1d173}', '\u{1d17a}'),
    ('\u{e0001}', '\u{e0001}'),
    ('\u{e0020}', '\u{e007f}'),
];

/// Whether `c` is an invisible format character (Unicode's `Cf`, [`FORMAT`]).
pub fn is_format(c: char) -> bool {
    if c < '\u{ad}' {
        return false;
    }
    FORMAT
        .binary_search_by(|&(first, last)| {
            if last < c {
                std::cmp::Ordering::Less
            } else if first > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// Whether `c` is a control character in this module's sense: C0, DEL or C1 (Unicode's `Cc`)
/// or an invisible format character (`Cf`, [`is_format`]).
pub fn is_control(c: char) -> bool {
    c.is_control() || is_format(c)
}

/// Whether `text` holds a control character ([`is_control`]).
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

/// Serialized JSON with DEL, C1 and the format characters written as `\uXXXX` escapes (a
/// surrogate pair beyond the first plane), which `serde_json` leaves raw (it escapes C0
/// itself): the same document, inert on a terminal.
pub fn escape_json_text(json: &str) -> Cow<'_, str> {
    let raw = |c: char| is_control(c) && u32::from(c) >= 0x7f;
    if !json.chars().any(raw) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        if raw(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
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

    /// Every bidirectional embedding, override and isolate.
    const BIDI: [char; 9] = [
        '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}', '\u{202e}', '\u{2066}', '\u{2067}',
        '\u{2068}', '\u{2069}',
    ];

    #[test]
    fn every_bidirectional_control_becomes_visible_text() {
        for c in BIDI {
            assert!(is_format(c) && is_control(c), "{c:?}");
            let name = format!("pve-{c}kcab");
            let escaped = escape(&name);
            assert_eq!(escaped, format!("pve-\\u{{{:x}}}kcab", u32::from(c)));
            assert!(!has_control(&escaped), "{escaped}");
            assert!(!escaped.contains(c));
        }
        assert_eq!(escape("pve-\u{202e}a-evp"), "pve-\\u{202e}a-evp");
    }

    #[test]
    fn invisible_format_characters_become_visible_text() {
        let sample = [
            ('\u{ad}', "\\u{ad}"),
            ('\u{61c}', "\\u{61c}"),
            ('\u{180e}', "\\u{180e}"),
            ('\u{200b}', "\\u{200b}"),
            ('\u{200d}', "\\u{200d}"),
            ('\u{200f}', "\\u{200f}"),
            ('\u{2060}', "\\u{2060}"),
            ('\u{2064}', "\\u{2064}"),
            ('\u{feff}', "\\u{feff}"),
            ('\u{e0001}', "\\u{e0001}"),
            ('\u{e0041}', "\\u{e0041}"),
            ('\u{e007f}', "\\u{e007f}"),
        ];
        for (c, shown) in sample {
            assert!(is_format(c), "{c:?}");
            assert_eq!(escape(&format!("a{c}b")), format!("a{shown}b"));
        }
        // Their neighbours are visible and stay as they are.
        for plain in [
            '\u{ac}',
            '\u{ae}',
            '\u{200a}',
            '\u{2010}',
            '\u{2065}',
            '\u{e0000}',
            '\u{e0080}',
            'é',
            '→',
        ] {
            assert!(!is_control(plain), "{plain:?}");
            assert!(matches!(escape(&plain.to_string()), Cow::Borrowed(_)));
        }
    }

    #[test]
    fn the_format_table_is_unicodes_cf_category() {
        use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};
        assert!(
            FORMAT.windows(2).all(|w| w[0].1 < w[1].0),
            "sorted, disjoint"
        );
        let mut count = 0;
        for c in (0..=u32::from(char::MAX)).filter_map(char::from_u32) {
            let cf = c.general_category() == GeneralCategory::Format;
            assert_eq!(is_format(c), cf, "{c:?} (U+{:04X})", u32::from(c));
            count += usize::from(cf);
        }
        assert_eq!(
            count,
            FORMAT
                .iter()
                .map(|&(a, b)| (u32::from(b) - u32::from(a) + 1) as usize)
                .sum::<usize>()
        );
    }

    #[test]
    fn json_text_writes_format_characters_as_escapes() {
        let raw = serde_json::to_string(&serde_json::json!({"t": "a\u{202e}b\u{e0041}c"})).unwrap();
        let text = escape_json_text(&raw);
        assert_eq!(text, r#"{"t":"a\u202eb\udb40\udc41c"}"#);
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back["t"], "a\u{202e}b\u{e0041}c");
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
