//! The hub's OpenAPI document against the code: the served document is the committed
//! `docs/hub.openapi.json`; every route the hub serves is documented and every documented
//! route is served; the document is well-formed OpenAPI 3.1; every example (the
//! `docs/proto/` documents) fits its schema and parses into its Rust type; and live answers of
//! a real hub fit the schema documented for their status.
//!
//! Regenerate the committed document with
//! `BOSUN_WRITE_OPENAPI=1 cargo nextest run -p bosun-hubd --test integration openapi::`.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed test with its location"
)]

use crate::common;
mod examples;
mod live;
mod numbers;
mod schema;

use std::collections::BTreeSet;
use std::path::PathBuf;

use bosun_hubd::api::{admin, agent, openapi};
use common::TestHub;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path)
}

fn document() -> Value {
    serde_json::from_str(openapi::openapi_json()).unwrap()
}

const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

/// Every (method, path) the document names.
fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in METHODS {
            if item.get(method).is_some() {
                routes.insert((method.to_owned(), path.clone()));
            }
        }
    }
    routes
}

/// The paths the routers serve: the agent and admin route tables, and the routes `api/mod.rs`
/// adds itself (read from its source, so a route added there is walked too). The dashboard's
/// HTML pages (`crate::ui`) are not API and are not documented.
fn served_paths() -> BTreeSet<String> {
    let mut paths: BTreeSet<String> = agent::paths().into_iter().map(str::to_owned).collect();
    paths.extend(
        admin::paths()
            .into_iter()
            .map(|p| format!("{}{p}", admin::PREFIX)),
    );
    let source = std::fs::read_to_string(repo("hubd/src/api/mod.rs")).unwrap();
    for piece in source.split(".route(").skip(1) {
        let literal = piece.trim_start().strip_prefix('"').unwrap();
        paths.insert(literal[..literal.find('"').unwrap()].to_owned());
    }
    paths
}

/// A concrete URL for a path template: UUIDs for ids.
fn concrete(template: &str) -> String {
    template
        .split('/')
        .map(|segment| {
            if segment.starts_with('{') {
                Uuid::new_v4().to_string()
            } else {
                segment.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[tokio::test]
async fn the_served_document_is_the_committed_one() {
    let generated = openapi::openapi_json();
    let path = repo("docs/hub.openapi.json");
    if std::env::var_os("BOSUN_WRITE_OPENAPI").is_some() {
        std::fs::write(&path, generated).unwrap();
    }
    let hub = TestHub::start().await;
    let resp = hub
        .request(Method::GET, "/v1/openapi.json", None, None)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let served = resp.text().await.unwrap();
    assert_eq!(served, generated, "the hub serves the generated document");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == served,
        "docs/hub.openapi.json is out of date; regenerate it with \
         BOSUN_WRITE_OPENAPI=1 cargo nextest run -p bosun-hubd --test integration openapi::"
    );
}

/// Each served path is asked with every method: a route exists unless the hub answers
/// `no_such_endpoint` or `method_not_allowed`. Ids are fresh UUIDs and bodies empty, so no
/// request changes anything.
#[tokio::test]
async fn every_served_route_is_documented_and_every_documented_route_is_served() {
    let hub = TestHub::start().await;
    let doc = document();
    let documented = documented(&doc);
    let mut paths = served_paths();
    paths.extend(documented.iter().map(|(_, path)| path.clone()));
    let mut served = BTreeSet::new();
    for path in &paths {
        let url = concrete(path);
        let token = path
            .starts_with(admin::PREFIX)
            .then_some(hub.admin.as_str());
        for method in METHODS {
            let verb = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let resp = hub.request(verb, &url, token, None).await;
            let status = resp.status();
            let body: Value = resp.json().await.unwrap_or(Value::Null);
            let code = body["code"].as_str().unwrap_or_default();
            let absent = (status == StatusCode::NOT_FOUND && code == "no_such_endpoint")
                || code == "method_not_allowed";
            if !absent {
                served.insert((method.to_owned(), path.clone()));
            }
        }
    }
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty(),
        "served but not in the OpenAPI document (annotate the handler with #[utoipa::path] \
         and list it in api/openapi.rs): {undocumented:?}"
    );
    assert!(
        unserved.is_empty(),
        "documented but not served: {unserved:?}"
    );
    assert!(served.len() >= 20, "the walk found only {served:?}");
}

#[test]
fn the_document_is_well_formed_openapi() {
    let doc = document();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    assert_eq!(doc["info"]["title"], "Bosun hub API");
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let schemes = doc["components"]["securitySchemes"].as_object().unwrap();
    for name in [openapi::OPERATOR_TOKEN_SCHEME, openapi::HOST_KEY_SCHEME] {
        assert_eq!(schemes[name]["type"], "http", "{name}");
        assert_eq!(schemes[name]["scheme"], "bearer", "{name}");
    }

    let mut refs = Vec::new();
    collect_refs(&doc, &mut refs);
    assert!(refs.len() > 50, "only {} references", refs.len());
    for reference in &refs {
        let name = reference
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("reference {reference} points outside the schemas"));
        assert!(schemas.contains_key(name), "{reference} does not resolve");
    }

    let mut operation_ids = BTreeSet::new();
    for (method, path) in documented(&doc) {
        let op = &doc["paths"][&path][&method];
        let at = format!("{method} {path}");
        let id = op["operationId"].as_str().unwrap();
        assert!(
            operation_ids.insert(id.to_owned()),
            "{at}: operationId {id} twice"
        );
        assert!(
            op["tags"].as_array().is_some_and(|t| !t.is_empty()),
            "{at}: no tag"
        );

        let declared: BTreeSet<&str> = op["parameters"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter(|p| p["in"] == "path")
            .inspect(|p| assert_eq!(p["required"], true, "{at}: optional path parameter"))
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        let in_template: BTreeSet<&str> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
            .collect();
        assert_eq!(declared, in_template, "{at}: path parameters");

        let responses = op["responses"].as_object().unwrap();
        assert!(
            responses.keys().any(|status| status.starts_with('2')),
            "{at}: no success answer"
        );
        for (status, response) in responses {
            if status.starts_with(['4', '5']) && !response["content"].is_null() {
                assert_eq!(
                    response["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/ErrorBody",
                    "{at}: {status} is not an ErrorBody"
                );
            }
        }
        if path != "/v1/enroll" && path.starts_with("/v1/hosts/") || path.starts_with("/v1/admin/")
        {
            assert!(
                responses.contains_key("401"),
                "{at}: an authenticated route without 401"
            );
        }

        let expected = if path.starts_with(admin::PREFIX) {
            let role = role_of(&method, &path)
                .unwrap_or_else(|| panic!("{at}: the admin route table names no role for it"));
            json!([{ openapi::OPERATOR_TOKEN_SCHEME: [role] }])
        } else if path.starts_with("/v1/hosts/") {
            json!([{ openapi::HOST_KEY_SCHEME: [] }])
        } else {
            Value::Null
        };
        assert_eq!(op["security"], expected, "{at}: security");
    }
}

/// The role the admin route table gives `method` on the documented `path`.
fn role_of(method: &str, path: &str) -> Option<&'static str> {
    admin::operations()
        .into_iter()
        .find(|(m, p, _)| {
            m.as_str().eq_ignore_ascii_case(method) && format!("{}{p}", admin::PREFIX) == path
        })
        .map(|(_, _, role)| role.as_str())
}

/// The document states each admin operation's role as the route table gives it, in
/// `x-bosun-role` and as the scope of its security requirement; an operation above `viewer`
/// documents the 403 a lower role gets; and the table and the document name the same admin
/// operations.
#[test]
fn the_document_states_each_admin_routes_role_from_the_table() {
    let doc = document();
    let documented: BTreeSet<(String, String)> = documented(&doc)
        .into_iter()
        .filter(|(_, path)| path.starts_with(admin::PREFIX))
        .collect();
    let table: BTreeSet<(String, String)> = admin::operations()
        .into_iter()
        .map(|(method, path, _)| {
            (
                method.as_str().to_ascii_lowercase(),
                format!("{}{path}", admin::PREFIX),
            )
        })
        .collect();
    assert_eq!(documented, table, "the document and the route table differ");
    for (method, path, role) in admin::operations() {
        let full = format!("{}{path}", admin::PREFIX);
        let op = &doc["paths"][&full][method.as_str().to_ascii_lowercase()];
        let at = format!("{method} {full}");
        assert_eq!(op[openapi::ROLE_EXTENSION], role.as_str(), "{at}");
        assert_eq!(
            op["security"],
            json!([{ openapi::OPERATOR_TOKEN_SCHEME: [role.as_str()] }]),
            "{at}"
        );
        let forbidden = &op["responses"]["403"];
        if role == bosun_proto::operator_token::Role::Viewer {
            assert!(forbidden.is_null(), "{at}: a viewer route documents 403");
        } else {
            assert!(
                forbidden["description"]
                    .as_str()
                    .is_some_and(|d| d.contains(role.as_str())),
                "{at}: {forbidden}"
            );
        }
    }
}

fn collect_refs(value: &Value, refs: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                match (key.as_str(), inner) {
                    ("$ref", Value::String(target)) => refs.push(target.clone()),
                    _ => collect_refs(inner, refs),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|inner| collect_refs(inner, refs)),
        _ => {}
    }
}

fn doc_example(file: &str) -> Value {
    let text = std::fs::read_to_string(repo("docs/proto").join(file)).unwrap();
    serde_json::from_str(&text).unwrap()
}
