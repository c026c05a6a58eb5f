//! The QEMU endpoints the simulator serves, with PVE 9.1's schema-level permissions, and
//! their dispatch to `crate::qemu` (guests) and `crate::qemu_agent` (the guest agent).

use crate::api::{Ctx, HandlerResult};
use crate::routes::{DIGEST, Handler, NODE, Perm, RouteSpec, SNAPNAME, VMID, route, vm};
use crate::schema::{BOOL, ParamKind, ParamSpec, QEMU_NET, STR, UINT, opt, opt_requires, req};

/// Which QEMU handler serves a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QemuHandler {
    List,
    Create,
    ConfigGet,
    ConfigPut,
    Status,
    Start,
    Stop,
    Shutdown,
    Destroy,
    Resize,
    SnapshotList,
    SnapshotCreate,
    SnapshotDelete,
    SnapshotRollback,
    CloudinitGet,
    CloudinitPut,
    AgentPing,
    AgentFsFreeze,
    AgentFsThaw,
    AgentFsStatus,
    AgentExec,
    AgentExecStatus,
    AgentFileWrite,
    AgentFileRead,
    AgentInterfaces,
}

pub(crate) async fn dispatch(handler: QemuHandler, ctx: &Ctx) -> HandlerResult {
    use crate::{qemu, qemu_agent};
    match handler {
        QemuHandler::List => qemu::list(ctx),
        QemuHandler::Create => qemu::create(ctx).await,
        QemuHandler::ConfigGet => qemu::config_get(ctx),
        QemuHandler::ConfigPut => qemu::config_put(ctx).await,
        QemuHandler::Status => qemu::status(ctx),
        QemuHandler::Start => qemu::start(ctx),
        QemuHandler::Stop => qemu::stop(ctx),
        QemuHandler::Shutdown => qemu::shutdown(ctx),
        QemuHandler::Destroy => qemu::destroy(ctx),
        QemuHandler::Resize => crate::qemu_resize::resize(ctx),
        QemuHandler::SnapshotList => qemu::snapshot_list(ctx),
        QemuHandler::SnapshotCreate => qemu::snapshot_create(ctx),
        QemuHandler::SnapshotDelete => qemu::snapshot_delete(ctx),
        QemuHandler::SnapshotRollback => qemu::snapshot_rollback(ctx),
        QemuHandler::CloudinitGet => qemu::cloudinit_get(ctx),
        QemuHandler::CloudinitPut => qemu::cloudinit_put(ctx).await,
        QemuHandler::AgentPing => qemu_agent::ping(ctx),
        QemuHandler::AgentFsFreeze => qemu_agent::fsfreeze(ctx),
        QemuHandler::AgentFsThaw => qemu_agent::fsthaw(ctx),
        QemuHandler::AgentFsStatus => qemu_agent::fsstatus(ctx),
        QemuHandler::AgentExec => qemu_agent::exec(ctx),
        QemuHandler::AgentExecStatus => qemu_agent::exec_status(ctx),
        QemuHandler::AgentFileWrite => qemu_agent::file_write(ctx),
        QemuHandler::AgentFileRead => qemu_agent::file_read(ctx),
        QemuHandler::AgentInterfaces => qemu_agent::interfaces(ctx),
    }
}

const fn q(
    method: &'static str,
    path: &'static str,
    params: &'static [ParamSpec],
    perm: Perm,
    handler: QemuHandler,
) -> RouteSpec {
    route(method, path, params, perm, Handler::Qemu(handler))
}

/// The config keys a VM restore or config change may carry (the simulator's subset of
/// qemu-server's `json_config_properties`).
static VM_CONFIG: &[ParamSpec] = &[
    opt("name", ParamKind::DnsName),
    opt(
        "cores",
        ParamKind::Int {
            min: Some(1),
            max: Some(8192),
        },
    ),
    opt("memory", STR),
    opt(
        "cpuunits",
        ParamKind::Int {
            min: Some(1),
            max: Some(262_144),
        },
    ),
    opt(
        "cpulimit",
        ParamKind::Number {
            min: Some(0.0),
            max: Some(128.0),
        },
    ),
    opt("startup", ParamKind::StartupOrder),
    opt("net[n]", ParamKind::PropString(&QEMU_NET)),
    opt("ipconfig[n]", STR),
    opt("ciuser", STR),
    opt("sshkeys", STR),
    opt("agent", STR),
    opt(
        "smbios1",
        ParamKind::Str {
            max_len: Some(512),
            pattern: None,
        },
    ),
    opt("onboot", BOOL),
    opt(
        "description",
        ParamKind::Str {
            max_len: Some(8192),
            pattern: None,
        },
    ),
    opt("tags", ParamKind::TagList),
    // Disks: refused with an archive, checked as `VM.Config.Disk` on a config change.
    opt("scsi[n]", STR),
];

/// The disks `resize_vm` takes (its `disk` enum).
static RESIZABLE_DISKS: &[&str] = &[
    "ide0",
    "ide1",
    "ide2",
    "ide3",
    "scsi0",
    "scsi1",
    "scsi2",
    "scsi3",
    "scsi4",
    "scsi5",
    "scsi6",
    "scsi7",
    "scsi8",
    "scsi9",
    "scsi10",
    "scsi11",
    "scsi12",
    "scsi13",
    "scsi14",
    "scsi15",
    "scsi16",
    "scsi17",
    "scsi18",
    "scsi19",
    "scsi20",
    "scsi21",
    "scsi22",
    "scsi23",
    "scsi24",
    "scsi25",
    "scsi26",
    "scsi27",
    "scsi28",
    "scsi29",
    "scsi30",
    "virtio0",
    "virtio1",
    "virtio2",
    "virtio3",
    "virtio4",
    "virtio5",
    "virtio6",
    "virtio7",
    "virtio8",
    "virtio9",
    "virtio10",
    "virtio11",
    "virtio12",
    "virtio13",
    "virtio14",
    "virtio15",
    "sata0",
    "sata1",
    "sata2",
    "sata3",
    "sata4",
    "sata5",
    "efidisk0",
    "tpmstate0",
];

/// Parameters of `POST /nodes/{node}/qemu` (restore) beside the config keys.
static CREATE_PARAMS: &[ParamSpec] = &[
    NODE,
    VMID,
    opt(
        "archive",
        ParamKind::Str {
            max_len: Some(255),
            pattern: None,
        },
    ),
    opt("storage", ParamKind::StorageId),
    opt_requires("force", BOOL, "archive"),
    opt_requires("unique", BOOL, "archive"),
    opt(
        "pool",
        ParamKind::Str {
            max_len: None,
            pattern: Some(r"[A-Za-z0-9_\-]+"),
        },
    ),
    opt("start", BOOL),
];

static CONFIG_PUT_PARAMS: &[ParamSpec] = &[NODE, VMID, opt("delete", STR), DIGEST];

const VM_CONFIG_PRIVS: &[&str] = &[
    "VM.Config.Disk",
    "VM.Config.CDROM",
    "VM.Config.CPU",
    "VM.Config.Memory",
    "VM.Config.Network",
    "VM.Config.HWType",
    "VM.Config.Options",
    "VM.Config.Cloudinit",
];

const AUDIT: Perm = vm(&["VM.Audit"], false);
const POWER: Perm = vm(&["VM.PowerMgmt"], false);
const GA_AUDIT: Perm = vm(&["VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted"], true);
const GA_FS: Perm = vm(
    &["VM.GuestAgent.FileSystemMgmt", "VM.GuestAgent.Unrestricted"],
    true,
);
const TIMEOUT: ParamSpec = opt("timeout", UINT);

pub(crate) static QEMU_ROUTES: &[RouteSpec] = &[
    q(
        "GET",
        "/nodes/{node}/qemu",
        &[NODE, opt("full", BOOL)],
        Perm::All,
        QemuHandler::List,
    ),
    // `user: all`: the handler checks VM.Allocate on the VM or its pool (qemu-server).
    RouteSpec {
        shared_params: VM_CONFIG,
        ..q(
            "POST",
            "/nodes/{node}/qemu",
            CREATE_PARAMS,
            Perm::All,
            QemuHandler::Create,
        )
    },
    q(
        "GET",
        "/nodes/{node}/qemu/{vmid}/config",
        &[NODE, VMID, opt("current", BOOL)],
        AUDIT,
        QemuHandler::ConfigGet,
    ),
    RouteSpec {
        shared_params: VM_CONFIG,
        ..q(
            "PUT",
            "/nodes/{node}/qemu/{vmid}/config",
            CONFIG_PUT_PARAMS,
            vm(VM_CONFIG_PRIVS, true),
            QemuHandler::ConfigPut,
        )
    },
    q(
        "GET",
        "/nodes/{node}/qemu/{vmid}/status/current",
        &[NODE, VMID],
        AUDIT,
        QemuHandler::Status,
    ),
    q(
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/start",
        &[NODE, VMID, opt("skiplock", BOOL), TIMEOUT],
        POWER,
        QemuHandler::Start,
    ),
    q(
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/stop",
        &[NODE, VMID, opt("skiplock", BOOL), TIMEOUT],
        POWER,
        QemuHandler::Stop,
    ),
    q(
        "POST",
        "/nodes/{node}/qemu/{vmid}/status/shutdown",
        &[
            NODE,
            VMID,
            opt("forceStop", BOOL),
            opt("skiplock", BOOL),
            TIMEOUT,
        ],
        POWER,
        QemuHandler::Shutdown,
    ),
    q(
        "DELETE",
        "/nodes/{node}/qemu/{vmid}",
        &[
            NODE,
            VMID,
            opt("purge", BOOL),
            opt("skiplock", BOOL),
            opt("destroy-unreferenced-disks", BOOL),
        ],
        vm(&["VM.Allocate"], false),
        QemuHandler::Destroy,
    ),
    // The disk and its size are checked by the schema; everything else inside the task.
    q(
        "PUT",
        "/nodes/{node}/qemu/{vmid}/resize",
        &[
            NODE,
            VMID,
            req("disk", ParamKind::Enum(RESIZABLE_DISKS)),
            req(
                "size",
                ParamKind::Str {
                    max_len: None,
                    pattern: Some(r"\+?\d+(\.\d+)?[KMGT]?"),
                },
            ),
            opt("skiplock", BOOL),
            DIGEST,
        ],
        vm(&["VM.Config.Disk"], false),
        QemuHandler::Resize,
    ),
    q(
        "GET",
        "/nodes/{node}/qemu/{vmid}/snapshot",
        &[NODE, VMID],
        AUDIT,
        QemuHandler::SnapshotList,
    ),
    q(
        "POST",
        "/nodes/{node}/qemu/{vmid}/snapshot",
        &[
            NODE,
            VMID,
            SNAPNAME,
            opt(
                "description",
                ParamKind::Str {
                    max_len: None,
                    pattern: None,
                },
            ),
            opt("vmstate", BOOL),
        ],
        vm(&["VM.Snapshot"], false),
        QemuHandler::SnapshotCreate,
    ),
    q(
        "DELETE",
        "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}",
        &[NODE, VMID, SNAPNAME, opt("force", BOOL)],
        vm(&["VM.Snapshot"], false),
        QemuHandler::SnapshotDelete,
    ),
    q(
        "POST",
        "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/rollback",
        &[NODE, VMID, SNAPNAME, opt("start", BOOL)],
        vm(&["VM.Snapshot", "VM.Snapshot.Rollback"], true),
        QemuHandler::SnapshotRollback,
    ),
    q(
        "GET",
        "/nodes/{node}/qemu/{vmid}/cloudinit",
        &[NODE, VMID],
        AUDIT,
        QemuHandler::CloudinitGet,
    ),
    q(
        "PUT",
        "/nodes/{node}/qemu/{vmid}/cloudinit",
        &[NODE, VMID],
        vm(&["VM.Config.Cloudinit"], false),
        QemuHandler::CloudinitPut,
    ),
    q(
        "POST",
        "/nodes/{node}/qemu/{vmid}/agent/ping",
        &[NODE, VMID],
        GA_AUDIT,
        QemuHandler::AgentPing,
    ),
    q(
        "POST",
        "/nodes/{node}/qemu/{vmid}/agent/fsfreeze-freeze",
        &[NODE, VMID],
        GA_FS,
        QemuHandler::AgentFsFreeze,
    ),
    q(
        "POST",
        "/nodes/{node}/qemu/{vmid}/agent/fsfreeze-thaw",
        &[NODE, VMID],
        GA_FS,
        QemuHandler::AgentFsThaw,
    ),
    q(
        "POST",
        "/nodes/{node}/qemu/{vmid}/agent/fsfreeze-status",
        &[NODE, VMID],
        vm(
            &[
                "VM.GuestAgent.Audit",
                "VM.GuestAgent.FileSystemMgmt",
                "VM.GuestAgent.Unrestricted",
            ],
            true,
        ),
        QemuHandler::AgentFsStatus,
    ),
    q(
        "POST",
        "/nodes/{node}/qemu/{vmid}/agent/exec",
        &[
            NODE,
            VMID,
            req("command", ParamKind::StrArray),
            opt(
                "input-data",
                ParamKind::Str {
                    max_len: Some(65_536),
                    pattern: None,
                },
            ),
        ],
        vm(&["VM.GuestAgent.Unrestricted"], false),
        QemuHandler::AgentExec,
    ),
    q(
        "GET",
        "/nodes/{node}/qemu/{vmid}/agent/exec-status",
        &[NODE, VMID, req("pid", UINT)],
        vm(&["VM.GuestAgent.Unrestricted"], false),
        QemuHandler::AgentExecStatus,
    ),
    q(
        "POST",
        "/nodes/{node}/qemu/{vmid}/agent/file-write",
        &[
            NODE,
            VMID,
            req("file", STR),
            req(
                "content",
                ParamKind::Str {
                    max_len: Some(61_440),
                    pattern: None,
                },
            ),
            opt("encode", BOOL),
        ],
        vm(
            &["VM.GuestAgent.FileWrite", "VM.GuestAgent.Unrestricted"],
            true,
        ),
        QemuHandler::AgentFileWrite,
    ),
    q(
        "GET",
        "/nodes/{node}/qemu/{vmid}/agent/file-read",
        // PVE 9.1 adds `count`, `offset` and `decode`; 8.4 takes the file alone.
        &[NODE, VMID, req("file", STR)],
        vm(
            &["VM.GuestAgent.FileRead", "VM.GuestAgent.Unrestricted"],
            true,
        ),
        QemuHandler::AgentFileRead,
    ),
    q(
        "GET",
        "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces",
        &[NODE, VMID],
        GA_AUDIT,
        QemuHandler::AgentInterfaces,
    ),
];
