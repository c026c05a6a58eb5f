use std::path::Path;

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
    assert_eq!(config.pve.storage, "local-lvm");
    assert!(matches!(config.helper, HelperTransport::Socket { .. }));
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
    let text = sample(dir.path(), "fingerprint = \"AA\"\ntypo = 1");
    assert!(matches!(
        AgentConfig::parse(&text, Path::new("a")),
        Err(ConfigError::Parse { .. })
    ));
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
