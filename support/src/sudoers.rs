//! The command lines `sudoers/bosun-breakglass` must grant, written from the same table the
//! shell runs ([`Command::argv`]), so the two cannot drift (a test compares them).

use crate::command::{Command, Target, Unit};

/// One sudoers command specification per command line the shell can run: fixed lines as
/// they are, the variable ones (`logs … --lines N`, `guest-config VMID`) as sudo's whole-line
/// argument patterns (`^…$`, sudo 1.9.10 and later; the shell bounds the numbers).
pub fn sudoers_commands() -> Vec<String> {
    let fixed = |c: Command| c.argv().map(|a| a.join(" ")).unwrap_or_default();
    let mut out = vec![fixed(Command::Status)];
    for t in [Target::Agent, Target::HelperSocket, Target::UpdateGate] {
        out.push(fixed(Command::Restart(t)));
    }
    for u in [
        Unit::Agent,
        Unit::HelperSocket,
        Unit::Helper,
        Unit::UpdateGate,
    ] {
        // Character classes, not backslashes: a backslash is an escape to sudoers itself.
        let name = u.unit_name().replace('.', "[.]").replace('*', "[*]");
        out.push(format!(
            "/usr/bin/journalctl ^--no-pager --unit {name} --lines [0-9]+$"
        ));
    }
    out.push(fixed(Command::Guests));
    out.push("/usr/sbin/pct ^config [0-9]+$".to_owned());
    out
}
