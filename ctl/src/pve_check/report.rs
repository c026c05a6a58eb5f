//! The report of `bosunctl pve check`: one entry per check, as text or as JSON, and the exit
//! code it stands for.

use std::fmt::Write as _;

use serde::Serialize;

use super::exit;

/// The version of the JSON shape; it changes only when a field changes meaning or goes away
/// (2: `exit_code` took `bosunctl`'s one exit-code scheme).
pub const FORMAT: u32 = 2;

/// A check's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Bosun has what it needs here.
    Ok,
    /// Bosun works, but something is degraded (the `fix` says how to improve it).
    Warn,
    /// Bosun cannot work here until the `fix` is applied.
    Fail,
    /// Not run, because a check it depends on failed (the detail says which).
    Skip,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Warn => "warn",
            Self::Fail => "FAIL",
            Self::Skip => "skip",
        }
    }
}

/// One check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// A stable name: `connect`, `version`, `node`, `cluster`, `privileges`, `guest-reach`,
    /// `rootdir-storage`,
    /// `backup-storage`, `golden`, `scratch-restore`, `scratch-start`, `scratch-snapshot`,
    /// `scratch-backup`, `scratch-cleanup`.
    pub name: &'static str,
    /// The outcome.
    pub status: Status,
    /// What was found, in one line.
    pub detail: String,
    /// What to do about a `fail` or `warn`: commands to run on the node, in order (empty when
    /// there is nothing to do).
    pub fix: Vec<String>,
}

impl Check {
    /// A passed check.
    pub fn ok(name: &'static str, detail: impl Into<String>) -> Self {
        Self {
            name,
            status: Status::Ok,
            detail: detail.into(),
            fix: Vec::new(),
        }
    }

    /// A failed check and its fix.
    pub fn fail(name: &'static str, detail: impl Into<String>, fix: Vec<String>) -> Self {
        Self {
            name,
            status: Status::Fail,
            detail: detail.into(),
            fix,
        }
    }

    /// A passed check with a caveat and how to lift it.
    pub fn warn(name: &'static str, detail: impl Into<String>, fix: Vec<String>) -> Self {
        Self {
            name,
            status: Status::Warn,
            detail: detail.into(),
            fix,
        }
    }

    /// A check not run.
    pub fn skip(name: &'static str, detail: impl Into<String>) -> Self {
        Self {
            name,
            status: Status::Skip,
            detail: detail.into(),
            fix: Vec::new(),
        }
    }
}

/// Everything `pve check` found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// [`FORMAT`].
    pub format: u32,
    /// The API base checked.
    pub url: String,
    /// The node checked, once known.
    pub node: Option<String>,
    /// The token used.
    pub token_id: String,
    /// The checks, in the order they ran.
    pub checks: Vec<Check>,
    /// Whether every check passed (`warn` counts as passed).
    pub passed: bool,
    /// The exit code (see [`super`]).
    pub exit_code: u8,
}

impl Report {
    pub(crate) fn new(url: String, token_id: String) -> Self {
        Self {
            format: FORMAT,
            url,
            node: None,
            token_id,
            checks: Vec::new(),
            passed: true,
            exit_code: exit::OK,
        }
    }

    /// Fills `passed` and `exit_code` from the checks: 2 when `connect` failed, 1 when any
    /// other check failed, else 0.
    pub(crate) fn finish(mut self) -> Self {
        let failed = |c: &Check| c.status == Status::Fail;
        self.exit_code = if self.checks.iter().any(|c| c.name == "connect" && failed(c)) {
            exit::UNREACHABLE
        } else if self.checks.iter().any(failed) {
            exit::FAILED
        } else {
            exit::OK
        };
        self.passed = self.exit_code == exit::OK;
        self
    }

    /// A check by name.
    pub fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }

    /// The report for a terminal: one line per check, a `fix:` line under each failure or
    /// warning, and a summary.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let node = self.node.as_deref().unwrap_or("?");
        let _ = writeln!(
            out,
            "proxmox node {node} at {} with token {}",
            self.url, self.token_id
        );
        let width = self.checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
        for check in &self.checks {
            let _ = writeln!(
                out,
                "{:<5} {:<width$}  {}",
                check.status.label(),
                check.name,
                check.detail
            );
            for fix in &check.fix {
                let _ = writeln!(out, "      {:<width$}  fix: {fix}", "");
            }
        }
        let count = |s: Status| self.checks.iter().filter(|c| c.status == s).count();
        let summary = match self.exit_code {
            exit::OK => "ready for Bosun".to_owned(),
            exit::UNREACHABLE => "could not reach or authenticate to the node".to_owned(),
            _ => format!("{} check(s) failed", count(Status::Fail)),
        };
        let _ = writeln!(
            out,
            "result: {summary} ({} ok, {} warn, {} failed, {} skipped; exit {})",
            count(Status::Ok),
            count(Status::Warn),
            count(Status::Fail),
            count(Status::Skip),
            self.exit_code
        );
        out
    }
}
