//! `hub.toml(5)`: the man page of the hub's configuration file, a description of every key
//! beside the types that parse it ([`crate::config_file::HubFile`]). `bosun-hubd man --dir
//! DIR` writes it with the command pages; the test below holds it to the parser, so a key
//! added without its line here fails.

use bosun_clidoc::config_key as key;
use bosun_clidoc::{ConfigPage, ConfigTable};

/// Every table, the top level first.
const TABLES: &[ConfigTable] = &[
    ConfigTable {
        name: "",
        doc: "Where the hub keeps its data.",
        keys: &[key(
            "data_dir",
            "path",
            "none: --data must be given",
            "\"/var/lib/bosun-hub\"",
            "The database (SQLite), keys and escrow blobs; bosun-hubd init --config FILE creates it. --data wins over it.",
        )],
    },
    ConfigTable {
        name: "listen",
        doc: "The hub's listeners.",
        keys: &[
            key(
                "agent",
                "socket address",
                "0.0.0.0:7443",
                "\"0.0.0.0:7443\"",
                "What the boxes call: enrollment, polls, job results, escrow (--listen).",
            ),
            key(
                "admin",
                "socket address",
                "none: served on agent",
                "\"127.0.0.1:7444\"",
                "The admin API, the dashboard (/ui/) and /metrics; must not be the agent address (--admin-listen).",
            ),
        ],
    },
    ConfigTable {
        name: "tls",
        doc: "An operator certificate instead of the self-signed one bosun-hubd init made. Absent: the self-signed certificate. Give both keys or neither.",
        keys: &[
            key(
                "cert",
                "path",
                "none",
                "\"/etc/bosun-hub/tls/fullchain.pem\"",
                "The certificate chain, PEM (--tls-cert).",
            ),
            key(
                "key",
                "path",
                "none",
                "\"/etc/bosun-hub/tls/privkey.pem\"",
                "Its private key, PEM (--tls-key).",
            ),
        ],
    },
    ConfigTable {
        name: "agents",
        doc: "What agents are told.",
        keys: &[
            key(
                "poll_interval_secs",
                "integer (s)",
                "30",
                "30",
                "The poll interval given to newly enrolled hosts (at most 86400; --poll-interval).",
            ),
            key(
                "update_window",
                "string HH:MM+MINUTES",
                "none: only a job signed with override_window updates an agent",
                "\"02:00+120\"",
                "The daily window, in each host's local time, in which agents may update themselves.",
            ),
            key(
                "key_rotation_days",
                "integer 1..=3650",
                "30",
                "30",
                "A host key this old is replaced at the host's next poll, over the channel it authenticates.",
            ),
            key(
                "key_lifetime_days",
                "integer 1..=3650",
                "365",
                "365",
                "A host key this old is refused and the host must be enrolled again; at least twice key_rotation_days.",
            ),
        ],
    },
    ConfigTable {
        name: "alerts",
        doc: "Alert delivery and the dead-man's switch.",
        keys: &[
            key(
                "webhook",
                "string (URL)",
                "none: alerts are only listed",
                "\"https://alerts.example/bosun\"",
                "Alerts are POSTed to this URL (--webhook).",
            ),
            key(
                "silence_window_secs",
                "integer (s)",
                "30",
                "30",
                "How long an overdue alert is held to tell one silent host from a mass silence (at most 86400; --silence-window).",
            ),
            key(
                "stopped_grace_secs",
                "integer (s)",
                "1800",
                "1800",
                "How long a host that announced a planned stop may stay silent before it is paged (at most 86400; --stopped-grace).",
            ),
        ],
    },
    ConfigTable {
        name: "retention",
        doc: "How long what only grows is kept (docs/retention.md); each absent key keeps its default.",
        keys: &[
            key(
                "audit_days",
                "integer (days)",
                "365",
                "365",
                "Days an audit entry is kept (1 to 3650).",
            ),
            key(
                "audit_per_host",
                "integer",
                "500",
                "500",
                "Newest audit entries kept per host (10 to 1000000).",
            ),
            key(
                "replaced_audit_days",
                "integer (days)",
                "365",
                "365",
                "Days a replaced box's audit trail is kept after the replacement (1 to 3650).",
            ),
            key(
                "events_days",
                "integer (days)",
                "90",
                "90",
                "Days an event is kept (1 to 3650).",
            ),
            key(
                "events_per_host",
                "integer",
                "500",
                "500",
                "Newest events kept per host (10 to 1000000).",
            ),
            key(
                "alerts_days",
                "integer (days)",
                "90",
                "90",
                "Days an alert stays in the alert history (1 to 3650).",
            ),
            key(
                "jobs_days",
                "integer (days)",
                "90",
                "90",
                "Days a finished job is kept (8 to 3650: longer than any job is valid, so a replayed job is recognised).",
            ),
            key(
                "idempotency_days",
                "integer (days)",
                "7",
                "7",
                "Days an Idempotency-Key is remembered (1 to 3650).",
            ),
            key(
                "enroll_tokens_days",
                "integer (days)",
                "30",
                "30",
                "Days a spent enrollment token is kept (1 to 3650).",
            ),
            key(
                "history_days",
                "integer (days)",
                "14",
                "14",
                "Days a host's five-minute history is kept (1 to 14: as far back as the history API and host page read).",
            ),
        ],
    },
];

/// The page.
pub fn page() -> ConfigPage {
    ConfigPage {
        name: "hub.toml",
        summary: "configuration of bosun-hubd, the Bosun hub",
        path: crate::config_file::DEFAULT_PATH,
        description: &[
            "bosun-hubd serve and bosun-hubd init read their settings from a TOML file named \
             with --config (the package's unit names /etc/bosun-hub/hub.toml). Every setting \
             can come from the file, from a flag, or from its default; a flag wins over the \
             file. The file is strict: an unknown key is an error (a typo must not leave the \
             admin API on a public address), and values are checked before the hub binds.",
            "Every key is optional except that serve needs a data directory, from data_dir or \
             --data.",
        ],
        tables: TABLES,
        files: &[
            (
                "/etc/bosun-hub/hub.toml",
                "this file, as the package installs it (root:bosun-hub, directory 0750)",
            ),
            (
                "/var/lib/bosun-hub",
                "the data directory the package's file names",
            ),
        ],
        example: EXAMPLE,
        see_also: &["bosun-hubd(1)", "agent.toml(5)", "bosunctl(1)"],
    }
}

/// The least file a hub runs with.
const EXAMPLE: &str = r#"data_dir = "/var/lib/bosun-hub"

[listen]
agent = "0.0.0.0:7443"
admin = "127.0.0.1:7444""#;

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<(), String> {
        toml::from_str::<crate::config_file::HubFile>(text)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn every_key_of_hub_toml_is_documented_and_every_documented_key_parses() {
        let problems = bosun_clidoc::check_against_parser(&page(), parse);
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    /// The settings `serve` ends with from `text` and no flags (defaults applied, values
    /// checked), as text.
    fn effective(text: &str) -> Result<String, String> {
        let file = crate::config_file::HubFile::parse(text).map_err(|e| e.to_string())?;
        file.resolve(crate::config_file::Overrides::default())
            .map(|config| format!("{config:?}"))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn every_stated_default_of_hub_toml_is_the_codes() {
        let problems = bosun_clidoc::check_defaults(&page(), effective);
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn the_example_and_the_packaged_file_parse() {
        parse(EXAMPLE).unwrap();
        let packaged = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../helper/debian/examples/hub.toml"
        );
        parse(&std::fs::read_to_string(packaged).unwrap()).unwrap();
        let roff = page().roff("2024-01-02");
        assert!(roff.contains(".TH \"HUB.TOML\" 5"));
        assert!(roff.contains(".SS \"[retention]\""));
    }
}
