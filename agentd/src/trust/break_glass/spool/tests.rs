use std::io::Write;

use super::*;

const SESSION: &str = "0b1c2d3e-4f50-4617-8829-3a4b5c6d7e8f";

fn line(command: &str, status: Option<u8>) -> String {
    format!(
        "{}\n",
        serde_json::json!({"at": 1_790_000_000u64, "session": SESSION, "command": command, "status": status})
    )
}

fn spool(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("commands.jsonl");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn append(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

#[test]
fn the_shells_lines_become_commands_with_their_kind() {
    let text = [
        line("status", Some(0)),
        line("restart agent", Some(1)),
        line("logs agent --lines 200", Some(0)),
        line("guest-config 101", Some(0)),
        line("refused", None),
    ]
    .concat();
    let (_dir, path) = spool(&text);
    let chunk = read_from(&path, 0).unwrap();
    let kinds: Vec<(&str, &str, Option<u8>)> = chunk
        .commands
        .iter()
        .map(|c| (c.kind.as_str(), c.command.as_str(), c.status))
        .collect();
    assert_eq!(
        kinds,
        [
            ("status", "status", Some(0)),
            ("restart", "restart agent", Some(1)),
            ("logs", "logs agent --lines 200", Some(0)),
            ("guest-config", "guest-config 101", Some(0)),
            ("refused", "refused", None),
        ]
    );
    assert_eq!(chunk.commands[0].session, SESSION);
    assert_eq!(chunk.commands[0].ran_at.as_second(), 1_790_000_000);
    assert_eq!((chunk.garbage, chunk.next), (0, text.len() as u64));
    assert!(!chunk.more && !chunk.restarted);
    // Read again from where it stopped: nothing new.
    let again = read_from(&path, chunk.next).unwrap();
    assert_eq!((again.commands.len(), again.next), (0, chunk.next));
}

fn refused_line(command: &str, status: Option<u8>, refused: &str) -> String {
    format!(
        "{}\n",
        serde_json::json!({"at": 1_790_000_000u64, "session": SESSION, "command": command, "status": status, "refused": refused})
    )
}

#[test]
fn a_guest_command_refused_for_want_of_consent_names_its_guest() {
    let text = [
        refused_line("guest-config 101", None, NO_CONSENT),
        line("guest-config 102", Some(0)),
        line("guests", Some(0)),
    ]
    .concat();
    let (_dir, path) = spool(&text);
    let chunk = read_from(&path, 0).unwrap();
    type Seen<'a> = (&'a str, Option<u32>, Option<&'a str>, Option<u8>);
    let seen: Vec<Seen<'_>> = chunk
        .commands
        .iter()
        .map(|c| (c.kind.as_str(), c.vmid, c.refused, c.status))
        .collect();
    assert_eq!(
        seen,
        [
            ("guest-config", Some(101), Some(NO_CONSENT), None),
            ("guest-config", Some(102), None, Some(0)),
            ("guests", None, None, Some(0)),
        ]
    );
    assert_eq!(chunk.garbage, 0);
}

#[test]
fn lines_the_shell_does_not_write_are_counted_and_skipped() {
    let forged = [
        // Not the shell's canonical spelling, or not a command that runs anything.
        line("restart  agent", Some(0)),
        line("Status", Some(0)),
        line("help", Some(0)),
        line("cat /etc/shadow", Some(0)),
        // A command that ran has a status; a refused line has none.
        line("status", None),
        line("refused", Some(0)),
        // Refused for want of consent: only a guest's command, never with a status, and
        // `no_consent` is the only reason.
        refused_line("status", None, NO_CONSENT),
        refused_line("guest-config 101", Some(0), NO_CONSENT),
        refused_line("guest-config 101", None, "because"),
        refused_line("refused", None, NO_CONSENT),
        // Not a door.
        line("status", Some(0)).replace(SESSION, "../../etc"),
        // Unknown fields, not JSON, a time past what a timestamp holds.
        "{\"at\":1,\"session\":\"0b1c2d3e-4f50-4617-8829-3a4b5c6d7e8f\",\"command\":\"status\",\"status\":0,\"guest\":\"x\"}\n".into(),
        "not json\n".into(),
        line("status", Some(0)).replace("1790000000", "99999999999999999"),
        // Longer than any line the shell writes.
        format!(
            "{{\"at\":1,\"session\":\"{SESSION}\",\"command\":\"status\",\"status\":0,\"pad\":\"{}\"}}\n",
            "x".repeat(MAX_SPOOL_LINE)
        ),
    ];
    let text = [forged.concat(), "\n".into(), line("guests", Some(0))].concat();
    let (_dir, path) = spool(&text);
    let chunk = read_from(&path, 0).unwrap();
    assert_eq!(chunk.garbage, forged.len());
    assert_eq!(chunk.commands.len(), 1);
    assert_eq!(chunk.commands[0].command, "guests");
    assert_eq!(chunk.next, text.len() as u64);
}

#[test]
fn a_line_still_being_written_waits_for_the_next_pass() {
    let whole = line("status", Some(0));
    let (_dir, path) = spool(&whole[..whole.len() - 10]);
    let chunk = read_from(&path, 0).unwrap();
    assert_eq!((chunk.commands.len(), chunk.garbage, chunk.next), (0, 0, 0));
    append(&path, &whole[whole.len() - 10..]);
    let chunk = read_from(&path, 0).unwrap();
    assert_eq!(chunk.commands.len(), 1);
    assert_eq!(chunk.next, whole.len() as u64);
}

#[test]
fn a_pass_stops_at_its_line_bound_and_the_next_goes_on() {
    let text = line("status", Some(0)).repeat(MAX_PASS_LINES + 10);
    let (_dir, path) = spool(&text);
    let first = read_from(&path, 0).unwrap();
    assert_eq!(first.commands.len(), MAX_PASS_LINES);
    assert!(first.more);
    let second = read_from(&path, first.next).unwrap();
    assert_eq!(second.commands.len(), 10);
    assert!(!second.more);
    assert_eq!(second.next, text.len() as u64);
}

#[test]
fn a_line_longer_than_a_pass_is_skipped_not_waited_for() {
    let long = "x".repeat(MAX_PASS_BYTES + 100);
    let text = format!("{long}\n{}", line("guests", Some(0)));
    let (_dir, path) = spool(&text);
    let first = read_from(&path, 0).unwrap();
    assert_eq!((first.commands.len(), first.garbage), (0, 1));
    assert_eq!(first.next, MAX_PASS_BYTES as u64);
    assert!(first.more);
    // The rest of the long line is one more skipped line; then the command.
    let second = read_from(&path, first.next).unwrap();
    assert_eq!((second.commands.len(), second.garbage), (1, 1));
    assert_eq!(second.next, text.len() as u64);
}

#[test]
fn a_spool_shorter_than_the_offset_is_read_from_its_start() {
    let (_dir, path) = spool(&line("status", Some(0)));
    let chunk = read_from(&path, 10_000).unwrap();
    assert!(chunk.restarted);
    assert_eq!(chunk.commands.len(), 1);
}

#[test]
fn a_missing_spool_is_empty_and_a_symbolic_link_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let missing = read_from(&dir.path().join("none"), 42).unwrap();
    assert_eq!((missing.commands.len(), missing.next), (0, 42));

    let target = dir.path().join("elsewhere");
    std::fs::write(&target, line("status", Some(0))).unwrap();
    let link = dir.path().join("commands.jsonl");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let err = read_from(&link, 0).unwrap_err();
    assert_eq!(
        err.raw_os_error(),
        Some(rustix::io::Errno::LOOP.raw_os_error())
    );
}

#[tokio::test]
async fn the_watch_wakes_on_a_line_appended_and_ends_with_its_directory() {
    let (dir, path) = spool("");
    let mut watch = SpoolWatch::new(dir.path()).unwrap();
    let quiet = tokio::time::timeout(Duration::from_millis(200), watch.changed()).await;
    assert!(quiet.is_err(), "no change, no wake: {quiet:?}");
    append(&path, &line("status", Some(0)));
    tokio::time::timeout(Duration::from_secs(5), watch.changed())
        .await
        .expect("an appended line wakes the watch")
        .unwrap();
    // A spool created anew (replaced, or the first one) wakes it too.
    std::fs::remove_file(&path).unwrap();
    std::fs::write(dir.path().join("commands.jsonl.new"), "").unwrap();
    std::fs::rename(dir.path().join("commands.jsonl.new"), &path).unwrap();
    tokio::time::timeout(Duration::from_secs(5), watch.changed())
        .await
        .expect("a new spool wakes the watch")
        .unwrap();
    let gone = dir.path().to_owned();
    drop(dir);
    assert!(!gone.exists());
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if watch.changed().await.is_err() {
                return;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "a removed directory ends the watch");
}

#[test]
fn a_missing_directory_cannot_be_watched() {
    let dir = tempfile::tempdir().unwrap();
    let err = SpoolWatch::new(&dir.path().join("missing")).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
}
