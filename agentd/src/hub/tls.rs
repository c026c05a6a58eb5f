//! TLS to the hub: trust exactly the leaf certificate whose SHA-256 was
//! configured (printed by `bosun-hubd init`), see [`bosun_pin`]; HTTP/2 is offered.

/// A client config pinning `fingerprint` (hex, colons allowed).
pub fn pinned_config(fingerprint: &str) -> Result<rustls::ClientConfig, bosun_pin::BadFingerprint> {
    let mut config = bosun_pin::client_config(fingerprint)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
