//! The watchdog: while a guard is held, renew its lock every TTL/3 with compare-and-PEXPIRE
//! (seed §3.4, §6.2: a TTL shorter than the work lets a second worker in). It never renews
//! someone else's lock (the renewal compares the value), renews at most `lock.max_renewals`
//! times (a stuck holder cannot keep a lock forever), and fires the guard's loss signal as soon
//! as the lock is known lost or its remaining validity falls below the margin — before the key
//! can expire under the holder's feet. A holder process that dies stops renewing with it, so
//! its lock expires within one TTL.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::time::sleep_until;
use tokio_util::sync::CancellationToken;

use super::{Held, Locks, Outcome, Renewal};

/// Remaining validity under which the lock counts as lost: a tenth of the TTL.
pub(crate) fn margin(ttl: Duration) -> Duration {
    (ttl / 10).max(Duration::from_millis(1))
}

/// Renew `held` until `stop`. With `renew` false (a guard acquired without the watchdog) only
/// the loss signal is kept: it fires when the validity runs out.
pub(crate) fn spawn(locks: Locks, held: Arc<Held>, stop: CancellationToken, renew: bool) {
    if renew {
        tokio::spawn(run(locks, held, stop));
    } else {
        tokio::spawn(async move {
            let deadline = held
                .valid_until()
                .checked_sub(margin(held.ttl))
                .unwrap_or_else(Instant::now);
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = sleep_until(deadline.into()) => {
                    fire(&locks, &held, &stop, "its TTL ran out (acquired without the watchdog)".into());
                }
            }
        });
    }
}

/// The renewal loop (seed §3.4): renew at a third of the TTL, sooner after a failure while
/// validity is left, stop on release or loss. One select loop, long because its arms share the
/// deadline and the last renewal's outcome.
async fn run(locks: Locks, held: Arc<Held>, stop: CancellationToken) {
    let ttl = held.ttl;
    let ttl_ms = ttl.as_millis().max(1) as u64;
    let every = ttl / 3;
    let margin = margin(ttl);
    let max_renewals = locks.inner.config.max_renewals;
    let mut last_failure: Option<String> = None;
    loop {
        let deadline = held
            .valid_until()
            .checked_sub(margin)
            .unwrap_or_else(Instant::now);
        if held.renewals.load(Ordering::Relaxed) >= max_renewals {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = sleep_until(deadline.into()) => {
                    return fire(&locks, &held, &stop, format!("the cap of {max_renewals} renewals is reached and the validity ran out"));
                }
            }
        }
        // After a failed renewal try again sooner, while validity is left.
        let pause = if last_failure.is_some() {
            (every / 4).max(Duration::from_millis(5))
        } else {
            every
        };
        let next = (Instant::now() + pause).min(deadline);
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = sleep_until(next.into()) => {}
        }
        if Instant::now() >= deadline {
            let why = last_failure
                .take()
                .unwrap_or_else(|| "renewal came too late".into());
            return fire(
                &locks,
                &held,
                &stop,
                format!(
                    "remaining validity fell below {}ms: {why}",
                    margin.as_millis()
                ),
            );
        }
        let started = Instant::now();
        let outcome = tokio::select! {
            _ = stop.cancelled() => return,
            r = locks.renew_claims(&held.key, &held.holds, ttl_ms) => Some(r),
            _ = sleep_until(deadline.into()) => None,
        };
        match outcome {
            Some(Renewal::Renewed) => {
                let valid_for = locks
                    .validity(ttl, started.elapsed())
                    .unwrap_or(Duration::ZERO);
                *held.valid_until.lock().expect("valid_until") = started + valid_for;
                let n = held.renewals.fetch_add(1, Ordering::Relaxed) + 1;
                last_failure = None;
                locks.emit(
                    Outcome::LockRenewed,
                    &held.key,
                    format!(
                        "key={} fence={} renewal={n}/{max_renewals} ttl_ms={ttl_ms}",
                        held.key, held.holder.fence
                    ),
                    started,
                );
            }
            Some(Renewal::NotHeld) => {
                return fire(&locks, &held, &stop, "a renewal found the lock no longer holds our value (expired, deleted or taken over)".into());
            }
            Some(Renewal::Failed(e)) => {
                tracing::warn!(key = %held.key, "lock renewal failed, retrying while validity is left: {e}");
                last_failure = Some(e.to_string());
            }
            None => {
                let why = last_failure
                    .take()
                    .unwrap_or_else(|| "the renewal did not answer".into());
                return fire(
                    &locks,
                    &held,
                    &stop,
                    format!(
                        "remaining validity fell below {}ms: {why}",
                        margin.as_millis()
                    ),
                );
            }
        }
    }
}

fn fire(locks: &Locks, held: &Held, stop: &CancellationToken, reason: String) {
    // A release racing with the last renewal is not a loss.
    if stop.is_cancelled() {
        return;
    }
    *held.lost_reason.lock().expect("lost_reason") = Some(reason.clone());
    held.lost.cancel();
    locks.emit(
        Outcome::LockLost,
        &held.key,
        format!(
            "key={} fence={} renewals={} {reason}",
            held.key,
            held.holder.fence,
            held.renewals.load(Ordering::Relaxed)
        ),
        Instant::now(),
    );
}
