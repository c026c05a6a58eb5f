//! The harness of the escrow suite (`agent_escrow.rs`): a host enrolled at a real hub and
//! stopped again, the real `bosun-agentctl` binary run on it as the operator runs it, and the
//! sheet read back the way a person reads it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::fmt;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use bosun_agentd::trust::keys::pbs_key::{KEY_FILE, PbsKey};
use bosun_pvesim::{SimConfig, SimHandle};
use reqwest::Method;
use serde_json::Value;
use tempfile::TempDir;
use tokio::io::AsyncWriteExt as _;
use uuid::Uuid;

use crate::agent_support::{
    AgentFiles, InProcessAgent, RealHub, agent_files, eventually, start_sim,
};

pub mod pbs;

/// scrypt log2 N for the escrows made here (the real one, 18, takes a second per unwrap).
pub const WORK_FACTOR: &str = "12";

/// How long one command may run: the sheet renders in milliseconds, scrypt takes longer.
pub const COMMAND_LIMIT: Duration = Duration::from_secs(60);

/// `target/<profile>/bosun-agentctl`, next to this test's `deps/`.
pub fn agentctl_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test runs from target/<profile>/deps")
        .join("bosun-agentctl");
    assert!(
        bin.is_file(),
        "{} is missing: build the workspace's binaries first (`cargo build --workspace --bins`)",
        bin.display()
    );
    bin
}

/// What a run of the binary did.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

impl Run {
    /// Asserts the exit code and that stdout or stderr holds each of `texts`.
    #[track_caller]
    pub fn expect(&self, code: i32, texts: &[&str]) -> &Self {
        assert_eq!(self.code, Some(code), "{self}");
        for text in texts {
            assert!(
                self.stdout.contains(text) || self.stderr.contains(text),
                "the output does not say {text:?}:\n{self}"
            );
        }
        self
    }

    /// The value of the first `name: value` line of stdout.
    #[track_caller]
    pub fn field(&self, name: &str) -> String {
        let prefix = format!("{name}: ");
        self.stdout
            .lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {name:?} line:\n{self}"))
            .trim()
            .to_owned()
    }
}

/// The sheet's text, as `pdftotext -layout` reads it.
pub fn sheet_text(pdf: &Path) -> String {
    let out = std::process::Command::new("pdftotext")
        .args(["-layout"])
        .arg(pdf)
        .arg("-")
        .output()
        .expect("pdftotext runs (scripts/install-deps installs poppler-utils)");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Reads the 12 words off the sheet's PDF as a person would: the numbered grid, in order.
pub fn words_on_sheet(pdf: &Path) -> String {
    let text = sheet_text(pdf);
    let words = bosun_demo::escrow::numbered_grid(&text)
        .unwrap_or_else(|| panic!("the sheet shows 12 numbered words:\n{text}"));
    words.as_str().to_owned()
}

/// Whether `phrase` is a valid BIP39 code (its checksum fits).
pub fn is_code(phrase: &str) -> bool {
    bip39::Mnemonic::parse_in_normalized(bip39::Language::English, phrase).is_ok()
}

/// `code` with one word mistyped: a letter added at its end, so that it is on no list and
/// begins no word of it, while its first four letters still name it. Gives the typed
/// phrase, the word's position (from 1) and the word.
pub fn mistyped(code: &str) -> (String, usize, String) {
    let mut words: Vec<String> = code.split(' ').map(str::to_owned).collect();
    let (index, word) = words
        .iter()
        .enumerate()
        .find(|(_, w)| w.len() >= 4)
        .map(|(i, w)| (i, w.clone()))
        .expect("a code has a word of four letters or more");
    let typo = ('a'..='z')
        .map(|c| format!("{word}{c}"))
        .find(|t| {
            bip39::Language::English
                .words_by_prefix_iter(t)
                .next()
                .is_none()
        })
        .unwrap();
    words[index] = typo;
    (words.join(" "), index + 1, word)
}

/// `code` with two words swapped such that the checksum no longer fits.
pub fn swapped(code: &str) -> String {
    let words: Vec<&str> = code.split(' ').collect();
    for i in 0..words.len() {
        for j in i + 1..words.len() {
            let mut w = words.clone();
            w.swap(i, j);
            let phrase = w.join(" ");
            if phrase != code && !is_code(&phrase) {
                return phrase;
            }
        }
    }
    panic!("every swap of {} words fits the checksum", words.len())
}

/// The permission bits of `path`.
pub fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Every file under `dir`, read whole.
pub fn files_under(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                out.push((path.display().to_string(), bytes));
            }
        }
    }
    out
}

pub fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// No file under `dirs` holds two consecutive words of any of `codes`.
#[track_caller]
pub fn assert_codes_not_stored(dirs: &[&Path], codes: &[&str]) {
    let pairs: Vec<String> = codes
        .iter()
        .flat_map(|code| {
            code.split(' ')
                .collect::<Vec<_>>()
                .windows(2)
                .map(|w| w.join(" "))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(!pairs.is_empty());
    for dir in dirs {
        for (place, bytes) in files_under(dir) {
            for pair in &pairs {
                assert!(
                    !contains(&bytes, pair),
                    "two words of a code are stored in {place}"
                );
            }
        }
    }
}

/// The blob the hub holds for `host`, as the admin API gives it.
pub async fn hub_blob(hub: &RealHub, host: Uuid) -> Value {
    let (status, blob) = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}/escrow"), None)
        .await;
    assert_eq!(status, 200, "{blob}");
    blob
}

/// `bosun-agentctl --config <config> <args>`, with `stdin` (or none).
pub async fn agentctl(config: &Path, args: &[&str], stdin: Option<&str>) -> Run {
    let mut command = tokio::process::Command::new(agentctl_bin());
    command
        .arg("--config")
        .arg(config)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().unwrap();
    if let (Some(text), Some(mut input)) = (stdin, child.stdin.take()) {
        // A command that fails before reading closes the pipe: not the test's concern.
        let _ = input.write_all(text.as_bytes()).await;
    }
    let out = tokio::time::timeout(COMMAND_LIMIT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("bosun-agentctl {args:?} ran longer than {COMMAND_LIMIT:?}"))
        .unwrap();
    let run = Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    // stdout is the answer, the log goes to stderr; neither is a terminal here.
    assert!(!run.to_string().contains('\u{1b}'), "colour codes: {run}");
    assert!(
        !run.stdout.contains(" INFO "),
        "a log line on stdout: {run}"
    );
    run
}

/// A host that enrolled at `hub`, reported its K, and whose agent stopped again.
pub struct Host {
    sim: SimHandle,
    pub files: AgentFiles,
    pub id: Uuid,
    /// K's fingerprint.
    pub fingerprint: String,
    /// Scratch space for sheets and blob files.
    pub scratch: TempDir,
}

impl Host {
    pub async fn enroll(hub: &RealHub) -> Self {
        let sim = start_sim(SimConfig::fast()).await;
        let token = hub.enroll_token().await;
        let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some(&token));
        let agent = InProcessAgent::start(&files.config_path).await;
        let id = agent.handles.host_id;
        // The first report carries K's fingerprint (the agent makes K for it): an escrow
        // is "verified" against that.
        eventually(
            Duration::from_secs(30),
            "the hub has the host's K fingerprint",
            || async { hub.host(id).await["last_report"]["pbs_key_fingerprint"].is_string() },
        )
        .await;
        agent.stop().await;
        let fingerprint = hub.host(id).await["last_report"]["pbs_key_fingerprint"]
            .as_str()
            .unwrap()
            .to_owned();
        let host = Self {
            sim,
            files,
            id,
            fingerprint,
            scratch: tempfile::tempdir().unwrap(),
        };
        assert!(host.state_dir().join("host.json").is_file());
        assert_eq!(host.installed_fingerprint(), Some(host.fingerprint.clone()));
        host
    }

    pub fn state_dir(&self) -> &Path {
        &self.files.state_dir
    }

    pub fn key_file(&self) -> PathBuf {
        self.state_dir().join(KEY_FILE)
    }

    /// The fingerprint of the K installed in the state directory.
    pub fn installed_fingerprint(&self) -> Option<String> {
        PbsKey::load_existing(self.state_dir())
            .unwrap()
            .map(|k| k.fingerprint())
    }

    /// The box needs K again (a new box of the same host).
    pub fn remove_key(&self) {
        std::fs::remove_file(self.key_file()).unwrap();
    }

    /// A new empty directory in the scratch space.
    pub fn dir(&self, name: &str) -> PathBuf {
        let dir = self.scratch.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        dir
    }

    /// `bosun-agentctl --config <this host's config> <args>`, with `stdin` (or none).
    pub async fn agentctl(&self, args: &[&str], stdin: Option<&str>) -> Run {
        agentctl(&self.files.config_path, args, stdin).await
    }

    /// `escrow <verb> --sheet <sheets> --work-factor 12 <extra>`.
    pub async fn sheet_command(&self, verb: &str, sheets: &Path, extra: &[&str]) -> Run {
        let sheets = sheets.to_str().unwrap();
        let mut args = vec![
            "escrow",
            verb,
            "--sheet",
            sheets,
            "--work-factor",
            WORK_FACTOR,
        ];
        args.extend_from_slice(extra);
        self.agentctl(&args, None).await
    }

    /// `escrow create` (or `rotate`) into `sheets`; gives the run (asserted successful),
    /// the PDF and the words on it.
    pub async fn make_sheet(
        &self,
        verb: &str,
        sheets: &Path,
        extra: &[&str],
    ) -> (Run, PathBuf, String) {
        let run = self.sheet_command(verb, sheets, extra).await;
        run.expect(0, &[]);
        assert!(run.stdout.starts_with("recovery sheet: "), "{run}");
        let pdf = PathBuf::from(run.field("recovery sheet"));
        assert_eq!(pdf.parent(), Some(sheets), "{run}");
        assert_eq!(run.field("key fingerprint"), self.fingerprint, "{run}");
        let words = words_on_sheet(&pdf);
        assert!(is_code(&words), "the sheet's words are a code");
        (run, pdf, words)
    }

    pub async fn create(&self, sheets: &Path) -> (Run, PathBuf, String) {
        self.make_sheet("create", sheets, &[]).await
    }

    /// `escrow recover`, the words on stdin, the blob from the hub or `blob`.
    pub async fn recover(&self, words: &str, blob: Option<&Path>) -> Run {
        let mut args = vec!["escrow", "recover"];
        if let Some(blob) = blob {
            args.extend(["--blob", blob.to_str().unwrap()]);
        }
        self.agentctl(&args, Some(&format!("{words}\n"))).await
    }

    /// `escrow recover` at a terminal (a pseudo-terminal from `script`), typing each of
    /// `lines` once the prompt for it is shown (so the terminal's echo is already off).
    /// Everything the terminal showed is the run's stdout.
    pub async fn recover_at_terminal(&self, lines: &[String]) -> Run {
        use tokio::io::AsyncReadExt as _;
        const PROMPT: &str = "Type the 12 words";
        let command = format!(
            "{} --config {} escrow recover",
            agentctl_bin().display(),
            self.files.config_path.display()
        );
        let mut child = tokio::process::Command::new("script")
            .args(["-q", "-f", "-e", "-c", &command, "/dev/null"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("script(1) runs (bsdutils)");
        let mut input = child.stdin.take().unwrap();
        let mut output = child.stdout.take().unwrap();
        let mut shown = Vec::new();
        let mut buf = [0u8; 4096];
        let deadline = tokio::time::Instant::now() + COMMAND_LIMIT;
        for (i, line) in lines.iter().enumerate() {
            while String::from_utf8_lossy(&shown).matches(PROMPT).count() <= i {
                let n = tokio::time::timeout_at(deadline, output.read(&mut buf))
                    .await
                    .unwrap_or_else(|_| {
                        panic!(
                            "no prompt {} within {COMMAND_LIMIT:?}: {}",
                            i + 1,
                            String::from_utf8_lossy(&shown)
                        )
                    })
                    .unwrap();
                assert!(
                    n > 0,
                    "the terminal closed: {}",
                    String::from_utf8_lossy(&shown)
                );
                shown.extend_from_slice(&buf[..n]);
            }
            input
                .write_all(format!("{line}\n").as_bytes())
                .await
                .unwrap();
        }
        loop {
            match tokio::time::timeout_at(deadline, output.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => shown.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
        let status = tokio::time::timeout_at(deadline, child.wait())
            .await
            .expect("recover ends")
            .unwrap();
        Run {
            code: status.code(),
            stdout: String::from_utf8_lossy(&shown).into_owned(),
            stderr: String::new(),
        }
    }

    /// Writes `text` to a file in the scratch space.
    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.scratch.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    pub async fn finish(self) {
        self.sim.shutdown().await;
    }
}

/// The hub's view of `host`'s escrow once it is verified against the reported K.
pub async fn verified_escrow(hub: &RealHub, host: &Host) -> Value {
    eventually(
        Duration::from_secs(10),
        "the hub shows a verified escrow",
        || async { hub.host(host.id).await["escrow"]["state"] == "verified" },
    )
    .await;
    let escrow = hub.host(host.id).await["escrow"].clone();
    assert_eq!(escrow["key_fingerprint"], host.fingerprint.as_str());
    escrow
}
