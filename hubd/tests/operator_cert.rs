//! An operator-provided certificate is served and pinned by its fingerprint.

use crate::common;

use bosun_hubd::tls::TlsSource;
use common::TestHub;
use reqwest::{Method, StatusCode};

#[tokio::test]
async fn an_operator_certificate_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let report = common::init(&dir, vec![], true).unwrap();
    assert!(
        report.fingerprint.is_none(),
        "no self-signed certificate with --operator-cert"
    );
    assert!(!dir.path().join("tls").exists());

    let certified = rcgen::generate_simple_self_signed(vec!["hub.example.net".to_owned()]).unwrap();
    let cert = dir.path().join("operator-cert.pem");
    let key = dir.path().join("operator-key.pem");
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    let expected = bosun_proto::fingerprint::cert_sha256(certified.cert.der());

    let mut config = common::config(&dir);
    config.tls = TlsSource::Files { cert, key };
    let admin = report.admin_token.expose().to_owned();
    let hub = TestHub::start_in(dir, admin, config).await;
    assert_eq!(hub.hub.fingerprint(), expected);
    let resp = hub.admin(Method::GET, "/v1/admin/hosts", None).await;
    assert_eq!(resp.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_missing_certificate_is_a_clear_startup_error() {
    let dir = tempfile::tempdir().unwrap();
    common::init(&dir, vec![], true).unwrap();
    let mut config = common::config(&dir);
    config.tls = TlsSource::Files {
        cert: dir.path().join("absent.pem"),
        key: dir.path().join("absent-key.pem"),
    };
    let clock = std::sync::Arc::new(bosun_hubd::clock::SystemClock);
    let err = bosun_hubd::Hub::open(config, clock).await.unwrap_err();
    let chain = format!("{err}: {}", std::error::Error::source(&err).unwrap());
    assert!(chain.contains("absent.pem"), "{chain}");
}
