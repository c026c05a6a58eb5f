use uuid::Uuid;

use super::*;
use crate::delta::ReportDelta;
use crate::report::StateReport;

const SHA: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

fn volume() -> BulkVolumeReport {
    BulkVolumeReport {
        guest_id: Uuid::from_u128(0xb1),
        name: "media".into(),
        path: "/srv/media".into(),
        size_gib: 100,
        class: None,
        target: Some("nas-media".into()),
        storage_id: Some("bosun-nas-media".into()),
        refused: None,
        backup: BulkBackup::Target {
            target: "usb1".into(),
        },
        signed_target: Some("usb1".into()),
        last_archive: Some(BulkArchiveReport {
            at: "2026-11-20T03:00:00Z".parse().unwrap(),
            target: "usb1".into(),
            name: "bulk-media-2026_11_20-03_00_00.tar".into(),
            size_bytes: 1 << 30,
            sha256: SHA.into(),
        }),
        last_error: Some("tar: ./x: file changed as we read it".into()),
        not_archived: None,
    }
}

/// The field a report carrying `edit`ed volume is refused for, `None` when it is accepted;
/// a delta carrying the same volumes is judged the same.
fn refused(edit: impl Fn(&mut BulkVolumeReport)) -> Option<String> {
    let mut v = volume();
    edit(&mut v);
    let mut report = StateReport::empty(1, "0.1.0");
    report.bulk_volumes = vec![v];
    let full = report.validate().err().map(|e| e.to_string());
    let delta = ReportDelta::between(&StateReport::empty(1, "0.1.0"), 1, &report, 2);
    let partial = delta.validate().err().map(|e| e.to_string());
    assert_eq!(full, partial, "a delta is checked as a full report is");
    full
}

#[test]
fn a_well_formed_volume_is_accepted() {
    assert_eq!(refused(|_| {}), None);
    assert_eq!(
        refused(|v| {
            v.signed_target = None;
            v.last_archive = None;
            v.last_error = None;
        }),
        None
    );
    assert_eq!(
        refused(|v| v.last_error = Some("é".repeat(MAX_DETAIL_CHARS))),
        None
    );
}

#[test]
fn a_long_or_escaping_error_is_refused() {
    let long = refused(|v| v.last_error = Some("x".repeat(MAX_DETAIL_CHARS + 1))).unwrap();
    assert!(long.contains("bulk_volumes[0].last_error"), "{long}");
    assert!(long.contains("the limit is 200"), "{long}");
    let escape = refused(|v| v.last_error = Some("tar\x1b[2J: cleared".into())).unwrap();
    assert!(
        escape.contains("bulk_volumes[0].last_error") && escape.contains("control characters"),
        "{escape}"
    );
}

#[test]
fn an_archive_is_the_helpers_file_with_a_sha256() {
    for name in [
        "../../etc/passwd",
        "bulk-media-2026/11.tar",
        "bulk-other-2026_11_20-03_00_00.tar",
        "bulk-media-.tar",
        "bulk-media-2026_11_20-03_00_00.tar\n",
        "bulk-media-2026_11_20-03_00_00.tar.gz",
    ] {
        let why = refused(|v| v.last_archive.as_mut().unwrap().name = name.into()).unwrap();
        assert!(
            why.contains("bulk_volumes[0].last_archive.name"),
            "{name}: {why}"
        );
    }
    let long = format!("bulk-media-{}.tar", "1".repeat(300));
    let why = refused(|v| v.last_archive.as_mut().unwrap().name = long.clone()).unwrap();
    assert!(why.contains("the limit is 255"), "{why}");
    for sha in [&SHA.to_uppercase(), &SHA[..63], &format!("{}g", &SHA[..63])] {
        let why = refused(|v| v.last_archive.as_mut().unwrap().sha256 = sha.to_string()).unwrap();
        assert!(why.contains("last_archive.sha256"), "{sha}: {why}");
    }
}

#[test]
fn a_volume_name_is_desired_states() {
    for name in ["Media", "", "a/b", &"m".repeat(33)] {
        let why = refused(|v| {
            v.name = name.into();
            v.last_archive = None;
        })
        .unwrap();
        assert!(why.contains("bulk_volumes[0].name"), "{name}: {why}");
    }
}

#[test]
fn targets_are_bounded_names() {
    let long = refused(|v| v.signed_target = Some("t".repeat(257))).unwrap();
    assert!(long.contains("bulk_volumes[0].signed_target"), "{long}");
    let control = refused(|v| v.signed_target = Some("usb\x071".into())).unwrap();
    assert!(control.contains("signed_target"), "{control}");
    let archive = refused(|v| v.last_archive.as_mut().unwrap().target = " ".into()).unwrap();
    assert!(archive.contains("last_archive.target"), "{archive}");
    let ack = refused(|v| {
        v.backup = BulkBackup::None {
            acknowledged_by: "ops\x1b]8;;".into(),
        }
    })
    .unwrap();
    assert!(ack.contains("backup.acknowledged_by"), "{ack}");
}

#[test]
fn the_count_is_bounded() {
    let mut report = StateReport::empty(1, "0.1.0");
    report.bulk_volumes = vec![volume(); MAX_REPORTED_BULK_VOLUMES + 1];
    let err = report.validate().unwrap_err().to_string();
    assert!(err.contains("bulk_volumes"), "{err}");
}
