//! The guests' local-API tokens: 256 random bits (`blt_` + 43 base64url characters), minted
//! here, pushed in the guest's bootstrap ([`super::bootstrap`]) and checked by the local API
//! (`crate::guests::localapi::auth`), which keeps only their SHA-256.

use base64::Engine as _;
use rand::RngCore as _;
use secrecy::SecretString;

/// Prefix of every local-API token, so a leaked one is recognizable in a scan.
pub const TOKEN_PREFIX: &str = "blt_";
/// Length of every local-API token: the prefix and 43 base64url characters.
pub const TOKEN_LEN: usize = 4 + 43;

/// Mints a fresh 256-bit token.
pub fn mint_token() -> SecretString {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let text = format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    );
    bytes.fill(0);
    SecretString::from(text)
}
