//! Request bodies a handler did not read to the end: a GET that came with a body, a request
//! refused before its body was looked at (401, 403, 404, 429), a body over the limit (413).
//!
//! hyper closes a kept-alive connection whose request body was left unread, without saying
//! so in the answer: the client's next request on it fails, and a large body still arriving
//! turns the close into a reset that can swallow the answer itself. [`settle`] keeps what the
//! handler leaves of the body and, once the answer is ready, drains it within
//! [`DrainLimits`] so the answer goes out on a connection that stays usable. When the rest is
//! longer, stalls or breaks, the answer says `Connection: close` instead and the connection
//! ends after it.
//!
//! [`conn`] closes connections that hold their place without a request.

pub mod conn;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, BodyDataStream, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Version, header};
use axum::middleware::Next;
use axum::response::Response;
use futures::{Stream, StreamExt as _};
use parking_lot::Mutex;

/// How much of an unread body is drained, and for how long, to keep its connection open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainLimits {
    /// The most bytes read and thrown away.
    pub max_bytes: u64,
    /// The longest the rest may take to arrive.
    pub timeout: Duration,
}

impl DrainLimits {
    /// The most bytes drained, whatever the timeout: far above any body a controller sends.
    pub const MAX_BYTES: u64 = 8 * 1024 * 1024;

    /// Drains up to [`Self::MAX_BYTES`] within `timeout` (the body timeout).
    pub fn within(timeout: Duration) -> Self {
        Self {
            max_bytes: Self::MAX_BYTES,
            timeout,
        }
    }
}

/// What a handler left of a request body, handed back when it dropped the body.
type Leftover = Arc<Mutex<Option<BodyDataStream>>>;

/// Middleware: drains what the handler left of the request body, or closes the connection
/// after the answer.
pub async fn settle(State(limits): State<DrainLimits>, request: Request, next: Next) -> Response {
    // HTTP/2 ends a stream whose body is unread on its own, and the connection lives on.
    if HttpBody::is_end_stream(request.body()) || request.version() > Version::HTTP_11 {
        return next.run(request).await;
    }
    let expects_continue = request
        .headers()
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let leftover = Leftover::default();
    let request = request.map(|body| {
        Body::from_stream(Watched {
            inner: Some(body.into_data_stream()),
            ended: false,
            leftover: Arc::clone(&leftover),
        })
    });
    let mut response = next.run(request).await;
    let Some(rest) = leftover.lock().take() else {
        return response;
    };
    // A client that waits for `100 Continue` has sent nothing yet; asking for the body only
    // to throw it away would cost both sides the transfer.
    if says_close(response.headers()) || expects_continue || !drain(rest, limits).await {
        tracing::debug!(
            status = response.status().as_u16(),
            "request body left unread; the connection closes after the answer"
        );
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// Whether an answer already ends its connection.
fn says_close(headers: &HeaderMap) -> bool {
    headers.get_all(header::CONNECTION).iter().any(|v| {
        v.to_str()
            .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")))
    })
}

/// Reads `rest` to its end and throws it away; false when it is longer than `limits` allow
/// (declared or seen), breaks, or does not end in time.
async fn drain(mut rest: BodyDataStream, limits: DrainLimits) -> bool {
    if HttpBody::size_hint(&rest).lower() > limits.max_bytes {
        return false;
    }
    let read = async {
        let mut seen: u64 = 0;
        while let Some(chunk) = rest.next().await {
            let Ok(chunk) = chunk else {
                return false;
            };
            seen = seen.saturating_add(u64::try_from(chunk.len()).unwrap_or(u64::MAX));
            if seen > limits.max_bytes {
                return false;
            }
        }
        true
    };
    tokio::time::timeout(limits.timeout, read)
        .await
        .unwrap_or(false)
}

/// The request body as the handler sees it; dropped before its end, it hands the rest back
/// to [`settle`].
struct Watched {
    inner: Option<BodyDataStream>,
    ended: bool,
    leftover: Leftover,
}

impl Stream for Watched {
    type Item = Result<Bytes, axum::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let next = inner.poll_next_unpin(cx);
        if let Poll::Ready(None) = next {
            this.ended = true;
        }
        next
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take()
            && !self.ended
            && !HttpBody::is_end_stream(&inner)
        {
            *self.leftover.lock() = Some(inner);
        }
    }
}
