//! Retention: what is past its retention is deleted, so no table grows with
//! traffic for ever. `serve` purges finished idempotency records and published outbox rows,
//! `consume` purges the dedup state (`processed_event`), both in a background task every
//! `retention.interval`; `idemguard purge` runs one full pass for a cron.
//!
//! Each statement deletes at most `retention.batch` rows (PostgreSQL skips rows another
//! transaction holds), and the pass pauses between batches: a purge never holds locks for long
//! and never makes the request path wait. A PROCESSING record and an unpublished (PENDING) outbox
//! row are never deleted.

use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::Database;
use crate::config::RetentionConfig;
use crate::contracts::now_ms;

/// Pause between two batches of one pass: room for the request path between short statements.
const BATCH_PAUSE: Duration = Duration::from_millis(20);

/// One kind of row with a retention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Purge {
    /// Finished idempotency records past `expire_at` (`idempotency.retention` after they finished).
    IdempotencyRecords,
    /// Published outbox rows sent more than `retention.outbox_sent` ago.
    SentOutbox,
    /// The consumer's dedup state past `expire_at` (`consumer.dedup_ttl`).
    ProcessedEvents,
}

impl Purge {
    /// What `serve` purges.
    pub const SERVE: &'static [Purge] = &[Purge::IdempotencyRecords, Purge::SentOutbox];
    /// What `consume` purges.
    pub const CONSUME: &'static [Purge] = &[Purge::ProcessedEvents];
    /// What `idemguard purge` purges.
    pub const ALL: &'static [Purge] = &[
        Purge::IdempotencyRecords,
        Purge::SentOutbox,
        Purge::ProcessedEvents,
    ];

    /// The logical table, for messages.
    pub fn table(self) -> &'static str {
        match self {
            Purge::IdempotencyRecords => "idempotency_record",
            Purge::SentOutbox => "outbox",
            Purge::ProcessedEvents => "processed_event",
        }
    }

    fn query(self) -> &'static str {
        match self {
            Purge::IdempotencyRecords => "retention_idempotency_record",
            Purge::SentOutbox => "retention_outbox_sent",
            Purge::ProcessedEvents => "retention_processed_event",
        }
    }

    /// Rows older than this go: records and dedup rows carry their own `expire_at`; an outbox
    /// row is kept `outbox_sent` after it was sent.
    fn cutoff(self, config: &RetentionConfig, now: i64) -> i64 {
        match self {
            Purge::SentOutbox => now - config.outbox_sent.as_millis() as i64,
            Purge::IdempotencyRecords | Purge::ProcessedEvents => now,
        }
    }
}

/// How many rows one pass deleted from one table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Purged {
    pub table: &'static str,
    pub deleted: u64,
}

/// Delete everything of `what` past its retention, batch by batch, until a batch comes back
/// short or `stop` is cancelled.
pub async fn purge(
    db: &Database,
    what: Purge,
    config: &RetentionConfig,
    stop: &CancellationToken,
) -> Result<u64, sqlx::Error> {
    let cutoff = what.cutoff(config, now_ms());
    let batch = u64::from(config.batch);
    let mut deleted = 0;
    loop {
        let n = sqlx::query(db.sql(what.query()))
            .bind(cutoff)
            .bind(i64::from(config.batch))
            .execute(db)
            .await?
            .rows_affected();
        deleted += n;
        if n < batch || stop.is_cancelled() {
            return Ok(deleted);
        }
        tokio::time::sleep(BATCH_PAUSE).await;
    }
}

/// One full pass over `what`, in order.
pub async fn pass(
    db: &Database,
    what: &[Purge],
    config: &RetentionConfig,
    stop: &CancellationToken,
) -> Result<Vec<Purged>, sqlx::Error> {
    let mut out = Vec::with_capacity(what.len());
    for w in what {
        out.push(Purged {
            table: w.table(),
            deleted: purge(db, *w, config, stop).await?,
        });
    }
    Ok(out)
}

/// The background task of a running service: a pass every `retention.interval` until `stop`.
/// A failed pass is logged and tried again at the next interval.
pub fn spawn(
    db: Database,
    what: &'static [Purge],
    config: RetentionConfig,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(config.interval) => {}
            }
            match pass(&db, what, &config, &stop).await {
                Ok(counts) => {
                    for p in counts.iter().filter(|p| p.deleted > 0) {
                        tracing::info!(
                            table = p.table,
                            deleted = p.deleted,
                            "retention: deleted rows past their retention"
                        );
                    }
                }
                Err(e) => {
                    tracing::warn!(database = %db.shown_url, error = %e, "retention pass failed; trying again in {:?}", config.interval)
                }
            }
        }
    })
}
