//! The hub's key rotation over its store, with agents' polls over real TLS: a staged key is
//! announced in poll answers only in the operator's signed pin set (decision 0049), activation
//! waits until every live host holds it, the hub serves the new key without a restart, the old
//! one is announced until it is retired, and a host that never learned the new key is listed
//! for enrollment again.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::sync::Arc;
use std::time::{Duration, Instant};

use bosun_hubd::HubError;
use bosun_hubd::cert::{self, NewKey};
use bosun_hubd::store::StoreError;
use bosun_hubd::store::hub_keys::{KeyRefusal, KeyRotation, KeyState};
use bosun_pin::{Pin, Trust};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::common;

use common::{TestHub, poll_body};

/// The operator's `bosun-hubd cert` steps against the hub's store, each run as the command
/// runs it: off the async runtime (the PostgreSQL store blocks on a runtime of its own).
struct Operator(bosun_hubd::HubConfig);

impl Operator {
    async fn run<T: Send + 'static>(
        &self,
        step: impl FnOnce(&bosun_hubd::HubConfig) -> T + Send + 'static,
    ) -> T {
        let config = self.0.clone();
        tokio::task::spawn_blocking(move || step(&config))
            .await
            .unwrap()
    }

    async fn status(&self) -> Result<(KeyRotation, String), HubError> {
        self.run(cert::status).await
    }

    async fn stage(&self, names: Vec<String>) -> Result<String, HubError> {
        self.run(move |config| cert::stage(config, NewKey::SelfSigned(names)))
            .await
    }

    async fn activate(&self, force: bool) -> Result<String, HubError> {
        self.run(move |config| cert::activate(config, force)).await
    }

    async fn retire(&self) -> Result<KeyRotation, HubError> {
        self.run(cert::retire).await
    }

    /// Writes the pin set for the keys announced now and publishes it as signed (the hub does
    /// not judge the signature: agents do, against their `allowed_signers`); gives its serial.
    async fn publish(&self) -> Result<u64, cert::PinSetError> {
        self.run(|config| {
            let doc = cert::pins_document(config, None).unwrap();
            let bytes = serde_json::to_vec(&doc).unwrap();
            cert::publish(config, &bytes, SIGNATURE)
        })
        .await
    }
}

/// An armored signature's shape: the hub forwards it, agents check it.
const SIGNATURE: &str = "-----BEGIN SSH SIGNATURE-----\nU1NIU0lH\n-----END SSH SIGNATURE-----\n";

/// A client that trusts the hub by `pins` alone.
fn client(pins: &[&str]) -> reqwest::Client {
    let pins = pins.iter().map(|p| Pin::parse(p).unwrap()).collect();
    let verifier = bosun_pin::verifier(
        &Trust::Pins(pins),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .unwrap();
    let mut tls = verifier.client_config();
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        // The dashboard's login answers 303 with its cookie: seen, not followed.
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// A poll saying the host trusts `pins`; returns the pins of the signed set the answer carries
/// (it announces none unsigned).
async fn poll(
    hub: &TestHub,
    client: &reqwest::Client,
    host: Uuid,
    key: &str,
    pins: &[&str],
) -> Result<Vec<String>, String> {
    let mut body = poll_body(0, &[]);
    body["hub_pins"] = json!(pins);
    let resp = client
        .post(format!("{}/v1/hosts/{host}/poll?wait=0", hub.url))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("{:?}", anyhow::Error::from(e)))?;
    assert_eq!(resp.status(), reqwest::StatusCode::OK);
    let answer: Value = resp.json().await.unwrap();
    assert!(answer.get("hub_pins").is_none(), "unsigned pins: {answer}");
    let Some(signed) = answer.get("hub_pins_signed") else {
        return Ok(Vec::new());
    };
    let signed: bosun_proto::signed::SignedDocument =
        serde_json::from_value(signed.clone()).unwrap();
    assert_eq!(signed.signature, SIGNATURE, "forwarded as published");
    let mut pins = signed.hub_pins().unwrap().pins;
    pins.sort();
    Ok(pins)
}

/// The key-rotation banner of the dashboard's fleet page, if it shows one.
async fn banner(hub: &TestHub, client: &reqwest::Client) -> Option<String> {
    let login = client
        .post(format!("{}/ui/login", hub.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", &hub.url)
        .body(format!("token={}", hub.admin.replace('+', "%2B")))
        .send()
        .await
        .unwrap();
    let cookie = login.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = client
        .get(format!("{}/ui/", hub.url))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let start = page.find(r#"id="key-rotation""#)?;
    let end = start + page[start..].find("</p>")?;
    let text = &page[start..end];
    // The banner's words, without its markup.
    let mut words = String::new();
    let mut in_tag = false;
    for c in text.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => words.push(c),
            _ => {}
        }
    }
    Some(words)
}

fn sorted(pins: &[&str]) -> Vec<String> {
    let mut pins: Vec<String> = pins.iter().map(|p| (*p).to_owned()).collect();
    pins.sort();
    pins
}

/// Polls until the answer announces `want` (the hub reads its keys every two seconds).
async fn until_announced(
    hub: &TestHub,
    client: &reqwest::Client,
    host: Uuid,
    key: &str,
    holds: &[&str],
    want: &[&str],
) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let announced = poll(hub, client, host, key, holds).await.unwrap();
        if announced == sorted(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the hub announces {announced:?}, not {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn the_hub_key_rotates_while_its_agents_keep_polling() {
    let hub = TestHub::start().await;
    let config = hub.hub.config().clone();
    let ops = Operator(config.clone());
    let old = hub.hub.key_pin();
    let (follower, follower_key) = hub.enroll("follower").await;
    let (sleeper, sleeper_key) = hub.enroll("sleeper").await;
    let by_old = client(&[&old]);

    // Before a rotation nothing is announced, and the key the files hold is served.
    assert_eq!(
        poll(&hub, &by_old, follower, &follower_key, &[&old]).await,
        Ok(vec![])
    );
    assert_eq!(
        poll(&hub, &by_old, sleeper, &sleeper_key, &[&old]).await,
        Ok(vec![])
    );
    let (status, files) = ops.status().await.unwrap();
    assert!(status.keys.is_empty());
    assert_eq!(files, old);

    let next = ops.stage(vec!["hub.example".into()]).await.unwrap();
    assert_ne!(next, old);
    let again = ops.stage(Vec::new()).await.unwrap_err();
    assert!(
        matches!(&again, HubError::Store(StoreError::KeyRotation(KeyRefusal::AlreadyStaged { pin })) if *pin == next),
        "{again:?}"
    );
    // Staged, but not announced until the operator's signed set names it.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        poll(&hub, &by_old, follower, &follower_key, &[&old]).await,
        Ok(vec![])
    );
    assert_eq!(ops.publish().await.unwrap(), 1);
    until_announced(
        &hub,
        &by_old,
        follower,
        &follower_key,
        &[&old],
        &[&old, &next],
    )
    .await;

    // Neither host said it holds the next key: activation waits for them.
    let refused = ops.activate(false).await.unwrap_err();
    assert!(
        matches!(
            &refused,
            HubError::Store(StoreError::KeyRotation(KeyRefusal::NotHeld {
                missing: 2,
                live: 2,
                ..
            }))
        ),
        "{refused:?}"
    );
    // The follower journals it and says so; the sleeper is offline from here on.
    poll(&hub, &by_old, follower, &follower_key, &[&old, &next])
        .await
        .unwrap();
    let (status, _) = ops.status().await.unwrap();
    let staged = status.key(KeyState::Staged).unwrap();
    assert_eq!((staged.pin.as_str(), staged.holders), (next.as_str(), 1));
    let shown = banner(&hub, &by_old)
        .await
        .expect("the dashboard shows the rotation");
    assert!(
        shown.contains("the staged key is held by 1 of 2 live hosts"),
        "{shown}"
    );
    let refused = ops.activate(false).await.unwrap_err();
    assert!(
        refused.to_string().contains("hub store")
            && bosun_errchain::error_chain(&refused).contains("sleeper"),
        "{}",
        bosun_errchain::error_chain(&refused)
    );

    // The operator goes ahead without the sleeper.
    assert_eq!(ops.activate(true).await.unwrap(), next);
    let by_both = client(&[&old, &next]);
    let by_next = client(&[&next]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while poll(&hub, &by_next, follower, &follower_key, &[&old, &next])
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "the hub never served the new key"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(hub.hub.key_pin(), next);
    // The follower, trusting both, carries on; the old key stays announced until retired.
    assert_eq!(
        poll(&hub, &by_both, follower, &follower_key, &[&old, &next]).await,
        Ok(sorted(&[&old, &next]))
    );
    // A new connection of a client that trusts the old key alone is refused in the
    // handshake (connections opened before the switch stay as they were).
    let refused = poll(&hub, &client(&[&old]), sleeper, &sleeper_key, &[&old])
        .await
        .expect_err("a client of the old key alone is refused in the handshake");
    assert!(refused.contains("matches none of the pinned"), "{refused}");

    let shown = banner(&hub, &by_next)
        .await
        .expect("the dashboard shows the rotation");
    assert!(
        shown.contains("the new key is served and held by 1 of 2 live hosts"),
        "{shown}"
    );
    let after = ops.retire().await.unwrap();
    assert_eq!(after.without_active, vec!["sleeper".to_owned()]);
    assert_eq!(after.key(KeyState::Active).unwrap().pin, next);
    assert_eq!(after.key(KeyState::Retired).unwrap().pin, old);
    assert_eq!(ops.publish().await.unwrap(), 2);
    until_announced(&hub, &by_next, follower, &follower_key, &[&next], &[&next]).await;
    assert_eq!(banner(&hub, &by_next).await, None, "no rotation under way");
    let refused = ops.retire().await.unwrap_err();
    assert!(
        matches!(
            &refused,
            HubError::Store(StoreError::KeyRotation(KeyRefusal::NothingRetiring))
        ),
        "{refused:?}"
    );

    // A hub started again serves the store's active key, not the one its files hold.
    let (dir, admin) = hub.stop().await;
    let restarted = TestHub::start_in(dir, admin, config).await;
    assert_eq!(restarted.hub.key_pin(), next);
}

#[tokio::test]
async fn a_poll_naming_what_is_not_a_pin_is_refused() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("h").await;
    let pin = hub.hub.key_pin();
    let too_many: Vec<String> = (0..17).map(|i| format!("spki:{i:064x}")).collect();
    for bad in [
        json!(["not a pin"]),
        json!([pin.to_uppercase()]),
        json!([pin, pin]),
        json!(too_many),
    ] {
        let mut body = poll_body(0, &[]);
        body["hub_pins"] = bad.clone();
        let (status, answer) = common::poll_with(&hub, host, &key, &body).await;
        assert_eq!(status, reqwest::StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
        assert_eq!(answer["code"], "invalid_field", "{answer}");
    }
}

#[tokio::test]
async fn only_a_pin_set_with_a_rising_serial_and_a_signature_is_published() {
    let hub = TestHub::start().await;
    let ops = Operator(hub.hub.config().clone());
    assert_eq!(ops.publish().await.unwrap(), 1);
    let replay = ops
        .run(|config| {
            let doc = bosun_proto::hub_pins::HubPinsDocument {
                serial: 1,
                ..cert::pins_document(config, None).unwrap()
            };
            cert::publish(config, &serde_json::to_vec(&doc).unwrap(), SIGNATURE)
        })
        .await
        .unwrap_err();
    assert!(
        bosun_errchain::error_chain(&replay).contains("not above"),
        "{}",
        bosun_errchain::error_chain(&replay)
    );
    let unsigned = ops
        .run(|config| {
            let doc = cert::pins_document(config, None).unwrap();
            cert::publish(config, &serde_json::to_vec(&doc).unwrap(), "")
        })
        .await
        .unwrap_err();
    assert!(
        matches!(unsigned, cert::PinSetError::NotASignature),
        "{unsigned:?}"
    );
    let not_a_set = ops
        .run(|config| cert::publish(config, b"{\"schema\":\"bosun.data-plan/v1\"}", SIGNATURE))
        .await
        .unwrap_err();
    assert!(
        matches!(not_a_set, cert::PinSetError::Invalid { .. }),
        "{not_a_set:?}"
    );
    // The document names the served key (no rotation yet) under the next serial.
    let doc = ops.run(|c| cert::pins_document(c, None)).await.unwrap();
    assert_eq!((doc.serial, doc.pins.clone()), (2, vec![hub.hub.key_pin()]));
}
