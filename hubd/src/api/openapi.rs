//! The hub's API as an OpenAPI 3.1 document, generated from the handlers' `#[utoipa::path]`
//! annotations and the `bosun-proto` types (feature `openapi`), served at
//! `GET /v1/openapi.json` and committed as `docs/hub.openapi.json`; `hubd/tests/openapi/`
//! fails when the two drift, when a served route is missing from the document (or the
//! document names one that is not served) and when an example does not fit its schema.
//!
//! The request and response examples are the documents of `docs/proto/`, so the examples an
//! operator reads here are the ones `bosun-proto`'s own tests parse.

use std::sync::OnceLock;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{OpenApi as Document, RefOr};
use utoipa::{Modify, OpenApi};

use bosun_proto::operator_token::Role;

use super::{admin, admin_desired, admin_jobs, agent};

/// The security scheme of the agent routes: the host API key from enrollment.
pub const HOST_KEY_SCHEME: &str = "host_key";
/// The security scheme of `/v1/admin/*`: an operator token; each operation's scope is the
/// least role it needs.
pub const OPERATOR_TOKEN_SCHEME: &str = "operator_token";

/// The extension on each admin operation that names the least role it needs.
pub const ROLE_EXTENSION: &str = "x-bosun-role";

/// The document's frame: every path, the tags and the security schemes.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Bosun hub API",
        description = "The hub's HTTP API. Agents enroll with a one-time token and then poll \
                       with their host key (`Authorization: Bearer`); operators and their tools \
                       call `/v1/admin/*` with an operator token, whose role (`viewer`, \
                       `operator`, `admin`) must be at least the one each operation names in \
                       `x-bosun-role` and in its security scope. Every error answer is an \
                       `ErrorBody` with a stable `code`; every answer carries `x-request-id` \
                       and `x-correlation-id`."
    ),
    paths(
        super::health,
        super::metrics::metrics,
        openapi_json_handler,
        agent::enroll,
        agent::poll,
        agent::job_result,
        agent::put_escrow,
        agent::get_escrow,
        admin::create_enroll_token,
        admin::list_enroll_tokens,
        admin::revoke_enroll_token,
        super::admin_hosts::list_hosts,
        super::admin_hosts::show_host,
        super::admin_hosts::approve_host,
        super::admin_hosts::revoke_host,
        super::admin_hosts::rotate_host_key,
        super::admin_hosts::remove_host,
        super::admin_history::host_history,
        super::admin_hosts::label_host,
        admin::put_desired,
        admin_desired::get_desired,
        admin_desired::desired_status,
        admin_desired::list_operations,
        admin_jobs::submit_job,
        admin_jobs::list_jobs,
        admin_jobs::cancel_job,
        admin_jobs::get_escrow,
        admin::list_alerts,
        admin::list_open_alerts,
        super::admin_alerts::ack_alert,
        super::admin_alerts::create_silence,
        super::admin_alerts::list_silences,
        super::admin_alerts::remove_silence,
        admin::list_events,
        super::admin_audit::list_audit,
        super::artifacts::put_artifact,
        super::artifacts::list_artifacts,
        super::artifacts::get_artifact,
        super::admin_tokens::create_token,
        super::admin_tokens::list_tokens,
        super::admin_tokens::revoke_token,
        super::admin_tokens::rotate_token,
    ),
    components(schemas(Health)),
    tags(
        (name = "agent", description = "Called by `bosun-agentd` on each host; served on the \
                                        agent listener"),
        (name = "admin", description = "Called by operators and `bosunctl` with an operator \
                                        token of the role each operation names; served on the \
                                        admin listener"),
        (name = "operations", description = "Metrics and this document (admin listener); \
                                             health (both listeners)"),
    ),
    modifiers(&SecuritySchemes, &Roles, &Examples, &ClosedVariants, &Schedules, &FleetFilters)
)]
struct HubApi;

/// The answer of `GET /v1/health`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Health {
    /// Always `ok` when the hub answers.
    pub status: String,
    /// The hub's version.
    pub version: String,
}

struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut Document) {
        let components = openapi.components.get_or_insert_with(Default::default);
        for (name, description) in [
            (
                HOST_KEY_SCHEME,
                "The host API key `bosun.enrolled/v1` carried (shown once; the hub keeps its hash).",
            ),
            (
                OPERATOR_TOKEN_SCHEME,
                "An operator token: the admin token `bosun-hubd init` printed, or one \
                 `bosunctl tokens create` made (the hub keeps their hashes). Its role must be \
                 at least the operation's scope: `viewer` < `operator` < `admin`.",
            ),
        ] {
            components.add_security_scheme(
                name,
                SecurityScheme::Http(
                    HttpBuilder::new()
                        .scheme(HttpAuthScheme::Bearer)
                        .description(Some(description))
                        .build(),
                ),
            );
        }
    }
}

/// Each admin operation's role, from the table the admin router is built from
/// ([`admin::operations`]): the operator-token security requirement with the role as its
/// scope, the role in [`ROLE_EXTENSION`], the 429 a source that failed too often gets
/// (decision 0055), and for roles above `viewer` the 403 a token of a lower role gets. An admin operation the table does not name gets none of these (and the
/// document tests fail on it).
struct Roles;

impl Modify for Roles {
    fn modify(&self, openapi: &mut Document) {
        use utoipa::openapi::ResponseBuilder;
        use utoipa::openapi::content::ContentBuilder;
        use utoipa::openapi::extensions::Extensions;
        use utoipa::openapi::security::SecurityRequirement;
        for (method, path, role) in admin::operations() {
            let full = format!("{}{path}", admin::PREFIX);
            let Some(item) = openapi.paths.paths.get_mut(&full) else {
                continue;
            };
            let method = method.as_str().to_ascii_lowercase();
            let Some((_, operation)) = operations(item).into_iter().find(|(m, _)| *m == method)
            else {
                continue;
            };
            operation.security = Some(vec![SecurityRequirement::new(
                OPERATOR_TOKEN_SCHEME,
                [role.as_str()],
            )]);
            operation
                .extensions
                .get_or_insert_with(Extensions::default)
                .insert(ROLE_EXTENSION.to_owned(), role.as_str().into());
            operation
                .responses
                .responses
                .insert("429".to_owned(), RefOr::T(too_many_attempts()));
            if role > Role::Viewer {
                let forbidden = ResponseBuilder::new()
                    .description(format!(
                        "`forbidden`: the token's role is below `{role}`, the role this needs"
                    ))
                    .content(
                        JSON,
                        ContentBuilder::new()
                            .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                                "ErrorBody",
                            ))))
                            .build(),
                    )
                    .build();
                operation
                    .responses
                    .responses
                    .insert("403".to_owned(), RefOr::T(forbidden));
            }
        }
    }
}

/// The answer to a bearer token from a source address whose allowance of failed
/// authentications is spent ([`crate::auth_limit`]).
fn too_many_attempts() -> utoipa::openapi::Response {
    use utoipa::openapi::content::ContentBuilder;
    use utoipa::openapi::header::HeaderBuilder;
    use utoipa::openapi::{ObjectBuilder, ResponseBuilder, Type};
    ResponseBuilder::new()
        .description(format!(
            "`too_many_attempts`: this source address (an IPv6 address's /64) presented wrong \
             operator tokens more than {} times at once or more than one per {} s lately; the \
             token was not checked",
            crate::auth_limit::FAILURE_BURST,
            crate::auth_limit::FAILURE_REFILL.as_secs(),
        ))
        .header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(
                    ObjectBuilder::new()
                        .schema_type(Type::Integer)
                        .minimum(Some(1)),
                )
                .description(Some("seconds until this source may try again"))
                .build(),
        )
        .content(
            JSON,
            ContentBuilder::new()
                .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                    "ErrorBody",
                ))))
                .build(),
        )
        .build()
}

/// The internally tagged enums whose serde attributes deny unknown fields: utoipa closes a
/// struct with `deny_unknown_fields` but not the variants of such an enum, so their objects are
/// closed here (a variant with a field it does not know is refused by the hub).
const CLOSED_ENUMS: &[&str] = &["BulkBackup"];

struct ClosedVariants;

impl Modify for ClosedVariants {
    fn modify(&self, openapi: &mut Document) {
        use utoipa::openapi::schema::{AdditionalProperties, Schema};
        let Some(components) = openapi.components.as_mut() else {
            return;
        };
        for name in CLOSED_ENUMS {
            let Some(RefOr::T(Schema::OneOf(one_of))) = components.schemas.get_mut(*name) else {
                continue;
            };
            for variant in &mut one_of.items {
                if let RefOr::T(Schema::Object(object)) = variant {
                    object.additional_properties =
                        Some(Box::new(AdditionalProperties::FreeForm(false)));
                }
            }
        }
    }
}

/// The request properties that hold a Proxmox calendar event: (schema, property).
const SCHEDULES: &[(&str, &str)] = &[("BackupPolicy", "schedule"), ("TargetPolicy", "schedule")];

/// Gives each calendar-event property the grammar's pattern
/// ([`bosun_proto::calendar::schema_pattern`]), so what the document lets through is what the
/// hub parses (`"0"` is neither).
struct Schedules;

impl Modify for Schedules {
    fn modify(&self, openapi: &mut Document) {
        use utoipa::openapi::schema::Schema;
        let Some(components) = openapi.components.as_mut() else {
            return;
        };
        let pattern = bosun_proto::calendar::schema_pattern();
        for (name, property) in SCHEDULES {
            if let Some(RefOr::T(Schema::Object(object))) = components.schemas.get_mut(*name)
                && let Some(RefOr::T(Schema::Object(field))) = object.properties.get_mut(*property)
            {
                field.pattern = Some(pattern.clone());
                field.description = field.description.take().map(|text| {
                    format!(
                        "{text}\n\nThe grammar: a shorthand (`daily`, `hourly`, …) or weekday, \
                         date and time parts in that order, in lower case; ranges `a..b` run \
                         forward (the one rule the pattern cannot state)."
                    )
                });
            }
        }
    }
}

/// The host list's repeatable filter terms (`label=k=v`, `capability=word`): each item's
/// grammar ([`bosun_proto::capabilities::parse_label`], [`bosun_proto::capabilities::check_capability`])
/// and at most 8 of each, so a request the document allows is one the hub answers (it takes 16
/// terms in all).
struct FleetFilters;

/// (parameter, the pattern of one term, its longest length).
const FLEET_FILTERS: &[(&str, &str, usize)] = &[
    (
        "label",
        "^[a-z0-9][a-z0-9._/-]{0,62}=[A-Za-z0-9._-]{1,63}$",
        127,
    ),
    (
        "capability",
        "^[a-z]{1,96}(=[A-Za-z0-9_.:-]{1,95})?$",
        bosun_proto::capabilities::MAX_CAPABILITY,
    ),
];

impl Modify for FleetFilters {
    fn modify(&self, openapi: &mut Document) {
        use utoipa::openapi::schema::{ArrayItems, Schema};
        let Some(list) = openapi
            .paths
            .paths
            .get_mut("/v1/admin/hosts")
            .and_then(|item| item.get.as_mut())
            .and_then(|get| get.parameters.as_mut())
        else {
            return;
        };
        for parameter in list {
            let Some((_, pattern, longest)) = FLEET_FILTERS
                .iter()
                .find(|(name, _, _)| *name == parameter.name)
            else {
                continue;
            };
            if let Some(RefOr::T(Schema::Array(array))) = parameter.schema.as_mut() {
                array.max_items = Some(MAX_EACH_FILTER);
                if let ArrayItems::RefOrSchema(items) = &mut array.items
                    && let RefOr::T(Schema::Object(item)) = items.as_mut()
                {
                    item.pattern = Some((*pattern).to_owned());
                    item.max_length = Some(*longest);
                }
            }
        }
    }
}

/// Terms of one kind the document allows (two kinds: the hub's 16 in all).
const MAX_EACH_FILTER: usize = 8;

/// Where each `docs/proto/` example goes: method, path, `None` for the request body or the
/// response status, and the example's text.
pub const EXAMPLES: &[(&str, &str, Option<&str>, &str)] = &[
    (
        "post",
        "/v1/enroll",
        None,
        include_str!("../../../docs/proto/enroll-request.json"),
    ),
    (
        "post",
        "/v1/enroll",
        Some("201"),
        include_str!("../../../docs/proto/enroll-response.json"),
    ),
    (
        "post",
        "/v1/hosts/{host_id}/poll",
        None,
        include_str!("../../../docs/proto/poll-request.json"),
    ),
    (
        "post",
        "/v1/hosts/{host_id}/poll",
        Some("200"),
        include_str!("../../../docs/proto/poll-response.json"),
    ),
    (
        "post",
        "/v1/hosts/{host_id}/jobs/{job_id}/result",
        None,
        include_str!("../../../docs/proto/job-result.json"),
    ),
    (
        "put",
        "/v1/hosts/{host_id}/escrow",
        None,
        include_str!("../../../docs/proto/escrow.json"),
    ),
    (
        "get",
        "/v1/hosts/{host_id}/escrow",
        Some("200"),
        include_str!("../../../docs/proto/escrow.json"),
    ),
    (
        "put",
        "/v1/admin/hosts/{host_id}/desired",
        None,
        include_str!("../../../docs/proto/desired.json"),
    ),
    (
        "post",
        "/v1/admin/hosts/{host_id}/jobs",
        None,
        include_str!("../../../docs/proto/signed-job.json"),
    ),
    (
        "get",
        "/v1/admin/hosts/{host_id}/escrow",
        Some("200"),
        include_str!("../../../docs/proto/escrow.json"),
    ),
];

const JSON: &str = "application/json";

/// Puts the `docs/proto/` examples on the bodies they illustrate, and `error.json` on every
/// JSON error answer.
struct Examples;

impl Modify for Examples {
    fn modify(&self, openapi: &mut Document) {
        let error = parse_example(include_str!("../../../docs/proto/error.json"));
        for (path, item) in &mut openapi.paths.paths {
            for (method, operation) in operations(item) {
                for (method_name, example_path, status, text) in EXAMPLES {
                    if *method_name != method || *example_path != path.as_str() {
                        continue;
                    }
                    let media = match status {
                        None => operation
                            .request_body
                            .as_mut()
                            .and_then(|body| body.content.get_mut(JSON)),
                        Some(status) => match operation.responses.responses.get_mut(*status) {
                            Some(RefOr::T(response)) => response.content.get_mut(JSON),
                            _ => None,
                        },
                    };
                    if let Some(media) = media {
                        media.example = parse_example(text);
                    }
                }
                for (status, response) in &mut operation.responses.responses {
                    if !status.starts_with(['4', '5']) {
                        continue;
                    }
                    if let RefOr::T(response) = response
                        && let Some(media) = response.content.get_mut(JSON)
                    {
                        media.example.clone_from(&error);
                    }
                }
            }
        }
    }
}

/// The operations of a path item with their lowercase method names.
fn operations(
    item: &mut utoipa::openapi::PathItem,
) -> Vec<(&'static str, &mut utoipa::openapi::path::Operation)> {
    [
        ("get", item.get.as_mut()),
        ("put", item.put.as_mut()),
        ("post", item.post.as_mut()),
        ("delete", item.delete.as_mut()),
        ("patch", item.patch.as_mut()),
    ]
    .into_iter()
    .filter_map(|(method, operation)| operation.map(|op| (method, op)))
    .collect()
}

/// An example as JSON; a file that does not parse is left out (the proto tests and the
/// drift test both fail on it, so it never reaches a release).
fn parse_example(text: &str) -> Option<serde_json::Value> {
    serde_json::from_str(text).ok()
}

/// The OpenAPI document of the hub's API.
pub fn openapi() -> Document {
    HubApi::openapi()
}

/// The document as the pretty JSON committed in `docs/hub.openapi.json` (built once).
pub fn openapi_json() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let mut text = openapi()
            .to_pretty_json()
            .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
        text.push('\n');
        text
    })
}

/// `GET /v1/openapi.json`: this document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "operations",
    operation_id = "openapi",
    responses((status = 200, description = "the OpenAPI 3.1 document of this API",
               content_type = "application/json")))]
pub async fn openapi_json_handler() -> Response {
    ([(header::CONTENT_TYPE, JSON)], openapi_json()).into_response()
}
