//! The cloudflared stand-in the suites share: the simulator crate's
//! (`bosun_pvesim::cloudflared`, the same one the demo runs as `bosun-cloudflared-sim`), run in
//! process, and the operator's seal of the tunnel's credentials.

#![allow(dead_code)]

pub use bosun_pvesim::cloudflared::*;

/// `file` sealed to `recipient` for host `host` and tunnel `tunnel`, as `bosunctl secret seal
/// --tunnel-id` seals it: the armored ciphertext for desired state's `tunnel_credentials`.
pub fn seal_credentials(
    recipient: &str,
    host: uuid::Uuid,
    tunnel: uuid::Uuid,
    file: &str,
) -> String {
    let credential = bosun_proto::sealed_credential::TunnelCredential::new(
        host,
        tunnel,
        jiff::Timestamp::now(),
        bosun_proto::secret::SecretToken::new(file),
    );
    crate::agent_support::signing::seal_signed(recipient, &credential)
}
