//! Decision 0048's one bounded exec, per guest-entering verb: a guest program that never ends
//! and one that writes 100 MB. The real helper answers within the verb's time limit, its peak
//! resident set stays under 16 MiB (from `wait4`), and no process of the program's group is
//! left. The limits here are the install's own (`limits` in its configuration), short so the
//! test is quick; the defaults are sized to what each program really does.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use bosun_proto::helper::{Output, Response};
use common::*;

const QUICK: u64 = 2;
const RESTART: u64 = 3;
const HANG: &str = "sleep 1000 & sleep 1000";
const FLOOD: &str = "head -c 100000000 /dev/zero";

struct Case {
    verb: &'static str,
    what: String,
    /// Shell text run first on every `pct` call (e.g. a `pull` that misbehaves).
    prelude: String,
    /// The guest's programs.
    exec: String,
    limit: u64,
}

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (how, body) in [("never ends", HANG), ("writes 100 MB", FLOOD)] {
        let exec = |program: &str| format!("case \"$1\" in {program}) {body};; esac");
        let pull = body.replace(" & sleep 1000", "");
        let check = format!(
            "case \"$1\" in /usr/bin/test) exit 0;; /etc/bosun/restore-check) {body};; esac"
        );
        for (verb, name, prelude, exec, limit) in [
            (
                "push_bootstrap",
                "the stamp pct pull reads",
                format!("[ \"$1\" = pull ] && {{ {pull} > \"$4\"; exit 0; }}"),
                String::new(),
                QUICK,
            ),
            (
                "restart_controller",
                "systemctl",
                String::new(),
                exec("/usr/bin/systemctl"),
                RESTART,
            ),
            (
                "reset_guest_identity",
                "find",
                String::new(),
                exec("/usr/bin/find"),
                QUICK,
            ),
            (
                "restore_check",
                "test (is a check installed)",
                String::new(),
                exec("/usr/bin/test"),
                QUICK,
            ),
            (
                "restore_check",
                "the restore check",
                String::new(),
                check,
                QUICK,
            ),
            (
                "bulk_archive",
                "tar (into the archive file)",
                String::new(),
                exec("/usr/bin/tar"),
                QUICK,
            ),
        ] {
            let what = format!("{name}: {how}");
            cases.push(Case {
                verb,
                what,
                prelude,
                exec,
                limit,
            });
        }
    }
    cases
}

fn request(verb: &str, install: &Install) -> Vec<u8> {
    let args = match verb {
        "push_bootstrap" => serde_json::json!({"vmid": 105, "document": bootstrap_document()}),
        "restore_check" => serde_json::json!({"vmid": 105, "timeout_secs": QUICK}),
        "bulk_archive" => serde_json::json!({
            "vmid": 105, "guest_id": DOC_GUEST, "volume": "media", "path": "/srv/media",
            "storage_dir": install.dir.path().join("backup"), "keep_last": 1,
            "max_bytes": 10_000_000, "timeout_secs": QUICK,
        }),
        _ => serde_json::json!({"vmid": 105}),
    };
    serde_json::to_vec(&serde_json::json!({"verb": verb, "args": args})).unwrap()
}

#[test]
fn every_guest_verb_answers_within_its_bound_in_bounded_memory_and_leaves_no_process() {
    let (uid, _) = test_user();
    let mut figures = Vec::new();
    for case in cases() {
        let install = Install::new(TEST_USER);
        let backup = install.dir.path().join("backup");
        std::fs::create_dir_all(&backup).unwrap();
        let limits = serde_json::json!({
            "limits": {"quick": QUICK, "restart": RESTART}, "backup_roots": [backup],
        });
        install.write_config_with(TEST_USER, "/usr/sbin/blkid", limits);
        let pids = install.dir.path().join("pids");
        let prelude = format!("echo $$ >> '{}'\n{}", pids.display(), case.prelude);
        install.guest_pct_with(&prelude, &case.exec);
        install.stamp_guest(105, Some(DOC_GUEST));
        if case.verb == "bulk_archive" {
            install.guest_config(
                105,
                "hostname: files\nmp0: bulk:vm-105-disk-1,mp=/srv/media\n",
            );
        }
        if case.verb == "restore_check" {
            install.guest_config(
                105,
                "hostname: restore-test-105\nnet0: name=eth0,bridge=vmbr0,link_down=1\n",
            );
        }
        let (call, max_rss_kib, took) =
            run_measured(&install, case.verb, uid, &request(case.verb, &install));
        figures.push(format!(
            "{:22} {:40} answered in {:>5.2}s (bound {}s), helper max RSS {:>5} KiB: {}",
            case.verb,
            case.what,
            took.as_secs_f64(),
            case.limit,
            max_rss_kib,
            serde_json::to_string(&call.response())
                .unwrap()
                .chars()
                .take(110)
                .collect::<String>()
        ));
        assert!(
            took < Duration::from_secs(case.limit) + Duration::from_secs(2),
            "{} {}: {took:?}",
            case.verb,
            case.what
        );
        assert!(
            max_rss_kib < 16 * 1024,
            "{} {}: {max_rss_kib} KiB",
            case.verb,
            case.what
        );
        // A bulk archive that failed leaves no file of its own.
        let volume = backup.join("bosun-bulk").join(DOC_GUEST).join("media");
        let left = std::fs::read_dir(&volume).map_or(0, |d| d.count());
        assert_eq!(left, 0, "{} {}", case.verb, case.what);
        for pid in std::fs::read_to_string(&pids).unwrap().split_whitespace() {
            let members = group_members(pid.parse().unwrap());
            assert!(
                members.is_empty(),
                "{} {}: group {pid} left {members:?}",
                case.verb,
                case.what
            );
        }
        // What the helper answers: a failure naming the limit or the output it would not keep,
        // a stamp too long to be one, or (the check itself) the check's own bounded result.
        match call.response() {
            Response::Failed { message } => assert!(
                message.contains("no end within")
                    || message.contains("bytes of output beyond")
                    || message.contains("more than 10000000 bytes on its standard output"),
                "{message}"
            ),
            Response::Refused { message, .. } => {
                assert!(
                    message.contains("not a bosun.guest-stamp/v1 line"),
                    "{message}"
                )
            }
            Response::Ok {
                output:
                    Output::RestoreChecked {
                        timed_out, output, ..
                    },
            } => assert!(timed_out || output.len() <= bosun_proto::helper::RESTORE_CHECK_MAX_LINES),
            other => panic!("{}: {other:?}", case.what),
        }
    }
    eprintln!("{}", figures.join("\n"));
}
