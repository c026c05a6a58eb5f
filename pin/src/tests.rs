use super::*;

fn key() -> rcgen::KeyPair {
    rcgen::KeyPair::generate().expect("a key pair")
}

/// A self-signed leaf for `name` over `key`.
fn leaf_of(key: &rcgen::KeyPair, name: &str) -> CertificateDer<'static> {
    rcgen::CertificateParams::new(vec![name.to_owned()])
        .expect("valid names")
        .self_signed(key)
        .expect("a self-signed certificate")
        .der()
        .clone()
}

fn leaf() -> CertificateDer<'static> {
    leaf_of(&key(), "localhost")
}

fn verify(
    verifier: &dyn ServerCertVerifier,
    cert: &CertificateDer<'_>,
    name: &str,
) -> Result<(), rustls::Error> {
    let name = ServerName::try_from(name.to_owned()).expect("a valid name");
    verifier
        .verify_server_cert(cert, &[], &name, &[], UnixTime::now())
        .map(|_| ())
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn set(pins: Vec<Pin>) -> PinSet {
    PinSet::new(pins, provider()).expect("a valid set")
}

#[test]
fn accepts_the_pinned_leaf_in_any_spelling() {
    let cert = leaf();
    let hex = cert_sha256(&cert);
    let colon_upper = hex
        .as_bytes()
        .chunks(2)
        .map(|pair| String::from_utf8_lossy(pair).to_ascii_uppercase())
        .collect::<Vec<_>>()
        .join(":");
    for spelling in [hex.clone(), colon_upper, format!("sha256:{hex}")] {
        let pin = PinSet::leaf(&spelling, provider()).expect("a valid fingerprint");
        assert_eq!(pin.pins(), vec![Pin::Leaf(hex.clone())]);
        verify(&pin, &cert, "localhost").expect("the pinned leaf is accepted");
        assert_eq!(Pin::parse(&spelling), Ok(Pin::Leaf(hex.clone())));
    }
}

#[test]
fn refuses_any_other_leaf() {
    let pinned = leaf();
    let other = leaf();
    let pin = PinSet::leaf(&cert_sha256(&pinned), provider()).expect("valid");
    let err = verify(&pin, &other, "localhost").expect_err("another leaf is refused");
    assert!(
        err.to_string().contains("matches none of the pinned"),
        "{err}"
    );
}

#[test]
fn refuses_what_is_not_a_pin() {
    for bad in [
        "",
        "abc",
        &"0".repeat(63),
        &"g".repeat(64),
        &"0".repeat(66),
        "spki:",
        &format!("spki:{}", "0".repeat(63)),
        &format!("spki:spki:{}", "0".repeat(64)),
    ] {
        let err = client_config(bad).expect_err("not a pin");
        assert_eq!(err.input, bad);
    }
}

#[test]
fn a_key_pin_accepts_a_renewed_certificate_of_the_same_key_and_nothing_else() {
    let hub_key = key();
    let first = leaf_of(&hub_key, "hub.example");
    let renewed = leaf_of(&hub_key, "hub.example");
    assert_ne!(
        cert_sha256(&first),
        cert_sha256(&renewed),
        "a new certificate"
    );
    let pin = Pin::of_key(&first).expect("a readable certificate");
    assert_eq!(Pin::of_key(&renewed).as_ref(), Some(&pin), "the same key");
    assert_eq!(
        Pin::parse(&pin.to_string()),
        Ok(pin.clone()),
        "its text reads back"
    );

    let by_key = set(vec![pin.clone()]);
    verify(&by_key, &first, "hub.example").expect("the first certificate");
    verify(&by_key, &renewed, "hub.example").expect("the renewal keeps the key");
    assert_eq!(by_key.last_accepted_key(), Some(pin));
    let err = verify(&by_key, &leaf(), "hub.example").expect_err("another key");
    assert!(
        err.to_string().contains("matches none of the pinned"),
        "{err}"
    );

    // A leaf pin of the first certificate does not follow the renewal.
    let by_leaf = set(vec![Pin::of_leaf(&first)]);
    verify(&by_leaf, &first, "hub.example").expect("the pinned certificate");
    verify(&by_leaf, &renewed, "hub.example").expect_err("not the pinned certificate");
}

#[test]
fn a_set_trusts_each_of_its_keys_and_can_be_replaced_in_use() {
    let (old, next) = (leaf(), leaf());
    let (old_pin, next_pin) = (Pin::of_key(&old).unwrap(), Pin::of_key(&next).unwrap());
    let pins = set(vec![old_pin.clone()]);
    verify(&pins, &old, "h").expect("the old key");
    verify(&pins, &next, "h").expect_err("the next key is not known yet");

    pins.replace(vec![next_pin.clone(), old_pin.clone(), old_pin.clone()])
        .expect("a valid set");
    assert_eq!(pins.pins().len(), 2, "duplicates are dropped");
    verify(&pins, &old, "h").expect("the old key, until it is retired");
    verify(&pins, &next, "h").expect("the next key");
    assert_eq!(pins.last_accepted_key(), Some(next_pin.clone()));

    pins.replace(vec![next_pin]).expect("a valid set");
    verify(&pins, &old, "h").expect_err("the retired key");

    assert_eq!(pins.replace(Vec::new()), Err(BadPinSet::Empty));
    let many: Vec<Pin> = (0..=MAX_PINS)
        .map(|i| Pin::Key(format!("{i:064x}")))
        .collect();
    assert_eq!(
        pins.replace(many),
        Err(BadPinSet::TooMany {
            count: MAX_PINS + 1
        })
    );
    verify(&pins, &next, "h").expect("a refused replacement changes nothing");
}

/// A CA, and a leaf for `name` it issued.
fn ca_and_leaf(name: &str) -> (rcgen::Certificate, CertificateDer<'static>, Pin) {
    let ca_key = key();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "Bosun test CA");
    let ca = params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(params, ca_key);
    let leaf_key = key();
    let leaf = rcgen::CertificateParams::new(vec![name.to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap()
        .der()
        .clone();
    let pin = Pin::of_key(&leaf).unwrap();
    (ca, leaf, pin)
}

#[test]
fn a_ca_trusts_the_names_it_certified_and_pins_narrow_it() {
    let dir = std::env::temp_dir().join(format!("bosun-pin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ca, leaf, pin) = ca_and_leaf("hub.example");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();

    let roots = CaRoots::File(ca_file.clone());
    let by_ca = verifier(
        &Trust::Ca {
            roots: roots.clone(),
            pins: Vec::new(),
        },
        provider(),
    )
    .expect("a verifier");
    assert!(
        by_ca.pin_set.is_none(),
        "a CA verifier has no replaceable pin set"
    );
    let by_ca = by_ca.verifier;
    verify(by_ca.as_ref(), &leaf, "hub.example").expect("issued for that name");
    verify(by_ca.as_ref(), &leaf, "other.example").expect_err("issued for another name");
    verify(by_ca.as_ref(), &super::tests::leaf(), "hub.example").expect_err("not issued by the CA");

    let ca_and_pin = verifier(
        &Trust::Ca {
            roots: roots.clone(),
            pins: vec![pin],
        },
        provider(),
    )
    .unwrap()
    .verifier;
    verify(ca_and_pin.as_ref(), &leaf, "hub.example").expect("issued and pinned");
    let (_, other_leaf, _) = ca_and_leaf("hub.example");
    let ca_and_other_pin = verifier(
        &Trust::Ca {
            roots,
            pins: vec![Pin::of_key(&other_leaf).unwrap()],
        },
        provider(),
    )
    .unwrap()
    .verifier;
    verify(ca_and_other_pin.as_ref(), &leaf, "hub.example")
        .expect_err("issued by the CA but not the pinned key");

    let empty = dir.join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let err = verifier(
        &Trust::Ca {
            roots: CaRoots::File(empty),
            pins: Vec::new(),
        },
        provider(),
    )
    .expect_err("no roots");
    assert!(matches!(err, TrustError::NoRoots { .. }), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
