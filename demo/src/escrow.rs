//! The escrow's tools as the host-loss walk uses them: the real `bosun-agentctl escrow create |
//! recover`, run as the agent's user, and the recovery sheet read the way a person reads it
//! (`pdftotext -layout`: the numbered grid of 12 words), checked (`pdfinfo`: one A4 page) and
//! rendered for a person to look at (`pdftoppm`).
//!
//! The words live in memory only (zeroized when dropped) and in the PDF, the artifact a
//! person prints. They are never printed, logged or put on a command line: `escrow recover`
//! reads them on its standard input, as a script would.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use bosun_agentctl::escrow::code::RecoveryCode;
use tokio::io::AsyncWriteExt as _;
use zeroize::Zeroizing;

use super::DemoError;
use super::children::RunAs;
use super::stack;

/// The scrypt work factor (log2 N) the demo wraps K with: `escrow create`'s hidden
/// `--work-factor` keeps the demo fast. Production uses 18, about a second on 2 cores.
pub const DEMO_WORK_FACTOR: &str = "12";

/// The longest a `bosun-agentctl escrow` command may take (the sheet renders in milliseconds).
const COMMAND_LIMIT: Duration = Duration::from_secs(60);

/// How a `bosun-agentctl` command ended.
#[derive(Debug, Clone)]
pub struct AgentctlRun {
    /// Its exit code (`None` when a signal ended it).
    pub code: Option<i32>,
    /// What it printed.
    pub stdout: String,
    /// What it complained about.
    pub stderr: String,
}

impl AgentctlRun {
    /// The value after `label` on a line of its output (`key fingerprint: …`).
    pub fn field(&self, label: &str) -> Option<&str> {
        self.stdout
            .lines()
            .find_map(|line| line.strip_prefix(label))
            .map(str::trim)
    }

    /// The first line of its complaint, without the program's name.
    pub fn complaint(&self) -> &str {
        let line = self
            .stderr
            .lines()
            .rfind(|l| l.starts_with("bosun-agentctl: "));
        line.and_then(|l| l.strip_prefix("bosun-agentctl: "))
            .unwrap_or_else(|| self.stderr.trim())
    }

    /// Fails unless it exited with `code`.
    pub fn expect_code(&self, code: i32, what: &str) -> Result<(), DemoError> {
        if self.code == Some(code) {
            Ok(())
        } else {
            Err(DemoError::Check(format!(
                "{what} exited with {:?}, not {code}: {}",
                self.code,
                self.stderr.trim()
            )))
        }
    }
}

/// Runs `bosun-agentctl --config CONFIG ARGS…` to completion as `user`, with `input` on its
/// standard input (closed when `None`), and appends the command line and what it printed to
/// `log`. Its exit code is the caller's to judge.
pub async fn agentctl(
    bins: &Path,
    user: RunAs,
    config: &Path,
    args: &[&str],
    input: Option<&[u8]>,
    log: &Path,
) -> Result<AgentctlRun, DemoError> {
    let program = stack::program(bins, "bosun-agentctl")?;
    let config_arg = config.display().to_string();
    let mut full = vec!["--config", config_arg.as_str()];
    full.extend_from_slice(args);
    let mut command = tokio::process::Command::new(&program);
    command
        .args(&full)
        .uid(user.uid)
        .gid(user.gid)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(dir) = config.parent() {
        command.current_dir(dir);
    }
    let spawn = |source| DemoError::Spawn {
        program: program.clone(),
        source,
    };
    let mut child = command.spawn().map_err(spawn)?;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(input).await.map_err(spawn)?;
        drop(stdin);
    }
    let output = tokio::time::timeout(COMMAND_LIMIT, child.wait_with_output())
        .await
        .map_err(|_| DemoError::Timeout {
            what: format!("bosun-agentctl {}", args.join(" ")),
            after: COMMAND_LIMIT,
        })?
        .map_err(spawn)?;
    let run = AgentctlRun {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    append_log(log, &full, &run)?;
    Ok(run)
}

fn append_log(log: &Path, args: &[&str], run: &AgentctlRun) -> Result<(), DemoError> {
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .and_then(|mut file| {
            writeln!(file, "$ bosun-agentctl {}", args.join(" "))?;
            file.write_all(run.stdout.as_bytes())?;
            file.write_all(run.stderr.as_bytes())?;
            writeln!(file, "(exit {:?})", run.code)
        })
        .map_err(|source| DemoError::Artifact {
            path: log.to_owned(),
            source,
        })
}

/// What `pdfinfo` says about a PDF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PdfInfo {
    /// Its pages.
    pub pages: u32,
    /// Its page size, as `pdfinfo` names it (`595.92 x 842.88 pts (A4)`).
    pub page_size: String,
}

/// `pdfinfo PDF`.
pub async fn pdf_info(pdf: &Path) -> Result<PdfInfo, DemoError> {
    let pdf_arg = pdf.display().to_string();
    let text = stack::run_captured(Path::new("pdfinfo"), &[&pdf_arg], &[], None).await?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_owned())
    };
    let pages = field("Pages:")
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| DemoError::Check(format!("pdfinfo shows no page count: {text}")))?;
    Ok(PdfInfo {
        pages,
        page_size: field("Page size:").unwrap_or_default(),
    })
}

/// Renders page 1 of `pdf` at 60 dpi to `<stem>.png` (`pdftoppm -png -r 60 -singlefile`).
pub async fn render_first_page(pdf: &Path, stem: &Path) -> Result<PathBuf, DemoError> {
    let (pdf_arg, stem_arg) = (pdf.display().to_string(), stem.display().to_string());
    stack::run_captured(
        Path::new("pdftoppm"),
        &["-png", "-r", "60", "-singlefile", &pdf_arg, &stem_arg],
        &[],
        None,
    )
    .await?;
    let png = stem.with_extension("png");
    if png.is_file() {
        Ok(png)
    } else {
        Err(DemoError::Check(format!(
            "pdftoppm made no {}",
            png.display()
        )))
    }
}

/// The recovery code on the sheet, read as a person reads it: the text of the page
/// (`pdftotext -layout`), the numbered grid `1 word … 12 word`, the words in the order of
/// their numbers. The code's checksum proves they were read right.
pub async fn words_on_sheet(pdf: &Path) -> Result<RecoveryCode, DemoError> {
    let pdf_arg = pdf.display().to_string();
    let text = Zeroizing::new(
        stack::run_captured(
            Path::new("pdftotext"),
            &["-layout", &pdf_arg, "-"],
            &[],
            None,
        )
        .await?,
    );
    let words = numbered_grid(&text).ok_or_else(|| {
        DemoError::Check(format!(
            "the sheet {} shows no numbered grid of 12 words",
            pdf.display()
        ))
    })?;
    RecoveryCode::parse(&words).map_err(|err| {
        DemoError::Check(format!(
            "the words on the sheet are not a recovery code: {err}"
        ))
    })
}

/// The customer, the hoster and the hoster's contact the demo's sheet names.
pub const DEMO_CUSTOMER: &str = "Acme Widgets GmbH";
/// The hoster, in the sheet's header and its first day-of-loss step.
pub const DEMO_OPERATOR: &str = "Northwind Hosting";
/// How the customer reaches the hoster.
pub const DEMO_CONTACT: &str = "+49 30 1234567, ops@northwind.example";

/// Checks that the sheet's text (`pdftotext -layout`, whitespace ignored) holds each of
/// `expected`, none of them secret; the error names the first one missing.
pub async fn sheet_shows(pdf: &Path, expected: &[&str]) -> Result<(), DemoError> {
    let pdf_arg = pdf.display().to_string();
    let text = Zeroizing::new(
        stack::run_captured(
            Path::new("pdftotext"),
            &["-layout", &pdf_arg, "-"],
            &[],
            None,
        )
        .await?,
    );
    let squeezed: Zeroizing<String> =
        Zeroizing::new(text.chars().filter(|c| !c.is_whitespace()).collect());
    for wanted in expected {
        let wanted_squeezed: String = wanted.chars().filter(|c| !c.is_whitespace()).collect();
        if !squeezed.contains(&wanted_squeezed) {
            return Err(DemoError::Check(format!(
                "the sheet {} does not show {wanted:?}",
                pdf.display()
            )));
        }
    }
    Ok(())
}

/// The words of the grid `1 w 2 w … 12 w` in `text`, joined by spaces in the order of their
/// numbers. The grid is the place where all twelve numbers each stand before a word; a
/// number elsewhere on the page ("Your 12 recovery words") is ignored because the run it
/// starts does not hold all twelve.
pub fn numbered_grid(text: &str) -> Option<Zeroizing<String>> {
    let tokens: Vec<&str> = text.split_whitespace().collect();
    let is_word = |t: &str| (3..=8).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_lowercase());
    (0..tokens.len()).find_map(|start| {
        let mut by_number: [Option<&str>; 12] = [None; 12];
        let mut at = start;
        while let [number, word, ..] = &tokens[at..] {
            let n: usize = match number.trim_end_matches('.').parse() {
                Ok(n) if (1..=12).contains(&n) && is_word(word) => n,
                _ => break,
            };
            if by_number[n - 1].replace(word).is_some() {
                break;
            }
            at += 2;
        }
        let words: Option<Vec<&str>> = by_number.into_iter().collect();
        words.map(|w| Zeroizing::new(w.join(" ")))
    })
}

#[cfg(test)]
mod tests {
    use super::numbered_grid;

    #[test]
    fn the_grid_is_read_in_the_order_of_its_numbers() {
        let page = "Bosun recovery code\n  Your 12 recovery words, in this order\n\
            1 abandon     2 ability    3 able\n 4 about  5 above  6 absent\n\
            7 absorb 8 abstract 9 absurd\n 10 abuse 11 access 12 accident\n\
            The words are from the standard BIP39 English list";
        let words = numbered_grid(page).unwrap();
        assert_eq!(
            words.as_str(),
            "abandon ability able about above absent absorb abstract absurd abuse access accident"
        );
        // Column by column, as another layout could put it.
        let columns = "1 abandon 4 about 7 absorb 10 abuse 2 ability 5 above 8 abstract \
            11 access 3 able 6 absent 9 absurd 12 accident";
        assert_eq!(numbered_grid(columns).unwrap().as_str(), words.as_str());
        assert!(numbered_grid("Your 12 recovery words 1 abandon 2 ability").is_none());
    }
}
