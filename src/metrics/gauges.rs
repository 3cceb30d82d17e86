//! The gauges a query computes, refreshed by `serve` on an interval: PROCESSING records and
//! unpublished outbox rows (count and oldest age, on `metrics.refresh_interval`), and the
//! duplicates that got through (`metrics.leak_check_interval`).
//!
//! The leak gauge runs the Overview's own leak queries (`queries/<dialect>/report_leaks_*.sql`
//! through [`crate::console::read::overview::leaks`]) over the rows created in the last
//! `metrics.leak_window`, which the `created_at` indexes bound. Every `serve` instance runs
//! them: the statements are bounded reads, and the alert rules take the `max` over instances,
//! so N instances cost N small reads per interval and never N alerts.

use std::time::Duration;

use sqlx::Row;
use tokio_util::sync::CancellationToken;

use crate::config::MetricsConfig;
use crate::db::Database;
use crate::lock::{LockFlag, LockInspector};

/// The tables the leak queries read (their `tbl` column).
const LEAK_TABLES: [&str; 5] = [
    "order_record",
    "stock_movement",
    "payment_flow",
    "points_ledger",
    "notification",
];

/// Lock keys read per node for the flag gauge, as the Locks view's scan.
const LOCK_SCAN_LIMIT: usize = 10_000;

/// Refreshes the gauges until `stop`.
pub fn spawn(
    db: Database,
    inspector: LockInspector,
    config: MetricsConfig,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut counts = tokio::time::interval(config.refresh_interval);
        let mut leaks = tokio::time::interval(config.leak_check_interval);
        for t in [&mut counts, &mut leaks] {
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        }
        loop {
            let refreshed = tokio::select! {
                _ = stop.cancelled() => break,
                _ = counts.tick() => timed("counts", refresh_counts(&db)).await,
                _ = leaks.tick() => {
                    let locks = async {
                        refresh_locks(&inspector).await;
                        Ok(())
                    };
                    let _ = timed("locks", locks).await;
                    timed("leaks", refresh_leaks(&db, config.leak_window)).await
                }
            };
            if let Err(e) = refreshed {
                super::global().gauge_refresh_failures.inc();
                tracing::warn!(error = %format!("{e:#}"), "a metrics gauge was not refreshed");
            }
        }
    })
}

/// `refresh`, its duration observed under `gauges`.
async fn timed(
    gauges: &'static str,
    refresh: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let result = refresh.await;
    super::global()
        .refresh_seconds
        .get_or_create(&super::RefreshLabels { gauges })
        .observe(started.elapsed().as_secs_f64());
    result
}

/// `consume`'s lag gauge: the group's lag on every partition of `topic`, until `stop`, read by
/// the one lag reader the console's Rates view and `idemguard rates` use too. Each member reads
/// every partition (the committed offsets are the group's): the alert takes `max`.
pub fn spawn_lag(
    kafka: crate::config::KafkaConfig,
    group: String,
    topic: String,
    every: Duration,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            let (k, g, t) = (kafka.clone(), group.clone(), topic.clone());
            let started = std::time::Instant::now();
            let read = tokio::task::spawn_blocking(move || {
                crate::stream::lag::consumer_lag(&k, &g, &t, Duration::from_secs(5))
            })
            .await;
            super::global()
                .refresh_seconds
                .get_or_create(&super::RefreshLabels { gauges: "lag" })
                .observe(started.elapsed().as_secs_f64());
            match read {
                Ok(Ok(lags)) => {
                    for l in lags {
                        let labels = super::PartitionLabels {
                            topic: l.topic,
                            partition: l.partition,
                        };
                        super::global()
                            .consumer_lag
                            .get_or_create(&labels)
                            .set(l.lag);
                    }
                }
                Ok(Err(e)) => {
                    super::global().gauge_refresh_failures.inc();
                    tracing::warn!(error = %format!("{e:#}"), "the consumer lag gauge was not refreshed");
                }
                Err(_) => {
                    super::global().gauge_refresh_failures.inc();
                }
            }
        }
    })
}

/// PROCESSING records and unpublished outbox rows, with the oldest one's age.
pub async fn refresh_counts(db: &Database) -> anyhow::Result<()> {
    let m = super::global();
    let now = crate::contracts::now_ms();
    let (n, oldest) = count_and_oldest(db, "metrics_processing").await?;
    m.processing_records.set(n);
    m.processing_oldest_seconds.set(age_seconds(now, oldest));
    let (n, oldest) = count_and_oldest(db, "metrics_outbox_pending").await?;
    m.outbox_pending_rows.set(n);
    m.outbox_oldest_seconds.set(age_seconds(now, oldest));
    Ok(())
}

async fn count_and_oldest(db: &Database, name: &str) -> anyhow::Result<(i64, Option<i64>)> {
    let row = sqlx::query(db.sql(name))
        .fetch_one(db)
        .await
        .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    Ok((row.try_get("n")?, row.try_get("oldest")?))
}

fn age_seconds(now_ms: i64, oldest_ms: Option<i64>) -> f64 {
    oldest_ms.map_or(0.0, |t| (now_ms - t).max(0) as f64 / 1000.0)
}

/// The lock flag gauge, one series per flag: what the Locks view (`idemguard locks`) flags.
pub async fn refresh_locks(inspector: &LockInspector) {
    let scan = inspector.scan(LOCK_SCAN_LIMIT).await;
    if !scan.all_nodes_ok() {
        super::global().gauge_refresh_failures.inc();
    }
    for flag in [
        LockFlag::NoTtl,
        LockFlag::DeadOwner,
        LockFlag::Undecodable,
        LockFlag::NoQuorum,
        LockFlag::OtherType,
        LockFlag::FairLockLeftover,
    ] {
        let n = scan
            .locks
            .iter()
            .filter(|l| l.flags.contains(&flag))
            .count();
        let labels = super::FlagLabels {
            flag: flag.as_str(),
        };
        super::global()
            .locks_flagged
            .get_or_create(&labels)
            .set(n as i64);
    }
}

/// The leak gauge, one series per table (0 when the window holds none).
pub async fn refresh_leaks(db: &Database, window: Duration) -> anyhow::Result<()> {
    let until = crate::contracts::now_ms() + 1;
    let since = until - window.as_millis() as i64;
    let found = crate::console::read::overview::leaks(db, since, until).await?;
    for table in LEAK_TABLES {
        let n = found.iter().filter(|l| l.table == table).count();
        super::global()
            .leaks
            .get_or_create(&super::TableLabels { table })
            .set(n as i64);
    }
    Ok(())
}
