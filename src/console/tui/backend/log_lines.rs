//! The log collector: the log lines of the trace in focus, from files and/or a log topic.

use super::*;

/// How often the log lines of an unchanged trace are read again (a file is read whole, within
/// the trace's windows, each time).
const LOGS_PERIOD: Duration = Duration::from_secs(15);

/// The log lines of the trace in focus (`logs.files` and/or `logs.topic`): read for the IDs its
/// timeline shows ([`Focus::log_ids`]) in its windows ([`logs::read_for_trace`]) — what
/// `idemguard trace` reads — when those IDs or its rows change, and again every
/// [`LOGS_PERIOD`]; a read that is no longer wanted is dropped.
pub(super) async fn logs_task(
    config: Config,
    tx: mpsc::Sender<Update>,
    mut focus: watch::Receiver<Focus>,
    cancel: CancellationToken,
) {
    let mut last: Option<(TraceTarget, Vec<String>, Option<TraceRows>)> = None;
    let mut next_read = tokio::time::Instant::now();
    loop {
        let f = focus.borrow_and_update().clone();
        if let (Some(target), false) = (&f.target, f.paused) {
            let key = (target.clone(), f.log_ids.clone(), f.rows.clone());
            if last.as_ref() != Some(&key) || tokio::time::Instant::now() >= next_read {
                let window = TimeWindow::last_day(now_ms());
                let read = tokio::select! {
                    r = logs::read_for_trace(&config, &f.log_ids, f.rows.as_ref(), window) => r,
                    _ = cancel.cancelled() => return,
                };
                let update = Update::TraceLogs {
                    target: target.clone(),
                    read,
                };
                if tx.send(update).await.is_err() {
                    return;
                }
                last = Some(key);
                next_read = tokio::time::Instant::now() + LOGS_PERIOD;
            }
        }
        if !next_round(&mut focus, f.refresh, &cancel).await {
            return;
        }
    }
}
