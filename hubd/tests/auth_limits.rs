//! Failed operator authentications are limited per source address, never hub-wide (decision
//! 0055): guessers spread over many loopback addresses (each client socket bound to its own
//! 127.0.0.x) against a real hub over TLS, the dashboard's login and the admin API's bearer
//! tokens, while an operator on a clean address logs in and calls the API throughout.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use bosun_hubd::auth_limit::{FAILURE_BURST, FAILURE_REFILL};
use reqwest::header::{self, HeaderMap};
use reqwest::{Method, StatusCode};

use common::TestHub;

/// A client pinned to the hub whose connections leave from `source`, not following redirects.
fn client_from(hub: &TestHub, source: Ipv4Addr) -> reqwest::Client {
    reqwest::Client::builder()
        .use_preconfigured_tls(
            bosun_hubd::tls::pinned_client_config(&hub.hub.fingerprint()).unwrap(),
        )
        .redirect(reqwest::redirect::Policy::none())
        .local_address(IpAddr::V4(source))
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// The dashboard login with `token`, posted from this hub's own origin.
async fn login(hub: &TestHub, client: &reqwest::Client, token: &str) -> reqwest::Response {
    client
        .post(format!("{}/ui/login", hub.url))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::ORIGIN, &hub.url)
        .body(format!("token={}", token.replace('+', "%2B")))
        .send()
        .await
        .unwrap()
}

/// An admin API read with `token` as the bearer.
async fn list_hosts(hub: &TestHub, client: &reqwest::Client, token: &str) -> reqwest::Response {
    client
        .get(format!("{}/v1/admin/hosts", hub.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

fn retry_after(headers: &HeaderMap) -> u64 {
    headers[header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// 120 wrong dashboard logins from 12 addresses (the attack that used to spend a hub-wide
/// allowance of 100), then 5 more from each: every address is checked ten times and then held
/// to 429, and an operator on a thirteenth address logs in, as does the admin API's token.
#[tokio::test]
async fn guessers_on_many_addresses_never_lock_out_an_operator_on_a_clean_one() {
    let hub = TestHub::start().await;
    let (mut checked, mut held) = (0u32, 0u32);
    for n in 10..22u8 {
        let client = client_from(&hub, Ipv4Addr::new(127, 0, 0, n));
        for attempt in 0..15 {
            let resp = login(&hub, &client, &format!("bsa_guess{n}x{attempt}")).await;
            match resp.status() {
                StatusCode::UNAUTHORIZED => checked += 1,
                StatusCode::TOO_MANY_REQUESTS => {
                    let wait = retry_after(resp.headers());
                    assert!(
                        (1..=FAILURE_REFILL.as_secs()).contains(&wait),
                        "Retry-After {wait}"
                    );
                    held += 1;
                }
                other => panic!("attempt {attempt} from 127.0.0.{n}: {other}"),
            }
        }
    }
    println!("12 addresses x 15 wrong logins: {checked} checked, {held} held to 429");
    // Ten a source (a refill of one per 6 s may let one more through on a slow machine).
    assert!((120..=132).contains(&checked), "{checked} checked");
    assert_eq!(checked + held, 180);
    // A guesser holding the right token on a spent address is held too: nothing is checked.
    let spent = client_from(&hub, Ipv4Addr::new(127, 0, 0, 10));
    let resp = login(&hub, &spent, &hub.admin).await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);

    let operator = client_from(&hub, Ipv4Addr::new(127, 0, 0, 2));
    let resp = login(&hub, &operator, &hub.admin).await;
    assert_eq!(
        resp.status(),
        StatusCode::SEE_OTHER,
        "an operator on a clean address logs in"
    );
    assert_eq!(resp.headers()[header::LOCATION], "/ui/");
    let resp = hub.admin(Method::GET, "/v1/admin/hosts", None).await;
    assert_eq!(resp.status(), StatusCode::OK, "the admin token still works");
}

/// Four addresses send wrong bearer tokens as fast as the hub answers for 13 s; an operator on
/// a fifth calls the API with the right one throughout. Each guessing address gets its burst
/// of ten and one more per 6 s checked (401), every other attempt 429 `too_many_attempts`
/// with `Retry-After`; every one of the operator's calls is answered 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_bearer_tokens_are_answered_at_a_bounded_rate_per_source() {
    let hub = TestHub::start().await;
    let window = Duration::from_secs(13);
    let started = Instant::now();
    let guessers: Vec<_> = (30..34u8)
        .map(|n| {
            let client = client_from(&hub, Ipv4Addr::new(127, 0, 0, n));
            let url = hub.url.clone();
            tokio::spawn(async move {
                let (mut checked, mut held, mut attempt) = (0u32, 0u32, 0u32);
                while started.elapsed() < window {
                    let resp = client
                        .get(format!("{url}/v1/admin/hosts"))
                        .bearer_auth(format!("bsa_guess{n}x{attempt}"))
                        .send()
                        .await
                        .unwrap();
                    attempt += 1;
                    match resp.status() {
                        StatusCode::UNAUTHORIZED => checked += 1,
                        StatusCode::TOO_MANY_REQUESTS => {
                            let wait = retry_after(resp.headers());
                            assert!((1..=6).contains(&wait), "Retry-After {wait}");
                            let body: serde_json::Value = resp.json().await.unwrap();
                            assert_eq!(body["code"], "too_many_attempts");
                            held += 1;
                        }
                        other => panic!("guess {attempt} from 127.0.0.{n}: {other}"),
                    }
                }
                (n, checked, held)
            })
        })
        .collect();
    let operator = client_from(&hub, Ipv4Addr::new(127, 0, 0, 3));
    let mut calls = 0u32;
    while started.elapsed() < window {
        let resp = list_hosts(&hub, &operator, &hub.admin).await;
        assert_eq!(resp.status(), StatusCode::OK, "operator call {calls}");
        calls += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let refills = u32::try_from(window.as_secs() / FAILURE_REFILL.as_secs()).unwrap();
    for guesser in guessers {
        let (n, checked, held) = guesser.await.unwrap();
        println!(
            "127.0.0.{n}: {} wrong tokens in {window:?}: {checked} checked (401), {held} held (429)",
            checked + held
        );
        assert!(
            (FAILURE_BURST + refills..=FAILURE_BURST + refills + 1).contains(&checked),
            "127.0.0.{n}: {checked} checked"
        );
        assert!(
            held > checked,
            "127.0.0.{n} guessed faster than it was answered"
        );
    }
    println!("operator on 127.0.0.3: {calls} calls, all 200");
    assert!(calls >= 20, "{calls}");
    // The right token from a spent address is held as well: the check comes before the lookup.
    let spent = client_from(&hub, Ipv4Addr::new(127, 0, 0, 30));
    let resp = list_hosts(&hub, &spent, &hub.admin).await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    // A request with no token at all costs nothing and is not counted.
    let fresh = client_from(&hub, Ipv4Addr::new(127, 0, 0, 4));
    for _ in 0..30 {
        let resp = fresh
            .get(format!("{}/v1/admin/hosts", hub.url))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    }
    let resp = list_hosts(&hub, &fresh, &hub.admin).await;
    assert_eq!(resp.status(), StatusCode::OK);
}

/// The dashboard and the admin API draw on one allowance: a source spent on wrong bearer
/// tokens cannot go on guessing through the login form.
#[tokio::test]
async fn the_login_and_the_bearer_token_share_one_allowance() {
    let hub = TestHub::start().await;
    let guesser = client_from(&hub, Ipv4Addr::new(127, 0, 0, 40));
    for attempt in 0..FAILURE_BURST {
        let resp = list_hosts(&hub, &guesser, &format!("bsa_guess{attempt}")).await;
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    }
    let resp = login(&hub, &guesser, "bsa_guess_form").await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!((1..=6).contains(&retry_after(resp.headers())));
}
