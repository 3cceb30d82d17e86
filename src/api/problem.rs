//! `application/problem+json` (RFC 9457) responses: every refusal says what is wrong and what
//! the client should do.

use std::fmt;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::contracts::REQUEST_ID_FORMAT;

pub const CONTENT_TYPE: &str = "application/problem+json";

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    #[serde(rename = "type")]
    pub kind: String,
    pub title: &'static str,
    pub status: u16,
    pub detail: String,
    #[serde(rename = "expectedFormat", skip_serializing_if = "Option::is_none")]
    pub expected_format: Option<&'static str>,
    #[serde(rename = "retryAfterSeconds", skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u32>,
    /// The id of a 500 in the service's log, where the error's text is.
    #[serde(rename = "errorId", skip_serializing_if = "Option::is_none")]
    pub error_id: Option<String>,
}

impl Problem {
    pub fn new(
        status: StatusCode,
        kind: &str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> Problem {
        Problem {
            kind: format!("https://idemguard.dev/problems/{kind}"),
            title,
            status: status.as_u16(),
            detail: detail.into(),
            expected_format: None,
            retry_after: None,
            error_id: None,
        }
    }

    /// 400: the Idempotency-Key is missing or malformed.
    pub fn bad_key(detail: impl Into<String>) -> Problem {
        Problem {
            expected_format: Some(REQUEST_ID_FORMAT),
            ..Problem::new(
                StatusCode::BAD_REQUEST,
                "invalid-idempotency-key",
                "Invalid Idempotency-Key",
                detail,
            )
        }
    }

    /// 400: the body is not the JSON this endpoint takes. The parser's message quotes the
    /// offending value; it is cut so a 60 KB string is not echoed back.
    pub fn bad_body(detail: impl Into<String>) -> Problem {
        let detail: String = detail.into();
        let cut: String = detail.chars().take(300).collect();
        let detail = if cut.len() < detail.len() {
            format!("{cut}…")
        } else {
            detail
        };
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-body",
            "Invalid request body",
            detail,
        )
    }

    /// 409 + Retry-After: the first request with this key is still being processed.
    pub fn in_flight(retry_after: u32) -> Problem {
        Problem {
            retry_after: Some(retry_after),
            ..Problem::new(
                StatusCode::CONFLICT,
                "request-in-progress",
                "A request with this Idempotency-Key is in progress",
                "the first request with this key has not finished; retry with the same key after Retry-After seconds",
            )
        }
    }

    /// 422: the key was used for a different request.
    pub fn key_reused() -> Problem {
        Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency-key-reused",
            "Idempotency-Key reused with a different request",
            "this key was first used with a different method, path or body; send a new key for a new request",
        )
    }

    /// 500: the outcome is unknown; the record was released so a retry with the same key is safe.
    ///
    /// The client never sees `error`: an internal error's text can carry a database URL, SQL or
    /// a table name. It goes to the log (with URLs redacted where they are formatted) under a
    /// fresh error id, and the answer carries only that id.
    pub fn internal(what: impl fmt::Display, error: impl fmt::Display) -> Problem {
        let id = uuid::Uuid::now_v7().to_string();
        tracing::error!(error_id = %id, "{what}: {error}");
        Problem {
            error_id: Some(id.clone()),
            ..Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "Internal error",
                format!("the service could not complete the request; retrying it with the same Idempotency-Key is safe; quote error id {id} when reporting it"),
            )
        }
    }

    pub fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    pub fn body(&self) -> String {
        serde_json::to_string(self).expect("a problem serializes")
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let mut res = (
            self.status_code(),
            [(header::CONTENT_TYPE, CONTENT_TYPE)],
            self.body(),
        )
            .into_response();
        if let Some(s) = self.retry_after {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        res.extensions_mut().insert(ProblemKind(self.kind));
        res
    }
}

/// A refusal's problem type, carried to the metrics layer beside the response (never sent):
/// two refusals with one status (422: a key reused, an order refused) are told apart by it.
#[derive(Debug, Clone)]
pub struct ProblemKind(pub String);
