use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::*;

fn sh(script: &str) -> Command {
    let mut c = Command::new("/bin/sh");
    c.args(["-c", script]);
    c
}

fn limits(secs: u64, keep: usize) -> Limits {
    Limits {
        time: Duration::from_secs(secs),
        keep,
    }
}

#[test]
fn a_program_that_ends_gives_its_code_and_both_streams() {
    let ran = run(
        sh("echo out; echo err >&2; exit 3"),
        Streams::Separate,
        limits(10, 100),
    )
    .unwrap();
    assert_eq!(ran.code(), Some(3));
    assert!(!ran.timed_out);
    assert_eq!(ran.stdout.text(), "out\n");
    assert_eq!(ran.stderr.text(), "err\n");
    let merged = run(
        sh("echo a; echo b >&2; echo c"),
        Streams::Merged,
        limits(10, 100),
    )
    .unwrap();
    assert_eq!(merged.stdout.text(), "a\nb\nc\n");
    assert!(merged.stderr.bytes.is_empty());
}

#[test]
fn a_program_that_never_ends_is_killed_with_its_whole_group() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    // A child in the background that ignores SIGTERM and keeps the pipe open, and the leader.
    let script = format!(
        "trap '' TERM; (trap '' TERM; echo $$ > /dev/null; sh -c 'echo $$ >> {p}; exec sleep 1000') & \
         echo $$ >> {p}; while :; do sleep 1; done",
        p = pids.display()
    );
    let ran = run(sh(&script), Streams::Separate, limits(1, 100)).unwrap();
    assert!(ran.timed_out);
    assert_eq!(ran.code(), None);
    assert!(ran.elapsed < Duration::from_secs(3), "{:?}", ran.elapsed);
    for pid in std::fs::read_to_string(&pids).unwrap().split_whitespace() {
        assert!(!alive(pid), "process {pid} of the group outlived the call");
    }
}

#[test]
fn what_a_group_member_started_is_gone_even_when_the_leader_ended() {
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("pid");
    let script = format!(
        "sh -c 'echo $$ > {}; exec sleep 1000' & sleep 0.2; exit 0",
        pid.display()
    );
    let ran = run(sh(&script), Streams::Separate, limits(10, 100)).unwrap();
    assert_eq!(ran.code(), Some(0));
    assert!(ran.elapsed < Duration::from_secs(3), "{:?}", ran.elapsed);
    let pid = std::fs::read_to_string(&pid).unwrap();
    assert!(!alive(pid.trim()), "the background sleep outlived the call");
}

#[test]
fn output_past_the_cap_is_counted_not_kept() {
    let ran = run(
        sh("head -c 10000000 /dev/zero; head -c 3000000 /dev/zero >&2"),
        Streams::Separate,
        limits(30, 4096),
    )
    .unwrap();
    assert_eq!(ran.code(), Some(0));
    assert_eq!(ran.stdout.bytes.len(), 4096);
    assert_eq!(ran.stdout.discarded, 10_000_000 - 4096);
    assert_eq!(ran.stderr.discarded, 3_000_000 - 4096);
    assert_eq!(ran.discarded(), 13_000_000 - 8192);
}

#[test]
fn a_program_that_cannot_start_is_an_error() {
    let err = run(
        Command::new("/nonexistent/x"),
        Streams::Separate,
        limits(1, 10),
    )
    .unwrap_err();
    assert!(matches!(err, ExecError::Spawn { .. }), "{err:?}");
}

/// Whether `pid` still runs a second after the call returned. The group's SIGKILL is sent
/// before the call returns, but a member the scheduler has not run since dies a moment later
/// (on loaded cores, after the call's return): a member that ignored the kill would run on.
fn alive(pid: &str) -> bool {
    let stat = Path::new("/proc").join(pid).join("stat");
    let running = || {
        std::fs::read_to_string(&stat).is_ok_and(|s| {
            // A zombie waiting for its reaper is not running anything.
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
    };
    let deadline = Instant::now() + Duration::from_secs(1);
    while running() {
        if Instant::now() >= deadline {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

#[test]
fn a_program_writing_into_the_fifo_is_drained_within_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pull");
    let script = format!(
        "echo hello > '{0}'; head -c 50000000 /dev/zero > '{0}'",
        fifo.display()
    );
    let (ran, kept) =
        run_into_fifo(sh(&script), &fifo, 10, Streams::Separate, limits(30, 100)).unwrap();
    assert_eq!(ran.code(), Some(0));
    assert_eq!(kept.bytes, b"hello\n\0\0\0\0");
    assert_eq!(kept.discarded, 50_000_006 - 10);
    assert!(!fifo.exists(), "the fifo is removed");
    // A program that never opens it: the read ends with the program.
    let (ran, kept) =
        run_into_fifo(sh("exit 4"), &fifo, 10, Streams::Separate, limits(30, 100)).unwrap();
    assert_eq!((ran.code(), kept.bytes.len()), (Some(4), 0));
}

#[test]
fn stdout_goes_into_the_file_whole_within_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out");
    let file = std::fs::File::create(&path).unwrap();
    let script = "head -c 200000 /dev/zero | tr '\\0' a; echo warn >&2";
    let (ran, written) = run_to_file(sh(script), file, 200_000, limits(10, 100)).unwrap();
    assert_eq!(ran.code(), Some(0));
    assert_eq!(ran.failure(&[0]), None);
    assert_eq!(ran.stderr.text(), "warn\n");
    assert!(ran.stdout.bytes.is_empty());
    assert_eq!((written.bytes, written.over), (200_000, false));
    assert!(written.error.is_none());
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len(), 200_000);
    assert!(bytes.iter().all(|&b| b == b'a'));
}

#[test]
fn a_byte_past_the_files_limit_ends_the_call_and_kills_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out");
    let file = std::fs::File::create(&path).unwrap();
    // The writer ignores SIGPIPE's end: only the kill stops it.
    let script = "trap '' PIPE; sleep 300 & echo $! > \"$0.pid\"; while :; do echo xxxxxxxx 2>/dev/null; done";
    let mut command = sh(script);
    command.arg(&path);
    let (ran, written) = run_to_file(command, file, 1000, limits(60, 100)).unwrap();
    assert!(written.over, "{written:?}");
    assert!(written.bytes <= 1000);
    assert!(!ran.timed_out);
    assert!(ran.elapsed < Duration::from_secs(30), "{ran:?}");
    assert!(std::fs::metadata(&path).unwrap().len() <= 1000);
    let pid = std::fs::read_to_string(dir.path().join("out.pid")).unwrap();
    assert!(!alive(pid.trim()), "the group's sleep outlived the call");
}

#[test]
fn a_program_writing_into_the_file_past_its_time_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let file = std::fs::File::create(dir.path().join("out")).unwrap();
    let (ran, written) =
        run_to_file(sh("echo some; sleep 300"), file, 1000, limits(1, 100)).unwrap();
    assert!(ran.timed_out);
    assert!(ran.failure(&[0]).is_some());
    assert_eq!((written.bytes, written.over), (5, false));
}

#[test]
fn stdin_is_fed_up_to_its_limit_and_the_source_read_to_it_even_when_the_program_stops() {
    let source: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    // The program reads everything it is fed: the limit, not the source's end.
    let (ran, fed) = run_fed(
        sh("wc -c"),
        std::io::Cursor::new(source.clone()),
        200_000,
        limits(10, 100),
    )
    .unwrap();
    assert_eq!(ran.code(), Some(0));
    assert_eq!(ran.stdout.text().trim(), "200000");
    assert_eq!((fed.read, fed.taken), (200_000, 200_000));
    assert!(fed.error.is_none());
    assert_eq!(fed.source.position(), 200_000);
    // A program that stops reading early: the rest is still read from the source, not fed.
    let (ran, fed) = run_fed(
        sh("head -c 10 > /dev/null"),
        std::io::Cursor::new(source),
        300_000,
        limits(10, 100),
    )
    .unwrap();
    assert_eq!(ran.code(), Some(0));
    assert_eq!(fed.read, 300_000);
    assert!(fed.taken < 300_000, "{}", fed.taken);
}

#[test]
fn a_fed_program_past_its_time_is_killed_and_the_feed_stops() {
    let endless = std::io::repeat(7);
    let started = Instant::now();
    let (ran, fed) = run_fed(
        sh("sleep 30"),
        endless,
        u64::MAX,
        Limits {
            time: Duration::from_millis(300),
            keep: 100,
        },
    )
    .unwrap();
    assert!(ran.timed_out);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(fed.read < u64::MAX);
}
