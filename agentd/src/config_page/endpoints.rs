//! The top level and the tables of what the agent talks to: the hub, Proxmox, the helper,
//! the guests (local API, bootstrap) and Prometheus, and how it polls.

use bosun_clidoc::ConfigTable;

use super::key;

/// The top level.
pub(super) const TOP: ConfigTable = ConfigTable {
    name: "",
    doc: "Where the agent keeps its state and whose signatures it accepts. Both keys are required.",
    keys: &[
        key(
            "state_dir",
            "path",
            "required",
            "\"/var/lib/bosun\"",
            "The agent's own state: its journal, host key, hub link and local API certificate (bosun:bosun 0700; the unit's StateDirectory).",
        ),
        key(
            "allowed_signers",
            "path",
            "required",
            "\"/etc/bosun/allowed_signers\"",
            "The operators' SSH public keys in ssh-keygen's allowed_signers format: a destructive job, a golden choice or a data plan counts only when one of them signed it.",
        ),
    ],
};

/// `[hub]`.
pub(super) const HUB: ConfigTable = ConfigTable {
    name: "hub",
    doc: "The hub the agent polls. Required.",
    keys: &[
        key(
            "url",
            "string (https URL)",
            "required",
            "\"https://hub.example:7443\"",
            "The hub's agent address.",
        ),
        key(
            "fingerprint",
            "string (pin)",
            "none; this, pins or ca is required",
            "\"spki:abababababababababababababababababababababababababababababababab\"",
            "A pin of the hub as bosun-hubd init prints them: its key pin (spki: and 64 hex digits), which a renewal of the same key keeps, or its certificate's SHA-256 (64 hex digits, colons allowed). The agent always trusts it; beside it, it trusts the keys of the newest pin set the operator signed (bosun.hub-pins/v1, namespace bosun-policy@v1, journaled in hub-pins.json in the state directory). Keys a hub announces unsigned are never trusted.",
        ),
        key(
            "pins",
            "array of strings (pins)",
            "[]",
            "[\"spki:cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd\"]",
            "More pins the hub is trusted by, beside fingerprint (at most 8 in all).",
        ),
        key(
            "ca",
            "string",
            "none",
            "\"system\"",
            "Trust the hub by a CA instead: \"system\" (the system's trust store) or the absolute path of a CA certificate file (PEM); the hub's certificate must then name the host of url. With fingerprint or pins set as well, the hub's certificate must match one of them too.",
        ),
        key(
            "enrollment_token_file",
            "path",
            "none",
            "\"/etc/bosun/enroll-token\"",
            "A file holding the one-time enrollment token; read only on the first start, before the agent has a hub link.",
        ),
    ],
};

/// `[pve]`.
pub(super) const PVE: ConfigTable = ConfigTable {
    name: "pve",
    doc: "The Proxmox VE API on this node. Required.",
    keys: &[
        key(
            "url",
            "string (https URL)",
            "required",
            "\"https://127.0.0.1:8006/api2/json\"",
            "The API's base URL.",
        ),
        key(
            "node",
            "string",
            "required",
            "\"pve\"",
            "This node's name in Proxmox.",
        ),
        key(
            "token_id",
            "string",
            "required",
            "\"bosun@pve!agent\"",
            "The API token's id (USER@REALM!NAME).",
        ),
        key(
            "token_secret_file",
            "path",
            "required",
            "\"/etc/bosun/pve-token\"",
            "A file holding the token's secret (root:bosun 0640).",
        ),
        key(
            "fingerprint",
            "string (SHA-256, hex)",
            "none",
            "\"AB:CD\"",
            "The SHA-256 of the API's certificate; give this or ca_file.",
        ),
        key(
            "ca_file",
            "path",
            "none",
            "\"/etc/pve/pve-root-ca.pem\"",
            "A CA certificate (PEM) the API's certificate is checked against; give this or fingerprint.",
        ),
        key(
            "storage",
            "string",
            "local-lvm",
            "\"local-lvm\"",
            "The storage provisioned guests' volumes go to.",
        ),
        key(
            "fast_retries",
            "boolean",
            "false",
            "false",
            "Retry Proxmox calls quickly (tests against the simulator); leave off on a real node.",
        ),
    ],
};

/// `[helper]`.
pub(super) const HELPER: ConfigTable = ConfigTable {
    name: "helper",
    doc: "How the agent reaches bosun-helper, its root helper. Absent: the agent provisions nothing that needs root.",
    keys: &[
        key(
            "transport",
            "string: socket or sudo",
            "socket",
            "\"socket\"",
            "socket: connect to bosun-helper.socket; sudo: run the helper through sudo -n (an agent outside systemd).",
        ),
        key(
            "socket",
            "path",
            "/run/bosun/helper.sock",
            "\"/run/bosun/helper.sock\"",
            "bosun-helper.socket's socket (transport = socket); the guest and golden units' sockets (helper-guest.sock, helper-golden.sock) are found beside it.",
        ),
        key(
            "sudo",
            "path",
            "/usr/bin/sudo",
            "\"/usr/bin/sudo\"",
            "sudo (transport = sudo).",
        ),
        key(
            "helper",
            "path",
            "/usr/libexec/bosun/bosun-helper",
            "\"/usr/libexec/bosun/bosun-helper\"",
            "The helper's program (transport = sudo).",
        ),
    ],
};

/// `[local_api]`.
pub(super) const LOCAL_API: ConfigTable = ConfigTable {
    name: "local_api",
    doc: "The per-guest HTTPS API the controller inside each guest calls. Absent or enabled = false: not served.",
    keys: &[
        key("enabled", "boolean", "true", "true", "Serve the local API."),
        key(
            "bind",
            "IP address",
            "127.0.0.1",
            "\"127.0.0.1\"",
            "The guests' bridge address; never a wildcard.",
        ),
        key(
            "port",
            "integer",
            "8443",
            "8443",
            "The port; 0 picks a free one (tests).",
        ),
        key(
            "max_body_bytes",
            "integer (bytes)",
            "16384",
            "16384",
            "Larger request bodies get 413 (1024 to 1048576).",
        ),
        key(
            "rate_per_s",
            "integer",
            "20",
            "20",
            "Sustained requests per second per token (1 to 10000).",
        ),
        key(
            "burst",
            "integer",
            "40, or rate_per_s if higher",
            "40",
            "Requests at once before the rate applies (rate_per_s to 100000).",
        ),
        key(
            "shutdown_grace_ms",
            "integer (ms)",
            "5000",
            "5000",
            "The time in-flight requests get to finish when the agent stops (at most 300000).",
        ),
        key(
            "max_connections",
            "integer",
            "512",
            "512",
            "Open connections in all (1 to 4096).",
        ),
        key(
            "max_connections_per_peer",
            "integer",
            "32",
            "32",
            "Open connections per guest address (1 to max_connections).",
        ),
        key(
            "max_connections_per_guest",
            "integer",
            "32",
            "32",
            "Open connections per guest, over all its addresses (1 to max_connections).",
        ),
        key(
            "max_unattributed_connections",
            "integer",
            "64",
            "64",
            "Open connections from addresses no guest is known by, in all (1 to max_connections).",
        ),
        key(
            "handshake_timeout_ms",
            "integer (ms)",
            "10000",
            "10000",
            "The TLS handshake's limit (100 to 300000).",
        ),
        key(
            "header_read_timeout_ms",
            "integer (ms)",
            "10000",
            "10000",
            "A request head's limit, from its first byte (100 to 300000).",
        ),
        key(
            "idle_timeout_ms",
            "integer (ms)",
            "30000",
            "30000",
            "A connection with no request in flight and nothing received is closed after this (100 to 300000).",
        ),
        key(
            "body_timeout_ms",
            "integer (ms)",
            "10000",
            "10000",
            "A request body's limit, in full; 408 after (100 to 300000).",
        ),
    ],
};

/// `[metrics]`.
pub(super) const METRICS: ConfigTable = ConfigTable {
    name: "metrics",
    doc: "The agent's Prometheus /metrics, plain HTTP. Absent or enabled = false: not served.",
    keys: &[
        key("enabled", "boolean", "true", "true", "Serve /metrics."),
        key(
            "listen",
            "socket address",
            "127.0.0.1:9101",
            "\"127.0.0.1:9101\"",
            "Where; never a wildcard or the local API's bind address, which guests reach.",
        ),
    ],
};

/// `[bootstrap]`.
pub(super) const BOOTSTRAP: ConfigTable = ConfigTable {
    name: "bootstrap",
    doc: "What bootstrap.json tells the guests about the hub.",
    keys: &[
        key(
            "hub_url",
            "string (https URL)",
            "hub.url",
            "\"https://hub.example:7443\"",
            "The hub's address as guests reach it.",
        ),
        key(
            "hub_fingerprint",
            "string (pin)",
            "hub.fingerprint",
            "\"abababababababababababababababababababababababababababababababab\"",
            "The pin guests trust the hub by: a key pin (spki: and 64 hex digits) or the certificate's SHA-256. Required when the hub is trusted by ca alone.",
        ),
    ],
};

/// `[poll]`.
pub(super) const POLL: ConfigTable = ConfigTable {
    name: "poll",
    doc: "How the agent polls the hub.",
    keys: &[
        key(
            "long_poll_seconds",
            "integer (s)",
            "25",
            "25",
            "How long the hub may hold a poll open (at most 60).",
        ),
        key(
            "backoff_initial_ms",
            "integer (ms)",
            "1000",
            "1000",
            "The first pause after a failed poll; it doubles.",
        ),
        key(
            "backoff_max_ms",
            "integer (ms)",
            "60000",
            "60000",
            "The longest pause after failed polls (not below backoff_initial_ms).",
        ),
        key(
            "report_min_interval_ms",
            "integer (ms)",
            "5000",
            "5000",
            "The least time between two reports an observed change prompts; actions still report at once.",
        ),
        key(
            "pending_interval_ms",
            "integer (ms)",
            "60000",
            "60000",
            "The pause between polls while the hub awaits an operator's approval of this host (1 s to 5 min).",
        ),
        key(
            "host_key_rotation_min_seconds",
            "integer (s)",
            "3600",
            "3600",
            "The least time between two rotations of the host's key, however often the hub asks (at least 10, and never below ten of the hub's poll intervals); a request that comes sooner is served then.",
        ),
        key(
            "stall_limit_ms",
            "integer (ms)",
            "900000",
            "900000",
            "The longest the hub loop may go without progress (a round begun, or its wait for the hub or a pause going on) before the systemd watchdog stops its pings and systemd restarts the agent (2 s to 1 h). An unreachable hub is not a stall.",
        ),
    ],
};
