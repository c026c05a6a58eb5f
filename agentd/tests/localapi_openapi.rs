//! The committed `docs/localapi.openapi.json` must equal the document generated from the
//! handlers. Regenerate with `BOSUN_WRITE_OPENAPI=1 cargo test -p bosun-agentd --test
//! localapi_openapi`.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

use std::path::PathBuf;

fn committed_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/localapi.openapi.json")
}

#[test]
fn the_committed_openapi_document_matches_the_code() {
    let generated = bosun_agentd::guests::localapi::openapi_json();
    let path = committed_path();
    if std::env::var_os("BOSUN_WRITE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).expect("write the openapi document");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/localapi.openapi.json is out of date; regenerate it with \
         BOSUN_WRITE_OPENAPI=1 cargo test -p bosun-agentd --test integration localapi_openapi::"
    );
}

#[test]
fn the_document_names_every_endpoint_and_the_bearer_scheme() {
    let doc: serde_json::Value =
        serde_json::from_str(&bosun_agentd::guests::localapi::openapi_json()).unwrap();
    let paths = doc["paths"].as_object().unwrap();
    for (path, method) in [
        ("/v1/health", "get"),
        ("/v1/storage", "get"),
        ("/v1/snapshot", "get"),
        ("/v1/snapshot", "post"),
        ("/v1/rollback", "post"),
        ("/v1/backup", "post"),
        ("/v1/backup/due", "get"),
        ("/v1/backup/status", "get"),
        ("/v1/restore-test/status", "get"),
        ("/v1/controller", "get"),
        ("/v1/controller/health", "post"),
        ("/v1/audit", "get"),
        ("/v1/protection", "get"),
        ("/v1/break-glass/consent", "get"),
        ("/v1/break-glass/consent", "post"),
        ("/v1/break-glass/consent", "delete"),
    ] {
        assert!(paths[path][method].is_object(), "{method} {path} missing");
    }
    assert_eq!(paths.len(), 13);
    assert!(paths["/v1/protection"]["get"]["security"].is_array());
    assert!(paths["/v1/break-glass/consent"]["delete"]["security"].is_array());
    assert!(paths["/v1/controller/health"]["post"]["security"].is_array());
    assert!(
        paths["/v1/health"]["get"]["security"].is_null(),
        "health needs no token"
    );
    assert!(paths["/v1/backup"]["post"]["security"].is_array());
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
}
