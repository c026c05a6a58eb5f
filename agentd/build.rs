//! Link arguments of the agent's programs.
//!
//! `-z pack-relative-relocs`: the relative relocations a position-independent program needs
//! at start (one for every pointer in its read-only data: vtables, string tables) are stored
//! as a bitmap (`DT_RELR`) rather than 24 bytes each, which takes ~600 kB of relocation table
//! out of `bosun-agentd` (docs/benchmarks.md, "Agent core"); the loader reads that table once
//! at start, so it stayed resident for the agent's whole life. Needs glibc 2.36 (Debian 12,
//! Proxmox VE 8) at run time; the package's `$auto` dependency says so.
//!
//! `--symbol-ordering-file=hot-code.txt` (decision 0091): the functions an idle agent runs,
//! as `scripts/agent-hot-code` listed them, laid out together at the start of the code, so
//! the few 64 KiB windows the kernel maps around them are all an idle agent keeps resident of
//! its code once it gave the rest back. Only where the linker is LLD (rustc's default for
//! x86-64 Linux); names the binary no longer has are skipped without a warning.
//! `BOSUN_AGENT_HOT_CODE` names another list: `scripts/packages` links the agent again with
//! the list resolved against the agent it first linked, when code moved since the list was
//! made (decision 0137).

fn main() {
    println!("cargo::rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    println!("cargo::rerun-if-env-changed=BOSUN_AGENT_HOT_CODE");
    let order = match std::env::var_os("BOSUN_AGENT_HOT_CODE") {
        Some(resolved) => std::path::PathBuf::from(resolved),
        None => std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default())
            .join("hot-code.txt"),
    };
    println!("cargo::rerun-if-changed={}", order.display());
    if std::env::var("TARGET").as_deref() == Ok("x86_64-unknown-linux-gnu") && order.is_file() {
        println!(
            "cargo::rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        println!("cargo::rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}
