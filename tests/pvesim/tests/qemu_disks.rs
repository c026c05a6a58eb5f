//! A VM's added disks as qemu-server and vzdump treat them: a config change naming
//! `scsiN: STORAGE:SIZE` allocates a new volume there (only on a storage holding `images`) and
//! writes the drive back with it, its other options kept; vzdump leaves a `backup=0` drive out
//! ("exclude disk … (backup=no)") while the archive's config keeps its line; a restore of that
//! archive brings the included drive back with its options and writes the excluded one's line
//! back commented out (the config's description), with no volume made for it.

use crate::common;

use std::time::Duration;

use bosun_pvesim::{SimConfig, TaskDurations};
use common::{Sim, start_with};

fn quick() -> SimConfig {
    SimConfig {
        time_scale: 0.01,
        auth_failure_delay: Duration::ZERO,
        durations: TaskDurations {
            vzdump: Duration::from_secs(10),
            ..TaskDurations::default()
        },
        ..SimConfig::default()
    }
}

async fn restore(sim: &Sim, vmid: u32, archive: &str) {
    let id = vmid.to_string();
    let params = [
        ("vmid", id.as_str()),
        ("archive", archive),
        ("storage", "local-lvm"),
        ("unique", "1"),
        ("pool", "bosun"),
    ];
    let r = sim
        .call_as(&sim.agent(), "POST", "/nodes/pve/qemu", &params)
        .await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
}

/// The volumes of `vmid` on `storage`.
async fn volumes(sim: &Sim, storage: &str, vmid: u32) -> Vec<String> {
    let r = sim
        .call("GET", &format!("/nodes/pve/storage/{storage}/content"), &[])
        .await;
    let mut out: Vec<String> = r
        .data()
        .as_array()
        .expect("a list")
        .iter()
        .filter(|v| v["vmid"].as_u64() == Some(u64::from(vmid)))
        .filter_map(|v| v["volid"].as_str().map(str::to_owned))
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn an_added_disk_is_allocated_and_a_backup_0_disk_is_left_out_of_the_archive() {
    let sim = start_with(quick()).await;
    let golden = sim.handle.add_vm_golden();
    restore(&sim, 370, &golden).await;
    let before = volumes(&sim, "local-lvm", 370).await;

    // A storage without `images` takes no disk; nothing changes.
    let r = sim
        .call_as(
            &sim.agent(),
            "PUT",
            "/nodes/pve/qemu/370/config",
            &[("scsi1", "local:2,backup=1,serial=db")],
        )
        .await;
    assert_eq!(r.status, 500, "{:?}", r.body);
    assert!(
        r.message().contains("does not support vm images"),
        "{:?}",
        r.body
    );
    assert!(!sim.handle.vm_config(370).expect("vm").contains_key("scsi1"));

    // The agent adds a disk vzdump includes and one it leaves out.
    let r = sim
        .call_as(
            &sim.agent(),
            "PUT",
            "/nodes/pve/qemu/370/config",
            &[
                ("scsi1", "local-lvm:2,backup=1,serial=db"),
                ("scsi2", "local-lvm:4,backup=0,serial=media"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let config = sim.handle.vm_config(370).expect("vm");
    let db = config.get("scsi1").expect("scsi1").clone();
    let media = config.get("scsi2").expect("scsi2").clone();
    let after = volumes(&sim, "local-lvm", 370).await;
    let new: Vec<&String> = after.iter().filter(|v| !before.contains(v)).collect();
    assert_eq!(new.len(), 2, "{after:?}");
    let db_volume = db.split(',').next().expect("volume").to_owned();
    let media_volume = media.split(',').next().expect("volume").to_owned();
    assert!(
        new.contains(&&db_volume) && new.contains(&&media_volume),
        "{new:?}"
    );
    assert_eq!(
        db,
        format!("{db_volume},backup=1,serial=db,size=2G"),
        "{config:?}"
    );
    assert_eq!(
        media,
        format!("{media_volume},backup=0,serial=media,size=4G"),
        "{config:?}"
    );

    // vzdump: the hot disk in, the bulk disk out; the archive's config keeps both lines.
    let r = sim
        .call(
            "POST",
            "/nodes/pve/vzdump",
            &[
                ("vmid", "370"),
                ("storage", "local"),
                ("mode", "stop"),
                ("compress", "zstd"),
            ],
        )
        .await;
    let upid = r.upid();
    assert_eq!(sim.wait(&upid).await, "OK");
    let log = sim.handle.task_log(&upid).expect("log");
    assert!(
        log.iter()
            .any(|l| l == &format!("INFO: include disk 'scsi1' '{db_volume}'")),
        "{log:#?}"
    );
    assert!(
        log.iter()
            .any(|l| l == &format!("INFO: exclude disk 'scsi2' '{media_volume}' (backup=no)")),
        "{log:#?}"
    );
    assert!(
        !log.iter().any(|l| l.contains("include disk 'scsi2'")),
        "{log:#?}"
    );
    let archive = sim
        .handle
        .storage_volumes("local")
        .into_iter()
        .find(|v| v.starts_with("local:backup/vzdump-qemu-370-"))
        .expect("the archive");
    let r = sim
        .call(
            "GET",
            "/nodes/pve/vzdump/extractconfig",
            &[("volume", archive.as_str())],
        )
        .await;
    let text = r.data().as_str().expect("the config").to_owned();
    assert!(
        text.lines().any(|l| l == format!("scsi2: {media}")),
        "{text}"
    );

    // The restore: the hot disk back with its serial, the bulk disk's line commented out and
    // no volume made for it.
    restore(&sim, 371, &archive).await;
    let restored = sim.handle.vm_config(371).expect("vm");
    let db = restored.get("scsi1").expect("scsi1");
    assert!(db.contains(",backup=1,serial=db,size=2G"), "{restored:?}");
    assert!(!restored.contains_key("scsi2"), "{restored:?}");
    assert!(
        restored
            .get("description")
            .is_some_and(|d| d.lines().any(|l| l == format!("scsi2: {media}"))),
        "{restored:?}"
    );
    let made = volumes(&sim, "local-lvm", 371).await;
    assert_eq!(
        made.iter().filter(|v| v.contains("-disk-")).count(),
        2,
        "the root disk and the hot disk only: {made:?}"
    );

    // Destroying the VM frees its added volumes.
    let r = sim.call("DELETE", "/nodes/pve/qemu/370", &[]).await;
    assert_eq!(sim.wait(&r.upid()).await, "OK");
    assert!(volumes(&sim, "local-lvm", 370).await.is_empty());
    sim.handle.shutdown().await;
}
