//! Ids an operator can type back: every view shows an id whole or as its shortest prefix that is
//! unique among the ids of its kind shown at that moment (never shorter than [`MIN_SHOWN`]), and
//! every command accepts an unambiguous prefix back, as git does with commit hashes.
//!
//! A prefix is compared with the id's hyphenated lowercase form (`6ac09cbf-…`), so what a view
//! prints is what matches; case and hyphens typed in other places are forgiven.

use uuid::Uuid;

/// The shortest prefix a view shows.
pub const MIN_SHOWN: usize = 8;
/// The shortest prefix a command accepts (hex digits, hyphens not counted).
pub const MIN_TYPED: usize = 4;

/// The length of the prefix that tells every id of `ids` apart (at least [`MIN_SHOWN`], at
/// most the whole hyphenated id).
pub fn unique_len<'a>(ids: impl IntoIterator<Item = &'a Uuid>) -> usize {
    let mut all: Vec<String> = ids.into_iter().map(Uuid::to_string).collect();
    all.sort_unstable();
    all.dedup();
    let common = |a: &str, b: &str| a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    all.windows(2)
        .map(|w| common(&w[0], &w[1]) + 1)
        .max()
        .unwrap_or(0)
        .clamp(MIN_SHOWN, 36)
}

/// `id` cut to `len` characters of its hyphenated form.
pub fn shown(id: &Uuid, len: usize) -> String {
    let mut text = id.to_string();
    text.truncate(len.clamp(MIN_SHOWN, 36));
    text
}

/// `text` as an id prefix, normalized (lowercase hex, hyphens dropped), when it is one: at least
/// [`MIN_TYPED`] and at most 32 hex digits, hyphens only between them.
pub fn as_prefix(text: &str) -> Option<String> {
    let text = text.trim();
    if text.starts_with('-') || text.ends_with('-') {
        return None;
    }
    let hex: String = text.chars().filter(|c| *c != '-').collect();
    (hex.len() >= MIN_TYPED && hex.len() <= 32 && hex.chars().all(|c| c.is_ascii_hexdigit()))
        .then(|| hex.to_ascii_lowercase())
}

/// `prefix` (as [`as_prefix`] gives it) in the hyphenated form ids are stored and shown in
/// (`01a213eb7` → `01a213eb-7`), so a store can compare it with the start of a stored id.
pub fn hyphenated(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + 4);
    for (index, c) in prefix.chars().enumerate() {
        if matches!(index, 8 | 12 | 16 | 20) {
            out.push('-');
        }
        out.push(c);
    }
    out
}

/// Most candidates an answer to an ambiguous prefix lists (the rest are counted).
pub const MAX_CANDIDATES: usize = 10;

/// Whether `id` starts with `prefix` (as [`as_prefix`] gives it).
pub fn has_prefix(id: &Uuid, prefix: &str) -> bool {
    id.simple().to_string().starts_with(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(text: &str) -> Uuid {
        Uuid::parse_str(text).unwrap()
    }

    #[test]
    fn the_shown_prefix_grows_until_every_id_is_told_apart() {
        let a = id("01a213eb-0000-4000-8000-000000000001");
        let b = id("01a213eb-0000-4000-8000-000000000002");
        let c = id("6ac09cbf-1111-4000-8000-000000000000");
        assert_eq!(unique_len([&c]), MIN_SHOWN);
        assert_eq!(unique_len([&a, &c]), MIN_SHOWN);
        let len = unique_len([&a, &b, &c]);
        assert_eq!(len, 36);
        assert_ne!(shown(&a, len), shown(&b, len));
        let d = id("01a213eb-7000-4000-8000-000000000002");
        let len = unique_len([&a, &d]);
        assert_eq!(shown(&a, len), "01a213eb-0");
        assert_eq!(shown(&d, len), "01a213eb-7");
        assert_eq!(unique_len([&a, &a]), MIN_SHOWN);
    }

    #[test]
    fn a_typed_prefix_matches_its_id_whatever_the_case_and_hyphens() {
        let a = id("01a213eb-7000-4000-8000-000000000002");
        for typed in ["01a213eb", "01A213EB-7", "01a213eb7", "01a2"] {
            let p = as_prefix(typed).unwrap_or_else(|| panic!("{typed}"));
            assert!(has_prefix(&a, &p), "{typed}");
        }
        assert!(!has_prefix(&a, &as_prefix("01a213eb-8").unwrap()));
        for typed in [
            "01a2",
            "01a213eb",
            "01a213eb7",
            "01a213eb-7000-4",
            &a.to_string(),
        ] {
            let h = hyphenated(&as_prefix(typed).unwrap());
            assert!(a.to_string().starts_with(&h), "{typed} -> {h}");
        }
        for bad in ["01a", "web-1", "-01a2", "01a2-", "", "g1a213eb"] {
            assert_eq!(as_prefix(bad), None, "{bad}");
        }
    }
}
