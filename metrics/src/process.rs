//! The standard `process_*` families, read from `/proc/self` at each scrape, and
//! `<prefix>_build_info`.
//!
//! Names and meanings follow the Prometheus client libraries' process collectors, so the
//! usual dashboards and rules apply unchanged: `process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, `process_virtual_memory_bytes`,
//! `process_start_time_seconds`, `process_open_fds` and `process_max_fds`.

use std::path::{Path, PathBuf};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

/// A `/proc` file could not be read or did not have the expected shape.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file's content was not understood.
    #[error("{path} has no readable {field}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What was missing.
        field: &'static str,
    },
}

/// One reading of the process's own counters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessStats {
    /// User plus system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// Resident set size, in bytes.
    pub resident_bytes: u64,
    /// Virtual memory size, in bytes.
    pub virtual_bytes: u64,
    /// When the process started, in seconds since the Unix epoch.
    pub start_time_seconds: f64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The soft limit on open file descriptors, if there is one.
    pub max_fds: Option<u64>,
}

/// The fields of `/proc/<pid>/stat` this module uses, in clock ticks and bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StatFields {
    utime_ticks: u64,
    stime_ticks: u64,
    start_ticks: u64,
    vsize_bytes: u64,
    rss_pages: u64,
}

impl ProcessStats {
    /// Reads this process's counters from `/proc`.
    pub fn read() -> Result<Self, ProcessError> {
        Self::read_from(Path::new("/proc"))
    }

    /// Reads the counters from a `/proc` mounted at `proc`.
    fn read_from(proc: &Path) -> Result<Self, ProcessError> {
        let stat_path = proc.join("self/stat");
        let stat = parse_stat(&read(&stat_path)?).ok_or(ProcessError::Format {
            path: stat_path,
            field: "utime, stime, starttime, vsize and rss",
        })?;
        let boot_path = proc.join("stat");
        let boot_time = parse_boot_time(&read(&boot_path)?).ok_or(ProcessError::Format {
            path: boot_path,
            field: "btime",
        })?;
        let fd_path = proc.join("self/fd");
        let open_fds = std::fs::read_dir(&fd_path)
            .map_err(|source| ProcessError::Read {
                path: fd_path,
                source,
            })?
            .count();
        let ticks = rustix::param::clock_ticks_per_second().max(1);
        let page_size = rustix::param::page_size();
        Ok(Self::from_parts(
            stat,
            boot_time,
            ticks,
            u64::try_from(page_size).unwrap_or(4096),
            u64::try_from(open_fds).unwrap_or(u64::MAX),
            rustix::process::getrlimit(rustix::process::Resource::Nofile).current,
        ))
    }

    fn from_parts(
        stat: StatFields,
        boot_time: u64,
        ticks_per_second: u64,
        page_size: u64,
        open_fds: u64,
        max_fds: Option<u64>,
    ) -> Self {
        let seconds = |ticks: u64| ticks_as_f64(ticks) / ticks_as_f64(ticks_per_second);
        Self {
            cpu_seconds: seconds(stat.utime_ticks.saturating_add(stat.stime_ticks)),
            resident_bytes: stat.rss_pages.saturating_mul(page_size),
            virtual_bytes: stat.vsize_bytes,
            start_time_seconds: ticks_as_f64(boot_time) + seconds(stat.start_ticks),
            open_fds,
            max_fds,
        }
    }
}

/// Tick counts stay far below 2^53, where `f64` would round them.
#[allow(clippy::cast_precision_loss)]
fn ticks_as_f64(ticks: u64) -> f64 {
    ticks as f64
}

fn read(path: &Path) -> Result<String, ProcessError> {
    std::fs::read_to_string(path).map_err(|source| ProcessError::Read {
        path: path.to_owned(),
        source,
    })
}

/// The fields of `/proc/<pid>/stat` (proc(5)): the command name in parentheses may hold
/// spaces and parentheses, so fields are counted from the last `)`.
fn parse_stat(text: &str) -> Option<StatFields> {
    let after_comm = &text[text.rfind(')')? + 1..];
    // Field 3 (state) is the first after the command name.
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let field = |number: usize| fields.get(number - 3)?.parse::<u64>().ok();
    Some(StatFields {
        utime_ticks: field(14)?,
        stime_ticks: field(15)?,
        start_ticks: field(22)?,
        vsize_bytes: field(23)?,
        rss_pages: field(24)?,
    })
}

/// `btime` of `/proc/stat`: the boot time in seconds since the epoch.
fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|value| value.trim().parse().ok())
}

/// Encodes the `process_*` families from a fresh [`ProcessStats`] at each scrape; a
/// reading that fails (no `/proc`) leaves them out of that scrape.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let Ok(stats) = ProcessStats::read() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(stats.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            None,
            cpu.metric_type(),
        )?)?;
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                u64_as_f64(stats.resident_bytes),
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                u64_as_f64(stats.virtual_bytes),
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                stats.start_time_seconds,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                u64_as_f64(stats.open_fds),
            ),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        if let Some(max) = stats.max_fds {
            let gauge = ConstGauge::new(u64_as_f64(max));
            gauge.encode(encoder.encode_descriptor(
                "process_max_fds",
                "Maximum number of open file descriptors.",
                None,
                gauge.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

/// Byte and descriptor counts as a sample value (exact below 2^53).
#[allow(clippy::cast_precision_loss)]
fn u64_as_f64(value: u64) -> f64 {
    value as f64
}

/// Registers `build_info{version="…"} 1` in `registry` (under its prefix).
pub fn register_build_info(registry: &mut Registry, version: &str) {
    let info = Family::<[(&'static str, String); 1], Gauge>::default();
    info.get_or_create(&[("version", version.to_owned())])
        .set(1);
    registry.register(
        "build_info",
        "The running build: always 1, with the version as a label",
        info,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        // A command name with spaces and a parenthesis, as a thread may name itself.
        let stat = "4242 (bosun (a) b) S 1 4242 4242 0 -1 4194560 1000 0 0 0 \
                    250 50 0 0 20 0 4 0 12345 104857600 2560 18446744073709551615 1 1 0 0 0 \
                    0 0 4096 0 0 0 0 17 1 0 0 0 0 0";
        let fields = parse_stat(stat).expect("parsed");
        assert_eq!(
            fields,
            StatFields {
                utime_ticks: 250,
                stime_ticks: 50,
                start_ticks: 12345,
                vsize_bytes: 104_857_600,
                rss_pages: 2560,
            }
        );
        let stats = ProcessStats::from_parts(fields, 1_700_000_000, 100, 4096, 9, Some(1024));
        assert!((stats.cpu_seconds - 3.0).abs() < 1e-9);
        assert_eq!(stats.resident_bytes, 2560 * 4096);
        assert!((stats.start_time_seconds - 1_700_000_123.45).abs() < 1e-6);
        assert_eq!(parse_stat("4242 (short) S 1 2"), None);
        assert_eq!(parse_stat("no parenthesis"), None);
    }

    #[test]
    fn boot_time_comes_from_btime() {
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n"),
            Some(1_700_000_000)
        );
        assert_eq!(parse_boot_time("cpu 1\n"), None);
    }

    #[test]
    fn this_process_reads_sensible_values() {
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_secs_f64();
        let stats = ProcessStats::read().expect("/proc is mounted here");
        assert!(stats.resident_bytes > 1024 * 1024, "{stats:?}");
        assert!(stats.virtual_bytes >= stats.resident_bytes, "{stats:?}");
        assert!(stats.open_fds >= 3, "{stats:?}");
        // Started within the last day, not in the future (btime has one-second resolution).
        assert!(stats.start_time_seconds <= before + 2.0, "{stats:?}");
        assert!(stats.start_time_seconds > before - 86_400.0, "{stats:?}");
        assert!(stats.cpu_seconds >= 0.0);
    }

    #[test]
    fn the_collector_writes_the_standard_families() {
        // The collector goes in the root registry: the process families carry no prefix.
        let mut registry = Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        register_build_info(registry.sub_registry_with_prefix("demo"), "9.9.9");
        let text = crate::render(&registry, crate::Format::Text004).expect("encode");
        for family in [
            "# TYPE process_cpu_seconds_total counter",
            "# TYPE process_resident_memory_bytes gauge",
            "# TYPE process_start_time_seconds gauge",
            "# TYPE process_open_fds gauge",
            "demo_build_info{version=\"9.9.9\"} 1",
        ] {
            assert!(text.contains(family), "{family} missing from\n{text}");
        }
    }
}
