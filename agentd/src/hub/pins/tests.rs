use std::os::unix::fs::PermissionsExt as _;

use rustls::client::danger::ServerCertVerifier as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

use super::*;

/// A hub key: its certificate and key pin.
fn hub_key() -> (CertificateDer<'static>, Pin) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["hub.example".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap()
        .der()
        .clone();
    let pin = Pin::of_key(&cert).unwrap();
    (cert, pin)
}

fn set(pins: Vec<Pin>) -> Arc<PinSet> {
    Arc::new(PinSet::new(pins, Arc::new(rustls::crypto::ring::default_provider())).unwrap())
}

/// The hub presents `cert` in a handshake the set checks.
fn handshake(set: &PinSet, cert: &CertificateDer<'_>) -> bool {
    let name = ServerName::try_from("hub.example").unwrap();
    set.verify_server_cert(cert, &[], &name, &[], UnixTime::now())
        .is_ok()
}

#[test]
fn announced_keys_are_taken_journaled_and_trusted_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (old_cert, old) = hub_key();
    let (next_cert, next) = hub_key();
    let configured = vec![old.clone()];
    let trust = set(configured.clone());
    let pins = HubPins::open(dir.path(), &configured, Arc::clone(&trust)).unwrap();
    assert_eq!(
        pins.to_send(),
        vec![old.to_string()],
        "told on the first poll"
    );
    pins.answered(&[old.to_string()]);
    assert!(pins.to_send().is_empty(), "not again once the hub has them");

    assert!(handshake(&trust, &old_cert));
    let announced = vec![next.to_string(), old.to_string()];
    assert!(pins.adopt(&announced).unwrap(), "the set changed");
    assert!(
        !pins.adopt(&announced).unwrap(),
        "the same set again changes nothing"
    );
    assert!(handshake(&trust, &next_cert), "the next key is trusted");
    assert!(
        handshake(&trust, &old_cert),
        "and the old one, while it is announced"
    );
    let mut expected = announced.clone();
    expected.sort();
    assert_eq!(pins.to_send(), expected, "the hub is told what changed");
    let mode = std::fs::metadata(dir.path().join(FILE))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // A restart with the same configuration trusts what the hub announced last.
    let restarted = set(configured.clone());
    HubPins::open(dir.path(), &configured, Arc::clone(&restarted)).unwrap();
    assert!(handshake(&restarted, &next_cert));

    // After the old key's retirement the hub announces the new one alone.
    assert!(handshake(&trust, &next_cert));
    assert!(pins.adopt(&[next.to_string()]).unwrap());
    assert!(
        !handshake(&trust, &old_cert),
        "the retired key is trusted no more"
    );
    let restarted = set(configured.clone());
    HubPins::open(dir.path(), &configured, Arc::clone(&restarted)).unwrap();
    assert!(!handshake(&restarted, &old_cert));
    assert!(handshake(&restarted, &next_cert));

    // An operator who configures other pins is obeyed over the journal.
    let (other_cert, other) = hub_key();
    let reconfigured = vec![other];
    let obeyed = set(reconfigured.clone());
    HubPins::open(dir.path(), &reconfigured, Arc::clone(&obeyed)).unwrap();
    assert!(handshake(&obeyed, &other_cert));
    assert!(!handshake(&obeyed, &next_cert));
}

#[test]
fn an_announcement_that_keeps_no_trusted_key_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (old_cert, old) = hub_key();
    let (_, stranger) = hub_key();
    let trust = set(vec![old.clone()]);
    let pins = HubPins::open(dir.path(), std::slice::from_ref(&old), Arc::clone(&trust)).unwrap();
    assert!(matches!(
        pins.adopt(&[stranger.to_string()]),
        Err(AdoptError::Refused(Refused::Unrelated))
    ));
    assert!(handshake(&trust, &old_cert));
    assert!(matches!(
        pins.adopt(&[stranger.to_string()]),
        Err(AdoptError::Refused(Refused::Unrelated))
    ));
    let nine: Vec<String> = (0..9).map(|i| format!("spki:{i:064x}")).collect();
    assert!(matches!(
        pins.adopt(&nine),
        Err(AdoptError::Refused(Refused::Unusable(_)))
    ));
    assert!(matches!(
        pins.adopt(&["not a pin".to_owned()]),
        Err(AdoptError::Refused(Refused::Unusable(_)))
    ));
    assert_eq!(pins.trusted(), vec![old.to_string()]);
    assert!(!dir.path().join(FILE).exists(), "nothing journaled");
}

#[test]
fn an_agent_that_pins_the_certificate_takes_the_key_pins_of_that_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = hub_key();
    let (next_cert, next) = hub_key();
    let leaf = Pin::of_leaf(&cert);
    let trust = set(vec![leaf.clone()]);
    let pins = HubPins::open(dir.path(), &[leaf], Arc::clone(&trust)).unwrap();
    // No handshake yet: the key pin names nothing the agent trusts.
    assert!(pins.adopt(&[key.to_string(), next.to_string()]).is_err());
    assert!(handshake(&trust, &cert));
    assert!(pins.adopt(&[key.to_string(), next.to_string()]).unwrap());
    assert!(handshake(&trust, &next_cert));
    // The retiring answer may come over a connection opened under the old key: taken.
    assert!(pins.adopt(&[next.to_string()]).unwrap());
    assert!(!handshake(&trust, &cert));
}

#[test]
fn a_damaged_journal_stops_the_agent_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let (_, old) = hub_key();
    std::fs::write(dir.path().join(FILE), b"{ not json").unwrap();
    let err = HubPins::open(
        dir.path(),
        std::slice::from_ref(&old),
        set(vec![old.clone()]),
    )
    .unwrap_err();
    assert!(err.to_string().contains(FILE), "{err}");
    std::fs::write(dir.path().join(FILE), vec![b' '; 20_000]).unwrap();
    let err = HubPins::open(
        dir.path(),
        std::slice::from_ref(&old),
        set(vec![old.clone()]),
    )
    .unwrap_err();
    assert!(err.to_string().contains("larger than"), "{err}");
}
