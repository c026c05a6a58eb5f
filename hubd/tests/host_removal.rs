//! `DELETE /v1/admin/hosts/{host_id}`: a revoked host is removed (204) with what the hub kept
//! about it (its escrow blob only when the call says `forget_escrow=true`), its polls find no host (404) and the event log says so; an active or pending host is
//! refused (409 `host_not_revoked`), an unknown or removed one is 404, a bad id is 400.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::common;

use common::{TestHub, desired, error_code, host_events};
use reqwest::{Method, StatusCode};
use uuid::Uuid;

async fn remove(hub: &TestHub, host: &str) -> reqwest::Response {
    hub.admin(Method::DELETE, &format!("/v1/admin/hosts/{host}"), None)
        .await
}

#[tokio::test]
async fn only_a_revoked_host_is_removed() {
    let hub = TestHub::start().await;
    let (host, key) = hub.enroll("pve-gone").await;
    let (kept, _) = hub.enroll("pve-kept").await;
    hub.poll_json(host, &key, 0).await;
    let mut blob: serde_json::Value =
        serde_json::from_str(include_str!("../../docs/proto/escrow.json")).unwrap();
    blob["host_id"] = serde_json::json!(host);
    let resp = hub
        .request(
            Method::PUT,
            &format!("/v1/hosts/{host}/escrow"),
            Some(&key),
            Some(blob.to_string().into_bytes()),
        )
        .await;
    assert!(resp.status().is_success(), "{}", resp.status());
    for id in [host, kept] {
        let resp = hub
            .admin(
                Method::PUT,
                &format!("/v1/admin/hosts/{id}/desired"),
                Some(desired()),
            )
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
    }

    let (status, code) = error_code(remove(&hub, &host.to_string()).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::CONFLICT, "host_not_revoked")
    );
    let pending = hub.enroll_token(600, true).await;
    let resp = hub.try_enroll(&pending, "pve-pending").await;
    let pending: Uuid = resp.json::<serde_json::Value>().await.unwrap()["host_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let (status, code) = error_code(remove(&hub, &pending.to_string()).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::CONFLICT, "host_not_revoked")
    );
    let (status, code) = error_code(remove(&hub, &Uuid::new_v4().to_string()).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::NOT_FOUND, "unknown_host")
    );
    let (status, code) = error_code(remove(&hub, "not-a-uuid").await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::BAD_REQUEST, "bad_host_id")
    );

    let resp = hub
        .admin(
            Method::POST,
            &format!("/v1/admin/hosts/{host}/revoke"),
            None,
        )
        .await;
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    // The hub holds the host's escrow blob, the customer's wrapped key: the removal must say
    // it forgets it (`forget_escrow=true`), or it is refused and nothing goes.
    let (status, code) = error_code(remove(&hub, &host.to_string()).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::CONFLICT, "escrow_held")
    );
    let (status, code) = error_code(remove(&hub, &format!("{host}?forget_escrow=yes")).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::BAD_REQUEST, "bad_query")
    );
    let resp = hub
        .admin(Method::GET, &format!("/v1/admin/hosts/{host}"), None)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        remove(&hub, &format!("{host}?forget_escrow=true"))
            .await
            .status(),
        StatusCode::NO_CONTENT
    );

    for path in [
        format!("/v1/admin/hosts/{host}"),
        format!("/v1/admin/hosts/{host}/desired"),
        format!("/v1/admin/hosts/{host}/jobs"),
    ] {
        let (status, code) = error_code(hub.admin(Method::GET, &path, None).await).await;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::NOT_FOUND, "unknown_host"),
            "{path}"
        );
    }
    let (status, code) = error_code(remove(&hub, &host.to_string()).await).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::NOT_FOUND, "unknown_host")
    );
    // The box's key no longer opens anything: the hub does not know the host.
    let resp = hub.poll(host, &key, 0, &[], 0).await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);

    let events = host_events(&hub, host).await;
    let (kind, detail) = events.last().unwrap();
    assert_eq!(kind, "host_removed");
    assert_eq!(detail["hostname"], "pve-gone");
    let hosts: Vec<serde_json::Value> = hub
        .admin(Method::GET, "/v1/admin/hosts", None)
        .await
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = hosts
        .iter()
        .map(|h| h["hostname"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&"pve-kept") && names.contains(&"pve-pending"));
    let resp = hub
        .admin(
            Method::GET,
            &format!("/v1/admin/hosts/{kept}/desired"),
            None,
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
}
