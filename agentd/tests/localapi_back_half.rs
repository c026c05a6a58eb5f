//! The provisioning back half: token minting, `bootstrap.json` through the helper protocol,
//! the read-only config mount, keep-unless-asked, crash ordering and certificate rotation —
//! and a full provisioning run whose bootstrap token then works against the local API.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

mod localapi_support;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bosun_agentd::helper_client::HelperClient;
use bosun_agentd::journal::{NewOperation, TokenHash};
use bosun_agentd::localapi::LocalApiCert;
use bosun_agentd::provision::back_half::{
    BackHalf, BackHalfConfig, BootstrapEndpoints, IssueTarget, TokenPolicy, guest_has_token,
};
use bosun_agentd::pve::Vmid;
use bosun_agentd::reconcile::provision::Provisioner;
use bosun_agentd::reconcile::steps::OpJournal;
use bosun_proto::bootstrap::PinnedEndpoint;
use bosun_proto::desired::{CustomerIdentity, GoldenArchive, GuestResources, GuestSpec, Power};
use bosun_proto::helper::Request;
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

fn back_half(h: &Harness, helper: &FakeHelper) -> BackHalf {
    BackHalf::new(
        Arc::new(HelperClient::socket(&helper.socket)),
        h.journal.clone(),
        endpoints(h),
        BackHalfConfig::unprivileged().unwrap(),
    )
}

async fn op(h: &Harness, guest: Uuid) -> OpJournal {
    OpJournal::begin(
        &h.journal,
        NewOperation {
            kind: "provision".to_owned(),
            guest_id: Some(guest.to_string()),
            vmid: Some(101),
            job_id: None,
            request_id: None,
        },
    )
    .await
    .unwrap()
}

async fn token_owner(h: &Harness, token: &str) -> Option<String> {
    h.journal
        .token_owner(TokenHash::of(&SecretString::from(token.to_owned())))
        .await
        .unwrap()
        .map(|o| o.guest_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_back_half_writes_the_bootstrap_mounts_it_and_keeps_the_token_on_rerun() {
    let h = Harness::start_with(localapi_support::Options {
        guests: 0,
        ..Default::default()
    })
    .await;
    let helper = FakeHelper::start(h.dir.path());
    let bh = back_half(&h, &helper);
    let guest = Uuid::from_u128(0xb0);
    let target = IssueTarget {
        guest_id: guest,
        vmid: Vmid::new(101).unwrap(),
        customer: customer(),
    };
    let op1 = op(&h, guest).await;
    let outcome = bh
        .run(&op1, &target, TokenPolicy::KeepExisting, true)
        .await
        .unwrap();
    assert!(outcome.issued && outcome.attached);
    assert_eq!(
        helper.verbs(),
        ["prepare_config_mount", "attach_bind_mount"]
    );

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
        let Request::PrepareConfigMount(prep) = &calls[0] else {
            panic!("{calls:?}")
        };
        assert_eq!(
            (prep.root_uid.get(), prep.root_gid.get()),
            (100_000, 100_000)
        );
        let Request::AttachBindMount(attach) = &calls[1] else {
            panic!("{calls:?}")
        };
        assert!(attach.read_only);
        assert_eq!(attach.guest_path.as_str(), "/etc/bosun");
        assert_eq!(attach.vmid.get(), 101);
    }
    let steps = h.journal.steps(op1.op_id()).await.unwrap();
    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "check_token",
            "write_bootstrap",
            "store_token",
            "attach_config_mount"
        ]
    );
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
        .run(&op2, &target, TokenPolicy::KeepExisting, true)
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
            .filter(|v| **v == "prepare_config_mount")
            .count(),
        1
    );

    // Asked to rotate: a new token, and the old one stops working.
    let op3 = op(&h, guest).await;
    assert!(
        bh.run(&op3, &target, TokenPolicy::Rotate, false)
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
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_stores_no_token_so_the_next_pass_issues_again() {
    let h = Harness::start_with(localapi_support::Options {
        guests: 0,
        ..Default::default()
    })
    .await;
    let helper = FakeHelper::start(h.dir.path());
    let bh = back_half(&h, &helper);
    let guest = Uuid::from_u128(0xb1);
    let target = IssueTarget {
        guest_id: guest,
        vmid: Vmid::new(101).unwrap(),
        customer: customer(),
    };
    helper.fail_writes.store(true, Ordering::SeqCst);
    let err = bh
        .run(
            &op(&h, guest).await,
            &target,
            TokenPolicy::KeepExisting,
            true,
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("write_bootstrap"), "{err}");
    assert!(
        !guest_has_token(&h.journal, &guest.to_string())
            .await
            .unwrap()
    );
    assert_eq!(
        helper.verbs(),
        ["prepare_config_mount"],
        "no mount without a bootstrap"
    );

    helper.fail_writes.store(false, Ordering::SeqCst);
    let outcome = bh
        .run(
            &op(&h, guest).await,
            &target,
            TokenPolicy::KeepExisting,
            true,
        )
        .await
        .unwrap();
    assert!(outcome.issued);
    assert!(
        guest_has_token(&h.journal, &guest.to_string())
            .await
            .unwrap()
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_the_certificate_reissues_every_bootstrap_with_the_new_pin() {
    let h = Harness::start_with(localapi_support::Options {
        guests: 0,
        ..Default::default()
    })
    .await;
    let helper = FakeHelper::start(h.dir.path());
    let bh = back_half(&h, &helper);
    let targets: Vec<IssueTarget> = (0..2u32)
        .map(|n| IssueTarget {
            guest_id: Uuid::from_u128(0xc0 + u128::from(n)),
            vmid: Vmid::new(101 + n).unwrap(),
            customer: customer(),
        })
        .collect();
    for t in &targets {
        bh.run(
            &op(&h, t.guest_id).await,
            t,
            TokenPolicy::KeepExisting,
            true,
        )
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
    let h = Harness::start_with(localapi_support::Options {
        guests: 0,
        ..Default::default()
    })
    .await;
    let helper = FakeHelper::start(h.dir.path());
    let bh = back_half(&h, &helper);
    let golden = h.sim.endpoint().golden_volid.clone();
    let spec = GuestSpec {
        guest_id: Uuid::from_u128(0xd0),
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
            sha256: "0".repeat(64),
        },
    };
    let provisioner = Provisioner::new(
        h.pve.clone(),
        h.journal.clone(),
        bosun_agentd::pve::StorageId::new("local-lvm").unwrap(),
        512,
    )
    .with_extension(Arc::new(bh.clone()));
    assert!(provisioner.step_names().contains(&"back_half"));
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
        !bh.run(&op2, &target, TokenPolicy::KeepExisting, true)
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
