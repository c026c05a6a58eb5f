//! The tables of what the agent does: backups, storage, reconciling, controllers, health,
//! the tunnel, golden builds, self-update and the break-glass record.

use bosun_clidoc::ConfigTable;

use super::key;

/// `[backup]`.
pub(super) const BACKUP: ConfigTable = ConfigTable {
    name: "backup",
    doc: "Backups, storage targets and restore tests.",
    keys: &[
        key(
            "storage",
            "string",
            "local",
            "\"local\"",
            "The first tier's storage when the backup policy names no target.",
        ),
        key(
            "mount_root",
            "path",
            "/var/lib/bosun-helper/mnt",
            "\"/var/lib/bosun-helper/mnt\"",
            "Where the helper mounts USB targets (the helper's own mount_root).",
        ),
        key(
            "watch_interval_ms",
            "integer (ms)",
            "1000",
            "1000",
            "How often storage targets are looked at (200 to 5000); while every attached target is mounted, four times that, at most 4 s (never less often than the interval itself).",
        ),
        key(
            "min_interval_seconds",
            "integer (s)",
            "900",
            "900",
            "Before a signed data plan: the least time between two scheduled backups of a guest (10 to 604800).",
        ),
        key(
            "storage_call_timeout_ms",
            "integer (ms)",
            "5000",
            "5000",
            "The longest one Proxmox call of the storage watcher may take (500 to 30000).",
        ),
        key(
            "restore_test_stay_up_ms",
            "integer (ms)",
            "30000",
            "30000",
            "How long a restore test's scratch guest must stay running (1 s to 10 min).",
        ),
        key(
            "restore_test_min_free_mib",
            "integer (MiB)",
            "1024",
            "1024",
            "Memory kept free beyond a scratch guest's own; less, and the test waits.",
        ),
        key(
            "restore_test_max_tasks",
            "integer",
            "8",
            "8",
            "No restore test while the node runs this many tasks (1 to 64).",
        ),
        key(
            "restore_test_minute_ms",
            "integer (ms)",
            "60000",
            "60000",
            "One minute of the policy's timeout (100 to 60000; tests shorten it).",
        ),
        key(
            "verify_hour_ms",
            "integer (ms)",
            "3600000",
            "3600000",
            "One hour of the verification interval (1000 to 3600000; tests shorten it).",
        ),
        key(
            "verify_rate_mib_s",
            "integer (MiB/s)",
            "64",
            "64",
            "The most MiB per second the helper re-hashes a file tier's archive at between restore tests (1 to 4096).",
        ),
        key(
            "bulk_check_ms",
            "integer (ms)",
            "60000",
            "60000",
            "How often bulk volumes' archives are looked at (1000 to 60000); a failed one is tried again after five times that.",
        ),
    ],
};

/// `[storage]`.
pub(super) const STORAGE: ConfigTable = ConfigTable {
    name: "storage",
    doc: "Local storage targets.",
    keys: &[key(
        "local_dir_roots",
        "array of paths",
        "empty: no local-dir target allowed",
        "[\"/srv/bosun\"]",
        "Where local-dir targets may live.",
    )],
};

/// `[reconcile]`.
pub(super) const RECONCILE: ConfigTable = ConfigTable {
    name: "reconcile",
    doc: "The reconcile loop that converges the node to the desired state.",
    keys: &[
        key(
            "interval_seconds",
            "integer (s)",
            "30",
            "30",
            "Time between passes.",
        ),
        key(
            "max_parallel",
            "integer",
            "8",
            "8",
            "Guest actions run at once.",
        ),
        key(
            "swap_mib",
            "integer (MiB)",
            "512",
            "512",
            "Swap given to provisioned guests.",
        ),
        key(
            "restart_attempts",
            "integer",
            "5",
            "5",
            "Failed starts before a guest is reported broken.",
        ),
    ],
};

/// `[controller]`.
pub(super) const CONTROLLER: ConfigTable = ConfigTable {
    name: "controller",
    doc: "Controller rollouts and healing inside guests.",
    keys: &[
        key(
            "health_window_ms",
            "integer (ms)",
            "300000",
            "300000",
            "How long a rollout waits for the new controller's health report; silence past it is broken, never a rollback (1000 to 3600000).",
        ),
        key(
            "report_interval_ms",
            "integer (ms)",
            "30000",
            "30000",
            "How often controllers are asked to report (served in GET /v1/controller).",
        ),
        key(
            "heal_after_ms",
            "integer (ms)",
            "120000",
            "120000",
            "Silence after which a running controller is restarted in place.",
        ),
        key(
            "max_restarts",
            "integer",
            "3",
            "3",
            "In-place restarts without a healthy report in between before the controller is broken.",
        ),
    ],
};

/// `[health]`.
pub(super) const HEALTH: ConfigTable = ConfigTable {
    name: "health",
    doc: "Host health: CPU, memory and disk thresholds (percent, raised at high and cleared at low) and SMART.",
    keys: &[
        key(
            "interval_ms",
            "integer (ms)",
            "30000",
            "30000",
            "How often the node status is sampled.",
        ),
        key(
            "samples",
            "integer",
            "3",
            "3",
            "Consecutive readings at or above a high threshold before the gauge is raised.",
        ),
        key(
            "cpu_high_percent",
            "integer (%)",
            "90",
            "90",
            "CPU use at or above which the gauge is raised.",
        ),
        key(
            "cpu_low_percent",
            "integer (%)",
            "75",
            "75",
            "CPU use at or below which it is cleared.",
        ),
        key(
            "memory_high_percent",
            "integer (%)",
            "90",
            "90",
            "Memory use at or above which the gauge is raised.",
        ),
        key(
            "memory_low_percent",
            "integer (%)",
            "80",
            "80",
            "Memory use at or below which it is cleared.",
        ),
        key(
            "disk_high_percent",
            "integer (%)",
            "90",
            "90",
            "Root disk use at or above which the gauge is raised.",
        ),
        key(
            "disk_low_percent",
            "integer (%)",
            "80",
            "80",
            "Root disk use at or below which it is cleared.",
        ),
        key(
            "smart_devices",
            "array of paths",
            "empty: no SMART checks",
            "[\"/dev/sda\"]",
            "Disks whose SMART status is read through the helper.",
        ),
        key(
            "smart_interval_ms",
            "integer (ms)",
            "3600000",
            "3600000",
            "How often SMART is read, through the helper for `smart_devices` and through Proxmox's disk API for every disk of the node.",
        ),
        key(
            "pool_high_percent",
            "integer (%)",
            "90",
            "90",
            "An LVM-thin or ZFS pool's data or metadata fill at or above which it is raised.",
        ),
        key(
            "pool_low_percent",
            "integer (%)",
            "80",
            "80",
            "Pool fill at or below which it is cleared.",
        ),
        key(
            "wear_percent",
            "integer (%)",
            "80",
            "80",
            "Wear used at or above which a disk of the node is worn (1 to 100).",
        ),
        key(
            "hwmon_dir",
            "string (absolute path)",
            "\"/sys/class/hwmon\"",
            "\"/sys/class/hwmon\"",
            "Where the node's temperature sensors are read (no root needed).",
        ),
        key(
            "temperature_high_c",
            "integer (°C)",
            "absent: not judged",
            "85",
            "The high of a sensor whose chip gives neither a max nor a crit (20 to 150); a chip's own max, or 5 °C under its crit, comes first. Raises temperature_high.",
        ),
        key(
            "temperature_hysteresis_c",
            "integer (°C)",
            "5",
            "5",
            "How far under its high a hot sensor clears (1 to 30).",
        ),
    ],
};

/// `[tunnel]`.
pub(super) const TUNNEL: ConfigTable = ConfigTable {
    name: "tunnel",
    doc: "A tunnel (cloudflared) whose readiness endpoint the agent watches and, with config_file, whose configuration it owns and whose replicas it restarts (decision 0082). Absent: no tunnel watched.",
    keys: &[
        key(
            "readiness_url",
            "string (http URL on loopback)",
            "required in the table",
            "\"http://127.0.0.1:20241/ready\"",
            "The readiness endpoint.",
        ),
        key(
            "interval_ms",
            "integer (ms)",
            "5000",
            "5000",
            "How often it is probed (100 to 600000).",
        ),
        key(
            "timeout_ms",
            "integer (ms)",
            "2000",
            "2000",
            "The longest one probe may take (100 to 30000).",
        ),
        key(
            "down_after_ms",
            "integer (ms)",
            "60000",
            "60000",
            "How long it must be down before it is raised (0 to 86400000).",
        ),
        key(
            "config_file",
            "path",
            "absent: the tunnel is only watched",
            "\"/var/lib/bosun-tunnel/config.yml\"",
            "The tunnel's configuration the agent writes from the signed data plan's routes.",
        ),
        key(
            "credentials_file",
            "path",
            "required with config_file",
            "\"/var/lib/bosun-tunnel/credentials.json\"",
            "The credentials file the configuration names. The agent writes it (mode 0640) from desired state's sealed `tunnel_credentials` when they open for this host and the plan's tunnel (decision 0084); without them it is left as it is.",
        ),
        key(
            "restart_after",
            "integer",
            "3",
            "3",
            "Failed readiness probes in a row after which a replica is restarted (1 to 100).",
        ),
        key(
            "restart_timeout_ms",
            "integer (ms)",
            "30000",
            "30000",
            "How long a restart, and a restarted replica's return to ready, may take (100 to 600000).",
        ),
        key(
            "systemctl",
            "path",
            "\"/usr/bin/systemctl\"",
            "\"/usr/bin/systemctl\"",
            "The program that restarts a replica's unit (`systemctl restart UNIT`, allowed by the package's polkit rule).",
        ),
        key(
            "replica",
            "array of tables (unit, metrics)",
            "required with config_file",
            "[{ unit = \"bosun-tunnel@20241.service\", metrics = \"http://127.0.0.1:20241\" }]",
            "The tunnel's replicas (1 to 4): each one's systemd unit and its metrics address on loopback; restarted one at a time.",
        ),
    ],
};

/// `[addresses]`.
pub(super) const ADDRESSES: ConfigTable = ConfigTable {
    name: "addresses",
    doc: "The pool every new guest's static address comes from (decision 0101): written into its net0 as ip=/ip6=, so Proxmox's ipfilter holds the guest to it. Absent: new guests keep the golden image's DHCP, and their firewall holds them to their MAC only. Desired state may name an address only inside the pool's prefix; the agent never hands out the gateway, the node's addresses, another container's or one its journal gave another guest.",
    keys: &[
        key(
            "bridge",
            "string",
            "vmbr0",
            "\"vmbr0\"",
            "The bridge new guests join; desired state may only repeat it.",
        ),
        key(
            "tag",
            "integer",
            "none",
            "20",
            "The VLAN tag new guests get (1 to 4094); desired state may only repeat it.",
        ),
        key(
            "ipv4_first",
            "string (IPv4 address)",
            "none",
            "\"192.0.2.100\"",
            "The first IPv4 address handed out; with ipv4_last and ipv4_prefix.",
        ),
        key(
            "ipv4_last",
            "string (IPv4 address)",
            "none",
            "\"192.0.2.199\"",
            "The last IPv4 address handed out, inside the first's prefix (at most 65536 addresses).",
        ),
        key(
            "ipv4_prefix",
            "integer",
            "none",
            "24",
            "The prefix length written with each IPv4 address (1 to 32).",
        ),
        key(
            "ipv4_gateway",
            "string (IPv4 address)",
            "none",
            "\"192.0.2.1\"",
            "The IPv4 gateway written with each address (gw=), inside the prefix; never handed out.",
        ),
        key(
            "ipv6_first",
            "string (IPv6 address)",
            "none",
            "\"2001:db8::100\"",
            "The first IPv6 address handed out; with ipv6_last and ipv6_prefix.",
        ),
        key(
            "ipv6_last",
            "string (IPv6 address)",
            "none",
            "\"2001:db8::1ff\"",
            "The last IPv6 address handed out, inside the first's prefix (at most 65536 addresses).",
        ),
        key(
            "ipv6_prefix",
            "integer",
            "none",
            "64",
            "The prefix length written with each IPv6 address (1 to 128).",
        ),
        key(
            "ipv6_gateway",
            "string (IPv6 address)",
            "none",
            "\"2001:db8::1\"",
            "The IPv6 gateway written with each address (gw6=), inside the prefix; never handed out.",
        ),
    ],
};

/// `[golden]`.
pub(super) const GOLDEN: ConfigTable = ConfigTable {
    name: "golden",
    doc: "Building the golden image from a signed recipe.",
    keys: &[
        key(
            "builder_vmid",
            "integer",
            "9000",
            "9000",
            "The builder container's vmid.",
        ),
        key(
            "template",
            "string (volume id)",
            "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
            "\"local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst\"",
            "The template the builder starts from.",
        ),
        key(
            "rootfs_storage",
            "string",
            "pve.storage",
            "\"local-lvm\"",
            "The storage of the builder's disk.",
        ),
        key(
            "rootfs_gib",
            "integer (GiB)",
            "8",
            "8",
            "The builder's disk size.",
        ),
        key(
            "bridge",
            "string",
            "vmbr0",
            "\"vmbr0\"",
            "The builder's network bridge.",
        ),
        key(
            "storage",
            "string",
            "backup.storage",
            "\"local\"",
            "Where the golden archive is written.",
        ),
        key(
            "build_timeout_seconds",
            "integer (s)",
            "3600",
            "3600",
            "The longest a build may take (60 to 14400).",
        ),
        key(
            "boot_stay_up_seconds",
            "integer (s)",
            "30",
            "30",
            "How long a new build's scratch guest must stay running in its boot test before guests are provisioned from it (1 to 600).",
        ),
    ],
};

/// `[update]`.
pub(super) const UPDATE: ConfigTable = ConfigTable {
    name: "update",
    doc: "Agent self-update (needs [helper]).",
    keys: &[key(
        "slots_root",
        "path",
        "/var/lib/bosun-helper/slots",
        "\"/var/lib/bosun-helper/slots\"",
        "The helper's slots_root: the A/B slots and the update gate's record, which the agent reads to report a verdict.",
    )],
};

/// `[break_glass]`.
pub(super) const BREAK_GLASS: ConfigTable = ConfigTable {
    name: "break_glass",
    doc: "What break-glass sessions ran, read into the audit trail.",
    keys: &[
        key(
            "spool",
            "path",
            "/var/lib/bosun-breakglass/commands.jsonl",
            "\"/var/lib/bosun-breakglass/commands.jsonl\"",
            "The support shell's record; read at start and whenever its directory changes.",
        ),
        key(
            "scan_interval_seconds",
            "integer (s)",
            "10",
            "10",
            "How often it is read where its directory cannot be watched (1 to 300).",
        ),
        key(
            "consent",
            "path",
            "/var/lib/bosun-consent/consent.json",
            "\"/var/lib/bosun-consent/consent.json\"",
            "Where the agent writes the break-glass consents guests' controllers granted (each bounded in time), which the support shell reads before a command that touches a guest.",
        ),
    ],
};
