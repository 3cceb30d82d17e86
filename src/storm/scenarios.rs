//! The seven storms. Each drives the real service (and consumer) through the run's [`Rig`] and
//! says what it did; the invariants are checked afterwards by [`super::invariants`], from the
//! database. Every loop is bounded; everything targets loopback.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use rand::seq::SliceRandom;

use super::client::{Reply, ReplyKind, StormClient};
use super::invariants::Check;
use super::redis_server::PrivateRedis;
use super::rig::{with_retries, Rig};
use crate::contracts::{keys, new_event_id};
use crate::db::orders::{Orders, Transition, TransitionOutcome};
use crate::db::state_machine::OrderStatus;
use crate::lock::{AcquireOptions, Acquisition, Locks};

/// What a scenario did, for the report and the checks.
#[derive(Debug, Default)]
pub struct Played {
    /// (sku, stock set before the storm).
    pub skus: Vec<(i64, i64)>,
    pub notes: Vec<String>,
    /// Scenario-specific checks (also read from the database).
    pub checks: Vec<Check>,
    /// Seconds of the HTTP storm itself (setup and settling excluded); for the chaos storm,
    /// whose rounds alternate traffic and settling, the whole run's wall time.
    pub seconds: f64,
}

/// Settling budget: the outbox relay and the consumer finishing their work.
const SETTLE: Duration = Duration::from_secs(120);
/// Price of one unit in the storm's orders (minor units).
pub const PRICE: i64 = 1999;

fn new_sku() -> i64 {
    rand::random_range(1_000_000_000..9_000_000_000_i64)
}

pub(super) async fn stocked_sku(rig: &Rig, stock: i64) -> anyhow::Result<(i64, i64)> {
    let sku = new_sku();
    let orders = Orders::new(rig.db.clone(), rig.tracer.clone());
    with_retries("setting the stock", || async {
        orders
            .set_stock(sku, stock)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))
    })
    .await?;
    Ok((sku, stock))
}

/// An answer that ends a client's retries: an order, or a refusal (also when replayed).
fn settled(r: &Reply) -> bool {
    r.order_no.is_some() || r.status == 422
}

/// Sends order `i` until it has an answer that settles it: 409s wait (Retry-After, capped at
/// 100 ms in a storm), timeouts retry. Bounded to `attempts`.
async fn order_until_settled(
    c: &StormClient,
    key: &str,
    user: i64,
    sku: i64,
    attempts: usize,
) -> Reply {
    let mut last = c.order(key, user, sku, 1, None).await;
    for _ in 1..attempts {
        if settled(&last) {
            break;
        }
        let wait = last.retry_after.map_or(20, |s| (s * 1000).min(100));
        tokio::time::sleep(Duration::from_millis(wait)).await;
        last = c.order(key, user, sku, 1, None).await;
    }
    last
}

/// Orders `0..n` (one key each) and one payment callback each; returns (i, orderNo) of those
/// that got an order.
async fn orders_and_payments(
    rig: &Rig,
    c: &StormClient,
    n: usize,
    sku: i64,
    concurrency: usize,
) -> Vec<(usize, String)> {
    let run = rig.run.clone();
    let placed: Vec<(usize, Option<String>)> = futures::stream::iter(0..n)
        .map(|i| {
            let (c, key) = (c.clone(), run.order_key(i));
            async move {
                (
                    i,
                    order_until_settled(&c, &key, i as i64, sku, 20)
                        .await
                        .order_no,
                )
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let placed: Vec<(usize, String)> = placed
        .into_iter()
        .filter_map(|(i, o)| o.map(|o| (i, o)))
        .collect();
    futures::stream::iter(placed.clone())
        .map(|(i, o)| {
            let (c, run) = (c.clone(), run.clone());
            async move { c.pay(&run.pay_key(i, 0), &run.pay_no(i), &o, PRICE).await }
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<_>>()
        .await;
    placed
}

/// Seed §6.5: N identical requests — one body, one Idempotency-Key — released at once.
pub async fn double_click(rig: &Rig, c: &StormClient, n: usize) -> anyhow::Result<Played> {
    let (sku, stock) = stocked_sku(rig, 100).await?;
    let key = rig.run.order_key(0);
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let started = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (c, key, barrier) = (c.clone(), key.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                c.order(&key, 42, sku, 1, None).await
            })
        })
        .collect();
    let replies = futures::future::join_all(tasks).await;
    let seconds = started.elapsed().as_secs_f64();
    let created = replies
        .iter()
        .filter(|r| matches!(r, Ok(r) if r.kind == ReplyKind::Created))
        .count();
    Ok(Played {
        skus: vec![(sku, stock)],
        notes: vec![format!("{n} identical POST /orders (one body, Idempotency-Key {key}) released together; {created} answered 201 Created")],
        checks: vec![],
        seconds,
    })
}

/// The gateway gives up waiting for the first attempt (its timeout is shorter than the
/// service's latency) and retries with the same key while the first is still running.
pub async fn gateway_retry(
    rig: &Rig,
    c: &StormClient,
    n: usize,
    concurrency: usize,
    gateway_timeout: Duration,
) -> anyhow::Result<Played> {
    let (sku, stock) = stocked_sku(rig, n as i64 + 10).await?;
    let run = rig.run.clone();
    let started = Instant::now();
    let results: Vec<(bool, bool)> = futures::stream::iter(0..n)
        .map(|i| {
            let (c, key) = (c.clone(), run.order_key(i));
            async move {
                // The gateway forwards the first attempt and stops waiting for it after its
                // timeout; upstream, the first attempt keeps running (its answer is discarded).
                let mut first = {
                    let (c, key) = (c.clone(), key.clone());
                    tokio::spawn(async move { c.order(&key, i as i64, sku, 1, None).await })
                };
                if tokio::time::timeout(gateway_timeout, &mut first)
                    .await
                    .is_ok()
                {
                    return (false, true); // answered within the gateway's patience
                }
                let last = order_until_settled(&c, &key, i as i64, sku, 50).await;
                let _ = first.await;
                (true, settled(&last))
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let seconds = started.elapsed().as_secs_f64();
    let retried = results.iter().filter(|r| r.0).count();
    let unsettled = results.iter().filter(|r| !r.1).count();
    let mut notes = vec![format!(
        "{n} keys; the gateway's patience is {gateway_timeout:?}: {retried} first attempts were still running at the timeout and were retried with the same key"
    )];
    if unsettled > 0 {
        notes.push(format!(
            "{unsettled} keys still had no answer after 50 attempts (see errors)"
        ));
    }
    Ok(Played {
        skus: vec![(sku, stock)],
        notes,
        checks: vec![],
        seconds,
    })
}

/// Orders paid once each, then every payment event produced a second time AND the consumer
/// group rewound to the start: each event arrives three times in all.
pub async fn mq_replay(
    rig: &mut Rig,
    c: &StormClient,
    n: usize,
    concurrency: usize,
) -> anyhow::Result<Played> {
    let (sku, stock) = stocked_sku(rig, n as i64).await?;
    let started = Instant::now();
    let paid = orders_and_payments(rig, c, n, sku, concurrency).await;
    let seconds = started.elapsed().as_secs_f64();
    rig.drain(SETTLE).await?;
    rig.stop_consumer().await?;
    let again = rig.reproduce_events().await?;
    rig.rewind_group().await?;
    rig.start_consumer().await?;
    rig.drain(SETTLE).await?;
    Ok(Played {
        skus: vec![(sku, stock)],
        notes: vec![format!(
            "{} orders paid and consumed; then {again} events re-produced and group {} rewound to offset 0 ({} redeliveries)",
            paid.len(),
            rig.run.group(),
            2 * again
        )],
        checks: vec![],
        seconds,
    })
}

/// The real consumer binary aborts right after its first database commit, before the offset
/// commit; a fresh consumer on the same group gets that batch again.
pub async fn consumer_crash(
    rig: &mut Rig,
    c: &StormClient,
    n: usize,
    concurrency: usize,
    binary: &std::path::Path,
) -> anyhow::Result<Played> {
    let (sku, stock) = stocked_sku(rig, n as i64).await?;
    let started = Instant::now();
    let paid = orders_and_payments(rig, c, n, sku, concurrency).await;
    let seconds = started.elapsed().as_secs_f64();
    rig.wait_published(SETTLE).await?;
    let said = rig
        .crash_real_consumer(binary, Duration::from_secs(90))
        .await?;
    rig.start_consumer().await?;
    rig.drain(SETTLE).await?;
    Ok(Played {
        skus: vec![(sku, stock)],
        notes: vec![
            format!("{} orders paid; `{} consume --crash-after-db-commit 1` (batch size {}) said: {said}", paid.len(), binary.display(), rig.config.consumer.batch_size),
            "restarted in-process on the same group: the crashed batch was redelivered".into(),
        ],
        checks: vec![],
        seconds,
    })
}

/// A holder slower than its lock TTL, watchdog off: its lock expires during its "GC pause",
/// a successor takes the lock (a higher fence token) and writes; the stale holder then writes
/// with its old token and the database must refuse it.
pub async fn lock_expiry(
    rig: &Rig,
    c: &StormClient,
    n: usize,
    concurrency: usize,
    ttl: Duration,
) -> anyhow::Result<Played> {
    let (sku, stock) = stocked_sku(rig, n as i64).await?;
    let run = rig.run.clone();
    let started = Instant::now();
    let placed: Vec<Option<String>> = futures::stream::iter(0..n)
        .map(|i| {
            let (c, key) = (c.clone(), run.order_key(i));
            async move {
                order_until_settled(&c, &key, i as i64, sku, 20)
                    .await
                    .order_no
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let orders: Vec<String> = placed.into_iter().flatten().collect();
    let locks = Locks::from_config(
        &rig.config,
        &crate::contracts::Instance::current(),
        rig.tracer.clone(),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let db_orders = Orders::new(rig.db.clone(), rig.tracer.clone());
    let options = AcquireOptions::from_config(&rig.config.lock)
        .without_watchdog()
        .ttl(ttl)
        .attempts(1);
    let duels = orders.iter().map(|order_no| {
        let (locks, db_orders, options) = (locks.clone(), db_orders.clone(), options.clone());
        async move { duel(&locks, &db_orders, &options, order_no, ttl).await }
    });
    let outcomes: Vec<anyhow::Result<(String, i64, i64, &'static str)>> =
        futures::future::join_all(duels).await;
    let seconds = started.elapsed().as_secs_f64();
    let mut offenders = Vec::new();
    let mut refused = 0;
    for o in outcomes {
        let (order_no, stale, successor, stale_result) = o?;
        if stale_result == "fence_rejected" {
            refused += 1;
        }
        // From the database: the successor's write stands, the stale one left no trace.
        match db_orders.find_by_order_no(&order_no).await.map_err(|e| anyhow::anyhow!("{e}"))? {
            Some(row) if row.status == OrderStatus::Cancelled && row.fence == successor && row.payment_event_id.is_none() => {}
            Some(row) => offenders.push(format!(
                "order {order_no}: status {} fence {} payment event {:?} — the stale writer (fence {stale}) got through over the successor (fence {successor}); its write was {stale_result}",
                row.status, row.fence, row.payment_event_id
            )),
            None => offenders.push(format!("order {order_no}: missing")),
        }
    }
    Ok(Played {
        skus: vec![(sku, stock)],
        notes: vec![format!(
            "{} orders: a holder of lock:order:{{orderNo}} (TTL {ttl:?}, no watchdog) paused past its TTL; a successor took the lock and cancelled the order; the stale holder's PAID write was refused by its fence {refused} time(s)",
            orders.len()
        )],
        checks: vec![Check::new("stale_writer_refused", "after a lock expiry only the successor's write (newer fence token) is in the database", offenders)],
        seconds,
    })
}

/// One order's duel: returns (orderNo, stale fence, successor fence, what the stale write got).
async fn duel(
    locks: &Locks,
    orders: &Orders,
    options: &AcquireOptions,
    order_no: &str,
    ttl: Duration,
) -> anyhow::Result<(String, i64, i64, &'static str)> {
    let key = keys::order_lock(order_no);
    let stale = match locks
        .acquire_with(&key, options)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?
    {
        Acquisition::Held(g) => g,
        Acquisition::Contended(_) => {
            anyhow::bail!("{key} was already held at the start of the lock-expiry storm")
        }
    };
    // The "GC pause": longer than the TTL, and the watchdog is off.
    tokio::time::sleep(ttl + ttl / 2).await;
    let mut successor = None;
    for _ in 0..40 {
        if let Acquisition::Held(g) = locks
            .acquire_with(&key, options)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?
        {
            successor = Some(g);
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let successor = successor
        .ok_or_else(|| anyhow::anyhow!("{key} never expired for the successor (TTL {ttl:?})"))?;
    let (stale_fence, successor_fence) = (stale.fence().0, successor.fence().0);
    let cancel = Transition::to(order_no, OrderStatus::Cancelled).with_fence(successor_fence);
    orders
        .transition(&cancel)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let _ = successor.release().await;
    // The stale holder wakes up and writes what it had decided before its pause.
    let late = Transition::paid(order_no, new_event_id()).with_fence(stale_fence);
    let result = match orders
        .transition(&late)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?
    {
        TransitionOutcome::FenceRejected { .. } => "fence_rejected",
        TransitionOutcome::Applied(_) => "applied",
        TransitionOutcome::AlreadyApplied(_) => "already_applied",
        TransitionOutcome::Rejected(_) => "rejected",
    };
    let _ = stale.release().await; // refused: the value is no longer ours
    Ok((order_no.to_string(), stale_fence, successor_fence, result))
}

/// Copies of each request (10 per key) while the service's Redis — a private redis-server,
/// never the shared one — is SIGKILLed a third of the way through.
pub async fn redis_down(
    rig: &Rig,
    c: &StormClient,
    n: usize,
    concurrency: usize,
    redis: &mut PrivateRedis,
) -> anyhow::Result<Played> {
    let keys_count = (n / 10).max(1);
    let (sku, stock) = stocked_sku(rig, keys_count as i64).await?;
    let mut plan: Vec<usize> = (0..n).map(|i| i % keys_count).collect();
    plan.shuffle(&mut rand::rng());
    let run = rig.run.clone();
    let kill_at = n / 3;
    let started = Instant::now();
    let mut replies = futures::stream::iter(plan)
        .map(|k| {
            let (c, key) = (c.clone(), run.order_key(k));
            async move { c.order(&key, k as i64, sku, 1, None).await }
        })
        .buffer_unordered(concurrency);
    let mut done = 0;
    let mut killed_at = None;
    while let Some(_reply) = replies.next().await {
        done += 1;
        if done == kill_at && redis.is_running() {
            redis.kill();
            killed_at = Some(started.elapsed());
        }
    }
    drop(replies);
    // After the kill, copies that met a 409 or nothing retry until every key is settled.
    let settle: Vec<Reply> = futures::stream::iter(0..keys_count)
        .map(|k| {
            let (c, key) = (c.clone(), run.order_key(k));
            async move { order_until_settled(&c, &key, k as i64, sku, 20).await }
        })
        .buffered(concurrency) // in key order, so each answer is named by its key below
        .collect()
        .await;
    let seconds = started.elapsed().as_secs_f64();
    // A key still answered 409 (or nothing) after Redis died is a key blocked: the run fails.
    let unsettled: Vec<String> = (0..keys_count)
        .zip(&settle)
        .filter(|(_, r)| !settled(r))
        .map(|(k, r)| {
            format!(
                "requestId {}: last answer {} after 20 attempts",
                run.order_key(k),
                r.status
            )
        })
        .collect();
    let mut notes = vec![format!(
        "{n} requests over {keys_count} keys (10 copies each, shuffled); private Redis {} SIGKILLed after {kill_at} replies ({:?} in); then one more request per key",
        rig.config.redis.url,
        killed_at.unwrap_or_default()
    )];
    if !unsettled.is_empty() {
        notes.push(format!(
            "{} keys had no order answer after Redis died (see errors)",
            unsettled.len()
        ));
    }
    let checks = vec![Check::new(
        "every_key_settled_after_redis_died",
        "every key gets its order (or a refusal) once Redis is gone",
        unsettled,
    )];
    Ok(Played {
        skus: vec![(sku, stock)],
        notes,
        checks,
        seconds,
    })
}

/// Seed §1.1 compressed: one SKU with `stock` units, `users` users each double-clicking with a
/// gateway retry on top (and coming back after a 409); every order paid with a replayed
/// callback and a second notification; then every payment event produced again.
pub async fn flash_sale(
    rig: &Rig,
    c: &StormClient,
    users: usize,
    stock: i64,
    concurrency: usize,
) -> anyhow::Result<Played> {
    flash_sale_of(rig, c, 0..users, stock, concurrency).await
}

/// The flash sale for the users numbered `users` (their keys are the run's `order_key(u)`): the
/// chaos storm plays it in rounds of fresh users, each round on a SKU of its own.
pub async fn flash_sale_of(
    rig: &Rig,
    c: &StormClient,
    users: std::ops::Range<usize>,
    stock: i64,
    concurrency: usize,
) -> anyhow::Result<Played> {
    let (sku, stock) = stocked_sku(rig, stock).await?;
    let run = rig.run.clone();
    let started = Instant::now();
    let users_n = users.len();
    let outcomes: Vec<(bool, bool)> = futures::stream::iter(users)
        .map(|u| {
            let (c, run) = (c.clone(), run.clone());
            async move {
                let key = run.order_key(u);
                let user = u as i64;
                // Two clicks at once, and the gateway's retry a moment later.
                let (a, b, r) = tokio::join!(
                    c.order(&key, user, sku, 1, None),
                    c.order(&key, user, sku, 1, None),
                    async {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        c.order(&key, user, sku, 1, None).await
                    }
                );
                let mut order_no = [&a, &b, &r].iter().find_map(|x| x.order_no.clone());
                let sold_out = [&a, &b, &r].iter().any(|x| x.kind == ReplyKind::OutOfStock);
                if order_no.is_none() && !sold_out {
                    let last = order_until_settled(&c, &key, user, sku, 30).await;
                    order_no = last.order_no;
                }
                // A client that got 409 comes back after Retry-After (capped): the stored answer.
                if [&a, &b, &r].iter().any(|x| x.kind == ReplyKind::InFlight) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let again = order_until_settled(&c, &key, user, sku, 30).await;
                    order_no = order_no.or(again.order_no);
                }
                let Some(order_no) = order_no else {
                    return (false, true);
                };
                // The provider notifies twice with one key, and once more with another.
                let (k0, k1, pay_no) = (run.pay_key(u, 0), run.pay_key(u, 1), run.pay_no(u));
                let (p, q, s) = tokio::join!(
                    c.pay(&k0, &pay_no, &order_no, PRICE),
                    c.pay(&k0, &pay_no, &order_no, PRICE),
                    c.pay(&k1, &pay_no, &order_no, PRICE)
                );
                let booked = [&p, &q, &s].iter().any(|x| x.status / 100 == 2);
                (true, booked)
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let seconds = started.elapsed().as_secs_f64();
    let bought = outcomes.iter().filter(|o| o.0).count();
    let unbooked = outcomes.iter().filter(|o| o.0 && !o.1).count();
    rig.drain(SETTLE).await?;
    let again = rig.reproduce_events().await?;
    rig.drain(SETTLE).await?;
    let mut notes = vec![
        format!("sku {sku} with stock {stock}; {users_n} users × (2 clicks + 1 gateway retry) with one key each: {bought} got an order"),
        format!("each order paid 3× (a replayed callback, and a second notification under its own key); then {again} payment events produced again"),
    ];
    if unbooked > 0 {
        notes.push(format!(
            "{unbooked} orders got no 2xx to any of their payment callbacks (see errors)"
        ));
    }
    Ok(Played {
        skus: vec![(sku, stock)],
        notes,
        checks: vec![],
        seconds,
    })
}
