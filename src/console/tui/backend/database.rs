//! The database collector: each round reads the stuck records, the leak checks and the rows
//! of the trace in focus, each read bounded; a read that times out shows the database as slow.

use super::*;

/// How often the database collector looks for duplicates that got through.
const LEAK_PERIOD: Duration = Duration::from_secs(5);

pub(super) async fn database_task(
    config: Config,
    tx: mpsc::Sender<Update>,
    mut focus: watch::Receiver<Focus>,
    cancel: CancellationToken,
) {
    let mut config = config;
    config.database.max_connections = config.database.max_connections.min(DB_CONNECTIONS);
    let mut db: Option<Database> = None;
    let mut next_leaks = tokio::time::Instant::now();
    // The last round had a slow read ([`RoundReads`]).
    let mut slow = false;
    loop {
        let f = focus.borrow_and_update().clone();
        if !f.paused {
            if db.is_none() {
                match tokio::time::timeout(POLL_TIMEOUT, Database::connect_for_reads(&config)).await
                {
                    Ok(Ok(d)) => db = Some(d),
                    Ok(Err(e)) => {
                        if !send_db_error(&tx, &f, format!("{e:#}")).await {
                            return;
                        }
                    }
                    Err(_) => {
                        let e = format!(
                            "database {} did not answer within {POLL_TIMEOUT:?}",
                            BackendId::Database.target(&config)
                        );
                        if !send_db_error(&tx, &f, e).await {
                            return;
                        }
                    }
                }
            }
            if let Some(d) = &db {
                if !database_round(d, &config, &f, &tx, &mut next_leaks, &mut slow).await {
                    return;
                }
            }
        }
        if !next_round(&mut focus, f.refresh, &cancel).await {
            return;
        }
    }
}

/// One round of the database collector's reads: the stuck records, the leaks (at most every
/// [`LEAK_PERIOD`]) and the rows of the trace in focus, each through [`RoundReads::read`]; a
/// round whose every read answered in time says so (the database is no longer slow). False when
/// the console has gone.
async fn database_round(
    d: &Database,
    config: &Config,
    f: &Focus,
    tx: &mpsc::Sender<Update>,
    next_leaks: &mut tokio::time::Instant,
    slow: &mut bool,
) -> bool {
    let mut reads = RoundReads {
        tx,
        slow: false,
        was_slow: *slow,
    };
    let stuck = records::stuck_records(d, now_ms(), config.console.stuck_threshold);
    if let Some(stuck) = reads.read("the stuck records", stuck).await {
        if tx.send(Update::Stuck(stuck)).await.is_err() {
            return false;
        }
    }
    // The leak query groups a day of rows: at most every LEAK_PERIOD.
    if tokio::time::Instant::now() >= *next_leaks {
        *next_leaks = tokio::time::Instant::now() + LEAK_PERIOD.max(f.refresh);
        let now = now_ms();
        let leaks = overview::leaks(d, now - overview::LEAK_WINDOW_MS, now + 1);
        if let Some(leaks) = reads.read("the leak queries", leaks).await {
            if tx.send(Update::Leaks(leaks)).await.is_err() {
                return false;
            }
        }
    }
    if let Some(target) = &f.target {
        // The IDs the UI resolved, the target's own among them.
        let rows = records::trace_rows(d, &f.ids);
        if let Some(result) = reads.read("the trace's rows", rows).await {
            let target = target.clone();
            if tx.send(Update::TraceRows { target, result }).await.is_err() {
                return false;
            }
        }
    }
    *slow = reads.slow;
    let answered = Update::Slow {
        backend: BackendId::Database,
        reason: None,
    };
    reads.slow || tx.send(answered).await.is_ok()
}

/// How long a database read may take before the header says the database is slow (its bound,
/// `database.read_timeout`, is longer: the server ends the statement then).
pub const SLOW_AFTER: Duration = Duration::from_secs(1);

/// The reads of one round of the database collector, and whether one of them was slow.
struct RoundReads<'a> {
    tx: &'a mpsc::Sender<Update>,
    slow: bool,
    /// The last round was slow: the header says so already, with the table a read waited for,
    /// which a read of this round that is only late must not replace.
    was_slow: bool,
}

impl RoundReads<'_> {
    /// One read. Each of its statements is bounded on both sides (the server ends it at
    /// `database.read_timeout`, [`crate::db::bounds`]), so it always ends; until it does, the
    /// database is said to be slow once [`SLOW_AFTER`] has passed. A read ended for taking too
    /// long is said as slow too, naming the table and where to look, and gives no update of its
    /// own (`None`): the view keeps what it last read.
    async fn read<T>(
        &mut self,
        what: &str,
        read: impl std::future::Future<Output = anyhow::Result<T>>,
    ) -> Option<Result<T, String>> {
        tokio::pin!(read);
        let result = tokio::select! {
            r = &mut read => r,
            _ = tokio::time::sleep(SLOW_AFTER) => {
                if self.was_slow {
                    self.slow = true;
                } else {
                    self.slow(format!("{what}: no answer for {SLOW_AFTER:?} yet")).await;
                }
                read.await
            }
        };
        match result {
            Err(e) if e.is::<crate::db::bounds::NoAnswer>() => {
                self.slow(format!("{e:#}")).await;
                None
            }
            r => Some(r.map_err(|e| format!("{e:#}"))),
        }
    }

    async fn slow(&mut self, reason: String) {
        self.slow = true;
        let update = Update::Slow {
            backend: BackendId::Database,
            reason: Some(reason),
        };
        let _ = self.tx.send(update).await;
    }
}

async fn send_db_error(tx: &mpsc::Sender<Update>, f: &Focus, e: String) -> bool {
    if let Some(target) = &f.target {
        if tx
            .send(Update::TraceRows {
                target: target.clone(),
                result: Err(e.clone()),
            })
            .await
            .is_err()
        {
            return false;
        }
    }
    tx.send(Update::Stuck(Err(e))).await.is_ok()
}
