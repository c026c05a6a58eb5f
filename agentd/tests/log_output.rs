//! What the real `bosun-agentd` writes when its output is not a terminal (a pipe, a file, a
//! log collector): plain text, no ANSI colour codes, fields as `key=value`.

use std::process::Command;

const AGENTD: &str = env!("CARGO_BIN_EXE_bosun-agentd");

#[test]
fn the_daemon_writes_no_colour_codes_to_a_pipe() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("agent.toml");
    // A missing configuration ends the daemon at once, after one error line in its log.
    let out = Command::new(AGENTD)
        .arg("--config")
        .arg(&missing)
        .env_remove("JOURNAL_STREAM")
        .env_remove("NO_COLOR")
        .env("RUST_LOG", "info")
        .output()
        .expect("bosun-agentd runs");
    assert_eq!(out.status.code(), Some(78), "EX_CONFIG");
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(log.contains("invalid configuration"), "{log}");
    assert!(log.contains("ERROR"), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a piped log: {log:?}"
    );
    assert!(log.contains(" error="), "fields print as key=value: {log}");
}
