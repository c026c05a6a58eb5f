//! The provisioning back half: token minting, `bootstrap.json` pushed into the guest through
//! the helper protocol, keep-unless-asked, crash ordering and certificate rotation — and full
//! provisioning runs (post-start) whose bootstrap token then works against the local API.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

use crate::localapi_support;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bosun_agentd::guests::credentials::bootstrap::{
    BootstrapEndpoints, BootstrapIssuer, IssueTarget, TokenPolicy,
};
use bosun_agentd::guests::credentials::cert::LocalApiCert;
use bosun_agentd::guests::reconcile::provision::Provisioner;
use bosun_agentd::links::helper::HelperClient;
use bosun_agentd::ops::journal::{NewOperation, StoredPlan, TokenHash};
use bosun_agentd::ops::operation::OpJournal;
use bosun_proto::bootstrap::PinnedEndpoint;
use bosun_proto::desired::{CustomerIdentity, GoldenArchive, GuestResources, GuestSpec, Power};
use bosun_proto::helper::Request;
use bosun_pve::Vmid;
use localapi_support::Harness;
use localapi_support::fake_helper::FakeHelper;
use secrecy::SecretString;
use uuid::Uuid;

fn customer() -> CustomerIdentity {
    CustomerIdentity {
        customer_id: "acme-01".to_owned(),
        display_name: "Acme Bakery".to_owned(),
    }
}

fn endpoints(h: &Harness) -> BootstrapEndpoints {
    BootstrapEndpoints {
        hub: PinnedEndpoint {
            url: "https://hub.example.net:8441".to_owned(),
            fingerprint: "ab".repeat(32),
        },
        local_api_url: h.base.clone(),
        local_api_fingerprint: h.fingerprint.clone(),
    }
}

/// The host the issuers of these tests run on.
const HOST: Uuid = Uuid::from_u128(0x4057);

fn bootstrap_issuer(h: &Harness, helper: &FakeHelper) -> BootstrapIssuer {
    BootstrapIssuer::new(
        Arc::new(HelperClient::socket(&helper.socket)),
        h.journal.clone(),
        endpoints(h),
        HOST,
    )
}

/// What the back half issues for `guest` at `vmid`.
fn target(guest: Uuid, vmid: u32) -> IssueTarget {
    IssueTarget {
        guest_id: guest,
        vmid: Vmid::new(vmid).unwrap(),
        customer: customer(),
    }
}

/// A local API harness without guests, a fake helper, and the back half over both.
async fn rig() -> (Harness, FakeHelper, BootstrapIssuer) {
    let h = Harness::start_with(localapi_support::Options {
        guests: 0,
        ..Default::default()
    })
    .await;
    let helper = FakeHelper::start(h.dir.path());
    let bh = bootstrap_issuer(&h, &helper);
    (h, helper, bh)
}

async fn op(h: &Harness, guest: Uuid) -> OpJournal {
    OpJournal::begin(
        &h.journal,
        NewOperation {
            kind: bosun_agentd::ops::operation::OpKind::Provision,
            guest_id: Some(guest.to_string()),
            vmid: Some(101),
            job_id: None,
            request_id: None,
        },
    )
    .await
    .unwrap()
}

async fn has_token(h: &Harness, guest: Uuid) -> bool {
    h.journal
        .token_of_guest(guest.to_string())
        .await
        .unwrap()
        .is_some()
}

async fn token_owner(h: &Harness, token: &str) -> Option<String> {
    h.journal
        .token_owner(TokenHash::of(&SecretString::from(token.to_owned())))
        .await
        .unwrap()
        .map(|o| o.guest_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_back_half_pushes_the_bootstrap_and_keeps_the_token_on_rerun() {
    let (h, helper, bh) = rig().await;
    let guest = Uuid::from_u128(0xb0);
    let target = target(guest, 101);
    let op1 = op(&h, guest).await;
    let outcome = bh
        .run(&op1, &target, TokenPolicy::KeepExisting)
        .await
        .unwrap();
    assert!(outcome.issued);
    assert_eq!(helper.verbs(), ["push_bootstrap"]);

    let file = helper.bootstrap_path(101);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let doc = helper.read_bootstrap(101);
    doc.validate().unwrap();
    assert_eq!(doc.schema, "bosun.bootstrap/v1");
    assert_eq!(doc.guest_id, guest);
    assert_eq!(doc.customer, customer());
    assert_eq!(doc.local_api.url, h.base);
    assert_eq!(doc.local_api.fingerprint, h.fingerprint);
    let token = doc.local_api.token.expose().to_owned();
    assert_eq!(
        token_owner(&h, &token).await.as_deref(),
        Some(guest.to_string().as_str())
    );

    {
        let calls = helper.calls.lock();
        let Request::PushBootstrap(push) = &calls[0] else {
            panic!("{calls:?}")
        };
        assert_eq!(push.vmid.get(), 101);
    }
    let minted = h
        .journal
        .token_of_guest(guest.to_string())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(minted.vmid, 101);
    let steps = h.journal.steps(op1.op_id()).await.unwrap();
    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["check_token", "push_bootstrap", "store_token"]);
    let details =
        serde_json::to_string(&steps.iter().map(|s| &s.detail).collect::<Vec<_>>()).unwrap();
    assert!(
        !details.contains(&token),
        "the token must not reach the journal"
    );

    // A re-run keeps the token and does not rewrite the file.
    let before = std::fs::read(&file).unwrap();
    let op2 = op(&h, guest).await;
    let again = bh
        .run(&op2, &target, TokenPolicy::KeepExisting)
        .await
        .unwrap();
    assert!(!again.issued);
    assert_eq!(std::fs::read(&file).unwrap(), before);
    assert_eq!(
        token_owner(&h, &token).await.as_deref(),
        Some(guest.to_string().as_str())
    );
    assert_eq!(
        helper
            .verbs()
            .iter()
            .filter(|v| **v == "push_bootstrap")
            .count(),
        1
    );

    // Asked to rotate: a new token, and the old one stops working.
    let op3 = op(&h, guest).await;
    assert!(
        bh.run(&op3, &target, TokenPolicy::Rotate)
            .await
            .unwrap()
            .issued
    );
    let rotated = helper
        .read_bootstrap(101)
        .local_api
        .token
        .expose()
        .to_owned();
    assert_ne!(rotated, token);
    assert_eq!(token_owner(&h, &token).await, None);
    assert!(token_owner(&h, &rotated).await.is_some());
    let steps = h.journal.steps(op3.op_id()).await.unwrap();
    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "check_token",
            "revoke_token",
            "push_bootstrap",
            "store_token"
        ]
    );

    // A rotation whose push fails leaves the guest without a token (reconcile delivers one
    // once it runs), never with a file whose token the journal does not know.
    helper.fail_writes.store(true, Ordering::SeqCst);
    let op4 = op(&h, guest).await;
    bh.run(&op4, &target, TokenPolicy::Rotate)
        .await
        .unwrap_err();
    assert_eq!(token_owner(&h, &rotated).await, None);
    assert!(!has_token(&h, guest).await);
    h.shutdown().await;
}

/// A data plan for `host` trusting `key` for `guest` (of `customer()`), as the journal stores it.
fn stored_plan(host: Uuid, serial: u64, guest: Uuid, key: &str) -> StoredPlan {
    let plan = serde_json::json!({
        "schema": "bosun.data-plan/v1",
        "host_id": host,
        "serial": serial,
        "issued_at": "2026-11-27T00:00:00Z",
        "targets": [],
        "backup": {
            "schedule": "daily",
            "retention": { "keep_last": 3 },
            "min_interval_seconds": 60
        },
        "guest_access": [{
            "guest_id": guest,
            "customer_id": customer().customer_id,
            "ssh_keys": [key]
        }]
    });
    let document = serde_json::to_vec(&plan).unwrap();
    // The journal's plan is one the keeper verified; this test is about reading it back.
    serde_json::from_slice::<bosun_proto::data_plan::DataPlan>(&document).unwrap();
    StoredPlan {
        document,
        signature: String::new(),
        serial,
        signer: "SHA256:test".to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_plan_signed_for_another_host_gives_the_guest_no_key() {
    const KEY: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFrAsKmOJHqtIFg4iUWCxW/iCF63k3IM0oiEv25WH7JH";
    let (h, helper, bh) = rig().await;
    let guest = Uuid::from_u128(0xb5);
    let target = target(guest, 105);
    // A journal carried over from the box this one replaced: its plan names that box.
    assert!(
        h.journal
            .store_plan(stored_plan(Uuid::from_u128(0xdead), 1, guest, KEY))
            .await
            .unwrap()
    );
    bh.run(&op(&h, guest).await, &target, TokenPolicy::KeepExisting)
        .await
        .unwrap();
    assert!(helper.read_bootstrap(105).ssh_authorized_keys.is_empty());

    // The operator signs a plan for this host: the next bootstrap carries its key.
    assert!(
        h.journal
            .store_plan(stored_plan(HOST, 2, guest, KEY))
            .await
            .unwrap()
    );
    bh.run(&op(&h, guest).await, &target, TokenPolicy::Rotate)
        .await
        .unwrap();
    let keys = helper.read_bootstrap(105).ssh_authorized_keys;
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0].as_str(), KEY);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_push_stores_no_token_so_the_next_pass_issues_again() {
    let (h, helper, bh) = rig().await;
    let guest = Uuid::from_u128(0xb1);
    let target = target(guest, 101);
    helper.fail_writes.store(true, Ordering::SeqCst);
    let err = bh
        .run(&op(&h, guest).await, &target, TokenPolicy::KeepExisting)
        .await
        .unwrap_err();
    let text = bosun_errchain::error_chain(&err);
    assert!(text.contains("push_bootstrap"), "{text}");
    assert!(
        text.contains("can only push files to a running CT"),
        "{text}"
    );
    assert!(!has_token(&h, guest).await);
    assert_eq!(helper.verbs(), ["push_bootstrap"]);

    helper.fail_writes.store(false, Ordering::SeqCst);
    let outcome = bh
        .run(&op(&h, guest).await, &target, TokenPolicy::KeepExisting)
        .await
        .unwrap();
    assert!(outcome.issued);
    assert!(has_token(&h, guest).await);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_the_certificate_reissues_every_bootstrap_with_the_new_pin() {
    let (h, helper, bh) = rig().await;
    let targets: Vec<IssueTarget> = (0..2u32)
        .map(|n| IssueTarget {
            guest_id: Uuid::from_u128(0xc0 + u128::from(n)),
            vmid: Vmid::new(101 + n).unwrap(),
            customer: customer(),
        })
        .collect();
    for t in &targets {
        bh.run(&op(&h, t.guest_id).await, t, TokenPolicy::KeepExisting)
            .await
            .unwrap();
    }
    let old_tokens: Vec<String> = [101, 102]
        .iter()
        .map(|v| {
            helper
                .read_bootstrap(*v)
                .local_api
                .token
                .expose()
                .to_owned()
        })
        .collect();
    let (cert, failures) = bh
        .rotate_certificate(h.dir.path(), &["127.0.0.1".to_owned()], &targets)
        .await
        .unwrap();
    assert!(failures.is_empty());
    assert_ne!(cert.fingerprint(), h.fingerprint);
    let reloaded = LocalApiCert::load_or_create(h.dir.path(), &[]).unwrap();
    assert_eq!(
        reloaded.fingerprint(),
        cert.fingerprint(),
        "the rotation is persisted"
    );
    // The running server swaps the leaf: the new pin connects, the old one no longer does.
    h.tls.reload(&cert).unwrap();
    let new_pin = localapi_support::pinned_client(cert.fingerprint());
    assert_eq!(
        new_pin
            .get(h.url("/v1/health"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let old_pin = localapi_support::pinned_client(&h.fingerprint);
    assert!(old_pin.get(h.url("/v1/health")).send().await.is_err());
    for (i, vmid) in [101u32, 102].iter().enumerate() {
        let doc = helper.read_bootstrap(*vmid);
        assert_eq!(doc.local_api.fingerprint, cert.fingerprint());
        assert_ne!(doc.local_api.token.expose(), old_tokens[i]);
        assert_eq!(token_owner(&h, &old_tokens[i]).await, None);
    }
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provisioned_guest_reaches_the_local_api_with_its_bootstrap_token() {
    let (h, helper, bh) = rig().await;
    let golden = h.sim.endpoint().golden_volid.clone();
    let spec = GuestSpec {
        guest_id: Uuid::from_u128(0xd0),
        kind: Default::default(),
        hostname: "acme-web".to_owned(),
        vmid: None,
        customer: customer(),
        resources: GuestResources {
            cores: 2,
            memory_mib: 1024,
            rootfs_gib: 8,
        },
        power: Power::Running,
        golden: GoldenArchive {
            volid: golden,
            sha256: h.sim.endpoint().golden_sha256.clone(),
            signed: None,
            version: None,
        },
        bulk_volumes: Vec::new(),
        hot_volumes: Vec::new(),
        thresholds: None,
        share_class: None,
        provides: Vec::new(),
        requires: Vec::new(),
        network: None,
    };
    let provisioner = Provisioner::new(
        h.pve.clone(),
        h.journal.clone(),
        bosun_pve::StorageId::new("local-lvm").unwrap(),
        512,
        localapi_support::golden_check(&h, &helper).await,
    )
    .with_post_start_extension(Arc::new(bh.clone()));
    let names = provisioner.step_names();
    assert_eq!(names[names.len() - 2..], ["start", "back_half"]);
    let vmid = provisioner.provision(&spec, None).await.unwrap();
    let doc = helper.read_bootstrap(vmid.get());
    assert_eq!(doc.guest_id, spec.guest_id);
    let resp = h
        .client
        .get(h.url("/v1/storage"))
        .bearer_auth(doc.local_api.token.expose())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["vmid"], vmid.get());
    assert_eq!(body["guest_id"], spec.guest_id.to_string());

    // Provisioning the same spec's back half again keeps the token working.
    let op2 = op(&h, spec.guest_id).await;
    let target = IssueTarget {
        guest_id: spec.guest_id,
        vmid,
        customer: customer(),
    };
    assert!(
        !bh.run(&op2, &target, TokenPolicy::KeepExisting)
            .await
            .unwrap()
            .issued
    );
    let resp = h
        .client
        .get(h.url("/v1/backup/status"))
        .bearer_auth(doc.local_api.token.expose())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    h.shutdown().await;
}

fn spec(h: &Harness, n: u128, power: Power) -> GuestSpec {
    GuestSpec {
        guest_id: Uuid::from_u128(n),
        kind: Default::default(),
        hostname: format!("acme-{n}"),
        vmid: None,
        customer: customer(),
        resources: GuestResources {
            cores: 2,
            memory_mib: 1024,
            rootfs_gib: 8,
        },
        power,
        golden: GoldenArchive {
            volid: h.sim.endpoint().golden_volid.clone(),
            sha256: h.sim.endpoint().golden_sha256.clone(),
            signed: None,
            version: None,
        },
        bulk_volumes: Vec::new(),
        hot_volumes: Vec::new(),
        thresholds: None,
        share_class: None,
        provides: Vec::new(),
        requires: Vec::new(),
        network: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_push_keeps_the_guest_and_a_later_delivery_brings_the_bootstrap() {
    let (h, helper, bh) = rig().await;
    let provisioner = Provisioner::new(
        h.pve.clone(),
        h.journal.clone(),
        bosun_pve::StorageId::new("local-lvm").unwrap(),
        512,
        localapi_support::golden_check(&h, &helper).await,
    )
    .with_post_start_extension(Arc::new(bh.clone()));
    assert!(provisioner.has_post_start());

    // The push fails after start: the guest is complete and kept, with no token.
    helper.fail_writes.store(true, Ordering::SeqCst);
    let wanted = spec(&h, 0xe0, Power::Running);
    let vmid = provisioner.provision(&wanted, None).await.unwrap();
    let status = bosun_pve::Pve::ct_status(&*h.pve, vmid).await.unwrap();
    assert_eq!(status.status, bosun_pve::GuestStatus::Running);
    assert!(!has_token(&h, wanted.guest_id).await);
    assert!(h.journal.provenance(vmid.get()).await.unwrap().is_some());

    // A later pass delivers it in its own journaled operation.
    helper.fail_writes.store(false, Ordering::SeqCst);
    provisioner
        .deliver_post_start(&wanted, vmid, None)
        .await
        .unwrap();
    assert!(has_token(&h, wanted.guest_id).await);
    let doc = helper.read_bootstrap(vmid.get());
    let resp = h
        .client
        .get(h.url("/v1/storage"))
        .bearer_auth(doc.local_api.token.expose())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(h.journal.unfinished_operations().await.unwrap().is_empty());

    // A guest wanted stopped is never pushed to (pct push needs a running CT).
    let pushes = |helper: &FakeHelper| {
        helper
            .verbs()
            .iter()
            .filter(|v| **v == "push_bootstrap")
            .count()
    };
    let before = pushes(&helper);
    let stopped = spec(&h, 0xe1, Power::Stopped);
    provisioner.provision(&stopped, None).await.unwrap();
    assert_eq!(pushes(&helper), before);
    assert!(!has_token(&h, stopped.guest_id).await);
    h.shutdown().await;
}
