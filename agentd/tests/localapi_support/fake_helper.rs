//! A helper with behaviour, not root: it answers the real wire protocol on a unix socket
//! (one JSON request line in, one response line out, like `bosun-helper.socket`), "pushes"
//! `bootstrap.json` (0600) into a per-guest file tree under a temp root (what `pct push`
//! does inside the container), hashes the archives it was given (`hash_archive`, as the
//! real helper reads `<dump_root>/<name>`) and records what it was asked. Mounts by UUID
//! and unmounts are real: it runs the helper's own verbs under a temp mount root (root
//! only; otherwise it answers that it cannot). So are the break-glass verbs, beneath a
//! temp `break_glass_root` (root-controlled when the tests run as root, as `make test`
//! does). `build_golden` answers the build it was given ([`FakeHelper::golden_build`]).
//! `reset_guest_identity`, `restore_check`, `bulk_archive`, `bulk_restore` and a rollout's `restart_controller`
//! (with a digest to place, from [`FakeHelper::controller_image`]) are the real verbs (the last
//! beneath [`FakeHelper::backup_roots`]), run with the `pct` a test
//! gives ([`FakeHelper::pct`]: the simulator's stand-in, so its `pct exec` acts on the
//! simulated guest's files; [`FakeHelper::use_sim_pct`]).
//!
//! Like the packaged units (decision 0071) it listens on one socket per helper unit, side by
//! side (`helper.sock`, `helper-guest.sock`, `helper-golden.sock`), and refuses a verb that
//! arrives at another unit's socket, as the real helper does: an agent that picks the wrong
//! socket fails here as it would on a host.

#![allow(clippy::unwrap_used, reason = "test harness: a panic is a failed test")]

use std::collections::HashMap;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bosun_proto::helper::{
    BulkArchive, BulkRestore, HelperUnit, Output, Refusal, Request, ResetGuestIdentity, Response,
    RestartController, RestoreCheck,
};
use parking_lot::Mutex;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;

#[derive(Debug, Clone)]
pub struct FakeHelper {
    pub socket: PathBuf,
    pub root: PathBuf,
    pub calls: Arc<Mutex<Vec<Request>>>,
    pub fail_writes: Arc<AtomicBool>,
    /// The dump directory's archives: file name → the bytes' SHA-256.
    pub archives: Arc<Mutex<HashMap<String, String>>>,
    /// Where `hash_archive` with a dump directory reads backup archives for real (the real
    /// helper's `backup_roots`): the simulator's files and the system's temporary directory
    /// (local directory targets of tests).
    pub backup_roots: Arc<Mutex<Vec<PathBuf>>>,
    /// Where storage targets are mounted (`<mount_root>/<target_id>`).
    pub mount_root: PathBuf,
    /// The real helper's `sysfs_root`: a tree of the test's own
    /// ([`FakeHelper::mark_usb_disk`]).
    pub sysfs_root: PathBuf,
    /// What `smart_status` answers per disk: smartctl's JSON and exit status, or the helper's
    /// failure message; a disk not listed is not a block device here.
    pub smart: Arc<Mutex<HashMap<String, SmartAnswer>>>,
    /// The real helper's `break_glass_root` (its verbs run for real beneath it).
    pub break_glass_root: PathBuf,
    /// What `build_golden` "builds": the archive path, its SHA-256 and size; `None` fails.
    pub golden_build: Arc<Mutex<Option<(String, String, u64)>>>,
    /// `stage_agent_update` runs the real helper's verb against these (slots root, inbox),
    /// as the agent's own user; without them it is refused.
    pub update: Arc<Mutex<Option<(PathBuf, PathBuf)>>>,
    /// The `pct` the real `reset_guest_identity` runs; without one it fails as a helper
    /// whose `pct` cannot run.
    pub pct: Arc<Mutex<Option<PathBuf>>>,
    /// The controller image archive a rollout's `restart_controller` places (the real
    /// helper's `controller_image_archive`); without one it reads the default path.
    pub controller_image: Arc<Mutex<Option<PathBuf>>>,
    /// How many answers to a rollout's placement (`restart_controller` naming an image) are
    /// lost: the verb runs, then the connection closes without an answer.
    pub lose_placements: Arc<std::sync::atomic::AtomicUsize>,
}

/// What `smart_status` answers: smartctl's JSON and exit status, or the helper's failure.
pub type SmartAnswer = Result<(serde_json::Value, i32), String>;

impl FakeHelper {
    pub fn start(dir: &Path) -> Self {
        let socket = dir.join("helper.sock");
        let root = dir.join("guests");
        std::fs::create_dir_all(&root).unwrap();
        let mount_root = dir.join("mnt");
        std::fs::create_dir_all(&mount_root).unwrap();
        let sysfs_root = dir.join("sys");
        std::fs::create_dir_all(sysfs_root.join("dev/block")).unwrap();
        let break_glass_root = dir.join("break-glass");
        let helper = Self {
            socket,
            root,
            calls: Arc::default(),
            fail_writes: Arc::default(),
            archives: Arc::default(),
            backup_roots: Arc::new(Mutex::new(vec![std::env::temp_dir()])),
            mount_root,
            sysfs_root,
            smart: Arc::default(),
            break_glass_root,
            golden_build: Arc::default(),
            update: Arc::default(),
            pct: Arc::default(),
            controller_image: Arc::default(),
            lose_placements: Arc::default(),
        };
        for unit in HelperUnit::ALL {
            let path = dir.join(unit.socket_file());
            let listener = UnixListener::bind(&path).expect("bind the helper socket");
            tokio::spawn(helper.clone().serve(listener, unit));
        }
        helper
    }

    /// Answers every connection to `unit`'s socket.
    async fn serve(self, listener: UnixListener, unit: HelperUnit) {
        while let Ok((stream, _)) = listener.accept().await {
            let server = self.clone();
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut line = String::new();
                if BufReader::new(read).read_line(&mut line).await.is_err() {
                    return;
                }
                // A verb that runs a program waits for it, as the real helper does.
                let placing = line.contains("\"restart_controller\"") && line.contains("\"image\"");
                let lost = placing
                    && server
                        .lose_placements
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok();
                let Ok(response) =
                    tokio::task::spawn_blocking(move || server.answer_at(unit, &line)).await
                else {
                    return;
                };
                if lost {
                    let _ = write.shutdown().await;
                    return;
                }
                let mut out = serde_json::to_vec(&response).unwrap();
                out.push(b'\n');
                let _ = write.write_all(&out).await;
                let _ = write.shutdown().await;
            });
        }
    }

    /// Makes the block device `device` a removable disk with `serial` in
    /// [`FakeHelper::sysfs_root`], as a USB stick's sysfs entry is (a loop device is not).
    pub fn mark_usb_disk(&self, device: &str, serial: &str) {
        use std::os::unix::fs::MetadataExt;
        let rdev = std::fs::metadata(device).unwrap().rdev();
        let entry = self.sysfs_root.join("dev/block").join(format!(
            "{}:{}",
            rustix::fs::major(rdev),
            rustix::fs::minor(rdev)
        ));
        std::fs::create_dir_all(entry.join("device")).unwrap();
        std::fs::write(entry.join("removable"), "1\n").unwrap();
        std::fs::write(entry.join("device/serial"), format!("{serial}\n")).unwrap();
    }

    pub fn bootstrap_path(&self, vmid: u32) -> PathBuf {
        self.root
            .join(vmid.to_string())
            .join(bosun_proto::helper::GUEST_BOOTSTRAP_PATH.trim_start_matches('/'))
    }

    pub fn read_bootstrap(&self, vmid: u32) -> bosun_proto::bootstrap::Bootstrap {
        let text = std::fs::read_to_string(self.bootstrap_path(vmid)).expect("bootstrap written");
        serde_json::from_str(&text).expect("bootstrap parses")
    }

    /// Puts an archive named like the last part of `volid` with `sha256` in the dump
    /// directory (a changed file is the same call with another hash).
    pub fn set_archive(&self, volid: &str, sha256: &str) {
        let name = volid.rsplit('/').next().unwrap_or(volid).to_owned();
        self.archives.lock().insert(name, sha256.to_owned());
    }

    /// The vmids `reset_guest_identity` was asked for, in order.
    pub fn identity_resets(&self) -> Vec<u32> {
        self.calls
            .lock()
            .iter()
            .filter_map(|r| match r {
                Request::ResetGuestIdentity(args) => Some(args.vmid.get()),
                _ => None,
            })
            .collect()
    }

    /// The vmids `restore_check` was asked for, in order.
    pub fn restore_checks(&self) -> Vec<u32> {
        self.calls
            .lock()
            .iter()
            .filter_map(|r| match r {
                Request::RestoreCheck(args) => Some(args.vmid.get()),
                _ => None,
            })
            .collect()
    }

    /// Gives the real verbs that run `pct` the simulator's stand-in (`bosun-pvesim-pct`, built
    /// with the workspace's binaries), copied into `dir` beside the endpoint file it reads.
    pub fn use_sim_pct(&self, dir: &Path, sim: &bosun_pvesim::SimHandle) {
        let exe = std::env::current_exe().unwrap();
        let built = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("the test runs from target/<profile>/deps")
            .join("bosun-pvesim-pct");
        assert!(
            built.is_file(),
            "{} is missing: build the workspace's binaries first (`cargo build --workspace --bins`)",
            built.display()
        );
        let pct = dir.join("pct");
        std::fs::copy(&built, &pct).unwrap();
        let beside = dir.join("pct.endpoint.json");
        std::fs::write(&beside, serde_json::to_vec(sim.endpoint()).unwrap()).unwrap();
        std::fs::set_permissions(&beside, std::fs::Permissions::from_mode(0o600)).unwrap();
        *self.pct.lock() = Some(pct);
    }

    /// The vmids an in-place `restart_controller` (no image to place) was asked for, in order.
    pub fn controller_restarts(&self) -> Vec<u32> {
        self.calls
            .lock()
            .iter()
            .filter_map(|r| match r {
                Request::RestartController(args) if args.image.is_none() => Some(args.vmid.get()),
                _ => None,
            })
            .collect()
    }

    /// What `smart_status` of `device` answers from now on.
    pub fn set_smart(&self, device: &str, answer: SmartAnswer) {
        self.smart.lock().insert(device.to_owned(), answer);
    }

    /// The break-glass account's `authorized_keys`, if a door is open.
    pub fn break_glass_keys(&self) -> Option<String> {
        std::fs::read_to_string(self.break_glass_root.join("authorized_keys")).ok()
    }

    pub fn verbs(&self) -> Vec<&'static str> {
        self.calls
            .lock()
            .iter()
            .map(|r| r.verb().as_str())
            .collect()
    }

    /// [`FakeHelper::answer`] for a verb of `unit`; any other verb is refused, as the real
    /// helper refuses it.
    fn answer_at(&self, unit: HelperUnit, line: &str) -> Response {
        if let Ok(request) = serde_json::from_str::<Request>(line)
            && HelperUnit::of(request.verb()) != unit
        {
            return Response::Refused {
                reason: Refusal::Malformed,
                message: format!(
                    "verb {} does not run under {}@.service",
                    request.verb(),
                    unit.unit_name()
                ),
            };
        }
        self.answer(line)
    }

    fn answer(&self, line: &str) -> Response {
        let request: Request = match serde_json::from_str(line) {
            Ok(r) => r,
            Err(e) => {
                return Response::Refused {
                    reason: Refusal::Malformed,
                    message: e.to_string(),
                };
            }
        };
        self.calls.lock().push(request.clone());
        match request {
            Request::PushBootstrap(args) => {
                if self.fail_writes.load(Ordering::SeqCst) {
                    return Response::Failed {
                        message: format!(
                            "/usr/sbin/pct [\"push\", \"{}\", ...] exited with exit status: 1: can only push files to a running CT",
                            args.vmid
                        ),
                    };
                }
                let file = self.bootstrap_path(args.vmid.get());
                let dir = file.parent().unwrap();
                std::fs::create_dir_all(dir).unwrap();
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
                // pct push truncates an existing file and sets its mode again.
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&file)
                    .unwrap();
                std::io::Write::write_all(&mut f, args.document.expose_bytes()).unwrap();
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
                Response::Ok {
                    output: Output::BootstrapPushed {
                        vmid: args.vmid,
                        destination: bosun_proto::helper::GUEST_BOOTSTRAP_PATH.to_owned(),
                    },
                }
            }
            // A backup archive in a dump directory: the real verb reads the file, beneath the
            // backup roots the test gave (the simulator's files, the test's directories).
            Request::HashArchive(ref args) if args.dir.is_some() => {
                let config = bosun_helper::config::Config {
                    backup_roots: self.backup_roots.lock().clone(),
                    ..bosun_helper::config::Config::default()
                };
                match bosun_helper::verbs::act(&request, &config) {
                    Ok(output) => Response::Ok { output },
                    Err(e) => e.to_response(),
                }
            }
            Request::HashArchive(args) => {
                let name = args.archive.as_str().to_owned();
                match self.archives.lock().get(&name) {
                    Some(sha256) => Response::Ok {
                        output: Output::ArchiveHashed {
                            archive: format!("/var/lib/vz/dump/{name}"),
                            sha256: sha256.clone(),
                            size: 1,
                        },
                    },
                    None => Response::Failed {
                        message: format!(
                            "reading /var/lib/vz/dump/{name}: No such file or directory (os error 2)"
                        ),
                    },
                }
            }
            Request::MountByUuid(_) | Request::Unmount(_) => {
                if !rustix::process::geteuid().is_root() {
                    return Response::Failed {
                        message: "mounting needs root".into(),
                    };
                }
                let config = bosun_helper::config::Config {
                    mount_root: self.mount_root.clone(),
                    sysfs_root: self.sysfs_root.clone(),
                    ..bosun_helper::config::Config::default()
                };
                match bosun_helper::verbs::act(&request, &config) {
                    Ok(output) => Response::Ok { output },
                    Err(e) => e.to_response(),
                }
            }
            // `pct exec <vmid> -- systemctl restart …`: the test, standing in for the guest's
            // systemd, sees the call in `calls` and restarts its controller.
            Request::RestartController(ref args) if args.image.is_none() => Response::Ok {
                output: Output::ControllerRestarted {
                    vmid: args.vmid,
                    unit: bosun_proto::helper::CONTROLLER_UNIT.to_owned(),
                    measured: None,
                },
            },
            // A rollout's placement without the simulator's `pct`: placed as asked, and the
            // test's own controller loop switches itself.
            Request::RestartController(RestartController {
                vmid,
                image: Some(ref image),
            }) if self.pct.lock().is_none() => Response::Ok {
                output: Output::ControllerRestarted {
                    vmid,
                    unit: bosun_proto::helper::CONTROLLER_UNIT.to_owned(),
                    measured: Some(format!("sha256:{image}")),
                },
            },
            // A rollout's placement: the real verb, with the test's controller image archive.
            Request::RestartController(RestartController { ref vmid, .. })
            | Request::ResetGuestIdentity(ResetGuestIdentity { ref vmid })
            | Request::RestoreCheck(RestoreCheck { ref vmid, .. })
            | Request::BulkArchive(BulkArchive { ref vmid, .. })
            | Request::BulkRestore(BulkRestore { ref vmid, .. }) => {
                let Some(pct) = self.pct.lock().clone() else {
                    return Response::Failed {
                        message: format!(
                            "spawning /usr/sbin/pct [\"exec\", \"{vmid}\", ...]: No such file or directory (os error 2)",
                        ),
                    };
                };
                // The simulated host's stamp key: guests made from its golden image carry
                // its stamp (decision 0048).
                let dir = self.root.parent().unwrap();
                let guest_key = dir.join("guest-stamp.key");
                if !guest_key.exists() {
                    std::fs::write(&guest_key, bosun_pvesim::SIM_GUEST_STAMP_KEY).unwrap();
                    std::fs::set_permissions(&guest_key, std::fs::Permissions::from_mode(0o600))
                        .unwrap();
                }
                let config = bosun_helper::config::Config {
                    programs: bosun_helper::config::Programs {
                        pct,
                        ..bosun_helper::config::Programs::default()
                    },
                    guest_key,
                    adopt_file: dir.join("adopt-guests"),
                    staging_root: dir.join("staging"),
                    backup_roots: self.backup_roots.lock().clone(),
                    controller_image_archive: self.controller_image.lock().clone().unwrap_or_else(
                        || bosun_helper::config::Config::default().controller_image_archive,
                    ),
                    ..bosun_helper::config::Config::default()
                };
                match bosun_helper::verbs::act(&request, &config) {
                    Ok(output) => Response::Ok { output },
                    Err(e) => e.to_response(),
                }
            }
            Request::SmartStatus(args) => {
                let device = args.device.as_str().to_owned();
                match self.smart.lock().get(&device).cloned() {
                    Some(Ok((report, exit_status))) => Response::Ok {
                        output: Output::Smart {
                            device,
                            report,
                            exit_status,
                        },
                    },
                    Some(Err(message)) => Response::Failed { message },
                    None => Response::Failed {
                        message: format!("block device {device} not found"),
                    },
                }
            }
            Request::BreakGlassOpen(_) | Request::BreakGlassClose(_) => {
                // The real verbs, beneath a root of this test's own.
                let config = bosun_helper::config::Config {
                    break_glass_root: self.break_glass_root.clone(),
                    ..bosun_helper::config::Config::default()
                };
                match bosun_helper::verbs::act(&request, &config) {
                    Ok(output) => Response::Ok { output },
                    Err(e) => e.to_response(),
                }
            }
            Request::StageAgentUpdate(_) if self.update.lock().is_some() => {
                let (slots_root, update_inbox) = self.update.lock().clone().unwrap();
                let user = std::fs::read_to_string("/etc/passwd")
                    .unwrap()
                    .lines()
                    .find_map(|l| {
                        let f: Vec<&str> = l.split(':').collect();
                        (f.get(2)
                            == Some(&rustix::process::geteuid().as_raw().to_string().as_str()))
                        .then(|| f[0].to_owned())
                    })
                    .unwrap();
                let config = bosun_helper::config::Config {
                    agent_user: user,
                    slots_root,
                    update_inbox,
                    ..bosun_helper::config::Config::default()
                };
                match bosun_helper::verbs::act(&request, &config) {
                    Ok(output) => Response::Ok { output },
                    Err(e) => e.to_response(),
                }
            }
            Request::BuildGolden(args) => match self.golden_build.lock().clone() {
                Some((archive, sha256, size)) => Response::Ok {
                    output: Output::GoldenBuilt {
                        vmid: args.vmid,
                        archive: Some(archive),
                        sha256: Some(sha256),
                        size: Some(size),
                    },
                },
                None => Response::Failed {
                    message: "golden image step apt update failed".into(),
                },
            },
            other => Response::Refused {
                reason: Refusal::Malformed,
                message: format!("the fake helper does not do {}", other.verb()),
            },
        }
    }
}
