//! The baselines for the API: the same HTTP server as `idemguard serve` (the same
//! [`edge::serve`] — hyper http1, TCP_NODELAY, the connection limit and timers — and the same
//! two middleware layers), the same database and Redis, doing only the work the design
//! requires, with none of idemguard's logic:
//!
//! - `POST /orders`: the three durable statements of a new order — the claim insert, the
//!   create routine, the finalize update — run through `Database::sql` (the project's own
//!   statements under queries/, not copies), one after another, then 201 with the order. No
//!   key validation, request hash, fast path, request lock, trace event or detached task.
//! - `POST /replays`: one Redis `GET` of the stored answer, returned as 201. No body parse,
//!   hash check, replay count or trace event.
#![allow(dead_code)]

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{middleware, Router};
use redis::aio::ConnectionManager;
use sqlx::Row;
use tokio_util::sync::CancellationToken;

use idemguard::api::edge;
use idemguard::api::idempotency::OrderView;
use idemguard::api::server::CreateOrderRequest;
use idemguard::config::Config;
use idemguard::contracts::{now_ms, OrderNo};
use idemguard::db::Database;

/// The hash column's value: the baseline checks no payload.
const NO_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";
const OWNER: &str = "bench-baseline";

struct Durable {
    db: Database,
    redis: ConnectionManager,
    lease_ms: i64,
    retention_ms: i64,
    /// Where the replay answers are stored: `{replay_prefix}{Idempotency-Key}`.
    replay_prefix: String,
}

pub struct Baseline {
    pub addr: std::net::SocketAddr,
    pub shutdown: CancellationToken,
    pub done: tokio::task::JoinHandle<()>,
}

/// Starts the baseline service on a free port, with its own pool (the service's size) on the
/// database of `config` and its own connection to `redis.url`.
pub async fn start(config: &Config, replay_prefix: &str) -> Baseline {
    let db = Database::connect(config)
        .await
        .expect("the baseline connects to the database");
    let client = redis::Client::open(config.redis.url.as_str()).expect("redis.url");
    let redis = ConnectionManager::new(client)
        .await
        .expect("the baseline connects to Redis");
    let state = Arc::new(Durable {
        db,
        redis,
        lease_ms: config.idempotency.lease.as_millis() as i64,
        retention_ms: config.idempotency.retention.as_millis() as i64,
        replay_prefix: replay_prefix.to_string(),
    });
    let app = Router::new()
        .route("/orders", post(durable_order))
        .route("/replays", post(one_get))
        .with_state(state)
        .layer(middleware::from_fn_with_state(
            config.api.body_read_timeout,
            edge::read_body,
        ))
        .layer(middleware::from_fn(edge::problem_for_bare_errors));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let (limits, stop) = (config.api.clone(), shutdown.clone());
    let done = tokio::spawn(async move { edge::serve(listener, app, &limits, stop).await });
    Baseline {
        addr,
        shutdown,
        done,
    }
}

fn failed(what: &str, e: impl std::fmt::Display) -> Response {
    (StatusCode::INTERNAL_SERVER_ERROR, format!("{what}: {e}")).into_response()
}

fn key_of(headers: &HeaderMap) -> &str {
    headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

async fn durable_order(State(s): State<Arc<Durable>>, headers: HeaderMap, body: Bytes) -> Response {
    let key = key_of(&headers);
    let req: CreateOrderRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let (db, now) = (&s.db, now_ms());
    let claim = sqlx::query(db.sql("api_idem_claim"))
        .bind(key)
        .bind(idemguard::contracts::business_of(key))
        .bind(NO_HASH)
        .bind(OWNER)
        .bind(0_i64)
        .bind(now + s.lease_ms)
        .bind(now)
        .bind(now)
        .bind(now + s.retention_ms)
        .execute(&db.pool)
        .await;
    if let Err(e) = claim {
        return failed("claim", e);
    }
    let order_no = OrderNo::generate();
    let created = sqlx::query(db.sql("order_create"))
        .bind(key)
        .bind(order_no.as_str())
        .bind(req.user_id)
        .bind(req.sku_id)
        .bind(req.quantity)
        .bind(req.amount)
        .bind("CREATED")
        .bind(0_i64)
        .bind(now)
        .fetch_one(&db.pool)
        .await;
    let outcome: String = match created.and_then(|row| row.try_get(0)) {
        Ok(o) => o,
        Err(e) => return failed("create", e),
    };
    if outcome.trim() != "created" {
        return failed("create", outcome);
    }
    let view = OrderView {
        order_no: order_no.to_string(),
        request_id: key.to_string(),
        user_id: req.user_id,
        sku_id: req.sku_id,
        quantity: req.quantity,
        amount: req.amount,
        status: "CREATED".into(),
        created_at: now,
    };
    let answer = serde_json::to_string(&view).expect("serializes");
    let finalized = sqlx::query(db.sql("api_idem_finalize"))
        .bind("SUCCEEDED")
        .bind(201_i64)
        .bind(answer.as_str())
        .bind(Some(order_no.to_string()))
        .bind(now)
        .bind(now + s.retention_ms)
        .bind(key)
        .bind(OWNER)
        .execute(&db.pool)
        .await;
    match finalized {
        Ok(r) if r.rows_affected() == 1 => created_json(answer),
        Ok(_) => failed("finalize", "no row"),
        Err(e) => failed("finalize", e),
    }
}

fn created_json(body: String) -> Response {
    (
        StatusCode::CREATED,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

async fn one_get(State(s): State<Arc<Durable>>, headers: HeaderMap) -> Response {
    let mut redis = s.redis.clone();
    let stored: redis::RedisResult<Option<String>> = redis::cmd("GET")
        .arg(format!("{}{}", s.replay_prefix, key_of(&headers)))
        .query_async(&mut redis)
        .await;
    match stored {
        Ok(Some(body)) => created_json(body),
        Ok(None) => (StatusCode::NOT_FOUND, "no stored answer").into_response(),
        Err(e) => failed("GET", e),
    }
}
