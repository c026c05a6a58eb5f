#![allow(clippy::unwrap_used)]

use super::*;

const EXE: &str = "/usr/bin/bosun-agentd";

/// A mapping's block as `/proc/PID/smaps` prints it.
fn block(range: &str, perms: &str, path: &str, rss: u64, anonymous: u64) -> String {
    format!(
        "{range} {perms} 00000000 fd:01 1234                       {path}\n\
         Size:               1024 kB\n\
         Rss:                {rss} kB\n\
         Pss:                {rss} kB\n\
         Anonymous:          {anonymous} kB\n\
         VmFlags: rd mr mw me\n"
    )
}

#[test]
fn only_the_binarys_private_read_only_mappings_never_written_qualify() {
    let smaps = [
        // The headers and constants, then the code: qualify.
        block("1000-3000", "r--p", EXE, 8, 0),
        block("3000-9000", "r-xp", EXE, 20, 0),
        // RELRO: read-only now, but the loader wrote it (copy-on-write copies).
        block("9000-a000", "r--p", EXE, 4, 4),
        // Data: writable.
        block("a000-b000", "rw-p", EXE, 4, 0),
        // Nothing resident: nothing to give back.
        block("b000-c000", "r--p", EXE, 0, 0),
        // Another file, a shared mapping, the heap, the vDSO.
        block(
            "10000-20000",
            "r-xp",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            64,
            0,
        ),
        block("20000-21000", "r--s", EXE, 4, 0),
        block("30000-31000", "rw-p", "[heap]", 4, 4),
        block("40000-41000", "r-xp", "[vdso]", 4, 0),
    ]
    .concat();
    let found = never_written(&smaps, EXE);
    assert_eq!(
        found,
        vec![
            Region {
                start: 0x1000,
                len: 0x2000,
                resident_kb: 8
            },
            Region {
                start: 0x3000,
                len: 0x6000,
                resident_kb: 20
            },
        ]
    );
}

#[test]
fn a_path_with_spaces_or_deleted_matches_whole() {
    let deleted = "/usr/bin/bosun-agentd (deleted)";
    let smaps = [
        block("1000-2000", "r-xp", deleted, 4, 0),
        block("2000-3000", "r-xp", EXE, 4, 0),
    ]
    .concat();
    let found = never_written(&smaps, deleted);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].start, 0x1000);
}

#[test]
fn a_mapping_without_its_anonymous_line_does_not_qualify() {
    let smaps = "1000-2000 r-xp 00000000 fd:01 1234 /usr/bin/bosun-agentd\nRss: 4 kB\n";
    assert!(never_written(smaps, EXE).is_empty());
}

#[test]
fn pages_are_given_back_after_the_first_quiet_window_after_a_busy_one() {
    let ms = Duration::from_millis;
    let mut settling = Settling::new(ms(0));
    // Starting counts as busy: the next look comes soon.
    assert_eq!(settling.next_look(), LOOK_SOON);
    // Still busy: 200 ms of CPU in 10 s is 2 %.
    assert!(!settling.look(ms(200), LOOK_SOON));
    assert_eq!(settling.next_look(), LOOK_SOON);
    // Quiet (5 ms in 10 s): give back, once.
    assert!(settling.look(ms(205), LOOK_SOON));
    assert_eq!(settling.next_look(), LOOK_SETTLED);
    assert!(!settling.look(ms(210), LOOK_SETTLED));
    // A burst (1 s in a minute), then quiet again: give back again.
    assert!(!settling.look(ms(1210), LOOK_SETTLED));
    assert_eq!(settling.next_look(), LOOK_SOON);
    assert!(settling.look(ms(1220), LOOK_SOON));
}

/// Resident kB of this test program's own code and constants, read from its smaps.
fn resident_code_kb() -> u64 {
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    never_written(&smaps, &exe.to_string_lossy())
        .iter()
        .map(|r| r.resident_kb)
        .sum()
}

/// Pointers in a static: relocated by the loader at start, in the RELRO mapping.
static WORDS: &[&str] = &["relocated", "at", "start"];

#[test]
fn giving_back_drops_the_code_from_the_rss_and_the_program_runs_on() {
    let before = resident_code_kb();
    assert!(before > 0, "the test program's code is resident");
    let given = give_back().unwrap();
    assert!(given.regions >= 1, "{given:?}");
    assert!(
        given.resident_kb >= before / 2,
        "{given:?}, {before} kB before"
    );
    // What the advice left out is untouched: the relocated pointers still point where the
    // loader made them point.
    assert_eq!(WORDS.concat(), "relocatedatstart");
    // The code runs on (mapped again as it runs) and only part of it came back.
    let after = resident_code_kb();
    assert!(
        after < before,
        "{after} kB resident after, {before} kB before"
    );
    let again = give_back().unwrap();
    assert!(again.regions >= 1);
}
