//! The break-glass support shell's closed command set (decision 0035): each line an operator
//! types is parsed into a [`Command`] before any effect, and each command maps to one fixed
//! command line run through `sudo -n` ([`Command::argv`]). Nothing here starts a shell or a
//! pager, and nothing reads guest data. A command that touches a guest runs only while that
//! guest's controller consents ([`consent`], decision 0080).

mod command;
pub mod consent;

pub use command::{Command, MAX_LINE, MAX_LOG_LINES, ParseError, Target, Unit};
mod sudoers;

pub use sudoers::sudoers_commands;
