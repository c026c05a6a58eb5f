//! TLS to the hub: trust the hub by its pins (a key pin, `spki:…`, which outlives a renewal of
//! the same key, or the certificate's SHA-256 `bosun-hubd init` prints), or by a CA and the
//! hub's name, see [`bosun_pin`]; HTTP/2 is offered.

use std::sync::Arc;

use bosun_pin::{PinSet, Trust, TrustError};

/// A client config trusting the hub as `trust` says, and the pin set inside it when pins alone
/// decide (the keys of the operator's signed pin set join the configured ones).
pub fn client_config(
    trust: &Trust,
) -> Result<(rustls::ClientConfig, Option<Arc<PinSet>>), TrustError> {
    let verifier = bosun_pin::verifier(trust, Arc::new(rustls::crypto::ring::default_provider()))?;
    let mut config = verifier.client_config();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((config, verifier.pin_set))
}
