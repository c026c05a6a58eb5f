//! What a host will not apply of its desired state, and why: a field of a guest's spec (a root
//! disk asked smaller than the guest's), a storage target or a backup tier the signed data plan
//! does not allow, a bulk volume with no target of its class. Carried in every report
//! ([`crate::report::StateReport::refused`]) so the hub, `bosunctl` and the dashboard say the
//! host is not in sync, with the agent's reason (decision 0065).
//!
//! Bounded like every report part: at most [`MAX_REFUSED`] entries; a name holds no control
//! character (it comes from desired state); a reason is at most [`MAX_REASON`] bytes, and the
//! hub writes any control character in it as visible text before storing it.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::validate::{self, ValidationError};

/// Most refusals one report carries (one per guest field, target and tier).
pub const MAX_REFUSED: usize = 512;
/// Longest reason, in bytes.
pub const MAX_REASON: usize = 512;
/// Longest name or field, in bytes (a hostname is at most 253).
pub const MAX_NAME: usize = 253;

/// What was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RefusedKind {
    /// A field of a guest's spec (`field` names it).
    GuestField,
    /// A storage target (`name` is its `durable_id`).
    StorageTarget,
    /// A backup tier (`name` is the target it names).
    Tier,
    /// Anything this version does not know.
    #[serde(other)]
    Unknown,
}

impl RefusedKind {
    /// How the operator's views name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::GuestField => "guest",
            Self::StorageTarget => "storage target",
            Self::Tier => "tier",
            Self::Unknown => "unknown",
        }
    }
}

/// One part of desired state the host refuses.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Refused {
    /// What kind of part.
    pub kind: RefusedKind,
    /// The guest's hostname, or the target's `durable_id`.
    #[cfg_attr(feature = "openapi", schema(max_length = 253))]
    pub name: String,
    /// The guest, for a guest field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_id: Option<Uuid>,
    /// The field (`rootfs_gib`, a bulk volume's `bulk_volumes.<name>`), for a guest field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 253))]
    pub field: Option<String>,
    /// Why, for the operator.
    #[cfg_attr(feature = "openapi", schema(max_length = 512))]
    pub reason: String,
}

impl Refused {
    /// The one line every view prints: `storage target nfs-1: reason`.
    pub fn line(&self) -> String {
        let what = match &self.field {
            Some(field) => format!("{} {} {field}", self.kind.as_str(), self.name),
            None => format!("{} {}", self.kind.as_str(), self.name),
        };
        format!(
            "{}: {}",
            crate::inert::escape(&what),
            crate::inert::escape(&self.reason)
        )
    }
}

/// Checks a report's (or a delta's) refusals: their count, their names and their lengths.
pub fn check(field: &str, refused: &[Refused]) -> Result<(), ValidationError> {
    validate::count(field, refused.len(), MAX_REFUSED)?;
    for (i, r) in refused.iter().enumerate() {
        let bad = |what: &str, reason: String| ValidationError::Invalid {
            field: format!("{field}[{i}].{what}"),
            reason,
        };
        if r.name.is_empty() || r.name.len() > MAX_NAME || crate::inert::has_control(&r.name) {
            return Err(bad(
                "name",
                format!("1 to {MAX_NAME} bytes, no control characters"),
            ));
        }
        if let Some(f) = &r.field
            && (f.len() > MAX_NAME || crate::inert::has_control(f))
        {
            return Err(bad(
                "field",
                format!("at most {MAX_NAME} bytes, no control characters"),
            ));
        }
        if r.reason.len() > MAX_REASON {
            return Err(bad("reason", format!("at most {MAX_REASON} bytes")));
        }
    }
    Ok(())
}

/// Writes every control character of the refusals' reasons as visible text (names were
/// checked: [`check`]).
pub fn make_inert(refused: &mut [Refused]) {
    for r in refused {
        crate::inert::escape_in_place(&mut r.reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(name: &str, reason: &str) -> Refused {
        Refused {
            kind: RefusedKind::StorageTarget,
            name: name.to_owned(),
            guest_id: None,
            field: None,
            reason: reason.to_owned(),
        }
    }

    #[test]
    fn refusals_are_bounded_in_count_name_and_reason() {
        assert!(check("refused", &[one("nfs-1", "not in the plan")]).is_ok());
        assert!(check("refused", &[one("", "x")]).is_err());
        assert!(check("refused", &[one("a\u{1b}[2J", "x")]).is_err());
        assert!(check("refused", &[one("nfs", &"x".repeat(MAX_REASON + 1))]).is_err());
        let many = vec![one("nfs", "x"); MAX_REFUSED + 1];
        assert!(check("refused", &many).is_err());
    }

    #[test]
    fn a_reason_is_made_inert_and_the_line_escapes_it() {
        let mut all = vec![one("nfs-1", "bad\u{1b}[31m")];
        make_inert(&mut all);
        assert!(!crate::inert::has_control(&all[0].reason), "{:?}", all[0]);
        let raw = one("nfs-1", "bad\u{7}");
        assert!(!crate::inert::has_control(&raw.line()));
        assert!(raw.line().starts_with("storage target nfs-1: "));
    }
}
