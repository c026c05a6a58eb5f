use std::path::PathBuf;

use bosun_proto::desired::StorageType;
use bosun_proto::secret::SecretToken;
use secrecy::ExposeSecret as _;

use super::testing::{Operator, seal, seal_signed};
use super::*;
use crate::clock::SystemClock;

fn pbs(durable_id: &str, namespace: Option<&str>) -> TargetIdentity {
    TargetIdentity {
        kind: StorageType::Pbs,
        durable_id: durable_id.to_owned(),
        namespace: namespace.map(str::to_owned),
        username: None,
        serial: None,
    }
}

fn issued() -> Timestamp {
    "2026-11-20T00:00:00Z".parse().unwrap()
}

fn storage_document(host: Uuid, target: &TargetIdentity) -> Vec<u8> {
    serde_json::to_vec(&SealedCredential::new(
        host,
        target.clone(),
        issued(),
        SecretToken::new("pbs-password-4711"),
    ))
    .unwrap()
}

struct Stand {
    operator: Operator,
    opener: CredentialOpener,
    signers: PathBuf,
    _dir: tempfile::TempDir,
}

fn stand() -> Stand {
    let dir = tempfile::tempdir().unwrap();
    let identity = Arc::new(StorageIdentity::load_or_create(dir.path()).unwrap());
    let operator = Operator::new();
    let signers = operator.signers_file(&[operator.line(CREDENTIAL_NAMESPACE)]);
    let opener = CredentialOpener::new(identity, signers.clone(), Arc::new(SystemClock));
    Stand {
        operator,
        opener,
        signers,
        _dir: dir,
    }
}

fn assert_quiet(err: &CredentialError) {
    let text = format!("{err:?} {}", bosun_errchain::error_chain(err));
    assert!(!text.contains("4711"), "{text}");
}

#[test]
fn a_signed_credential_opens_only_for_its_host_and_its_whole_target() {
    let s = stand();
    let recipient = s.opener.identity().recipient();
    let host = Uuid::new_v4();
    let a = pbs("backup@pbs@pbs-a.example.net:store1", Some("host-a"));
    let document = storage_document(host, &a);
    let sealed = seal_signed(&recipient, &s.operator, CREDENTIAL_NAMESPACE, &document);

    let opened = s.opener.open_credential(&sealed, host, &a).unwrap();
    assert_eq!(opened.secret.expose_secret(), "pbs-password-4711");
    assert_eq!(opened.issued_at, issued());
    assert!(opened.signer.starts_with("SHA256:"), "{}", opened.signer);
    let again = seal_signed(&recipient, &s.operator, CREDENTIAL_NAMESPACE, &document);
    assert_ne!(again, sealed, "age seals afresh each time");
    assert_eq!(
        s.opener.open_credential(&again, host, &a).unwrap().digest,
        opened.digest,
        "one document, one digest"
    );

    // The hub copies it onto its own server, same user and datastore.
    let b = pbs("backup@pbs@pbs-b.example.net:store1", Some("host-a"));
    let err = s.opener.open_credential(&sealed, host, &b).unwrap_err();
    assert!(
        matches!(&err, CredentialError::OtherTarget { fields, sealed_durable_id, .. }
            if *fields == ["durable_id"] && sealed_durable_id == &a.durable_id),
        "{err:?}"
    );
    assert_quiet(&err);
    let other_namespace = pbs(&a.durable_id, Some("host-b"));
    let err = s
        .opener
        .open_credential(&sealed, host, &other_namespace)
        .unwrap_err();
    assert_eq!(err.differing_fields(), ["namespace"]);
    let mut cifs = a.clone();
    cifs.kind = StorageType::Cifs;
    cifs.username = Some("backup".to_owned());
    let err = s.opener.open_credential(&sealed, host, &cifs).unwrap_err();
    assert_eq!(err.differing_fields(), ["type", "username"]);

    // Sealed for another host (copied from its desired state).
    let elsewhere = Uuid::new_v4();
    let err = s
        .opener
        .open_credential(&sealed, elsewhere, &a)
        .unwrap_err();
    assert!(
        matches!(err, CredentialError::OtherHost { sealed_for, host_id, .. }
            if sealed_for == host && host_id == elsewhere),
        "{err:?}"
    );

    // Sealed to another host's identity.
    let other = tempfile::tempdir().unwrap();
    let stranger = StorageIdentity::load_or_create(other.path()).unwrap();
    let sealed_elsewhere = seal_signed(
        &stranger.recipient(),
        &s.operator,
        CREDENTIAL_NAMESPACE,
        &document,
    );
    let err = s
        .opener
        .open_credential(&sealed_elsewhere, host, &a)
        .unwrap_err();
    assert!(matches!(err, CredentialError::Open { .. }), "{err:?}");
}

#[test]
fn what_the_hub_could_seal_itself_never_opens() {
    let s = stand();
    let recipient = s.opener.identity().recipient();
    let host = Uuid::new_v4();
    let a = pbs("backup@pbs@pbs-a.example.net:store1", None);
    let document = storage_document(host, &a);

    // Sealed before signatures: a bare v1 document. Refused, asking for a reseal.
    let mut legacy = serde_json::to_value(SealedCredential::new(
        host,
        a.clone(),
        issued(),
        SecretToken::new("pbs-password-4711"),
    ))
    .unwrap();
    legacy["schema"] = "bosun.sealed-credential/v1".into();
    legacy.as_object_mut().unwrap().remove("issued_at");
    let err = s
        .opener
        .open_credential(&seal(&recipient, legacy.to_string().as_bytes()), host, &a)
        .unwrap_err();
    assert!(matches!(err, CredentialError::Unsigned { .. }), "{err:?}");
    assert!(err.wants_reseal());
    assert!(err.to_string().contains("bosunctl secret seal"), "{err}");
    assert_quiet(&err);

    // A raw password.
    let err = s
        .opener
        .open_credential(&seal(&recipient, b"pbs-password-4711"), host, &a)
        .unwrap_err();
    assert!(
        matches!(err, CredentialError::NotACredential { .. }),
        "{err:?}"
    );
    assert_quiet(&err);

    // The hub's own key, in the right namespace: not in allowed_signers.
    let hub = Operator::new();
    let forged = seal_signed(&recipient, &hub, CREDENTIAL_NAMESPACE, &document);
    let err = s.opener.open_credential(&forged, host, &a).unwrap_err();
    assert!(
        matches!(
            err,
            CredentialError::Signature {
                source: SignatureError::UnknownSigner { .. },
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.wants_reseal());
    assert_quiet(&err);

    // The operator's signature, but from another namespace (a job or a plan signature
    // replayed over a credential the hub wrote).
    let other_namespace = seal_signed(&recipient, &s.operator, "bosun-policy@v1", &document);
    let err = s
        .opener
        .open_credential(&other_namespace, host, &a)
        .unwrap_err();
    assert!(
        matches!(
            err,
            CredentialError::Signature {
                source: SignatureError::WrongNamespace { .. },
                ..
            }
        ),
        "{err:?}"
    );

    // The operator's signature over one document, another document beside it.
    let signature = s.operator.sign(&document, CREDENTIAL_NAMESPACE);
    let mut swapped = serde_json::to_value(SealedCredential::new(
        host,
        a.clone(),
        issued(),
        SecretToken::new("hub-password-4711"),
    ))
    .unwrap();
    swapped["issued_at"] = "2026-11-20T00:00:00Z".into();
    let spliced = CredentialEnvelope::new(swapped.to_string().as_bytes(), &signature);
    let err = s
        .opener
        .open_credential(&seal(&recipient, &spliced.to_plaintext()), host, &a)
        .unwrap_err();
    assert!(
        matches!(
            err,
            CredentialError::Signature {
                source: SignatureError::BadSignature { .. },
                ..
            }
        ),
        "{err:?}"
    );
    assert_quiet(&err);

    // A key trusted for plans only does not sign credentials.
    let plans_only = s
        .operator
        .signers_file(&[s.operator.line("bosun-policy@v1")]);
    assert_eq!(plans_only, s.signers);
    let good = seal_signed(&recipient, &s.operator, CREDENTIAL_NAMESPACE, &document);
    assert!(matches!(
        s.opener.open_credential(&good, host, &a),
        Err(CredentialError::Signature { .. })
    ));
    // Trusted again: it opens. Removing the line revoked it, no restart needed.
    s.operator
        .signers_file(&[s.operator.line(CREDENTIAL_NAMESPACE)]);
    s.opener.open_credential(&good, host, &a).unwrap();
    assert_unreadable_signers_refuse(&s, &good, host, &a);
}

fn assert_unreadable_signers_refuse(
    s: &Stand,
    good: &SealedSecret,
    host: Uuid,
    a: &TargetIdentity,
) {
    std::fs::remove_file(&s.signers).unwrap();
    assert!(matches!(
        s.opener.open_credential(good, host, a),
        Err(CredentialError::Signers { .. })
    ));
}

#[test]
fn tunnel_credentials_open_only_for_their_host_and_tunnel() {
    let s = stand();
    let recipient = s.opener.identity().recipient();
    let (host, tunnel) = (Uuid::new_v4(), Uuid::new_v4());
    let seal_tunnel = |host_id, tunnel_id| {
        let document = serde_json::to_vec(&TunnelCredential::new(
            host_id,
            tunnel_id,
            issued(),
            SecretToken::new("tunnel-secret-4711"),
        ))
        .unwrap();
        seal_signed(&recipient, &s.operator, CREDENTIAL_NAMESPACE, &document)
    };
    let sealed = seal_tunnel(host, tunnel);
    let opened = s
        .opener
        .open_tunnel_credential(&sealed, host, tunnel)
        .unwrap();
    assert_eq!(opened.secret.expose_secret(), "tunnel-secret-4711");

    let other_tunnel = Uuid::new_v4();
    let mut refusals = Vec::new();
    let err = s
        .opener
        .open_tunnel_credential(&seal_tunnel(host, other_tunnel), host, tunnel)
        .unwrap_err();
    assert!(
        matches!(err, CredentialError::OtherTunnel { sealed_for, .. } if sealed_for == other_tunnel),
        "{err:?}"
    );
    assert_eq!(err.differing_fields(), ["tunnel_id"]);
    refusals.push(err);
    let err = s
        .opener
        .open_tunnel_credential(&seal_tunnel(Uuid::new_v4(), tunnel), host, tunnel)
        .unwrap_err();
    assert_eq!(err.differing_fields(), ["host_id"]);
    refusals.push(err);
    // A storage credential signed for this host is not the tunnel's, nor the other way.
    let target = pbs("backup@pbs@p:s", None);
    let storage = seal_signed(
        &recipient,
        &s.operator,
        CREDENTIAL_NAMESPACE,
        &storage_document(host, &target),
    );
    let err = s
        .opener
        .open_tunnel_credential(&storage, host, tunnel)
        .unwrap_err();
    assert!(
        matches!(err, CredentialError::NotATunnelCredential { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("--tunnel-id"), "{err}");
    refusals.push(err);
    let err = s
        .opener
        .open_credential(&sealed, host, &target)
        .unwrap_err();
    assert!(
        matches!(err, CredentialError::NotACredential { .. }),
        "{err:?}"
    );
    refusals.push(err);
    for err in refusals {
        assert_quiet(&err);
    }
}
