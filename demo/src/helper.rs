//! The demo's `bosun-helper`: the shipped binary under a root-owned private prefix
//! (`docs/decisions/0006-helper-fixed-roots.md`) whose `programs.pct` is `bosun-pvesim-pct`
//! (so `pct push` of a bootstrap lands in the simulated guest's files),
//! reached the way the helper's socket units reach it: `systemd-socket-activate --inetd -a`,
//! one helper per connection, one socket per unit (decision 0071), each owned by root and the
//! agent's group, mode 0660.
//!
//! Only when the demo runs as root: the helper refuses a prefix it does not own, and the
//! agent it serves must be another user.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bosun_proto::helper::HelperUnit;

use super::DemoError;
use super::children::{Children, RunAs, Site};
use super::sim::SimEndpoint;
use super::stack::{program, write};

/// A running helper install.
#[derive(Debug, Clone)]
pub struct HelperInstall {
    /// The prefix (removed when the demo ends).
    pub prefix: PathBuf,
    /// The socket the agent connects to.
    pub socket: PathBuf,
}

fn artifact(path: &Path) -> impl FnOnce(std::io::Error) -> DemoError + '_ {
    move |source| DemoError::Artifact {
        path: path.to_owned(),
        source,
    }
}

/// The key `bosun-pvesim` stamps its golden archive with (`bosun_pvesim::SIM_GUEST_STAMP_KEY`).
const SIM_GUEST_STAMP_KEY: &[u8; 32] = b"bosun-pvesim-guest-stamp-key-32b";

fn dir_0755(path: &Path) -> Result<(), DemoError> {
    std::fs::create_dir_all(path).map_err(artifact(path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).map_err(artifact(path))
}

fn copy_program(from: &Path, to: &Path) -> Result<(), DemoError> {
    std::fs::copy(from, to).map_err(artifact(to))?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).map_err(artifact(to))
}

/// The bytes of the demo's controller image archive (the `docker save` file a host's
/// helper bakes into its golden image; the simulated guest's `docker load` takes any bytes).
pub const CONTROLLER_IMAGE_BYTES: &[u8] =
    b"bosun demo controller image, as docker save would write it\n";

/// The golden image's inputs as the package installs them: the units of `golden/` (read from
/// this source tree, which `make demo` runs in) and the controller image archive, root-only.
/// Gives the units' directory and the archive.
fn golden_inputs(prefix: &Path) -> Result<(PathBuf, PathBuf), DemoError> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../golden");
    let golden_dir = prefix.join("usr/share/bosun/golden");
    dir_0755(&golden_dir)?;
    for unit in bosun_proto::helper::recipe::golden_inputs() {
        let from = source.join(unit);
        let to = golden_dir.join(unit);
        std::fs::copy(&from, &to).map_err(artifact(&from))?;
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o644))
            .map_err(artifact(&to))?;
    }
    let images = prefix.join("var/lib/bosun-helper/golden");
    std::fs::create_dir_all(&images).map_err(artifact(&images))?;
    std::fs::set_permissions(&images, std::fs::Permissions::from_mode(0o700))
        .map_err(artifact(&images))?;
    let archive = images.join("controller-image.tar");
    std::fs::write(&archive, CONTROLLER_IMAGE_BYTES).map_err(artifact(&archive))?;
    Ok((golden_dir, archive))
}

/// The node's golden storage: the agent's `[golden] storage`.
pub const GOLDEN_STORAGE: &str = "golden";

/// Adds the directory storage [`GOLDEN_STORAGE`] to the simulated node (`POST /storage`),
/// its path beneath the simulator's archive directory; gives the path.
async fn golden_storage(sim: &SimEndpoint) -> Result<PathBuf, DemoError> {
    use bosun_pve::{ContentType, Pve as _, StorageCreate, StorageId, StorageKind};
    let path = sim.archives.join(GOLDEN_STORAGE);
    dir_0755(&path)?;
    let storage = StorageId::new(GOLDEN_STORAGE.to_owned())
        .map_err(|e| DemoError::Check(format!("storage id {GOLDEN_STORAGE}: {e}")))?;
    let request = StorageCreate {
        storage,
        kind: StorageKind::Dir {
            path: path.display().to_string(),
            content: vec![ContentType::Backup],
            is_mountpoint: false,
        },
    };
    super::sim::pve_client(sim)?
        .create_storage(&request)
        .await
        .map_err(|source| DemoError::Pve {
            what: "adding the golden storage",
            source,
        })?;
    Ok(path)
}

/// The helper install's prefix for `site`, in the system's temporary directory.
pub fn prefix_of(site: Site) -> PathBuf {
    std::env::temp_dir().join(site.name(&format!("bosun-demo-helper-{}", std::process::id())))
}

/// Installs the helper of `site`'s box for `agent_user` under a fresh root-owned prefix in
/// the system's temporary directory, its `pct` reaching `sim`, and starts its socket server
/// as a child named `bosun-helper[-site]`.
pub async fn start(
    children: &mut Children,
    (bins, out): (&Path, &Path),
    site: Site,
    sim: &SimEndpoint,
    agent_user: &str,
    run_as: RunAs,
) -> Result<HelperInstall, DemoError> {
    let prefix = prefix_of(site);
    if prefix.exists() {
        std::fs::remove_dir_all(&prefix).map_err(artifact(&prefix))?;
    }
    let libexec = prefix.join("usr/libexec/bosun");
    let bin = prefix.join("bin");
    for dir in [
        prefix.clone(),
        libexec.clone(),
        prefix.join("etc/bosun"),
        prefix.join("mnt"),
        // The helper makes its staging directory (0700) itself, under an existing /run.
        prefix.join("run"),
        bin.clone(),
    ] {
        dir_0755(&dir)?;
    }
    let helper = libexec.join("bosun-helper");
    copy_program(&program(bins, "bosun-helper")?, &helper)?;
    let pct = bin.join("pct");
    copy_program(&program(bins, "bosun-pvesim-pct")?, &pct)?;
    // bosun-pvesim-pct finds the simulator beside itself (the helper clears the environment).
    let beside = bin.join("pct.endpoint.json");
    let sim_endpoint = sim.data.join("endpoint.json");
    std::fs::copy(&sim_endpoint, &beside).map_err(artifact(&beside))?;
    std::fs::set_permissions(&beside, std::fs::Permissions::from_mode(0o600))
        .map_err(artifact(&beside))?;
    // The simulator's golden archive in the helper's dump directory, as vzdump leaves it on
    // a real host: the helper hashes it before a guest is provisioned from it.
    // The dump directory of the node's golden storage, a directory storage whose files the
    // simulator writes where its path says: vzdump writes the golden images the helper
    // builds there, and the helper hashes them by the path vzdump's log names.
    let dump_root = golden_storage(sim).await?.join("dump");
    dir_0755(&dump_root)?;
    // The VM golden base beside it, when the node holds one.
    for golden_file in std::iter::once(sim.golden_file()).chain(sim.vm_golden_file()) {
        let name = golden_file.file_name().ok_or_else(|| {
            DemoError::Check(format!("no file name in {}", golden_file.display()))
        })?;
        let dumped = dump_root.join(name);
        std::fs::copy(&golden_file, &dumped).map_err(artifact(&dumped))?;
        std::fs::set_permissions(&dumped, std::fs::Permissions::from_mode(0o644))
            .map_err(artifact(&dumped))?;
    }
    // The agent's A/B slots (decision 0018): slot a holds this build's agent, `current`
    // names it; the agent downloads an update into its own state directory.
    let slots = prefix.join("slots");
    dir_0755(&slots.join("a"))?;
    copy_program(
        &program(bins, "bosun-agentd")?,
        &slots.join("a/bosun-agentd"),
    )?;
    std::os::unix::fs::symlink("a", slots.join("current")).map_err(artifact(&slots))?;
    let inbox = out
        .join(site.name("agent"))
        .join("state/update/incoming/bosun-agentd");
    let inbox = std::path::absolute(&inbox).map_err(artifact(&inbox))?;
    // The simulator's golden archive carries the guest stamp its seed signed (decision 0048):
    // this box's helper holds the key that stamp was made with, as a box whose helper built
    // its golden image does. Both demo boxes share it; a real replacement box has a key of its
    // own and its operator lists the restored guests in the adoption file.
    let stamp_key = prefix.join("var/lib/bosun-helper/guest-stamp.key");
    dir_0755(stamp_key.parent().unwrap_or(&prefix))?;
    {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&stamp_key)
            .map_err(artifact(&stamp_key))?;
        file.write_all(SIM_GUEST_STAMP_KEY)
            .map_err(artifact(&stamp_key))?;
    }
    let (golden_dir, image_archive) = golden_inputs(&prefix)?;
    let vzdump = bin.join("vzdump");
    copy_program(&program(bins, "bosun-pvesim-vzdump")?, &vzdump)?;
    let beside = bin.join("vzdump.endpoint.json");
    std::fs::copy(&sim_endpoint, &beside).map_err(artifact(&beside))?;
    std::fs::set_permissions(&beside, std::fs::Permissions::from_mode(0o600))
        .map_err(artifact(&beside))?;
    let config = serde_json::json!({
        "agent_user": agent_user,
        "dump_root": dump_root,
        "golden_dir": golden_dir,
        "controller_image_archive": image_archive,
        "backup_roots": [&sim.archives],
        "mount_root": prefix.join("mnt"),
        "staging_root": prefix.join("run/bosun-helper"),
        // Never the machine's own /etc/bosun/break-glass.
        "break_glass_root": prefix.join("etc/bosun/break-glass"),
        "slots_root": slots,
        "update_inbox": inbox,
        "programs": { "pct": pct, "vzdump": vzdump },
        "guest_key": stamp_key,
        "adopt_file": prefix.join("etc/bosun/adopt-guests"),
    });
    let config_path = prefix.join("etc/bosun/helper.json");
    write(&config_path, &config.to_string())?;
    std::fs::set_permissions(&config_path, std::fs::Permissions::from_mode(0o644))
        .map_err(artifact(&config_path))?;

    // One socket per helper unit, side by side, as the packaged socket units (decision 0071):
    // the agent picks the socket by verb, and each helper serves only its unit's verbs.
    for unit in HelperUnit::ALL {
        let socket = prefix.join(unit.socket_file());
        let label = site.name(&unit.unit_name()["bosun-".len()..]);
        children.spawn(
            &format!("bosun-{label}"),
            Path::new("systemd-socket-activate"),
            &[
                "--inetd",
                "-a",
                "-l",
                &socket.display().to_string(),
                &helper.display().to_string(),
                unit.socket_arg(),
            ],
            &out.join(format!("logs/{label}.log")),
            None,
        )?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            children.check_alive()?;
            if Instant::now() > deadline {
                return Err(DemoError::Check(format!(
                    "systemd-socket-activate never created {}",
                    socket.display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // As the socket units: owner root, the agent's group, mode 0660.
        std::os::unix::fs::chown(&socket, Some(0), Some(run_as.gid)).map_err(artifact(&socket))?;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o660))
            .map_err(artifact(&socket))?;
    }
    let socket = prefix.join(HelperUnit::Host.socket_file());
    Ok(HelperInstall { prefix, socket })
}
