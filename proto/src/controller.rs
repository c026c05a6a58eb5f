//! The in-guest controller's image, as an operator's signed `controller-update` job names it
//! (DESIGN §5: the controller digest is code that runs inside customer guests, so only a
//! signature may choose it; unsigned desired state never does).
//!
//! A digest is the content address of an OCI image, `sha256:` and 64 lowercase hex digits,
//! never a tag: a tag can be moved to other code after the operator signed it.

use crate::validate::ValidationError;

/// The job parameter naming the digest.
pub const DIGEST_PARAM: &str = "digest";

/// The prefix every accepted digest carries.
pub const DIGEST_PREFIX: &str = "sha256:";

/// Whether `digest` is `sha256:` and 64 lowercase hex digits.
pub fn is_image_digest(digest: &str) -> bool {
    digest
        .strip_prefix(DIGEST_PREFIX)
        .is_some_and(crate::golden::is_sha256)
}

/// Checks that `digest` (the value of `field`) is an image digest.
pub fn validate_digest(field: &str, digest: &str) -> Result<(), ValidationError> {
    if is_image_digest(digest) {
        Ok(())
    } else {
        Err(ValidationError::Invalid {
            field: field.to_owned(),
            reason: "expected an image digest `sha256:` + 64 lowercase hex digits (never a tag)"
                .into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_sha256_content_addresses_are_digests() {
        let hex = "0123456789abcdef".repeat(4);
        assert!(is_image_digest(&format!("sha256:{hex}")));
        for bad in [
            hex.clone(),
            format!("sha256:{}", hex.to_ascii_uppercase()),
            format!("sha256:{}", &hex[1..]),
            format!("sha512:{hex}"),
            format!("sha256:{hex}0"),
            "latest".to_owned(),
            String::new(),
        ] {
            assert!(!is_image_digest(&bad), "{bad:?}");
            assert_eq!(
                validate_digest("params.digest", &bad).unwrap_err().field(),
                "params.digest"
            );
        }
    }
}
