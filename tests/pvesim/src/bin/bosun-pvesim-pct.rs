//! `bosun-pvesim-pct`: a stand-in for `/usr/sbin/pct` on a machine whose "Proxmox node" is
//! `bosun-pvesim`. Installed where a helper configuration names `programs.pct` (a test or demo
//! prefix), it runs `pct set|create|start|stop|shutdown|destroy|push|exec` against the
//! simulator as root@pam (see `bosun_pvesim::stand_in` for where it finds the simulator).
//!
//! Exit status: the command's (0, 255 for PVE's `exit(-1)`, a program's own under `exec`),
//! 2 for arguments `pct` would not accept, 1 when the simulator could not be asked.

fn main() -> std::process::ExitCode {
    bosun_pvesim::stand_in::main("pct")
}
