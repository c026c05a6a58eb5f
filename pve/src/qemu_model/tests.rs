//! Parsing the guest agent's answers.

use super::*;

#[test]
fn exec_status_reads_perls_types() {
    let s: ExecStatus = serde_json::from_value(serde_json::json!({
        "exited": 1, "exitcode": "0", "out-data": "ok\n", "out-truncated": 0
    }))
    .expect("parses");
    assert!(s.exited && s.exitcode == Some(0) && !s.out_truncated);
    let running: ExecStatus =
        serde_json::from_value(serde_json::json!({"exited": 0})).expect("parses");
    assert!(!running.exited && running.exitcode.is_none());
}
