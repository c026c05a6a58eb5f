//! `agent.toml(5)`: the man page of the agent's configuration file, a description of every
//! key beside the types that parse it ([`crate::config`] and the settings of the features it
//! takes tables from). `bosun-agentd man --dir DIR` writes it with the command pages; the
//! test below holds it to the parser, so a key added without its line here fails.

mod endpoints;
mod features;

use bosun_clidoc::config_key as key;
use bosun_clidoc::{ConfigPage, ConfigTable};

/// Every table, the top level first, in the order the page lists them.
const TABLES: &[ConfigTable] = &[
    endpoints::TOP,
    endpoints::HUB,
    endpoints::PVE,
    endpoints::HELPER,
    endpoints::LOCAL_API,
    endpoints::METRICS,
    endpoints::BOOTSTRAP,
    endpoints::POLL,
    features::BACKUP,
    features::STORAGE,
    features::RECONCILE,
    features::CONTROLLER,
    features::HEALTH,
    features::TUNNEL,
    features::GOLDEN,
    features::ADDRESSES,
    features::UPDATE,
    features::BREAK_GLASS,
];

/// The page.
pub fn page() -> ConfigPage {
    ConfigPage {
        name: "agent.toml",
        summary: "configuration of bosun-agentd, the Bosun host agent",
        path: crate::config::DEFAULT_PATH,
        description: &[
            "bosun-agentd reads its configuration from a TOML file, /etc/bosun/agent.toml \
             unless --config names another. The file is strict: an unknown key or table is an \
             error, and the agent exits with status 78 (EX_CONFIG) rather than run on a typo. \
             Values are checked when the agent starts; a key out of its range names itself in \
             the error.",
            "Secrets are never written in the file: it names files that hold them \
             (token_secret_file, enrollment_token_file), readable by the bosun group only.",
            "Only [hub], [pve], state_dir and allowed_signers are required; every other key \
             has the default given below, and a table that is absent takes all its defaults \
             or, where said, turns its feature off.",
        ],
        tables: TABLES,
        files: &[
            ("/etc/bosun/agent.toml", "this file"),
            (
                "/usr/share/doc/bosun-agent/examples/agent.toml",
                "a commented example to start from",
            ),
            (
                "/etc/bosun/pve-token, /etc/bosun/enroll-token",
                "the secrets the file names (root:bosun 0640)",
            ),
            ("/var/lib/bosun", "the agent's state (state_dir)"),
        ],
        example: EXAMPLE,
        see_also: &["bosun-agentd(1)", "hub.toml(5)", "bosunctl(1)"],
    }
}

/// The least file an agent runs with.
const EXAMPLE: &str = r#"state_dir = "/var/lib/bosun"
allowed_signers = "/etc/bosun/allowed_signers"

[hub]
url = "https://hub.example:7443"
fingerprint = "…64 hex digits bosun-hubd init printed…"
enrollment_token_file = "/etc/bosun/enroll-token"

[pve]
url = "https://127.0.0.1:8006/api2/json"
node = "pve"
token_id = "bosun@pve!agent"
token_secret_file = "/etc/bosun/pve-token"
ca_file = "/etc/pve/pve-root-ca.pem"

[helper]
transport = "socket""#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_agent_toml_is_documented_and_every_documented_key_parses() {
        let problems = bosun_clidoc::check_against_parser(&page(), crate::config::parse_shape);
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn every_stated_default_of_agent_toml_is_the_codes() {
        // The secret files the document of every key names, readable here.
        let dir = tempfile::tempdir().unwrap();
        let mut swaps = Vec::new();
        for (example, name) in [
            ("\"/etc/bosun/pve-token\"", "pve-token"),
            ("\"/etc/bosun/enroll-token\"", "enroll-token"),
        ] {
            let file = dir.path().join(name);
            std::fs::write(&file, "secret\n").unwrap();
            swaps.push((example, format!("{:?}", file.display().to_string())));
        }
        let effective = |text: &str| -> Result<String, String> {
            let mut text = text.to_owned();
            for (example, file) in &swaps {
                text = text.replace(example, file);
            }
            // The page gives every key its example, and Proxmox's certificate is pinned one way
            // only: the fingerprint stays, the CA file goes.
            let text: String = text
                .lines()
                .filter(|line| !line.starts_with("ca_file ="))
                .map(|line| format!("{line}\n"))
                .collect();
            crate::config::AgentConfig::parse(&text, std::path::Path::new("agent.toml"))
                .map(|config| format!("{config:?}"))
                .map_err(|e| bosun_errchain::error_chain(&e))
        };
        let problems = bosun_clidoc::check_defaults(&page(), effective);
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn the_example_parses_and_every_table_appears_once() {
        let example = EXAMPLE.replace("…64 hex digits bosun-hubd init printed…", &"ab".repeat(32));
        crate::config::parse_shape(&example).unwrap();
        let mut names: Vec<&str> = page().tables.iter().map(|t| t.name).collect();
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "a table is listed twice");
        assert_eq!(page().tables[0].name, "", "the top level comes first");
    }

    #[test]
    fn the_page_documents_each_key_with_its_default() {
        let roff = page().roff("2024-01-02");
        assert!(roff.contains(".TH \"AGENT.TOML\" 5"));
        for table in page().tables {
            for key in table.keys {
                assert!(
                    !key.doc.is_empty() && !key.default.is_empty(),
                    "{}",
                    key.key
                );
                assert!(roff.contains(&format!(".BR \"{}\"", key.key.replace('-', "\\-"))));
            }
        }
    }
}
