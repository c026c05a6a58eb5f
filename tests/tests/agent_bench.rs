//! Agent figures for `docs/benchmarks.md` (ignored by default; run with
//! `cargo test -p bosun-tests --test integration -- --ignored --nocapture agent_bench::`):
//!
//! - desired-state change → first Proxmox mutation, p50/p90 over 20 changes,
//!   with long-poll;
//! - 20 guests provisioned in parallel vs one, with task durations at a tenth
//!   of the simulator's realistic defaults (restore 3 s, start 0.3 s);
//! - idle RSS and CPU of the `bosun-agentd` binary at a 30 s poll, when
//!   `BOSUN_AGENTD_BIN` names it (build it first): enrolled with nothing desired, then
//!   keeping 20 guests with two storage targets, the local API and metrics. With
//!   `BOSUN_AGENTD_CALLGRIND` naming a directory, the binary runs under valgrind's callgrind,
//!   which counts only the watched minute of each figure and writes it there:
//!   `scripts/agent-hot-code` makes the agent's code layout from it (decision 0091).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::time::{Duration, Instant};

use agent_support::*;
use bosun_pvesim::{SimConfig, SimHandle};
use uuid::Uuid;

/// The sample at `percent` (0..=100) of a sorted, non-empty list.
fn percentile(sorted: &[Duration], percent: usize) -> Duration {
    let idx = (sorted.len() - 1) * percent.min(100) / 100;
    sorted[idx]
}

async fn provision_time(count: usize) -> Duration {
    let config = SimConfig {
        time_scale: 0.1,
        ..SimConfig::fast()
    };
    let sim = start_sim(config).await;
    let hub = RealHub::start().await;
    let token = hub.enroll_token().await;
    let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some(&token));
    let text = std::fs::read_to_string(&files.config_path)
        .unwrap()
        .replace("max_parallel = 8", "max_parallel = 20");
    std::fs::write(&files.config_path, text).unwrap();
    let agent = InProcessAgent::start(&files.config_path).await;
    let guests: Vec<(Uuid, String)> = (0..count)
        .map(|i| (Uuid::new_v4(), format!("b{i}")))
        .collect();
    let list: Vec<(Uuid, &str)> = guests.iter().map(|(g, n)| (*g, n.as_str())).collect();
    let started = Instant::now();
    hub.put_desired(agent.handles.host_id, &desired(&sim, &list, "running"))
        .await;
    eventually(Duration::from_secs(300), "all provisioned", || {
        let sim = sim.clone();
        async move {
            let ids = sim.guest_ids();
            ids.len() == count && ids.iter().all(|v| sim.guest_running(*v) == Some(true))
        }
    })
    .await;
    let took = started.elapsed();
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark"]
async fn agent_figures() {
    // 1. desired change → first Proxmox mutation.
    let (sim, hub, files) = enrolled_stack().await;
    let agent = InProcessAgent::start(&files.config_path).await;
    let host = agent.handles.host_id;
    let guest = Uuid::new_v4();
    hub.put_desired(host, &desired(&sim, &[(guest, "lat")], "running"))
        .await;
    eventually(Duration::from_secs(60), "guest up", || {
        let sim = sim.clone();
        async move { sim.guest_ids().len() == 1 && sim.guest_running(sim.guest_ids()[0]) == Some(true) }
    })
    .await;
    let mut samples = Vec::new();
    for i in 0..20u32 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = mutations(&sim).len();
        let mut doc = desired(&sim, &[(guest, "lat")], "running");
        doc["guests"][0]["resources"]["cores"] = serde_json::json!(1 + (i % 2) * 2);
        let t0 = Instant::now();
        hub.put_desired(host, &doc).await;
        loop {
            if mutations(&sim).len() > before {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "no mutation after a change"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        samples.push(t0.elapsed());
    }
    samples.sort();
    println!(
        "desired change -> first proxmox call: p50 {:?} p90 {:?} max {:?} (n={})",
        percentile(&samples, 50),
        percentile(&samples, 90),
        samples.last().unwrap(),
        samples.len()
    );
    agent.stop().await;
    hub.stop().await;
    sim.shutdown().await;

    // 2. 20 in parallel vs 1.
    let one = provision_time(1).await;
    let twenty = provision_time(20).await;
    println!(
        "provision 1 guest: {one:?}; 20 guests in parallel: {twenty:?}; ratio {:.2}",
        twenty.as_secs_f64() / one.as_secs_f64()
    );

    // 3. idle RSS / CPU of the real binary.
    match std::env::var("BOSUN_AGENTD_BIN") {
        Ok(bin) => {
            print_layout(&bin);
            idle_figures(&bin).await;
            busy_idle_figures(&bin).await;
        }
        Err(_) => println!("idle figures skipped: set BOSUN_AGENTD_BIN"),
    }
}

/// Only the idle figures (needs `BOSUN_AGENTD_BIN`): the bare agent, then the agent with 20
/// guests, two storage targets, the local API and metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark"]
async fn agent_idle_figures() {
    let bin = std::env::var("BOSUN_AGENTD_BIN").expect("set BOSUN_AGENTD_BIN to the agent binary");
    print_layout(&bin);
    idle_figures(&bin).await;
    busy_idle_figures(&bin).await;
}

/// Prints how many of the functions `agentd/hot-code.txt` lays out together the binary has,
/// and over how much of its code they lie (decisions 0091, 0137): a function's name changes
/// with the code around it, so a list made before the agent changed may name functions it no
/// longer has, and the idle figures of such a binary are of code spread over the whole of it.
/// A binary linked with the list resolved (`scripts/packages`) has the list's functions that
/// kept their names, but lays out the resolved list: the span says which one it laid out.
/// `BOSUN_AGENT_HOT_CODE` names the list the binary was linked with, as for the build.
fn print_layout(bin: &str) {
    let list = std::env::var_os("BOSUN_AGENT_HOT_CODE").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../agentd/hot-code.txt"),
        std::path::PathBuf::from,
    );
    let listed: std::collections::HashSet<String> = std::fs::read_to_string(&list)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    let out = match std::process::Command::new("nm")
        .args(["--defined-only", "-S", bin])
        .output()
    {
        Ok(out) if out.status.success() => out,
        _ => return println!("hot code: not counted (`nm` could not read {bin})"),
    };
    let symbols = String::from_utf8_lossy(&out.stdout);
    // `address size type name`, in hex.
    let found: std::collections::HashMap<&str, (u64, u64)> = symbols
        .lines()
        .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [address, size, _, name] if listed.contains(name) => Some((
                name,
                (
                    u64::from_str_radix(address, 16).ok()?,
                    u64::from_str_radix(size, 16).ok()?,
                ),
            )),
            _ => None,
        })
        .collect();
    let code: u64 = found.values().map(|(_, size)| size).sum();
    let span = found.values().map(|(at, _)| *at).min().map_or(0, |first| {
        found
            .values()
            .map(|(at, size)| at + size)
            .max()
            .unwrap_or(first)
            - first
    });
    let share = found.len() * 100 / listed.len().max(1);
    let verdict = if share < 90 {
        "STALE: run scripts/agent-hot-code"
    } else if span > code + code / 4 {
        "SPREAD OUT: linked with another list"
    } else {
        "laid out together"
    };
    let mb = |bytes: u64| bytes as f64 / 1e6;
    println!(
        "hot code: {} of the {} functions of {} in {bin} ({share} %), \
         {:.2} MB of code within {:.2} MB ({verdict})",
        found.len(),
        listed.len(),
        list.display(),
        mb(code),
        mb(span),
    );
}

/// The pace of the idle figures: the hub holds a poll with nothing new this long (production
/// holds 25 s), the agent asks for as long and reconciles as often.
const IDLE_PACE: Duration = Duration::from_secs(30);

/// How long after its last code-page give-back an agent has run everything it runs at idle
/// once (a poll, a reconcile pass: one pace), so that its code is mapped again.
const REMAPPED: Duration = Duration::from_secs(35);
/// How long the figure with guests waits once they run and its targets are mounted: the
/// backup scheduler looks at least once a minute and reads each new guest's backups in the
/// storage once, at its first look; the figure is of what follows, not of that first minute.
const SETTLE_GUESTS: Duration = Duration::from_secs(70);
const WATCH: Duration = Duration::from_secs(60);

/// A real hub holding polls `IDLE_PACE`, the simulator, and an agent's files at that pace,
/// with the break-glass spool's directory in place, as the package makes it.
async fn idle_stack() -> (SimHandle, RealHub, AgentFiles) {
    let sim = start_sim(SimConfig::fast()).await;
    let hub = RealHub::start_holding(IDLE_PACE).await;
    let token = hub.enroll_token().await;
    let files = agent_files(&sim, &hub.url, &hub.fingerprint, Some(&token));
    let pace = IDLE_PACE.as_secs();
    let text = std::fs::read_to_string(&files.config_path)
        .unwrap()
        .replace(
            "long_poll_seconds = 5",
            &format!("long_poll_seconds = {pace}"),
        )
        .replace(
            "interval_seconds = 1",
            &format!("interval_seconds = {pace}"),
        );
    let spool_dir = files.dir.path().join("breakglass");
    std::fs::create_dir(&spool_dir).unwrap();
    let spool = spool_dir.join("commands.jsonl");
    std::fs::write(
        &files.config_path,
        format!("{text}[break_glass]\nspool = {spool:?}\n"),
    )
    .unwrap();
    (sim, hub, files)
}

/// The agent binary on `files`' config, as systemd runs it (no environment beyond the log
/// filter).
fn spawn_agent(bin: &str, files: &AgentFiles) -> std::process::Child {
    let mut command = match callgrind_dir() {
        Some(dir) => {
            let mut command = std::process::Command::new("valgrind");
            command
                .arg("--tool=callgrind")
                .arg("--instr-atstart=no")
                .arg(format!("--callgrind-out-file={dir}/callgrind.%p"))
                .args([
                    "--demangle=no",
                    "--compress-strings=no",
                    "--compress-pos=no",
                ])
                .arg(bin);
            command
        }
        None => std::process::Command::new(bin),
    };
    // Under callgrind, valgrind's and the agent's messages are kept beside the profiles: an
    // agent that dies under valgrind says why there.
    let stderr = match callgrind_dir() {
        Some(dir) => std::process::Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(format!("{dir}/agent.stderr"))
                .unwrap(),
        ),
        None => std::process::Stdio::null(),
    };
    // The agent logs to stdout: warnings, and each time it gives its code pages back, which
    // the figures wait for ([`settled`]).
    let log = std::fs::File::create(agent_log(files)).unwrap();
    command
        .arg("--config")
        .arg(&files.config_path)
        .env("RUST_LOG", "warn,bosun_agentd::runtime::code_pages=debug")
        .stdout(log)
        .stderr(stderr)
        .spawn()
        .unwrap()
}

/// Where the agent on `files` logs.
fn agent_log(files: &AgentFiles) -> std::path::PathBuf {
    files.dir.path().join("agent.log")
}

/// How many times the agent on `files` gave its code pages back so far (decision 0063).
fn give_backs(files: &AgentFiles) -> usize {
    std::fs::read_to_string(agent_log(files))
        .unwrap_or_default()
        .matches("code pages given back")
        .count()
}

/// Waits until the agent on `files` has given its code pages back since it had `before` give-
/// backs, and then [`REMAPPED`] passed without another: the figures are of an agent that
/// settled long ago, not of the one-time give-back and the minute that maps its code again.
/// Gives the give-backs seen.
async fn settled(files: &AgentFiles, before: usize) -> usize {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    let mut seen = before;
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the agent did not settle within 240 s ({} give-backs)",
            seen - before
        );
        tokio::time::sleep(if seen == before {
            Duration::from_millis(500)
        } else {
            REMAPPED
        })
        .await;
        let now = give_backs(files);
        if now > before && now == seen {
            return now;
        }
        seen = now;
    }
}

/// Idle RSS and CPU of the agent binary (enrolled, no desired state yet).
async fn idle_figures(bin: &str) {
    let (sim, hub, files) = idle_stack().await;
    let mut child = spawn_agent(bin, &files);
    let before = settled(&files, 0).await;
    let mut seen = profiled(child.id(), watch_idle(child.id(), &sim)).await;
    seen.give_backs = give_backs(&files) - before;
    seen.print(&format!("idle at a {} s poll", IDLE_PACE.as_secs()));
    assert_eq!(seen.mutations, 0, "an idle agent changed nothing");
    let _ = child.kill();
    let _ = child.wait();
    hub.stop().await;
    sim.shutdown().await;
}

/// Guests in the busier idle figure.
const BUSY_GUESTS: usize = 20;

/// Idle RSS and CPU of the agent binary keeping 20 running guests (provisioned from the
/// desired state, with their bootstraps pushed), two `local-dir` storage targets, the local
/// API serving and `/metrics` on.
async fn busy_idle_figures(bin: &str) {
    let (sim, hub, files) = idle_stack().await;
    let roots = tempfile::tempdir().unwrap();
    files.allow_local_dirs(&[roots.path().to_str().unwrap()]);
    files.use_local_api(0, "");
    let metrics_port = fixed_port();
    let mut text = std::fs::read_to_string(&files.config_path).unwrap();
    text.push_str(&format!(
        "[metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\n"
    ));
    std::fs::write(&files.config_path, text).unwrap();
    let mut child = spawn_agent(bin, &files);
    let mut host = None;
    eventually(Duration::from_secs(60), "the agent enrolls", || {
        host = bosun_agentd::links::hub_client::identity::HostIdentity::load(&files.state_dir)
            .ok()
            .flatten()
            .map(|identity| identity.host_id);
        std::future::ready(host.is_some())
    })
    .await;
    let host = host.unwrap();
    let guests: Vec<(Uuid, String)> = (0..BUSY_GUESTS)
        .map(|i| (Uuid::new_v4(), format!("idle{i}")))
        .collect();
    let list: Vec<(Uuid, &str)> = guests.iter().map(|(g, n)| (*g, n.as_str())).collect();
    let mut doc = desired(&sim, &list, "running");
    let targets: Vec<String> = ["nightly", "weekly"]
        .iter()
        .map(|name| roots.path().join(name).display().to_string())
        .collect();
    doc["storage"] = serde_json::Value::Array(
        targets
            .iter()
            .map(|path| {
                serde_json::json!({
                    "type": "local-dir", "durable_id": path, "class": "slow",
                    "role": "vzdump-target", "policy": {}, "state": "attached",
                })
            })
            .collect(),
    );
    hub.put_desired(host, &doc).await;
    eventually(
        Duration::from_secs(300),
        "20 guests running, both targets mounted",
        || {
            let (sim, hub, targets) = (sim.clone(), &hub, &targets);
            async move {
                let ids = sim.guest_ids();
                let running = ids.len() == BUSY_GUESTS
                    && ids.iter().all(|v| sim.guest_running(*v) == Some(true));
                let report = hub.host(host).await;
                let mounted = targets.iter().all(|t| {
                    report["last_report"]["storage"]
                        .as_array()
                        .is_some_and(|all| {
                            all.iter()
                                .any(|r| r["durable_id"] == t.as_str() && r["status"] == "mounted")
                        })
                });
                running && mounted
            }
        },
    )
    .await;
    // Provisioning was busy: the agent gives its code back once it settles after it.
    let running = give_backs(&files);
    tokio::time::sleep(SETTLE_GUESTS).await;
    let before = settled(&files, running).await;
    let mut seen = profiled(child.id(), watch_idle(child.id(), &sim)).await;
    seen.give_backs = give_backs(&files) - before;
    seen.print(&format!(
        "idle at a {} s poll with {BUSY_GUESTS} guests, 2 storage targets, local api and metrics",
        IDLE_PACE.as_secs()
    ));
    // Both servers answer: the figure is of an agent serving them.
    let metrics = reqwest::get(format!("http://127.0.0.1:{metrics_port}/metrics"))
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);
    assert_eq!(seen.mutations, 0, "a settled agent changed nothing");
    let _ = child.kill();
    let _ = child.wait();
    hub.stop().await;
    sim.shutdown().await;
}

/// What an idle figure saw of the agent process over [`WATCH`].
struct IdleSeen {
    /// `/proc/PID/status` fields at the end.
    status: String,
    /// CPU time in clock ticks (`/proc/PID/stat` utime + stime: every thread, ended ones
    /// too) and the wall time they were counted over.
    ticks: u64,
    wall: Duration,
    /// On-CPU time and context switches of the threads alive at the end
    /// (`/proc/PID/task/*/schedstat`, `*/status`), a finer view of the same CPU time.
    on_cpu: Duration,
    switches: u64,
    /// Minor and major page faults meanwhile.
    faults: (u64, u64),
    /// Resident kB per mapped file (anonymous memory under `[anon]`, `[heap]`, `[stack]`).
    resident: Vec<(String, u64)>,
    /// Requests other than GET the simulator saw meanwhile.
    mutations: usize,
    /// The Proxmox reads meanwhile: container lists, configs, firewall options, the rest.
    reads: [usize; 4],
    /// Code-page give-backs meanwhile (none in a settled agent's minute).
    give_backs: usize,
    /// The machine's cold-wake floor, measured meanwhile.
    floor: ColdFloor,
}

/// The Proxmox reads of `requests`: container lists, container configs, containers' firewall
/// options, any other read.
fn reads_of(requests: &[bosun_pvesim::LoggedRequest], node: &str) -> [usize; 4] {
    let list = format!("/nodes/{node}/lxc");
    let mut reads = [0; 4];
    for r in requests.iter().filter(|r| r.method == "GET") {
        let guest = r.path.strip_prefix(&format!("{list}/"));
        let kind = if r.path == list {
            0
        } else if guest.is_some_and(|g| g.ends_with("/config")) {
            1
        } else if guest.is_some_and(|g| g.ends_with("/firewall/options")) {
            2
        } else {
            3
        };
        reads[kind] += 1;
    }
    reads
}

/// Per-thread on-CPU nanoseconds and context switches of `pid`.
fn threads(pid: u32) -> std::collections::HashMap<String, (u64, u64)> {
    let mut all = std::collections::HashMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = task.unwrap().path();
        let (Ok(sched), Ok(status)) = (
            std::fs::read_to_string(dir.join("schedstat")),
            std::fs::read_to_string(dir.join("status")),
        ) else {
            continue;
        };
        let ns = sched
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let switches = status
            .lines()
            .filter(|l| l.contains("ctxt_switches:"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        all.insert(
            dir.file_name().unwrap().to_string_lossy().into_owned(),
            (ns, switches),
        );
    }
    all
}

/// CPU time of `pid` in clock ticks: utime + stime, fields 14 and 15 of `/proc/PID/stat`,
/// counted after the command name (which may hold spaces).
fn ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, after_name) = stat.rsplit_once(") ").unwrap();
    after_name
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|v| v.parse::<u64>().unwrap())
        .sum()
}

/// Minor and major page faults of `pid` so far (`/proc/PID/stat` fields 10 and 12). A machine
/// that pages out idle processes' pages (a reclaiming DAMON scheme, say) makes an idle agent
/// fault them back in, and that kernel time counts in its CPU.
fn faults(pid: u32) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, after_name) = stat.rsplit_once(") ").unwrap();
    let fields: Vec<u64> = after_name
        .split_whitespace()
        .skip(7)
        .take(3)
        .map(|v| v.parse::<u64>().unwrap())
        .collect();
    (fields[0], fields[2])
}

/// Where the agent's callgrind profiles go, when they are asked for.
fn callgrind_dir() -> Option<String> {
    std::env::var("BOSUN_AGENTD_CALLGRIND").ok()
}

/// Runs `watch`; an agent under callgrind counts only meanwhile, and writes its profile after.
async fn profiled<T>(pid: u32, watch: impl std::future::Future<Output = T>) -> T {
    let control = |args: &[&str]| {
        if callgrind_dir().is_some() {
            let status = std::process::Command::new("callgrind_control")
                .args(args)
                .arg(pid.to_string())
                .status()
                .unwrap();
            assert!(status.success(), "callgrind_control {args:?}: {status}");
        }
    };
    control(&["--instr=on"]);
    let seen = watch.await;
    control(&["--dump"]);
    seen
}

/// Watches the agent `pid` for [`WATCH`].
async fn watch_idle(pid: u32, sim: &SimHandle) -> IdleSeen {
    let before = mutations(sim).len();
    let logged = sim.requests().len();
    let floor = std::thread::spawn(cold_wake_floor);
    let (t0, faults0, threads0, w0) = (ticks(pid), faults(pid), threads(pid), Instant::now());
    tokio::time::sleep(WATCH).await;
    let floor = floor.join().unwrap();
    let (t1, faults1, threads1, wall) = (ticks(pid), faults(pid), threads(pid), w0.elapsed());
    let (mut ns, mut switches) = (0, 0);
    for (tid, (n1, s1)) in &threads1 {
        let (n0, s0) = threads0.get(tid).copied().unwrap_or_default();
        ns += n1 - n0;
        switches += s1 - s0;
    }
    // Where the resident pages are: per mapped file (anonymous memory under `[anon]`).
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let mut by_file = std::collections::BTreeMap::<String, u64>::new();
    let mut current = String::new();
    for line in smaps.lines() {
        let mut parts = line.split_whitespace();
        let first = parts.next().unwrap_or_default();
        if first.contains('-') && !first.ends_with(':') {
            current = parts.nth(4).unwrap_or("[anon]").to_owned();
        } else if first == "Rss:" {
            *by_file.entry(current.clone()).or_default() += parts
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    let mut resident: Vec<(String, u64)> = by_file.into_iter().collect();
    resident.sort_by_key(|(_, kb)| std::cmp::Reverse(*kb));
    IdleSeen {
        status: std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap(),
        ticks: t1 - t0,
        wall,
        on_cpu: Duration::from_nanos(ns),
        switches,
        faults: (faults1.0 - faults0.0, faults1.1 - faults0.1),
        resident,
        mutations: mutations(sim).len() - before,
        reads: reads_of(&sim.requests()[logged..], &sim.endpoint().node),
        give_backs: 0,
        floor,
    }
}

/// The machine's floor beside an idle figure: how much more CPU the same work takes when it
/// wakes after a pace asleep than when it runs back to back. An idle agent does all its work
/// that way, and on a virtual machine whose host runs other machines the caches and TLBs it
/// left are someone else's by then: on the development machine a walk over 4 MiB took 2.1–2.3
/// ms back to back and 5–22 ms after 15–20 s asleep, with no page fault. The agent's CPU time
/// then says as much about the neighbours as about the agent; its instruction counts
/// (callgrind) do not.
#[derive(Debug, Clone, Copy)]
struct ColdFloor {
    /// The work's CPU time back to back (the median of five runs).
    hot: Duration,
    /// Its CPU time after [`IDLE_PACE`] asleep (the mean of the runs that fit in [`WATCH`]).
    cold: Duration,
}

/// Measures [`ColdFloor`] on this thread over about [`WATCH`].
fn cold_wake_floor() -> ColdFloor {
    // A fixed piece of work that libc's copy does, optimized whatever this test's build:
    // 8 MiB between two buffers of 4 MiB, both ways, so that it is about memory, not code.
    let mut a = vec![1u8; 4 << 20];
    let mut b = vec![2u8; 4 << 20];
    let mut work = || {
        let start = thread_cpu();
        b.copy_from_slice(&a);
        a.copy_from_slice(&b);
        std::hint::black_box((&a, &b));
        thread_cpu().saturating_sub(start)
    };
    let mut hot: Vec<Duration> = (0..5).map(|_| work()).collect();
    hot.sort_unstable();
    let runs = u32::try_from(WATCH.as_secs() / IDLE_PACE.as_secs()).unwrap_or(1);
    let mut cold = Duration::ZERO;
    for _ in 0..runs {
        std::thread::sleep(IDLE_PACE - Duration::from_millis(100));
        cold += work();
    }
    ColdFloor {
        hot: hot[2],
        cold: cold / runs,
    }
}

/// This thread's CPU time so far.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

impl IdleSeen {
    fn field(&self, name: &str) -> String {
        self.status
            .lines()
            .find(|l| l.starts_with(name))
            .map_or("?".to_owned(), |l| {
                l[name.len() + 1..]
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            })
    }

    fn print(&self, what: &str) {
        let wall = self.wall.as_secs_f64();
        #[allow(clippy::cast_precision_loss, reason = "ticks in a minute")]
        let percent = self.ticks as f64 / 100.0 / wall * 100.0;
        println!(
            "{what}: VmRSS {} (anon {}, file {}), VmHWM {}, threads {}; cpu {percent:.3}% of a core over {wall:.0} s ({} ticks; on-cpu {:.1} ms = {:.4}%, {} context switches)",
            self.field("VmRSS"),
            self.field("RssAnon"),
            self.field("RssFile"),
            self.field("VmHWM"),
            self.field("Threads"),
            self.ticks,
            self.on_cpu.as_secs_f64() * 1000.0,
            self.on_cpu.as_secs_f64() / wall * 100.0,
            self.switches,
        );
        let [lists, configs, firewalls, other] = self.reads;
        println!(
            "  proxmox reads: {lists} container lists, {configs} configs, {firewalls} firewall options, {other} other"
        );
        println!(
            "  page faults: {} minor, {} major; code pages given back {} times",
            self.faults.0, self.faults.1, self.give_backs
        );
        println!(
            "  floor: the same work took {:.2} ms back to back and {:.2} ms after {} s asleep (x{:.1})",
            self.floor.hot.as_secs_f64() * 1000.0,
            self.floor.cold.as_secs_f64() * 1000.0,
            IDLE_PACE.as_secs(),
            self.floor.cold.as_secs_f64() / self.floor.hot.as_secs_f64().max(1e-9),
        );
        for (file, kb) in self.resident.iter().take(8) {
            println!("  resident {kb:>6} kB  {file}");
        }
    }
}
