//! Transport, envelope, authentication and the order of checks.

use crate::common;

use std::time::{Duration, Instant};

use bosun_pvesim::{PveVersion, SimConfig, TokenCredential};
use common::{start, start_with, to_resp};

#[tokio::test]
async fn version_answers_in_the_data_envelope() {
    let sim = start().await;
    let r = sim.call("GET", "/version", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.data()["release"], "9.1");
    assert!(
        r.data()["version"]
            .as_str()
            .is_some_and(|v| v.starts_with("9.1."))
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn fingerprint_is_uppercase_colon_hex_sha256() {
    let sim = start().await;
    let fp = &sim.handle.endpoint().fingerprint;
    assert_eq!(fp.len(), 32 * 3 - 1);
    assert!(fp.split(':').all(|b| {
        b.len() == 2
            && b.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase())
    }));
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn missing_credentials_get_401_no_ticket_with_empty_body_after_the_delay() {
    let sim = start_with(SimConfig {
        time_scale: 0.0,
        auth_failure_delay: Duration::from_millis(300),
        ..SimConfig::default()
    })
    .await;
    let started = Instant::now();
    let resp = sim
        .client
        .get(sim.url("/version"))
        .send()
        .await
        .expect("answered");
    assert_eq!(resp.status().as_u16(), 401);
    assert!(started.elapsed() >= Duration::from_millis(300));
    let r = to_resp(resp).await;
    assert!(r.body.is_null(), "401 body must be empty");
    let bad = TokenCredential {
        id: "bosun@pve!agent".into(),
        secret: "00000000-0000-0000-0000-000000000000".into(),
    };
    let r = sim.call_as(&bad, "GET", "/version", &[]).await;
    assert_eq!(r.status, 401);
    assert!(r.body.is_null());
    let log = sim.handle.requests();
    assert_eq!(log.len(), 2);
    assert!(log.iter().all(|l| l.status == 401 && l.token_id.is_none()));
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn unknown_path_is_501_not_implemented() {
    let sim = start().await;
    let r = sim.call("GET", "/nodes/pve/foo", &[]).await;
    assert_eq!(r.status, 501);
    assert_eq!(r.message(), "Method 'GET /nodes/pve/foo' not implemented");
    // A method the path does not serve is also 501.
    let r = sim.call("DELETE", "/version", &[]).await;
    assert_eq!(r.status, 501);
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn unauthenticated_request_to_an_unknown_path_is_401_after_the_delay() {
    let sim = start_with(SimConfig {
        time_scale: 0.0,
        auth_failure_delay: Duration::from_millis(200),
        ..SimConfig::default()
    })
    .await;
    for path in ["/nodes/pve/foo", "/no/such/thing", "/version"] {
        let started = Instant::now();
        let resp = sim
            .client
            .delete(sim.url(path))
            .send()
            .await
            .expect("answered");
        assert_eq!(
            resp.status().as_u16(),
            401,
            "{path}: auth comes before routing"
        );
        assert!(started.elapsed() >= Duration::from_millis(200), "{path}");
        assert!(to_resp(resp).await.body.is_null());
    }
    sim.handle.shutdown().await;
}

fn reason_of(resp: &reqwest::Response) -> String {
    resp.extensions()
        .get::<hyper::ext::ReasonPhrase>()
        .map(|r| String::from_utf8_lossy(r.as_bytes()).into_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn pve_8_2_sends_the_error_text_only_in_the_reason_phrase() {
    let sim = start_with(SimConfig {
        time_scale: 0.0,
        auth_failure_delay: Duration::ZERO,
        pve_version: PveVersion::V8_2,
        ..SimConfig::default()
    })
    .await;
    let r = sim.call("GET", "/version", &[]).await;
    assert_eq!(r.data()["release"], "8.2");
    let auth = sim.agent().header_value();
    let resp = sim
        .client
        .get(sim.url("/nodes/pve/lxc/999/config"))
        .header("Authorization", &auth)
        .send()
        .await
        .expect("answered");
    assert_eq!(resp.status().as_u16(), 500);
    assert_eq!(
        reason_of(&resp),
        "Configuration file 'nodes/pve/lxc/999.conf' does not exist"
    );
    assert_eq!(
        to_resp(resp).await.body,
        serde_json::json!({ "data": null })
    );
    // A parameter error keeps its per-parameter `errors`, but not the message.
    let resp = sim
        .client
        .get(sim.url("/nodes/pve/lxc/abc/config"))
        .header("Authorization", &auth)
        .send()
        .await
        .expect("answered");
    assert_eq!(resp.status().as_u16(), 400);
    assert_eq!(reason_of(&resp), "Parameter verification failed.");
    let r = to_resp(resp).await;
    assert!(r.body.get("message").is_none(), "{:?}", r.body);
    assert!(!r.error("vmid").is_empty(), "{:?}", r.body);
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn pve_9_1_error_bodies_carry_the_message() {
    let sim = start().await;
    let r = sim.call("GET", "/nodes/pve/lxc/999/config", &[]).await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "Configuration file 'nodes/pve/lxc/999.conf' does not exist\n"
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn body_on_get_is_501() {
    let sim = start().await;
    let resp = sim
        .client
        .get(sim.url("/version"))
        .header("Authorization", sim.agent().header_value())
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body("a=1")
        .send()
        .await
        .expect("answered");
    let r = to_resp(resp).await;
    assert_eq!(r.status, 501);
    assert_eq!(r.message(), "Unexpected content for method 'GET'");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn permission_is_checked_before_parameters() {
    let sim = start().await;
    let narrow = sim.narrow_token("AuditOnly", &["VM.Audit"], "narrow");
    // Invalid parameter AND missing privilege: 403 wins.
    let r = sim
        .call_as(
            &narrow,
            "POST",
            "/nodes/pve/lxc/100/status/start",
            &[("skiplock", "maybe")],
        )
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.message(),
        "Permission check failed (/vms/100, VM.PowerMgmt)\n"
    );
    // With the privilege the parameter error shows.
    let r = sim
        .call(
            "POST",
            "/nodes/pve/lxc/100/status/start",
            &[("skiplock", "maybe")],
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.message(), "Parameter verification failed.\n");
    assert_eq!(
        r.error("skiplock"),
        "type check ('boolean') failed - got 'maybe'\n"
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn validator_messages_match_pve() {
    let sim = start().await;
    let r = sim.call("GET", "/cluster/nextid", &[("vmid", "99")]).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.error("vmid"),
        "invalid format - value does not look like a valid VM ID\n"
    );
    let r = sim.call("GET", "/cluster/nextid", &[("bogus", "1")]).await;
    assert_eq!(
        r.error("bogus"),
        "property is not defined in schema and the schema does not allow additional properties\n"
    );
    let r = sim
        .call(
            "POST",
            "/nodes/pve/vzdump",
            &[("vmid", "100"), ("mode", "fast")],
        )
        .await;
    assert_eq!(
        r.error("mode"),
        "value 'fast' does not have a value in the enumeration 'snapshot, suspend, stop'\n"
    );
    let r = sim
        .call(
            "POST",
            "/nodes/pve/lxc",
            &[("vmid", "100"), ("unique", "1")],
        )
        .await;
    assert_eq!(
        r.error("ostemplate"),
        "property is missing and it is not optional\n"
    );
    assert_eq!(
        r.error("restore"),
        "missing property required by 'unique'\n"
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn form_bodies_split_on_semicolons() {
    let sim = start().await;
    sim.restore_golden(101).await;
    // `hostname=a;b=c` is split: b is an unknown parameter.
    let resp = sim
        .client
        .put(sim.url("/nodes/pve/lxc/101/config"))
        .header("Authorization", sim.agent().header_value())
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body("hostname=web;bogus=1")
        .send()
        .await
        .expect("answered");
    let r = to_resp(resp).await;
    assert_eq!(r.status, 400);
    assert!(r.body["errors"]["bogus"].is_string(), "{r:?}");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn duplicate_path_parameter_with_other_value_is_400() {
    let sim = start().await;
    sim.restore_golden(101).await;
    let r = sim
        .call(
            "PUT",
            "/nodes/pve/lxc/101/config",
            &[("vmid", "102"), ("cores", "2")],
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.error("vmid"),
        "duplicate parameter (already defined in URI) with conflicting values!\n"
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn request_log_records_every_request_with_status_and_token() {
    let sim = start().await;
    sim.call("GET", "/version", &[]).await;
    sim.call("GET", "/cluster/nextid", &[("vmid", "1")]).await;
    let log = sim.handle.requests();
    assert_eq!(log.len(), 2);
    assert_eq!(log[0].path, "/version");
    assert_eq!(log[0].status, 200);
    assert_eq!(log[0].token_id.as_deref(), Some("bosun@pve!agent"));
    assert_eq!(log[1].params, vec![("vmid".to_owned(), "1".to_owned())]);
    assert_eq!(log[1].status, 400);
    sim.handle.clear_requests();
    assert!(sim.handle.requests().is_empty());
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn json_bodies_accept_json_booleans() {
    let sim = start().await;
    sim.restore_golden(101).await;
    let resp = sim
        .client
        .put(sim.url("/nodes/pve/lxc/101/config"))
        .header("Authorization", sim.agent().header_value())
        .json(&serde_json::json!({ "onboot": true }))
        .send()
        .await
        .expect("answered");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        sim.handle
            .guest_config(101)
            .expect("ct")
            .get("onboot")
            .map(String::as_str),
        Some("1")
    );
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn another_node_is_not_in_this_cluster() {
    let sim = start().await;
    let r = sim.call("GET", "/nodes/pve2/lxc", &[]).await;
    assert_eq!(r.status, 596);
    assert_eq!(r.message(), "no such cluster node 'pve2'\n");
    sim.handle.shutdown().await;
}

#[tokio::test]
async fn bad_configuration_is_an_error_not_a_panic() {
    for config in [
        SimConfig {
            time_scale: f64::NAN,
            ..SimConfig::default()
        },
        SimConfig {
            time_scale: -1.0,
            ..SimConfig::default()
        },
        SimConfig {
            node: "bad node!".to_owned(),
            ..SimConfig::default()
        },
    ] {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let err = bosun_pvesim::Simulator::start(config, listener)
            .await
            .expect_err("refused");
        assert!(
            matches!(err, bosun_pvesim::SimError::Config { .. }),
            "{err}"
        );
    }
}

#[tokio::test]
async fn huge_numbers_are_validation_errors() {
    let sim = start().await;
    let r = sim
        .call(
            "POST",
            "/nodes/pve/vzdump",
            &[("vmid", "100"), ("lockwait", "99999999999999999999")],
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.error("lockwait"),
        "type check ('integer') failed - got '99999999999999999999'\n"
    );
    let r = sim
        .call("GET", "/nodes/pve/lxc/abc/status/current", &[])
        .await;
    assert_eq!(r.status, 400);
    sim.handle.shutdown().await;
}

fn reason(resp: &reqwest::Response) -> Option<String> {
    resp.extensions()
        .get::<hyper::ext::ReasonPhrase>()
        .map(|r| String::from_utf8_lossy(r.as_bytes()).into_owned())
}

#[tokio::test]
async fn reason_phrases_carry_the_first_line_like_pve() {
    let sim = start().await;
    let resp = sim
        .client
        .get(sim.url("/version"))
        .send()
        .await
        .expect("answered");
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(reason(&resp).as_deref(), Some("No ticket"));
    let resp = sim
        .client
        .get(sim.url("/version"))
        .header("Authorization", "PVEAPIToken=bosun@pve!agent=wrong")
        .send()
        .await
        .expect("answered");
    assert_eq!(reason(&resp).as_deref(), Some("Authentication failed!"));
    let resp = sim
        .client
        .get(sim.url("/cluster/nextid?vmid=1"))
        .header("Authorization", sim.agent().header_value())
        .send()
        .await
        .expect("answered");
    assert_eq!(resp.status().as_u16(), 400);
    assert_eq!(
        reason(&resp).as_deref(),
        Some("Parameter verification failed.")
    );
    let resp = sim
        .client
        .post(sim.url("/nodes/pve/lxc/100/status/start"))
        .header("Authorization", sim.agent().header_value())
        .send()
        .await
        .expect("answered");
    // a missing CT still gets a UPID; a running one gets the 500 reason
    assert_eq!(resp.status().as_u16(), 200);
    sim.restore_golden(100).await;
    sim.start_ct(100).await;
    let resp = sim
        .client
        .post(sim.url("/nodes/pve/lxc/100/status/start"))
        .header("Authorization", sim.agent().header_value())
        .send()
        .await
        .expect("answered");
    assert_eq!(resp.status().as_u16(), 500);
    assert_eq!(reason(&resp).as_deref(), Some("CT 100 already running"));
    sim.handle.shutdown().await;
}
