//! Every command an operator is told to run names a real one: each `bosunctl …`,
//! `bosun-hubd …` and `bosun-agentctl …` written in backticks in the workspace's sources
//! (errors, hints, log lines, report fields, help text, comments) and in `docs/*.md` and
//! `README.md` (code spans and the command lines of fenced blocks) is parsed by that program's own command line, with its placeholders (`FILE`,
//! `HOST`, `<x>`, `{host}`, `…`) given dummy values. A subcommand or option the program does
//! not have, or a value it refuses whatever the placeholder, fails the census with the list.
//!
//! A command named without its required arguments (`bosunctl hosts show`, "run
//! `bosun-hubd cert rotate stage`") still names a real command: a missing argument or
//! subcommand is not a failure here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::error::ErrorKind;

/// The programs the census knows, each with its own command line.
const PROGRAMS: [&str; 3] = ["bosunctl", "bosun-hubd", "bosun-agentctl"];

/// The dummy values a placeholder takes, tried in turn: a word, a number, an id.
const DUMMIES: [&str; 3] = ["x", "1", "00000000-0000-4000-8000-000000000001"];

/// The value a placeholder takes where the program takes only some words there.
fn dummy_for(name: &str, dummy: &'static str) -> &'static str {
    match name {
        "K" | "KIND" => "guest_broken",
        "SHELL" => "bash",
        _ => dummy,
    }
}

/// The most bytes of one file the census reads (the largest source file is far below).
const MAX_FILE: u64 = 4 << 20;

/// A command as written, and where.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Named {
    file: String,
    text: String,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_owned()
}

/// The workspace's members, from its `Cargo.toml`.
fn members(root: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let line = manifest
        .lines()
        .find(|l| l.starts_with("members = ["))
        .expect("the workspace lists its members on one line");
    line.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

fn read(path: &Path) -> String {
    let len = std::fs::metadata(path).unwrap().len();
    assert!(len <= MAX_FILE, "{} is {len} bytes", path.display());
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A Rust file's text with a string's line continuations (`\` at a line's end) and a
/// comment's line breaks (`///`, `//!`, `//` on the next line) joined, so a command written
/// over two lines is one; `\"` as `"`.
fn joined_rust(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let mut line = line.to_owned();
        while let Some(next) = lines.peek() {
            if let Some(kept) = line.strip_suffix('\\') {
                line = format!("{kept}{}", next.trim_start());
            } else if is_comment(&line) && is_comment(next) {
                let rest = next
                    .trim_start()
                    .trim_start_matches('/')
                    .trim_start_matches('!');
                line = format!("{} {}", line.trim_end(), rest.trim());
            } else {
                break;
            }
            lines.next();
        }
        out.push_str(&line.replace("\\\"", "\""));
        out.push('\n');
    }
    out
}

fn is_comment(line: &str) -> bool {
    line.trim_start().starts_with("//")
}

/// A Markdown file's paragraphs as one line each (a code span may wrap), `\|` in tables as
/// `|`; each command line of a fenced block (its `\` continuations joined, its `# comment`
/// cut) as a code span of its own.
fn joined_markdown(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    let mut continued = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push('\n');
            continue;
        }
        if fenced {
            continued.push_str(line.trim());
            if let Some(kept) = continued.strip_suffix('\\') {
                continued = format!("{kept} ");
                continue;
            }
            let command = uncommented(&std::mem::take(&mut continued));
            if !command.contains('`') {
                out.push_str(&format!("\n`{command}`\n"));
            }
            continue;
        }
        if line.trim().is_empty() {
            out.push('\n');
        } else {
            out.push_str(line.trim());
            out.push(' ');
        }
    }
    out.replace("\\|", "|")
}

/// A shell line without its comment (a `#` after a space, outside quotes).
fn uncommented(line: &str) -> String {
    let mut quote = None;
    let mut previous = ' ';
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (None, '\'' | '"') => quote = Some(c),
            (None, '#') if previous.is_whitespace() => return line[..i].trim_end().to_owned(),
            _ => {}
        }
        previous = c;
    }
    line.to_owned()
}

/// `text` with each command substitution (`$(date +%F)`) as `dummy`.
fn fill_substitutions(text: &str, dummy: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("$(") {
        let Some(len) = rest[start..].find(')') else {
            break;
        };
        out.push_str(&rest[..start]);
        out.push_str(dummy);
        rest = &rest[start + len + 1..];
    }
    out.push_str(rest);
    out
}

/// The code spans of each line that name one of the programs, from the program on.
fn commands(file: &str, joined: &str, out: &mut BTreeSet<Named>) {
    for line in joined.lines() {
        for span in line.split('`').skip(1).step_by(2) {
            if let Some(text) = command_in(span) {
                out.insert(Named {
                    file: file.to_owned(),
                    text,
                });
            }
        }
    }
}

/// The command a code span runs: it starts with a program, or runs one after `--` or `sudo
/// -u USER` (`runuser -u bosun-hub -- bosun-hubd init`).
fn command_in(span: &str) -> Option<String> {
    let words: Vec<&str> = span.split_whitespace().collect();
    let start = (0..words.len()).find(|&i| {
        PROGRAMS.contains(&words[i])
            && (i == 0
                || words[i - 1] == "--"
                || (i >= 3 && words[i - 3] == "sudo" && words[i - 2] == "-u"))
    })?;
    // The program's name alone names no command.
    (words.len() > start + 1).then(|| words[start..].join(" "))
}

/// Splits like a shell: whitespace, with '…' and "…" quoting.
fn shell_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote = None;
    let mut any = false;
    for c in text.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                any = false;
            }
            (None, c) => word.push(c),
        }
    }
    if any || !word.is_empty() {
        words.push(word);
    }
    words
}

/// `text` with `<…>` and `{name}` placeholders as `dummy` (a format's bare `{}` is kept:
/// it stands for more arguments).
fn fill_brackets(text: &str, dummy: &str) -> String {
    let mut out = String::new();
    let mut inside: Option<(char, usize)> = None;
    for c in text.chars() {
        match (inside, c) {
            (None, '<') => inside = Some(('>', 0)),
            (None, '{') => inside = Some(('}', 0)),
            (Some(('}', 0)), '}') => {
                out.push_str("{}");
                inside = None;
            }
            (Some((end, _)), c) if c == end => {
                out.push_str(dummy);
                inside = None;
            }
            (Some((end, len)), _) => inside = Some((end, len + 1)),
            (None, c) => out.push(c),
        }
    }
    out
}

/// A word with each upper-case placeholder (`HOST`, `FILE`, `OP_ID`, `H`) as `dummy`, and
/// `…` as `x`: `--plan=FILE`, `TIER=RETENTION`, `FILE.json.sig` and `k=…` alike.
fn fill_word(word: &str, dummy: &'static str) -> String {
    let chars: Vec<char> = word.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let starts = c.is_ascii_uppercase()
            && (i == 0 || !(chars[i - 1].is_ascii_alphanumeric() || chars[i - 1] == '_'));
        if starts {
            let end = (i..chars.len())
                .find(|&j| {
                    !(chars[j].is_ascii_uppercase() || chars[j].is_ascii_digit() || chars[j] == '_')
                })
                .unwrap_or(chars.len());
            let whole = end == chars.len() || !chars[end].is_ascii_lowercase();
            if whole {
                let name: String = chars[i..end].iter().collect();
                out.push_str(dummy_for(&name, dummy));
                i = end;
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    out.replace('…', "x").replace("...", "x")
}

/// Whether `word` stands for any number of arguments: `…`, `ARGS…`, a format's `{}`.
fn more(word: &str) -> bool {
    let stem = word.trim_end_matches('…').trim_end_matches("...");
    matches!(word, "…" | "..." | "{}")
        || (stem.len() < word.len()
            && stem
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
}

/// The argument vectors a written command stands for with `dummy` in its placeholders: one
/// for each alternative of a word written `a|b|c`; cut at a shell pipe or redirection;
/// optional parts (`[--hours N]`) taken; a word for more arguments (`…`, `ARGS…`, `{}`) left
/// out, but a `…` after an option is its value.
fn argvs(text: &str, dummy: &'static str) -> Vec<Vec<String>> {
    let mut words: Vec<String> = Vec::new();
    for word in shell_words(&fill_brackets(&fill_substitutions(text, dummy), dummy)) {
        if matches!(
            word.as_str(),
            "|" | ">" | ">>" | "2>" | "&&" | ";" | "(" | ")"
        ) || word.starts_with("2>")
            || word.starts_with('>')
        {
            break;
        }
        let word = word.trim_matches(|c| matches!(c, '[' | ']' | '(' | ')' | ','));
        let after_option = words.last().is_some_and(|w| w.starts_with('-'));
        if word.is_empty() || (more(word) && !(after_option && word == "…")) {
            continue;
        }
        words.push(word.to_owned());
    }
    let mut out: Vec<Vec<String>> = vec![Vec::new()];
    for word in words {
        let choices: Vec<String> = word.split('|').map(|w| fill_word(w, dummy)).collect();
        out = out
            .into_iter()
            .flat_map(|argv| {
                choices.iter().map(move |choice| {
                    let mut argv = argv.clone();
                    argv.push(choice.clone());
                    argv
                })
            })
            .collect();
    }
    out
}

/// A program's command line, as the program itself parses it.
fn command_line(program: &str) -> clap::Command {
    use clap::CommandFactory as _;
    match program {
        "bosunctl" => bosunctl::cli::Cli::command_line(),
        "bosun-hubd" => bosun_hubd::cli::Cli::command(),
        "bosun-agentctl" => bosun_agentctl::cli::Args::command(),
        other => panic!("no command line for {other}"),
    }
}

/// Why clap refuses `argv`, or `None` when it names a real command (missing arguments and
/// subcommands included).
fn refusal(argv: &[String]) -> Option<String> {
    let err = command_line(&argv[0]).try_get_matches_from(argv).err()?;
    match err.kind() {
        ErrorKind::MissingRequiredArgument
        | ErrorKind::MissingSubcommand
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
        | ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion => None,
        // An option named without its value (`bosunctl secret seal --key`) is a real option.
        ErrorKind::InvalidValue if err.to_string().contains("none was supplied") => None,
        _ => Some(
            err.render()
                .to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned(),
        ),
    }
}

/// Why the written command is refused whatever its placeholders hold, if it is.
fn check(text: &str) -> Option<String> {
    let mut first = None;
    for dummy in DUMMIES {
        let all = argvs(text, dummy);
        let refused: Vec<String> = all
            .iter()
            .filter_map(|argv| refusal(argv).map(|why| format!("{}: {why}", argv.join(" "))))
            .collect();
        if refused.is_empty() {
            return None;
        }
        first.get_or_insert(refused.join("; "));
    }
    first
}

/// Every command named in the sources and the docs.
fn census(root: &Path) -> BTreeSet<Named> {
    let mut named = BTreeSet::new();
    for member in members(root) {
        let mut files = Vec::new();
        rust_files(&root.join(&member).join("src"), &mut files);
        for path in files {
            let file = path.strip_prefix(root).unwrap().display().to_string();
            commands(&file, &joined_rust(&read(&path)), &mut named);
        }
    }
    let mut docs = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            docs.push(path);
        }
    }
    for path in docs {
        let file = path.strip_prefix(root).unwrap().display().to_string();
        commands(&file, &joined_markdown(&read(&path)), &mut named);
    }
    named
}

#[test]
fn every_command_the_sources_and_docs_name_parses() {
    let named = census(&workspace());
    // The census reads what it should: each program named, in sources and docs alike.
    for program in PROGRAMS {
        let count = named
            .iter()
            .filter(|n| n.text.starts_with(&format!("{program} ")))
            .count();
        assert!(count >= 5, "only {count} `{program} …` found");
    }
    assert!(named.iter().any(|n| n.file.ends_with(".md")));
    assert!(named.iter().any(|n| n.file.ends_with(".rs")));
    let failures: Vec<String> = named
        .iter()
        .filter_map(|n| check(&n.text).map(|why| format!("{}: `{}`\n    {why}", n.file, n.text)))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} commands named do not parse:\n{}",
        failures.len(),
        named.len(),
        failures.join("\n")
    );
}

#[test]
fn the_census_catches_a_command_that_does_not_exist_and_reads_placeholders() {
    // What it refuses: a subcommand, an option or a value the program does not have.
    assert!(check("bosunctl plan sign").is_some());
    assert!(check("bosunctl hosts list --no-such-option").is_some());
    assert!(check("bosun-hubd cert rotate spin").is_some());
    assert!(check("bosun-agentctl escrow create --sheets DIR").is_some());
    assert!(check("bosunctl alerts ack --host H --kind no_such_kind --note x").is_some());
    assert!(check("bosunctl status HOST").is_some());
    assert!(check("bosunctl job submit --kind force-backup").is_some());
    // What it takes: placeholders, alternatives, optional parts, a command named bare.
    for fine in [
        "bosunctl policy sign-plan --host HOST -f KEY --plan FILE",
        "bosunctl hosts label HOST k=v … [--remove k]",
        "bosunctl desired get|diff HOST",
        "bosunctl alerts silence --host H [--kind K] --for 7d --reason TEXT",
        "bosunctl hosts approve {host_id} --recipient {recipient}",
        "bosunctl job submit FILE.json FILE.json.sig",
        "bosunctl alerts unsilence ID",
        "bosunctl hosts list FILTERS…",
        "bosunctl secret seal {}",
        "bosunctl secret seal --key",
        "bosunctl golden sign --volid … --sha256 … -f KEY -o golden.json",
        "bosunctl hosts show",
        "bosunctl completions bash > ~/.local/share/bash-completion/completions/bosunctl",
        "bosun-hubd cert rotate document --out FILE --host <host id>",
        "bosun-agentctl explain OP_ID",
    ] {
        assert_eq!(check(fine), None, "{fine}");
    }
    // Where it looks: spans in comments and strings over several lines, sudo and `--`.
    let rust =
        "/// run `bosunctl hosts\n/// show HOST`\nlet s = \"see `bosunctl \\\n     plan sign`\";\n";
    let mut found = BTreeSet::new();
    commands("x.rs", &joined_rust(rust), &mut found);
    let texts: Vec<&str> = found.iter().map(|n| n.text.as_str()).collect();
    assert_eq!(texts, ["bosunctl hosts show HOST", "bosunctl plan sign"]);
    let markdown = "Run `sudo -u bosun bosun-agentctl\nstatus` or\n\n```sh\nbosunctl hosts \\\n  show pve3   # `bosunctl` says\necho '#' bosunctl no\n```\n`runuser -u bosun-hub -- bosun-hubd init`, not `journalctl -u bosun-hubd -f`.";
    let mut found = BTreeSet::new();
    commands("x.md", &joined_markdown(markdown), &mut found);
    let texts: Vec<&str> = found.iter().map(|n| n.text.as_str()).collect();
    assert_eq!(
        texts,
        [
            "bosun-agentctl status",
            "bosun-hubd init",
            "bosunctl hosts show pve3"
        ]
    );
    assert_eq!(
        check("bosun-hubd backup --out /var/backups/hub-$(date +%F %H).tar"),
        None
    );
}
