//! The simulated node for the helper suites that run it end to end: a simulator on
//! 127.0.0.1:0 and the helper's programs wired to its stand-ins (`bosun-pvesim-pct`,
//! `bosun-pvesim-vzdump`, from the same target directory: `cargo build -p bosun-pvesim --bins`).

use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;

use bosun_pvesim::{SimConfig, SimHandle, Simulator};

use super::{Install, install_executable};

/// `target/<profile>/`, where cargo puts the simulator's stand-ins.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test runs from target/<profile>/deps")
        .to_owned();
    for name in ["bosun-pvesim-pct", "bosun-pvesim-vzdump"] {
        assert!(
            dir.join(name).is_file(),
            "{} is missing: build the simulator's stand-ins first (`cargo build -p bosun-pvesim --bins`)",
            dir.join(name).display()
        );
    }
    dir
}

/// A simulator on 127.0.0.1:0 served by its own runtime (the helper runs synchronously).
#[derive(Debug)]
pub struct Node {
    pub sim: SimHandle,
    pub runtime: tokio::runtime::Runtime,
}

impl Node {
    pub fn start() -> Node {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let sim = runtime
            .block_on(Simulator::start(SimConfig::fast(), listener))
            .unwrap();
        Node { sim, runtime }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let sim = self.sim.clone();
        self.runtime.block_on(sim.shutdown());
    }
}

/// Installs `program` as a recording wrapper that hands its arguments to the stand-in,
/// which finds the simulator in the endpoint file beside it.
pub fn wire(install: &Install, node: &Node, program: &str) {
    let stand_in = install.bin.join(format!("sim-{program}"));
    install_executable(
        &bin_dir().join(format!("bosun-pvesim-{program}")),
        &stand_in,
    );
    let beside = PathBuf::from(format!("{}.endpoint.json", stand_in.display()));
    std::fs::write(&beside, serde_json::to_vec(node.sim.endpoint()).unwrap()).unwrap();
    std::fs::set_permissions(&beside, std::fs::Permissions::from_mode(0o600)).unwrap();
    install.stand_in(program, &format!("exec '{}' \"$@\"", stand_in.display()));
}
