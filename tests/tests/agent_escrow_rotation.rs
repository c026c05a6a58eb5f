//! Rotating the recovery code rotates the key (decision 0028), through a real hub, the
//! simulator's PBS and a running agent.
//!
//! An old sheet, with any copy of the old blob, must never open what is made after the
//! rotation; the new words must open every key an archive still needs; backups after the
//! rotation must be encrypted with the new key, and archives made before it must still
//! restore. A rotation killed between any two of its steps (the failpoints of
//! `escrow::rotate`, in a child process) or refused by the hub must never leave a backup
//! made with a key the hub's escrow does not hold.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;
use crate::escrow_support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use agent_support::*;
use bosun_agentctl::escrow::command;
use bosun_agentctl::escrow::rotate;
use bosun_agentd::config::AgentConfig;
use bosun_agentd::data::storage::naming::restore_only_id;
use escrow_support::pbs::{PbsHost, hub_blob, opened_keys, sheet_in, sheet_options};
use escrow_support::words_on_sheet;

/// Set (to `<config>\n<sheet dir>`) when this binary runs as the rotating child.
const CHILD_ENV: &str = "BOSUN_ROTATE_CHILD";

/// The rotating child: `escrow rotate` through the library, which this test binary builds
/// with its failpoints. Does nothing in an ordinary run. A failed rotation fails the child
/// (exit 101), its error and exit code on stderr.
#[test]
fn rotate_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (config, sheets) = spec.split_once('\n').unwrap();
    install_crypto();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let config = AgentConfig::load(Path::new(config)).unwrap();
    let rotated = runtime.block_on(rotate::rotate(
        &config,
        &sheet_options(Path::new(sheets)),
        "pve-old",
    ));
    if let Err(e) = rotated {
        panic!("rotate failed (exit code {}): {e:#}", e.exit_code());
    }
}

/// Runs `escrow rotate` in a child with `failpoint` armed; gives its exit status and stderr.
async fn rotate_in_child(
    config: &Path,
    sheets: &Path,
    failpoint: Option<&str>,
) -> (std::process::ExitStatus, String) {
    let mut command = tokio::process::Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "agent_escrow_rotation::rotate_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            CHILD_ENV,
            format!("{}\n{}", config.display(), sheets.display()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    match failpoint {
        Some(point) => command.env(bosun_agentd::failpoint::ENV, point),
        None => command.env_remove(bosun_agentd::failpoint::ENV),
    };
    let out = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("the rotation ends within 120 s")
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_rotation_new_backups_use_a_new_key_and_older_archives_still_restore() {
    let hub = RealHub::start().await;
    let old = PbsHost::start(&hub, &hub.url, &["alpha"]).await;
    let host = old.host;
    let k = old.keys()[0].clone();
    old.storage_holds_current_key().await;
    let before = old.back_up(&hub, 0).await;
    assert_eq!(old.archive_key(&before).await.as_deref(), Some(k.as_str()));
    assert_eq!(old.proof(0, &before).await["fingerprint"], k.as_str());

    let scratch = tempfile::tempdir().unwrap();
    let (first, second) = (scratch.path().join("first"), scratch.path().join("second"));
    std::fs::create_dir_all(&first).unwrap();
    std::fs::create_dir_all(&second).unwrap();
    let created = command::create(&old.config, &sheet_options(&first), "pve-old")
        .await
        .unwrap();
    let old_words = words_on_sheet(&created.sheet);
    let old_blob = hub_blob(&hub, host).await;
    let rotated = rotate::rotate(&old.config, &sheet_options(&second), "pve-old")
        .await
        .unwrap();
    let new_words = words_on_sheet(&rotated.sheet);
    let k2 = rotated.fingerprint.clone();
    assert_ne!(k2, k, "a rotation makes a new key");
    assert_eq!(rotated.previous, k);
    assert_eq!(old.keys(), vec![k2.clone(), k.clone()]);

    // What a holder of the old sheet can open: never the new key.
    let new_blob = hub_blob(&hub, host).await;
    assert_eq!(new_blob.key_fingerprint, k2);
    assert_eq!(opened_keys(&new_blob, &old_words, host), None);
    assert_eq!(
        opened_keys(&old_blob, &old_words, host),
        Some(vec![k.clone()])
    );
    // The new words open the new key and the old one.
    assert_eq!(
        opened_keys(&new_blob, &new_words, host),
        Some(vec![k2.clone(), k.clone()])
    );

    // The running agent puts the new key on the PBS storage, and the old one on a
    // restore-only storage of the same datastore.
    old.storage_holds_current_key().await;
    let restore_only = restore_only_id(&old.pbs, &k);
    eventually(
        Duration::from_secs(30),
        "the retired key's restore-only storage",
        || async {
            old.storage_key(&restore_only)
                .await
                .is_some_and(|f| f.eq_ignore_ascii_case(&k))
        },
    )
    .await;
    // The hub verifies the new escrow against the key the host now reports.
    eventually(
        Duration::from_secs(30),
        "the hub verifies the rotated escrow",
        || async {
            let escrow = &hub.host(host).await["escrow"];
            escrow["state"] == "verified" && escrow["key_fingerprint"] == k2.as_str()
        },
    )
    .await;

    // A backup after the rotation is encrypted with the new key, and proven with it.
    let after = old.back_up(&hub, 0).await;
    assert_eq!(old.archive_key(&after).await.as_deref(), Some(k2.as_str()));
    assert_eq!(old.proof(0, &after).await["fingerprint"], k2.as_str());

    // The archive made before the rotation still restores: through the storage holding
    // its key (the PBS storage itself now holds the new key, and PBS would refuse it).
    old.sim.clear_requests();
    let result = old.restore_now(&hub, 0, &before).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    let name = before.split_once(':').unwrap().1;
    let vmid = old.guests[0].2.to_string();
    assert_eq!(
        agent_restores(&old.sim),
        vec![(vmid.clone(), format!("{restore_only}:{name}"))]
    );
    assert_eq!(old.sim.guest_running(old.guests[0].2), Some(true));
    // The new one restores through the PBS storage.
    old.sim.clear_requests();
    let result = old.restore_now(&hub, 0, &after).await;
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert_eq!(agent_restores(&old.sim), vec![(vmid, after.clone())]);

    // The restore-only storage is no target: the hub never hears of it.
    let reported = hub.host(host).await["last_report"]["storage"].to_string();
    assert!(!reported.contains(restore_only.as_str()), "{reported}");

    old.agent.stop().await;
    old.sim.shutdown().await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_killed_between_its_steps_never_leaves_a_backup_the_hubs_escrow_cannot_open() {
    let hub = RealHub::start().await;
    let old = PbsHost::start(&hub, &hub.url, &["alpha"]).await;
    let host = old.host;
    old.storage_holds_current_key().await;
    let scratch = tempfile::tempdir().unwrap();
    let dir = |name: &str| -> PathBuf {
        let dir = scratch.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    };
    let created = command::create(&old.config, &sheet_options(&dir("create")), "pve-old")
        .await
        .unwrap();
    let words = words_on_sheet(&created.sheet);

    // Every backup from here on must be made with a key the escrow at the hub holds, under
    // words printed on a sheet that still exists.
    let assert_backup_is_escrowed = |words: String, what: &'static str| {
        let (old, hub) = (&old, &hub);
        async move {
            let held = opened_keys(&hub_blob(hub, host).await, &words, host)
                .unwrap_or_else(|| panic!("{what}: the sheet's words do not open the hub's blob"));
            for key in old.keys() {
                assert!(
                    held.contains(&key),
                    "{what}: the box holds {key}, the escrow {held:?}"
                );
            }
            old.storage_holds_current_key().await;
            let archive = old.back_up(hub, 0).await;
            let key = old.archive_key(&archive).await.unwrap();
            assert!(
                held.contains(&key),
                "{what}: a backup made with {key}; the hub's escrow holds {held:?}"
            );
        }
    };

    // The hub cannot store the new escrow: the sheet is deleted and K stays.
    let keys = old.keys();
    let blob = hub_blob(&hub, host).await;
    let config = std::fs::read_to_string(&old.files.config_path).unwrap();
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!(
            "https://127.0.0.1:{}",
            listener.local_addr().unwrap().port()
        )
    };
    std::fs::write(&old.files.config_path, config.replace(&hub.url, &closed)).unwrap();
    let refused = dir("refused");
    let (status, stderr) = rotate_in_child(&old.files.config_path, &refused, None).await;
    std::fs::write(&old.files.config_path, &config).unwrap();
    assert!(!status.success(), "{status:?}");
    assert!(
        stderr.contains("rotate failed (exit code 69)")
            && stderr.contains("storing the escrow at the hub failed"),
        "{stderr}"
    );
    assert_eq!(old.keys(), keys, "K stays when the hub does not store");
    assert_eq!(
        sheet_in(&refused),
        None,
        "the unstored code's sheet is deleted"
    );
    assert_eq!(hub_blob(&hub, host).await, blob);
    assert_backup_is_escrowed(words, "the hub refused").await;

    // Killed after each step.
    for point in [
        "escrow.rotate.store.done",
        "escrow.rotate.retire.done",
        "escrow.rotate.replace.done",
    ] {
        let sheets = dir(point);
        let (status, stderr) = rotate_in_child(&old.files.config_path, &sheets, Some(point)).await;
        assert!(
            !status.success() && status.code().is_none(),
            "{point}: the failpoint did not trip ({status:?}): {stderr}"
        );
        // The hub stored the blob before the kill: the new sheet's words open it.
        let sheet = sheet_in(&sheets).unwrap_or_else(|| panic!("{point}: no sheet"));
        assert_backup_is_escrowed(words_on_sheet(&sheet), point).await;
    }

    // A rotation that is left alone finishes what the killed ones began.
    let last = dir("last");
    let (status, stderr) = rotate_in_child(&old.files.config_path, &last, None).await;
    assert!(status.success(), "{status:?}: {stderr}");
    let words = words_on_sheet(&sheet_in(&last).unwrap());
    let keys = old.keys();
    let blob = hub_blob(&hub, host).await;
    assert_eq!(blob.key_fingerprint, keys[0]);
    assert_eq!(opened_keys(&blob, &words, host), Some(keys.clone()));
    assert_backup_is_escrowed(words, "after a rotation ran to its end").await;
    let record = command::status(&old.config).unwrap();
    assert_eq!(record.current.as_deref(), Some(keys[0].as_str()));
    assert_eq!(
        record.record.map(|r| r.key_fingerprint),
        Some(keys[0].clone())
    );

    old.agent.stop().await;
    old.sim.shutdown().await;
    hub.stop().await;
}
