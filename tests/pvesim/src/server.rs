//! The HTTP side: axum router, the `/api2/json` pipeline in PVE's order, the fault layer,
//! PVE's response envelope and the service wrapper that really drops connections.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::State;
use axum::http::{HeaderMap, Method, Request, Response, StatusCode, Uri, header};
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::LoggedRequest;
use crate::api::{ApiError, Ctx, Reply};
use crate::request::{Decoded, decode_form, decode_json, unescape, unescape_path};
use crate::routes::{Handler, Matched, Perm, lookup};
use crate::schema::check_value;
use crate::state::Shared;

const MAX_BODY: usize = 512 * 1024;

/// Marker in a response's extensions: close the connection instead of answering.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DropConnection;

/// The error a dropped request turns into; hyper closes the connection on it.
#[derive(Debug, thiserror::Error)]
#[error("connection dropped by fault injection")]
pub(crate) struct Dropped;

/// Wraps the router so that a response marked [`DropConnection`] becomes a service error,
/// which makes hyper close the connection without writing anything.
#[derive(Clone, Debug)]
pub(crate) struct DropService {
    pub(crate) inner: Router,
}

impl<B> tower::Service<Request<B>> for DropService
where
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response<Body>;
    type Error = Dropped;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Dropped>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let router = self.inner.clone();
        Box::pin(async move {
            let resp = match router.oneshot(req.map(Body::new)).await {
                Ok(resp) => resp,
                Err(never) => match never {},
            };
            if resp.extensions().get::<DropConnection>().is_some() {
                Err(Dropped)
            } else {
                Ok(resp)
            }
        })
    }
}

/// Router state.
#[derive(Clone, Debug)]
pub(crate) struct App {
    pub(crate) shared: Arc<Shared>,
    pub(crate) admin_token: Arc<str>,
}

pub(crate) fn router(app: App) -> Router {
    crate::admin::routes().fallback(api_entry).with_state(app)
}

fn json_response(status: u16, body: &Value) -> Response<Body> {
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json;charset=UTF-8"),
    );
    resp
}

/// Sets the HTTP/1 reason phrase (PVE sends the first line of the message there).
fn with_reason(mut resp: Response<Body>, reason: &str) -> Response<Body> {
    let first = reason.lines().next().unwrap_or_default().trim_end();
    if let Ok(phrase) = hyper::ext::ReasonPhrase::try_from(first.to_owned()) {
        resp.extensions_mut().insert(phrase);
    }
    resp
}

/// The body an error answer has on a server older than PVE 8.3, which sends no `message`.
#[derive(Clone)]
struct BodyWithoutMessage(Value);

fn error_response(err: &ApiError) -> Response<Body> {
    let mut body = json!({ "data": null });
    if !err.errors.is_empty() {
        body["errors"] = json!(err.errors);
    }
    let without_message = BodyWithoutMessage(body.clone());
    body["message"] = json!(err.message);
    let mut resp = with_reason(json_response(err.status, &body), &err.message);
    resp.extensions_mut().insert(without_message);
    resp
}

/// Rewrites an error answer the way the emulated release sends it.
fn as_release_answers(shared: &Shared, mut resp: Response<Body>) -> Response<Body> {
    if shared.config.pve_version.message_only_in_reason()
        && let Some(BodyWithoutMessage(body)) = resp.extensions_mut().remove()
    {
        *resp.body_mut() = Body::from(body.to_string());
    }
    resp
}

fn empty_response(status: u16) -> Response<Body> {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp
}

fn dropped_response() -> Response<Body> {
    let mut resp = empty_response(500);
    resp.extensions_mut().insert(DropConnection);
    resp
}

/// Everything below `/api2/json` (and anything else not served: 501).
async fn api_entry(
    State(app): State<App>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let shared = app.shared.clone();
    let raw_path = uri.path().to_owned();
    let api_path = raw_path
        .strip_prefix("/api2/json")
        .filter(|p| p.is_empty() || p.starts_with('/'))
        .map(str::to_owned);
    let mut log = LoggedRequest {
        method: method.as_str().to_owned(),
        path: api_path
            .as_deref()
            .map(unescape_path)
            .unwrap_or_else(|| raw_path.clone()),
        params: Vec::new(),
        token_id: None,
        status: 0,
    };
    // Like pveproxy handing a request to pvedaemon, the request runs on its own: a client
    // that gives up (a latency fault longer than its timeout) does not cancel it.
    let work = tokio::spawn(async move {
        let resp = match api_path {
            // A request authenticated the PBS way is for the backup server (`pbs_verify`).
            Some(path) if crate::pbs_verify::is_pbs_request(&headers) => {
                let query = uri.query().unwrap_or_default();
                log.params = decode_form(query).pairs;
                if let Ok(text) = std::str::from_utf8(&body) {
                    log.params.extend(decode_form(text).pairs);
                }
                crate::pbs_verify::serve(&shared, &method, &path, query, &headers, &body).await
            }
            Some(path) => pipeline(&shared, &method, &path, &uri, &headers, &body, &mut log).await,
            None => error_response(&ApiError::not_implemented("no such uri".to_owned())),
        };
        let resp = as_release_answers(&shared, resp);
        log.status = if resp.extensions().get::<DropConnection>().is_some() {
            0
        } else {
            resp.status().as_u16()
        };
        tracing::debug!(method = %log.method, path = %log.path, status = log.status, "api request");
        shared.state.lock().requests.push(log);
        resp
    });
    work.await.unwrap_or_else(|e| {
        tracing::error!(error = %e, "request handler panicked");
        empty_response(500)
    })
}

async fn pipeline(
    shared: &Arc<Shared>,
    method: &Method,
    path: &str,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
    log: &mut LoggedRequest,
) -> Response<Body> {
    // Parameters (decoded first so the log has them even for refused requests).
    let query = decode_form(uri.query().unwrap_or_default());
    let body_params = if body.is_empty() {
        Ok(Decoded::default())
    } else if matches!(*method, Method::GET | Method::DELETE) {
        Err(ApiError::not_implemented(format!(
            "Unexpected content for method '{method}'"
        )))
    } else if body.len() > MAX_BODY {
        Err(ApiError::not_implemented("request too large".to_owned()))
    } else {
        let ctype = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/x-www-form-urlencoded");
        if ctype.starts_with("application/json") {
            decode_json(body).ok_or_else(|| ApiError::internal("unable to parse JSON body"))
        } else if ctype.starts_with("application/x-www-form-urlencoded") {
            Ok(decode_form(&String::from_utf8_lossy(body)))
        } else {
            Err(ApiError {
                status: 506,
                message: format!("unsupported content type '{ctype}'\n"),
                errors: BTreeMap::new(),
            })
        }
    };
    log.params = query.pairs.iter().map(redact).collect();
    if let Ok(b) = &body_params {
        log.params.extend(b.pairs.iter().map(redact));
    }

    // 1. authentication: pveproxy checks credentials before it looks the path up, so an
    // unauthenticated caller learns nothing about which paths exist.
    let authid = match authenticate(shared, headers) {
        Ok(id) => id,
        Err(reason) => {
            tokio::time::sleep(shared.config.auth_failure_delay).await;
            return with_reason(empty_response(401), reason.phrase());
        }
    };
    if authid.contains('!') {
        log.token_id = Some(authid.clone());
    }

    // 2. route
    let segments: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(unescape)
        .collect();
    let Some(matched) = lookup(method.as_str(), &segments) else {
        return error_response(&ApiError::not_implemented(format!(
            "Method '{method} {}' not implemented",
            unescape_path(path)
        )));
    };
    let mut params = match body_params {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    params.override_with(query);

    // Injected request faults.
    let drop_after = match apply_faults(shared, method.as_str(), matched.spec.path).await {
        Injected::Answer(resp) => return resp,
        Injected::DropAfter => true,
        Injected::None => false,
    };

    // 3. URI/body duplicates
    let mut explicit: BTreeSet<String> = params.values.iter().map(|(k, _)| k.clone()).collect();
    for (name, value) in &matched.path_params {
        if let Some(raw) = params.get(name)
            && raw.display() != *value
        {
            return error_response(&ApiError::param(
                name,
                "duplicate parameter (already defined in URI) with conflicting values!",
            ));
        }
        explicit.remove(name);
    }

    // Calls for another node are proxied by pveproxy; this single-node cluster has none.
    if let Some((_, node)) = matched.path_params.iter().find(|(k, _)| k == "node")
        && node != shared.node()
        && crate::schema::node_name_ok(node)
    {
        return error_response(&ApiError {
            status: 596,
            message: format!("no such cluster node '{node}'\n"),
            errors: BTreeMap::new(),
        });
    }

    // 4. schema permission check
    if let Err(e) = check_perm(shared, &authid, &matched) {
        return error_response(&e);
    }

    // 5. parameter validation
    let validated = match validate(&matched, &params) {
        Ok(v) => v,
        Err(e) => return error_response(&e),
    };

    // 6. handler
    let ctx = Ctx {
        shared: shared.clone(),
        authid,
        params: validated,
        explicit,
    };
    let resp = match dispatch(matched.spec.handler, &ctx).await {
        Ok(Reply::Data(v)) => json_response(200, &json!({ "data": v })),
        Ok(Reply::DataWithTotal(v, total)) => {
            json_response(200, &json!({ "data": v, "total": total }))
        }
        Err(e) => error_response(&e),
    };
    if drop_after {
        tracing::info!(method = %method, path, status = resp.status().as_u16(), "request carried out, answer dropped (fault)");
        return dropped_response();
    }
    resp
}

/// Parameters that carry secrets (PBS password, encryption key, Ceph keyring) are never
/// recorded in the request log.
const SECRET_PARAMS: &[&str] = &["password", "encryption-key", "keyring"];

fn redact((k, v): &(String, String)) -> (String, String) {
    if SECRET_PARAMS.contains(&k.as_str()) {
        (k.clone(), "<redacted>".to_owned())
    } else {
        (k.clone(), v.clone())
    }
}

/// What the fault layer decided for one request.
enum Injected {
    /// No fault: handle and answer.
    None,
    /// Answer this instead of handling the request.
    Answer(Response<Body>),
    /// Handle the request, then close the connection instead of answering.
    DropAfter,
}

/// Latency, dropped connections, 596 and 500 from the first matching endpoint rule.
async fn apply_faults(shared: &Shared, method: &str, template: &str) -> Injected {
    let rule = {
        let st = shared.state.lock();
        st.faults
            .endpoints
            .iter()
            .find(|f| f.matches(method, template))
            .cloned()
    };
    let Some(rule) = rule else {
        return Injected::None;
    };
    if !rule.latency.is_zero() {
        tokio::time::sleep(rule.latency).await;
    }
    if shared.roll(rule.drop_rate) {
        tracing::info!(method, template, "dropping connection (fault)");
        return Injected::Answer(dropped_response());
    }
    if shared.roll(rule.busy_rate) {
        return Injected::Answer(with_reason(empty_response(596), "Connection timed out"));
    }
    if shared.roll(rule.error_rate) {
        return Injected::Answer(error_response(&ApiError::internal(&rule.error_message)));
    }
    if shared.roll(rule.drop_after_rate) {
        return Injected::DropAfter;
    }
    Injected::None
}

/// Why a request was not authenticated (the 401's reason phrase).
#[derive(Debug, Clone, Copy)]
enum AuthFailure {
    /// No credentials at all.
    NoTicket,
    /// Credentials that do not check out (the real cause is only logged).
    Failed,
}

impl AuthFailure {
    fn phrase(self) -> &'static str {
        match self {
            AuthFailure::NoTicket => "No ticket",
            AuthFailure::Failed => "Authentication failed!",
        }
    }
}

/// Parses `PVEAPIToken=user@realm!tokenid=secret` (a space may replace the first `=`).
fn authenticate(shared: &Shared, headers: &HeaderMap) -> Result<String, AuthFailure> {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return Err(AuthFailure::NoTicket);
    };
    let value = unescape(value);
    let rest = value
        .strip_prefix("PVEAPIToken=")
        .or_else(|| value.strip_prefix("PVEAPIToken "))
        .ok_or(AuthFailure::NoTicket)?;
    let Some((id, secret)) = rest.rsplit_once('=') else {
        tracing::info!("authentication failure: malformed token value");
        return Err(AuthFailure::Failed);
    };
    let id = id.trim();
    let found = shared
        .state
        .lock()
        .access
        .authenticate_token(id, secret.trim());
    found.ok_or_else(|| {
        tracing::info!(
            token_id = id,
            "authentication failure: invalid token value!"
        );
        AuthFailure::Failed
    })
}

fn check_perm(shared: &Shared, authid: &str, matched: &Matched) -> Result<(), ApiError> {
    let Perm::Check { path, privs, any } = matched.spec.perm else {
        return Ok(());
    };
    // PVE 8 has one privilege for the whole guest agent.
    let (privs, any) = if shared.config.pve_version.is_pve8()
        && path == "/vms/{vmid}"
        && matched.spec.path.contains("/agent/")
    {
        (&["VM.Monitor"][..], false)
    } else {
        (privs, any)
    };
    let mut acl_path = path.to_owned();
    for (name, value) in &matched.path_params {
        acl_path = acl_path.replace(&format!("{{{name}}}"), value);
    }
    let st = shared.state.lock();
    let have = |p: &&str| st.access.has(authid, &acl_path, p);
    let ok = if any {
        privs.iter().any(have)
    } else {
        privs.iter().all(have)
    };
    if ok {
        return Ok(());
    }
    let missing = if any {
        privs.join("|")
    } else {
        privs
            .iter()
            .find(|p| !have(p))
            .map(|p| (*p).to_owned())
            .unwrap_or_default()
    };
    Err(ApiError::perm(&acl_path, &missing))
}

pub(crate) fn validate(
    matched: &Matched,
    params: &Decoded,
) -> Result<BTreeMap<String, String>, ApiError> {
    let mut errors = BTreeMap::new();
    let mut out = BTreeMap::new();
    for (name, value) in &matched.path_params {
        out.insert(name.clone(), value.clone());
    }
    for (name, raw) in &params.values {
        let Some(spec) = matched.spec.param(name) else {
            errors.insert(
                name.clone(),
                "property is not defined in schema and the schema does not allow additional properties\n"
                    .to_owned(),
            );
            continue;
        };
        match check_value(&spec.kind, raw) {
            Ok(v) => {
                out.insert(name.clone(), v);
            }
            Err(msg) => {
                errors.insert(name.clone(), msg);
            }
        }
    }
    for (name, value) in &matched.path_params {
        if let Some(spec) = matched.spec.param(name)
            && let Err(msg) = check_value(&spec.kind, &crate::schema::RawValue::One(value.clone()))
        {
            errors.insert(name.clone(), msg);
        }
    }
    for spec in matched.spec.all_params() {
        if !spec.optional && !spec.name.ends_with("[n]") && !out.contains_key(spec.name) {
            errors
                .entry(spec.name.to_owned())
                .or_insert_with(|| "property is missing and it is not optional\n".to_owned());
        }
        if let Some(required) = spec.requires
            && out.contains_key(spec.name)
            && !out.contains_key(required)
        {
            errors
                .entry(required.to_owned())
                .or_insert_with(|| format!("missing property required by '{}'\n", spec.name));
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(ApiError::params(errors))
    }
}

pub(crate) async fn dispatch(handler: Handler, ctx: &Ctx) -> crate::api::HandlerResult {
    use crate::{access, lxc, lxc_config, snapshot, storage, storage_config, tasks, vzdump};
    match handler {
        Handler::Version => access::version(ctx),
        Handler::Nodes => access::nodes(ctx),
        Handler::NodeStatus => access::node_status(ctx),
        Handler::ClusterResources => crate::cluster::resources(ctx),
        Handler::ClusterStatus => crate::cluster::status(ctx),
        Handler::NextId => access::nextid(ctx),
        Handler::Permissions => access::permissions(ctx),
        Handler::LxcList => lxc::list(ctx),
        Handler::LxcCreate => lxc::create(ctx).await,
        Handler::LxcConfigGet => lxc_config::get(ctx),
        Handler::LxcConfigPut => lxc_config::put(ctx).await,
        Handler::LxcStatus => lxc::status(ctx),
        Handler::LxcInterfaces => lxc::interfaces(ctx),
        Handler::LxcPending => lxc::pending(ctx),
        Handler::LxcStart => lxc::start(ctx),
        Handler::LxcStop => lxc::stop(ctx),
        Handler::LxcShutdown => lxc::shutdown(ctx),
        Handler::LxcDestroy => lxc::destroy(ctx).await,
        Handler::LxcResize => lxc_config::resize(ctx).await,
        Handler::SnapshotList => snapshot::list(ctx),
        Handler::SnapshotCreate => snapshot::create(ctx),
        Handler::SnapshotDelete => snapshot::delete(ctx),
        Handler::SnapshotRollback => snapshot::rollback(ctx),
        Handler::SnapshotIndex => snapshot::index(ctx),
        Handler::SnapshotConfigGet => snapshot::config_get(ctx),
        Handler::SnapshotConfigPut => snapshot::config_put(ctx),
        Handler::Vzdump => vzdump::start(ctx),
        Handler::StorageIndex => storage::index(ctx).await,
        Handler::StorageStatus => storage::status(ctx).await,
        Handler::StorageCreate => storage_config::create(ctx),
        Handler::StorageConfigIndex => storage_config::index(ctx),
        Handler::StorageConfigRead => storage_config::read(ctx),
        Handler::StorageConfigUpdate => storage_config::update(ctx),
        Handler::StorageConfigDelete => crate::storage_delete::delete(ctx),
        Handler::ContentList => storage::content(ctx).await,
        Handler::ContentDelete => storage::delete_content(ctx).await,
        Handler::ContentGet => storage::volume_attributes(ctx),
        Handler::ExtractConfig => crate::extract_config::extract_config(ctx),
        Handler::ContentPut => storage::update_volume_attributes(ctx),
        Handler::TaskList => tasks::list(ctx),
        Handler::TaskStatus => tasks::status(ctx),
        Handler::TaskLog => tasks::log(ctx),
        Handler::FirewallGet => crate::firewall::get(ctx),
        Handler::FirewallPut => crate::firewall::put(ctx),
        Handler::VmFirewallGet => crate::firewall::get_vm(ctx),
        Handler::VmFirewallPut => crate::firewall::put_vm(ctx),
        Handler::DatacenterFirewall => crate::firewall::datacenter(ctx),
        Handler::DiskList => crate::hardware::list(ctx),
        Handler::DiskSmart => crate::hardware::smart(ctx),
        Handler::DiskLvmthin => crate::hardware::lvmthin(ctx),
        Handler::DiskZfs => crate::hardware::zfs(ctx),
        Handler::NetworkList => crate::network::list(ctx),
        Handler::Qemu(h) => crate::qemu_routes::dispatch(h, ctx).await,
        Handler::Access(h) => crate::access_admin::dispatch(h, ctx),
    }
}

/// Makes one [`DropService`] per connection.
pub(crate) fn make_service(
    router: Router,
) -> impl tower::Service<
    std::net::SocketAddr,
    Response = DropService,
    Error = Infallible,
    Future = std::future::Ready<Result<DropService, Infallible>>,
> + Clone {
    let svc = DropService { inner: router };
    tower::service_fn(move |_addr: std::net::SocketAddr| std::future::ready(Ok(svc.clone())))
}
