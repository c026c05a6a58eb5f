//! Link arguments of `bosun-agentctl`, as of the agent's own program (agentd/build.rs).
//!
//! `-z pack-relative-relocs`: the relative relocations a position-independent program needs
//! at start (one for every pointer in its read-only data: vtables, string tables) are stored
//! as a bitmap (`DT_RELR`) rather than 24 bytes each, which takes ~600 kB of relocation table
//! out of `bosun-agentd` (docs/benchmarks.md, "Agent core"); the loader reads that table once
//! at start, so it stayed resident for the agent's whole life. Needs glibc 2.36 (Debian 12,
//! Proxmox VE 8) at run time; the package's `$auto` dependency says so.

fn main() {
    println!("cargo::rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
}
