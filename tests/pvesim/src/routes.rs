//! The catalogue of every (method, schema path, parameters) the simulator serves, with the
//! schema-level permission of each. Nothing outside this table is served (501).

use crate::lxc_params::LXC_CONFIG;
use crate::schema::{BOOL, INT, PRUNE, ParamKind, ParamSpec, STR, UINT, opt, opt_requires, req};

/// The schema-level permission check of a route.
#[derive(Debug, Clone, Copy)]
pub enum Perm {
    /// `user: all`: any authenticated caller; the handler checks.
    All,
    /// `["perm", path, privs]` (with `any`: one of them is enough).
    Check {
        path: &'static str,
        privs: &'static [&'static str],
        any: bool,
    },
}

/// Which handler serves a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handler {
    Version,
    Nodes,
    NodeStatus,
    ClusterResources,
    ClusterStatus,
    NextId,
    Permissions,
    LxcList,
    LxcCreate,
    LxcConfigGet,
    LxcConfigPut,
    LxcStatus,
    LxcInterfaces,
    LxcPending,
    LxcStart,
    LxcStop,
    LxcShutdown,
    LxcDestroy,
    LxcResize,
    SnapshotList,
    SnapshotCreate,
    SnapshotDelete,
    SnapshotRollback,
    SnapshotIndex,
    SnapshotConfigGet,
    SnapshotConfigPut,
    Vzdump,
    StorageIndex,
    StorageStatus,
    StorageCreate,
    StorageConfigIndex,
    StorageConfigRead,
    StorageConfigUpdate,
    StorageConfigDelete,
    ContentList,
    ContentDelete,
    ContentGet,
    ExtractConfig,
    ContentPut,
    TaskList,
    TaskStatus,
    TaskLog,
    FirewallGet,
    FirewallPut,
    VmFirewallGet,
    VmFirewallPut,
    DatacenterFirewall,
    DiskList,
    DiskSmart,
    DiskLvmthin,
    DiskZfs,
    NetworkList,
    /// A QEMU route (`crate::qemu_routes`).
    Qemu(crate::qemu_routes::QemuHandler),
    /// An access-control route (`crate::access_admin`).
    Access(crate::access_admin::AccessHandler),
}

/// One served endpoint.
#[derive(Debug, Clone, Copy)]
pub struct RouteSpec {
    pub method: &'static str,
    /// PVE schema path template, e.g. `/nodes/{node}/lxc/{vmid}/config`.
    pub path: &'static str,
    /// Accepted parameters (path placeholders included, as in the schema).
    pub params: &'static [ParamSpec],
    /// Further accepted parameters shared between routes (the LXC config keys).
    pub shared_params: &'static [ParamSpec],
    pub perm: Perm,
    pub(crate) handler: Handler,
}

impl RouteSpec {
    /// Every accepted parameter.
    pub fn all_params(&self) -> impl Iterator<Item = &'static ParamSpec> {
        self.params.iter().chain(self.shared_params.iter())
    }

    /// The spec for a request parameter name, if accepted.
    pub fn param(&self, name: &str) -> Option<&'static ParamSpec> {
        self.all_params().find(|p| p.matches(name))
    }

    /// Accepted parameter names as the schema spells them.
    pub fn param_names(&self) -> Vec<&'static str> {
        self.all_params().map(|p| p.name).collect()
    }
}

pub(crate) const NODE: ParamSpec = req("node", ParamKind::Node);
pub(crate) const VMID: ParamSpec = req("vmid", ParamKind::VmId);
const STORAGE: ParamSpec = req("storage", ParamKind::StorageId);
pub(crate) const SNAPNAME: ParamSpec = req("snapname", ParamKind::ConfigId { max_len: 40 });
pub(crate) const DIGEST: ParamSpec = opt(
    "digest",
    ParamKind::Str {
        max_len: Some(40),
        pattern: None,
    },
);

pub(crate) const fn route(
    method: &'static str,
    path: &'static str,
    params: &'static [ParamSpec],
    perm: Perm,
    handler: Handler,
) -> RouteSpec {
    RouteSpec {
        method,
        path,
        params,
        shared_params: &[],
        perm,
        handler,
    }
}

pub(crate) const fn vm(privs: &'static [&'static str], any: bool) -> Perm {
    Perm::Check {
        path: "/vms/{vmid}",
        privs,
        any,
    }
}

/// `is_mountpoint`: yes/no or a path.
const IS_MOUNTPOINT: ParamSpec = opt("is_mountpoint", STR);
const PORT: ParamSpec = opt(
    "port",
    ParamKind::Int {
        min: Some(1),
        max: Some(65535),
    },
);
const MAX_PROTECTED: ParamSpec = opt(
    "max-protected-backups",
    ParamKind::Int {
        min: Some(-1),
        max: None,
    },
);
const SMBVERSION: ParamSpec = opt(
    "smbversion",
    ParamKind::Enum(&["default", "2.0", "2.1", "3", "3.0", "3.11"]),
);

/// `POST /storage` for the types the simulator models: dir, lvmthin, nfs, cifs, pbs.
static STORAGE_CREATE_PARAMS: &[ParamSpec] = &[
    STORAGE,
    req(
        "type",
        ParamKind::Enum(&["cifs", "dir", "lvmthin", "nfs", "pbs"]),
    ),
    opt("path", STR),
    opt("content", ParamKind::StorageContentList),
    opt("server", STR),
    opt("export", STR),
    opt("share", STR),
    opt("subdir", STR),
    opt("domain", STR),
    SMBVERSION,
    opt("options", STR),
    opt("datastore", STR),
    opt("username", STR),
    opt("password", STR),
    opt("fingerprint", STR),
    opt("namespace", STR),
    opt("encryption-key", STR),
    PORT,
    opt("vgname", STR),
    opt("thinpool", STR),
    opt("prune-backups", ParamKind::PropString(&PRUNE)),
    MAX_PROTECTED,
    IS_MOUNTPOINT,
    opt("shared", BOOL),
    opt("disable", BOOL),
    opt("nodes", STR),
    opt("create-base-path", BOOL),
    opt("create-subdirs", BOOL),
];

/// `PUT /storage/{storage}`: the changeable options (`path`, `export`, `share`, `datastore`
/// and `type` are not parameters; `server` is, but it is fixed for every modelled type).
static STORAGE_UPDATE_PARAMS: &[ParamSpec] = &[
    STORAGE,
    opt("content", ParamKind::StorageContentList),
    opt("server", STR),
    opt("subdir", STR),
    opt("domain", STR),
    SMBVERSION,
    opt("options", STR),
    opt("username", STR),
    opt("password", STR),
    opt("fingerprint", STR),
    opt("namespace", STR),
    opt("encryption-key", STR),
    PORT,
    opt("prune-backups", ParamKind::PropString(&PRUNE)),
    MAX_PROTECTED,
    IS_MOUNTPOINT,
    opt("shared", BOOL),
    opt("disable", BOOL),
    opt("nodes", STR),
    opt("create-base-path", BOOL),
    opt("create-subdirs", BOOL),
    opt("delete", ParamKind::ConfigIdList),
    DIGEST,
];

/// The log levels of a guest's firewall options.
const LOG_LEVEL: ParamKind = ParamKind::Enum(&[
    "emerg", "alert", "crit", "err", "warning", "notice", "info", "debug", "nolog",
]);
/// The policies of a guest's firewall options.
const POLICY: ParamKind = ParamKind::Enum(&["ACCEPT", "REJECT", "DROP"]);

/// `PUT /nodes/{node}/lxc/{vmid}/firewall/options`.
static FIREWALL_OPTIONS_PARAMS: &[ParamSpec] = &[
    NODE,
    VMID,
    opt("enable", BOOL),
    opt("ipfilter", BOOL),
    opt("macfilter", BOOL),
    opt("dhcp", BOOL),
    opt("ndp", BOOL),
    opt("radv", BOOL),
    opt("log_level_in", LOG_LEVEL),
    opt("log_level_out", LOG_LEVEL),
    opt("policy_in", POLICY),
    opt("policy_out", POLICY),
    opt("delete", ParamKind::ConfigIdList),
    DIGEST,
];

/// `Sys.Audit` on `/`.
const SYS_AUDIT_ROOT: Perm = Perm::Check {
    path: "/",
    privs: &["Sys.Audit"],
    any: false,
};

static ROUTES: &[RouteSpec] = &[
    route(
        "GET",
        "/nodes/{node}/disks/list",
        &[
            NODE,
            opt("include-partitions", BOOL),
            opt("skipsmart", BOOL),
            opt("type", ParamKind::Enum(&["unused", "journal_disks"])),
        ],
        // PVE: Sys.Audit on `/` or on the node; with the role on `/` propagated, the node.
        Perm::Check {
            path: "/nodes/{node}",
            privs: &["Sys.Audit"],
            any: false,
        },
        Handler::DiskList,
    ),
    route(
        "GET",
        "/nodes/{node}/disks/smart",
        &[
            NODE,
            req(
                "disk",
                ParamKind::Str {
                    max_len: None,
                    pattern: Some(r"/dev/[a-zA-Z0-9/]+"),
                },
            ),
            opt("healthonly", BOOL),
        ],
        SYS_AUDIT_ROOT,
        Handler::DiskSmart,
    ),
    route(
        "GET",
        "/nodes/{node}/disks/lvmthin",
        &[NODE],
        SYS_AUDIT_ROOT,
        Handler::DiskLvmthin,
    ),
    route(
        "GET",
        "/nodes/{node}/disks/zfs",
        &[NODE],
        SYS_AUDIT_ROOT,
        Handler::DiskZfs,
    ),
    route(
        "GET",
        "/nodes/{node}/network",
        &[
            NODE,
            opt(
                "type",
                ParamKind::Enum(&[
                    "bridge",
                    "bond",
                    "eth",
                    "alias",
                    "vlan",
                    "OVSBridge",
                    "OVSBond",
                    "OVSPort",
                    "OVSIntPort",
                    "any_bridge",
                    "any_local_bridge",
                ]),
            ),
        ],
        Perm::All,
        Handler::NetworkList,
    ),
    route("GET", "/version", &[], Perm::All, Handler::Version),
    route("GET", "/nodes", &[], Perm::All, Handler::Nodes),
    route(
        "GET",
        "/nodes/{node}/status",
        &[NODE],
        Perm::Check {
            path: "/nodes/{node}",
            privs: &["Sys.Audit"],
            any: false,
        },
        Handler::NodeStatus,
    ),
    route(
        "GET",
        "/cluster/resources",
        &[opt(
            "type",
            ParamKind::Enum(&["vm", "storage", "node", "sdn"]),
        )],
        Perm::All,
        Handler::ClusterResources,
    ),
    route(
        "GET",
        "/cluster/status",
        &[],
        Perm::Check {
            path: "/",
            privs: &["Sys.Audit"],
            any: false,
        },
        Handler::ClusterStatus,
    ),
    route(
        "GET",
        "/cluster/nextid",
        &[opt("vmid", ParamKind::VmId)],
        Perm::All,
        Handler::NextId,
    ),
    route(
        "GET",
        "/access/permissions",
        &[
            opt("path", STR),
            opt(
                "userid",
                ParamKind::Str {
                    max_len: None,
                    pattern: Some(
                        r"[^\s:/]+@[A-Za-z][A-Za-z0-9.\-_]+(?:![A-Za-z][A-Za-z0-9.\-_]+)?",
                    ),
                },
            ),
        ],
        Perm::All,
        Handler::Permissions,
    ),
    route(
        "GET",
        "/nodes/{node}/lxc",
        &[NODE],
        Perm::All,
        Handler::LxcList,
    ),
    RouteSpec {
        method: "POST",
        path: "/nodes/{node}/lxc",
        params: &[
            NODE,
            VMID,
            req(
                "ostemplate",
                ParamKind::Str {
                    max_len: Some(255),
                    pattern: None,
                },
            ),
            opt(
                "bwlimit",
                ParamKind::Number {
                    min: Some(0.0),
                    max: None,
                },
            ),
            opt("force", BOOL),
            opt("ignore-unpack-errors", BOOL),
            opt("password", STR),
            opt("pool", STR),
            opt("restore", BOOL),
            opt("ssh-public-keys", STR),
            opt("start", BOOL),
            opt("storage", ParamKind::StorageId),
            opt_requires("unique", BOOL, "restore"),
        ],
        shared_params: LXC_CONFIG,
        perm: Perm::All,
        handler: Handler::LxcCreate,
    },
    route(
        "GET",
        "/nodes/{node}/lxc/{vmid}/config",
        &[
            NODE,
            VMID,
            opt("current", BOOL),
            opt("snapshot", ParamKind::ConfigId { max_len: 40 }),
        ],
        vm(&["VM.Audit"], false),
        Handler::LxcConfigGet,
    ),
    RouteSpec {
        method: "PUT",
        path: "/nodes/{node}/lxc/{vmid}/config",
        params: &[
            NODE,
            VMID,
            opt("delete", ParamKind::ConfigIdList),
            opt("revert", ParamKind::ConfigIdList),
            DIGEST,
        ],
        shared_params: LXC_CONFIG,
        perm: vm(
            &[
                "VM.Config.Disk",
                "VM.Config.CPU",
                "VM.Config.Memory",
                "VM.Config.Network",
                "VM.Config.Options",
            ],
            true,
        ),
        handler: Handler::LxcConfigPut,
    },
    route(
        "GET",
        "/nodes/{node}/lxc/{vmid}/status/current",
        &[NODE, VMID],
        vm(&["VM.Audit"], false),
        Handler::LxcStatus,
    ),
    route(
        "GET",
        "/nodes/{node}/lxc/{vmid}/interfaces",
        &[NODE, VMID],
        vm(&["VM.Audit"], false),
        Handler::LxcInterfaces,
    ),
    route(
        "POST",
        "/nodes/{node}/lxc/{vmid}/status/start",
        &[NODE, VMID, opt("skiplock", BOOL), opt("debug", BOOL)],
        vm(&["VM.PowerMgmt"], false),
        Handler::LxcStart,
    ),
    route(
        "POST",
        "/nodes/{node}/lxc/{vmid}/status/stop",
        &[
            NODE,
            VMID,
            opt("skiplock", BOOL),
            opt("overrule-shutdown", BOOL),
        ],
        vm(&["VM.PowerMgmt"], false),
        Handler::LxcStop,
    ),
    route(
        "POST",
        "/nodes/{node}/lxc/{vmid}/status/shutdown",
        &[NODE, VMID, opt("timeout", UINT), opt("forceStop", BOOL)],
        vm(&["VM.PowerMgmt"], false),
        Handler::LxcShutdown,
    ),
    route(
        "DELETE",
        "/nodes/{node}/lxc/{vmid}",
        &[
            NODE,
            VMID,
            opt("force", BOOL),
            opt("purge", BOOL),
            opt("destroy-unreferenced-disks", BOOL),
        ],
        vm(&["VM.Allocate"], false),
        Handler::LxcDestroy,
    ),
    route(
        "PUT",
        "/nodes/{node}/lxc/{vmid}/resize",
        &[
            NODE,
            VMID,
            req(
                "disk",
                ParamKind::Str {
                    max_len: None,
                    pattern: Some(r"rootfs|mp\d+"),
                },
            ),
            req(
                "size",
                ParamKind::Str {
                    max_len: None,
                    pattern: Some(r"\+?\d+(\.\d+)?[KMGT]?"),
                },
            ),
            DIGEST,
        ],
        vm(&["VM.Config.Disk"], true),
        Handler::LxcResize,
    ),
    route(
        "GET",
        "/nodes/{node}/lxc/{vmid}/pending",
        &[NODE, VMID],
        vm(&["VM.Audit"], false),
        Handler::LxcPending,
    ),
    route(
        "GET",
        "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}",
        &[NODE, VMID, SNAPNAME],
        Perm::All,
        Handler::SnapshotIndex,
    ),
    route(
        "GET",
        "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}/config",
        &[NODE, VMID, SNAPNAME],
        vm(&["VM.Snapshot", "VM.Snapshot.Rollback", "VM.Audit"], true),
        Handler::SnapshotConfigGet,
    ),
    route(
        "PUT",
        "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}/config",
        &[NODE, VMID, SNAPNAME, opt("description", STR)],
        vm(&["VM.Snapshot"], false),
        Handler::SnapshotConfigPut,
    ),
    route(
        "GET",
        "/nodes/{node}/lxc/{vmid}/snapshot",
        &[NODE, VMID],
        vm(&["VM.Audit"], false),
        Handler::SnapshotList,
    ),
    route(
        "POST",
        "/nodes/{node}/lxc/{vmid}/snapshot",
        &[NODE, VMID, SNAPNAME, opt("description", STR)],
        vm(&["VM.Snapshot"], false),
        Handler::SnapshotCreate,
    ),
    route(
        "DELETE",
        "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}",
        &[NODE, VMID, SNAPNAME, opt("force", BOOL)],
        vm(&["VM.Snapshot"], false),
        Handler::SnapshotDelete,
    ),
    route(
        "POST",
        "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}/rollback",
        &[NODE, VMID, SNAPNAME, opt("start", BOOL)],
        vm(&["VM.Snapshot", "VM.Snapshot.Rollback"], true),
        Handler::SnapshotRollback,
    ),
    route(
        "POST",
        "/nodes/{node}/vzdump",
        &[
            NODE,
            opt("vmid", ParamKind::VmIdList),
            opt("all", BOOL),
            opt("exclude", ParamKind::VmIdList),
            opt("pool", STR),
            opt("storage", ParamKind::StorageId),
            opt("mode", ParamKind::Enum(&["snapshot", "suspend", "stop"])),
            opt(
                "compress",
                ParamKind::Enum(&["0", "1", "gzip", "lzo", "zstd"]),
            ),
            opt_requires(
                "notes-template",
                ParamKind::Str {
                    max_len: Some(1024),
                    pattern: None,
                },
                "storage",
            ),
            opt_requires("protected", BOOL, "storage"),
            opt("prune-backups", ParamKind::PropString(&PRUNE)),
            opt("remove", BOOL),
            opt("lockwait", UINT),
            opt("stopwait", UINT),
            opt("zstd", INT),
            opt("bwlimit", UINT),
            opt(
                "ionice",
                ParamKind::Int {
                    min: Some(0),
                    max: Some(8),
                },
            ),
            opt("tmpdir", STR),
            opt("dumpdir", STR),
            opt("script", STR),
            opt(
                "job-id",
                ParamKind::Str {
                    max_len: Some(50),
                    pattern: Some(r"\S+"),
                },
            ),
            opt("stdout", BOOL),
            opt(
                "notification-mode",
                ParamKind::Enum(&["auto", "legacy-sendmail", "notification-system"]),
            ),
        ],
        Perm::All,
        Handler::Vzdump,
    ),
    route(
        "GET",
        "/nodes/{node}/vzdump/extractconfig",
        &[NODE, req("volume", STR)],
        Perm::All,
        Handler::ExtractConfig,
    ),
    route(
        "GET",
        "/nodes/{node}/storage",
        &[
            NODE,
            opt("content", ParamKind::StorageContentList),
            opt("enabled", BOOL),
            opt("storage", ParamKind::StorageId),
        ],
        Perm::All,
        Handler::StorageIndex,
    ),
    route(
        "GET",
        "/nodes/{node}/storage/{storage}/status",
        &[NODE, STORAGE],
        Perm::Check {
            path: "/storage/{storage}",
            privs: &["Datastore.Audit", "Datastore.AllocateSpace"],
            any: true,
        },
        Handler::StorageStatus,
    ),
    route(
        "GET",
        "/storage",
        &[opt(
            "type",
            ParamKind::Enum(&["cifs", "dir", "lvmthin", "nfs", "pbs"]),
        )],
        Perm::All,
        Handler::StorageConfigIndex,
    ),
    route(
        "GET",
        "/storage/{storage}",
        &[STORAGE],
        Perm::Check {
            path: "/storage/{storage}",
            privs: &["Datastore.Allocate"],
            any: false,
        },
        Handler::StorageConfigRead,
    ),
    route(
        "POST",
        "/storage",
        STORAGE_CREATE_PARAMS,
        Perm::Check {
            path: "/storage",
            privs: &["Datastore.Allocate"],
            any: false,
        },
        Handler::StorageCreate,
    ),
    route(
        "PUT",
        "/storage/{storage}",
        STORAGE_UPDATE_PARAMS,
        Perm::Check {
            path: "/storage",
            privs: &["Datastore.Allocate"],
            any: false,
        },
        Handler::StorageConfigUpdate,
    ),
    route(
        "DELETE",
        "/storage/{storage}",
        &[STORAGE],
        Perm::Check {
            path: "/storage",
            privs: &["Datastore.Allocate"],
            any: false,
        },
        Handler::StorageConfigDelete,
    ),
    route(
        "GET",
        "/nodes/{node}/storage/{storage}/content",
        &[
            NODE,
            STORAGE,
            opt("content", ParamKind::StorageContent),
            opt("vmid", ParamKind::VmId),
        ],
        Perm::Check {
            path: "/storage/{storage}",
            privs: &["Datastore.Audit", "Datastore.AllocateSpace"],
            any: true,
        },
        Handler::ContentList,
    ),
    route(
        "DELETE",
        "/nodes/{node}/storage/{storage}/content/{volume}",
        &[
            NODE,
            opt("storage", ParamKind::StorageId),
            req("volume", STR),
            opt(
                "delay",
                ParamKind::Int {
                    min: Some(1),
                    max: Some(30),
                },
            ),
        ],
        Perm::All,
        Handler::ContentDelete,
    ),
    route(
        "GET",
        "/nodes/{node}/storage/{storage}/content/{volume}",
        &[
            NODE,
            opt("storage", ParamKind::StorageId),
            req("volume", STR),
        ],
        Perm::All,
        Handler::ContentGet,
    ),
    route(
        "PUT",
        "/nodes/{node}/storage/{storage}/content/{volume}",
        &[
            NODE,
            opt("storage", ParamKind::StorageId),
            req("volume", STR),
            opt("notes", STR),
            opt("protected", BOOL),
        ],
        Perm::All,
        Handler::ContentPut,
    ),
    route(
        "GET",
        "/nodes/{node}/lxc/{vmid}/firewall/options",
        &[NODE, VMID],
        vm(&["VM.Audit"], false),
        Handler::FirewallGet,
    ),
    route(
        "PUT",
        "/nodes/{node}/lxc/{vmid}/firewall/options",
        FIREWALL_OPTIONS_PARAMS,
        vm(&["VM.Config.Network"], false),
        Handler::FirewallPut,
    ),
    route(
        "GET",
        "/nodes/{node}/qemu/{vmid}/firewall/options",
        &[NODE, VMID],
        vm(&["VM.Audit"], false),
        Handler::VmFirewallGet,
    ),
    route(
        "PUT",
        "/nodes/{node}/qemu/{vmid}/firewall/options",
        FIREWALL_OPTIONS_PARAMS,
        vm(&["VM.Config.Network"], false),
        Handler::VmFirewallPut,
    ),
    route(
        "GET",
        "/cluster/firewall/options",
        &[],
        Perm::Check {
            path: "/",
            privs: &["Sys.Audit"],
            any: false,
        },
        Handler::DatacenterFirewall,
    ),
    route(
        "GET",
        "/nodes/{node}/tasks",
        &[
            NODE,
            opt("vmid", ParamKind::VmId),
            opt("typefilter", STR),
            opt("source", ParamKind::Enum(&["archive", "active", "all"])),
            opt("limit", UINT),
            opt("start", UINT),
            opt("errors", BOOL),
            opt("userfilter", STR),
            opt("since", INT),
            opt("until", INT),
        ],
        Perm::All,
        Handler::TaskList,
    ),
    route(
        "GET",
        "/nodes/{node}/tasks/{upid}/status",
        &[NODE, req("upid", STR)],
        Perm::All,
        Handler::TaskStatus,
    ),
    route(
        "GET",
        "/nodes/{node}/tasks/{upid}/log",
        &[
            NODE,
            req("upid", STR),
            opt("start", UINT),
            opt("limit", UINT),
        ],
        Perm::All,
        Handler::TaskLog,
    ),
];

/// The catalogue of every endpoint the simulator serves.
pub fn routes() -> &'static [RouteSpec] {
    &ALL_ROUTES
}

/// The container and node routes, then the QEMU and the access-control ones.
static ALL_ROUTES: std::sync::LazyLock<Vec<RouteSpec>> = std::sync::LazyLock::new(|| {
    ROUTES
        .iter()
        .chain(crate::qemu_routes::QEMU_ROUTES)
        .chain(crate::access_admin::ACCESS_ROUTES)
        .copied()
        .collect()
});

/// A matched route with its path parameters.
#[derive(Debug)]
pub(crate) struct Matched {
    pub(crate) spec: &'static RouteSpec,
    pub(crate) path_params: Vec<(String, String)>,
}

/// Finds the route for a method and a path below `/api2/json` (already percent-decoded per
/// segment). `{volume}` takes the rest of the path, as PVE's content route does.
pub(crate) fn lookup(method: &str, segments: &[String]) -> Option<Matched> {
    routes()
        .iter()
        .filter(|r| r.method == method)
        .find_map(|r| match_template(r, segments))
}

fn match_template(spec: &'static RouteSpec, segments: &[String]) -> Option<Matched> {
    let template: Vec<&str> = spec.path.split('/').filter(|s| !s.is_empty()).collect();
    let mut params = Vec::new();
    let mut i = 0;
    for (ti, t) in template.iter().enumerate() {
        if let Some(name) = t.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
            if name == "volume" && ti == template.len() - 1 {
                if i >= segments.len() {
                    return None;
                }
                params.push((name.to_owned(), segments[i..].join("/")));
                i = segments.len();
                continue;
            }
            let seg = segments.get(i)?;
            if seg.is_empty() {
                return None;
            }
            params.push((name.to_owned(), seg.clone()));
        } else if segments.get(i).map(String::as_str) != Some(*t) {
            return None;
        }
        i += 1;
    }
    (i == segments.len()).then_some(Matched {
        spec,
        path_params: params,
    })
}
