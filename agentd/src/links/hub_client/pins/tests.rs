use std::os::unix::fs::PermissionsExt as _;

use bosun_proto::hub_pins::HUB_PINS_SCHEMA;
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

/// An operator key made by `ssh-keygen`, signing with `ssh-keygen -Y sign`.
struct Operator {
    dir: tempfile::TempDir,
}

impl Operator {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "op", "-f"])
            .arg(dir.path().join("key"))
            .status()
            .unwrap();
        assert!(status.success());
        Self { dir }
    }

    /// This key's `allowed_signers` line for `namespaces`.
    fn line(&self, namespaces: &str) -> String {
        let public = std::fs::read_to_string(self.dir.path().join("key.pub")).unwrap();
        format!("op@example namespaces=\"{namespaces}\" {}\n", public.trim())
    }

    fn sign(&self, bytes: &[u8], namespace: &str) -> String {
        let file = self.dir.path().join("doc");
        std::fs::write(&file, bytes).unwrap();
        let _ = std::fs::remove_file(self.dir.path().join("doc.sig"));
        let status = std::process::Command::new("ssh-keygen")
            .args(["-q", "-Y", "sign", "-n", namespace, "-f"])
            .arg(self.dir.path().join("key"))
            .arg(&file)
            .status()
            .unwrap();
        assert!(status.success());
        std::fs::read_to_string(self.dir.path().join("doc.sig")).unwrap()
    }

    /// A pin set of `pins` under `serial`, for `host` (or the fleet), signed in `namespace`.
    fn set(
        &self,
        serial: u64,
        host: Option<Uuid>,
        pins: &[&Pin],
        namespace: &str,
    ) -> SignedDocument {
        let doc = HubPinsDocument {
            schema: HUB_PINS_SCHEMA.into(),
            serial,
            issued_at: Timestamp::UNIX_EPOCH,
            host_id: host,
            pins: pins.iter().map(|p| p.to_string()).collect(),
        };
        let bytes = serde_json::to_vec(&doc).unwrap();
        SignedDocument::new(&bytes, &self.sign(&bytes, namespace))
    }
}

struct Fixture {
    dir: tempfile::TempDir,
    signers: PathBuf,
    operator: Operator,
    host: Uuid,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let operator = Operator::new();
        let signers = dir.path().join("allowed_signers");
        std::fs::write(&signers, operator.line("bosun-policy@v1")).unwrap();
        Self {
            dir,
            signers,
            operator,
            host: Uuid::new_v4(),
        }
    }

    fn open(&self, configured: &[Pin]) -> (HubPins, Arc<PinSet>) {
        let trust = set(configured.to_vec());
        let pins = HubPins::open(
            self.dir.path(),
            configured,
            Arc::clone(&trust),
            &self.signers,
            Timestamp::now(),
        )
        .unwrap();
        (pins, trust)
    }

    fn signed(&self, serial: u64, pins: &[&Pin]) -> SignedDocument {
        self.operator.set(serial, None, pins, HUB_PINS_NAMESPACE)
    }
}

#[test]
fn an_unsigned_announcement_of_a_key_holder_is_ignored_and_reported_once() {
    let f = Fixture::new();
    let (old_cert, old) = hub_key();
    let (attacker_cert, attacker) = hub_key();
    let (pins, trust) = f.open(std::slice::from_ref(&old));
    // The holder of the current key announces only its own, in every answer.
    let announced = vec![attacker.to_string()];
    assert!(pins.unsigned(&announced), "reported the first time");
    for _ in 0..20 {
        assert!(!pins.unsigned(&announced), "not once a poll");
    }
    assert!(
        !handshake(&trust, &attacker_cert),
        "the attacker's key is not trusted"
    );
    assert!(handshake(&trust, &old_cert));
    assert_eq!(pins.trusted(), vec![old.to_string()]);
    assert!(!f.dir.path().join(FILE).exists(), "nothing journaled");
}

#[test]
fn a_signed_set_is_taken_journaled_and_trusted_after_a_restart_beside_the_configured_pins() {
    let f = Fixture::new();
    let (old_cert, old) = hub_key();
    let (next_cert, next) = hub_key();
    let configured = vec![old.clone()];
    let (pins, trust) = f.open(&configured);
    assert_eq!(
        pins.to_send(),
        vec![old.to_string()],
        "told on the first poll"
    );
    pins.answered(&[old.to_string()]);
    assert!(pins.to_send().is_empty(), "not again once the hub has them");

    let staged = f.signed(1, &[&old, &next]);
    assert!(matches!(
        pins.adopt(&staged, f.host, Timestamp::now()).unwrap(),
        Adopted::Taken { serial: 1, .. }
    ));
    assert_eq!(
        pins.adopt(&staged, f.host, Timestamp::now()).unwrap(),
        Adopted::Current,
        "the same set again changes nothing"
    );
    assert!(handshake(&trust, &next_cert) && handshake(&trust, &old_cert));
    let mut expected = vec![next.to_string(), old.to_string()];
    expected.sort();
    assert_eq!(pins.to_send(), expected, "the hub is told what changed");
    let mode = std::fs::metadata(f.dir.path().join(FILE))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // After the retirement the operator signs the new key alone: the configured key stays
    // trusted, so the hub holding it always gets back in.
    let retired = f.signed(2, &[&next]);
    assert!(pins.adopt(&retired, f.host, Timestamp::now()).is_ok());
    assert!(handshake(&trust, &next_cert));
    assert!(
        handshake(&trust, &old_cert),
        "the configured key stays trusted"
    );
    let (restarted, restarted_trust) = f.open(&configured);
    assert_eq!(restarted.serial(), Some(2));
    assert!(handshake(&restarted_trust, &next_cert));
    assert!(handshake(&restarted_trust, &old_cert));

    // An older set replayed moves nothing, after the restart too.
    assert!(matches!(
        restarted.adopt(&staged, f.host, Timestamp::now()),
        Err(AdoptError::Refused(Refused::Stale {
            offered: 1,
            held: 2
        }))
    ));
}

#[test]
fn a_set_not_signed_by_the_operator_for_this_host_is_refused_and_changes_nothing() {
    let f = Fixture::new();
    let (_, old) = hub_key();
    let (stranger_cert, stranger) = hub_key();
    let (pins, trust) = f.open(std::slice::from_ref(&old));
    let now = Timestamp::now();
    let refused = |signed: &SignedDocument| match pins.adopt(signed, f.host, now) {
        Err(AdoptError::Refused(r)) => r,
        other => panic!("taken: {other:?}"),
    };
    // Signed by a key the agent does not know (the hub's own operator-looking key).
    let outsider = Operator::new();
    let forged = outsider.set(5, None, &[&stranger], HUB_PINS_NAMESPACE);
    assert!(matches!(refused(&forged), Refused::Signature(_)));
    assert_eq!(refused(&forged), Refused::RefusedBefore, "audited once");
    // The operator's key, but signed for jobs.
    let job_ns = f.operator.set(6, None, &[&stranger], "bosun-job@v1");
    assert!(matches!(refused(&job_ns), Refused::Signature(_)));
    // The operator's key, for another host.
    let other = f
        .operator
        .set(7, Some(Uuid::new_v4()), &[&stranger], HUB_PINS_NAMESPACE);
    assert!(matches!(refused(&other), Refused::OtherHost(_)));
    // Not a pin set at all.
    let plan = SignedDocument::new(b"{\"schema\":\"bosun.data-plan/v1\"}", "x");
    assert!(matches!(refused(&plan), Refused::Unusable(_)));
    assert!(!handshake(&trust, &stranger_cert));
    assert_eq!(pins.trusted(), vec![old.to_string()]);
    assert!(!f.dir.path().join(FILE).exists(), "nothing journaled");

    // Bound to this host: taken.
    let mine = f
        .operator
        .set(8, Some(f.host), &[&stranger], HUB_PINS_NAMESPACE);
    assert!(pins.adopt(&mine, f.host, now).is_ok());
    assert!(handshake(&trust, &stranger_cert));
}

#[test]
fn an_unsigned_journal_from_before_and_a_set_whose_signer_left_are_not_trusted() {
    let f = Fixture::new();
    let (old_cert, old) = hub_key();
    let (attacker_cert, attacker) = hub_key();
    // What an agent before signed sets journaled after a key holder announced itself.
    std::fs::write(
        f.dir.path().join(FILE),
        serde_json::json!({ "configured": [old.to_string()], "pins": [attacker.to_string()] })
            .to_string(),
    )
    .unwrap();
    let (_, trust) = f.open(std::slice::from_ref(&old));
    assert!(
        handshake(&trust, &old_cert),
        "the configured key gets back in"
    );
    assert!(!handshake(&trust, &attacker_cert));

    // A signed set, then the operator removes its signer from allowed_signers.
    let (pins, _) = f.open(std::slice::from_ref(&old));
    pins.adopt(&f.signed(3, &[&attacker]), f.host, Timestamp::now())
        .unwrap();
    std::fs::write(&f.signers, "").unwrap();
    let (restarted, trust) = f.open(std::slice::from_ref(&old));
    assert!(!handshake(&trust, &attacker_cert), "its signer is gone");
    assert!(handshake(&trust, &old_cert));
    assert_eq!(restarted.serial(), None);
    // Its serial still counts: an older set is not taken even once the signer is back.
    std::fs::write(&f.signers, f.operator.line("bosun-policy@v1")).unwrap();
    assert!(matches!(
        restarted.adopt(&f.signed(2, &[&attacker]), f.host, Timestamp::now()),
        Err(AdoptError::Refused(Refused::Stale {
            offered: 2,
            held: 3
        }))
    ));
}

#[test]
fn a_damaged_journal_stops_the_agent_with_its_path() {
    let f = Fixture::new();
    let (_, old) = hub_key();
    let open = || {
        HubPins::open(
            f.dir.path(),
            std::slice::from_ref(&old),
            set(vec![old.clone()]),
            &f.signers,
            Timestamp::now(),
        )
    };
    std::fs::write(f.dir.path().join(FILE), b"{ not json").unwrap();
    let err = open().unwrap_err();
    assert!(err.to_string().contains(FILE), "{err}");
    std::fs::write(f.dir.path().join(FILE), vec![b' '; 20_000]).unwrap();
    let err = open().unwrap_err();
    assert!(err.to_string().contains("larger than"), "{err}");
}
