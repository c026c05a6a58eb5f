use std::path::Path;
use std::time::Duration;

use crate::links::helper::HelperTransport;

use super::*;

fn write_secret(dir: &Path, name: &str, value: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, value).expect("write secret");
    path
}

fn sample(dir: &Path, extra_pve: &str) -> String {
    let secret = write_secret(dir, "pve-token", "s3cret\n");
    format!(
        r#"
state_dir = "/var/lib/bosun"
allowed_signers = "/etc/bosun/allowed_signers"
[hub]
url = "https://hub.example:8443"
fingerprint = "{fp}"
[pve]
url = "https://127.0.0.1:8006/api2/json"
node = "pve"
token_id = "bosun@pve!agent"
token_secret_file = "{secret}"
{extra_pve}
"#,
        fp = "ab".repeat(32),
        secret = secret.display(),
    )
}

#[test]
fn a_minimal_file_gets_defaults() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = sample(dir.path(), "fingerprint = \"AA:BB\"");
    let config = AgentConfig::parse(&text, Path::new("agent.toml")).expect("valid");
    assert_eq!(config.reconcile.max_parallel, 8);
    assert_eq!(config.reconcile.restart_attempts, 5);
    assert_eq!(config.poll.report_min_interval, Duration::from_secs(5));
    assert_eq!(config.poll.pending_interval, Duration::from_secs(60));
    assert_eq!(config.guest_storage, "local-lvm");
    assert!(config.helper.is_none(), "no [helper]: no bootstrap issuer");
    assert!(config.local_api.is_none(), "no [local_api]: not served");
    assert_eq!(config.backup.storage, "local");
    assert!(
        config.storage.local_dir_roots.is_empty(),
        "no local-dir target unless a root is listed"
    );
    assert_eq!(config.backup.storage_call_timeout, Duration::from_secs(5));
    assert_eq!(config.bootstrap_hub.url, "https://hub.example:8443");
    assert_eq!(config.bootstrap_hub.fingerprint, "ab".repeat(32));
    assert_eq!(
        config.journal_path(),
        Path::new("/var/lib/bosun/journal.sqlite")
    );
    // The secret is read but its Debug form never shows it.
    assert!(!format!("{config:?}").contains("s3cret"));
}

#[test]
fn bad_values_name_their_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases: &[(&str, &str)] = &[
        ("", "pve.fingerprint"),
        (
            "fingerprint = \"AA\"\nca_file = \"/ca.pem\"",
            "pve.fingerprint",
        ),
    ];
    for (extra, field) in cases {
        let text = sample(dir.path(), extra);
        match AgentConfig::parse(&text, Path::new("agent.toml")) {
            Err(ConfigError::Invalid { field: got, .. }) => assert_eq!(got, *field),
            other => panic!("expected Invalid({field}), got {other:?}"),
        }
    }
    let text = sample(dir.path(), "fingerprint = \"AA\"").replace("https://hub", "http://hub");
    assert!(matches!(
        AgentConfig::parse(&text, Path::new("a")),
        Err(ConfigError::Invalid {
            field: "hub.url",
            ..
        })
    ));
    let text = sample(dir.path(), "fingerprint = \"AA\"") + "\n[reconcile]\nmax_parallel = 0\n";
    assert!(matches!(
        AgentConfig::parse(&text, Path::new("a")),
        Err(ConfigError::Invalid {
            field: "reconcile.max_parallel",
            ..
        })
    ));
    for (timeout_ms, ok) in [(499, false), (500, true), (30_000, true), (30_001, false)] {
        let text = sample(dir.path(), "fingerprint = \"AA\"")
            + &format!("\n[backup]\nstorage_call_timeout_ms = {timeout_ms}\n");
        match AgentConfig::parse(&text, Path::new("a")) {
            Ok(c) => {
                assert!(ok, "{timeout_ms} accepted");
                assert_eq!(
                    c.backup.storage_call_timeout,
                    Duration::from_millis(timeout_ms)
                );
            }
            Err(ConfigError::Invalid { field, .. }) => {
                assert!(!ok, "{timeout_ms} refused");
                assert_eq!(field, "backup.storage_call_timeout_ms");
            }
            Err(e) => panic!("{e}"),
        }
    }
    let text = sample(dir.path(), "fingerprint = \"AA\"\ntypo = 1");
    assert!(matches!(
        AgentConfig::parse(&text, Path::new("a")),
        Err(ConfigError::Parse { .. })
    ));
}

#[test]
fn local_dir_roots_are_read_and_none_may_be_a_system_or_guest_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = sample(dir.path(), "fingerprint = \"AA\"");
    let text = format!("{base}\n[storage]\nlocal_dir_roots = [\"/srv/bosun\", \"/mnt/archive\"]\n");
    let config = AgentConfig::parse(&text, Path::new("a")).expect("valid");
    assert_eq!(
        config.storage.local_dir_roots,
        [PathBuf::from("/srv/bosun"), PathBuf::from("/mnt/archive")]
    );
    for bad in [
        "/",
        "/etc/pve/bosun",
        "/boot",
        "/var/lib/lxc/101/rootfs",
        "/var/lib/vz/images",
        "/tank/subvol-101-disk-0",
        "srv/relative",
        "/srv/../run",
    ] {
        let text = format!("{base}\n[storage]\nlocal_dir_roots = [\"/srv/bosun\", {bad:?}]\n");
        match AgentConfig::parse(&text, Path::new("a")) {
            Err(ConfigError::Invalid { field, reason }) => {
                assert_eq!(field, "storage.local_dir_roots");
                assert!(reason.contains(bad), "{reason}");
            }
            other => panic!("{bad}: expected Invalid, got {other:?}"),
        }
    }
}

#[test]
fn a_missing_secret_file_is_reported_with_its_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = sample(dir.path(), "fingerprint = \"AA\"").replace("pve-token", "missing");
    match AgentConfig::parse(&text, Path::new("a")) {
        Err(ConfigError::SecretFile { field, path, .. }) => {
            assert_eq!(field, "pve.token_secret_file");
            assert!(path.ends_with("missing"));
        }
        other => panic!("expected SecretFile, got {other:?}"),
    }
}

#[test]
fn helper_local_api_backup_and_bootstrap_sections_are_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = sample(
        dir.path(),
        &format!(
            r#"fingerprint = "AA:BB"
[helper]
transport = "socket"
socket = "/run/bosun/h.sock"
[local_api]
bind = "10.9.0.1"
[backup]
storage = "backups"
[bootstrap]
hub_url = "https://hub.customer.example:443"
hub_fingerprint = "{fp}"
"#,
            fp = "CD".repeat(32)
        ),
    );
    let config = AgentConfig::parse(&text, Path::new("agent.toml")).expect("valid");
    assert!(matches!(
        &config.helper,
        Some(HelperTransport::Socket { path }) if path == Path::new("/run/bosun/h.sock")
    ));
    let api = config.local_api.expect("served");
    assert_eq!(api.bind.to_string(), "10.9.0.1");
    assert_eq!(api.port, 8443);
    // The limits default to what the local API always used.
    let defaults = crate::guests::localapi::LocalApiConfig::default();
    assert_eq!(api.max_body_bytes, defaults.max_body_bytes);
    assert_eq!(api.rate_per_s, defaults.rate_per_s);
    assert_eq!(api.burst, defaults.burst);
    assert_eq!(api.shutdown_grace, defaults.shutdown_grace);
    assert_eq!(config.backup.storage, "backups");
    assert_eq!(config.bootstrap_hub.url, "https://hub.customer.example");
    assert_eq!(config.bootstrap_hub.fingerprint, "cd".repeat(32));
}

#[test]
fn a_disabled_or_wildcard_local_api_is_handled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let off = sample(
        dir.path(),
        "fingerprint = \"AA:BB\"\n[local_api]\nenabled = false\nbind = \"10.0.0.1\"",
    );
    let config = AgentConfig::parse(&off, Path::new("agent.toml")).expect("valid");
    assert!(config.local_api.is_none());
    let wild = sample(
        dir.path(),
        "fingerprint = \"AA:BB\"\n[local_api]\nbind = \"0.0.0.0\"",
    );
    let err = AgentConfig::parse(&wild, Path::new("agent.toml")).expect_err("wildcard refused");
    assert!(err.to_string().contains("local_api.bind"), "{err}");
    let bad_fp = sample(
        dir.path(),
        "fingerprint = \"AA:BB\"\n[bootstrap]\nhub_fingerprint = \"zz\"",
    );
    let err = AgentConfig::parse(&bad_fp, Path::new("agent.toml")).expect_err("bad pin");
    assert!(
        err.to_string().contains("bootstrap.hub_fingerprint"),
        "{err}"
    );
}

#[test]
fn local_api_limits_are_read_and_validated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let with = |lines: &str| {
        let text = sample(
            dir.path(),
            &format!("fingerprint = \"AA:BB\"\n[local_api]\nbind = \"10.0.0.1\"\n{lines}"),
        );
        AgentConfig::parse(&text, Path::new("agent.toml"))
    };
    let api = with(
        "port = 9443\nmax_body_bytes = 65536\nrate_per_s = 5\nburst = 10\nshutdown_grace_ms = 250",
    )
    .expect("valid")
    .local_api
    .expect("served");
    assert_eq!(api.port, 9443);
    assert_eq!(api.max_body_bytes, 65536);
    assert_eq!((api.rate_per_s, api.burst), (5, 10));
    assert_eq!(api.shutdown_grace, Duration::from_millis(250));
    assert_eq!(
        api.connections,
        crate::config::local_api::ConnectionLimits::default(),
        "connection limits default"
    );
    let api = with(
        "max_connections = 64\nmax_connections_per_peer = 4\nmax_connections_per_guest = 8\n\
         max_unattributed_connections = 16\nhandshake_timeout_ms = 2000\n\
         header_read_timeout_ms = 3000\nidle_timeout_ms = 4000\nbody_timeout_ms = 5000",
    )
    .expect("valid")
    .local_api
    .expect("served");
    assert_eq!(
        api.connections,
        crate::config::local_api::ConnectionLimits {
            max_per_peer: 4,
            max_per_guest: 8,
            max_unattributed: 16,
            max_total: 64,
            handshake_timeout: Duration::from_secs(2),
            header_read_timeout: Duration::from_secs(3),
            idle_timeout: Duration::from_secs(4),
            body_timeout: Duration::from_secs(5),
        }
    );
    // A total cap below the default per-peer cap lowers the per-peer default with it.
    let api = with("max_connections = 8")
        .expect("valid")
        .local_api
        .expect("served");
    assert_eq!(api.connections.max_per_peer, 8);
    assert_eq!(api.connections.max_per_guest, 8);
    assert_eq!(api.connections.max_unattributed, 8);
    // A rate above the default burst raises the default burst with it.
    let api = with("rate_per_s = 100")
        .expect("valid")
        .local_api
        .expect("served");
    assert_eq!((api.rate_per_s, api.burst), (100, 100));

    for (lines, field) in [
        ("max_body_bytes = 100", "local_api.max_body_bytes"),
        ("max_body_bytes = 2000000", "local_api.max_body_bytes"),
        ("rate_per_s = 0", "local_api.rate_per_s"),
        ("rate_per_s = 20000", "local_api.rate_per_s"),
        ("rate_per_s = 10\nburst = 5", "local_api.burst"),
        ("burst = 200000", "local_api.burst"),
        ("shutdown_grace_ms = 300001", "local_api.shutdown_grace_ms"),
        ("max_connections = 0", "local_api.max_connections"),
        ("max_connections = 5000", "local_api.max_connections"),
        (
            "max_connections = 10\nmax_connections_per_peer = 11",
            "local_api.max_connections_per_peer",
        ),
        (
            "max_connections = 10\nmax_connections_per_guest = 11",
            "local_api.max_connections_per_guest",
        ),
        (
            "max_unattributed_connections = 0",
            "local_api.max_unattributed_connections",
        ),
        ("idle_timeout_ms = 50", "local_api.idle_timeout_ms"),
        (
            "header_read_timeout_ms = 300001",
            "local_api.header_read_timeout_ms",
        ),
        ("body_timeout_ms = 0", "local_api.body_timeout_ms"),
        (
            "handshake_timeout_ms = 99",
            "local_api.handshake_timeout_ms",
        ),
    ] {
        let err = with(lines).expect_err(lines);
        assert!(
            matches!(&err, ConfigError::Invalid { field: f, .. } if *f == field),
            "{lines}: {err}"
        );
    }
    let err = with("port = 70000").expect_err("port out of range");
    assert!(matches!(err, ConfigError::Parse { .. }), "{err}");
    let err = with("rate_limit = 5").expect_err("unknown key");
    assert!(matches!(err, ConfigError::Parse { .. }), "{err}");
}

#[test]
fn metrics_are_off_unless_asked_for_and_never_where_guests_reach() {
    let dir = tempfile::tempdir().expect("tempdir");
    let with = |section: &str| {
        AgentConfig::parse(
            &sample(dir.path(), &format!("fingerprint = \"AA:BB\"\n{section}")),
            Path::new("agent.toml"),
        )
    };
    assert_eq!(with("").expect("valid").metrics, None, "absent: not served");
    assert_eq!(
        with("[metrics]\nenabled = false").expect("valid").metrics,
        None
    );
    assert_eq!(
        with("[metrics]").expect("valid").metrics,
        Some(MetricsSettings {
            listen: DEFAULT_METRICS_LISTEN
        }),
        "an empty section serves on loopback"
    );
    assert_eq!(
        with("[metrics]\nlisten = \"192.0.2.7:9200\"")
            .expect("a management address is allowed")
            .metrics
            .map(|m| m.listen.to_string()),
        Some("192.0.2.7:9200".to_owned())
    );
    for refused in [
        "[metrics]\nlisten = \"0.0.0.0:9101\"",
        "[metrics]\nlisten = \"[::]:9101\"",
        // The local API's bridge address, on any port.
        "[local_api]\nbind = \"10.0.0.1\"\n[metrics]\nlisten = \"10.0.0.1:9101\"",
    ] {
        let err = with(refused).expect_err(refused);
        assert!(
            matches!(
                &err,
                ConfigError::Invalid {
                    field: "metrics.listen",
                    ..
                }
            ),
            "{refused}: {err}"
        );
    }
    // A loopback local API is out of guests' reach: metrics may share its address.
    assert!(
        with("[local_api]\nbind = \"127.0.0.1\"\n[metrics]\nlisten = \"127.0.0.1:9101\"").is_ok()
    );
    // The same address is fine once the local API is not served there.
    assert!(
        with("[local_api]\nenabled = false\nbind = \"10.0.0.1\"\n[metrics]\nlisten = \"10.0.0.1:9101\"")
            .is_ok()
    );
    let err = with("[metrics]\nport = 9101").expect_err("unknown key");
    assert!(matches!(err, ConfigError::Parse { .. }), "{err}");
    let err = with("[metrics]\nlisten = \"localhost\"").expect_err("not an address");
    assert!(matches!(err, ConfigError::Parse { .. }), "{err}");
}

#[test]
fn health_and_tunnel_sections_are_read_and_smart_needs_the_helper() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = sample(dir.path(), "fingerprint = \"AA:BB\"");
    let config = AgentConfig::parse(&base, Path::new("agent.toml")).expect("valid");
    assert_eq!(
        config.health,
        crate::config::health::HealthSettings::default()
    );
    assert!(config.tunnel.is_none(), "no [tunnel]: none watched");
    let text = format!(
        "{base}\n[helper]\ntransport = \"socket\"\n[health]\ncpu_high_percent = 85\nsmart_devices = [\"/dev/nvme0n1\"]\n[tunnel]\nreadiness_url = \"http://127.0.0.1:20241/ready\"\ndown_after_ms = 30000\n"
    );
    let config = AgentConfig::parse(&text, Path::new("agent.toml")).expect("valid");
    assert!((config.health.cpu.high - 0.85).abs() < 1e-9);
    assert_eq!(config.health.smart_devices.len(), 1);
    let tunnel = config.tunnel.expect("a tunnel");
    assert_eq!(tunnel.down_after, Duration::from_secs(30));
    let no_helper = format!("{base}\n[health]\nsmart_devices = [\"/dev/sda\"]\n");
    match AgentConfig::parse(&no_helper, Path::new("agent.toml")) {
        Err(ConfigError::Invalid { field, .. }) => assert_eq!(field, "health.smart_devices"),
        other => panic!("expected an invalid smart_devices: {other:?}"),
    }
    let remote = format!("{base}\n[tunnel]\nreadiness_url = \"http://192.0.2.1:20241/ready\"\n");
    assert!(AgentConfig::parse(&remote, Path::new("agent.toml")).is_err());
    let unknown = format!("{base}\n[health]\ncpu_hgh_percent = 85\n");
    assert!(matches!(
        AgentConfig::parse(&unknown, Path::new("agent.toml")),
        Err(ConfigError::Parse { .. })
    ));
}

#[test]
fn the_documented_poll_defaults_are_the_ones_in_force() {
    // The module docs show every `[poll]` default; the constants are what a file without the
    // key gets (`a_minimal_file_gets_defaults`).
    let docs = include_str!("mod.rs");
    let documented = |key: &str| -> u64 {
        docs.lines()
            .find_map(|l| l.strip_prefix(&format!("//! {key} = ")))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("`{key}` is not documented"))
    };
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap();
    assert_eq!(
        documented("report_min_interval_ms"),
        ms(crate::config::DEFAULT_REPORT_MIN_INTERVAL)
    );
    assert_eq!(
        crate::config::DEFAULT_REPORT_MIN_INTERVAL,
        Duration::from_secs(5)
    );
    assert_eq!(
        documented("pending_interval_ms"),
        ms(crate::config::DEFAULT_PENDING_INTERVAL)
    );
    assert!(
        crate::config::PENDING_INTERVAL_RANGE.contains(&crate::config::DEFAULT_PENDING_INTERVAL)
    );
    assert_eq!(
        *crate::config::PENDING_INTERVAL_RANGE.end(),
        Duration::from_secs(u64::from(bosun_proto::poll::MAX_POLL_INTERVAL_SECONDS))
    );
}

#[test]
fn host_key_rotations_are_paced_an_hour_by_default_and_never_below_ten_seconds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = sample(dir.path(), "fingerprint = \"AA:BB\"");
    let config = AgentConfig::parse(&base, Path::new("agent.toml")).expect("parses");
    assert_eq!(config.poll.host_key_rotation_min, Duration::from_secs(3600));
    let docs = include_str!("mod.rs");
    assert!(docs.contains("//! host_key_rotation_min_seconds = 3600 "));
    for (value, ok) in [(9, false), (10, true), (86_400, true)] {
        let text = base.replace(
            "[pve]",
            &format!("[poll]\nhost_key_rotation_min_seconds = {value}\n[pve]"),
        );
        let parsed = AgentConfig::parse(&text, Path::new("agent.toml"));
        assert_eq!(parsed.is_ok(), ok, "{value}: {parsed:?}");
    }
}

#[test]
fn the_pending_interval_is_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (value, ok) in [
        (999, false),
        (1_000, true),
        (300_000, true),
        (300_001, false),
    ] {
        let text = sample(dir.path(), "fingerprint = \"AA:BB\"").replace(
            "[pve]",
            &format!("[poll]\npending_interval_ms = {value}\n[pve]"),
        );
        let parsed = AgentConfig::parse(&text, Path::new("agent.toml"));
        assert_eq!(parsed.is_ok(), ok, "{value}: {parsed:?}");
    }
}

#[test]
fn the_hub_is_trusted_by_pins_or_a_ca_and_never_by_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = sample(dir.path(), "fingerprint = \"AA\"");
    let key_pin = format!("spki:{}", "cd".repeat(32));
    let parse = |text: &str| AgentConfig::parse(text, Path::new("agent.toml"));
    let with_hub = |hub: &str| {
        base.replace(
            &format!("fingerprint = \"{}\"\n[pve]", "ab".repeat(32)),
            &format!("{hub}\n[pve]"),
        )
    };

    // A key pin where the fingerprint was, and more pins beside it.
    let config = parse(&with_hub(&format!(
        "fingerprint = \"{key_pin}\"\npins = [\"{}\"]",
        "EF".repeat(32)
    )))
    .expect("valid");
    let pins = vec![
        bosun_pin::Pin::Key("cd".repeat(32)),
        bosun_pin::Pin::Leaf("ef".repeat(32)),
    ];
    assert_eq!(config.hub.pins, pins);
    assert_eq!(config.hub.trust, bosun_pin::Trust::Pins(pins.clone()));
    assert_eq!(
        config.bootstrap_hub.fingerprint, key_pin,
        "guests pin the key too"
    );

    // A CA, alone or with pins.
    let ca_alone =
        with_hub("ca = \"system\"") + &format!("\n[bootstrap]\nhub_fingerprint = \"{key_pin}\"\n");
    let config = parse(&ca_alone).expect("valid");
    assert_eq!(
        config.hub.trust,
        bosun_pin::Trust::Ca {
            roots: bosun_pin::CaRoots::System,
            pins: Vec::new()
        }
    );
    let config = parse(&with_hub(&format!(
        "ca = \"/etc/bosun/hub-ca.pem\"\nfingerprint = \"{key_pin}\""
    )))
    .expect("valid");
    assert_eq!(
        config.hub.trust,
        bosun_pin::Trust::Ca {
            roots: bosun_pin::CaRoots::File("/etc/bosun/hub-ca.pem".into()),
            pins: vec![bosun_pin::Pin::Key("cd".repeat(32))]
        }
    );

    for (hub, field) in [
        ("", "hub.fingerprint"),
        ("fingerprint = \"spki:00\"", "hub.fingerprint"),
        ("pins = [\"nope\"]", "hub.pins"),
        ("ca = \"relative/ca.pem\"", "hub.ca"),
        // Guests pin the hub: with a CA alone they need a pin of their own.
        ("ca = \"system\"", "bootstrap.hub_fingerprint"),
    ] {
        match parse(&with_hub(hub)) {
            Err(ConfigError::Invalid { field: got, .. }) => assert_eq!(got, field, "{hub}"),
            other => panic!("{hub}: expected Invalid({field}), got {other:?}"),
        }
    }
    let nine: Vec<String> = (0..9).map(|i| format!("\"spki:{i:064x}\"")).collect();
    match parse(&with_hub(&format!("pins = [{}]", nine.join(", ")))) {
        Err(ConfigError::Invalid { field, .. }) => assert_eq!(field, "hub.pins"),
        other => panic!("expected Invalid(hub.pins), got {other:?}"),
    }
}
