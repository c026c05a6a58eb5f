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

/// The harness's golden signer's signature over `bytes` in `bosun-golden@v1`.
fn golden_signature(bytes: &[u8]) -> String {
    let signer = golden_signer();
    let dir = tempfile::tempdir().unwrap();
    let private = dir.path().join("id_ed25519");
    std::fs::write(&private, &signer.private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    let file = dir.path().join("golden.json");
    std::fs::write(&file, bytes).unwrap();
    sign_file(&private, &file, bosun_proto::golden::GOLDEN_NAMESPACE)
}

/// A desired-state `golden` entry for `volid` with `sha256`, signed by the harness's golden
/// signer.
pub fn signed_golden(volid: &str, sha256: &str) -> Value {
    let signer = golden_signer();
    let key = (volid.to_owned(), sha256.to_owned());
    if let Some(entry) = signer.signed.lock().unwrap().get(&key) {
        return entry.clone();
    }
    let entry = signed_golden_document(&bosun_proto::golden::GoldenDocument::new(volid, sha256));
    signer.signed.lock().unwrap().insert(key, entry.clone());
    entry
}

/// A desired-state `golden` entry naming `document`'s archive, carrying `document` signed by
/// the harness's golden signer.
pub fn signed_golden_document(document: &bosun_proto::golden::GoldenDocument) -> Value {
    let bytes = serde_json::to_vec(document).unwrap();
    let signature = golden_signature(&bytes);
    let signed = bosun_proto::golden::SignedGolden::new(&bytes, &signature);
    json!({ "volid": document.volid, "sha256": document.sha256, "signed": signed })
}

/// A desired-state `golden_recipe` entry for `version` (controller `image` at `digest`),
/// signed by the harness's golden signer.
pub fn signed_golden_recipe(version: &str, image: &str, digest: &str) -> Value {
    signed_golden_recipe_document(&bosun_proto::golden_recipe::GoldenRecipeDocument::new(
        version, image, digest,
    ))
}

/// A desired-state `golden_recipe` entry of `recipe`, signed by the harness's golden signer.
#[allow(dead_code, reason = "not every suite signs a recipe of its own")]
pub fn signed_golden_recipe_document(
    recipe: &bosun_proto::golden_recipe::GoldenRecipeDocument,
) -> Value {
    let document = serde_json::to_vec(recipe).unwrap();
    let signature = golden_signature(&document);
    serde_json::to_value(bosun_proto::signed::SignedDocument::new(
        &document, &signature,
    ))
    .unwrap()
}

/// The harness's data-plan signer: like the golden signer, its key lives in memory, and every
/// agent the harness configures trusts it for the `bosun-policy@v1` namespace only (it stands
/// for the operator who signs each host's data plan).
fn plan_signer() -> &'static (String, String) {
    static SIGNER: OnceLock<(String, String)> = OnceLock::new();
    SIGNER.get_or_init(|| {
        let key = OperatorKey::new("plan@harness");
        (
            std::fs::read_to_string(key.key.with_extension("pub"))
                .unwrap()
                .trim()
                .to_owned(),
            std::fs::read_to_string(&key.key).unwrap(),
        )
    })
}

/// The `allowed_signers` line trusting the harness's plan signer for data plans and the
/// credentials sealed for them.
pub fn plan_signer_line() -> String {
    format!(
        "plan@harness namespaces=\"{},{}\" {}",
        bosun_proto::data_plan::PLAN_NAMESPACE,
        bosun_proto::sealed_credential::CREDENTIAL_NAMESPACE,
        plan_signer().0
    )
}

/// `credential` (a storage or tunnel credential document) signed by the harness's policy
/// operator and sealed to `recipient`: the armored ciphertext `bosunctl secret seal --key`
/// prints.
pub fn seal_signed<T: serde::Serialize>(recipient: &str, credential: &T) -> String {
    let document = serde_json::to_vec(credential).unwrap();
    let signature = sign_as_policy_operator(
        &document,
        bosun_proto::sealed_credential::CREDENTIAL_NAMESPACE,
    );
    let envelope = bosun_proto::sealed_credential::CredentialEnvelope::new(&document, &signature);
    bosunctl::secret::seal(recipient, &envelope)
        .unwrap()
        .armored()
        .to_owned()
}

/// The harness's policy operator's private key, written 0600 into `dir`: what an operator
/// passes to `bosunctl … --key`.
pub fn policy_operator_key(dir: &Path) -> PathBuf {
    let private = dir.join("policy-operator_ed25519");
    std::fs::write(&private, &plan_signer().1).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    private
}

/// `document` signed by the harness's policy operator in `namespace`.
pub fn sign_as_policy_operator(document: &[u8], namespace: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let private = dir.path().join("id_ed25519");
    std::fs::write(&private, &plan_signer().1).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    let file = dir.path().join("document.json");
    std::fs::write(&file, document).unwrap();
    sign_file(&private, &file, namespace)
}

/// The `allowed_signers` lines every agent the harness configures starts with: the golden
/// signer and the plan signer, each for its own namespace.
pub fn harness_signer_lines() -> String {
    format!("{}\n{}\n", golden_signer_line(), plan_signer_line())
}

/// Serials of the plans the harness signs: each one above every one before, so a test that
/// signs a new plan for a host always raises it.
fn next_serial() -> u64 {
    static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The data plan `desired`'s storage manifest and tiers describe for `host`, as the operator
/// would write it (credentials stay in desired state, sealed to their target), with a least
/// interval of one second (tests run schedules of a few seconds).
pub fn plan_of(desired: &Value, host: Uuid) -> bosun_proto::data_plan::DataPlan {
    let state: bosun_proto::desired::DesiredState =
        serde_json::from_value(desired.clone()).expect("a desired state");
    let policy = &state.backup_policy;
    let targets: Vec<bosun_proto::desired::StorageTarget> = state
        .storage
        .iter()
        .map(|t| bosun_proto::desired::StorageTarget {
            credentials: None,
            ..t.clone()
        })
        .filter(|t| plannable(t, host))
        .collect();
    let planned = |id: &String| targets.iter().any(|t| &t.durable_id == id);
    bosun_proto::data_plan::DataPlan {
        schema: bosun_proto::data_plan::PLAN_SCHEMA.to_owned(),
        host_id: host,
        serial: next_serial(),
        issued_at: jiff::Timestamp::now(),
        targets: targets.clone(),
        backup: bosun_proto::data_plan::PlanBackup {
            schedule: policy.schedule.clone(),
            retention: policy.retention,
            target: policy.target.clone().filter(|t| planned(t)),
            further_tiers: policy
                .further_tiers
                .iter()
                .filter(|t| planned(t))
                .cloned()
                .collect(),
            min_interval_seconds: 1,
            restore_test_days: None,
            verify_hours: None,
        },
        node_storages: Vec::new(),
        tunnel: None,
        bulk_backups: Vec::new(),
        guest_share: None,
        guest_access: Vec::new(),
    }
}

/// Whether `target` can stand in a signed plan at all (a plan refuses `/` as a path and a USB
/// target without a serial): what cannot is left out, and the agent refuses it as
/// `not_in_plan`.
fn plannable(target: &bosun_proto::desired::StorageTarget, host: Uuid) -> bool {
    bosun_proto::data_plan::DataPlan {
        schema: bosun_proto::data_plan::PLAN_SCHEMA.to_owned(),
        host_id: host,
        serial: 1,
        issued_at: jiff::Timestamp::UNIX_EPOCH,
        targets: vec![target.clone()],
        backup: bosun_proto::data_plan::PlanBackup {
            schedule: "daily".into(),
            retention: bosun_proto::desired::Retention::default(),
            target: None,
            further_tiers: Vec::new(),
            min_interval_seconds: 1,
            restore_test_days: None,
            verify_hours: None,
        },
        node_storages: Vec::new(),
        tunnel: None,
        bulk_backups: Vec::new(),
        guest_share: None,
        guest_access: Vec::new(),
    }
    .validate()
    .is_ok()
}

/// `plan` signed by the harness's plan signer, as desired state's `data_plan` carries it.
pub fn signed_plan(plan: &bosun_proto::data_plan::DataPlan) -> Value {
    let document = serde_json::to_vec(plan).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let private = dir.path().join("id_ed25519");
    std::fs::write(&private, &plan_signer().1).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    let file = dir.path().join("plan.json");
    std::fs::write(&file, &document).unwrap();
    let signature = sign_file(&private, &file, bosun_proto::data_plan::PLAN_NAMESPACE);
    serde_json::to_value(bosun_proto::signed::SignedDocument::new(
        &document, &signature,
    ))
    .unwrap()
}

/// Signs `document` as the harness's policy operator (the plan signer, trusted by every agent
/// the harness configures for `bosun-policy@v1`): what the operator does to a hub pin set.
pub fn sign_policy(document: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let private = dir.path().join("id_ed25519");
    std::fs::write(&private, &plan_signer().1).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    let file = dir.path().join("hub-pins.json");
    std::fs::write(&file, document).unwrap();
    sign_file(&private, &file, bosun_proto::hub_pins::HUB_PINS_NAMESPACE)
}

/// `desired` with a signed data plan for `host` naming exactly its storage targets and tiers:
/// what an operator signs for a host whose manifest they wrote.
pub fn with_plan(mut desired: Value, host: Uuid) -> Value {
    let plan = plan_of(&desired, host);
    desired["data_plan"] = signed_plan(&plan);
    desired
}
