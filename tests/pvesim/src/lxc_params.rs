//! The LXC config keys accepted by create/restore and `PUT config`, with their schema types.

use crate::schema::{
    BOOL, DEV, FEATURES, MP, NET, ParamKind, ParamSpec, ROOTFS, STR, UINT, UNUSED, opt,
};

pub(crate) const LOCKS: &[&str] = &[
    "backup",
    "create",
    "destroyed",
    "disk",
    "fstrim",
    "migrate",
    "mounted",
    "rollback",
    "snapshot",
    "snapshot-delete",
];

/// LXC config keys accepted by both create/restore and `PUT config` (only keys present in
/// both the PVE 8.4 and 9.1 schemas; `entrypoint`, `env` and `ha-managed` are 9.x-only).
pub(crate) const LXC_CONFIG: &[ParamSpec] = &[
    opt(
        "arch",
        ParamKind::Enum(&["amd64", "i386", "arm64", "armhf", "riscv32", "riscv64"]),
    ),
    opt("cmode", ParamKind::Enum(&["shell", "console", "tty"])),
    opt("console", BOOL),
    opt(
        "cores",
        ParamKind::Int {
            min: Some(1),
            max: Some(8192),
        },
    ),
    opt(
        "cpulimit",
        ParamKind::Number {
            min: Some(0.0),
            max: Some(8192.0),
        },
    ),
    opt(
        "cpuunits",
        ParamKind::Int {
            min: Some(0),
            max: Some(500_000),
        },
    ),
    opt("debug", BOOL),
    opt(
        "description",
        ParamKind::Str {
            max_len: Some(8192),
            pattern: None,
        },
    ),
    opt("dev[n]", ParamKind::PropString(&DEV)),
    opt("features", ParamKind::PropString(&FEATURES)),
    opt("hookscript", ParamKind::VolumeId),
    opt("hostname", ParamKind::DnsName),
    opt("lock", ParamKind::Enum(LOCKS)),
    opt(
        "memory",
        ParamKind::Int {
            min: Some(16),
            max: None,
        },
    ),
    opt("mp[n]", ParamKind::PropString(&MP)),
    opt("nameserver", STR),
    opt("net[n]", ParamKind::PropString(&NET)),
    opt("onboot", BOOL),
    opt(
        "ostype",
        ParamKind::Enum(&[
            "debian",
            "devuan",
            "ubuntu",
            "centos",
            "fedora",
            "opensuse",
            "archlinux",
            "alpine",
            "gentoo",
            "nixos",
            "unmanaged",
        ]),
    ),
    opt("protection", BOOL),
    opt("rootfs", ParamKind::PropString(&ROOTFS)),
    opt("searchdomain", ParamKind::DnsNameList),
    opt("startup", ParamKind::StartupOrder),
    opt("swap", UINT),
    opt("tags", ParamKind::TagList),
    opt("template", BOOL),
    opt("timezone", STR),
    opt(
        "tty",
        ParamKind::Int {
            min: Some(0),
            max: Some(6),
        },
    ),
    opt("unprivileged", BOOL),
    opt("unused[n]", ParamKind::PropString(&UNUSED)),
];
