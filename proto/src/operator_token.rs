//! Operator tokens (`/v1/admin/tokens`): the bearer tokens people and their tools call the
//! admin API and open the dashboard with. Each has a name (what the audit trail records), a
//! [`Role`] and an optional expiry; the hub keeps only its hash.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::secret::SecretToken;
use crate::validate::ValidationError;

/// Longest token name, in bytes.
pub const MAX_NAME: usize = 63;
/// Shortest lifetime a token may be given, in seconds.
pub const MIN_EXPIRES_IN_SECONDS: u32 = 60;
/// Longest lifetime a token may be given, in seconds (two years); without one it never expires.
pub const MAX_EXPIRES_IN_SECONDS: u32 = 2 * 366 * 24 * 3600;
/// The pattern a name matches (`[a-z0-9][a-z0-9._-]{0,62}`).
pub const NAME_PATTERN: &str = "^[a-z0-9][a-z0-9._-]{0,62}$";

/// What a token may do; each role may do everything the roles below it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads: the dashboard and every `GET` of the admin API.
    Viewer,
    /// Day-to-day changes: desired state, enrollment tokens, signed jobs, artifacts, alert
    /// acknowledgements and silences.
    Operator,
    /// The hub itself: operator tokens, approving, revoking and removing hosts.
    Admin,
}

impl Role {
    /// Every role, lowest first.
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Operator, Role::Admin];

    /// The role's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Viewer => "viewer",
            Self::Operator => "operator",
            Self::Admin => "admin",
        }
    }

    /// Parses a role's name.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|role| role.as_str() == text)
    }

    /// Whether a token of this role may do what `needed` may.
    pub fn allows(self, needed: Role) -> bool {
        self >= needed
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Checks a token name: 1 to 63 characters of `a-z`, `0-9`, `.`, `_`, `-`, starting with a
/// letter or digit.
pub fn validate_name(field: &str, name: &str) -> Result<(), ValidationError> {
    let invalid = |reason: &str| ValidationError::Invalid {
        field: field.to_owned(),
        reason: reason.to_owned(),
    };
    if name.is_empty() {
        return Err(ValidationError::Empty {
            field: field.to_owned(),
        });
    }
    if name.len() > MAX_NAME {
        return Err(ValidationError::TooLong {
            field: field.to_owned(),
            len: name.len(),
            max: MAX_NAME,
        });
    }
    let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b);
    if !name.bytes().all(allowed) {
        return Err(invalid("only a-z, 0-9, `.`, `_` and `-` are allowed"));
    }
    if !name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        return Err(invalid("it starts with a letter or a digit"));
    }
    Ok(())
}

/// `POST /v1/admin/tokens`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateOperatorToken {
    /// The token's name, unique on the hub: what the audit trail records as `by`.
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 63,
            pattern = "^[a-z0-9][a-z0-9._-]{0,62}$"
        )
    )]
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// Lifetime in seconds, 60..=63244800 (two years); without it the token does not expire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 60, maximum = 63_244_800))]
    pub expires_in_seconds: Option<u32>,
}

impl CreateOperatorToken {
    /// Checks the request.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate_name("name", &self.name)?;
        if let Some(seconds) = self.expires_in_seconds {
            crate::validate::range(
                || "expires_in_seconds".into(),
                seconds,
                MIN_EXPIRES_IN_SECONDS,
                MAX_EXPIRES_IN_SECONDS,
            )?;
        }
        Ok(())
    }
}

/// A token as the hub lists it: never the secret itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OperatorTokenInfo {
    /// Its name.
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// When it was created.
    pub created_at: Timestamp,
    /// The token that created it (none for the first admin token, which `bosun-hubd init`
    /// made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    /// When it stops working; never, when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Timestamp>,
    /// Whether it has expired (by the hub's clock when listed).
    #[serde(default)]
    pub expired: bool,
    /// When its secret was last replaced (`rotate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotated_at: Option<Timestamp>,
    /// When it was last used, to within a minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_at: Option<Timestamp>,
}

/// A token just created or rotated: its secret, shown once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OperatorTokenCreated {
    /// The secret; the hub keeps only its hash.
    pub token: SecretToken,
    /// The token as listed.
    #[serde(flatten)]
    pub info: OperatorTokenInfo,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_pattern() {
        for good in [
            "admin",
            "ci-deploy",
            "a",
            "0",
            "alice.smith_2",
            &"a".repeat(63),
        ] {
            assert!(validate_name("name", good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Admin",
            "-x",
            ".x",
            "_x",
            "a b",
            "ä",
            &"a".repeat(64),
            "a/b",
        ] {
            assert!(validate_name("name", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn roles_are_ordered_and_named() {
        assert!(Role::Admin.allows(Role::Operator));
        assert!(Role::Operator.allows(Role::Operator));
        assert!(!Role::Viewer.allows(Role::Operator));
        for role in Role::ALL {
            assert_eq!(Role::parse(role.as_str()), Some(role));
            assert_eq!(
                serde_json::to_value(role).unwrap(),
                serde_json::json!(role.as_str())
            );
        }
        assert_eq!(Role::parse("root"), None);
    }

    #[test]
    fn lifetimes_are_bounded() {
        let request = |seconds| CreateOperatorToken {
            name: "ci".into(),
            role: Role::Operator,
            expires_in_seconds: seconds,
        };
        assert!(request(None).validate().is_ok());
        assert!(request(Some(60)).validate().is_ok());
        assert!(request(Some(59)).validate().is_err());
        assert!(
            request(Some(MAX_EXPIRES_IN_SECONDS + 1))
                .validate()
                .is_err()
        );
    }
}
