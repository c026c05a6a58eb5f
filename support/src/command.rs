//! Parsing one support line into a [`Command`] and mapping it to its fixed command line.

/// The longest line accepted, in bytes.
pub const MAX_LINE: usize = 256;
/// The most journal lines `logs` shows.
pub const MAX_LOG_LINES: u32 = 10_000;
/// The largest guest id accepted (Proxmox's own bound).
const MAX_VMID: u32 = 999_999_999;

/// A unit of Bosun's whose journal the operator may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Agent,
    HelperSocket,
    Helper,
    UpdateGate,
}

impl Unit {
    const ALL: [Unit; 4] = [
        Unit::Agent,
        Unit::HelperSocket,
        Unit::Helper,
        Unit::UpdateGate,
    ];

    /// The systemd unit's name.
    pub fn unit_name(self) -> &'static str {
        match self {
            Unit::Agent => "bosun-agentd.service",
            Unit::HelperSocket => "bosun-helper.socket",
            // Every helper unit's instances (decision 0071: bosun-helper, -guest, -golden).
            Unit::Helper => "bosun-helper*@*.service",
            Unit::UpdateGate => "bosun-update-gate.service",
        }
    }

    fn word(self) -> &'static str {
        match self {
            Unit::Agent => "agent",
            Unit::HelperSocket => "helper-socket",
            Unit::Helper => "helper",
            Unit::UpdateGate => "update-gate",
        }
    }

    fn parse(word: &str) -> Result<Unit, ParseError> {
        Unit::ALL
            .into_iter()
            .find(|u| u.word() == word)
            .ok_or_else(|| ParseError::UnknownUnit {
                unit: bounded(word),
            })
    }
}

/// A unit the operator may restart (the helper's per-connection instances are not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Agent,
    HelperSocket,
    UpdateGate,
}

impl Target {
    fn unit(self) -> Unit {
        match self {
            Target::Agent => Unit::Agent,
            Target::HelperSocket => Unit::HelperSocket,
            Target::UpdateGate => Unit::UpdateGate,
        }
    }
}

/// One support command, parsed before anything runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Help,
    Exit,
    Status,
    Restart(Target),
    Logs { unit: Unit, lines: u32 },
    Guests,
    GuestConfig { vmid: u32 },
}

/// Why a line is not a support command.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("line too long ({len} bytes, at most {max})")]
    TooLong { len: usize, max: usize },
    #[error("only letters, digits, spaces, '-' and '_' are accepted")]
    BadCharacter,
    #[error("unknown command {command:?} (try help)")]
    UnknownCommand { command: String },
    #[error("unknown unit {unit:?} (agent, helper-socket, helper, update-gate)")]
    UnknownUnit { unit: String },
    #[error("{unit:?} cannot be restarted (agent, helper-socket, update-gate)")]
    NotRestartable { unit: String },
    #[error("{command} takes {expected}")]
    Usage {
        command: &'static str,
        expected: &'static str,
    },
    #[error("{value:?} is not a number from {min} to {max}")]
    BadNumber { value: String, min: u32, max: u32 },
}

/// At most 32 bytes of what the operator typed, for an error message.
fn bounded(word: &str) -> String {
    word.chars().take(32).collect()
}

fn number(word: &str, min: u32, max: u32) -> Result<u32, ParseError> {
    let bad = || ParseError::BadNumber {
        value: bounded(word),
        min,
        max,
    };
    if word.is_empty() || !word.bytes().all(|b| b.is_ascii_digit()) || word.len() > 10 {
        return Err(bad());
    }
    let n: u32 = word.parse().map_err(|_| bad())?;
    if (min..=max).contains(&n) {
        Ok(n)
    } else {
        Err(bad())
    }
}

impl Command {
    /// Parses one line; an empty line is `None`.
    pub fn parse(line: &str) -> Result<Option<Command>, ParseError> {
        if line.len() > MAX_LINE {
            return Err(ParseError::TooLong {
                len: line.len(),
                max: MAX_LINE,
            });
        }
        let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, ' ' | '\t' | '-' | '_');
        if !line.trim_end_matches(['\r', '\n']).chars().all(ok) {
            return Err(ParseError::BadCharacter);
        }
        let words: Vec<&str> = line.split_ascii_whitespace().collect();
        let Some((&first, rest)) = words.split_first() else {
            return Ok(None);
        };
        let usage = |command, expected| ParseError::Usage { command, expected };
        let command = match (first, rest) {
            ("help", []) => Command::Help,
            ("exit" | "quit", []) => Command::Exit,
            ("status", []) => Command::Status,
            ("guests", []) => Command::Guests,
            ("restart", [unit]) => match Unit::parse(unit)? {
                Unit::Agent => Command::Restart(Target::Agent),
                Unit::HelperSocket => Command::Restart(Target::HelperSocket),
                Unit::UpdateGate => Command::Restart(Target::UpdateGate),
                Unit::Helper => {
                    return Err(ParseError::NotRestartable {
                        unit: bounded(unit),
                    });
                }
            },
            ("logs", [unit]) => Command::Logs {
                unit: Unit::parse(unit)?,
                lines: 200,
            },
            ("logs", [unit, "--lines", n]) => Command::Logs {
                unit: Unit::parse(unit)?,
                lines: number(n, 1, MAX_LOG_LINES)?,
            },
            ("guest-config", [vmid]) => Command::GuestConfig {
                vmid: number(vmid, 100, MAX_VMID)?,
            },
            ("help" | "exit" | "quit" | "status" | "guests", _) => {
                return Err(usage(static_word(first), "no arguments"));
            }
            ("restart", _) => return Err(usage("restart", "one unit")),
            ("logs", _) => return Err(usage("logs", "one unit and optionally --lines N")),
            ("guest-config", _) => return Err(usage("guest-config", "one VMID")),
            _ => {
                return Err(ParseError::UnknownCommand {
                    command: bounded(first),
                });
            }
        };
        Ok(Some(command))
    }

    /// The guest this command touches, which must consent to it (decision 0080); `None` for
    /// a host-level command.
    pub fn guest(&self) -> Option<u32> {
        match self {
            Command::GuestConfig { vmid } => Some(*vmid),
            Command::Help
            | Command::Exit
            | Command::Status
            | Command::Restart(_)
            | Command::Logs { .. }
            | Command::Guests => None,
        }
    }

    /// The fixed command line run through `sudo -n` for this command; `None` for the shell's
    /// own commands (`help`, `exit`). Every pager is off by argument, not by environment.
    pub fn argv(&self) -> Option<Vec<String>> {
        let v = |parts: &[&str]| Some(parts.iter().map(|p| (*p).to_owned()).collect());
        match self {
            Command::Help | Command::Exit => None,
            Command::Status => v(&[
                "/usr/bin/systemctl",
                "--no-pager",
                "--lines=0",
                "status",
                Unit::Agent.unit_name(),
                Unit::HelperSocket.unit_name(),
                Unit::UpdateGate.unit_name(),
            ]),
            Command::Restart(t) => v(&["/usr/bin/systemctl", "restart", t.unit().unit_name()]),
            Command::Logs { unit, lines } => v(&[
                "/usr/bin/journalctl",
                "--no-pager",
                "--unit",
                unit.unit_name(),
                "--lines",
                &lines.to_string(),
            ]),
            Command::Guests => v(&["/usr/sbin/pct", "list"]),
            Command::GuestConfig { vmid } => v(&["/usr/sbin/pct", "config", &vmid.to_string()]),
        }
    }
}

impl std::fmt::Display for Command {
    /// The command as parsed, in its canonical spelling (what the audit trail records).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Help => f.write_str("help"),
            Command::Exit => f.write_str("exit"),
            Command::Status => f.write_str("status"),
            Command::Guests => f.write_str("guests"),
            Command::Restart(t) => write!(f, "restart {}", t.unit().word()),
            Command::Logs { unit, lines } => write!(f, "logs {} --lines {lines}", unit.word()),
            Command::GuestConfig { vmid } => write!(f, "guest-config {vmid}"),
        }
    }
}

fn static_word(word: &str) -> &'static str {
    ["help", "exit", "quit", "status", "guests"]
        .into_iter()
        .find(|w| *w == word)
        .unwrap_or("command")
}

#[cfg(test)]
mod tests;
