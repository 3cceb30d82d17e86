//! The HTTP edge of `idemguard serve`: how connections are accepted and read, and the one rule
//! that every error answer is `application/problem+json`.
//!
//! `axum::serve` has no read timeouts and no connection limit: a client sending its headers (or
//! its body) one byte every few seconds, or simply holding idle connections, kept them open for
//! as long as it liked. Here:
//! - at most `api.max_connections` connections are served at once; the rest wait in the listen
//!   backlog (each connection holds a semaphore permit until it closes);
//! - a request head must be complete within `api.header_read_timeout` of its first byte, and a
//!   keep-alive connection may wait at most `api.idle_timeout` for its next request (hyper's
//!   own header timer, which starts as soon as a connection waits, enforces the idle limit; a
//!   per-connection deadline started by the head's first byte enforces the head limit);
//! - [`read_body`] reads the whole body within `api.body_read_timeout` and at most
//!   [`MAX_BODY_BYTES`], answering 408 or 413 and closing the connection otherwise.
//!
//! What cannot be changed: a request hyper cannot parse (a bare CR or a NUL in a header, a raw
//! non-ASCII byte in the path, more than 100 headers, a head over hyper's buffer) is answered by
//! hyper itself with an empty 400 or 431 and the connection closed, before any of our code runs;
//! hyper 1.x has no hook for that answer.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures::StreamExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;

use super::problem::{Problem, CONTENT_TYPE as PROBLEM_JSON};
use crate::config::ApiConfig;

/// The largest request body read. The API's bodies are a few hundred bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Serves `app` on `listener` until `stop`, then lets the requests in flight finish.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: &ApiConfig,
    stop: CancellationToken,
) {
    let max = limits.max_connections;
    let permits = Arc::new(Semaphore::new(max));
    let mut http = hyper::server::conn::http1::Builder::new();
    // hyper's header timer starts whenever a connection waits for a request head, idle or not:
    // set to the idle limit it closes idle keep-alive connections; `head_deadline` enforces the
    // shorter limit on a head once its first byte has arrived.
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout.max(limits.header_read_timeout));
    loop {
        // Take a permit before accepting: beyond the limit, connections wait in the backlog.
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            _ = stop.cancelled() => break,
        };
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "accept failed; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        // Answers go out as soon as they are written: without TCP_NODELAY a small response can
        // wait on Nagle's algorithm for the ACK of the one before.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set on an accepted connection");
        }
        let activity = Arc::new(Activity::default());
        let io = TokioIo::new(Watched {
            tcp,
            activity: activity.clone(),
        });
        let conn = http.serve_connection(io, counted(app.clone(), activity.clone()));
        let (stop, head_limit) = (stop.clone(), limits.header_read_timeout);
        tokio::spawn(async move {
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = head_deadline(&activity, head_limit) => {} // dropped: the socket closes
                _ = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            drop(permit);
        });
    }
    drop(listener);
    // Every connection holds a permit until it ends: all permits back = all connections done.
    let _ = permits.acquire_many(max as u32).await;
}

/// What a connection is doing, as far as the head deadline needs to know.
#[derive(Default)]
struct Activity {
    /// When the first byte of a request head arrived, while no request is being served.
    head_since: Mutex<Option<Instant>>,
    in_request: AtomicBool,
    head_begun: Notify,
}

impl Activity {
    fn bytes_read(&self) {
        if self.in_request.load(Ordering::Acquire) {
            return;
        }
        let mut since = self.head_since.lock().expect("activity");
        if since.is_none() {
            *since = Some(Instant::now());
            self.head_begun.notify_one();
        }
    }
}

/// Ends when a request head has been arriving for longer than `limit`.
async fn head_deadline(activity: &Activity, limit: Duration) {
    loop {
        activity.head_begun.notified().await;
        loop {
            let since = *activity.head_since.lock().expect("activity");
            let Some(since) = since else { break };
            let left = limit.saturating_sub(since.elapsed());
            if left.is_zero() {
                return;
            }
            tokio::time::sleep(left).await;
        }
    }
}

/// The app, marking the connection busy from the moment hyper hands it a parsed head until the
/// answer is produced (or the request is dropped).
fn counted(
    app: Router,
    activity: Arc<Activity>,
) -> impl hyper::service::Service<
    axum::http::Request<Incoming>,
    Response = Response,
    Error = Infallible,
    Future: Send,
> + Clone {
    let service = move |req: axum::http::Request<Incoming>| {
        let (mut app, busy) = (app.clone(), Busy::new(activity.clone()));
        async move {
            let res = tower_service::Service::call(&mut app, req).await;
            drop(busy);
            res
        }
    };
    hyper::service::service_fn(service)
}

struct Busy(Arc<Activity>);

impl Busy {
    fn new(activity: Arc<Activity>) -> Busy {
        activity.in_request.store(true, Ordering::Release);
        *activity.head_since.lock().expect("activity") = None;
        Busy(activity)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.in_request.store(false, Ordering::Release);
    }
}

/// A TCP stream that tells its connection's [`Activity`] when bytes arrive.
struct Watched {
    tcp: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.tcp).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.bytes_read();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}

/// Reads the request body in full before any handler runs: within `body_read_timeout` (408) and
/// at most [`MAX_BODY_BYTES`] (413). Both answers close the connection, whose unread rest
/// cannot be skipped.
pub async fn read_body(State(timeout): State<Duration>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return closing(too_large());
    }
    let bytes = match tokio::time::timeout(timeout, collect(body)).await {
        Ok(Ok(b)) => b,
        Ok(Err(p)) => return closing(p),
        Err(_) => {
            let detail = format!(
                "the body did not arrive within {}; send it at once",
                humantime::format_duration(timeout)
            );
            return closing(Problem::new(
                StatusCode::REQUEST_TIMEOUT,
                "body-timeout",
                "Request body too slow",
                detail,
            ));
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

async fn collect(body: Body) -> Result<Bytes, Problem> {
    let mut stream = body.into_data_stream();
    let mut buf = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| {
            Problem::bad_body(
                "the body could not be read (connection broken or malformed chunked encoding)",
            )
        })?;
        if buf.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(too_large());
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(buf))
}

fn too_large() -> Problem {
    Problem::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body-too-large",
        "Request body too large",
        format!("the body is larger than {MAX_BODY_BYTES} bytes"),
    )
}

fn closing(problem: Problem) -> Response {
    let mut res = problem.into_response();
    res.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    res
}

/// Unknown routes.
pub async fn no_route() -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "no-route",
        "No such route",
        "the service answers POST /orders, GET /orders/{orderNo}, POST /payments/callback and GET /healthz",
    )
}

/// A known route with the wrong method (axum keeps the `Allow` header).
pub async fn wrong_method(method: Method) -> Problem {
    let shown: String = method.as_str().chars().take(20).collect();
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
        "Method not allowed",
        format!("this route does not take {shown}; see the Allow header"),
    )
}

/// Every error answer is problem+json: the rejections axum's extractors answer in text/plain
/// (a path that is not UTF-8, …) are rewritten here, keeping their status and headers. A 5xx
/// text is never passed on (it could carry an internal error).
pub async fn problem_for_bare_errors(req: Request, next: Next) -> Response {
    let res = next.run(req).await;
    let status = res.status();
    let is_problem = res
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v == PROBLEM_JSON);
    if is_problem || !(status.is_client_error() || status.is_server_error()) {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    let problem = if status.is_server_error() {
        Problem::internal("an error answer without a problem body", status)
    } else {
        let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
        let text: String = String::from_utf8_lossy(&text).chars().take(200).collect();
        let detail = if text.trim().is_empty() {
            "the request was refused".to_string()
        } else {
            text
        };
        let title = status.canonical_reason().unwrap_or("Client error");
        Problem::new(status, &format!("http-{}", status.as_u16()), title, detail)
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    parts
        .headers
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    Response::from_parts(parts, Body::from(problem.body()))
}
