//! systemd's watchdog, as the units set it (`WatchdogSec=`): the real `bosun-hubd` and
//! `bosun-agentd` binaries run with `NOTIFY_SOCKET` pointing at a datagram socket this
//! test binds and `WATCHDOG_USEC` set the way systemd sets it; the test counts the
//! `WATCHDOG=1` datagrams and measures the gaps between them. A gap as long as the
//! interval is what makes systemd kill and restart the daemon.
//!
//! The binaries come from the same target directory as this test (`cargo nextest run
//! --workspace` and `make test` build them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::net::UnixDatagram;
use tokio::time::Instant;

/// The interval the test gives as `WATCHDOG_USEC`: the daemons must ping at least this often.
const INTERVAL: Duration = Duration::from_secs(2);
/// How long the test listens after `READY=1`.
const WINDOW: Duration = Duration::from_secs(7);

/// `target/<profile>/<name>`, where cargo puts the workspace's binaries.
fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test runs from target/<profile>/deps")
        .join(name);
    assert!(
        path.is_file(),
        "{} is missing: build the workspace's binaries first (`cargo build --workspace --bins`)",
        path.display()
    );
    path
}

/// A daemon under test, killed however the test ends.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `command` as systemd would start a `Type=notify` unit with `WatchdogSec=`,
/// waits for `READY=1`, then gives the instants of the `WATCHDOG=1` datagrams received
/// during [`WINDOW`].
async fn watchdog_pings(mut command: Command, dir: &Path) -> (Vec<Instant>, Instant) {
    let socket_path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    let child = command
        .env("NOTIFY_SOCKET", &socket_path)
        .env("WATCHDOG_USEC", INTERVAL.as_micros().to_string())
        .env_remove("WATCHDOG_PID")
        .env_remove("JOURNAL_STREAM")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut daemon = Daemon(child);
    let mut buf = vec![0u8; 4096];

    let ready_by = Instant::now() + Duration::from_secs(60);
    let ready = loop {
        let received = tokio::time::timeout_at(ready_by, socket.recv(&mut buf)).await;
        let len = received
            .unwrap_or_else(|_| panic!("no READY=1 within 60 s: {:?}", daemon.0.try_wait()))
            .unwrap();
        let text = String::from_utf8_lossy(&buf[..len]);
        if text.lines().any(|l| l == "READY=1") {
            break Instant::now();
        }
    };

    let mut pings = Vec::new();
    let until = ready + WINDOW;
    while let Ok(received) = tokio::time::timeout_at(until, socket.recv(&mut buf)).await {
        let len = received.unwrap();
        let text = String::from_utf8_lossy(&buf[..len]);
        if text.lines().any(|l| l == "WATCHDOG=1") {
            pings.push(Instant::now());
        }
    }
    assert!(
        daemon.0.try_wait().unwrap().is_none(),
        "the daemon exited while the test listened"
    );
    drop(daemon);
    (pings, ready)
}

/// systemd's view: the daemon lives if no gap from `READY=1` on reaches [`INTERVAL`], and
/// it pings at about half the interval, not in a busy loop.
fn assert_kept_alive(who: &str, pings: &[Instant], ready: Instant) {
    let expected = usize::try_from(WINDOW.as_millis() / (INTERVAL.as_millis() / 2)).unwrap();
    assert!(
        pings.len() >= 4,
        "{who}: {} WATCHDOG=1 in {WINDOW:?} with WATCHDOG_USEC={INTERVAL:?} (about {expected} \
         expected); systemd would kill it",
        pings.len()
    );
    assert!(
        pings.len() <= expected * 2 + 2,
        "{who}: {} pings in {WINDOW:?} is far more than one per half interval",
        pings.len()
    );
    let mut last = ready;
    for ping in pings.iter().chain(std::iter::once(&(ready + WINDOW))) {
        let gap = ping.duration_since(last);
        assert!(
            gap < INTERVAL,
            "{who}: {gap:?} without a WATCHDOG=1 (pings at {:?} after READY=1); systemd kills \
             the daemon after WATCHDOG_USEC={INTERVAL:?}",
            pings
                .iter()
                .map(|p| p.duration_since(ready))
                .collect::<Vec<_>>()
        );
        last = *ping;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_pings_the_watchdog_at_half_its_interval() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let init = Command::new(binary("bosun-hubd"))
        .arg("init")
        .arg("--data")
        .arg(&data)
        .output()
        .unwrap();
    assert!(init.status.success(), "bosun-hubd init: {init:?}");

    let mut serve = Command::new(binary("bosun-hubd"));
    serve
        .arg("serve")
        .arg("--data")
        .arg(&data)
        .args(["--listen", "127.0.0.1:0"]);
    let (pings, ready) = watchdog_pings(serve, dir.path()).await;
    assert_kept_alive("bosun-hubd", &pings, ready);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_pings_the_watchdog_while_reconcile_sleeps_an_hour() {
    let (sim, hub, files) = agent_support::enrolled_stack().await;
    // The reconcile loop passes once at start, then sleeps an hour: pings tied to it
    // would stop after the first pass.
    let text = std::fs::read_to_string(&files.config_path).unwrap();
    assert!(text.contains("interval_seconds = 1\n"), "{text}");
    std::fs::write(
        &files.config_path,
        text.replace("interval_seconds = 1\n", "interval_seconds = 3600\n"),
    )
    .unwrap();

    let mut agent = Command::new(binary("bosun-agentd"));
    agent.arg("--config").arg(&files.config_path);
    let (pings, ready) = watchdog_pings(agent, files.dir.path()).await;
    assert_kept_alive("bosun-agentd", &pings, ready);
    hub.stop().await;
    drop(sim);
}
