//! App stop/start hooks: commands run directly (argv, no shell), bounded in time.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One app the controller can stop and start again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct App {
    /// A unique name (kept in the marker).
    pub name: String,
    /// The command that stops it, e.g. `["docker", "compose", "-p", "shop", "stop"]`.
    pub stop: Vec<String>,
    /// The command that starts it again; must be safe to run twice.
    pub start: Vec<String>,
    /// Its data (absolute files or directories): summed while every app is stopped, so the
    /// backup carries a restore check of it ([`crate::restore_check`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data: Vec<std::path::PathBuf>,
}

/// Why a hook failed.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The hook has no command.
    #[error("the {action} hook of app {app} is empty")]
    Empty {
        /// The app.
        app: String,
        /// `stop` or `start`.
        action: &'static str,
    },
    /// The command could not be started.
    #[error("failed to run the {action} hook of app {app}")]
    Spawn {
        /// The app.
        app: String,
        /// `stop` or `start`.
        action: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The command exited unsuccessfully.
    #[error("the {action} hook of app {app} exited with {status}")]
    Failed {
        /// The app.
        app: String,
        /// `stop` or `start`.
        action: &'static str,
        /// The exit status.
        status: std::process::ExitStatus,
    },
    /// The command took too long and was killed.
    #[error("the {action} hook of app {app} took longer than {timeout:?}")]
    Timeout {
        /// The app.
        app: String,
        /// `stop` or `start`.
        action: &'static str,
        /// The bound.
        timeout: Duration,
    },
}

impl App {
    /// Runs the stop hook.
    pub async fn stop(&self, timeout: Duration) -> Result<(), HookError> {
        run(&self.name, "stop", &self.stop, timeout).await
    }

    /// Runs the start hook.
    pub async fn start(&self, timeout: Duration) -> Result<(), HookError> {
        run(&self.name, "start", &self.start, timeout).await
    }
}

/// Runs `argv` (no shell) within `timeout`; `app` and `action` name it in errors and logs.
pub(crate) async fn run(
    app: &str,
    action: &'static str,
    argv: &[String],
    timeout: Duration,
) -> Result<(), HookError> {
    let Some((program, args)) = argv.split_first() else {
        return Err(HookError::Empty {
            app: app.to_owned(),
            action,
        });
    };
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| HookError::Spawn {
            app: app.to_owned(),
            action,
            source,
        })?;
    let status = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(waited) => waited.map_err(|source| HookError::Spawn {
            app: app.to_owned(),
            action,
            source,
        })?,
        Err(_) => {
            let _ = child.kill().await;
            return Err(HookError::Timeout {
                app: app.to_owned(),
                action,
                timeout,
            });
        }
    };
    if status.success() {
        tracing::info!(app, action, "hook ran");
        Ok(())
    } else {
        Err(HookError::Failed {
            app: app.to_owned(),
            action,
            status,
        })
    }
}
