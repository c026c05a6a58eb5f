//! The agent's unit through `systemctl`, by absolute path, with an empty environment.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::decide::UnitFacts;

/// A failed `systemctl` call.
#[derive(Debug, thiserror::Error)]
pub enum UnitError {
    /// It could not be started.
    #[error("starting {program} {verb}")]
    Spawn {
        /// `systemctl`.
        program: PathBuf,
        /// Its verb.
        verb: &'static str,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// It failed.
    #[error("{program} {verb} {unit} exited with {status}: {stderr}")]
    Failed {
        /// `systemctl`.
        program: PathBuf,
        /// Its verb.
        verb: &'static str,
        /// The unit.
        unit: String,
        /// Exit status.
        status: String,
        /// Its stderr (cut).
        stderr: String,
    },
}

/// One unit.
#[derive(Debug, Clone)]
pub struct Unit {
    systemctl: PathBuf,
    name: String,
}

impl Unit {
    /// `name` through `systemctl`.
    pub fn new(systemctl: &Path, name: &str) -> Self {
        Self {
            systemctl: systemctl.into(),
            name: name.into(),
        }
    }

    fn call(&self, verb: &'static str, extra: &[&str]) -> Result<String, UnitError> {
        let out = Command::new(&self.systemctl)
            .arg(verb)
            .args(extra)
            .arg(&self.name)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .stdin(Stdio::null())
            .output()
            .map_err(|source| UnitError::Spawn {
                program: self.systemctl.clone(),
                verb,
                source,
            })?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(UnitError::Failed {
                program: self.systemctl.clone(),
                verb,
                unit: self.name.clone(),
                status: out.status.to_string(),
                stderr: stderr.chars().take(500).collect(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `systemctl show --property=ActiveState,NRestarts,MainPID <unit>`.
    pub fn show(&self) -> Result<UnitFacts, UnitError> {
        let text = self.call("show", &["--property=ActiveState,NRestarts,MainPID"])?;
        Ok(parse_show(&text))
    }

    /// `systemctl restart --no-block <unit>`: queued, not waited for (a binary that never
    /// sends `READY=1` would hold a blocking restart for the unit's whole start timeout).
    pub fn restart(&self) -> Result<(), UnitError> {
        self.call("restart", &["--no-block"]).map(drop)
    }

    /// `systemctl reset-failed <unit>`, so a unit that hit its start limit starts again.
    pub fn reset_failed(&self) -> Result<(), UnitError> {
        self.call("reset-failed", &[]).map(drop)
    }
}

/// Parses `Key=Value` lines; unknown keys and unparsable numbers are ignored (0).
pub fn parse_show(text: &str) -> UnitFacts {
    let mut facts = UnitFacts::default();
    for line in text.lines() {
        match line.split_once('=') {
            Some(("ActiveState", v)) => facts.active_state = v.trim().to_owned(),
            Some(("NRestarts", v)) => facts.n_restarts = v.trim().parse().unwrap_or(0),
            Some(("MainPID", v)) => facts.main_pid = v.trim().parse().unwrap_or(0),
            _ => {}
        }
    }
    facts
}

#[cfg(test)]
mod tests {
    #[test]
    fn show_output_parses() {
        let f = super::parse_show("MainPID=412\nNRestarts=3\nActiveState=active\nX=y\n");
        assert_eq!(
            (f.main_pid, f.n_restarts, f.active_state.as_str()),
            (412, 3, "active")
        );
        let f = super::parse_show("MainPID=\nNRestarts=[not set]\n");
        assert_eq!((f.main_pid, f.n_restarts), (0, 0));
    }
}
