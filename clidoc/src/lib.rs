//! Shell completions and man pages for Bosun's binaries, generated from their clap
//! definitions, so the command line has one source: `bosunctl`, `bosun-agentd`,
//! `bosun-agentctl` and `bosun-hubd` each take [`CompletionsArgs`] (`completions SHELL`, the
//! script on stdout)
//! and [`ManArgs`] (`man --dir DIR`, one roff page per command and subcommand) and pass their
//! own `clap::Command` to [`write_completions`] and [`write_man_pages`]. The Debian packages
//! run the built binaries to make the files they install (`scripts/build-debs`,
//! docs/decisions/0015-completions-and-man-pages.md).

mod config_page;

pub use config_page::{
    ConfigKey, ConfigPage, ConfigTable, check_against_parser, check_defaults, config_key,
    write_config_page,
};

use std::io::Write;
use std::path::{Path, PathBuf};

pub use clap_complete::Shell;

/// `completions SHELL`: print the shell's completion script.
#[derive(Debug, Clone, clap::Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// `man --dir DIR`: write the man pages.
#[derive(Debug, Clone, clap::Args)]
pub struct ManArgs {
    /// The directory the pages are written to (created if missing): `NAME.1` for the
    /// command, `NAME-SUB.1` for each subcommand, `NAME-SUB-SUB.1` below that.
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// The date the pages carry, `YYYY-MM-DD` [default: `$SOURCE_DATE_EPOCH`'s, else today's].
    #[arg(long, value_name = "YYYY-MM-DD", value_parser = parse_date)]
    pub date: Option<String>,
}

impl ManArgs {
    /// The pages' date: `--date`, else the day of `$SOURCE_DATE_EPOCH` (reproducible builds),
    /// else today (UTC).
    pub fn date(&self) -> String {
        if let Some(date) = &self.date {
            return date.clone();
        }
        let epoch = std::env::var("SOURCE_DATE_EPOCH")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs())
            });
        civil_date(epoch / 86_400)
    }
}

/// Accepts `YYYY-MM-DD`.
fn parse_date(text: &str) -> Result<String, String> {
    let ok = text.len() == 10
        && text.char_indices().all(|(i, c)| match i {
            4 | 7 => c == '-',
            _ => c.is_ascii_digit(),
        });
    if ok {
        Ok(text.to_owned())
    } else {
        Err(format!("{text:?} is not YYYY-MM-DD"))
    }
}

/// The proleptic Gregorian date `days` days after 1970-01-01, `YYYY-MM-DD` (the inverse of
/// the well-known days-from-civil computation over 400-year eras).
fn civil_date(days: u64) -> String {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// Where writing completions or man pages failed.
#[derive(Debug, thiserror::Error)]
pub enum ClidocError {
    /// The completion script could not be written.
    #[error("writing the {shell} completion script")]
    Completions {
        /// The shell.
        shell: Shell,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The man page directory could not be created.
    #[error("creating the man page directory {}", path.display())]
    ManDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A man page could not be rendered or written.
    #[error("writing the man page {}", path.display())]
    ManPage {
        /// The page.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl ClidocError {
    /// Whether the failure is stdout's reader going away (`… completions bash | head`),
    /// which a binary treats as success, not as an error.
    pub fn is_closed_pipe(&self) -> bool {
        matches!(self, Self::Completions { source, .. }
            if source.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

/// The completion script of `cmd` for `shell`, as bytes.
pub fn completions(mut cmd: clap::Command, shell: Shell) -> Vec<u8> {
    let name = cmd.get_name().to_owned();
    let mut script = Vec::new();
    // clap_complete panics when its writer fails; a Vec does not fail.
    clap_complete::generate(shell, &mut cmd, name, &mut script);
    script
}

/// Writes the completion script of `cmd` for `shell` to `out`.
pub fn write_completions(
    cmd: clap::Command,
    shell: Shell,
    out: &mut dyn Write,
) -> Result<(), ClidocError> {
    out.write_all(&completions(cmd, shell))
        .and_then(|()| out.flush())
        .map_err(|source| ClidocError::Completions { shell, source })
}

/// What a program's man pages say besides what clap knows: how it exits, what it reads from
/// the environment and the file system, and examples. EXIT STATUS, ENVIRONMENT and FILES go
/// on every page of the program; EXAMPLES are per page, a page without its own showing the
/// program's (those of its top page).
#[derive(Debug, Clone, Copy, Default)]
pub struct ManExtras<'a> {
    /// `(status, meaning)`, e.g. `(4, "a local input file is unreadable or invalid")`.
    pub exit_status: &'a [(u8, &'a str)],
    /// `(variable, what it sets)`.
    pub environment: &'a [(&'a str, &'a str)],
    /// `(path, what it holds)`.
    pub files: &'a [(&'a str, &'a str)],
    /// `(page, [(command line, what it does)])`, the page named as its file is without `.1`
    /// (`bosunctl-status`).
    pub examples: &'a [(&'a str, &'a [(&'a str, &'a str)])],
}

impl ManExtras<'_> {
    /// The roff of the extra sections of `page` (the top page is `top`).
    fn roff(&self, page: &str, top: &str) -> String {
        use clap_mangen::roff::{Roff, bold, roman};
        let mut roff = Roff::new();
        let mut list = |title: &str, rows: Vec<(String, String)>| {
            if rows.is_empty() {
                return;
            }
            roff.control("SH", [title]);
            for (term, text) in rows {
                roff.control("TP", []);
                roff.text([bold(term)]);
                roff.text([roman(text)]);
            }
        };
        let named = |rows: &[(&str, &str)]| -> Vec<(String, String)> {
            rows.iter()
                .map(|(term, text)| ((*term).to_owned(), (*text).to_owned()))
                .collect()
        };
        list(
            "EXIT STATUS",
            self.exit_status
                .iter()
                .map(|(code, text)| (code.to_string(), (*text).to_owned()))
                .collect(),
        );
        list("ENVIRONMENT", named(self.environment));
        list("FILES", named(self.files));
        let examples = self
            .examples
            .iter()
            .find(|(name, _)| *name == page)
            .or_else(|| self.examples.iter().find(|(name, _)| *name == top));
        if let Some((_, examples)) = examples {
            roff.control("SH", ["EXAMPLES"]);
            for (line, text) in *examples {
                roff.control("TP", []);
                roff.text([bold(*line)]);
                roff.text([roman(*text)]);
            }
        }
        // `render` opens with the apostrophe preamble the page already has.
        let preamble = Roff::new().render();
        let text = roff.render();
        text.strip_prefix(preamble.as_str())
            .unwrap_or(&text)
            .to_owned()
    }
}

/// Writes the man page of `cmd` and of each of its visible subcommands, recursively, into
/// `dir`, dated `date` (`YYYY-MM-DD`), each with `extras`' sections, and returns their paths
/// (the command's own page first).
pub fn write_man_pages(
    cmd: clap::Command,
    dir: &Path,
    date: &str,
    extras: &ManExtras<'_>,
) -> Result<Vec<PathBuf>, ClidocError> {
    std::fs::create_dir_all(dir).map_err(|source| ClidocError::ManDir {
        path: dir.to_owned(),
        source,
    })?;
    let mut cmd = cmd.disable_help_subcommand(true);
    // Gives each subcommand its display name (`bosunctl-hosts`), which names its page.
    cmd.build();
    let mut written = Vec::new();
    let top = cmd.get_display_name().unwrap_or(cmd.get_name()).to_owned();
    write_pages(&cmd, dir, date, (extras, &top), &mut written)?;
    Ok(written)
}

fn write_pages(
    cmd: &clap::Command,
    dir: &Path,
    date: &str,
    (extras, top): (&ManExtras<'_>, &str),
    written: &mut Vec<PathBuf>,
) -> Result<(), ClidocError> {
    // An empty date would shift the `.TH` fields (roff drops an empty argument).
    let man = clap_mangen::Man::new(cmd.clone())
        .date(date)
        .manual("Bosun Manual");
    let path = dir.join(man.get_filename());
    let name = cmd.get_display_name().unwrap_or(cmd.get_name());
    let mut page = Vec::new();
    man.render(&mut page)
        .and_then(|()| page.write_all(extras.roff(name, top).as_bytes()))
        .and_then(|()| std::fs::write(&path, &page))
        .map_err(|source| ClidocError::ManPage {
            path: path.clone(),
            source,
        })?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir, date, (extras, top), written)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use clap::{CommandFactory, Parser, Subcommand};

    /// A small tool with a nested and a hidden subcommand.
    #[derive(Debug, Parser)]
    #[command(name = "tool", version = "1.2.3", about = "A tool")]
    struct Tool {
        /// Be loud.
        #[arg(long, global = true)]
        loud: bool,
        #[command(subcommand)]
        command: ToolCommand,
    }

    #[derive(Debug, Subcommand)]
    enum ToolCommand {
        /// Hosts.
        #[command(subcommand)]
        Hosts(HostsCommand),
        /// Completions.
        #[command(hide = true)]
        Completions(CompletionsArgs),
    }

    #[derive(Debug, Subcommand)]
    enum HostsCommand {
        /// List them.
        List {
            /// Only this many.
            #[arg(long)]
            limit: Option<u32>,
        },
    }

    #[test]
    fn completion_scripts_name_the_subcommands_and_options() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let script = String::from_utf8(completions(Tool::command(), shell)).unwrap();
            assert!(script.contains("hosts"), "{shell}: {script}");
            assert!(script.contains("limit"), "{shell}: {script}");
        }
        let bash = String::from_utf8(completions(Tool::command(), Shell::Bash)).unwrap();
        assert!(bash.contains("complete -F _tool"), "{bash}");
    }

    #[test]
    fn man_pages_cover_every_visible_command() {
        let dir = tempfile::tempdir().unwrap();
        let extras = ManExtras {
            exit_status: &[(0, "done"), (4, "bad input")],
            environment: &[("TOOL_URL", "where the tool's server is")],
            files: &[("~/.config/tool.json", "saved settings")],
            examples: &[
                ("tool", &[("tool hosts list", "every host")]),
                (
                    "tool-hosts-list",
                    &[("tool hosts list --limit 5", "five hosts")],
                ),
            ],
        };
        let pages = write_man_pages(
            Tool::command(),
            &dir.path().join("man1"),
            "2026-11-23",
            &extras,
        )
        .unwrap();
        let names: Vec<String> = pages
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["tool.1", "tool-hosts.1", "tool-hosts-list.1"]);
        let top = std::fs::read_to_string(&pages[0]).unwrap();
        assert!(top.starts_with(".ie \\n(.g .ds Aq \\(aq"), "{top}");
        assert!(
            top.contains(".TH tool 1 2026-11-23 \"tool 1.2.3\" \"Bosun Manual\""),
            "{top}"
        );
        assert!(top.contains("1.2.3"), "{top}");
        assert!(top.contains("\\-\\-loud"), "{top}");
        let list = std::fs::read_to_string(&pages[2]).unwrap();
        assert!(list.contains("\\-\\-limit"), "{list}");
        // Every page has the program's sections; examples are the page's own, else the top's.
        for page in &pages {
            let text = std::fs::read_to_string(page).unwrap();
            for section in [
                ".SH \"EXIT STATUS\"",
                ".SH ENVIRONMENT",
                ".SH FILES",
                ".SH EXAMPLES",
            ] {
                assert!(
                    text.contains(section),
                    "{section} in {}: {text}",
                    page.display()
                );
            }
            assert!(
                text.contains("TOOL_URL") && text.contains("bad input"),
                "{text}"
            );
            assert_eq!(
                text.matches(".ie \\n(.g .ds Aq").count(),
                1,
                "one preamble: {text}"
            );
        }
        assert!(
            list.contains("five hosts") && !list.contains("every host"),
            "{list}"
        );
        let hosts = std::fs::read_to_string(&pages[1]).unwrap();
        assert!(hosts.contains("every host"), "{hosts}");
    }

    #[test]
    fn dates_are_civil_and_checked() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(20_415), "2025-11-23");
        assert_eq!(civil_date(11_016), "2000-02-29");
        assert_eq!(civil_date(11_017), "2000-03-01");
        assert!(parse_date("2026-11-23").is_ok());
        for bad in ["2026-1-23", "2026/11/23", "tomorrow", "2026-11-233"] {
            assert!(parse_date(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_closed_pipe_is_told_apart() {
        let err = ClidocError::Completions {
            shell: Shell::Bash,
            source: std::io::ErrorKind::BrokenPipe.into(),
        };
        assert!(err.is_closed_pipe());
        let err = ClidocError::Completions {
            shell: Shell::Bash,
            source: std::io::ErrorKind::PermissionDenied.into(),
        };
        assert!(!err.is_closed_pipe());
    }
}
