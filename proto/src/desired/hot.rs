//! Hot volumes (a database's or an app's configuration): mount points the guest's own vzdump
//! includes (`backup=1`), placed only on a storage the signed data plan classes `fast`
//! (DESIGN §7: "hot volumes → a `fast` target, enforced"). Where a hot volume may go is decided
//! by the agent against the plan (decision 0087); desired state only names the storage.

use serde::{Deserialize, Serialize};

use crate::validate::{self, ValidationError};

/// Most hot volumes one guest may declare; with its bulk volumes, at most 8 mount points in
/// all.
pub const MAX_HOT_VOLUMES: usize = 8;

/// One hot volume of a guest: a database's data, an app's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HotVolume {
    /// Name, unique among the guest's volumes (`[a-z0-9-]`, at most 32 bytes).
    pub name: String,
    /// Size in GiB, 1..=65536.
    pub size_gib: u32,
    /// Where it is mounted inside the guest (absolute, not `/`).
    pub path: String,
    /// The Proxmox storage to allocate it on; absent: the storage the guest's root volume
    /// goes on. Either way the signed plan must class it `fast`, or the guest is not built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
}

impl HotVolume {
    /// Checks the volume's own fields; `at` names a field for the error.
    pub(super) fn validate(&self, at: &dyn Fn(&str) -> String) -> Result<(), ValidationError> {
        check_name(&self.name, &|| at("name"))?;
        validate::range(|| at("size_gib"), self.size_gib, 1, 65_536)?;
        check_path(&self.path, &|| at("path"))?;
        if let Some(storage) = &self.storage
            && !is_storage_id(storage)
        {
            return Err(ValidationError::Invalid {
                field: at("storage"),
                reason: "expected a Proxmox storage id".into(),
            });
        }
        Ok(())
    }
}

/// Whether `storage` is a Proxmox storage id (`pve-storage-id`: a letter, then letters,
/// digits, `-`, `_` or `.`, at most 64 bytes in all).
fn is_storage_id(storage: &str) -> bool {
    storage.len() <= 64
        && storage.starts_with(|c: char| c.is_ascii_alphabetic())
        && storage
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Checks a volume's name: 1 to 32 of `[a-z0-9-]`.
pub(crate) fn check_name(name: &str, field: &dyn Fn() -> String) -> Result<(), ValidationError> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(ValidationError::Invalid {
            field: field(),
            reason: "expected 1 to 32 of [a-z0-9-]".into(),
        })
    }
}

/// Checks a volume's path in the guest: absolute, below `/`, of `[A-Za-z0-9/_.-]`, no `.` or
/// `..` component.
pub(crate) fn check_path(path: &str, field: &dyn Fn() -> String) -> Result<(), ValidationError> {
    validate::text(field, path, 255)?;
    let ok = path.starts_with('/')
        && path != "/"
        && path
            .split('/')
            .skip(1)
            .all(|c| !c.is_empty() && c != "." && c != "..")
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(ValidationError::Invalid {
            field: field(),
            reason: "expected an absolute path below / of [A-Za-z0-9/_.-]".into(),
        })
    }
}
