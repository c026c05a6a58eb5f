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
async fn watchdog_pings(command: Command, dir: &Path) -> (Vec<Instant>, Instant) {
    watchdog_pings_for(command, dir, WINDOW).await
}

/// As [`watchdog_pings`], listening for `window`.
async fn watchdog_pings_for(
    mut command: Command,
    dir: &Path,
    window: Duration,
) -> (Vec<Instant>, Instant) {
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
    let until = ready + window;
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

/// What the test binary runs as the agent of the stall tests: the library built with the
/// `failpoints` feature, told to notify systemd as `bosun-agentd`'s `main` does.
const NOTIFYING_CHILD: &str = "BOSUN_WATCHDOG_AGENT_CONFIG";

/// Not a test of its own: the notifying agent process [`notifying_agent`] starts (does nothing
/// in an ordinary run).
#[test]
fn notifying_agent_child() {
    let Ok(config) = std::env::var(NOTIFYING_CHILD) else {
        return;
    };
    agent_support::install_crypto();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let config = bosun_agentd::config::AgentConfig::load(Path::new(&config)).unwrap();
        let options = bosun_agentd::runtime::RunOptions {
            notify_systemd: true,
            ..Default::default()
        };
        let shutdown = tokio_util::sync::CancellationToken::new();
        bosun_agentd::runtime::run_with(config, shutdown, options)
            .await
            .unwrap();
    });
}

/// This test binary re-run as the agent on `config`, notifying systemd, with `failpoint` armed.
fn notifying_agent(config: &Path, failpoint: Option<&str>) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "watchdog::notifying_agent_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(NOTIFYING_CHILD, config)
        .env("RUST_LOG", "warn");
    match failpoint {
        Some(point) => command.env(bosun_agentd::failpoint::ENV, point),
        None => command.env_remove(bosun_agentd::failpoint::ENV),
    };
    command
}

/// Gives the agent's config a hub loop stall limit of `ms`.
fn with_stall_limit(config: &Path, ms: u64) {
    let text = std::fs::read_to_string(config).unwrap();
    let text = if text.contains("[poll]\n") {
        text.replace("[poll]\n", &format!("[poll]\nstall_limit_ms = {ms}\n"))
    } else {
        format!("{text}\n[poll]\nstall_limit_ms = {ms}\n")
    };
    std::fs::write(config, text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wedged_hub_loop_stops_the_pings_so_systemd_restarts_the_agent() {
    let (sim, hub, files) = agent_support::enrolled_stack().await;
    with_stall_limit(&files.config_path, 3_000);
    // The hub loop stops for good at its first round (an await that never ends); the journal
    // and every other task go on answering.
    let agent = notifying_agent(&files.config_path, Some("poll.round.stall"));
    let window = Duration::from_secs(12);
    let (pings, ready) = watchdog_pings_for(agent, files.dir.path(), window).await;
    let after: Vec<_> = pings.iter().map(|p| p.duration_since(ready)).collect();
    eprintln!("pings after READY=1 with the hub loop wedged: {after:?}");
    assert!(
        !pings.is_empty(),
        "the agent pinged while the loop had not yet stalled for 3 s"
    );
    let last = *pings.last().unwrap();
    let silent = (ready + window).duration_since(last);
    assert!(
        silent >= INTERVAL * 2,
        "after the stall limit no ping comes ({silent:?} silent at the end; pings {after:?}): \
         systemd kills the agent after WATCHDOG_USEC={INTERVAL:?}"
    );
    hub.stop().await;
    drop(sim);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_hub_is_not_a_wedge() {
    let (sim, hub, files) = agent_support::enrolled_stack().await;
    // Enrolled once, then the hub goes away for good: every poll fails and backs off.
    let enrolled = agent_support::InProcessAgent::start(&files.config_path).await;
    enrolled.stop().await;
    hub.stop().await;
    with_stall_limit(&files.config_path, 3_000);
    let agent = notifying_agent(&files.config_path, None);
    let window = Duration::from_secs(10);
    let (pings, ready) = watchdog_pings_for(agent, files.dir.path(), window).await;
    let mut last = ready;
    for ping in pings.iter().chain(std::iter::once(&(ready + window))) {
        assert!(
            ping.duration_since(last) < INTERVAL,
            "a hub loop backing off from an unreachable hub is not stalled: {:?} without a ping",
            ping.duration_since(last)
        );
        last = *ping;
    }
    drop(sim);
}
