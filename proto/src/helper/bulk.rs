//! The fixed command line and the file names of `bulk_archive` (decision 0090), shared by the
//! helper that writes the archives and whoever reads their names back. Volumes are named by a
//! `VolumeName`'s text (this file imports nothing of the helper protocol's other modules).

use std::time::SystemTime;

use jiff::Timestamp;

/// The directory beneath a storage's path that holds bulk archives:
/// `<storage path>/bosun-bulk/<guest id>/<volume>/`.
pub const BULK_DIR: &str = "bosun-bulk";
/// What a bulk archive's file name starts with; `<volume>-<YYYY_MM_DD-HH_MM_SS>.tar` follows.
pub const BULK_ARCHIVE_PREFIX: &str = "bulk-";

/// What `bulk_archive` runs after `pct exec <vmid> --`, followed by `--directory=<path>` and
/// `.`: the guest's own tar writes the volume's files, as the guest sees them, to its standard
/// output, staying on the volume's file system, with numeric owners.
pub const BULK_TAR_ARGV: [&str; 5] = [
    "/usr/bin/tar",
    "--create",
    "--file=-",
    "--one-file-system",
    "--numeric-owner",
];

/// The file name of `volume`'s archive taken at `at`: `bulk-<volume>-<YYYY_MM_DD-HH_MM_SS>.tar`
/// (UTC, so names sort as their times).
pub fn bulk_archive_name(volume: &str, at: SystemTime) -> String {
    let at = Timestamp::try_from(at).unwrap_or(Timestamp::UNIX_EPOCH);
    let time = at.strftime("%Y_%m_%d-%H_%M_%S");
    format!("{BULK_ARCHIVE_PREFIX}{volume}-{time}.tar")
}

/// Whether `name` is a name [`bulk_archive_name`] gives an archive of `volume` (not one of a
/// volume whose name merely starts the same, not a partial file).
pub fn is_bulk_archive_name(volume: &str, name: &str) -> bool {
    let time = name.strip_prefix(BULK_ARCHIVE_PREFIX);
    let time = time.and_then(|n| n.strip_prefix(volume));
    let time = time.and_then(|n| n.strip_prefix('-')?.strip_suffix(".tar"));
    time.is_some_and(|t| {
        t.len() == 19
            && t.bytes().enumerate().all(|(i, b)| match i {
                4 | 7 | 13 | 16 => b == b'_',
                10 => b == b'-',
                _ => b.is_ascii_digit(),
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_names_carry_the_utc_time_and_are_told_apart_from_other_volumes() {
        let media = "media";
        let at = SystemTime::from("2026-02-03T04:05:06Z".parse::<Timestamp>().unwrap());
        let name = bulk_archive_name(media, at);
        assert_eq!(name, "bulk-media-2026_02_03-04_05_06.tar");
        assert!(is_bulk_archive_name(media, &name));
        let old = "media-old";
        assert!(!is_bulk_archive_name(media, &bulk_archive_name(old, at)));
        assert!(!is_bulk_archive_name(old, &name));
        for other in [
            "bulk-media.partial-42",
            "bulk-media-2026_02_03-04_05_06.tar.tmp",
            "bulk-media-2026-02-03-04-05-06.tar",
            "bulk-media-2026_02_03-04_05_0x.tar",
            "media-2026_02_03-04_05_06.tar",
        ] {
            assert!(!is_bulk_archive_name(media, other), "{other}");
        }
        let later = SystemTime::from("2026-11-03T00:00:00Z".parse::<Timestamp>().unwrap());
        assert!(name < bulk_archive_name(media, later));
    }
}
