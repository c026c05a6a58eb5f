//! `bosun-helper`: see the library documentation for the order of steps.

use std::process::ExitCode;

fn main() -> ExitCode {
    let sudo_uid = std::env::var_os("SUDO_UID");
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    ExitCode::from(bosun_helper::run(&args, sudo_uid))
}
