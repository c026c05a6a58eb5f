//! A compromised hub's artifact answer, as the agent sees it: a TLS front that presents the
//! hub's own certificate and key (so the agent's pin holds), passes every request through to
//! the real hub, and answers the download of one artifact with other bytes. The hub checks what
//! it serves against the digest, so an honest hub cannot be made to serve other bytes; this
//! stands in for one that does, to hold the agent to its own check.

use std::path::Path;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Headers a hop answers for itself, never passed through.
const HOP: [header::HeaderName; 4] = [
    header::HOST,
    header::CONNECTION,
    header::CONTENT_LENGTH,
    header::TRANSFER_ENCODING,
];

struct Shared {
    upstream: String,
    client: reqwest::Client,
    /// The artifact (its SHA-256) answered with other bytes.
    swapped: Mutex<Option<(String, Vec<u8>)>>,
}

/// The front; stops when dropped.
pub struct SwapProxy {
    /// Where agents reach it (`https://127.0.0.1:PORT`).
    pub url: String,
    shared: Arc<Shared>,
    handle: axum_server::Handle<std::net::SocketAddr>,
}

impl SwapProxy {
    /// A front for the hub at `upstream`, with the certificate and key in `tls_dir`
    /// (`cert.pem`, `key.pem`), reaching it through `client` (pinned to that certificate).
    pub fn start(upstream: &str, tls_dir: &Path, client: reqwest::Client) -> Self {
        let cert = CertificateDer::from_pem_file(tls_dir.join("cert.pem")).unwrap();
        let key = PrivateKeyDer::from_pem_file(tls_dir.join("key.pem")).unwrap();
        let mut tls = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap();
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let shared = Arc::new(Shared {
            upstream: upstream.to_owned(),
            client,
            swapped: Mutex::new(None),
        });
        let app = axum::Router::new()
            .fallback(forward)
            .layer(DefaultBodyLimit::disable())
            .with_state(Arc::clone(&shared));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!(
            "https://127.0.0.1:{}",
            listener.local_addr().unwrap().port()
        );
        let handle = axum_server::Handle::new();
        let server = axum_server::from_tcp_rustls(
            listener,
            axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(tls)),
        )
        .unwrap()
        .handle(handle.clone());
        tokio::spawn(async move { server.serve(app.into_make_service()).await });
        Self {
            url,
            shared,
            handle,
        }
    }

    /// From now on, the download of `sha256` is answered with `bytes`.
    pub fn swap(&self, sha256: &str, bytes: Vec<u8>) {
        *self.shared.swapped.lock() = Some((sha256.to_owned(), bytes));
    }
}

impl Drop for SwapProxy {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

async fn forward(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    if method == Method::GET
        && let Some((sha256, bytes)) = &*shared.swapped.lock()
        && path.ends_with(&format!("/artifacts/{sha256}"))
    {
        return (
            [(header::CONTENT_TYPE, "application/octet-stream")],
            bytes.clone(),
        )
            .into_response();
    }
    let mut request = shared
        .client
        .request(method, format!("{}{path}", shared.upstream))
        .body(body);
    for (name, value) in &headers {
        if !HOP.contains(name) {
            request = request.header(name, value);
        }
    }
    let answer = match request.send().await {
        Ok(answer) => answer,
        Err(err) => return (StatusCode::BAD_GATEWAY, err.to_string()).into_response(),
    };
    let status = answer.status();
    let mut passed = HeaderMap::new();
    for (name, value) in answer.headers() {
        if !HOP.contains(name) {
            passed.append(name, value.clone());
        }
    }
    match answer.bytes().await {
        Ok(bytes) => (status, passed, bytes).into_response(),
        Err(err) => (StatusCode::BAD_GATEWAY, err.to_string()).into_response(),
    }
}
