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

use bosun_pve::{ConfigUpdate, CtOptions, GuestOps, PveError, Vmid, VolumeId};
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

/// Makes sure `vmid`'s config names `guest_id` and no other guest, before a backup of it.
/// Other tags are kept.
pub async fn mark(ops: &dyn GuestOps, guest_id: &str, vmid: Vmid) -> Result<(), ContentError> {
    let ours = tag_of(guest_id)?;
    let config = ops
        .ct_config(vmid)
        .await
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
    let update = ConfigUpdate {
        set: CtOptions {
            tags: kept.into_iter().chain(std::iter::once(ours)).collect(),
            ..CtOptions::default()
        },
        digest: Some(config.digest.clone()),
        ..ConfigUpdate::default()
    };
    ops.update_config(vmid, &update)
        .await
        .map_err(|e| ContentError::Tag(Box::new(e)))
}

/// Checks that archive `volume` holds the config of `guest_id` and of no other guest; `Err`
/// says why its content may not be restored for that guest.
pub async fn check(
    ops: &dyn GuestOps,
    guest_id: &str,
    volume: &VolumeId,
) -> Result<(), ContentError> {
    let ours = tag_of(guest_id)?;
    let config = ops
        .extract_config(volume)
        .await
        .map_err(|e| ContentError::ExtractConfig(Box::new(e)))?;
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
}
