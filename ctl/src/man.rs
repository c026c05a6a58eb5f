//! What `bosunctl`'s man pages say besides its options: the exit statuses (the one scheme of
//! [`crate::error::exit`]), the environment, the config file and examples.

use bosun_clidoc::ManExtras;

use crate::error::exit;

/// Every exit status, as the man pages list it; a test holds it to [`exit`].
pub const EXIT_STATUS: &[(u8, &str)] = &[
    (exit::OK, "success; for status --check: every host ok"),
    (
        1,
        "status --check only: a host needs attention (WARNING); 2 there is CRITICAL, 3 UNKNOWN (the hub could not be read)",
    ),
    (
        exit::USAGE,
        "bad usage: an unknown command, option or value",
    ),
    (
        exit::CONFIG,
        "missing or bad configuration: hub URL, fingerprint, operator token, config file",
    ),
    (
        exit::INPUT,
        "a local input is unreadable or invalid, a job would be refused (job submit checks it first), a fleet rollout is not approved (the hub names more hosts than --max-hosts or the canary, or one --hosts does not list, or nobody confirmed the hosts shown; nothing signed), or a name or id prefix names more than one host, guest, job or open alert subject (the message lists them, at most 10; the hub resolves host and job prefixes)",
    ),
    (
        exit::UNREACHABLE,
        "the hub (or, for pve check, the Proxmox node) could not be reached: connection, TLS, pin mismatch, timeout",
    ),
    (
        exit::REFUSED,
        "the hub refused the request (4xx other than 401, 404 and 409 ambiguous_id; 403 when the operator token's role is too low)",
    ),
    (
        exit::UNAUTHORIZED,
        "the operator token was refused (401): unknown, expired or revoked",
    ),
    (
        exit::NOT_FOUND,
        "the host, job or resource does not exist (no name or id prefix matches)",
    ),
    (
        exit::HUB_ERROR,
        "the hub failed (5xx) or answered something unreadable",
    ),
    (
        exit::NOT_APPLIED,
        "desired set --wait: the host did not apply the generation (timeout, a guest failed for good, or a field cannot be applied); desired diff: the host refuses part of desired state (a field, a storage target, a tier), listed with why",
    ),
    (
        exit::CHECK_FAILED,
        "pve check: the node answered and a check failed",
    ),
    (
        exit::RECIPIENT_UNCONFIRMED,
        "secret seal: the host's sealing recipient is not pinned, or the hub reports another than the pinned one; nothing was sealed (hosts pin-recipient confirms one)",
    ),
    (
        exit::ROLLOUT_STOPPED,
        "fleet rollout: a host failed its job or its health gate, or did not end within --wait; the rollout stopped and the report names the hosts done, failed and not reached",
    ),
];

const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "BOSUN_HUB_URL",
        "the hub's URL (https://host:port), as --hub-url",
    ),
    (
        "BOSUN_HUB_FINGERPRINT",
        "the SHA-256 fingerprint of the hub's certificate, as --fingerprint",
    ),
    (
        "BOSUN_ADMIN_TOKEN",
        "the operator token (prefer --admin-token-file or the config file)",
    ),
    ("BOSUN_CTL_CONFIG", "the config file, as --config"),
    (
        "BOSUN_ALLOWED_SIGNERS",
        "job submit: the operator's allowed_signers file to check signers against",
    ),
    (
        "BOSUN_LOG",
        "what bosunctl logs on stderr (a tracing filter; default warn)",
    ),
    (
        "XDG_CONFIG_HOME",
        "where the default config file lives ($XDG_CONFIG_HOME/bosun/ctl.json)",
    ),
];

const FILES: &[(&str, &str)] = &[
    (
        "~/.config/bosun/ctl.json",
        "the hub connection saved by hub init (URL, fingerprint, admin token, allowed_signers), mode 0600; a file others can read is refused",
    ),
    (
        "~/.config/bosun/known-recipients.json",
        "the hosts' sealing recipients the operator confirmed (hosts approve --recipient, hosts pin-recipient), beside the config file; secret seal seals to these, never to the hub's word alone",
    ),
];

const EXAMPLES: &[(&str, &[(&str, &str)])] = &[
    (
        "bosunctl",
        &[
            (
                "bosunctl hub init --hub-url https://hub.example:7443 --fingerprint AB:CD:… --admin-token-file token",
                "check the hub and save the connection",
            ),
            (
                "bosunctl status",
                "the fleet: hosts, guests, backups, open alerts",
            ),
            (
                "bosunctl hosts list --json",
                "every host, as the hub's JSON",
            ),
        ],
    ),
    (
        "bosunctl-tokens-create",
        &[(
            "bosunctl tokens create --name ci-deploy --role operator --expires-in 90d",
            "a token for a deploy pipeline, printed once, that stops working after 90 days",
        )],
    ),
    (
        "bosunctl-status",
        &[
            ("bosunctl status", "the fleet with each host's health"),
            (
                "bosunctl status --check",
                "one line and a monitoring-plugin exit status, for Nagios, Icinga or Checkmk",
            ),
        ],
    ),
    (
        "bosunctl-alerts",
        &[
            ("bosunctl alerts", "the conditions still open"),
            (
                "bosunctl alerts --all --limit 20",
                "the newest 20 alerts, recoveries included",
            ),
        ],
    ),
    (
        "bosunctl-job-new",
        &[(
            "bosunctl job new --kind force-backup --host pve-1 --guest web -o job.json",
            "a job document; the vmid comes from the hub's record of the guest",
        )],
    ),
    (
        "bosunctl-job-sign",
        &[(
            "bosunctl job sign job.json -f ~/.ssh/id_ed25519",
            "sign it with ssh-keygen -Y sign, writing job.json.sig",
        )],
    ),
    (
        "bosunctl-job-submit",
        &[(
            "bosunctl job submit job.json job.json.sig",
            "check the signature, expiry and target, then queue it",
        )],
    ),
    (
        "bosunctl-desired-set",
        &[(
            "bosunctl desired set --host pve-1 desired.json --wait",
            "store a new generation and follow it until the host applied it",
        )],
    ),
    (
        "bosunctl-fleet-rollout",
        &[
            (
                "bosunctl fleet rollout --kind agent-update --label ring=canary --param version=0.3.0 --param sha256=… -f ~/.ssh/id_ed25519",
                "show the one canary host the hub names and sign for it once you type yes; a hub naming more signs nothing",
            ),
            (
                "bosunctl fleet rollout --kind agent-update --label site=fra-1 --max-hosts 20 --param version=0.3.0 --param sha256=… -f ~/.ssh/id_ed25519",
                "at most 20 hosts (nothing if the hub names more): one canary host, then the rest five at a time, stopping at the first failed health gate",
            ),
        ],
    ),
    (
        "bosunctl-pve-check",
        &[(
            "bosunctl pve check --url https://pve-1:8006 --token-file token --fingerprint AB:CD:…",
            "check a Proxmox node and Bosun's token before enrolling it",
        )],
    ),
];

/// The pages' extra sections.
pub fn extras() -> ManExtras<'static> {
    ManExtras {
        exit_status: EXIT_STATUS,
        environment: ENVIRONMENT,
        files: FILES,
        examples: EXAMPLES,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_exit_status_is_listed_once() {
        let listed: Vec<u8> = EXIT_STATUS.iter().map(|(code, _)| *code).collect();
        let mut sorted = listed.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(listed, sorted, "in order, each once");
        for code in [
            exit::OK,
            exit::USAGE,
            exit::CONFIG,
            exit::INPUT,
            exit::UNREACHABLE,
            exit::REFUSED,
            exit::UNAUTHORIZED,
            exit::NOT_FOUND,
            exit::HUB_ERROR,
            exit::NOT_APPLIED,
            exit::CHECK_FAILED,
            exit::ROLLOUT_STOPPED,
        ] {
            assert!(
                listed.contains(&code),
                "exit {code} is not in the man pages"
            );
        }
    }
}
