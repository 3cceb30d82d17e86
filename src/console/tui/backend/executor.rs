//! The action executor: runs the operator's confirmed actions one by one (each conditional,
//! audited), reports each result and the batch's progress, and reads `ops_audit` and the DLQ
//! listing for their views.

use super::*;

/// What the UI asks the executor.
#[derive(Debug, Clone)]
pub enum ExecRequest {
    /// A confirmed batch: each action individually conditional, run in order; the token (Esc)
    /// stops it between actions.
    Run(Vec<Planned>, CancellationToken),
    LoadAudit,
    /// Read the DLQ (its last 7 days) and look up what the consumer would do with each message.
    LoadDlq,
    /// Write the post-incident report of this target (the order on screen) to a Markdown or
    /// HTML file in `console.report_dir`.
    Report(TraceTarget, ReportFormat),
}

/// Rows of `ops_audit` the Audit view shows.
pub const AUDIT_ROWS: i64 = 500;

/// The executor: one request at a time, in order. The actions are built on the first request
/// that needs them (a database that is down is said in the results, and tried again next time);
/// after each batch the Audit view is reloaded.
pub(super) async fn executor_task(
    config: Config,
    allow: bool,
    tx: mpsc::Sender<Update>,
    mut rx: mpsc::Receiver<ExecRequest>,
    cancel: CancellationToken,
) {
    let mut ready: Option<(Actions, Option<Actions>)> = None;
    loop {
        let req = tokio::select! {
            r = rx.recv() => match r { Some(r) => r, None => return },
            _ = cancel.cancelled() => return,
        };
        if let ExecRequest::Report(target, format) = req {
            let written = crate::console::report::write(&config, &target, format)
                .await
                .map(|w| w.to_string())
                .map_err(|e| format!("{e:#}"));
            if tx.send(Update::ReportWritten(written)).await.is_err() {
                return;
            }
            continue;
        }
        if let ExecRequest::LoadDlq = req {
            if tx
                .send(Update::Dlq(load_dlq(&config, &cancel).await))
                .await
                .is_err()
            {
                return;
            }
            continue;
        }
        if ready.is_none() {
            match executors(&config, allow).await {
                Ok(r) => ready = Some(r),
                Err(e) => {
                    let e = format!("{e:#}");
                    let update = match req {
                        ExecRequest::Run(batch, _) => Update::ActionResults(
                            batch
                                .iter()
                                .map(|p| not_performed(p, format!("not performed: {e}")))
                                .collect(),
                        ),
                        ExecRequest::LoadAudit | ExecRequest::LoadDlq | ExecRequest::Report(..) => {
                            Update::Audit(Err(e))
                        }
                    };
                    let _ = tx.send(update).await;
                    continue;
                }
            }
        }
        let (single, redlock) = ready.as_ref().expect("built above");
        if let ExecRequest::Run(batch, stop) = req {
            let ended = if batch.iter().all(|p| p.scope != LockMode::Redlock) {
                Update::BatchEnded(run_with_progress(&batch, single, &stop, &tx).await)
            } else {
                Update::ActionResults(run_batch(&batch, single, redlock.as_ref()).await)
            };
            if tx.send(ended).await.is_err() {
                return;
            }
            // A redrive changes the DLQ view's rows: it is read again.
            if batch
                .iter()
                .any(|p| matches!(p.action, ops::Action::Redrive { .. }))
                && tx
                    .send(Update::Dlq(load_dlq(&config, &cancel).await))
                    .await
                    .is_err()
            {
                return;
            }
        }
        let audit = ops::audit_rows(single.database(), 0, i64::MAX, AUDIT_ROWS)
            .await
            .map_err(|e| format!("reading ops_audit: {e}"));
        if tx.send(Update::Audit(audit)).await.is_err() {
            return;
        }
    }
}

/// The DLQ view's listing: the last [`DEFAULT_DLQ_WINDOW`] of the DLQ, verdicts looked up.
async fn load_dlq(config: &Config, cancel: &CancellationToken) -> Result<Box<DlqListing>, String> {
    let until = crate::contracts::now_ms();
    let window = crate::console::read::window::TimeWindow {
        from_ms: until - DEFAULT_DLQ_WINDOW.as_millis() as i64,
        to_ms: until,
    };
    let mut listing = read_dlq(config, window, cancel)
        .await
        .map_err(|e| format!("reading the DLQ: {e:#}"))?;
    let db = crate::console::read::sources::connect_database(config)
        .await
        .map_err(|e| format!("{e:#}"))?;
    let looked = look_up(config, &db, &mut listing).await;
    db.pool.close().await;
    looked.map_err(|e| format!("looking up the DLQ's verdicts: {e:#}"))?;
    Ok(Box::new(listing))
}

/// Where a running batch is: `ended` of `total` actions, and their outcomes so far.
#[derive(Debug, Clone, Default)]
pub struct BatchProgress {
    pub ended: usize,
    pub total: usize,
    pub done: usize,
    pub refused: usize,
    /// Errors, and actions that found the row changed (nothing written).
    pub failed: usize,
    pub last: Option<ActionResult>,
}

/// A batch on the main Redis's actions through the executor the CLI's bulk redrive uses
/// ([`Actions::run_batch`]), each result reported as it comes; `stop` ends it between actions.
async fn run_with_progress(
    batch: &[Planned],
    single: &Actions,
    stop: &CancellationToken,
    tx: &mpsc::Sender<Update>,
) -> ops::BatchSummary {
    let actions: Vec<ops::Action> = batch.iter().map(|p| p.action.clone()).collect();
    let mut so_far = BatchProgress {
        total: actions.len(),
        ..BatchProgress::default()
    };
    single
        .run_batch(&actions, stop, |i, r| {
            so_far.ended = i + 1;
            match r.outcome {
                ActionOutcome::Done => so_far.done += 1,
                ActionOutcome::Refused => so_far.refused += 1,
                ActionOutcome::Changed | ActionOutcome::Error => so_far.failed += 1,
            }
            so_far.last = Some(r.clone());
            // Best effort: the next update (or the summary) carries the same counts.
            let _ = tx.try_send(Update::BatchProgress(so_far.clone()));
        })
        .await
}

/// A batch with RedLock actions, in order, each action on the actions of its lock scope.
async fn run_batch(
    batch: &[Planned],
    single: &Actions,
    redlock: Option<&Actions>,
) -> Vec<ActionResult> {
    let mut results = Vec::with_capacity(batch.len());
    for p in batch {
        results.push(match (p.scope, redlock) {
            (LockMode::Redlock, Some(r)) => r.run(&p.action).await,
            (LockMode::Redlock, None) => not_performed(
                p,
                "not performed: redis.redlock_nodes lists fewer than 3 nodes".into(),
            ),
            _ => single.run(&p.action).await,
        });
    }
    results
}

/// The result of an action the executor could not run.
fn not_performed(p: &Planned, detail: String) -> ActionResult {
    ActionResult {
        action: p.action.name(),
        target: p.action.target().to_string(),
        outcome: ActionOutcome::Error,
        before: None,
        after: None,
        detail,
        audit_id: None,
    }
}

/// The actions over the main Redis (single mode) and, when configured, the RedLock nodes.
async fn executors(config: &Config, allow: bool) -> anyhow::Result<(Actions, Option<Actions>)> {
    let mut c = config.for_actions();
    c.database.max_connections = c.database.max_connections.min(2);
    let db = tokio::time::timeout(POLL_TIMEOUT, Database::connect_for_actions(&c))
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "the database {} did not answer within {POLL_TIMEOUT:?}",
                redact_url(&c.database.url)
            )
        })??;
    let instance = Instance::current();
    let tracer =
        Tracer::from_config(config, &instance).unwrap_or_else(|_| Tracer::log_only(&instance));
    c.lock.mode = LockMode::Single;
    let single = Actions::new(
        &c,
        db.clone(),
        Locks::from_config(&c, &instance, tracer.clone())?,
        tracer.clone(),
        allow,
    )
    .await;
    let redlock = if config.redis.redlock_nodes.len() >= 3 {
        c.lock.mode = LockMode::Redlock;
        Some(
            Actions::new(
                &c,
                db,
                Locks::from_config(&c, &instance, tracer.clone())?,
                tracer,
                allow,
            )
            .await,
        )
    } else {
        None
    };
    Ok((single, redlock))
}
