//! `idemguard storm chaos --duration D --seed S`: the flash sale, in rounds of fresh users, for
//! `D`, while a nemesis applies faults on a schedule drawn from `S` — so a failing run is
//! replayed with the same faults at the same moments (the traffic's own interleaving is the
//! machine's). The service is the real `idemguard serve` binary, in a process of its own. The
//! faults:
//!
//! - freeze the service's private Redis (SIGSTOP) for a while, then thaw it (SIGCONT): the fast
//!   path, the request locks and the heartbeats hang, then come back;
//! - terminate every other session of the run's database: the service's and the consumer's
//!   pools lose their connections mid-statement;
//! - SIGKILL the service and start it again on the same address after a while: requests in
//!   flight get a reset, their records stay PROCESSING under a dead owner until a retry takes
//!   them over, unpublished outbox rows wait for the next start. The clients retry with the same
//!   Idempotency-Key, as a gateway does ([`StormClient::patient`]);
//! - SIGKILL a process holding `lock:order:{orderNo}` (watchdog on) mid-hold: the next holder
//!   must find it still held, get it once its TTL has run out, with a larger fence token, and
//!   the dead holder's late write must be refused ([`kill_lock_holder`]);
//! - restart the consumer (stop, then a new member of the same group) — between rounds, as the
//!   nemesis runs beside the traffic, which borrows the rig; the restarts due during a round
//!   make one.
//!
//! The invariants are the storm's, read from the database afterwards: one order per requestId
//! answered 201, stock exact, one payment flow per payNo, one PAID per order, one points row and
//! one notification per event, no record PROCESSING past its lease; and the killed lock
//! holders' check.

use std::path::Path;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::client::StormClient;
use super::invariants::Check;
use super::processes::{hold_lock, signal, ChildConfig, ServiceProcess};
use super::redis_server::PrivateRedis;
use super::rig::{with_retries, Rig};
use super::scenarios::{self, Played, PRICE};
use crate::config::Dialect;
use crate::contracts::{keys, new_event_id, Instance, OrderNo, RequestId};
use crate::db::orders::{NewOrder, Orders, Transition, TransitionOutcome};
use crate::db::state_machine::OrderStatus;
use crate::lock::{Acquisition, LockGuard, Locks};

/// Users per round (each: 2 clicks + a retry, then 3 payment callbacks), and the round's stock.
const ROUND_USERS: usize = 60;
const ROUND_STOCK: i64 = 40;
/// How long a client (its gateway) keeps retrying one request through the faults: past a
/// restart of the service plus the lease of a dead owner's record.
const PATIENCE: Duration = Duration::from_secs(30);
/// The TTL of the killed lock holders' locks (renewed every third of it while they live).
const HOLDER_TTL: Duration = Duration::from_secs(2);
/// The killed lock holders' orders are numbered from here (the users count from 0).
const VICTIMS: usize = 9_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    FreezeRedis,
    KillSessions,
    RestartConsumer,
    KillService,
    KillLockHolder,
}

/// One fault of the schedule: `at` from the start of the storm, held for `hold` (a freeze, the
/// service's downtime, the lock holder's time before its kill).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub at: Duration,
    pub kind: FaultKind,
    pub hold: Duration,
}

/// The nemesis's schedule for `duration`: a fault every 0.5–3 s, the same for the same seed.
pub fn schedule(seed: u64, duration: Duration) -> Vec<Fault> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut at = Duration::ZERO;
    let mut out = Vec::new();
    loop {
        at += Duration::from_millis(rng.random_range(500..3000));
        if at >= duration {
            return out;
        }
        let kind = match rng.random_range(0..5) {
            0 => FaultKind::FreezeRedis,
            1 => FaultKind::KillSessions,
            2 => FaultKind::KillService,
            3 => FaultKind::KillLockHolder,
            _ => FaultKind::RestartConsumer,
        };
        let hold = Duration::from_millis(rng.random_range(100..1500));
        out.push(Fault { at, kind, hold });
    }
}

/// Faults applied, by kind, and the sessions terminated.
#[derive(Debug, Default, Clone, Copy)]
struct Applied {
    freezes: usize,
    kills: usize,
    sessions: usize,
    restarts: usize,
    service_kills: usize,
    holder_kills: usize,
}

impl Applied {
    fn add(&mut self, o: Applied) {
        self.freezes += o.freezes;
        self.kills += o.kills;
        self.sessions += o.sessions;
        self.restarts += o.restarts;
        self.service_kills += o.service_kills;
        self.holder_kills += o.holder_kills;
    }
}

/// What the nemesis stands on besides the rig.
struct Stage<'a> {
    rig: &'a Rig,
    redis: &'a PrivateRedis,
    binary: &'a Path,
    file: &'a ChildConfig,
    locks: Locks,
    /// The SKU the killed lock holders' orders are placed on.
    victim_sku: i64,
}

/// Plays the chaos storm: rounds of the flash sale until `duration` has passed, the nemesis
/// beside each round; restarts of the consumer due during a round happen right after it.
pub async fn chaos(
    rig: &mut Rig,
    c: &StormClient,
    redis: &PrivateRedis,
    binary: &Path,
    duration: Duration,
    seed: u64,
    concurrency: usize,
) -> anyhow::Result<Played> {
    // The real service takes the in-process one's address, so the client is unchanged.
    let listen = match &rig.server {
        Some(s) => s.addr.to_string(),
        None => anyhow::bail!("chaos: the rig has no service address"),
    };
    rig.stop_server().await?;
    let file = ChildConfig::write(&rig.config, &rig.run.id)?;
    let mut service = ServiceProcess::start(binary, &file, &listen).await?;
    let played = rounds(
        rig,
        c,
        redis,
        binary,
        &file,
        &mut service,
        duration,
        seed,
        concurrency,
    )
    .await;
    // Ctrl-C: what the last incarnation holds is finished and published before the checks.
    let stopped = service.stop().await;
    let played = played?;
    stopped?;
    Ok(played)
}

/// The rounds and the nemesis beside each (see [`chaos`]). Long because the round loop and
/// the nemesis share the round's counters and its stop signal.
#[allow(clippy::too_many_arguments)] // the stage of one storm, taken apart by its owner
async fn rounds(
    rig: &mut Rig,
    c: &StormClient,
    redis: &PrivateRedis,
    binary: &Path,
    file: &ChildConfig,
    service: &mut ServiceProcess,
    duration: Duration,
    seed: u64,
    concurrency: usize,
) -> anyhow::Result<Played> {
    let c = c.patient(PATIENCE);
    let plan = schedule(seed, duration);
    let (victim_sku, _) = scenarios::stocked_sku(rig, 1_000).await?;
    let locks = Locks::from_config(&rig.config, &Instance::current(), rig.tracer.clone())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let started = Instant::now();
    let mut next = 0; // the first fault of `plan` not yet applied
    let mut applied = Applied::default();
    let mut all = Played {
        skus: vec![(victim_sku, 1_000)],
        ..Played::default()
    };
    let mut holders = Vec::new(); // what the killed lock holders' successors found wrong
    let mut round = 0;
    let mut restarts_due = 0;
    let mut traffic_seconds = 0.0; // seconds of the rounds' HTTP traffic, settling excluded
    while started.elapsed() < duration {
        let users = round * ROUND_USERS..(round + 1) * ROUND_USERS;
        let stop = CancellationToken::new();
        let traffic = async {
            let played = scenarios::flash_sale_of(rig, &c, users, ROUND_STOCK, concurrency).await;
            stop.cancel();
            played
        };
        let stage = Stage {
            rig,
            redis,
            binary,
            file,
            locks: locks.clone(),
            victim_sku,
        };
        let nemesis = nemesis(
            &stage,
            service,
            &plan[next..],
            started,
            &stop,
            applied.holder_kills,
        );
        let (played, acted) = tokio::join!(traffic, nemesis);
        let (done, got, found) = acted?;
        let played = played?;
        next += done;
        applied.add(got);
        holders.extend(found);
        // Restarts due during the round (the nemesis left them: the traffic borrowed the rig),
        // coalesced into one: a member stopped again while it is still joining the group left
        // tansu's group without an assignment for minutes (seen in a 180 s run).
        let due = plan[..next]
            .iter()
            .filter(|f| f.kind == FaultKind::RestartConsumer)
            .count();
        if due > restarts_due {
            rig.stop_consumer().await?;
            rig.start_consumer().await?;
            applied.restarts += 1;
            restarts_due = due;
        }
        all.skus.extend(played.skus);
        all.checks.extend(played.checks);
        traffic_seconds += played.seconds;
        round += 1;
    }
    // The report's rate is over the whole run: the rounds' traffic alone (`traffic_seconds`)
    // leaves out their settling and restarts, about three quarters of a 180 s run.
    all.seconds = started.elapsed().as_secs_f64();
    all.checks.push(Check::new(
        "killed_lock_holder_fenced",
        "a SIGKILLed holder's lock is taken by the next holder only after its TTL, with a larger fence token, and the dead holder's late write is refused",
        holders,
    ));
    all.notes.push(format!(
        "chaos seed {seed}, {:.0} s: {round} rounds of {ROUND_USERS} users (stock {ROUND_STOCK} each) in {:.1} s, {traffic_seconds:.1} s of it traffic and the rest settling; faults: {} Redis freezes, {} session kills ({} sessions ended), {} service kills, {} lock holders killed, {} consumer restarts (for {restarts_due} due); {} faults scheduled",
        duration.as_secs_f64(),
        all.seconds,
        applied.freezes,
        applied.kills,
        applied.sessions,
        applied.service_kills,
        applied.holder_kills,
        applied.restarts,
        plan.len()
    ));
    Ok(all)
}

/// Applies `plan`'s faults at their times until `stop`; returns how many it went through
/// (restarts included, which it leaves to the caller), what it did, and what the killed lock
/// holders' successors found wrong. `holders` numbers the lock holders killed before.
async fn nemesis(
    stage: &Stage<'_>,
    service: &mut ServiceProcess,
    plan: &[Fault],
    started: Instant,
    stop: &CancellationToken,
    holders: usize,
) -> anyhow::Result<(usize, Applied, Vec<String>)> {
    let mut applied = Applied::default();
    let mut found = Vec::new();
    for (i, fault) in plan.iter().enumerate() {
        let wait = fault.at.saturating_sub(started.elapsed());
        tokio::select! {
            _ = stop.cancelled() => return Ok((i, applied, found)),
            _ = tokio::time::sleep(wait) => {}
        }
        match fault.kind {
            FaultKind::FreezeRedis => {
                if let Some(pid) = stage.redis.pid() {
                    signal(pid, "-STOP");
                    tokio::time::sleep(fault.hold).await; // thawed whatever happens meanwhile
                    signal(pid, "-CONT");
                    applied.freezes += 1;
                }
            }
            FaultKind::KillSessions => {
                applied.kills += 1;
                applied.sessions += kill_sessions(stage.rig).await;
            }
            FaultKind::KillService => {
                service.kill().await;
                tokio::time::sleep(fault.hold).await;
                service.restart(stage.file).await?;
                applied.service_kills += 1;
            }
            FaultKind::KillLockHolder => {
                let n = holders + applied.holder_kills;
                found.extend(kill_lock_holder(stage, n, fault.hold).await?);
                applied.holder_kills += 1;
            }
            FaultKind::RestartConsumer => {}
        }
    }
    Ok((plan.len(), applied, found))
}

/// Lock holder `n`: a separate `idemguard lock-hold` takes `lock:order:{orderNo}` of an order of
/// its own (TTL [`HOLDER_TTL`], watchdog on) and is SIGKILLed after `hold`. The next holder must
/// find the lock still held (a kill releases nothing), get it once the remaining TTL has run
/// out and no later than a TTL after the kill (the dead watchdog renews nothing), with a larger
/// fence token; it cancels the order, and the dead holder's PAID write under its own token —
/// what a holder paused past its death would send — must be refused. Returns what was wrong.
async fn kill_lock_holder(
    stage: &Stage<'_>,
    n: usize,
    hold: Duration,
) -> anyhow::Result<Vec<String>> {
    let rig = stage.rig;
    let (orders, order_no) = place_holder_order(stage, n).await?;
    let key = keys::order_lock(order_no.as_str());
    let (mut holder, held) = hold_lock(stage.binary, stage.file, &key, HOLDER_TTL).await?;
    tokio::time::sleep(hold).await; // the watchdog renews meanwhile
    holder.kill().await?; // SIGKILL
    let killed = Instant::now();
    let mut wrong = Vec::new();
    let left = remaining_ttl(&rig.config.redis, &key).await?;
    if left.is_none() {
        wrong.push(format!("{key}: gone as soon as its holder was killed"));
    }
    let successor = take_over(stage, &key, killed).await;
    let taken_after = killed.elapsed();
    let Some(successor) = successor else {
        wrong.push(format!("{key}: still held {taken_after:?} after its holder was killed (TTL {HOLDER_TTL:?}): something renews a dead holder's lock"));
        return Ok(wrong);
    };
    if let Some(left) = left.filter(|l| taken_after + Duration::from_millis(50) < *l) {
        wrong.push(format!(
            "{key}: taken {taken_after:?} after the kill, {left:?} of its TTL were left"
        ));
    }
    if taken_after > HOLDER_TTL + Duration::from_millis(500) {
        wrong.push(format!("{key}: taken {taken_after:?} after the kill, later than its TTL {HOLDER_TTL:?}: the dead holder's watchdog renewed it"));
    }
    let (stale, fence) = (held.fence, successor.fence().0);
    if fence <= stale {
        wrong.push(format!(
            "{key}: the successor's fence {fence} is not above the dead holder's {stale}"
        ));
    }
    let cancel = Transition::to(order_no.as_str(), OrderStatus::Cancelled).with_fence(fence);
    let cancelled = with_retries("the successor's cancel", || async {
        orders
            .transition(&cancel)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))
    })
    .await?;
    let _ = successor.release().await;
    // Already applied: a retried cancel whose first commit's answer was lost with its session.
    if !matches!(
        cancelled,
        TransitionOutcome::Applied(_) | TransitionOutcome::AlreadyApplied(_)
    ) {
        let got = outcome_name(&cancelled);
        wrong.push(format!(
            "order {order_no}: the successor's cancel was {got}"
        ));
    }
    let late = Transition::paid(order_no.as_str(), new_event_id()).with_fence(stale);
    let written = with_retries("the dead holder's late write", || async {
        orders
            .transition(&late)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))
    })
    .await?;
    if !matches!(written, TransitionOutcome::FenceRejected { .. }) {
        let got = outcome_name(&written);
        wrong.push(format!("order {order_no}: the dead holder's write under fence {stale} (successor {fence}) was {got}, not refused by its fence"));
    }
    Ok(wrong)
}

/// Lock holder `n`'s order, on the victim SKU: created, or replayed after a retry (the one
/// order of its requestId).
async fn place_holder_order(stage: &Stage<'_>, n: usize) -> anyhow::Result<(Orders, OrderNo)> {
    let rig = stage.rig;
    let orders = Orders::new(rig.db.clone(), rig.tracer.clone());
    let order_no = OrderNo::generate();
    let new = NewOrder {
        request_id: RequestId::parse(&rig.run.order_key(VICTIMS + n))?,
        order_no: order_no.clone(),
        user_id: (VICTIMS + n) as i64,
        sku_id: stage.victim_sku,
        quantity: 1,
        amount: PRICE,
        fence: None,
    };
    with_retries("placing a lock holder's order", || async {
        orders
            .create(&new)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))
    })
    .await?;
    Ok((orders, order_no))
}

/// The next holder's tries for `key` (one attempt each, no watchdog) until it is taken or three
/// TTLs have passed since the kill: the lock, or `None` if it never came free.
async fn take_over(stage: &Stage<'_>, key: &str, killed: Instant) -> Option<LockGuard> {
    let options = stage
        .locks
        .options()
        .without_watchdog()
        .ttl(HOLDER_TTL)
        .attempts(1);
    loop {
        match stage.locks.acquire_with(key, &options).await {
            Ok(Acquisition::Held(g)) => break Some(g),
            Ok(Acquisition::Contended(_)) | Err(_) if killed.elapsed() < 3 * HOLDER_TTL => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            _ => break None,
        }
    }
}

fn outcome_name(o: &TransitionOutcome) -> &'static str {
    match o {
        TransitionOutcome::Applied(_) => "applied",
        TransitionOutcome::AlreadyApplied(_) => "already applied",
        TransitionOutcome::Rejected(_) => "rejected by the state machine",
        TransitionOutcome::FenceRejected { .. } => "refused by its fence",
    }
}

/// The key's remaining TTL on the service's Redis (reached with `[redis]`'s TLS files and
/// password); None when it does not exist.
async fn remaining_ttl(
    redis: &crate::config::RedisConfig,
    key: &str,
) -> anyhow::Result<Option<Duration>> {
    let mut conn = crate::lock::RedisAccess::of(redis)
        .client(&redis.url)?
        .get_multiplexed_async_connection()
        .await?;
    let ms: i64 = redis::cmd("PTTL").arg(key).query_async(&mut conn).await?;
    Ok((ms > 0).then(|| Duration::from_millis(ms as u64)))
}

/// Ends every session of the run's database but the one asking; how many it ended. A failure
/// (e.g. no right to end them) counts none: the storm goes on without that fault.
async fn kill_sessions(rig: &Rig) -> usize {
    let db = &rig.db;
    let ids: Vec<i64> = match sqlx::query_scalar(db.sql("storm_chaos_sessions"))
        .fetch_all(&db.pool)
        .await
    {
        Ok(ids) => ids,
        Err(e) => {
            tracing::warn!(error = %e, "chaos: cannot end the database sessions");
            return 0;
        }
    };
    if db.dialect() == Dialect::Postgres {
        return ids.len(); // the statement ended them
    }
    let mut ended = 0;
    for id in ids {
        // KILL takes no placeholder; the id is a number the server gave. Gone meanwhile is fine.
        ended += sqlx::query(&format!("KILL CONNECTION {id}"))
            .execute(&db.pool)
            .await
            .is_ok() as usize;
    }
    ended
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_is_the_seeds() {
        let a = schedule(7, Duration::from_secs(60));
        assert_eq!(a, schedule(7, Duration::from_secs(60)));
        assert_ne!(a, schedule(8, Duration::from_secs(60)));
        assert!(a.len() >= 20 && a.iter().all(|f| f.at < Duration::from_secs(60)));
        for kind in [
            FaultKind::FreezeRedis,
            FaultKind::KillSessions,
            FaultKind::RestartConsumer,
            FaultKind::KillService,
            FaultKind::KillLockHolder,
        ] {
            assert!(a.iter().any(|f| f.kind == kind), "{kind:?}");
        }
    }
}
