//! The guest agent's output bound.

use super::*;

#[test]
fn exec_output_is_cut_at_the_agents_limit_and_says_so() {
    let (kept, cut) = capped(vec![b'x'; EXEC_MAX_OUTPUT + 10]);
    assert!(cut);
    assert_eq!(kept.len(), EXEC_MAX_OUTPUT);
    let (kept, cut) = capped(vec![b'x'; 10]);
    assert!(!cut);
    assert_eq!(kept.len(), 10);
}

#[test]
fn a_file_read_stops_at_16_mib_and_says_the_file_goes_on() {
    let big = vec![b'a'; FILE_READ_MAX + 1];
    let (chunk, truncated) = read_at_most(&big);
    assert_eq!(chunk.len(), FILE_READ_MAX);
    assert!(truncated);
    let (chunk, truncated) = read_at_most(b"small");
    assert_eq!(chunk, b"small");
    assert!(!truncated);
}
