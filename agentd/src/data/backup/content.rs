//! What ties an archive's **content** to its guest, beyond what a storage server keeps beside
//! it (decision 0052).
//!
//! Before each backup the agent makes sure the guest's Proxmox config carries the tag
//! `bosun-guest-<guest id>` (and no other guest's); vzdump copies the config into the
//! archive (`pct.conf`; on PBS the `pct.conf.blob`, encrypted under K with the root archive
//! and listed with its checksum in the snapshot's manifest, which K signs). Before a PBS
//! archive is restored the agent reads that config back through Proxmox
//! (`GET /nodes/{node}/vzdump/extractconfig`, which decrypts with the storage's key and
//! checks the manifest's signature and the blob's checksum) and the archive must name the
//! guest it is restored for, and only it. A datastore holder without K cannot make a
//! snapshot whose config names another guest: moving guest B's snapshot under guest A's
//! path, notes and time gives an archive that still names B.
//!
//! The customer inside a guest cannot write the guest's Proxmox config, and the hub has no
//! Proxmox access: only the agent writes the tag.
//!
//! A VM's archive is bound the same way (decision 0118): vzdump copies its config into the
//! archive as `qemu-server.conf` (a config blob in the VMA's header; on PBS
//! `qemu-server.conf.blob`). An archive is also of one **kind**, a container's or a VM's, by
//! its name and by the config inside, and is restored only for a guest of that kind.

use bosun_proto::desired::GuestKind;
use bosun_pve::{
    ConfigUpdate, CtOptions, GuestOps, PveError, VmConfigUpdate, VmOptions, Vmid, VolumeId,
};
use uuid::Uuid;

/// What the tag naming a guest starts with; the guest id (32 hex digits) follows.
pub const GUEST_TAG_PREFIX: &str = "bosun-guest-";

/// The tag naming `guest_id` (a UUID) in a guest's config; `None` for an id that is not one.
pub fn guest_tag(guest_id: &str) -> Option<String> {
    let id = Uuid::parse_str(guest_id).ok()?;
    Some(format!("{GUEST_TAG_PREFIX}{}", id.simple()))
}

/// Why a guest's config could not be tagged ([`mark`]), or why an archive's content may not
/// be restored for a guest ([`check`]). The text is the reason an operator reads in the
/// refusal (`archive.rejected`, a job's or a restore's failure).
#[derive(Debug, thiserror::Error)]
pub enum ContentError {
    /// The guest id is not a UUID.
    #[error("{guest_id} is not a guest id")]
    NotAGuestId {
        /// The id given.
        guest_id: String,
    },
    /// Reading the guest's config (to tag it) failed.
    #[error("reading the guest's config")]
    ReadConfig(#[source] Box<PveError>),
    /// Writing the tag into the guest's config failed.
    #[error("tagging the guest's config")]
    Tag(#[source] Box<PveError>),
    /// Proxmox could not read the archive's config back.
    #[error("its configuration could not be read back")]
    ExtractConfig(#[source] Box<PveError>),
    /// The archive's config carries no guest tag.
    #[error("its content names no guest (the config inside carries no guest tag)")]
    NamesNoGuest,
    /// The archive's config names another guest (or more than one).
    #[error("its content is another guest's: the config inside names {}", .named.join(", "))]
    AnotherGuest {
        /// The guests it names, by tag.
        named: Vec<String>,
    },
    /// The archive's name is not one of a backup of a guest of any kind.
    #[error("its name is not a container's or a VM's backup")]
    UnknownKind,
    /// The archive (by its name, or by the config inside) is of the other kind of guest.
    #[error("it is {} backup ({by}), not {}", article(.archive), article(.guest))]
    WrongKind {
        /// The kind the archive is.
        archive: GuestKind,
        /// The kind of the guest it was named for.
        guest: GuestKind,
        /// What said so: `by its name` or `by the config inside`.
        by: &'static str,
    },
}

/// "a container's" or "a VM's".
fn article(kind: &GuestKind) -> &'static str {
    match *kind {
        GuestKind::Lxc => "a container's",
        GuestKind::Qemu => "a VM's",
    }
}

/// The kind of guest a backup volid is of: a `vzdump-lxc-…` file or a PBS `ct/…` snapshot
/// is a container's, a `vzdump-qemu-…` file or a `vm/…` snapshot a VM's; `None` for
/// anything else.
pub fn archive_kind(volid: &str) -> Option<GuestKind> {
    let (_, path) = volid.split_once(':')?;
    let path = path.strip_prefix("backup/")?;
    if path.starts_with("vzdump-lxc-") || path.starts_with("ct/") {
        Some(GuestKind::Lxc)
    } else if path.starts_with("vzdump-qemu-") || path.starts_with("vm/") {
        Some(GuestKind::Qemu)
    } else {
        None
    }
}

/// The kind of guest a config file's text (its main section) is of: a container's has a
/// `rootfs`, a VM's its disks (`scsiN`, `virtioN`, `sataN`, `ideN`, `efidisk0`); `None` when
/// it has neither or both.
pub fn config_kind(config: &str) -> Option<GuestKind> {
    let mut rootfs = false;
    let mut disks = false;
    for line in config.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            break;
        }
        let Some((key, _)) = line.split_once(':') else {
            continue;
        };
        let key = key.trim();
        rootfs |= key == "rootfs";
        disks |= key == "efidisk0"
            || ["scsi", "virtio", "sata", "ide"].iter().any(|p| {
                key.strip_prefix(p)
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            });
    }
    match (rootfs, disks) {
        (true, false) => Some(GuestKind::Lxc),
        (false, true) => Some(GuestKind::Qemu),
        _ => None,
    }
}

/// `Ok` when `volume`'s name says it is a backup of a `kind` guest.
pub fn check_kind_by_name(volume: &VolumeId, kind: GuestKind) -> Result<(), ContentError> {
    match archive_kind(volume.as_str()) {
        None => Err(ContentError::UnknownKind),
        Some(archive) if archive != kind => Err(ContentError::WrongKind {
            archive,
            guest: kind,
            by: "by its name",
        }),
        Some(_) => Ok(()),
    }
}

/// The tag naming `guest_id`, or why there is none.
fn tag_of(guest_id: &str) -> Result<String, ContentError> {
    guest_tag(guest_id).ok_or_else(|| ContentError::NotAGuestId {
        guest_id: guest_id.to_owned(),
    })
}

/// The tags of a config's `tags` value (`;`, `,` or space separated).
fn split_tags(tags: &str) -> impl Iterator<Item = &str> {
    tags.split([';', ',', ' ']).filter(|t| !t.is_empty())
}

/// The guests a config file's text names by tag (the main section only: snapshot and
/// pending sections are not the archive's own config).
pub fn guests_named(config: &str) -> Vec<String> {
    let mut named = Vec::new();
    for line in config.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            break;
        }
        if let Some(tags) = line.strip_prefix("tags:") {
            for tag in split_tags(tags.trim()) {
                if tag.starts_with(GUEST_TAG_PREFIX) && !named.iter().any(|n| n == tag) {
                    named.push(tag.to_ascii_lowercase());
                }
            }
        }
    }
    named
}

/// Makes sure `vmid`'s config (a `kind` guest's) names `guest_id` and no other guest,
/// before a backup of it. Other tags are kept.
pub async fn mark(
    ops: &dyn GuestOps,
    guest_id: &str,
    vmid: Vmid,
    kind: GuestKind,
) -> Result<(), ContentError> {
    let ours = tag_of(guest_id)?;
    let config = match kind {
        GuestKind::Lxc => ops.ct_config(vmid).await,
        GuestKind::Qemu => ops.vm_config(vmid).await,
    }
    .map_err(|e| ContentError::ReadConfig(Box::new(e)))?;
    let current = config.get_str("tags").unwrap_or_default();
    let kept: Vec<String> = split_tags(&current)
        .filter(|t| !t.starts_with(GUEST_TAG_PREFIX))
        .map(str::to_owned)
        .collect();
    let already = split_tags(&current)
        .filter(|t| t.starts_with(GUEST_TAG_PREFIX))
        .eq(std::iter::once(ours.as_str()));
    if already {
        return Ok(());
    }
    let tags: Vec<String> = kept.into_iter().chain(std::iter::once(ours)).collect();
    let digest = Some(config.digest.clone());
    match kind {
        GuestKind::Lxc => {
            let update = ConfigUpdate {
                set: CtOptions {
                    tags,
                    ..CtOptions::default()
                },
                digest,
                ..ConfigUpdate::default()
            };
            ops.update_config(vmid, &update).await
        }
        GuestKind::Qemu => {
            let update = VmConfigUpdate {
                set: VmOptions {
                    tags,
                    ..VmOptions::default()
                },
                digest,
                ..VmConfigUpdate::default()
            };
            ops.update_vm_config(vmid, &update).await
        }
    }
    .map_err(|e| ContentError::Tag(Box::new(e)))
}

/// Checks that archive `volume` is a `kind` guest's, by its name and by the config inside,
/// and that the config is `guest_id`'s and no other guest's; `Err` says why its content may
/// not be restored for that guest.
pub async fn check(
    ops: &dyn GuestOps,
    guest_id: &str,
    kind: GuestKind,
    volume: &VolumeId,
) -> Result<(), ContentError> {
    let ours = tag_of(guest_id)?;
    check_kind_by_name(volume, kind)?;
    let config = ops
        .extract_config(volume)
        .await
        .map_err(|e| ContentError::ExtractConfig(Box::new(e)))?;
    match config_kind(&config) {
        Some(inside) if inside == kind => {}
        Some(inside) => {
            return Err(ContentError::WrongKind {
                archive: inside,
                guest: kind,
                by: "by the config inside",
            });
        }
        None => return Err(ContentError::UnknownKind),
    }
    let named = guests_named(&config);
    match named.as_slice() {
        [only] if *only == ours => Ok(()),
        [] => Err(ContentError::NamesNoGuest),
        _ => Err(ContentError::AnotherGuest { named }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_main_sections_guest_tags_count() {
        let id = Uuid::new_v4();
        let tag = guest_tag(&id.to_string()).unwrap();
        assert_eq!(tag, format!("bosun-guest-{}", id.simple()));
        let text = format!(
            "#a note\narch: amd64\ntags: bosun-op-1;{tag};web\n\n[vzdump]\ntags: bosun-guest-other\n"
        );
        assert_eq!(guests_named(&text), vec![tag.clone()]);
        assert!(guests_named("arch: amd64\ntags: bosun-op-1\n").is_empty());
        let two = format!("tags: {tag} bosun-guest-00000000000000000000000000000001\n");
        assert_eq!(guests_named(&two).len(), 2);
        assert_eq!(guest_tag("not-a-uuid"), None);
    }

    #[test]
    fn an_archive_is_of_one_kind_by_its_name_and_by_its_config() {
        let cases = [
            (
                "local:backup/vzdump-lxc-101-2026_01_01-00_00_00.tar.zst",
                Some(GuestKind::Lxc),
            ),
            (
                "pbs:backup/ct/101/2026-01-01T00:00:00Z",
                Some(GuestKind::Lxc),
            ),
            (
                "local:backup/vzdump-qemu-101-2026_01_01-00_00_00.vma.zst",
                Some(GuestKind::Qemu),
            ),
            (
                "pbs:backup/vm/101/2026-01-01T00:00:00Z",
                Some(GuestKind::Qemu),
            ),
            ("local:iso/vzdump-qemu-1.iso", None),
            ("pbs:backup/host/x/2026-01-01T00:00:00Z", None),
        ];
        for (volid, want) in cases {
            assert_eq!(archive_kind(volid), want, "{volid}");
        }
        let ct = "arch: amd64\nrootfs: local-lvm:vm-101-disk-0,size=8G\n";
        let vm = "boot: order=scsi0\nscsi0: local-lvm:vm-101-disk-0,size=8G\nide2: local-lvm:vm-101-cloudinit,media=cdrom\n";
        assert_eq!(config_kind(ct), Some(GuestKind::Lxc));
        assert_eq!(config_kind(vm), Some(GuestKind::Qemu));
        assert_eq!(config_kind("memory: 512\n"), None);
        assert_eq!(config_kind(&format!("{ct}scsi0: x\n")), None);
        // A snapshot section's keys are not the archive's own.
        assert_eq!(
            config_kind(&format!("{ct}\n[snap]\nscsi0: x\n")),
            Some(GuestKind::Lxc)
        );
        let volume = VolumeId::new("local:backup/vzdump-lxc-1-x.tar.zst".to_owned()).unwrap();
        let refused = check_kind_by_name(&volume, GuestKind::Qemu).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "it is a container's backup (by its name), not a VM's"
        );
        assert!(check_kind_by_name(&volume, GuestKind::Lxc).is_ok());
    }
}
