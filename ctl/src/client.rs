//! The admin API client: pinned TLS, bearer token, JSON errors mapped to [`CtlError::Hub`].

use std::time::Duration;

use bosun_proto::admin::ErrorBody;
use reqwest::Method;
use secrecy::ExposeSecret as _;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::config::Settings;
use crate::error::CtlError;
use crate::global::GlobalArgs;

/// A client for one hub.
#[derive(Debug, Clone)]
pub struct HubClient {
    http: reqwest::Client,
    settings: Settings,
}

/// A client for the hub the global options and the config file name.
pub fn connect(global: &GlobalArgs) -> Result<HubClient, CtlError> {
    HubClient::new(crate::config::resolve(global)?)
}

impl HubClient {
    /// Builds a client pinned to the configured fingerprint.
    pub fn new(settings: Settings) -> Result<Self, CtlError> {
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(crate::tls::pinned(&settings.fingerprint)?)
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|source| CtlError::NotSent {
                url: settings.url.clone(),
                source,
            })?;
        Ok(Self { http, settings })
    }

    /// The hub this client talks to, its pin and the admin token.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Sends a request and returns the JSON answer (`Value::Null` for an empty body).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, String)],
    ) -> Result<Value, CtlError> {
        self.call_typed(method, path, body, "application/json", headers)
            .await
    }

    /// [`HubClient::call`] with the body's content type (`application/octet-stream` for an
    /// artifact, given ten minutes).
    pub async fn call_typed(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        content_type: &str,
        headers: &[(&str, String)],
    ) -> Result<Value, CtlError> {
        let url = format!("{}{path}", self.settings.url);
        let mut request = self
            .http
            .request(method, &url)
            .bearer_auth(self.settings.token.expose_secret());
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        if let Some(body) = body {
            if content_type != "application/json" {
                request = request.timeout(Duration::from_secs(600));
            }
            request = request.header("content-type", content_type).body(body);
        }
        let response = request.send().await.map_err(|source| {
            if source.is_connect() || source.is_builder() {
                CtlError::NotSent {
                    url: url.clone(),
                    source,
                }
            } else {
                CtlError::OutcomeUnknown {
                    url: url.clone(),
                    source,
                }
            }
        })?;
        let status = response.status();
        let request_id = response
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = response
            .bytes()
            .await
            .map_err(|source| CtlError::OutcomeUnknown {
                url: url.clone(),
                source,
            })?;
        if !status.is_success() {
            let (code, message) = match serde_json::from_slice::<ErrorBody>(&bytes) {
                Ok(body) => (body.code, body.message),
                Err(_) => (
                    "unexpected".to_owned(),
                    String::from_utf8_lossy(&bytes).chars().take(300).collect(),
                ),
            };
            return Err(CtlError::Hub {
                status: status.as_u16(),
                code,
                message,
                request_id,
            });
        }
        if bytes.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&bytes).map_err(|source| CtlError::Decode {
            what: path.to_owned(),
            source,
        })
    }

    /// GET a JSON document.
    pub async fn get(&self, path: &str) -> Result<Value, CtlError> {
        self.call(Method::GET, path, None, &[]).await
    }
}

/// A newest-first list the hub answered, cut to its first `limit` entries (a hub that does not
/// know `?limit=` answers them all); anything but a list as it is.
pub fn newest(mut value: Value, limit: u32) -> Value {
    if let Some(items) = value.as_array_mut() {
        items.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    }
    value
}

/// Decodes an answer into its typed form.
pub fn decode<T: DeserializeOwned>(what: &str, value: Value) -> Result<T, CtlError> {
    serde_json::from_value(value).map_err(|source| CtlError::Decode {
        what: what.to_owned(),
        source,
    })
}
