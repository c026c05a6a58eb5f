//! Test support: a real operator key signing with `ssh-keygen -Y sign`, and credentials sealed
//! the way `bosunctl secret seal --key` seals them.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::str::FromStr;

use bosun_proto::sealed_credential::CredentialEnvelope;
use bosun_proto::secret::SealedSecret;

/// A real OpenSSH key, signing with `ssh-keygen -Y sign` on standard input, and the agent's
/// `allowed_signers` trusting it for credentials.
pub(crate) struct Operator {
    key: PathBuf,
    dir: tempfile::TempDir,
}

impl Operator {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("id_ed25519");
        let status = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "op@example", "-f"])
            .arg(&key)
            .status()
            .unwrap();
        assert!(status.success());
        Self { key, dir }
    }

    pub(crate) fn line(&self, namespaces: &str) -> String {
        let public = std::fs::read_to_string(self.key.with_extension("pub")).unwrap();
        format!("op@example namespaces=\"{namespaces}\" {}", public.trim())
    }

    pub(crate) fn sign(&self, bytes: &[u8], namespace: &str) -> String {
        use std::io::Write;
        let mut child = Command::new("ssh-keygen")
            .args(["-q", "-Y", "sign", "-n", namespace, "-f"])
            .arg(&self.key)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(bytes).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    }

    pub(crate) fn signers_file(&self, lines: &[String]) -> PathBuf {
        let path = self.dir.path().join("allowed_signers");
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        path
    }
}

pub(crate) fn seal(recipient: &str, plaintext: &[u8]) -> SealedSecret {
    let recipient = age::x25519::Recipient::from_str(recipient).unwrap();
    let armored = age::encrypt_and_armor(&recipient, plaintext).unwrap();
    SealedSecret::try_from(armored).unwrap()
}

/// `document` signed by `operator` in `namespace`, enveloped and sealed to `recipient`.
pub(crate) fn seal_signed(
    recipient: &str,
    operator: &Operator,
    namespace: &str,
    document: &[u8],
) -> SealedSecret {
    let envelope = CredentialEnvelope::new(document, &operator.sign(document, namespace));
    seal(recipient, &envelope.to_plaintext())
}
