//! `bosun-pvesim-vzdump`: a stand-in for `/usr/bin/vzdump` on a machine whose "Proxmox node"
//! is `bosun-pvesim`. `vzdump <vmid…> --storage S --mode stop --compress zstd` runs the
//! simulator's `POST /nodes/{node}/vzdump` as root@pam and prints the task log as the CLI
//! does (`INFO: creating vzdump archive '<path>'` among it). It finds the simulator in
//! `<its own path>.endpoint.json` (see `bosun_pvesim::stand_in`).
//!
//! Exit status: 0 when the job succeeded, 255 when it failed, 2 for arguments vzdump would
//! not accept, 1 when the simulator could not be asked.

fn main() -> std::process::ExitCode {
    bosun_pvesim::stand_in::main("vzdump")
}
