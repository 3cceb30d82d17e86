//! The Redis collector: the lock scan of every node, each lock linked to the fence token the
//! database recorded, and the keys of the trace in focus.

use super::*;

/// The Redis collector's database, for linking token locks to their requests
/// ([`locks::link_tokens`]): connected on first need, never waited for longer than a poll.
/// A database that could not be reached is tried again after this long, so a hung one never
/// holds the lock scan up more than once in a while.
const LINK_RETRY: Duration = Duration::from_secs(30);

/// A lock scan that could not read the main node.
fn main_node_down(node: String, error: String) -> LockScan {
    LockScan::failed(node, "main", error)
}

#[derive(Default)]
struct TokenLinks {
    db: Option<Database>,
    failed_at: Option<tokio::time::Instant>,
}

impl TokenLinks {
    async fn database(&mut self, config: &Config) -> Option<&Database> {
        let waiting = self.failed_at.is_some_and(|t| t.elapsed() < LINK_RETRY);
        if self.db.is_none() && !waiting {
            let connect = Database::connect_for_reads(config);
            match tokio::time::timeout(POLL_TIMEOUT, connect).await {
                Ok(Ok(db)) => self.db = Some(db),
                _ => self.failed_at = Some(tokio::time::Instant::now()),
            }
        }
        self.db.as_ref()
    }

    /// Link the scan's token locks (left raw when the database cannot answer; then not asked
    /// again for [`LINK_RETRY`], so a hung database never slows every lock scan).
    async fn link(&mut self, config: &Config, found: &mut [crate::lock::LockView]) {
        let has_token = found
            .iter()
            .any(|l| matches!(l.format, crate::lock::formats::LockFormat::Token { .. }));
        if !has_token || self.failed_at.is_some_and(|t| t.elapsed() < LINK_RETRY) {
            return;
        }
        let Some(db) = self.database(config).await else {
            return;
        };
        let linked = tokio::time::timeout(POLL_TIMEOUT, locks::link_tokens(db, found)).await;
        if !matches!(linked, Ok(Ok(()))) {
            self.failed_at = Some(tokio::time::Instant::now());
        }
    }
}

pub(super) async fn redis_task(
    config: Config,
    tx: mpsc::Sender<Update>,
    mut focus: watch::Receiver<Focus>,
    cancel: CancellationToken,
) {
    let inspector = match LockInspector::from_config(&config) {
        Ok(n) => n,
        Err(e) => {
            let scan = main_node_down(host_port(&config.redis.url), format!("{e:#}"));
            let _ = tx.send(Update::Locks(scan)).await;
            return;
        }
    };
    // The full lock scan runs at most every refresh period and never more than a third of the
    // time (a scan of 100,000 keys takes about a second): the console must not become the load on
    // the Redis it watches. The keys of the trace in focus are read every period.
    let mut next_scan = tokio::time::Instant::now();
    // Token locks are linked to their requests through the database (connected when one is
    // first seen; a database that is down leaves them raw and is tried again next round).
    let mut links = TokenLinks::default();
    // When each Redisson or token value was first seen, so a lock renewed for ever is flagged.
    let mut first_seen = crate::lock::FirstSeen::default();
    let held_warning = crate::lock::lock_held_warning(&config);
    loop {
        let f = focus.borrow_and_update().clone();
        if !f.paused {
            if tokio::time::Instant::now() >= next_scan {
                let started = tokio::time::Instant::now();
                let mut scan = match tokio::time::timeout(
                    POLL_TIMEOUT * 6,
                    inspector.scan(locks::LOCK_LIST_LIMIT),
                )
                .await
                {
                    Ok(s) => s,
                    Err(_) => {
                        let main = inspector.main_node().to_string();
                        let error = format!(
                            "redis node {main}: the lock scan did not finish within {:?}",
                            POLL_TIMEOUT * 6
                        );
                        main_node_down(main, error)
                    }
                };
                links.link(&config, &mut scan.locks).await;
                first_seen.judge(&mut scan.locks, held_warning);
                next_scan = tokio::time::Instant::now() + f.refresh.max(started.elapsed() * 2);
                if tx.send(Update::Locks(scan)).await.is_err() {
                    return;
                }
            }
            if f.ids.order_no.is_some() || f.ids.request_id.is_some() {
                let ids = f.ids.clone();
                let name = inspector.main_node().to_string();
                // Only a database the lock scan already connected: a trace never waits for one.
                let db = links.db.as_ref();
                let result = with_timeout(
                    locks::trace_keys(&inspector, &config.foreign_locks.patterns, &ids, db),
                    &name,
                )
                .await;
                if tx.send(Update::TraceKeys { ids, result }).await.is_err() {
                    return;
                }
            }
        }
        if !next_round(&mut focus, f.refresh, &cancel).await {
            return;
        }
    }
}
