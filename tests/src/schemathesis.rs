//! Runs [Schemathesis](https://schemathesis.readthedocs.io) against a running server with one
//! of Bosun's committed OpenAPI documents: requests generated from the document, each answer
//! checked with [`CHECKS`]. A document that accepts what its server refuses (or a server that
//! answers a 5xx or off-schema body) fails the run.
//!
//! `scripts/install-deps` installs the pinned [`VERSION`] into a virtualenv at
//! `target/schemathesis-venv`; the runner looks for it next to the test binary's target
//! directory, then in `BOSUN_SCHEMATHESIS` (a path to the executable). A missing Schemathesis is
//! an error, never a skipped test.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The version `scripts/install-deps` installs.
pub const VERSION: &str = "4.32.5";

/// The checks every run makes: schema-valid requests are not refused with 400/413/415/422,
/// no answer is a 5xx, and every answer fits the schema documented for its status.
pub const CHECKS: &str = "not_a_server_error,positive_data_acceptance,response_schema_conformance";

/// What one run is pointed at.
#[derive(Debug, Clone)]
pub struct Fuzz<'a> {
    /// The OpenAPI document (a committed `docs/*.openapi.json`).
    pub document: &'a Path,
    /// The server's base URL (`https://127.0.0.1:<port>`); TLS is not verified.
    pub base_url: &'a str,
    /// The bearer token sent with every request.
    pub bearer: Option<&'a str>,
    /// Only the operations carrying this tag (the operations one listener serves).
    pub tag: Option<&'a str>,
    /// Operations left out, as regular expressions over their paths; each with its reason
    /// in the caller.
    pub exclude_paths: &'a [&'a str],
    /// The generator's seed: a run is reproducible.
    pub seed: u64,
    /// Generated cases per operation (examples and coverage cases come on top).
    pub max_examples: u32,
    /// More `schemathesis.toml` (e.g. `[parameters]` pinning a path parameter to a row that
    /// exists), written next to the reports and passed with `--config-file`.
    pub config: &'a str,
    /// Where reports go (a temporary directory the caller owns).
    pub report_dir: &'a Path,
}

/// Why a run did not pass.
#[derive(Debug, thiserror::Error)]
pub enum SchemathesisError {
    /// No Schemathesis executable was found.
    #[error(
        "schemathesis {VERSION} is not installed (looked for {looked}); run scripts/install-deps, \
         or point BOSUN_SCHEMATHESIS at its executable"
    )]
    NotInstalled {
        /// The places looked at.
        looked: String,
    },
    /// The configuration file could not be written.
    #[error("could not write {path}")]
    Config {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The executable could not be started.
    #[error("could not run {program}")]
    Spawn {
        /// The executable.
        program: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Schemathesis reported failures (or could not load the document).
    #[error("schemathesis failed ({status}) against {document}:\n{output}")]
    Failed {
        /// The document the run used.
        document: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// Its standard output and error.
        output: String,
    },
}

/// What a passing run printed (its summary), for the test's log.
#[derive(Debug)]
pub struct Passed {
    /// Standard output and error.
    pub output: String,
}

/// The Schemathesis executable: `BOSUN_SCHEMATHESIS`, else `schemathesis-venv/bin/schemathesis`
/// in a directory above `from` (the test binary sits in `target/debug/deps/`).
pub fn executable(from: &Path) -> Result<PathBuf, SchemathesisError> {
    let mut looked = Vec::new();
    if let Some(path) = std::env::var_os("BOSUN_SCHEMATHESIS") {
        let path = PathBuf::from(path);
        if path.is_file() {
            return Ok(path);
        }
        looked.push(path.display().to_string());
    }
    for dir in from.ancestors() {
        let candidate = dir.join("schemathesis-venv/bin/schemathesis");
        if candidate.is_file() {
            return Ok(candidate);
        }
        if dir.file_name().is_some_and(|name| name == "target") {
            looked.push(candidate.display().to_string());
            break;
        }
    }
    if looked.is_empty() {
        looked.push(format!("schemathesis-venv above {}", from.display()));
    }
    Err(SchemathesisError::NotInstalled {
        looked: looked.join(", "),
    })
}

/// Runs Schemathesis once (blocking) and gives its output when every check passed.
pub fn run(program: &Path, fuzz: &Fuzz<'_>) -> Result<Passed, SchemathesisError> {
    let config = fuzz.report_dir.join("schemathesis.toml");
    std::fs::write(&config, fuzz.config).map_err(|source| SchemathesisError::Config {
        path: config.display().to_string(),
        source,
    })?;
    let mut command = Command::new(program);
    command
        .current_dir(fuzz.report_dir)
        .env("NO_COLOR", "1")
        .arg("--config-file")
        .arg(&config)
        .arg("run")
        .arg(fuzz.document)
        .args(["--url", fuzz.base_url])
        .args(["--tls-verify", "false"])
        .args(["--checks", CHECKS])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args(["--seed", &fuzz.seed.to_string()])
        .args(["--max-examples", &fuzz.max_examples.to_string()])
        .args(["--generation-database", "none"])
        .args(["--workers", "1"])
        .args(["--request-timeout", "30"])
        .arg("--report-dir")
        .arg(fuzz.report_dir)
        .arg("--no-color");
    if let Some(token) = fuzz.bearer {
        command.args(["--header", &format!("Authorization: Bearer {token}")]);
    }
    if let Some(tag) = fuzz.tag {
        command.args(["--include-tag", tag]);
    }
    for path in fuzz.exclude_paths {
        command.args(["--exclude-path-regex", path]);
    }
    let out = command
        .output()
        .map_err(|source| SchemathesisError::Spawn {
            program: program.display().to_string(),
            source,
        })?;
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(Passed { output })
    } else {
        Err(SchemathesisError::Failed {
            document: fuzz.document.display().to_string(),
            status: out.status,
            output,
        })
    }
}
