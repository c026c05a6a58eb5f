//! One function per section of the file, each turning its raw section into settings and
//! refusing what is out of range with the field's name. [`super::AgentConfig::parse`] calls
//! them in the file's order; a section that depends on another (the metrics listener on the
//! local API's bind, the guests' hub on `[hub]`) takes the earlier one's settings.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bosun_pve::PveSettings;
use secrecy::SecretString;
use url::Url;

use super::error::{ConfigError, invalid};
use super::raw::{
    RawBackup, RawBootstrap, RawConfig, RawHelper, RawHub, RawPoll, RawPve, RawReconcile,
    RawStorage,
};
use super::settings::{
    BackupSettings, BootstrapHub, DEFAULT_HOST_KEY_ROTATION_MIN, DEFAULT_PENDING_INTERVAL,
    DEFAULT_REPORT_MIN_INTERVAL, HOST_KEY_ROTATION_MIN_FLOOR, HubSettings, PENDING_INTERVAL_RANGE,
    PollSettings, ReconcileSettings, StorageSettings,
};
use crate::links::helper::{DEFAULT_SOCKET, DEFAULT_SUDO, HelperTransport};

/// The top level's own keys: both paths must be absolute.
pub(super) fn top(raw: &RawConfig) -> Result<(), ConfigError> {
    if !raw.state_dir.is_absolute() {
        return Err(invalid("state_dir", "must be an absolute path"));
    }
    if !raw.allowed_signers.is_absolute() {
        return Err(invalid("allowed_signers", "must be an absolute path"));
    }
    Ok(())
}

/// `[hub]`: its address, how it is trusted, the enrollment token.
pub(super) fn hub(raw: &RawHub) -> Result<HubSettings, ConfigError> {
    let (trust, pins) = hub_trust(raw)?;
    Ok(HubSettings {
        url: https_url("hub.url", &raw.url)?,
        trust,
        pins,
        enrollment_token: raw
            .enrollment_token_file
            .as_deref()
            .map(|p| read_secret("hub.enrollment_token_file", p))
            .transpose()?,
    })
}

/// `[pve]`: the API, its token and how its certificate is trusted.
pub(super) fn pve(raw: &RawPve) -> Result<PveSettings, ConfigError> {
    if raw.fingerprint.is_some() == raw.ca_file.is_some() {
        return Err(invalid(
            "pve.fingerprint",
            "set exactly one of pve.fingerprint and pve.ca_file",
        ));
    }
    if raw.node.is_empty() {
        return Err(invalid("pve.node", "must not be empty"));
    }
    Ok(PveSettings {
        url: https_url("pve.url", &raw.url)?,
        node: raw.node.clone(),
        token_id: raw.token_id.clone(),
        token_secret: read_secret("pve.token_secret_file", &raw.token_secret_file)?,
        fingerprint: raw.fingerprint.clone(),
        ca_file: raw.ca_file.clone(),
        fast_retries: raw.fast_retries,
    })
}

/// `[backup]`: the first tier's storage, the mount root, the watcher's pace and the restore
/// tests' bounds.
pub(super) fn backup(raw: &RawBackup) -> Result<BackupSettings, ConfigError> {
    let watch_ms = raw.watch_interval_ms.unwrap_or(1000);
    if !(200..=5000).contains(&watch_ms) {
        return Err(invalid(
            "backup.watch_interval_ms",
            "must be between 200 and 5000",
        ));
    }
    let backup = BackupSettings {
        storage: raw.storage.clone().unwrap_or_else(|| "local".to_owned()),
        mount_root: raw
            .mount_root
            .clone()
            .unwrap_or_else(|| PathBuf::from("/var/lib/bosun-helper/mnt")),
        watch_interval: Duration::from_millis(watch_ms),
        min_interval_seconds: within(
            "backup.min_interval_seconds",
            raw.min_interval_seconds.unwrap_or(900),
            bosun_proto::data_plan::MIN_INTERVAL_FLOOR,
            bosun_proto::data_plan::MIN_INTERVAL_CEILING,
        )?,
        storage_call_timeout: Duration::from_millis(within(
            "backup.storage_call_timeout_ms",
            raw.storage_call_timeout_ms.unwrap_or(5_000),
            500,
            30_000,
        )?),
        restore_test_stay_up: Duration::from_millis(within(
            "backup.restore_test_stay_up_ms",
            raw.restore_test_stay_up_ms.unwrap_or(30_000),
            1_000,
            600_000,
        )?),
        restore_test_min_free_mib: within(
            "backup.restore_test_min_free_mib",
            raw.restore_test_min_free_mib.unwrap_or(1024),
            0,
            1 << 20,
        )?,
        restore_test_max_tasks: within(
            "backup.restore_test_max_tasks",
            raw.restore_test_max_tasks.unwrap_or(8),
            1,
            64,
        )?,
        restore_test_minute: Duration::from_millis(within(
            "backup.restore_test_minute_ms",
            raw.restore_test_minute_ms.unwrap_or(60_000),
            100,
            60_000,
        )?),
        verify_hour: Duration::from_millis(within(
            "backup.verify_hour_ms",
            raw.verify_hour_ms.unwrap_or(3_600_000),
            1_000,
            3_600_000,
        )?),
        verify_rate_mib_s: std::num::NonZeroU32::new(within(
            "backup.verify_rate_mib_s",
            raw.verify_rate_mib_s.unwrap_or(64),
            1,
            4096,
        )?)
        .unwrap_or(std::num::NonZeroU32::MIN),
        bulk_check: Duration::from_millis(within(
            "backup.bulk_check_ms",
            raw.bulk_check_ms.unwrap_or(60_000),
            1_000,
            60_000,
        )?),
    };
    if backup.storage.is_empty() {
        return Err(invalid("backup.storage", "must not be empty"));
    }
    if !backup.mount_root.is_absolute() {
        return Err(invalid("backup.mount_root", "must be an absolute path"));
    }
    Ok(backup)
}

/// `[storage]`: every local-dir root must pass the storage module's check.
pub(super) fn storage(raw: RawStorage) -> Result<StorageSettings, ConfigError> {
    for root in &raw.local_dir_roots {
        crate::data::storage::local_dir::check_root(root).map_err(|e| {
            invalid(
                "storage.local_dir_roots",
                format!("{}: {}", root.display(), bosun_errchain::error_chain(&e)),
            )
        })?;
    }
    Ok(StorageSettings {
        local_dir_roots: raw.local_dir_roots,
    })
}

/// `[bootstrap]`: what guests are told of the hub, by default `[hub]`'s own address and
/// first pin.
pub(super) fn bootstrap(raw: RawBootstrap, hub: &HubSettings) -> Result<BootstrapHub, ConfigError> {
    Ok(BootstrapHub {
        url: match raw.hub_url {
            Some(url) => trimmed(&https_url("bootstrap.hub_url", &url)?),
            None => trimmed(&hub.url),
        },
        fingerprint: match (raw.hub_fingerprint, hub.pins.first()) {
            (Some(pin), _) => bosun_pin::Pin::parse(&pin)
                .map_err(|_| invalid("bootstrap.hub_fingerprint", PIN_TEXT))?
                .to_string(),
            (None, Some(pin)) => pin.to_string(),
            (None, None) => {
                return Err(invalid(
                    "bootstrap.hub_fingerprint",
                    "must be set when the hub is trusted by hub.ca alone: guests pin the hub",
                ));
            }
        },
    })
}

/// `[poll]`: the long poll, the backoff and the paces of reports, pending polls and host-key
/// rotations.
pub(super) fn poll(raw: &RawPoll) -> Result<PollSettings, ConfigError> {
    let ms = Duration::from_millis;
    let long_poll = raw.long_poll_seconds.unwrap_or(25);
    if long_poll > u64::from(bosun_proto::poll::MAX_WAIT_SECONDS) {
        return Err(invalid("poll.long_poll_seconds", "must be at most 60"));
    }
    let poll = PollSettings {
        long_poll: Duration::from_secs(long_poll),
        backoff_initial: ms(raw.backoff_initial_ms.unwrap_or(1_000).max(1)),
        backoff_max: ms(raw.backoff_max_ms.unwrap_or(60_000).max(1)),
        report_min_interval: raw
            .report_min_interval_ms
            .map_or(DEFAULT_REPORT_MIN_INTERVAL, ms),
        pending_interval: raw.pending_interval_ms.map_or(DEFAULT_PENDING_INTERVAL, ms),
        host_key_rotation_min: raw
            .host_key_rotation_min_seconds
            .map_or(DEFAULT_HOST_KEY_ROTATION_MIN, Duration::from_secs),
        stall_limit: ms(within(
            "poll.stall_limit_ms",
            raw.stall_limit_ms.unwrap_or(900_000),
            2_000,
            3_600_000,
        )?),
    };
    if poll.host_key_rotation_min < HOST_KEY_ROTATION_MIN_FLOOR {
        return Err(invalid(
            "poll.host_key_rotation_min_seconds",
            "must be at least 10 (ten of the shortest poll interval)",
        ));
    }
    if !PENDING_INTERVAL_RANGE.contains(&poll.pending_interval) {
        return Err(invalid(
            "poll.pending_interval_ms",
            "must be 1000..=300000 (1 s to 5 min)",
        ));
    }
    if poll.backoff_max < poll.backoff_initial {
        return Err(invalid(
            "poll.backoff_max_ms",
            "must not be below poll.backoff_initial_ms",
        ));
    }
    Ok(poll)
}

/// `[reconcile]`: the pass's pace and parallelism, guests' swap and restart attempts.
pub(super) fn reconcile(raw: &RawReconcile) -> Result<ReconcileSettings, ConfigError> {
    let reconcile = ReconcileSettings {
        interval: Duration::from_secs(raw.interval_seconds.unwrap_or(30).max(1)),
        max_parallel: raw.max_parallel.unwrap_or(8),
        swap_mib: raw.swap_mib.unwrap_or(512),
        restart_attempts: raw.restart_attempts.unwrap_or(5),
    };
    if !(1..=64).contains(&reconcile.max_parallel) {
        return Err(invalid("reconcile.max_parallel", "must be 1..=64"));
    }
    Ok(reconcile)
}

fn read_secret(field: &'static str, path: &Path) -> Result<SecretString, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::SecretFile {
        field,
        path: path.to_owned(),
        source,
    })?;
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(invalid(
            field,
            format!("names an empty file {}", path.display()),
        ));
    }
    Ok(SecretString::from(trimmed.to_owned()))
}

fn https_url(field: &'static str, text: &str) -> Result<Url, ConfigError> {
    let url = Url::parse(text).map_err(|e| invalid(field, format!("is not a url: {e}")))?;
    if url.scheme() != "https" {
        return Err(invalid(field, "must use https"));
    }
    if url.host_str().is_none() {
        return Err(invalid(field, "has no host"));
    }
    Ok(url)
}

fn trimmed(url: &Url) -> String {
    url.as_str().trim_end_matches('/').to_owned()
}

/// What a pin looks like, for errors.
const PIN_TEXT: &str = "must be a certificate's SHA-256 (64 hex digits, colons allowed) or a key pin (spki: and 64 hex digits)";

/// How `[hub]` says the hub is trusted: its pins (`fingerprint`, then `pins`), and a CA when
/// `ca` names one (`system`, or a PEM file).
fn hub_trust(raw: &RawHub) -> Result<(bosun_pin::Trust, Vec<bosun_pin::Pin>), ConfigError> {
    let mut pins = Vec::new();
    if let Some(fingerprint) = &raw.fingerprint {
        pins.push(
            bosun_pin::Pin::parse(fingerprint).map_err(|_| invalid("hub.fingerprint", PIN_TEXT))?,
        );
    }
    for pin in &raw.pins {
        pins.push(bosun_pin::Pin::parse(pin).map_err(|_| invalid("hub.pins", PIN_TEXT))?);
    }
    if pins.len() > bosun_proto::hub_pins::MAX_SIGNED_PINS {
        return Err(invalid("hub.pins", "at most 8 pins in all"));
    }
    let trust = match raw.ca.as_deref() {
        None if pins.is_empty() => {
            return Err(invalid(
                "hub.fingerprint",
                "set hub.fingerprint (or hub.pins), or hub.ca: the hub is trusted by a pin or a CA",
            ));
        }
        None => bosun_pin::Trust::Pins(pins.clone()),
        Some(ca) => {
            let roots = if ca == "system" {
                bosun_pin::CaRoots::System
            } else if Path::new(ca).is_absolute() {
                bosun_pin::CaRoots::File(PathBuf::from(ca))
            } else {
                return Err(invalid(
                    "hub.ca",
                    "must be \"system\" or the absolute path of a CA certificate file (PEM)",
                ));
            };
            bosun_pin::Trust::Ca {
                roots,
                pins: pins.clone(),
            }
        }
    };
    Ok((trust, pins))
}

pub(super) fn helper(raw: RawHelper) -> Result<HelperTransport, ConfigError> {
    match raw.transport.as_deref().unwrap_or("socket") {
        "socket" => Ok(HelperTransport::Socket {
            path: raw.socket.unwrap_or_else(|| DEFAULT_SOCKET.into()),
        }),
        "sudo" => Ok(HelperTransport::Sudo {
            sudo: raw.sudo.unwrap_or_else(|| DEFAULT_SUDO.into()),
            helper: raw
                .helper
                .unwrap_or_else(|| "/usr/libexec/bosun/bosun-helper".into()),
        }),
        other => Err(invalid(
            "helper.transport",
            format!("is {other:?}; expected \"socket\" or \"sudo\""),
        )),
    }
}

/// `value` if it lies in `min..=max`, else an error naming `field` and the range.
fn within<T: PartialOrd + std::fmt::Display + Copy>(
    field: &'static str,
    value: T,
    min: T,
    max: T,
) -> Result<T, ConfigError> {
    if value < min || value > max {
        return Err(invalid(field, format!("must be between {min} and {max}")));
    }
    Ok(value)
}
