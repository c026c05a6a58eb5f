//! `mount_by_uuid` and `unmount` through both real transports, with a real loop
//! device, seen from another process.
// Test harness code: a panic is a failed test with its location.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bosun_proto::helper::{HelperUnit, Output, Refusal, Response, VerbName};
use common::*;

fn assert_mounted(install: &Install, call: &Call, target_id: &str, loopdev: &LoopDevice) {
    let target = install.mount_root.join(target_id);
    match call.response() {
        Response::Ok {
            output:
                Output::Mounted {
                    device,
                    target: t,
                    flags,
                },
        } => {
            assert_eq!(device, loopdev.device);
            assert_eq!(Path::new(&t), target);
            assert_eq!(flags, "nosuid,nodev,noexec,noatime");
        }
        other => panic!("unexpected {other:?}: {call:?}"),
    }
    // This test process is "another process": the mount is in the shared namespace.
    let mounts = install.mounts();
    let (_, options) = mounts
        .iter()
        .find(|(t, _)| Path::new(t) == target)
        .unwrap_or_else(|| panic!("{target:?} not in mountinfo: {mounts:?}"));
    for flag in ["nosuid", "nodev", "noexec", "noatime"] {
        assert!(options.split(',').any(|o| o == flag), "{flag} in {options}");
    }
    assert!(target.join("lost+found").is_dir(), "ext4 root visible");
}

fn assert_audit_ok(audit: &serde_json::Value, transport: &str, uid: u32, verb: VerbName) {
    assert_eq!(audit["transport"], transport);
    assert_eq!(audit["caller_uid"], uid);
    assert_eq!(audit["verb"], verb.as_str());
    assert_eq!(audit["result"], "ok");
    assert_eq!(audit["caps"]["no_new_privs"], true);
    let effective: Vec<String> =
        serde_json::from_value(audit["caps"]["effective"].clone()).unwrap();
    assert_eq!(effective, expected_caps(verb));
}

#[test]
fn mount_and_unmount_through_real_sudo_as_the_agent_user() {
    let (uid, _) = test_user();
    let install = Install::new(TEST_USER);
    let _sudoers = SudoersGuard::install(&install.sudoers_for(TEST_USER));
    let loopdev = LoopDevice::ext4(&new_uuid());
    install.mark_usb_disk(&loopdev);
    let _mounted = MountGuard(install.mount_root.join("nas"));

    let call = install.run_via_sudo(
        TEST_USER,
        "mount_by_uuid",
        &mount_request(&loopdev.uuid, "nas"),
    );
    assert_mounted(&install, &call, "nas", &loopdev);
    let audit = call.audit();
    assert_audit_ok(&audit, "sudo", uid, VerbName::MountByUuid);
    assert_eq!(audit["args"]["uuid"], loopdev.uuid);
    assert_eq!(audit["args"]["target_id"], "nas");

    let call = install.run_via_sudo(TEST_USER, "unmount", &unmount_request("nas"));
    assert!(
        matches!(
            call.response(),
            Response::Ok {
                output: Output::Unmounted { .. }
            }
        ),
        "{call:?}"
    );
    assert_audit_ok(&call.audit(), "sudo", uid, VerbName::Unmount);
    assert!(install.mounts().is_empty());
    assert!(
        install.mount_root_entries().is_empty(),
        "target directory removed"
    );

    // sudoers allows only the verbs, one argument each, and nothing else.
    let call = install.run_via_sudo(TEST_USER, "--socket", &unmount_request("nas"));
    assert_ne!(call.code, Some(0));
    assert!(
        call.stdout.is_empty() && !call.stderr.contains(AUDIT_PREFIX),
        "{call:?}"
    );
}

#[test]
fn push_bootstrap_through_real_sudo_and_socket_activation() {
    let (uid, gid) = test_user();
    let install = Install::new(TEST_USER);
    let _sudoers = SudoersGuard::install(&install.sudoers_for(TEST_USER));
    install.guest_pct("");
    install.stamp_guest(101, Some(DOC_GUEST));
    install.stamp_guest(102, None);
    let pushed = |call_output: &str| {
        let response: Response = serde_json::from_str(call_output.trim()).unwrap();
        matches!(
            response,
            Response::Ok {
                output: Output::BootstrapPushed { .. }
            }
        )
    };
    let call = install.run_via_sudo(TEST_USER, "push_bootstrap", &push_request(101));
    assert!(pushed(&call.stdout), "{call:?}");
    let audit = call.audit();
    assert_audit_ok(&audit, "sudo", uid, VerbName::PushBootstrap);
    assert!(!call.stderr.contains(SECRET));
    // The verb on sudo's command line must be the request's.
    let call = install.run_via_sudo(TEST_USER, "unmount", &push_request(101));
    expect_refused(&call, "malformed");

    // Over the socket it runs under bosun-helper-guest@.service, and only there (decision
    // 0071): the host unit's helper refuses it before acting, whoever asks.
    let host = SocketServer::start(&install, gid, HelperUnit::Host);
    let line = host.request_as(uid, gid, &push_request(102));
    let response: Response = serde_json::from_str(&line).unwrap();
    match &response {
        Response::Refused { reason, message } => {
            assert_eq!(*reason, Refusal::Malformed);
            assert!(message.contains("bosun-helper@.service"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let audit = host.audit(0);
    assert_eq!(audit["result"], "refused");
    assert!(audit["caps"].is_null(), "refused before dropping to a verb");
    let server = SocketServer::start(&install, gid, HelperUnit::Guest);
    let line = server.request_as(uid, gid, &push_request(102));
    assert!(pushed(&line), "{line}");
    assert_audit_ok(&server.audit(0), "socket", uid, VerbName::PushBootstrap);
    // And the guest unit's helper refuses a host verb.
    let line = server.request_as(uid, gid, &unmount_request("nas"));
    assert!(line.contains("bosun-helper-guest@.service"), "{line}");
    // 102's stamp was unbound: it is bound to the document's guest first.
    let calls = install.acting_calls();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(calls[0].starts_with("pct [push] [101] ["), "{calls:?}");
    assert!(calls[1].starts_with("pct [push] [102] ["), "{calls:?}");
    assert!(calls[1].contains(GUEST_STAMP_PATH), "{calls:?}");
    assert!(calls[2].starts_with("pct [push] [102] ["), "{calls:?}");
    assert!(
        std::fs::read_dir(&install.staging_root)
            .unwrap()
            .next()
            .is_none(),
        "nothing left staged"
    );
}

/// `systemd-socket-activate --inetd -a`: one helper per connection on stdin/stdout,
/// exactly like a helper socket unit with `Accept=yes`, the helper given that unit's argument.
struct SocketServer {
    child: Child,
    socket: std::path::PathBuf,
    stderr_log: std::path::PathBuf,
}

impl SocketServer {
    fn start(install: &Install, group_gid: u32, unit: HelperUnit) -> SocketServer {
        let socket = install.dir.path().join(unit.socket_file());
        let stderr_log = install
            .dir
            .path()
            .join(format!("{}.stderr", unit.unit_name()));
        let child = Command::new("systemd-socket-activate")
            .args(["--inetd", "-a", "-l"])
            .arg(&socket)
            .arg(&install.helper)
            .arg(unit.socket_arg())
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr_log).unwrap())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "socket never appeared");
            std::thread::sleep(Duration::from_millis(20));
        }
        // As the socket unit: owner root, group of the agent, mode 0660.
        std::os::unix::fs::chown(&socket, Some(0), Some(group_gid)).unwrap();
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o660)).unwrap();
        SocketServer {
            child,
            socket,
            stderr_log,
        }
    }

    /// Sends one request as `uid:gid` with a small Perl client (perl-base is essential
    /// on Debian) and returns the response line.
    fn request_as(&self, uid: u32, gid: u32, input: &[u8]) -> String {
        use std::io::Write;
        use std::os::unix::process::CommandExt;
        // A refused caller gets its answer without the helper reading the request, so
        // the write may hit a closed socket: ignore SIGPIPE and read the answer anyway.
        let script = r#"use IO::Socket::UNIX; $SIG{PIPE} = "IGNORE"; my $s = IO::Socket::UNIX->new(Peer => $ARGV[0]) or die "connect: $!\n"; local $/; my $r = <STDIN>; print $s $r; $s->shutdown(1); print scalar <$s>;"#;
        let mut child = Command::new("perl")
            .args(["-e", script])
            .arg(&self.socket)
            .uid(uid)
            .gid(gid)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "client: {out:?}, server: {}",
            std::fs::read_to_string(&self.stderr_log).unwrap_or_default()
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Waits for the `n`-th audit line the socket-activated helpers wrote.
    fn audit(&self, n: usize) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let file = std::fs::File::open(&self.stderr_log).unwrap();
            let lines: Vec<String> = BufReader::new(file)
                .lines()
                .map_while(Result::ok)
                .filter(|l| l.starts_with(AUDIT_PREFIX))
                .collect();
            if let Some(line) = lines.get(n) {
                return audit_of(line);
            }
            assert!(Instant::now() < deadline, "no audit line {n}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for SocketServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn mount_and_unmount_through_socket_activation() {
    let (uid, gid) = test_user();
    let install = Install::new(TEST_USER);
    let server = SocketServer::start(&install, gid, HelperUnit::Host);
    let loopdev = LoopDevice::ext4(&new_uuid());
    install.mark_usb_disk(&loopdev);
    let _mounted = MountGuard(install.mount_root.join("fast-1"));

    let line = server.request_as(uid, gid, &mount_request(&loopdev.uuid, "fast-1"));
    let call = Call {
        code: Some(0),
        stdout: line,
        stderr: String::new(),
    };
    assert_mounted(&install, &call, "fast-1", &loopdev);
    assert_audit_ok(&server.audit(0), "socket", uid, VerbName::MountByUuid);

    // The wrong caller (root here) is refused on peer credentials; nothing happens.
    let line = server.request_as(0, 0, &unmount_request("fast-1"));
    let response: Response = serde_json::from_str(&line).unwrap();
    assert!(
        matches!(
            &response,
            Response::Refused {
                reason: bosun_proto::helper::Refusal::Caller,
                ..
            }
        ),
        "{response:?}"
    );
    let audit = server.audit(1);
    assert_eq!(audit["caller_uid"], 0);
    assert_eq!(audit["result"], "refused");
    assert!(audit["caps"].is_null(), "refused before dropping to a verb");
    assert_eq!(install.mounts().len(), 1, "still mounted");

    let line = server.request_as(uid, gid, &unmount_request("fast-1"));
    let response: Response = serde_json::from_str(&line).unwrap();
    assert!(
        matches!(
            response,
            Response::Ok {
                output: Output::Unmounted { .. }
            }
        ),
        "{line}"
    );
    assert_audit_ok(&server.audit(2), "socket", uid, VerbName::Unmount);
    assert!(install.mounts().is_empty());
}
