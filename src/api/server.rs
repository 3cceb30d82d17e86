//! `idemguard serve`: the order service over all three lines of defense.
//!
//! `POST /orders` (userId, skuId, quantity, amount), `POST /payments/callback` (payNo,
//! orderNo, amount), `GET /orders/{orderNo}`, `GET /healthz`. Both POSTs go through the
//! Idempotency-Key flow of [`super::guard`]; inside it, orders take `lock:req:{requestId}` and
//! write with its fence token, so a holder whose lock expired cannot overwrite its successor.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{middleware, Json, Router};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::edge;
use super::fast_path::FastPath;
use super::guard::{Claimed, Guard, OwnerLiveness, ReplayCounter};
use super::idempotency::{FinalResponse, FAILED, SUCCEEDED};
use super::payments::{self, Booking, OutboxRelay, PayableOrder, PaymentCallback};
use super::problem::Problem;
use crate::config::Config;
use crate::contracts::{keys, Instance, OrderNo, PayNo};
use crate::db::orders::{CreateOutcome, NewOrder, OrderError, Orders};
use crate::db::Database;
use crate::lock::{Acquisition, Heartbeat, Liveness, Locks};
use crate::trace::Tracer;

/// The body of `POST /orders`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateOrderRequest {
    pub user_id: i64,
    pub sku_id: i64,
    pub quantity: i64,
    /// Minor units (cents).
    pub amount: i64,
}

pub use super::idempotency::OrderView;

/// Instance liveness through the lock layer's heartbeats.
///
/// Redis unreachable means liveness cannot be known, and then the record's lease decides: an
/// owner is only ever asked about once its lease is over ([`super::idempotency::may_reclaim`]),
/// and the lease is the owner's own promise of how long it needs. Counting "unknown" as alive
/// instead would answer 409 for as long as Redis is down whenever the owner died — a key
/// blocked without end. Taking over a record whose owner is in fact alive but late is safe:
/// the database's unique keys (one order per requestId, one payment per payNo and per order)
/// give the retry the first owner's result if it committed, and its finalize then finds the
/// record taken over and writes nothing.
pub struct HeartbeatLiveness(pub Liveness);

impl OwnerLiveness for HeartbeatLiveness {
    async fn is_alive(&self, instance_id: &str) -> bool {
        match self.0.is_alive(instance_id).await {
            Ok(alive) => alive,
            Err(e) => {
                tracing::warn!(owner = %instance_id, error = %e, "owner liveness unknown (Redis down?); the record's lease decides");
                false
            }
        }
    }
}

/// Fault injection for the demo and the tests: how a real process dies mid-request.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// Abort the process once the request lock is held, before the database is written: the
    /// idempotency record stays PROCESSING with a dead owner, the lock's owner is dead.
    pub crash_after_request_lock: bool,
    /// Abort the process in the outbox relay once it has claimed a batch of committed events,
    /// before publishing them: the crash between the payment's commit and the publish.
    pub crash_before_publish: bool,
    /// Abort the process in the outbox relay once the broker acknowledged the batch, before the
    /// rows are marked sent: the crash between the publish and the mark (published twice).
    pub crash_after_publish: bool,
}

impl Faults {
    fn any(&self) -> bool {
        self.crash_after_request_lock || self.crash_before_publish || self.crash_after_publish
    }
}

pub struct AppState {
    pub faults: Faults,
    pub guard: Guard<HeartbeatLiveness>,
    pub orders: Orders,
    pub locks: Locks,
    pub relay_wake: Arc<Notify>,
}

pub fn router(state: Arc<AppState>) -> Router {
    let body_read_timeout = state.guard.config.api.body_read_timeout;
    Router::new()
        .route("/orders", post(create_order))
        .route("/orders/{order_no}", get(get_order))
        .route("/payments/callback", post(payment_callback))
        .route("/healthz", get(healthz))
        .fallback(edge::no_route)
        .method_not_allowed_fallback(edge::wrong_method)
        .with_state(state)
        .layer(middleware::from_fn_with_state(
            body_read_timeout,
            edge::read_body,
        ))
        .layer(middleware::from_fn(edge::problem_for_bare_errors))
        .layer(middleware::from_fn(super::metered::count))
}

/// The body as JSON; only `application/json` is read (a form or text body is a client mistake
/// that would otherwise be parsed by luck).
fn body_json(headers: &HeaderMap, body: &Bytes) -> Result<serde_json::Value, Problem> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = content_type.split(';').next().unwrap_or("").trim();
    if !mime.eq_ignore_ascii_case("application/json") {
        return Err(Problem::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "Unsupported media type",
            "send the body as JSON with Content-Type: application/json",
        ));
    }
    serde_json::from_slice(body)
        .map_err(|e| Problem::bad_body(format!("the body is not JSON: {e}")))
}

fn outcome_json<T: Serialize>(
    status: &'static str,
    code: StatusCode,
    value: &T,
    order_no: Option<String>,
) -> FinalResponse {
    FinalResponse {
        status,
        code: code.as_u16(),
        body: serde_json::to_string(value).expect("serializes"),
        order_no,
    }
}

fn refusal(problem: Problem, order_no: Option<String>) -> FinalResponse {
    FinalResponse {
        status: FAILED,
        code: problem.status,
        body: problem.body(),
        order_no,
    }
}

async fn create_order(State(s): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    let json = match body_json(&headers, &body) {
        Ok(j) => j,
        Err(p) => return p.into_response(),
    };
    let req = match CreateOrderRequest::deserialize(&json) {
        Ok(r) => r,
        Err(e) => {
            return Problem::bad_body(format!("{e} (expected userId, skuId, quantity, amount)"))
                .into_response()
        }
    };
    if req.quantity <= 0 || req.amount < 0 || req.user_id < 0 || req.sku_id < 0 {
        return Problem::bad_body(
            "quantity must be at least 1; amount, userId and skuId at least 0",
        )
        .into_response();
    }
    let st = s.clone();
    let st2 = s.clone();
    detached(async move {
        s.guard
            .run(
                &headers,
                "POST",
                "/orders",
                &json,
                move |claimed| async move { place_order(&st, &claimed, &req).await },
                move |claimed| async move { answer_from_orders(&st2, &claimed).await },
            )
            .await
    })
    .await
}

/// Runs a claimed request to its end in a task of its own. A client (or gateway) that gives up
/// drops the handler's future; without this, processing would stop mid-flight and leave the
/// idempotency record PROCESSING under a live owner — every retry answered 409, for ever.
async fn detached<F>(flow: F) -> Response
where
    F: std::future::Future<Output = Response> + Send + 'static,
{
    match tokio::spawn(flow).await {
        Ok(r) => r,
        Err(e) => Problem::internal("the request's task failed", e).into_response(),
    }
}

/// Inside the claim: the request lock, then the database layer (the final arbiter).
async fn place_order(
    s: &AppState,
    claimed: &Claimed,
    req: &CreateOrderRequest,
) -> anyhow::Result<FinalResponse> {
    let key = keys::request_lock(claimed.request_id.as_str());
    // FAULT INJECTION SWITCH (lock.request_lock = false): no request lock, the database decides.
    let guard = if !s.guard.config.lock.request_lock {
        None
    } else {
        // A key of its own per request: its fence counter starts in one command.
        match s
            .locks
            .acquire_with(&key, &s.locks.options().fresh_key())
            .await
        {
            Ok(Acquisition::Held(g)) => Some(g),
            // Another request with this key holds it: the idempotency record already decided we
            // process, so the holder is a stale or reclaimed attempt. The database decides.
            Ok(Acquisition::Contended(_)) => None,
            // Redis down: the database constraints still hold (seed §5.4).
            Err(e) => {
                tracing::warn!(request_id = %claimed.request_id, error = %e, "request lock unavailable; relying on the database");
                None
            }
        }
    };
    if s.faults.crash_after_request_lock && guard.is_some() {
        eprintln!("idemguard serve: aborting mid-request after taking {key} (fault injection)");
        std::process::abort();
    }
    let new = NewOrder {
        request_id: claimed.request_id.clone(),
        order_no: OrderNo::generate(),
        user_id: req.user_id,
        sku_id: req.sku_id,
        quantity: req.quantity,
        amount: req.amount,
        fence: guard.as_ref().map(|g| g.fence().0),
    };
    let result = s.orders.create(&new).await;
    if let Some(g) = guard {
        if let Err(e) = g.release().await {
            tracing::warn!(request_id = %claimed.request_id, error = %e, "request lock not released; it expires with its TTL");
        }
    }
    match result {
        Ok(CreateOutcome::Created(o)) | Ok(CreateOutcome::Replayed(o)) => {
            Ok(FinalResponse::created(&o))
        }
        Err(OrderError::OutOfStock {
            sku_id,
            available,
            wanted,
        }) => Ok(refusal(
            Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "out-of-stock",
                "Out of stock",
                format!("sku {sku_id} has {available} left, {wanted} requested"),
            ),
            None,
        )),
        Err(OrderError::UnknownSku { sku_id }) => Ok(refusal(
            Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "unknown-sku",
                "Unknown SKU",
                format!("sku {sku_id} does not exist"),
            ),
            None,
        )),
        // An operator finalized this request FAILED while it was in flight, and the create
        // routine refused it: answer what the record now says, byte for byte.
        Err(e @ OrderError::RequestAbandoned { .. }) => {
            let rec = super::idempotency::get(&s.guard.db, claimed.request_id.as_str()).await?;
            rec.as_ref()
                .and_then(super::idempotency::stored_response)
                .ok_or_else(|| anyhow::anyhow!("{e}"))
        }
        Err(e) => Err(anyhow::anyhow!("{e}")),
    }
}

/// A retry whose idempotency record is past its retention: answer with the order's current
/// state rather than creating anything (seed §6.4).
async fn answer_from_orders(s: &AppState, claimed: &Claimed) -> anyhow::Result<FinalResponse> {
    match s.orders.find_by_request_id(claimed.request_id.as_str()).await.map_err(|e| anyhow::anyhow!("{e}"))? {
        Some(o) => Ok(outcome_json(SUCCEEDED, StatusCode::OK, &OrderView::from(&o), Some(o.order_no.clone()))),
        None => Ok(refusal(
            Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency-key-expired",
                "Idempotency-Key expired",
                "this key is older than the retention and no order was created with it; send a new key to place a new order",
            ),
            None,
        )),
    }
}

async fn payment_callback(
    State(s): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let json = match body_json(&headers, &body) {
        Ok(j) => j,
        Err(p) => return p.into_response(),
    };
    let cb = match PaymentCallback::deserialize(&json) {
        Ok(c) => c,
        Err(e) => {
            return Problem::bad_body(format!("{e} (expected payNo, orderNo, amount)"))
                .into_response()
        }
    };
    // Identifiers are checked before the claim: nothing is written for a refused one.
    if let Err(e) = PayNo::parse(&cb.pay_no) {
        return Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-pay-no",
            "Invalid payment number",
            e,
        )
        .into_response();
    }
    if let Err(e) = OrderNo::parse(&cb.order_no) {
        return Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-order-no",
            "Invalid order number",
            e,
        )
        .into_response();
    }
    let (st, st2, cb2) = (s.clone(), s.clone(), cb.clone());
    detached(async move {
        s.guard
            .run(
                &headers,
                "POST",
                "/payments/callback",
                &json,
                move |_| async move { book(&st, &cb).await },
                move |_| async move {
                    match payments::payment_by_pay_no(&st2.guard.db, &cb2.pay_no).await? {
                        Some(p) => Ok(outcome_json(
                            SUCCEEDED,
                            StatusCode::OK,
                            &p,
                            Some(p.order_no.clone()),
                        )),
                        None => Ok(refusal(
                            Problem::new(
                                StatusCode::UNPROCESSABLE_ENTITY,
                                "idempotency-key-expired",
                                "Idempotency-Key expired",
                                "no payment was booked with this key",
                            ),
                            None,
                        )),
                    }
                },
            )
            .await
    })
    .await
}

async fn book(s: &AppState, cb: &PaymentCallback) -> anyhow::Result<FinalResponse> {
    let Some(order) = s
        .orders
        .find_by_order_no(&cb.order_no)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?
    else {
        return Ok(refusal(
            Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "unknown-order",
                "Unknown order",
                format!("order {} does not exist", cb.order_no),
            ),
            None,
        ));
    };
    if order.amount != cb.amount {
        return Ok(refusal(
            Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "amount-mismatch",
                "Amount does not match the order",
                format!(
                    "order {} is for {}, the callback says {}",
                    order.order_no, order.amount, cb.amount
                ),
            ),
            Some(order.order_no.clone()),
        ));
    }
    let payable = PayableOrder {
        order_no: order.order_no.clone(),
        request_id: order.req_id.clone(),
        user_id: order.user_id,
        amount: order.amount,
    };
    let booking = payments::book_payment(
        &s.guard.db,
        &s.guard.config,
        &s.guard.tracer,
        &payable,
        &cb.pay_no,
    )
    .await?;
    s.relay_wake.notify_one();
    let (code, flow) = match booking {
        Booking::Recorded(f) => (StatusCode::CREATED, f),
        Booking::AlreadyRecorded(f) => (StatusCode::OK, f),
        Booking::PayNoConflict(first) => {
            return Ok(refusal(pay_no_conflict(cb, &first), Some(order.order_no)))
        }
        Booking::DuplicatePayment(first) => {
            return Ok(refusal(duplicate_payment(cb, &first), Some(order.order_no)))
        }
    };
    Ok(outcome_json(
        SUCCEEDED,
        code,
        &flow,
        Some(flow.order_no.clone()),
    ))
}

/// 422, not 409: the refusal is final and stored for the key, and 409 tells a client to retry.
fn pay_no_conflict(cb: &PaymentCallback, first: &payments::PaymentFlow) -> Problem {
    Problem::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "pay-no-conflict",
        "payNo already booked for another order",
        format!(
            "payNo {} is booked for order {}, not order {}; nothing was booked",
            cb.pay_no, first.order_no, cb.order_no
        ),
    )
}

fn duplicate_payment(cb: &PaymentCallback, first: &payments::PaymentFlow) -> Problem {
    Problem::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "duplicate-payment",
        "Order already paid",
        format!(
            "order {} was already paid by payNo {}; payNo {} was not booked and must be refunded",
            cb.order_no, first.pay_no, cb.pay_no
        ),
    )
}

async fn get_order(State(s): State<Arc<AppState>>, Path(order_no): Path<String>) -> Response {
    if let Err(e) = OrderNo::parse(&order_no) {
        return Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-order-no",
            "Invalid order number",
            e,
        )
        .into_response();
    }
    match s.orders.find_by_order_no(&order_no).await {
        Ok(Some(o)) => Json(OrderView::from(&o)).into_response(),
        Ok(None) => Problem::new(
            StatusCode::NOT_FOUND,
            "unknown-order",
            "Unknown order",
            format!("order {order_no} does not exist"),
        )
        .into_response(),
        Err(e) => {
            Problem::internal(format!("order {order_no} could not be read"), e).into_response()
        }
    }
}

async fn healthz(State(s): State<Arc<AppState>>) -> Response {
    let db_ok = sqlx::query("SELECT 1").execute(&s.guard.db).await.is_ok();
    let body = serde_json::json!({ "status": if db_ok { "ok" } else { "degraded" }, "instance": s.guard.tracer.instance_id(), "database": db_ok });
    (
        if db_ok {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        Json(body),
    )
        .into_response()
}

/// A running service: its address and what stops it.
pub struct Server {
    pub addr: SocketAddr,
    /// Where `/metrics` answers (`metrics.listen`); `None` when it is off.
    pub metrics_addr: Option<SocketAddr>,
    pub shutdown: CancellationToken,
    pub done: tokio::task::JoinHandle<anyhow::Result<()>>,
    tracer: Tracer,
}

impl Server {
    /// The trace events this service has emitted, delivered and dropped so far.
    pub fn trace_counts(&self) -> crate::trace::TraceCounts {
        self.tracer.stats()
    }
}

/// Starts the service on `listen` (port 0 = any free port). Shutdown finishes the requests in
/// flight, publishes what the outbox holds, stops the heartbeat and flushes the trace.
pub async fn start(config: Config, listen: &str) -> anyhow::Result<Server> {
    start_with(config, listen, Faults::default()).await
}

/// [`start`] with fault injection.
pub async fn start_with(config: Config, listen: &str, faults: Faults) -> anyhow::Result<Server> {
    start_traced(config, listen, faults, None).await
}

/// [`start`] counting its decisions in a registry of its own (a storm's, read back by its report).
pub async fn start_metered(
    config: Config,
    listen: &str,
    metrics: Arc<crate::metrics::Metrics>,
) -> anyhow::Result<Server> {
    start_traced(config, listen, Faults::default(), Some(metrics)).await
}

/// Wires every background task (heartbeat, relay, replay flusher, retention) and their
/// shutdown order in one place: the order is the guarantee described above.
async fn start_traced(
    config: Config,
    listen: &str,
    faults: Faults,
    metrics: Option<Arc<crate::metrics::Metrics>>,
) -> anyhow::Result<Server> {
    refuse_faults_in_production(&config, &faults)?;
    let config = Arc::new(config);
    let instance = Instance::current();
    let tracer = instance_tracer(&config, &instance, metrics)?;
    let db = Database::connect(&config).await?;
    let locks = Locks::from_config(&config, &instance, tracer.clone())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let heartbeat = start_heartbeat(&locks, &instance).await;
    let fast_path = connect_fast_path(&config).await?;
    crate::kafka_client::stop_on_refusal(&config.kafka).await?;
    let relay = OutboxRelay::new(&config, db.clone(), tracer.clone())?
        .with_crash(faults.crash_before_publish, faults.crash_after_publish);
    let relay_wake = relay.waker();
    let replays = ReplayCounter::default();
    let state = Arc::new(AppState {
        faults,
        guard: Guard {
            config: config.clone(),
            db: db.clone(),
            fast_path,
            liveness: HeartbeatLiveness(locks.liveness().clone()),
            tracer: tracer.clone(),
            replays: replays.clone(),
        },
        orders: Orders::new(db.clone(), tracer.clone()),
        locks,
        relay_wake,
    });
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr()?;
    let shutdown = CancellationToken::new();
    // The relay and the replay flusher stop only once the last request in flight has answered:
    // a payment booked during shutdown is published by the relay's last round, not left
    // PENDING until the next start.
    let drained = CancellationToken::new();
    let relay_task = tokio::spawn(relay.run(drained.clone()));
    // Finished records and published outbox rows past their retention.
    let purge_task = crate::db::retention::spawn(
        db.clone(),
        crate::db::retention::Purge::SERVE,
        config.retention.clone(),
        shutdown.clone(),
    );
    let flusher = spawn_replay_flusher(replays, db.clone(), drained.clone());
    let metrics = crate::metrics::exposition::start_serve(&config, &db, &shutdown).await?;
    let metrics_addr = metrics.as_ref().map(|m| m.addr);
    let app = router(state);
    let stop = shutdown.clone();
    let counted = tracer.clone();
    let done = tokio::spawn(async move {
        edge::serve(listener, app, &config.api, stop).await;
        drained.cancel();
        let _ = relay_task.await;
        let _ = purge_task.await;
        let _ = flusher.await;
        if let Some(m) = metrics {
            m.stop().await;
        }
        if let Some(h) = heartbeat {
            let _ = h.stop().await;
        }
        tracer.flush(Duration::from_secs(5));
        Ok(())
    });
    tracing::info!(%addr, instance = %instance.id, "serving");
    Ok(Server {
        addr,
        metrics_addr,
        shutdown,
        done,
        tracer: counted,
    })
}

/// FAULT INJECTION: a production environment never runs with a crash switch on.
fn refuse_faults_in_production(config: &Config, faults: &Faults) -> anyhow::Result<()> {
    if faults.any() && config.environment.production {
        anyhow::bail!(
            "fault injection (crash switches) may not be used when environment.production = true"
        );
    }
    Ok(())
}

/// This instance's tracer, counting its decisions in `metrics` when given.
fn instance_tracer(
    config: &Config,
    instance: &Instance,
    metrics: Option<Arc<crate::metrics::Metrics>>,
) -> anyhow::Result<Tracer> {
    let mut tracer = Tracer::from_config(config, instance)?;
    if let Some(m) = metrics {
        tracer = tracer.metered(m);
    }
    Ok(tracer)
}

/// This instance's heartbeat; without Redis none — the service runs, and the records this
/// instance owns look dead to others.
async fn start_heartbeat(locks: &Locks, instance: &Instance) -> Option<Heartbeat> {
    match locks.liveness().start(instance).await {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::warn!(error = %e, "instance heartbeat not started (Redis down?); records this instance owns look dead to others");
            None
        }
    }
}

/// The Redis fast path when configured: an unreachable Redis turns it off (the database
/// decides every request); a refused TLS handshake stops the start.
async fn connect_fast_path(config: &Config) -> anyhow::Result<Option<FastPath>> {
    if !config.idempotency.fast_path {
        return Ok(None);
    }
    match FastPath::connect(&config.redis).await {
        Ok(fast_path) => Ok(Some(fast_path)),
        Err(e) => {
            let node = crate::config::host_port(&config.redis.url);
            // Our TLS refused is a configuration to fix, not an outage to ride out.
            if let Some(why) = crate::lock::refusal(&node, &config.redis.url, &e).await {
                anyhow::bail!("redis {node}: {why}");
            }
            tracing::warn!(error = %e, "fast path off: Redis {node} unreachable; the database decides every request");
            Ok(None)
        }
    }
}

/// Writes the replay counts every second, and once more when `stop` is cancelled.
fn spawn_replay_flusher(
    replays: ReplayCounter,
    db: Database,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(Duration::from_secs(1)) => replays.flush(&db).await,
            }
        }
        replays.flush(&db).await;
    })
}
