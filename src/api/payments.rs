//! `POST /payments/callback` and the outbox relay.
//!
//! A provider's notification is booked in `payment_flow` (unique `pay_no`: a repeated
//! notification is booked once) together with an `outbox` row in ONE transaction; the relay then
//! publishes the outbox to `payment.succeeded` with an idempotent producer and marks the rows
//! sent. A crash between the commit and the publish loses nothing: the row is still PENDING.
//! A crash between the publish and the mark publishes an event twice — which the consumer's
//! dedup state and unique keys exist for.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::contracts::{
    headers, new_event_id, now_ms, Layer, Outcome, PaymentSucceeded, TraceEvent,
};
use crate::db::{is_unique_violation, Database};
use crate::trace::Tracer;

/// The callback's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PaymentCallback {
    pub pay_no: String,
    pub order_no: String,
    pub amount: i64,
}

/// A `payment_flow` row, as the callback answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct PaymentFlow {
    pub pay_no: String,
    pub order_no: String,
    pub amount: i64,
    pub status: String,
    pub event_id: String,
    pub created_at: i64,
}

/// The order fields a payment needs.
#[derive(Debug, Clone)]
pub struct PayableOrder {
    pub order_no: String,
    pub request_id: String,
    pub user_id: i64,
    pub amount: i64,
}

/// What booking a payment did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Booking {
    /// New payment_flow + outbox rows.
    Recorded(PaymentFlow),
    /// pay_no was already booked for this order: the first booking.
    AlreadyRecorded(PaymentFlow),
    /// pay_no was already booked for another order (the booking it has): nothing written.
    PayNoConflict(PaymentFlow),
    /// The order was already paid under another pay_no (that payment): nothing written, nothing
    /// published — the customer paid twice and the provider's second payment must be refunded.
    DuplicatePayment(PaymentFlow),
}

pub async fn payment_by_pay_no(
    db: &Database,
    pay_no: &str,
) -> Result<Option<PaymentFlow>, sqlx::Error> {
    sqlx::query_as::<_, PaymentFlow>(db.sql("api_payment_by_pay_no"))
        .bind(pay_no)
        .fetch_optional(db)
        .await
}

/// Books the payment and its outbox event in one transaction, once per order: the order's row
/// is locked first, so of two payNos for one order the second sees the first and is refused.
/// Every branch ends the transaction (commit or rollback) here, before it answers; what a
/// branch answers once the transaction is over is a function of its own.
pub async fn book_payment(
    db: &Database,
    config: &Config,
    tracer: &Tracer,
    order: &PayableOrder,
    pay_no: &str,
) -> Result<Booking, sqlx::Error> {
    let started = Instant::now();
    let mut tx = db.begin().await?;
    sqlx::query(db.sql("api_payment_lock_order"))
        .bind(order.order_no.as_str())
        .fetch_optional(&mut tx)
        .await?;
    let paid = sqlx::query_as::<_, PaymentFlow>(db.sql("api_payment_of_order"))
        .bind(order.order_no.as_str())
        .fetch_optional(&mut tx)
        .await?;
    if let Some(first) = paid {
        tx.rollback().await?;
        return Ok(already_paid(tracer, order, pay_no, first, started));
    }
    let now = now_ms();
    let event = payment_event(order, pay_no, now);
    let inserted = sqlx::query(db.sql("api_payment_insert"))
        .bind(pay_no)
        .bind(order.order_no.as_str())
        .bind(order.amount)
        .bind(event.event_id.as_str())
        .bind(now)
        .execute(&mut tx)
        .await;
    let fresh = match inserted {
        Ok(r) => r.rows_affected() == 1,
        Err(e) if is_unique_violation(&e) => false,
        Err(e) => return Err(e),
    };
    if !fresh {
        // pay_no is booked, and not for this order (its row would have been found above).
        // End the losing transaction first, then read the first booking (seed §2.1).
        tx.rollback().await?;
        return pay_no_conflict(db, tracer, order, pay_no, started).await;
    }
    let headers = serde_json::json!({
        headers::EVENT_ID: event.event_id,
        headers::REQUEST_ID: event.request_id,
        headers::ORDER_NO: event.order_no,
    });
    sqlx::query(db.sql("api_outbox_insert"))
        .bind(event.event_id.as_str())
        .bind(config.kafka.payment_topic.as_str())
        .bind(event.order_no.as_str())
        .bind(headers.to_string())
        .bind(serde_json::to_string(&event).expect("serializes"))
        .bind(now)
        .execute(&mut tx)
        .await?;
    tx.commit().await?;
    tracer.emit(
        TraceEvent::new(Layer::Db, Outcome::PaymentRecorded)
            .order_no(event.order_no.clone())
            .request_id(event.request_id.clone())
            .event_id(event.event_id.clone())
            .detail(format!("payment_flow {pay_no} + outbox"))
            .since(started),
    );
    Ok(Booking::Recorded(PaymentFlow {
        pay_no: pay_no.to_string(),
        order_no: event.order_no,
        amount: order.amount,
        status: "SUCCEEDED".into(),
        event_id: event.event_id,
        created_at: now,
    }))
}

/// The payment event the outbox publishes for this booking, with an event ID of its own.
fn payment_event(order: &PayableOrder, pay_no: &str, now: i64) -> PaymentSucceeded {
    PaymentSucceeded {
        event_id: new_event_id(),
        order_no: order.order_no.clone(),
        request_id: order.request_id.clone(),
        pay_no: pay_no.to_string(),
        user_id: order.user_id,
        amount: order.amount,
        paid_at: now,
    }
}

/// The order is paid already: the same pay_no booked before (replayed), or another payment
/// (refused: the provider's second payment must be refunded).
fn already_paid(
    tracer: &Tracer,
    order: &PayableOrder,
    pay_no: &str,
    first: PaymentFlow,
    started: Instant,
) -> Booking {
    if first.pay_no == pay_no {
        traced(
            tracer,
            Outcome::UniqueViolationReplayed,
            order,
            &first,
            format!("payment_flow: pay_no {pay_no} already booked"),
            started,
        );
        Booking::AlreadyRecorded(first)
    } else {
        let why = format!(
            "pay_no {pay_no} refused: order {} was already paid by pay_no {}; refund it",
            first.order_no, first.pay_no
        );
        traced(
            tracer,
            Outcome::DuplicatePayment,
            order,
            &first,
            why,
            started,
        );
        Booking::DuplicatePayment(first)
    }
}

/// pay_no is booked for another order: the first booking, read once the losing transaction
/// has ended, is the answer.
async fn pay_no_conflict(
    db: &Database,
    tracer: &Tracer,
    order: &PayableOrder,
    pay_no: &str,
    started: Instant,
) -> Result<Booking, sqlx::Error> {
    let first = payment_by_pay_no(db, pay_no)
        .await?
        .ok_or(sqlx::Error::RowNotFound)?;
    let why = format!(
        "pay_no {pay_no} refused for order {}: it is booked for order {}",
        order.order_no, first.order_no
    );
    traced(tracer, Outcome::PayNoConflict, order, &first, why, started);
    Ok(Booking::PayNoConflict(first))
}

/// A booking that wrote nothing, traced with the payment that was there first.
fn traced(
    tracer: &Tracer,
    decision: Outcome,
    order: &PayableOrder,
    first: &PaymentFlow,
    detail: String,
    started: Instant,
) {
    tracer.emit(
        TraceEvent::new(Layer::Db, decision)
            .order_no(order.order_no.clone())
            .request_id(order.request_id.clone())
            .event_id(first.event_id.clone())
            .detail(detail)
            .since(started),
    );
}

#[derive(Debug, sqlx::FromRow)]
struct OutboxRow {
    id: i64,
    event_id: String,
    topic: String,
    msg_key: String,
    headers: String,
    payload: String,
}

/// Publishes the outbox. Several relays may run at once (SKIP LOCKED).
pub struct OutboxRelay {
    db: Database,
    producer: FutureProducer,
    tracer: Tracer,
    batch: usize,
    interval: Duration,
    wake: Arc<Notify>,
    crash: RelayCrash,
}

/// FAULT INJECTION: where the relay aborts the process (see `server::Faults`).
#[derive(Debug, Clone, Copy, Default)]
struct RelayCrash {
    before_publish: bool,
    after_publish: bool,
}

impl RelayCrash {
    fn at(&self, point: &str, on: bool) {
        if on {
            eprintln!("idemguard serve: aborting in the outbox relay {point} (fault injection)");
            std::process::abort();
        }
    }
}

impl OutboxRelay {
    pub fn new(config: &Config, db: Database, tracer: Tracer) -> anyhow::Result<OutboxRelay> {
        let producer: FutureProducer = crate::kafka_client::producer_config(&config.kafka)
            .set(
                "client.id",
                format!("idemguard-relay-{}", tracer.instance_id()),
            )
            // The producer's own retries never duplicate or reorder (seed §4.1).
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("message.timeout.ms", "30000")
            .set("log_level", "3")
            .create()
            .map_err(|e| {
                anyhow::anyhow!(
                    "kafka {}: cannot create the outbox producer: {e}",
                    config.kafka.bootstrap_servers
                )
            })?;
        Ok(OutboxRelay {
            db,
            producer,
            tracer,
            batch: config.api.relay_batch,
            interval: config.api.relay_interval,
            wake: Arc::new(Notify::new()),
            crash: RelayCrash::default(),
        })
    }

    /// FAULT INJECTION: abort the process before publishing a claimed batch, or after the
    /// broker acknowledged it and before the rows are marked sent.
    pub fn with_crash(mut self, before_publish: bool, after_publish: bool) -> OutboxRelay {
        self.crash = RelayCrash {
            before_publish,
            after_publish,
        };
        self
    }

    /// Wakes the relay (after a payment was booked).
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// Publishes until `shutdown`; a failed round is retried on the next one.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            match self.publish_pending().await {
                Ok(n) if n >= self.batch => continue, // more waiting
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "outbox relay round failed; retrying")
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(self.interval) => {}
            }
        }
        // Last rounds, until the outbox is empty, so events booked before shutdown go out now
        // rather than at the next start; a failed round leaves the rest for the next start.
        while let Ok(n) = self.publish_pending().await {
            if n < self.batch {
                break;
            }
        }
    }

    /// One round: claim a batch, publish it, mark it sent. Returns how many were published.
    pub async fn publish_pending(&self) -> anyhow::Result<usize> {
        let mut tx = self.db.begin().await?;
        let rows: Vec<OutboxRow> = sqlx::query_as(self.db.sql("api_outbox_claim"))
            .bind(self.batch as i64)
            .fetch_all(&mut tx)
            .await?;
        if rows.is_empty() {
            tx.rollback().await?;
            return Ok(0);
        }
        self.crash.at(
            "before publishing a committed batch",
            self.crash.before_publish,
        );
        // Publish all, then wait for every acknowledgement: one round trip per batch.
        let sends = rows.iter().map(|row| {
            let started = Instant::now();
            let mut hs = OwnedHeaders::new();
            if let Ok(serde_json::Value::Object(map)) =
                serde_json::from_str::<serde_json::Value>(&row.headers)
            {
                for (k, v) in map {
                    if let serde_json::Value::String(v) = v {
                        hs = hs.insert(Header {
                            key: &k,
                            value: Some(v.as_bytes()),
                        });
                    }
                }
            }
            let record = FutureRecord::to(&row.topic)
                .key(&row.msg_key)
                .payload(&row.payload)
                .headers(hs);
            let send = self.producer.send(record, Duration::from_secs(30));
            async move { (send.await.map_err(|(e, _)| e), started) }
        });
        let results = futures::future::join_all(sends).await;
        self.crash.at(
            "after publishing, before marking the batch sent",
            self.crash.after_publish && results.iter().any(|(r, _)| r.is_ok()),
        );
        let now = now_ms();
        let mut sent = 0;
        for (row, (result, started)) in rows.iter().zip(results) {
            match result {
                Ok(_) => {
                    sqlx::query(self.db.sql("api_outbox_mark_sent"))
                        .bind(now)
                        .bind(row.id)
                        .execute(&mut tx)
                        .await?;
                    sent += 1;
                    self.tracer.emit(
                        TraceEvent::new(Layer::Db, Outcome::EventPublished)
                            .order_no(row.msg_key.clone())
                            .event_id(row.event_id.clone())
                            .detail(format!("outbox {} -> {}", row.id, row.topic))
                            .since(started),
                    );
                }
                Err(e) => {
                    tracing::warn!(event_id = %row.event_id, error = %e, "outbox event not published; it stays PENDING")
                }
            }
        }
        tx.commit().await?;
        Ok(sent)
    }
}
