use std::io::Write as _;

use super::*;

const FULL: &str = r#"
data_dir = "/srv/hub"
[listen]
agent = "0.0.0.0:7443"
admin = "10.0.0.5:7444"
[tls]
cert = "/etc/bosun-hub/tls/fullchain.pem"
key = "/etc/bosun-hub/tls/privkey.pem"
[agents]
poll_interval_secs = 45
[alerts]
webhook = "https://alerts.example/bosun/s3cr3t"
silence_window_secs = 20
stopped_grace_secs = 600
"#;

fn invalid(result: Result<HubConfig, ConfigError>) -> String {
    match result {
        Err(ConfigError::Invalid(message)) => message,
        other => panic!("expected an invalid-settings error, got {other:?}"),
    }
}

#[test]
fn every_key_of_the_file_reaches_the_hub_config() {
    let config = HubFile::parse(FULL)
        .unwrap()
        .resolve(Overrides::default())
        .unwrap();
    assert_eq!(config.data_dir, PathBuf::from("/srv/hub"));
    assert_eq!(config.listen, "0.0.0.0:7443".parse().unwrap());
    assert_eq!(config.admin_listen, Some("10.0.0.5:7444".parse().unwrap()));
    assert!(matches!(
        &config.tls,
        TlsSource::Files { cert, key }
            if cert == Path::new("/etc/bosun-hub/tls/fullchain.pem")
                && key == Path::new("/etc/bosun-hub/tls/privkey.pem")
    ));
    assert_eq!(config.poll_interval, Duration::from_secs(45));
    assert_eq!(config.dead_man.silence_window, Duration::from_secs(20));
    assert_eq!(config.dead_man.stopped_grace, Duration::from_secs(600));
    assert!(
        config
            .dead_man
            .sweep_interval
            .is_some_and(|sweep| sweep <= Duration::from_secs(20))
    );
    assert!(config.webhook.is_some());
}

#[test]
fn flags_win_over_the_file() {
    let flags = Overrides {
        data_dir: Some("/tmp/other".into()),
        listen: Some("127.0.0.1:9000".parse().unwrap()),
        admin_listen: Some("127.0.0.1:9001".parse().unwrap()),
        tls_cert: Some("/c.pem".into()),
        tls_key: Some("/k.pem".into()),
        poll_interval_secs: Some(5),
        webhook: Some("http://127.0.0.1:1/hook".into()),
        silence_window_secs: Some(7),
        stopped_grace_secs: Some(60),
    };
    let config = HubFile::parse(FULL).unwrap().resolve(flags).unwrap();
    assert_eq!(config.data_dir, PathBuf::from("/tmp/other"));
    assert_eq!(config.listen, "127.0.0.1:9000".parse().unwrap());
    assert_eq!(config.admin_listen, Some("127.0.0.1:9001".parse().unwrap()));
    assert!(matches!(&config.tls, TlsSource::Files { cert, .. } if cert == Path::new("/c.pem")));
    assert_eq!(config.poll_interval, Duration::from_secs(5));
    assert_eq!(config.dead_man.silence_window, Duration::from_secs(7));
    assert_eq!(config.dead_man.stopped_grace, Duration::from_secs(60));
}

#[test]
fn without_a_file_the_defaults_are_one_listener_and_the_self_signed_certificate() {
    let flags = Overrides {
        data_dir: Some("/tmp/hub".into()),
        ..Overrides::default()
    };
    let config = HubFile::default().resolve(flags).unwrap();
    let defaults = HubConfig::new("/tmp/hub", DEFAULT_AGENT_LISTEN.parse().unwrap());
    assert_eq!(config.listen, defaults.listen);
    assert_eq!(config.admin_listen, None);
    assert!(matches!(config.tls, TlsSource::SelfSigned));
    assert_eq!(config.poll_interval, defaults.poll_interval);
    assert_eq!(
        config.dead_man.silence_window,
        defaults.dead_man.silence_window
    );
    assert_eq!(
        config.dead_man.stopped_grace,
        crate::deadman::DEFAULT_STOPPED_GRACE
    );
    assert!(config.webhook.is_none());
}

#[test]
fn the_shipped_example_is_valid_and_keeps_the_admin_side_on_loopback() {
    let text = include_str!("../../../helper/debian/examples/hub.toml");
    let config = HubFile::parse(text)
        .unwrap()
        .resolve(Overrides::default())
        .unwrap();
    assert_eq!(config.data_dir, PathBuf::from("/var/lib/bosun-hub"));
    assert_eq!(config.listen, DEFAULT_AGENT_LISTEN.parse().unwrap());
    // The admin API, the dashboard and /metrics are not on the address the boxes reach.
    let admin = config
        .admin_listen
        .expect("the shipped file names an admin address");
    assert!(admin.ip().is_loopback(), "{admin}");
    assert_ne!(admin, config.listen);
    assert!(matches!(config.tls, TlsSource::SelfSigned));
    // The example states the defaults it names.
    assert_eq!(
        config.dead_man.stopped_grace,
        crate::deadman::DEFAULT_STOPPED_GRACE
    );
    assert_eq!(config.retention, RetentionConfig::default());
    assert!(
        text.contains("[retention]\n"),
        "the example names every retention bound"
    );
}

#[test]
fn an_unknown_key_is_an_error_that_names_it() {
    let err = HubFile::parse("[listen]\nadmn = \"127.0.0.1:1\"\n").unwrap_err();
    assert!(err.to_string().contains("admn"), "{err}");
    let err = HubFile::parse("datadir = \"/x\"\n").unwrap_err();
    assert!(err.to_string().contains("datadir"), "{err}");
}

#[test]
fn a_bad_address_is_a_parse_error() {
    assert!(HubFile::parse("[listen]\nagent = \"localhost\"\n").is_err());
    assert!(HubFile::parse("[listen]\nagent = 7443\n").is_err());
}

#[test]
fn settings_that_cannot_work_are_refused_with_what_to_do() {
    let base = || HubFile {
        data_dir: Some("/srv/hub".into()),
        ..HubFile::default()
    };
    let mut same = base();
    same.listen.agent = Some("127.0.0.1:7443".parse().unwrap());
    same.listen.admin = same.listen.agent;
    assert!(invalid(same.resolve(Overrides::default())).contains("another address"));

    let mut half = base();
    half.tls.cert = Some("/c.pem".into());
    assert!(invalid(half.resolve(Overrides::default())).contains("both cert and key"));

    for secs in [0, 86_401] {
        let mut poll = base();
        poll.agents.poll_interval_secs = Some(secs);
        assert!(invalid(poll.resolve(Overrides::default())).contains("poll interval"));
        let mut window = base();
        window.alerts.silence_window_secs = Some(secs);
        assert!(invalid(window.resolve(Overrides::default())).contains("silence window"));
        let mut stop = base();
        stop.alerts.stopped_grace_secs = Some(secs);
        assert!(invalid(stop.resolve(Overrides::default())).contains("stop bound"));
    }

    assert!(invalid(HubFile::default().resolve(Overrides::default())).contains("data"));
}

#[test]
fn a_bad_webhook_is_refused_without_repeating_the_url() {
    for url in [
        "ftp://alerts.example/s3cr3t",
        "alerts.example/s3cr3t",
        "file:///s3cr3t",
    ] {
        let mut file = HubFile {
            data_dir: Some("/srv/hub".into()),
            ..HubFile::default()
        };
        file.alerts.webhook = Some(url.to_owned());
        let message = invalid(file.resolve(Overrides::default()));
        assert!(message.contains("webhook"), "{message}");
        assert!(!message.contains("s3cr3t"), "{message}");
    }
}

#[test]
fn load_reads_a_file_and_refuses_a_missing_or_oversized_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hub.toml");
    std::fs::write(&path, FULL).unwrap();
    assert_eq!(HubFile::load(&path).unwrap(), HubFile::parse(FULL).unwrap());

    let missing = dir.path().join("nope.toml");
    let err = HubFile::load(&missing).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }), "{err:?}");
    assert!(err.to_string().contains("nope.toml"));

    let big = dir.path().join("big.toml");
    let mut file = std::fs::File::create(&big).unwrap();
    for _ in 0..(MAX_FILE_BYTES / 16 + 1) {
        file.write_all(b"# padding......\n").unwrap();
    }
    drop(file);
    let err = HubFile::load(&big).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }), "{err:?}");

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "listen = [").unwrap();
    let err = HubFile::load(&bad).unwrap_err();
    assert!(matches!(err, ConfigError::Parse { .. }), "{err:?}");
}

#[test]
fn retention_bounds_come_from_the_file_over_the_defaults() {
    let config = HubFile::parse(&format!(
        "{FULL}[retention]\naudit_days = 30\naudit_per_host = 200\nevents_per_host = 50\njobs_days = 8\nidempotency_days = 2\nhistory_days = 3\n"
    ))
    .unwrap()
    .resolve(Overrides::default())
    .unwrap();
    let default = RetentionConfig::default();
    assert_eq!(
        config.retention,
        RetentionConfig {
            audit_days: 30,
            audit_per_host: 200,
            events_per_host: 50,
            jobs_days: 8,
            idempotency_days: 2,
            history_days: 3,
            ..default
        }
    );
    let without = HubFile::parse(FULL)
        .unwrap()
        .resolve(Overrides::default())
        .unwrap();
    assert_eq!(without.retention, default);
    // Finished jobs outlive any job's validity window.
    assert!(i64::from(default.jobs_days) * 24 > bosun_proto::job::MAX_VALIDITY_HOURS);
}

#[test]
fn retention_bounds_out_of_range_are_refused_with_the_key() {
    for (line, key) in [
        ("audit_days = 0", "audit_days"),
        ("events_days = 3651", "events_days"),
        ("jobs_days = 7", "jobs_days"),
        ("audit_per_host = 9", "audit_per_host"),
        ("events_per_host = 1000001", "events_per_host"),
        ("history_days = 0", "history_days"),
        // No longer than the history is read.
        ("history_days = 15", "history_days"),
    ] {
        let message = invalid(
            HubFile::parse(&format!("{FULL}[retention]\n{line}\n"))
                .unwrap()
                .resolve(Overrides::default()),
        );
        assert!(message.contains(key), "{line}: {message}");
    }
    assert!(HubFile::parse(&format!("{FULL}[retention]\naudit_years = 1\n")).is_err());
    assert!(HubFile::parse(&format!("{FULL}[retention]\naudit_days = -1\n")).is_err());
}
