//! Section 5 man pages of the configuration files (`agent.toml(5)`, `hub.toml(5)`), from a
//! description of every key that the crate owning the parser keeps beside it, and the check
//! that holds the description to the parser: every key described parses, and every key the
//! parser takes is described ([`check_against_parser`]). A key added to a config struct
//! without a line here fails that crate's tests, so the page cannot drift from the file.

use std::path::{Path, PathBuf};

use crate::ClidocError;

/// One key of a table.
#[derive(Debug, Clone, Copy)]
pub struct ConfigKey {
    /// The key as written in the file.
    pub key: &'static str,
    /// Its type as an operator reads it (`path`, `integer (ms)`, `string`, …).
    pub kind: &'static str,
    /// What holds when the key is absent, in words (`30000`, `none: not served`, `required`).
    pub default: &'static str,
    /// A value the parser accepts, as TOML (`"/etc/bosun/pve-token"`, `30000`).
    pub example: &'static str,
    /// What it means.
    pub doc: &'static str,
}

/// One key's line: name, type, default, a value the parser takes, meaning (a free function,
/// so the pages' `const` tables read as one call a key).
pub const fn config_key(
    key: &'static str,
    kind: &'static str,
    default: &'static str,
    example: &'static str,
    doc: &'static str,
) -> ConfigKey {
    ConfigKey {
        key,
        kind,
        default,
        example,
        doc,
    }
}

/// One table of the file; the top level is the table named `""`.
#[derive(Debug, Clone, Copy)]
pub struct ConfigTable {
    /// `hub`, `local_api`, or `""` for the keys before the first table.
    pub name: &'static str,
    /// What the table is for, and what its absence means.
    pub doc: &'static str,
    /// Its keys, in the order the page lists them.
    pub keys: &'static [ConfigKey],
}

/// A configuration file's man page.
#[derive(Debug, Clone, Copy)]
pub struct ConfigPage {
    /// The file's name, which names the page (`agent.toml`).
    pub name: &'static str,
    /// The NAME line's summary.
    pub summary: &'static str,
    /// The SYNOPSIS: where the file lives.
    pub path: &'static str,
    /// DESCRIPTION paragraphs.
    pub description: &'static [&'static str],
    /// The tables.
    pub tables: &'static [ConfigTable],
    /// `(path, what it holds)`.
    pub files: &'static [(&'static str, &'static str)],
    /// A minimal working file, shown verbatim under EXAMPLES.
    pub example: &'static str,
    /// Pages referred to, as `name(section)`.
    pub see_also: &'static [&'static str],
}

impl ConfigPage {
    /// The page as roff, dated `date` (`YYYY-MM-DD`).
    pub fn roff(&self, date: &str) -> String {
        let mut out = String::new();
        let title = self.name.to_uppercase();
        out.push_str(&format!(
            ".TH {} 5 {} {} \"File Formats\"\n",
            quoted(&title),
            quoted(date),
            quoted("Bosun")
        ));
        out.push_str(".SH NAME\n");
        out.push_str(&format!(
            "{} \\- {}\n",
            escape(self.name),
            escape(self.summary)
        ));
        out.push_str(&format!(".SH SYNOPSIS\n.B {}\n", escape(self.path)));
        out.push_str(".SH DESCRIPTION\n");
        for (i, paragraph) in self.description.iter().enumerate() {
            if i > 0 {
                out.push_str(".PP\n");
            }
            out.push_str(&escape(paragraph));
            out.push('\n');
        }
        for table in self.tables {
            let heading = if table.name.is_empty() {
                "Top level".to_owned()
            } else {
                format!("[{}]", table.name)
            };
            out.push_str(&format!(".SS {}\n", quoted(&heading)));
            out.push_str(&escape(table.doc));
            out.push('\n');
            for key in table.keys {
                out.push_str(&format!(
                    ".TP\n.BR {} {}\n",
                    quoted(key.key),
                    quoted(&format!(" ({})", key.kind))
                ));
                out.push_str(&escape(key.doc));
                out.push_str(&format!("\n.br\nDefault: {}.\n", escape(key.default)));
            }
        }
        out.push_str(".SH FILES\n");
        for (path, text) in self.files {
            out.push_str(&format!(".TP\n.B {}\n{}\n", escape(path), escape(text)));
        }
        out.push_str(".SH EXAMPLES\nA minimal file:\n.PP\n.nf\n.RS 4\n");
        for line in self.example.lines() {
            out.push_str(&escape(line));
            out.push('\n');
        }
        out.push_str(".RE\n.fi\n.SH SEE ALSO\n");
        let refs: Vec<String> = self
            .see_also
            .iter()
            .map(|r| match r.split_once('(') {
                Some((name, section)) => format!(".BR {} ({}", escape(name), escape(section)),
                None => format!(".B {}", escape(r)),
            })
            .collect();
        out.push_str(&refs.join(" ,\n"));
        out.push('\n');
        out
    }

    /// The TOML document that sets every key described to its example.
    pub fn every_key_document(&self) -> String {
        self.document_with(None)
    }

    /// The document with every key, plus `probe = 0` in the table named `probe_table`.
    fn document_with(&self, probe_table: Option<&str>) -> String {
        self.document(probe_table, None)
    }

    /// The document with every key at its example, plus `probe = 0` in the table named
    /// `probe_table`; `instead` gives one key (table, key) another value, or leaves it out.
    fn document(
        &self,
        probe_table: Option<&str>,
        instead: Option<(&str, &str, Option<&str>)>,
    ) -> String {
        let mut doc = String::new();
        // The top level comes first, whatever the order of the tables.
        let (top, rest): (Vec<&ConfigTable>, Vec<&ConfigTable>) =
            self.tables.iter().partition(|t| t.name.is_empty());
        for table in top.into_iter().chain(rest) {
            if !table.name.is_empty() {
                doc.push_str(&format!("\n[{}]\n", table.name));
            }
            for key in table.keys {
                let value = match instead {
                    Some((t, k, value)) if t == table.name && k == key.key => value,
                    _ => Some(key.example),
                };
                if let Some(value) = value {
                    doc.push_str(&format!("{} = {}\n", key.key, value));
                }
            }
            if probe_table == Some(table.name) {
                doc.push_str(&format!("{PROBE} = 0\n"));
            }
        }
        doc
    }

    /// The stated default of `key` (in `table`) as a TOML value, when it is one: a number,
    /// `true` or `false`, an empty array (`[]`, `empty: …`), or for a path, string or
    /// address a single word that names no other key (`/var/lib/bosun`, `127.0.0.1:9101`,
    /// `vmbr0`). `None` for words (`required`, `none: …`, `hub.url`, `40, or rate_per_s if
    /// higher`): [`check_defaults`] leaves those to the prose.
    pub fn default_literal(&self, key: &ConfigKey) -> Option<String> {
        let default = key.default.trim();
        if default.parse::<i64>().is_ok() || default == "true" || default == "false" {
            return Some(default.to_owned());
        }
        if default == "[]" || default.starts_with("empty") {
            return Some("[]".to_owned());
        }
        let textual = ["path", "string", "IP address", "socket address"]
            .iter()
            .any(|kind| key.kind.starts_with(kind));
        let names_a_key = default.split_once('.').is_some_and(|(table, rest)| {
            self.tables
                .iter()
                .any(|t| t.name == table && t.keys.iter().any(|k| k.key == rest))
        });
        let one_word = !default.is_empty()
            && !default.contains(char::is_whitespace)
            && !default.contains(['"', '\\', ','])
            && !default.starts_with("none")
            && !default.starts_with("required");
        (textual && one_word && !names_a_key).then(|| format!("\"{default}\""))
    }
}

/// Holds each stated default to the code: `effective` loads a TOML document the way the
/// program does (its defaults applied, its values checked) and gives the settings it ends with
/// as text (their `Debug`). For every key whose default is a value ([`ConfigPage::default_literal`]),
/// the document of every key with that key left out must load to the same settings as with the
/// key set to the stated default. Returns what is wrong, empty when every stated default is
/// the code's.
pub fn check_defaults(
    page: &ConfigPage,
    effective: impl Fn(&str) -> Result<String, String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for table in page.tables {
        for key in table.keys {
            let Some(literal) = page.default_literal(key) else {
                continue;
            };
            let label = if table.name.is_empty() {
                key.key.to_owned()
            } else {
                format!("[{}] {}", table.name, key.key)
            };
            let left_out = page.document(None, Some((table.name, key.key, None)));
            let stated = page.document(None, Some((table.name, key.key, Some(&literal))));
            match (effective(&left_out), effective(&stated)) {
                (Ok(code), Ok(page_says)) if code == page_says => {}
                (Ok(_), Ok(_)) => problems.push(format!(
                    "{label}: the page says the default is {}, the code's is another",
                    key.default
                )),
                (Err(e), _) => {
                    problems.push(format!("{label}: left out, the file does not load: {e}"))
                }
                (_, Err(e)) => problems.push(format!(
                    "{label}: set to the stated default {literal}, the file does not load: {e}"
                )),
            }
        }
    }
    problems
}

/// The key [`check_against_parser`] adds to learn which keys a table takes.
const PROBE: &str = "bosun_doc_probe";

/// Holds `page` to the parser: `parse` reads a TOML document with the crate's own config
/// types (strict about unknown keys) and returns the error's text. The document with every
/// described key must parse; with an unknown key added to a table, the parser's error names
/// the keys that table takes, which must be the described ones (the top level's also name
/// the tables). Returns what is wrong, empty when the page and the parser agree.
pub fn check_against_parser(
    page: &ConfigPage,
    parse: impl Fn(&str) -> Result<(), String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let full = page.every_key_document();
    if let Err(e) = parse(&full) {
        problems.push(format!(
            "the document of every described key does not parse: {e}\n{full}"
        ));
        return problems;
    }
    for table in page.tables {
        let mut described: Vec<&str> = table.keys.iter().map(|k| k.key).collect();
        if table.name.is_empty() {
            described.extend(page.tables.iter().map(|t| t.name).filter(|n| !n.is_empty()));
        }
        described.sort_unstable();
        let label = if table.name.is_empty() {
            "the top level"
        } else {
            table.name
        };
        let doc = page.document_with(Some(table.name));
        let taken = match parse(&doc) {
            Ok(()) => {
                problems.push(format!("[{label}] takes unknown keys: it is not strict"));
                continue;
            }
            Err(e) => expected_fields(&e),
        };
        let Some(mut taken) = taken else {
            problems.push(format!("[{label}]: no list of keys in the error: {doc}"));
            continue;
        };
        taken.sort_unstable();
        let missing: Vec<&String> = taken
            .iter()
            .filter(|k| !described.contains(&k.as_str()))
            .collect();
        let extra: Vec<&&str> = described
            .iter()
            .filter(|k| !taken.iter().any(|t| t == *k))
            .collect();
        if !missing.is_empty() {
            problems.push(format!("[{label}] keys without documentation: {missing:?}"));
        }
        if !extra.is_empty() {
            problems.push(format!(
                "[{label}] documents keys it does not take: {extra:?}"
            ));
        }
    }
    problems
}

/// The keys serde lists in its unknown-field error for [`PROBE`] (``unknown field `x`,
/// expected one of `a`, `b` ``, ``expected `a` ``, or ``there are no fields``).
fn expected_fields(message: &str) -> Option<Vec<String>> {
    let marker = format!("unknown field `{PROBE}`, ");
    let start = message.find(&marker)? + marker.len();
    let rest = message[start..].lines().next()?;
    if rest.starts_with("there are no fields") {
        return Some(Vec::new());
    }
    Some(
        rest.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect(),
    )
}

/// Writes `page` as `<dir>/<name>.5` and returns its path.
pub fn write_config_page(
    page: &ConfigPage,
    dir: &Path,
    date: &str,
) -> Result<PathBuf, ClidocError> {
    std::fs::create_dir_all(dir).map_err(|source| ClidocError::ManDir {
        path: dir.to_owned(),
        source,
    })?;
    let path = dir.join(format!("{}.5", page.name));
    std::fs::write(&path, page.roff(date)).map_err(|source| ClidocError::ManPage {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

/// `text` as roff running text: backslashes and hyphens escaped, and a line that would start
/// with a control character (`.` or `'`) guarded.
fn escape(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    escaped
        .lines()
        .map(|line| {
            if line.starts_with('.') || line.starts_with('\'') {
                format!("\\&{line}")
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `text` as one roff macro argument.
fn quoted(text: &str) -> String {
    format!("\"{}\"", escape(text).replace('"', "\\(dq"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: ConfigPage = ConfigPage {
        name: "demo.toml",
        summary: "a demo",
        path: "/etc/demo.toml",
        description: &["The file.", ".starts with a dot"],
        tables: &[
            ConfigTable {
                name: "",
                doc: "Top.",
                keys: &[ConfigKey {
                    key: "dir",
                    kind: "path",
                    default: "/var/lib/demo",
                    example: "\"/srv\"",
                    doc: "Where it keeps state.",
                }],
            },
            ConfigTable {
                name: "net",
                doc: "Networking.",
                keys: &[ConfigKey {
                    key: "port",
                    kind: "integer",
                    default: "8443",
                    example: "1",
                    doc: "The port.",
                }],
            },
        ],
        files: &[("/etc/demo.toml", "this file")],
        example: "dir = \"/srv\"\n[net]\nport = 1",
        see_also: &["demo(1)", "toml"],
    };

    #[test]
    fn the_page_has_its_sections_and_every_key() {
        let roff = PAGE.roff("2024-01-02");
        assert!(
            roff.starts_with(".TH \"DEMO.TOML\" 5 \"2024\\-01\\-02\""),
            "{roff}"
        );
        for section in [
            "NAME",
            "SYNOPSIS",
            "DESCRIPTION",
            "FILES",
            "EXAMPLES",
            "SEE ALSO",
        ] {
            assert!(roff.contains(&format!(".SH {section}\n")), "{section}");
        }
        assert!(roff.contains(".SS \"[net]\""));
        assert!(roff.contains(".BR \"port\" \" (integer)\""), "{roff}");
        assert!(roff.contains("Default: 8443."));
        assert!(roff.contains("\n\\&.starts with a dot\n"), "{roff}");
        assert!(roff.contains(".BR demo (1)"));
    }

    #[test]
    fn serde_key_lists_are_read_from_its_message() {
        let msg = "TOML parse error at line 3\n  |\nunknown field `bosun_doc_probe`, expected one of `a`, `b_c`\n";
        assert_eq!(expected_fields(msg), Some(vec!["a".into(), "b_c".into()]));
        let one = "unknown field `bosun_doc_probe`, expected `a`";
        assert_eq!(expected_fields(one), Some(vec!["a".into()]));
        let none = "unknown field `bosun_doc_probe`, there are no fields";
        assert_eq!(expected_fields(none), Some(vec![]));
        assert_eq!(expected_fields("invalid type"), None);
    }

    #[test]
    fn a_stated_default_the_code_does_not_have_is_named() {
        // A loader whose `dir` defaults to /var/lib/demo, as the page says, and whose
        // `[net] port` defaults to `default_port`.
        let load = |default_port: &'static str| {
            move |doc: &str| -> Result<String, String> {
                let value = |key: &str| {
                    doc.lines()
                        .find_map(|l| l.strip_prefix(&format!("{key} = ")))
                        .map(|v| v.trim_matches('"').to_owned())
                };
                let dir = value("dir").unwrap_or_else(|| "/var/lib/demo".to_owned());
                let port = value("port").unwrap_or_else(|| default_port.to_owned());
                Ok(format!("{dir} {port}"))
            }
        };
        assert!(check_defaults(&PAGE, load("8443")).is_empty());
        let problems = check_defaults(&PAGE, load("8080"));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("[net] port: the page says the default is 8443"),
            "{problems:?}"
        );
        let words = ConfigKey {
            key: "k",
            kind: "string",
            default: "net.port",
            example: "\"x\"",
            doc: "",
        };
        assert_eq!(PAGE.default_literal(&words), None, "names another key");
        let none = ConfigKey {
            default: "none: not served",
            ..words
        };
        assert_eq!(PAGE.default_literal(&none), None);
        let empty = ConfigKey {
            kind: "array of paths",
            default: "empty: none allowed",
            ..words
        };
        assert_eq!(PAGE.default_literal(&empty).as_deref(), Some("[]"));
    }

    #[test]
    fn the_check_names_undocumented_and_unknown_keys() {
        // A parser that takes `dir`, `net` and `[net] port, host`.
        let parse = |doc: &str| -> Result<(), String> {
            let mut table = "";
            for line in doc.lines().filter(|l| !l.trim().is_empty()) {
                if let Some(name) = line.strip_prefix('[') {
                    table = name.trim_end_matches(']');
                    continue;
                }
                let key = line.split(" = ").next().unwrap_or_default();
                let taken: &[&str] = if table.is_empty() {
                    &["dir", "net"]
                } else {
                    &["port", "host"]
                };
                if !taken.contains(&key) {
                    let list: Vec<String> = taken.iter().map(|k| format!("`{k}`")).collect();
                    return Err(format!(
                        "unknown field `{key}`, expected one of {}",
                        list.join(", ")
                    ));
                }
            }
            Ok(())
        };
        let problems = check_against_parser(&PAGE, parse);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("[net] keys without documentation: [\"host\"]"));
    }
}
