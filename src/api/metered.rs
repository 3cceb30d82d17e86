//! Every answered request counted by route and outcome, with its duration
//! (`idemguard_api_requests_total`, `idemguard_api_request_duration_seconds`). The outermost
//! layer, so refusals made before a handler runs (a body too large or too slow) are counted.
//! Route and outcome are names from closed sets: the path's orderNo is never a label.

use std::time::Instant;

use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

use super::guard::REPLAYED_HEADER;
use super::problem::ProblemKind;

pub async fn count(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = route_of(request.method(), request.uri().path());
    let response = next.run(request).await;
    if let Some(m) = crate::metrics::recording() {
        m.api_request(route, outcome_of(route, &response), started.elapsed());
    }
    response
}

fn route_of(method: &Method, path: &str) -> &'static str {
    match (method.as_str(), path) {
        ("POST", "/orders") => "create_order",
        ("POST", "/payments/callback") => "payment_callback",
        ("GET", "/healthz") => "healthz",
        ("GET", p) if p.starts_with("/orders/") => "get_order",
        _ => "other",
    }
}

/// What the answer says happened, in the words of the Idempotency-Key flow.
fn outcome_of(route: &str, response: &Response) -> &'static str {
    if response.headers().contains_key(REPLAYED_HEADER) {
        return "replayed";
    }
    let posted = matches!(route, "create_order" | "payment_callback");
    let kind = response.extensions().get::<ProblemKind>();
    match response.status() {
        s if s.is_success() && posted => "created",
        s if s.is_success() => "ok",
        StatusCode::CONFLICT => "in_flight_rejected",
        StatusCode::UNPROCESSABLE_ENTITY
            if kind.is_some_and(|k| k.0.ends_with("/idempotency-key-reused")) =>
        {
            "key_reused"
        }
        StatusCode::UNPROCESSABLE_ENTITY => "business_refusal",
        StatusCode::NOT_FOUND => "not_found",
        s if s.is_client_error() => "bad_input",
        // A POST's record was released so that a retry with the same key is safe.
        s if s.is_server_error() && posted => "abandoned",
        _ => "error",
    }
}
