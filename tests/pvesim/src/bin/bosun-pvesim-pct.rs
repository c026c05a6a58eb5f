//! `bosun-pvesim-pct`: a stand-in for `/usr/sbin/pct` on a machine whose "Proxmox node" is
//! `bosun-pvesim`. Installed where a helper configuration names `programs.pct` (a test or demo
//! prefix), it runs `pct set|create|start|stop|shutdown|destroy|push|exec` against the
//! simulator as root@pam (see `bosun_pvesim::stand_in` for where it finds the simulator).
//!
//! Exit status: the command's (0, 255 for PVE's `exit(-1)`, a program's own under `exec`),
//! 2 for arguments `pct` would not accept, 1 when the simulator could not be asked.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("bosun-pvesim-pct: starting the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(bosun_pvesim::stand_in::run("pct", args));
    ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
}
