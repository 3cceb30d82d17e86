//! `idemguard storm chaos --duration D --seed S`: the flash sale, in rounds of fresh users, for
//! `D`, while a nemesis applies faults on a schedule drawn from `S` — so a failing run is
//! replayed with the same faults at the same moments (the traffic's own interleaving is the
//! machine's). The faults:
//!
//! - freeze the service's private Redis (SIGSTOP) for a while, then thaw it (SIGCONT): the fast
//!   path, the request locks and the heartbeats hang, then come back;
//! - terminate every other session of the run's database: the service's and the consumer's
//!   pools lose their connections mid-statement;
//! - restart the consumer (stop, then a new member of the same group) — between rounds, as the
//!   nemesis runs beside the traffic, which borrows the rig; the restarts due during a round
//!   make one.
//!
//! The invariants are the storm's, read from the database afterwards: one order per requestId
//! answered 201, stock exact, one payment flow per payNo, one PAID per order, one points row and
//! one notification per event.

use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::client::StormClient;
use super::redis_server::PrivateRedis;
use super::rig::Rig;
use super::scenarios::{self, Played};
use crate::config::Dialect;

/// Users per round (each: 2 clicks + a retry, then 3 payment callbacks), and the round's stock.
const ROUND_USERS: usize = 60;
const ROUND_STOCK: i64 = 40;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    FreezeRedis,
    KillSessions,
    RestartConsumer,
}

/// One fault of the schedule: `at` from the start of the storm, held for `hold` (a freeze).
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
        let kind = match rng.random_range(0..3) {
            0 => FaultKind::FreezeRedis,
            1 => FaultKind::KillSessions,
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
}

/// Plays the chaos storm: rounds of the flash sale until `duration` has passed, the nemesis
/// beside each round; restarts of the consumer due during a round happen right after it.
pub async fn chaos(
    rig: &mut Rig,
    c: &StormClient,
    redis: &PrivateRedis,
    duration: Duration,
    seed: u64,
    concurrency: usize,
) -> anyhow::Result<Played> {
    let plan = schedule(seed, duration);
    let started = Instant::now();
    let mut next = 0; // the first fault of `plan` not yet applied
    let mut applied = Applied::default();
    let mut all = Played {
        skus: Vec::new(),
        notes: Vec::new(),
        checks: Vec::new(),
        seconds: 0.0,
    };
    let mut round = 0;
    let mut restarts_due = 0;
    while started.elapsed() < duration {
        let users = round * ROUND_USERS..(round + 1) * ROUND_USERS;
        let stop = CancellationToken::new();
        let traffic = async {
            let played = scenarios::flash_sale_of(rig, c, users, ROUND_STOCK, concurrency).await;
            stop.cancel();
            played
        };
        let nemesis = nemesis(rig, redis, &plan[next..], started, &stop);
        let (played, (done, got)) = tokio::join!(traffic, nemesis);
        let played = played?;
        next += done;
        applied.freezes += got.freezes;
        applied.kills += got.kills;
        applied.sessions += got.sessions;
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
        all.seconds += played.seconds;
        round += 1;
    }
    all.notes.push(format!(
        "chaos seed {seed}, {:.0} s: {round} rounds of {ROUND_USERS} users (stock {ROUND_STOCK} each); faults: {} Redis freezes, {} session kills ({} sessions ended), {} consumer restarts (for {restarts_due} due); {} faults scheduled",
        duration.as_secs_f64(),
        applied.freezes,
        applied.kills,
        applied.sessions,
        applied.restarts,
        plan.len()
    ));
    Ok(all)
}

/// Applies `plan`'s faults at their times until `stop`; returns how many it went through
/// (restarts included, which it leaves to the caller) and what it did.
async fn nemesis(
    rig: &Rig,
    redis: &PrivateRedis,
    plan: &[Fault],
    started: Instant,
    stop: &CancellationToken,
) -> (usize, Applied) {
    let mut applied = Applied::default();
    for (i, fault) in plan.iter().enumerate() {
        let wait = fault.at.saturating_sub(started.elapsed());
        tokio::select! {
            _ = stop.cancelled() => return (i, applied),
            _ = tokio::time::sleep(wait) => {}
        }
        match fault.kind {
            FaultKind::FreezeRedis => {
                if let Some(pid) = redis.pid() {
                    signal(pid, "-STOP");
                    tokio::time::sleep(fault.hold).await; // thawed whatever happens meanwhile
                    signal(pid, "-CONT");
                    applied.freezes += 1;
                }
            }
            FaultKind::KillSessions => {
                applied.kills += 1;
                applied.sessions += kill_sessions(rig).await;
            }
            FaultKind::RestartConsumer => {}
        }
    }
    (plan.len(), applied)
}

fn signal(pid: u32, sig: &str) {
    let _ = std::process::Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .status();
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
        ] {
            assert!(a.iter().any(|f| f.kind == kind), "{kind:?}");
        }
    }
}
