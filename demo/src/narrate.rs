//! Narration: numbered steps with their timing, on the terminal and in `transcript.txt`.
//!
//! A step's title says what the step does, never what it will find; what it found is its
//! verdict ([`Narrator::conclude`]), computed from what the step read back and printed after
//! `ok` and in the closing summary, so the two can never say different things.

use std::fmt::Display;
use std::fs::File;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use bosun_errchain::error_chain;

use super::DemoError;

/// The longest any one step may take before the demo gives up on it.
pub const STEP_LIMIT: Duration = Duration::from_secs(90);

/// Prints each step as it runs and keeps a copy of everything printed.
#[derive(Debug)]
pub struct Narrator {
    transcript: File,
    started: Instant,
    steps: Vec<StepRecord>,
    /// What the running step found, once it said so.
    verdict: Option<String>,
}

/// One finished step, for the closing summary.
#[derive(Debug, Clone)]
pub struct StepRecord {
    /// The step's title.
    pub title: String,
    /// How long it took.
    pub took: Duration,
    /// What it found, when it said so ([`Narrator::conclude`]).
    pub verdict: Option<String>,
}

impl Narrator {
    /// Starts a transcript at `path` (truncating an older one).
    pub fn create(path: &Path) -> Result<Self, DemoError> {
        let transcript = File::create(path).map_err(|source| DemoError::Artifact {
            path: path.to_owned(),
            source,
        })?;
        Ok(Self {
            transcript,
            started: Instant::now(),
            steps: Vec::new(),
            verdict: None,
        })
    }

    /// A line of prose, printed as is.
    pub fn say(&mut self, line: impl Display) {
        let line = line.to_string();
        // A closed stdout (`| head`) must not stop the demo between a step and its cleanup;
        // the transcript still gets every line.
        let _ = writeln!(std::io::stdout().lock(), "{line}");
        // The transcript is a convenience copy; a failed write must not fail the demo.
        let _ = writeln!(self.transcript, "{line}");
    }

    /// A detail under the current step.
    pub fn detail(&mut self, line: impl Display) {
        self.say(format!("      {line}"));
    }

    /// The running step's verdict: what it found, in words computed from what it read back
    /// (`desired diff: not in sync, the host refuses nfs-hostile`). Printed after its `ok`
    /// and in the summary; a later call replaces an earlier one.
    pub fn conclude(&mut self, verdict: impl Display) {
        self.verdict = Some(verdict.to_string());
    }

    /// Runs one step: prints its title, runs it (at most `STEP_LIMIT`), prints `ok` with the
    /// time it took or the error that stopped it (the error names the step, so the caller can
    /// exit with it).
    pub async fn step<T, F>(&mut self, title: &str, work: F) -> Result<T, DemoError>
    where
        F: AsyncFnOnce(&mut Self) -> Result<T, DemoError>,
    {
        let number = self.steps.len() + 1;
        self.say(format!("[{number}] {title}"));
        self.verdict = None;
        let begun = Instant::now();
        let outcome = tokio::time::timeout(STEP_LIMIT, work(self))
            .await
            .unwrap_or_else(|_| {
                Err(DemoError::Timeout {
                    what: "the step to finish".to_owned(),
                    after: STEP_LIMIT,
                })
            });
        match outcome {
            Ok(value) => {
                let took = begun.elapsed();
                let verdict = self.verdict.take();
                match &verdict {
                    Some(verdict) => self.say(format!("      ok ({}): {verdict}", seconds(took))),
                    None => self.say(format!("      ok ({})", seconds(took))),
                }
                self.steps.push(StepRecord {
                    title: title.to_owned(),
                    took,
                    verdict,
                });
                Ok(value)
            }
            Err(err) => {
                self.verdict = None;
                self.say(format!("      FAILED: {}", error_chain(&err)));
                Err(DemoError::Step {
                    number,
                    title: title.to_owned(),
                    source: Box::new(err),
                })
            }
        }
    }

    /// The steps done so far.
    pub fn steps(&self) -> &[StepRecord] {
        &self.steps
    }

    /// Time since the narrator was created.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// `1.23 s`.
pub fn seconds(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A step's verdict is what the step concluded, printed after its `ok` and kept for the
    /// summary; a step that concluded nothing has none, and a failed step's verdict is dropped.
    #[tokio::test]
    async fn a_verdict_is_what_the_step_found() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("transcript.txt");
        let mut n = Narrator::create(&path).unwrap();
        n.step("the diff", async |n| {
            n.conclude("in sync");
            n.conclude("not in sync, the host refuses nfs-hostile");
            Ok(())
        })
        .await
        .unwrap();
        n.step("plain", async |_| Ok(())).await.unwrap();
        let failed = n
            .step("broken", async |n| -> Result<(), DemoError> {
                n.conclude("never shown");
                Err(DemoError::Check("no".into()))
            })
            .await;
        assert!(failed.is_err());
        let verdicts: Vec<Option<&str>> = n.steps().iter().map(|s| s.verdict.as_deref()).collect();
        assert_eq!(
            verdicts,
            [Some("not in sync, the host refuses nfs-hostile"), None]
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("): not in sync, the host refuses nfs-hostile\n"),
            "{text}"
        );
        assert!(!text.contains("never shown"), "{text}");
    }
}
