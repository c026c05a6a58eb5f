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
/// output, staying on the volume's file system, with numeric owners, leaving out the
/// directories of a restore in progress ([`BULK_RESTORE_DIRS`]).
pub const BULK_TAR_ARGV: [&str; 6] = [
    "/usr/bin/tar",
    "--create",
    "--file=-",
    "--one-file-system",
    "--numeric-owner",
    "--exclude=./.bosun-restore-*",
];

/// The directories `bulk_restore` (decision 0108) keeps on the volume while it works, in the
/// order a restore passes through them: the archive extracted into the first, which becomes
/// the second once tar succeeded; the helper approves it by renaming it to the third, after
/// which the volume's own entries go into the last and the new ones out of the fourth. No
/// customer file can be one of them: a volume's archive leaves them out.
pub const BULK_RESTORE_DIRS: [&str; 5] = [
    ".bosun-restore-partial",
    ".bosun-restore-ready",
    ".bosun-restore-moving",
    ".bosun-restore-swapping",
    ".bosun-restore-old",
];

/// The guest's shell script `bulk_restore` runs with `pct exec <vmid> -- /bin/sh -c` (as the
/// guest's root, in its namespaces), with the step and the volume's path as its arguments.
/// `extract` first finishes a swap an earlier run approved (so the volume is never left half
/// swapped), clears what an unapproved run left, then has the guest's tar extract standard
/// input into a fresh directory (`BULK_RESTORE_DIRS`); `swap` approves that directory and
/// swaps it in (renames on one file system: every old entry into the old directory, every new
/// one out, the old directory removed), and finishes the same way when asked again; `discard`
/// removes an unapproved extraction.
pub const BULK_RESTORE_SCRIPT: &str = r#"set -eu
cd -- "$2"
p=.bosun-restore-partial r=.bosun-restore-ready m=.bosun-restore-moving
s=.bosun-restore-swapping o=.bosun-restore-old
finish() {
  if [ -d "$m" ]; then
    mkdir -p -- "$o"
    find . -mindepth 1 -maxdepth 1 ! -name "$p" ! -name "$r" ! -name "$m" ! -name "$s"       ! -name "$o" -exec mv -t "$o" -- {} +
    mv -T -- "$m" "$s"
  fi
  if [ -d "$s" ]; then
    find "$s" -mindepth 1 -maxdepth 1 -exec mv -t . -- {} +
    rmdir -- "$s"
  fi
  rm -rf -- "$o"
}
case "$1" in
  extract)
    finish
    rm -rf -- "$p" "$r"
    mkdir -m 0700 -- "$p"
    tar --extract --file=- --numeric-owner --same-owner --preserve-permissions       --directory="$p"
    mv -T -- "$p" "$r" ;;
  swap)
    if [ -d "$r" ]; then mv -T -- "$r" "$m"; fi
    finish ;;
  discard) rm -rf -- "$p" "$r" ;;
  *) exit 2 ;;
esac
"#;

/// A step of [`BULK_RESTORE_SCRIPT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkRestoreStep {
    /// Extract standard input into a fresh directory on the volume.
    Extract,
    /// Swap that directory in.
    Swap,
    /// Remove it unapproved.
    Discard,
}

impl BulkRestoreStep {
    /// The script's argument.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Extract => "extract",
            Self::Swap => "swap",
            Self::Discard => "discard",
        }
    }
}

/// What `bulk_restore` runs after `pct exec <vmid> --` for `step` on the volume at `path`.
pub fn bulk_restore_argv(step: BulkRestoreStep, path: &str) -> [&str; 6] {
    [
        "/bin/sh",
        "-c",
        BULK_RESTORE_SCRIPT,
        "bosun-bulk-restore",
        step.as_str(),
        path,
    ]
}

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
