//! `pct exec <vmid> -- /usr/bin/tar --create --file=- … --directory=<path> .` through the
//! `bosun-pvesim-pct` stand-in, as the helper's `bulk_archive` runs it (decision 0090): a real
//! tar of the simulated CT's files below the path on the stand-in's standard output, bytes
//! and all; an absent directory (a volume the tree does not model) an empty archive.

// Test harness code: a panic is a failed test with its location.
#![allow(clippy::unwrap_used)]

use std::io::Read;

use crate::common::start;
use crate::pct_admin::{install_stand_in, run_program};

/// `(name, kind, bytes)` of each member of `archive`.
fn members(archive: &[u8]) -> Vec<(String, tar::EntryType, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in tar::Archive::new(archive).entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let kind = entry.header().entry_type();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        out.push((name, kind, data));
    }
    out
}

#[tokio::test]
async fn the_pct_stand_in_tars_a_ct_directory_to_its_standard_output() {
    let sim = start().await;
    sim.restore_golden(101).await;
    sim.start_ct(101).await;
    let dir = tempfile::tempdir().unwrap();
    let pct = install_stand_in(
        &sim,
        dir.path(),
        "pct",
        env!("CARGO_BIN_EXE_bosun-pvesim-pct"),
    );
    let mkdir = [
        "exec",
        "101",
        "--",
        "/usr/bin/mkdir",
        "-p",
        "/srv/media/films",
    ];
    let out = run_program(&pct, &mkdir).await;
    assert!(out.status.success(), "{out:?}");
    // Two files on the volume (one of bytes no text could carry), one outside it.
    let binary: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
    for (name, bytes, dest) in [
        ("a", b"media file\n".to_vec(), "/srv/media/a.txt"),
        ("b", binary.clone(), "/srv/media/films/b.bin"),
        ("c", b"not on the volume".to_vec(), "/srv/other.txt"),
    ] {
        let host = dir.path().join(name);
        std::fs::write(&host, &bytes).unwrap();
        let out = run_program(&pct, &["push", "101", host.to_str().unwrap(), dest]).await;
        assert!(out.status.success(), "{out:?}");
    }
    let tar = |path: &str| {
        let directory = format!("--directory={path}");
        let args = [
            "exec",
            "101",
            "--",
            "/usr/bin/tar",
            "--create",
            "--file=-",
            "--one-file-system",
            "--numeric-owner",
        ];
        let args: Vec<String> = args
            .iter()
            .map(|a| a.to_string())
            .chain([directory, ".".into()])
            .collect();
        let pct = pct.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_program(&pct, &args).await
        }
    };

    let out = tar("/srv/media").await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout.len() % 10240, 0, "padded to tar's records");
    let listed = members(&out.stdout);
    let names: Vec<(&str, tar::EntryType)> =
        listed.iter().map(|(n, k, _)| (n.as_str(), *k)).collect();
    assert_eq!(
        names,
        [
            ("./", tar::EntryType::Directory),
            ("./a.txt", tar::EntryType::Regular),
            ("./films/", tar::EntryType::Directory),
            ("./films/b.bin", tar::EntryType::Regular),
        ]
    );
    assert_eq!(listed[1].2, b"media file\n");
    assert_eq!(listed[3].2, binary);
    // The system's own tar reads it too.
    let archive = dir.path().join("media.tar");
    std::fs::write(&archive, &out.stdout).unwrap();
    let listed = std::process::Command::new("tar")
        .arg("-tf")
        .arg(&archive)
        .output()
        .unwrap();
    assert!(listed.status.success(), "{listed:?}");
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout),
        "./\n./a.txt\n./films/\n./films/b.bin\n"
    );

    // A volume the tree holds nothing of: an empty archive of its directory.
    let out = tar("/srv/empty").await;
    assert!(out.status.success(), "{out:?}");
    let names: Vec<String> = members(&out.stdout).into_iter().map(|m| m.0).collect();
    assert_eq!(names, ["./"]);

    // A file where the directory should be fails as GNU tar does.
    let out = tar("/srv/other.txt").await;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Not a directory"),
        "{out:?}"
    );
    // A stopped CT runs nothing.
    sim.handle.stop_guest(101);
    let out = tar("/srv/media").await;
    assert_eq!(out.status.code(), Some(255), "{out:?}");
    assert!(out.stdout.is_empty());
}
