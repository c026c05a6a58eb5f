//! TLS from `bosunctl`: the server's leaf pinned by its SHA-256 (see [`bosun_pin`]), with
//! HTTP/2 offered.

use crate::error::CtlError;

/// Client config pinning the leaf whose SHA-256 is `fingerprint` (hex, colons allowed).
pub fn pinned(fingerprint: &str) -> Result<rustls::ClientConfig, CtlError> {
    let mut config = bosun_pin::client_config(fingerprint)
        .map_err(|err| CtlError::BadFingerprint { value: err.input })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
