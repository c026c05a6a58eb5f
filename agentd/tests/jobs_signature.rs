//! Job signatures checked against real `ssh-keygen -Y sign` output, and FIDO
//! (`sk-`) signatures built in the test following OpenSSH's PROTOCOL.u2f
//! layout (no hardware needed). Positive cases are cross-checked with
//! `ssh-keygen -Y verify`.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a panic is a failed test with its location"
)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine as _;
use bosun_agentd::trust::signing::{
    AllowedSigners, AllowedSignersError, JOB_NAMESPACE, SignatureError, verify_job_signature,
};
use jiff::Timestamp;
use rcgen::SigningKey as _;
use sha2::{Digest, Sha256};
use ssh_key::{HashAlg, PublicKey, SshSig};

const JOB: &[u8] = br#"{"schema":"bosun.job/v1","job_id":"j-1","kind":"restore"}"#;

struct Lab {
    dir: tempfile::TempDir,
}

impl Lab {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Generates a key with ssh-keygen; returns the public key line.
    fn keygen(&self, name: &str, key_type: &str) -> String {
        let out = Command::new("ssh-keygen")
            .args(["-q", "-t", key_type, "-N", "", "-C", name, "-f"])
            .arg(self.path(name))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        fs::read_to_string(self.path(&format!("{name}.pub")))
            .unwrap()
            .trim()
            .to_owned()
    }

    /// Signs `data` with ssh-keygen; returns the armored signature.
    fn sign(&self, key: &str, namespace: &str, data: &[u8]) -> String {
        let file = self.path("job.json");
        fs::write(&file, data).unwrap();
        let sig = self.path("job.json.sig");
        let _ = fs::remove_file(&sig);
        let out = Command::new("ssh-keygen")
            .args(["-Y", "sign", "-n", namespace, "-f"])
            .arg(self.path(key))
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        fs::read_to_string(sig).unwrap()
    }

    /// Asks `ssh-keygen -Y verify` for its verdict.
    fn cli_verify(&self, allowed: &str, principal: &str, data: &[u8], sig: &str) -> bool {
        let allowed_path = self.path("allowed_signers");
        fs::write(&allowed_path, allowed).unwrap();
        let sig_path = self.path("cli.sig");
        fs::write(&sig_path, sig).unwrap();
        let mut child = Command::new("ssh-keygen")
            .args(["-Y", "verify", "-n", JOB_NAMESPACE, "-I", principal, "-f"])
            .arg(&allowed_path)
            .arg("-s")
            .arg(&sig_path)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(data).unwrap();
        }
        child.wait().unwrap().success()
    }

    fn fingerprint(&self, name: &str) -> String {
        let out = Command::new("ssh-keygen")
            .args(["-l", "-E", "sha256", "-f"])
            .arg(self.path(&format!("{name}.pub")))
            .output()
            .unwrap();
        String::from_utf8(out.stdout)
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .to_owned()
    }
}

fn now() -> Timestamp {
    Timestamp::now()
}

fn signers(text: &str) -> AllowedSigners {
    AllowedSigners::parse(text).unwrap()
}

#[test]
fn stock_ssh_keygen_signatures_verify_for_ed25519_and_ecdsa() {
    for key_type in ["ed25519", "ecdsa"] {
        let lab = Lab::new();
        let public = lab.keygen("ops", key_type);
        let allowed = format!("# operators\nops@example.com {public}\n");
        let sig = lab.sign("ops", JOB_NAMESPACE, JOB);
        let signer = verify_job_signature(&signers(&allowed), JOB, &sig, now()).unwrap();
        assert_eq!(signer.principals(), "ops@example.com");
        assert_eq!(signer.fingerprint(), lab.fingerprint("ops"));
        assert_eq!(signer.line(), 2);
        assert!(
            lab.cli_verify(&allowed, "ops@example.com", JOB, &sig),
            "ssh-keygen disagrees"
        );
    }
}

#[test]
fn refuses_wrong_namespace_tampered_bytes_and_unknown_signers() {
    let lab = Lab::new();
    let ops = lab.keygen("ops", "ed25519");
    let _ = lab.keygen("stranger", "ed25519");
    let allowed = format!("ops@example.com {ops}\n");
    let list = signers(&allowed);

    let other_ns = lab.sign("ops", "file", JOB);
    let err = verify_job_signature(&list, JOB, &other_ns, now()).unwrap_err();
    assert!(
        matches!(&err, SignatureError::WrongNamespace { found, .. } if found == "file"),
        "{err:?}"
    );
    assert!(!lab.cli_verify(&allowed, "ops@example.com", JOB, &other_ns));

    let sig = lab.sign("ops", JOB_NAMESPACE, JOB);
    let mut tampered = JOB.to_vec();
    tampered[20] ^= 1;
    let err = verify_job_signature(&list, &tampered, &sig, now()).unwrap_err();
    assert!(
        matches!(err, SignatureError::BadSignature { .. }),
        "{err:?}"
    );
    assert!(!lab.cli_verify(&allowed, "ops@example.com", &tampered, &sig));

    let by_stranger = lab.sign("stranger", JOB_NAMESPACE, JOB);
    let err = verify_job_signature(&list, JOB, &by_stranger, now()).unwrap_err();
    assert!(
        matches!(&err, SignatureError::UnknownSigner { fingerprint } if *fingerprint == lab.fingerprint("stranger")),
        "{err:?}"
    );
    assert!(!lab.cli_verify(&allowed, "ops@example.com", JOB, &by_stranger));

    for garbage in [
        "",
        "not a signature",
        "-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----\n",
    ] {
        let err = verify_job_signature(&list, JOB, garbage, now()).unwrap_err();
        assert!(
            matches!(err, SignatureError::Malformed { .. }),
            "{garbage:?}: {err:?}"
        );
    }
}

#[test]
fn refuses_a_signer_listed_for_other_namespaces() {
    let lab = Lab::new();
    let ops = lab.keygen("ops", "ed25519");
    let sig = lab.sign("ops", JOB_NAMESPACE, JOB);

    let narrow = format!("ops@example.com namespaces=\"git,file\" {ops}\n");
    let err = verify_job_signature(&signers(&narrow), JOB, &sig, now()).unwrap_err();
    assert!(
        matches!(err, SignatureError::NamespaceNotAllowed { line: 1, .. }),
        "{err:?}"
    );
    assert!(!lab.cli_verify(&narrow, "ops@example.com", JOB, &sig));

    let negated = format!("ops@example.com namespaces=\"*,!bosun-job@*\" {ops}\n");
    let err = verify_job_signature(&signers(&negated), JOB, &sig, now()).unwrap_err();
    assert!(
        matches!(err, SignatureError::NamespaceNotAllowed { .. }),
        "{err:?}"
    );
    assert!(!lab.cli_verify(&negated, "ops@example.com", JOB, &sig));

    let wildcard = format!("ops@example.com namespaces=\"bosun-job@*\" {ops}\n");
    verify_job_signature(&signers(&wildcard), JOB, &sig, now()).unwrap();
    assert!(lab.cli_verify(&wildcard, "ops@example.com", JOB, &sig));

    // A second line for the same key that does allow the namespace wins.
    let two = format!("git@example.com namespaces=\"git\" {ops}\nops@example.com {ops}\n");
    let signer = verify_job_signature(&signers(&two), JOB, &sig, now()).unwrap();
    assert_eq!((signer.line(), signer.principals()), (2, "ops@example.com"));
}

#[test]
fn refuses_a_signer_outside_its_validity_window() {
    let lab = Lab::new();
    let ops = lab.keygen("ops", "ed25519");
    let sig = lab.sign("ops", JOB_NAMESPACE, JOB);

    let future = format!("ops@example.com valid-after=\"20990101Z\" {ops}\n");
    let err = verify_job_signature(&signers(&future), JOB, &sig, now()).unwrap_err();
    assert!(matches!(err, SignatureError::NotYetValid { .. }), "{err:?}");
    assert!(!lab.cli_verify(&future, "ops@example.com", JOB, &sig));

    let past = format!("ops@example.com valid-before=\"20200101Z\" {ops}\n");
    let err = verify_job_signature(&signers(&past), JOB, &sig, now()).unwrap_err();
    assert!(
        matches!(err, SignatureError::SignerExpired { .. }),
        "{err:?}"
    );
    assert!(!lab.cli_verify(&past, "ops@example.com", JOB, &sig));

    let window =
        format!("ops@example.com valid-after=\"20200101Z\",valid-before=\"209901011230Z\" {ops}\n");
    verify_job_signature(&signers(&window), JOB, &sig, now()).unwrap();
    assert!(lab.cli_verify(&window, "ops@example.com", JOB, &sig));

    // The window is judged at the time given, i.e. the agent's clock.
    let at: Timestamp = "2099-01-01T12:30:01Z".parse().unwrap();
    let err = verify_job_signature(&signers(&window), JOB, &sig, at).unwrap_err();
    assert!(
        matches!(err, SignatureError::SignerExpired { .. }),
        "{err:?}"
    );
    let edge: Timestamp = "2099-01-01T12:30:00Z".parse().unwrap();
    verify_job_signature(&signers(&window), JOB, &sig, edge).unwrap();
}

#[test]
fn refuses_unsupported_key_types_in_the_file() {
    let lab = Lab::new();
    let rsa = lab.keygen("rsa", "rsa");
    let ed = lab.keygen("ed", "ed25519");
    let text = format!("a@example.com {ed}\nb@example.com {rsa}\n");
    let err = AllowedSigners::parse(&text).unwrap_err();
    assert!(
        matches!(&err, AllowedSignersError::UnsupportedKeyType { line: 2, key_type } if key_type == "ssh-rsa"),
        "{err:?}"
    );
    let text = format!("a@example.com cert-authority {ed}\n");
    let err = AllowedSigners::parse(&text).unwrap_err();
    assert!(
        matches!(
            err,
            AllowedSignersError::CertAuthorityUnsupported { line: 1 }
        ),
        "{err:?}"
    );
}

// ---- FIDO signatures, built by hand ----------------------------------------

fn put_string(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&u32::try_from(bytes.len()).unwrap().to_be_bytes());
    out.extend_from_slice(bytes);
}

fn put_mpint(out: &mut Vec<u8>, unsigned_be: &[u8]) {
    let trimmed: Vec<u8> = unsigned_be
        .iter()
        .copied()
        .skip_while(|b| *b == 0)
        .collect();
    let mut value = Vec::new();
    if trimmed.first().is_some_and(|b| b & 0x80 != 0) {
        value.push(0);
    }
    value.extend(trimmed);
    put_string(out, &value);
}

/// (r, s) from a DER `Ecdsa-Sig-Value`.
fn der_ecdsa(der: &[u8]) -> (Vec<u8>, Vec<u8>) {
    assert_eq!(der[0], 0x30);
    let mut at = 2;
    let mut int = || {
        assert_eq!(der[at], 0x02);
        let len = der[at + 1] as usize;
        let value = der[at + 2..at + 2 + len].to_vec();
        at += 2 + len;
        value
    };
    let r = int();
    let s = int();
    (r, s)
}

enum Fido {
    Ed25519,
    EcdsaP256,
}

/// Signs `message` like a FIDO authenticator behind `ssh-keygen -Y sign`
/// would (PROTOCOL.u2f): the authenticator signs
/// `SHA256(application) ‖ flags ‖ counter ‖ SHA256(SSHSIG signed data)`.
/// Returns (public key line, armored signature).
fn fido_sign(kind: &Fido, namespace: &str, message: &[u8], flags: u8) -> (String, String) {
    let application = "ssh:";
    let counter: u32 = 7;
    let (alg, key_pair) = match kind {
        Fido::Ed25519 => (
            "sk-ssh-ed25519@openssh.com",
            rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap(),
        ),
        Fido::EcdsaP256 => (
            "sk-ecdsa-sha2-nistp256@openssh.com",
            rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap(),
        ),
    };
    let mut blob = Vec::new();
    put_string(&mut blob, alg.as_bytes());
    if let Fido::EcdsaP256 = kind {
        put_string(&mut blob, b"nistp256");
    }
    put_string(&mut blob, key_pair.public_key_raw());
    put_string(&mut blob, application.as_bytes());
    let public = PublicKey::from_bytes(&blob).unwrap();

    let signed_data = SshSig::signed_data(namespace, HashAlg::Sha512, message).unwrap();
    let mut to_sign = Vec::new();
    to_sign.extend_from_slice(&Sha256::digest(application));
    to_sign.push(flags);
    to_sign.extend_from_slice(&counter.to_be_bytes());
    to_sign.extend_from_slice(&Sha256::digest(&signed_data));
    let raw = key_pair.sign(&to_sign).unwrap();

    // The signature as OpenSSH encodes it: the algorithm, the authenticator's
    // signature as a string, then flags and counter outside that string.
    let mut inner = Vec::new();
    match kind {
        Fido::Ed25519 => inner.extend_from_slice(&raw),
        Fido::EcdsaP256 => {
            let (r, s) = der_ecdsa(&raw);
            put_mpint(&mut inner, &r);
            put_mpint(&mut inner, &s);
        }
    }
    let mut signature = Vec::new();
    put_string(&mut signature, alg.as_bytes());
    put_string(&mut signature, &inner);
    signature.push(flags);
    signature.extend_from_slice(&counter.to_be_bytes());

    // The SSHSIG blob (PROTOCOL.sshsig), armored like ssh-keygen does.
    let mut sshsig = Vec::new();
    sshsig.extend_from_slice(b"SSHSIG");
    sshsig.extend_from_slice(&1u32.to_be_bytes());
    put_string(&mut sshsig, &blob);
    put_string(&mut sshsig, namespace.as_bytes());
    put_string(&mut sshsig, b"");
    put_string(&mut sshsig, b"sha512");
    put_string(&mut sshsig, &signature);
    let b64 = base64::engine::general_purpose::STANDARD.encode(&sshsig);
    let mut armored = String::from("-----BEGIN SSH SIGNATURE-----\n");
    for chunk in b64.as_bytes().chunks(70) {
        armored.push_str(std::str::from_utf8(chunk).unwrap());
        armored.push('\n');
    }
    armored.push_str("-----END SSH SIGNATURE-----\n");
    (public.to_openssh().unwrap(), armored)
}

#[test]
fn fido_signatures_verify_and_ssh_keygen_agrees() {
    for kind in [Fido::Ed25519, Fido::EcdsaP256] {
        let lab = Lab::new();
        let (public, sig) = fido_sign(&kind, JOB_NAMESPACE, JOB, 0x01);
        let allowed = format!("ops@example.com {public}\n");
        let signer = verify_job_signature(&signers(&allowed), JOB, &sig, now()).unwrap();
        assert!(
            signer.key_type().starts_with("sk-"),
            "{}",
            signer.key_type()
        );
        assert!(
            lab.cli_verify(&allowed, "ops@example.com", JOB, &sig),
            "ssh-keygen disagrees"
        );

        let mut tampered = JOB.to_vec();
        tampered.push(b' ');
        let err = verify_job_signature(&signers(&allowed), &tampered, &sig, now()).unwrap_err();
        assert!(
            matches!(err, SignatureError::BadSignature { .. }),
            "{err:?}"
        );
        assert!(!lab.cli_verify(&allowed, "ops@example.com", &tampered, &sig));

        let (_, wrong_ns) = fido_sign(&kind, "file", JOB, 0x01);
        let err = verify_job_signature(&signers(&allowed), JOB, &wrong_ns, now()).unwrap_err();
        assert!(
            matches!(err, SignatureError::WrongNamespace { .. }),
            "{err:?}"
        );
    }
}

#[test]
fn fido_signature_without_user_presence_is_refused() {
    for kind in [Fido::Ed25519, Fido::EcdsaP256] {
        let (public, sig) = fido_sign(&kind, JOB_NAMESPACE, JOB, 0x00);
        let allowed = format!("ops@example.com {public}\n");
        let err = verify_job_signature(&signers(&allowed), JOB, &sig, now()).unwrap_err();
        assert!(
            matches!(err, SignatureError::NoUserPresence { .. }),
            "{err:?}"
        );
    }
}

#[test]
fn loads_the_file_from_disk() {
    let lab = Lab::new();
    let ops = lab.keygen("ops", "ed25519");
    let path = lab.path("allowed_signers");
    fs::write(&path, format!("\n  # comment\n\nops@example.com {ops}\n")).unwrap();
    let list = AllowedSigners::load(&path).unwrap();
    assert_eq!(list.entries().len(), 1);
    let err = AllowedSigners::load(Path::new("/nonexistent/allowed_signers")).unwrap_err();
    assert!(matches!(err, AllowedSignersError::Read { .. }), "{err:?}");
}
