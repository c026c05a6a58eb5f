//! Operator keys and signatures made with the stock `ssh-keygen -Y sign`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use bosun_proto::job::SignedJob;
use serde_json::{Value, json};
use uuid::Uuid;

pub struct OperatorKey {
    pub key: PathBuf,
    dir: tempfile::TempDir,
}

impl OperatorKey {
    pub fn new(comment: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("id_ed25519");
        let status = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
            .arg(&key)
            .stdin(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        Self { key, dir }
    }

    /// The `allowed_signers` line for this key.
    pub fn allowed_line(&self, principal: &str) -> String {
        let public = std::fs::read_to_string(self.key.with_extension("pub")).unwrap();
        format!("{principal} {}", public.trim())
    }

    /// Signs `bytes` in `namespace`; gives the armored signature.
    pub fn sign(&self, bytes: &[u8], namespace: &str) -> String {
        let file = self
            .dir
            .path()
            .join(format!("job-{}.json", Uuid::new_v4().simple()));
        std::fs::write(&file, bytes).unwrap();
        sign_file(&self.key, &file, namespace)
    }
}

pub fn sign_file(key: &Path, file: &Path, namespace: &str) -> String {
    let mut sig = file.as_os_str().to_owned();
    sig.push(".sig");
    let sig = PathBuf::from(sig);
    let _ = std::fs::remove_file(&sig);
    let status = Command::new("ssh-keygen")
        .args(["-q", "-Y", "sign", "-n", namespace, "-f"])
        .arg(key)
        .arg(file)
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::read_to_string(sig).unwrap()
}

/// A job document valid from a minute ago for `hours`.
pub fn job_doc(kind: &str, host: Uuid, guest: Uuid, vmid: u32, params: Value, hours: i64) -> Value {
    let now = jiff::Timestamp::now();
    json!({
        "schema": "bosun.job/v1",
        "job_id": Uuid::new_v4(),
        "kind": kind,
        "target": { "host_id": host, "guest_id": guest, "vmid": vmid },
        "params": params,
        "nonce": format!("n-{}", Uuid::new_v4().simple()),
        "not_before": now - jiff::SignedDuration::from_secs(60),
        "expires_at": now + jiff::SignedDuration::from_hours(hours),
    })
}

pub fn envelope(bytes: &[u8], signature: &str) -> Value {
    serde_json::to_value(SignedJob::new(bytes, signature)).unwrap()
}

/// The harness's golden-archive signer: its key lives in memory (written to a temp dir only
/// while `ssh-keygen` signs), and every agent the harness configures trusts it for the
/// `bosun-golden@v1` namespace only.
struct GoldenSigner {
    public: String,
    private: String,
    signed: Mutex<HashMap<(String, String), Value>>,
}

fn golden_signer() -> &'static GoldenSigner {
    static SIGNER: OnceLock<GoldenSigner> = OnceLock::new();
    SIGNER.get_or_init(|| {
        let key = OperatorKey::new("golden@harness");
        GoldenSigner {
            public: std::fs::read_to_string(key.key.with_extension("pub"))
                .unwrap()
                .trim()
                .to_owned(),
            private: std::fs::read_to_string(&key.key).unwrap(),
            signed: Mutex::new(HashMap::new()),
        }
    })
}

/// The `allowed_signers` line trusting the harness's golden signer for golden archives only.
pub fn golden_signer_line() -> String {
    format!(
        "golden@harness namespaces=\"{}\" {}",
        bosun_proto::golden::GOLDEN_NAMESPACE,
        golden_signer().public
    )
}

/// A desired-state `golden` entry for `volid` with `sha256`, signed by the harness's golden
/// signer.
pub fn signed_golden(volid: &str, sha256: &str) -> Value {
    let signer = golden_signer();
    let key = (volid.to_owned(), sha256.to_owned());
    if let Some(entry) = signer.signed.lock().unwrap().get(&key) {
        return entry.clone();
    }
    let document =
        serde_json::to_vec(&bosun_proto::golden::GoldenDocument::new(volid, sha256)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let private = dir.path().join("id_ed25519");
    std::fs::write(&private, &signer.private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    let file = dir.path().join("golden.json");
    std::fs::write(&file, &document).unwrap();
    let signature = sign_file(&private, &file, bosun_proto::golden::GOLDEN_NAMESPACE);
    let signed = bosun_proto::golden::SignedGolden::new(&document, &signature);
    let entry = json!({ "volid": volid, "sha256": sha256, "signed": signed });
    signer.signed.lock().unwrap().insert(key, entry.clone());
    entry
}

/// A desired-state `golden_recipe` entry for `version` (controller `image` at `digest`),
/// signed by the harness's golden signer.
pub fn signed_golden_recipe(version: &str, image: &str, digest: &str) -> Value {
    let signer = golden_signer();
    let document = serde_json::to_vec(&bosun_proto::golden_recipe::GoldenRecipeDocument::new(
        version, image, digest,
    ))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let private = dir.path().join("id_ed25519");
    std::fs::write(&private, &signer.private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    let file = dir.path().join("recipe.json");
    std::fs::write(&file, &document).unwrap();
    let signature = sign_file(&private, &file, bosun_proto::golden::GOLDEN_NAMESPACE);
    serde_json::to_value(bosun_proto::signed::SignedDocument::new(
        &document, &signature,
    ))
    .unwrap()
}
