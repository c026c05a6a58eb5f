//! The initial state of a fresh node: access control with the two tokens, the storages
//! `local` and `local-lvm`, and the golden archive of CT 9000.

use std::collections::BTreeMap;

use crate::acl::{AccessControl, BOSUN_POOL};
use crate::config::FaultConfig;
use crate::files::{FileTree, debian_template};
use crate::guest_exec;
use crate::state::{Archive, Conf, NodeState, Storage, StorageKind, StorageSecrets, Volume};

/// The Debian template seeded on `local` (`vztmpl` content), what `pct create` starts from.
pub const DEBIAN_TEMPLATE: &str = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst";

/// The golden units, as `golden/` ships them; the seeded golden archive carries them.
const GOLDEN_UNITS: [(&str, &str); 4] = [
    (
        "bosun-ssh-hostkeys.service",
        include_str!("../../../golden/bosun-ssh-hostkeys.service"),
    ),
    (
        "bosun-bootstrap.service",
        include_str!("../../../golden/bosun-bootstrap.service"),
    ),
    (
        "bosun-bootstrap-restart.service",
        include_str!("../../../golden/bosun-bootstrap-restart.service"),
    ),
    (
        "bosun-bootstrap.path",
        include_str!("../../../golden/bosun-bootstrap.path"),
    ),
];

/// The golden image's sshd drop-in (keys only, decision 0107) and where the recipe puts it.
const GOLDEN_SSHD_DROP_IN: (&str, &str) = (
    "/etc/ssh/sshd_config.d/bosun.conf",
    include_str!("../../../golden/bosun-sshd.conf"),
);

/// The golden units the recipe enables (the restart service is started by the path unit).
const GOLDEN_ENABLED: [&str; 3] = [
    "bosun-ssh-hostkeys.service",
    "bosun-bootstrap.service",
    "bosun-bootstrap.path",
];
use crate::{SimError, TokenCredential, Tokens};

const GIB: u64 = 1 << 30;

/// Builds the seeded state; returns it with the tokens and the golden archive's volid.
/// The secrets of a node: both token secrets and the admin token. Kept in the data dir so an
/// agent configured with them keeps working across simulator restarts (as PVE's tokens do).
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Secrets {
    pub(crate) agent: String,
    pub(crate) root: String,
    pub(crate) admin: String,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secrets(<redacted>)")
    }
}

const SECRETS_FILE: &str = "secrets.json";

impl Secrets {
    fn generate() -> Self {
        Self {
            agent: uuid::Uuid::new_v4().to_string(),
            root: uuid::Uuid::new_v4().to_string(),
            admin: uuid::Uuid::new_v4().simple().to_string(),
        }
    }

    /// Reads `DIR/secrets.json`, or creates it (mode 0600); fresh secrets without a dir.
    pub(crate) fn load_or_create(dir: Option<&std::path::Path>) -> Result<Self, SimError> {
        let Some(dir) = dir else {
            return Ok(Self::generate());
        };
        let path = dir.join(SECRETS_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| SimError::Config {
                reason: format!("{} is not valid: {e}", path.display()),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let secrets = Self::generate();
                let text = serde_json::to_string(&secrets).map_err(|e| SimError::Config {
                    reason: format!("cannot encode secrets: {e}"),
                })?;
                crate::tls::write_private(&path, &text, 0o600)?;
                Ok(secrets)
            }
            Err(source) => Err(SimError::DataFile { path, source }),
        }
    }
}

pub(crate) fn initial_state(
    faults: FaultConfig,
    secrets: &Secrets,
    version: crate::config::PveVersion,
) -> Result<(NodeState, Tokens, String), SimError> {
    let mut access = AccessControl::for_release(version.is_pve8());
    let agent_secret = secrets.agent.clone();
    let root_secret = secrets.root.clone();
    let cfg_err = |e: crate::AclError| SimError::Config {
        reason: e.to_string(),
    };
    let agent_id = access
        .add_token("bosun@pve", "agent", &agent_secret, true)
        .map_err(cfg_err)?;
    access
        .grant("/", "bosun@pve", "BosunAgent", true)
        .map_err(cfg_err)?;
    access
        .grant("/", &agent_id, "BosunAgent", true)
        .map_err(cfg_err)?;
    // Bosun's pool and the guest-agent reach on it only (decision 0113).
    access.add_pool(BOSUN_POOL);
    for subject in ["bosun@pve", agent_id.as_str()] {
        access
            .grant(&format!("/pool/{BOSUN_POOL}"), subject, "BosunGuest", true)
            .map_err(cfg_err)?;
    }
    let root_id = access
        .add_token("root@pam", "bosun-sim", &root_secret, false)
        .map_err(cfg_err)?;

    let now = jiff::Zoned::now();
    let golden_name = format!(
        "vzdump-lxc-9000-{}.tar.zst",
        now.strftime("%Y_%m_%d-%H_%M_%S")
    );
    let golden_volid = format!("local:backup/{golden_name}");
    let golden = Volume {
        volid: golden_volid.clone(),
        content: "backup".to_owned(),
        format: "tar.zst".to_owned(),
        size: 187_654_321,
        ctime: now.timestamp().as_second(),
        vmid: Some(9000),
        notes: Some("bosun golden image".to_owned()),
        protected: false,
        encrypted: None,
        archive: Some(Archive::new(golden_conf(), golden_files())),
    };
    let template = Volume {
        volid: DEBIAN_TEMPLATE.to_owned(),
        content: "vztmpl".to_owned(),
        format: "tzst".to_owned(),
        size: 126_847_018,
        ctime: now.timestamp().as_second() - 86_400 * 30,
        vmid: None,
        notes: None,
        protected: false,
        encrypted: None,
        archive: Some(Archive::new(Conf::new(), debian_template())),
    };

    let mut storages = BTreeMap::new();
    storages.insert(
        "local".to_owned(),
        Storage {
            kind: StorageKind::Dir {
                path: "/var/lib/vz".to_owned(),
            },
            content: ["backup", "iso", "vztmpl"]
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            enabled: true,
            shared: false,
            total: 100 * GIB,
            prune_backups: None,
            volumes: vec![golden, template],
            options: BTreeMap::new(),
            secrets: StorageSecrets::default(),
        },
    );
    storages.insert(
        "local-lvm".to_owned(),
        Storage {
            kind: StorageKind::LvmThin {
                vgname: "pve".to_owned(),
                thinpool: "data".to_owned(),
            },
            content: ["images", "rootdir"]
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            enabled: true,
            shared: false,
            total: 400 * GIB,
            prune_backups: None,
            volumes: Vec::new(),
            options: BTreeMap::new(),
            secrets: StorageSecrets::default(),
        },
    );

    let state = NodeState {
        access,
        guests: BTreeMap::new(),
        vms: BTreeMap::new(),
        storages,
        tasks: Vec::new(),
        faults,
        requests: Vec::new(),
        next_pid: 0x0003_A000,
        cli_faults: Vec::new(),
        remotes: crate::remotes::Remotes::default(),
        left_on_targets: BTreeMap::new(),
        files_root: None,
        datacenter_firewall: false,
        cluster: None,
    };
    let tokens = Tokens {
        agent: TokenCredential {
            id: agent_id,
            secret: agent_secret,
        },
        root: TokenCredential {
            id: root_id,
            secret: root_secret,
        },
    };
    Ok((state, tokens, golden_volid))
}

/// The config recorded in the golden archive (`./etc/vzdump/pct.conf`).
pub(crate) fn golden_conf() -> Conf {
    [
        ("arch", "amd64"),
        ("cores", "2"),
        ("features", "keyctl=1,nesting=1"),
        ("hostname", "golden"),
        ("memory", "1024"),
        (
            "net0",
            "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:5E:A1:07,ip=dhcp,type=veth",
        ),
        ("ostype", "debian"),
        ("rootfs", "local-lvm:vm-9000-disk-0,size=8G"),
        ("swap", "512"),
        ("unprivileged", "1"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect()
}

/// The stamp key of the simulated host's helper: the seeded golden archive carries an unbound
/// guest stamp made with it (decision 0048), as one `build_golden` made on the host would; a
/// test gives its helper this key to enter the guests made from that image.
pub const SIM_GUEST_STAMP_KEY: [u8; 32] = *b"bosun-pvesim-guest-stamp-key-32b";

/// The root filesystem of the seeded golden archive: the Debian template after Bosun's golden
/// recipe (`golden/README.md`), produced by the same simulated programs a built one goes
/// through, with `/etc/bosun-bootstrap` private (0700) for the bootstrap document and the
/// host's unbound guest stamp.
pub(crate) fn golden_files() -> FileTree {
    let mut tree = debian_template();
    let apt = "/usr/bin/env DEBIAN_FRONTEND=noninteractive /usr/bin/apt-get";
    let steps = [
        format!("{apt} update"),
        format!(
            "{apt} install -y --no-install-recommends docker.io openssh-server ca-certificates"
        ),
        "/usr/bin/mkdir -p -m 0700 /etc/bosun-bootstrap".to_owned(),
    ];
    for line in &steps {
        run_seed_step(&mut tree, line);
    }
    let _ = tree.write(
        "/etc/bosun-bootstrap/controller-image.tar",
        b"controller image archive".to_vec(),
        0o600,
    );
    for line in [
        "/usr/bin/docker load --input /etc/bosun-bootstrap/controller-image.tar",
        "/usr/bin/docker tag registry.example/bosun/controller:seed bosun/controller:golden",
    ] {
        run_seed_step(&mut tree, line);
    }
    let stamp = bosun_proto::helper::stamp::GuestStamp::sign(&SIM_GUEST_STAMP_KEY, None, [7; 16]);
    let stamp_path = bosun_proto::helper::stamp::GUEST_STAMP_PATH;
    let _ = tree.write(stamp_path, stamp.line().into_bytes(), 0o600);
    for (name, text) in GOLDEN_UNITS {
        let _ = tree.write(
            &format!("/etc/systemd/system/{name}"),
            text.as_bytes().to_vec(),
            0o644,
        );
    }
    let (drop_in, text) = GOLDEN_SSHD_DROP_IN;
    let _ = tree.write(drop_in, text.as_bytes().to_vec(), 0o644);
    for line in [
        format!(
            "/usr/bin/systemctl enable docker.service {}",
            GOLDEN_ENABLED.join(" ")
        ),
        "/usr/bin/find /etc/ssh -maxdepth 1 -name ssh_host_* -delete".to_owned(),
        "/usr/bin/truncate -s 0 /etc/machine-id".to_owned(),
    ] {
        run_seed_step(&mut tree, &line);
    }
    tree
}

fn run_seed_step(tree: &mut FileTree, line: &str) {
    let argv: Vec<String> = line.split(' ').map(str::to_owned).collect();
    let outcome = guest_exec::run(tree, &argv);
    if outcome.exit != 0 {
        tracing::error!(step = line, stderr = %outcome.stderr, "seeding the golden archive failed");
    }
}

/// The bytes of the seeded golden archive as a file: the simulator keeps archives as
/// descriptions, so its golden "tar.zst" on disk is this fixed stand-in, hashed like a real
/// one by whatever reads it.
pub const GOLDEN_ARCHIVE_BYTES: &[u8] =
    b"bosun-pvesim golden archive v1: debian 12, bosun controller, first-boot key regeneration\n";

/// SHA-256 of [`GOLDEN_ARCHIVE_BYTES`], lowercase hex.
pub fn golden_sha256() -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(GOLDEN_ARCHIVE_BYTES))
}

/// The bytes of the VM golden archive as a file ([`GOLDEN_ARCHIVE_BYTES`]' counterpart for the
/// `vma.zst` of `SimConfig::vm_golden`).
pub const VM_GOLDEN_ARCHIVE_BYTES: &[u8] =
    b"bosun-pvesim golden vm archive v1: debian 12 cloud image, cloud-init, qemu-guest-agent\n";

/// SHA-256 of [`VM_GOLDEN_ARCHIVE_BYTES`], lowercase hex.
pub fn vm_golden_sha256() -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(VM_GOLDEN_ARCHIVE_BYTES))
}

/// Writes the golden archive's file as `DIR/dump/<name>` (PVE's `local` dump directory
/// layout), replacing what an earlier run left.
pub(crate) fn write_golden_file(dir: &std::path::Path, volid: &str) -> Result<(), SimError> {
    write_dump_file(dir, volid, GOLDEN_ARCHIVE_BYTES)
}

/// Writes the VM golden archive's file as `DIR/dump/<name>`, as [`write_golden_file`] does.
pub(crate) fn write_vm_golden_file(dir: &std::path::Path, volid: &str) -> Result<(), SimError> {
    write_dump_file(dir, volid, VM_GOLDEN_ARCHIVE_BYTES)
}

fn write_dump_file(dir: &std::path::Path, volid: &str, bytes: &[u8]) -> Result<(), SimError> {
    let name = volid.rsplit('/').next().unwrap_or(volid);
    let dump = dir.join("dump");
    let io = |source: std::io::Error| SimError::Config {
        reason: format!(
            "writing the golden archive under {}: {source}",
            dump.display()
        ),
    };
    std::fs::create_dir_all(&dump).map_err(io)?;
    std::fs::write(dump.join(name), bytes).map_err(io)
}
