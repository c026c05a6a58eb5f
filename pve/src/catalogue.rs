//! Every operation the client performs and the one PVE endpoint each operation calls.
//!
//! [`CATALOGUE`] is the complete list of `(method, schema path template)` pairs the client can
//! emit; the schema conformance test checks each against Proxmox's published API schema and
//! asserts that a run of every operation touches each entry.

use std::fmt;

/// An HTTP method the client uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HttpMethod {
    /// `GET`: parameters in the query string.
    Get,
    /// `POST`: parameters in a form body.
    Post,
    /// `PUT`: parameters in a form body.
    Put,
    /// `DELETE`: parameters in the query string.
    Delete,
}

impl HttpMethod {
    /// The method name as sent.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Post => "POST",
            Self::Put => "PUT",
            Self::Delete => "DELETE",
        }
    }

    /// Whether a repeated call cannot change anything on the server.
    pub fn is_read_only(self) -> bool {
        matches!(self, Self::Get)
    }
}

impl fmt::Display for HttpMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One catalogue entry: a method and the schema's path template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// The HTTP method.
    pub method: HttpMethod,
    /// The path below `/api2/json`, with `{param}` placeholders as in the schema.
    pub path: &'static str,
}

macro_rules! ops {
    ($($(#[$doc:meta])* $name:ident => $method:ident $path:literal,)*) => {
        /// An operation of the client; errors name the operation that failed.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Op {
            $($(#[$doc])* $name,)*
        }

        impl Op {
            /// Every operation, in catalogue order.
            pub const ALL: &'static [Op] = &[$(Op::$name,)*];

            /// The endpoint this operation calls.
            pub const fn endpoint(self) -> Endpoint {
                match self {
                    $(Op::$name => Endpoint { method: HttpMethod::$method, path: $path },)*
                }
            }
        }

        /// Every `(method, schema path template)` the client can emit.
        pub const CATALOGUE: &[Endpoint] = &[
            $(Endpoint { method: HttpMethod::$method, path: $path },)*
        ];
    };
}

ops! {
    /// `GET /version`.
    Version => Get "/version",
    /// `GET /nodes`.
    ListNodes => Get "/nodes",
    /// `GET /cluster/nextid`.
    NextId => Get "/cluster/nextid",
    /// `GET /cluster/resources?type=vm`: every guest of the cluster and the node holding it.
    ClusterResources => Get "/cluster/resources",
    /// `GET /cluster/status`: whether the node is part of a cluster, and its members.
    ClusterStatus => Get "/cluster/status",
    /// `GET /access/permissions?path=…`: the token's effective privileges on a path.
    Permissions => Get "/access/permissions",
    /// List the roles and their privileges (`bosunctl pve setup`, an administrator's token).
    ListRoles => Get "/access/roles",
    /// Create a role.
    CreateRole => Post "/access/roles",
    /// Change a role's privileges.
    UpdateRole => Put "/access/roles/{roleid}",
    /// List the users and their tokens.
    ListUsers => Get "/access/users",
    /// Create a user.
    CreateUser => Post "/access/users",
    /// Create a user's API token; the answer holds its secret, once.
    CreateToken => Post "/access/users/{userid}/token/{tokenid}",
    /// List the pools.
    ListPools => Get "/pools",
    /// Create a pool.
    CreatePool => Post "/pools",
    /// List the ACL entries.
    ListAcl => Get "/access/acl",
    /// Write or remove an ACL entry.
    UpdateAcl => Put "/access/acl",
    /// List the node's containers.
    ListCts => Get "/nodes/{node}/lxc",
    /// Read a container's config.
    GetConfig => Get "/nodes/{node}/lxc/{vmid}/config",
    /// Change a container's config.
    UpdateConfig => Put "/nodes/{node}/lxc/{vmid}/config",
    /// Read a container's runtime status.
    CtStatus => Get "/nodes/{node}/lxc/{vmid}/status/current",
    /// Read a running container's interfaces and their addresses.
    CtInterfaces => Get "/nodes/{node}/lxc/{vmid}/interfaces",
    /// Start a container.
    StartCt => Post "/nodes/{node}/lxc/{vmid}/status/start",
    /// Stop (kill) a container.
    StopCt => Post "/nodes/{node}/lxc/{vmid}/status/stop",
    /// Shut a container down cleanly.
    ShutdownCt => Post "/nodes/{node}/lxc/{vmid}/status/shutdown",
    /// Create a container by restoring an archive (`restore=1`).
    RestoreCt => Post "/nodes/{node}/lxc",
    /// Restore an archive over an existing, stopped container (`restore=1&force=1`).
    RestoreCtOverwrite => Post "/nodes/{node}/lxc",
    /// Destroy a container.
    DestroyCt => Delete "/nodes/{node}/lxc/{vmid}",
    /// List a container's snapshots.
    ListSnapshots => Get "/nodes/{node}/lxc/{vmid}/snapshot",
    /// Take a snapshot.
    CreateSnapshot => Post "/nodes/{node}/lxc/{vmid}/snapshot",
    /// Delete a snapshot.
    DeleteSnapshot => Delete "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}",
    /// Roll a container back to a snapshot.
    RollbackSnapshot => Post "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}/rollback",
    /// Grow a container's volume.
    ResizeDisk => Put "/nodes/{node}/lxc/{vmid}/resize",
    /// Back guests up.
    Vzdump => Post "/nodes/{node}/vzdump",
    /// Read the guest configuration a backup archive holds (for PBS, decrypted with the
    /// storage's key and checked against the snapshot's signed manifest).
    ExtractConfig => Get "/nodes/{node}/vzdump/extractconfig",
    /// List the node's storages.
    ListStorage => Get "/nodes/{node}/storage",
    /// Read one storage's status.
    StorageStatus => Get "/nodes/{node}/storage/{storage}/status",
    /// Add a storage to the datacenter.
    CreateStorage => Post "/storage",
    /// Read a storage's configuration (secrets are never shown).
    StorageConfig => Get "/storage/{storage}",
    /// Change a storage's configuration.
    UpdateStorage => Put "/storage/{storage}",
    /// Remove a storage's definition (Proxmox keeps the data on the target).
    DeleteStorage => Delete "/storage/{storage}",
    /// List a storage's volumes.
    ListContent => Get "/nodes/{node}/storage/{storage}/content",
    /// Delete a volume.
    DeleteVolume => Delete "/nodes/{node}/storage/{storage}/content/{volume}",
    /// Read one volume's attributes (its path on the node, a backup's notes).
    VolumeAttributes => Get "/nodes/{node}/storage/{storage}/content/{volume}",
    /// Set a backup's notes.
    SetVolumeNotes => Put "/nodes/{node}/storage/{storage}/content/{volume}",
    /// List the node's tasks (to look for a task whose answer was lost).
    ListTasks => Get "/nodes/{node}/tasks",
    /// Read a task's status.
    TaskStatus => Get "/nodes/{node}/tasks/{upid}/status",
    /// Read a task's log.
    TaskLog => Get "/nodes/{node}/tasks/{upid}/log",
    /// Read the node's status (CPU, memory, root filesystem, load).
    NodeStatus => Get "/nodes/{node}/status",
    /// Read a container's own firewall options.
    GetFirewall => Get "/nodes/{node}/lxc/{vmid}/firewall/options",
    /// Turn a container's firewall (and its `ipfilter`) on.
    SetFirewall => Put "/nodes/{node}/lxc/{vmid}/firewall/options",
    /// Read whether the datacenter's firewall is on (`bosunctl pve check`).
    DatacenterFirewall => Get "/cluster/firewall/options",
    /// List the node's disks with their SMART health and wear.
    ListDisks => Get "/nodes/{node}/disks/list",
    /// Read one disk's SMART data.
    DiskSmart => Get "/nodes/{node}/disks/smart",
    /// List the node's LVM thin pools with their data and metadata use.
    ListThinPools => Get "/nodes/{node}/disks/lvmthin",
    /// List the node's ZFS pools with their fill and health.
    ListZfsPools => Get "/nodes/{node}/disks/zfs",
    /// List the node's network interfaces (bridges, NICs, bonds, VLANs).
    ListNetwork => Get "/nodes/{node}/network",
    /// List the node's virtual machines.
    ListVms => Get "/nodes/{node}/qemu",
    /// Create a VM by restoring a vzdump-qemu archive (`archive=`).
    RestoreVm => Post "/nodes/{node}/qemu",
    /// Read a VM's config (pending values merged).
    VmConfig => Get "/nodes/{node}/qemu/{vmid}/config",
    /// Change a VM's config synchronously (cloud-init keys, size, network, options).
    UpdateVmConfig => Put "/nodes/{node}/qemu/{vmid}/config",
    /// Read a VM's runtime status.
    VmStatus => Get "/nodes/{node}/qemu/{vmid}/status/current",
    /// Start a VM.
    StartVm => Post "/nodes/{node}/qemu/{vmid}/status/start",
    /// Stop (kill) a VM.
    StopVm => Post "/nodes/{node}/qemu/{vmid}/status/stop",
    /// Shut a VM down through ACPI or its guest agent.
    ShutdownVm => Post "/nodes/{node}/qemu/{vmid}/status/shutdown",
    /// Destroy a VM.
    DestroyVm => Delete "/nodes/{node}/qemu/{vmid}",
    /// List a VM's snapshots.
    ListVmSnapshots => Get "/nodes/{node}/qemu/{vmid}/snapshot",
    /// Take a VM snapshot.
    CreateVmSnapshot => Post "/nodes/{node}/qemu/{vmid}/snapshot",
    /// Delete a VM snapshot.
    DeleteVmSnapshot => Delete "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}",
    /// Roll a VM back to a snapshot.
    RollbackVmSnapshot => Post "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/rollback",
    /// Ask a VM's guest agent whether it answers.
    AgentPing => Post "/nodes/{node}/qemu/{vmid}/agent/ping",
    /// Freeze a VM's filesystems through its guest agent.
    AgentFsFreeze => Post "/nodes/{node}/qemu/{vmid}/agent/fsfreeze-freeze",
    /// Thaw a VM's filesystems through its guest agent.
    AgentFsThaw => Post "/nodes/{node}/qemu/{vmid}/agent/fsfreeze-thaw",
    /// Whether a VM's filesystems are frozen.
    AgentFsFreezeStatus => Post "/nodes/{node}/qemu/{vmid}/agent/fsfreeze-status",
    /// Start a program inside a VM through its guest agent.
    AgentExec => Post "/nodes/{node}/qemu/{vmid}/agent/exec",
    /// Read a program's state and output (started by `AgentExec`).
    AgentExecStatus => Get "/nodes/{node}/qemu/{vmid}/agent/exec-status",
    /// Write a file inside a VM through its guest agent.
    AgentFileWrite => Post "/nodes/{node}/qemu/{vmid}/agent/file-write",
    /// Read a file inside a VM through its guest agent.
    AgentFileRead => Get "/nodes/{node}/qemu/{vmid}/agent/file-read",
    /// A VM's interfaces and addresses as its guest agent reports them.
    AgentNetworkInterfaces => Get "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces",
    /// A VM's cloud-init values: in use and pending.
    VmCloudinit => Get "/nodes/{node}/qemu/{vmid}/cloudinit",
    /// Regenerate a VM's cloud-init drive from its config.
    RegenerateCloudinit => Put "/nodes/{node}/qemu/{vmid}/cloudinit",
    /// Grow a VM's disk.
    ResizeVmDisk => Put "/nodes/{node}/qemu/{vmid}/resize",
    /// Read a VM's own firewall options.
    GetVmFirewall => Get "/nodes/{node}/qemu/{vmid}/firewall/options",
    /// Turn a VM's firewall (and its `ipfilter`) on.
    SetVmFirewall => Put "/nodes/{node}/qemu/{vmid}/firewall/options",
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.endpoint();
        write!(f, "{:?} ({} {})", self, e.method, e.path)
    }
}
