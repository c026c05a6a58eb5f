//! `hub-bench --store postgres://… --silent PERCENT`: a share of the fleet goes silent at
//! once, and the bench reports how long the polls of the others waited while the hub's
//! dead-man sweep found the silent hosts overdue together (and, one silence window later,
//! sent their alerts).
//!
//! Host *n* is silent when `n mod 100 < PERCENT`. Waiting out the hub's grace window (three
//! poll intervals) would make the silent hosts go overdue one sweep at a time, as their last
//! polls were spread over an interval; so their last poll is set back past the grace window in
//! the database at the start of the phase, as if they had all gone silent together then. The
//! others poll at their usual rate for the whole phase: each poll's latency is kept with the
//! second it was due in, and the bench prints the worst of each second around the sweeps.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use parking_lot::Mutex;
use uuid::Uuid;

use super::agents::Fleet;

/// How far back the silent hosts' last poll is set: past the grace window of a 30 s interval
/// (90 s), so the next sweep finds every one of them overdue.
const SILENT_FOR: Duration = Duration::from_secs(100);

/// Runs the phase: `percent` of the hosts silent, the others polling every `interval` for
/// `duration`.
pub(crate) async fn run(
    fleet: Arc<Fleet>,
    ids: &[Uuid],
    url: &str,
    percent: u8,
    interval: f64,
    duration: Duration,
) -> anyhow::Result<()> {
    let silent = |n: usize| n % 100 < usize::from(percent);
    let polling: Arc<Vec<usize>> = Arc::new((0..ids.len()).filter(|&n| !silent(n)).collect());
    let quiet: Vec<String> = (0..ids.len())
        .filter(|&n| silent(n))
        .map(|n| ids[n].to_string())
        .collect();
    anyhow::ensure!(
        !polling.is_empty(),
        "--silent {percent} leaves no host polling"
    );

    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .context("connecting to the database")?;
    let driver = tokio::spawn(connection);
    let now_ms = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis(),
    )?;
    let back = i64::try_from(SILENT_FOR.as_millis())?;
    let set_back = client
        .execute(
            "UPDATE hosts SET last_seen_ms = $1 WHERE host_id = ANY($2)",
            &[&(now_ms - back), &quiet],
        )
        .await
        .context("setting the silent hosts' last poll back")?;
    println!(
        "silent: {set_back} of {} hosts ({percent} %) silent for {}s from now on; {} polling",
        ids.len(),
        SILENT_FOR.as_secs(),
        polling.len()
    );

    let started = Instant::now();
    let seen: Arc<Mutex<Vec<(u64, Duration)>>> = Arc::default();
    let failed = Arc::new(AtomicU64::new(0));
    let rate = polling.len() as f64 / interval;
    let next = AtomicU64::new(0);
    let (kept, failures) = (seen.clone(), failed.clone());
    super::open_loop(rate, duration, move || {
        let k = usize::try_from(next.fetch_add(1, Ordering::Relaxed)).unwrap_or(0);
        let poll = fleet.clone().poll(polling[k % polling.len()]);
        let second = started.elapsed().as_secs();
        let (kept, failures) = (kept.clone(), failures.clone());
        async move {
            let latency = poll.await;
            match latency {
                Some(latency) => kept.lock().push((second, latency)),
                None => {
                    failures.fetch_add(1, Ordering::Relaxed);
                }
            }
            latency
        }
    })
    .await;

    let overdue = client
        .query_one(
            "SELECT COUNT(*), MIN(at_ms), MAX(at_ms) FROM events WHERE kind = 'overdue'",
            &[],
        )
        .await?;
    let alerts: i64 = client
        .query_one(
            "SELECT COUNT(*) FROM alerts WHERE kind = 'host_overdue'",
            &[],
        )
        .await?
        .get(0);
    driver.abort();
    let (count, first, last): (i64, Option<i64>, Option<i64>) =
        (overdue.get(0), overdue.get(1), overdue.get(2));
    let at = |ms: Option<i64>| ms.map_or(f64::NAN, |ms| (ms - now_ms) as f64 / 1000.0);
    println!(
        "silent: {count} hosts marked overdue between {:.1}s and {:.1}s into the phase; {alerts} overdue alerts",
        at(first),
        at(last),
    );
    report(&seen.lock(), failed.load(Ordering::Relaxed));
    Ok(())
}

/// Prints the latencies of the polling hosts: overall, and the worst of each second.
fn report(seen: &[(u64, Duration)], failed: u64) {
    let mut all: Vec<Duration> = seen.iter().map(|(_, l)| *l).collect();
    all.sort();
    let pick = |per_mille: usize| super::ms(super::percentile(&all, per_mille));
    println!(
        "silent: the others' polls: {} ok, {failed} errors, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        all.len(),
        pick(500),
        pick(990),
        super::ms(all.last().copied().unwrap_or_default()),
    );
    let seconds = seen.iter().map(|(s, _)| *s).max().unwrap_or(0);
    let worst: Vec<String> = (0..=seconds)
        .map(|second| {
            let max = seen
                .iter()
                .filter(|(s, _)| *s == second)
                .map(|(_, l)| *l)
                .max()
                .unwrap_or_default();
            format!("{:.0}", super::ms(max))
        })
        .collect();
    println!(
        "silent: worst poll of each second (ms): {}",
        worst.join(" ")
    );
}
