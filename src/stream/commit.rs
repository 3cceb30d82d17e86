//! The consumer's offset commits: a batch's offsets are committed only once its database commit
//! is known, and a commit the broker refuses ends `consume` before another batch is applied —
//! unless the member can tell that it was refused because no broker could be reached.
//!
//! With `consumer.async_offset_commit` the loop does not wait for the broker's answer at once:
//! the commit runs while the next batch is received and looked up, and its answer is awaited
//! before that batch writes anything (and at a stop). [`MemberLog`] counts the assignments
//! lost, so a batch applied across such a loss is refused alike whichever way the race between
//! librdkafka's session timer and the commit went.
//!
//! A commit no broker answered is not a refusal ([`no_broker_reached`]): with the broker down,
//! librdkafka holds a commit until the group's coordinator is back, at most `session.timeout.ms`
//! (one it sent before it knew the broker gone waits for `socket.timeout.ms`), then gives up.
//! Nothing was committed and the member claimed nothing; the batch's messages come
//! again to whoever owns their partitions once the broker is back, and change nothing.
//!
//! A refusal has two causes the member can tell apart ([`Refusal`]), from what it saw since the
//! broker last accepted one of its commits:
//! - it froze: the process did not run for half a group session ([`FreezeWatch`]) while the
//!   group went on without it. It may have missed anything; `consume` ends.
//! - the broker was away: no broker could be reached (connections refused, every broker down,
//!   requests timed out, a commit not answered) and the process ran all along. Its session ended
//!   because nobody heard its heartbeats, not because it stopped; once the broker is back, a batch
//!   it had fetched before is committed under its old membership and refused, or under its new
//!   one across the lost assignment. Nothing of that batch was lost: it was applied, and it comes
//!   again and changes nothing (`processed_event`). `consume` says so and goes on in the group,
//!   which librdkafka rejoins by itself.
//!
//! A refusal with neither sign (e.g. the loop stalled past `max.poll.interval.ms`) ends `consume`.
//! So does one after an outage the member did not see: librdkafka reports connection errors only
//! as the consumer is polled, which the loop does between batches and while an asynchronous commit
//! is in flight. An outage that begins and ends while a batch is applied (or, with
//! `async_offset_commit = false`, while its commit is awaited) leaves no sign; as after a freeze,
//! nothing is lost or doubled, and `consume` must be started again.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

/// The consumer's context: logs partition assignment changes, and counts what the commit rule
/// ([`PendingCommit::answer`]) weighs — assignments lost, signs that no broker could be reached,
/// the process's own freezes. Offsets are committed after every batch, so a revoke never has
/// processed-but-uncommitted work to lose.
///
/// No `commit_callback`: librdkafka hands the answer to a manual asynchronous commit
/// (`rd_kafka_commit(…, async)`) only to an `offset_commit_cb`, which rdkafka never installs —
/// its OFFSET_COMMIT event carries the auto-commit's answers only. A refusal was never seen there
/// (librdkafka logged it at warning level, below our `log_level` 3), which is why an evicted
/// member kept consuming with `async_offset_commit` on. The loop awaits every commit's answer
/// itself ([`PendingCommit`]).
///
/// It counts the assignments lost (`lost`): a member whose group session timed out — frozen,
/// starved, or cut off from the broker for `session.timeout.ms` — has its partitions revoked as
/// lost by librdkafka itself, which then rejoins. A batch applied across such a loss must not go
/// on as if nothing happened: its late commit is refused by the broker, or — when librdkafka
/// rejoined before sending it — accepted under the new membership; which of the two is a race
/// between librdkafka's session timer and the commit. [`PendingCommit::answer`] treats both alike.
pub(super) struct MemberLog {
    lost: AtomicU64,
    /// Signs that no broker could be reached ([`no_broker_reached`]): librdkafka's errors, as the
    /// consumer is polled, and commits no broker answered.
    unreachable: AtomicU64,
    /// The latest of those signs, as librdkafka worded it, for the log.
    last_unreachable: Mutex<String>,
    freezes: FreezeWatch,
    /// What had been seen when the broker last accepted a commit of a batch not applied across a
    /// lost assignment: the member stood well in its group then. A refusal is judged by what was
    /// seen since.
    standing: Mutex<Seen>,
}

impl ClientContext for MemberLog {
    /// As rdkafka's own: logged. Counted too when it says no broker could be reached.
    fn error(&self, error: KafkaError, reason: &str) {
        if no_broker_reached(&error) {
            self.unreachable_sign(format!("{error}: {reason}"));
        }
        tracing::error!("librdkafka: {error}: {reason}");
    }
}

impl ConsumerContext for MemberLog {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            if consumer.assignment_lost() {
                self.lost.fetch_add(1, Ordering::SeqCst);
                tracing::warn!(
                    partitions = tpl.count(),
                    "partitions revoked as lost (the group session timed out)"
                );
            } else {
                tracing::info!(
                    partitions = tpl.count(),
                    "partitions revoked (offsets of finished batches are already committed)"
                );
            }
        }
    }
    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let parts: Vec<String> = tpl
                    .elements()
                    .iter()
                    .map(|e| format!("{}/{}", e.topic(), e.partition()))
                    .collect();
                tracing::info!(partitions = %parts.join(","), "partitions assigned");
            }
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance error"),
            Rebalance::Revoke(_) => {}
        }
    }
}

impl MemberLog {
    /// A member whose group session lasts `session_timeout`: a freeze of half that is one that
    /// may have cost it its session.
    pub(super) fn new(session_timeout: Duration) -> MemberLog {
        MemberLog {
            lost: AtomicU64::new(0),
            unreachable: AtomicU64::new(0),
            last_unreachable: Mutex::new(String::new()),
            freezes: FreezeWatch::start(session_timeout / 2),
            standing: Mutex::new(Seen::default()),
        }
    }

    /// Everything counted so far.
    pub(super) fn seen(&self) -> Seen {
        Seen {
            lost: self.lost.load(Ordering::SeqCst),
            unreachable: self.unreachable.load(Ordering::SeqCst),
            freezes: self.freezes.count(),
        }
    }

    fn unreachable_sign(&self, what: String) {
        *self.last_unreachable.lock().unwrap() = what;
        self.unreachable.fetch_add(1, Ordering::SeqCst);
    }

    /// Why a commit was refused, from what was seen since the member last stood well.
    fn refusal(&self) -> Refusal {
        let standing = *self.standing.lock().unwrap();
        Refusal::judge(
            standing,
            self.seen(),
            self.freezes.longest_since(standing.freezes),
            || self.last_unreachable.lock().unwrap().clone(),
        )
    }
}

/// Counts of what a [`MemberLog`] has seen; two of them, taken at two moments, say what happened
/// in between.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Seen {
    lost: u64,
    unreachable: u64,
    freezes: u64,
}

/// Why the broker refused a commit (or accepted it across a lost assignment), as far as the
/// member can tell: see the module's comment. A freeze weighs first: a member that froze may have
/// missed anything, even when the broker was away too.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    Froze { longest: Duration },
    BrokerAway { signs: u64, last: String },
    Unexplained,
}

impl Refusal {
    /// `standing`: what was seen when the member last stood well; `now`: what is seen now;
    /// `longest`: the longest freeze since; `last`: the latest sign that no broker answered.
    fn judge(
        standing: Seen,
        now: Seen,
        longest: Duration,
        last: impl FnOnce() -> String,
    ) -> Refusal {
        if now.freezes > standing.freezes {
            Refusal::Froze { longest }
        } else if now.unreachable > standing.unreachable {
            Refusal::BrokerAway {
                signs: now.unreachable - standing.unreachable,
                last: last(),
            }
        } else {
            Refusal::Unexplained
        }
    }
}

/// Notices when the process did not run — stopped (SIGSTOP) or starved of CPU — for
/// at least `threshold`: a thread of its own wakes every [`FreezeWatch::TICK`], and a wake-up that
/// late is a freeze. librdkafka's heartbeats stop with the process, so a freeze is how a member
/// loses its session while the broker answers all along.
struct FreezeWatch {
    ticks: Arc<Mutex<Ticks>>,
    threshold: Duration,
}

struct Ticks {
    last: Instant,
    /// The freezes so far, each with how long it lasted.
    freezes: Vec<Duration>,
}

impl FreezeWatch {
    const TICK: Duration = Duration::from_millis(250);

    /// Starts the watching thread; it ends once the watch is dropped.
    fn start(threshold: Duration) -> FreezeWatch {
        let ticks = Arc::new(Mutex::new(Ticks {
            last: Instant::now(),
            freezes: Vec::new(),
        }));
        let watched: Weak<Mutex<Ticks>> = Arc::downgrade(&ticks);
        std::thread::Builder::new()
            .name("consume-freeze-watch".into())
            .spawn(move || loop {
                std::thread::sleep(FreezeWatch::TICK);
                let Some(ticks) = watched.upgrade() else {
                    return;
                };
                let mut t = ticks.lock().unwrap();
                let now = Instant::now();
                let gap = now - t.last;
                t.last = now;
                if gap >= threshold {
                    t.freezes.push(gap);
                    tracing::warn!(
                        did_not_run_for = ?gap,
                        "consume did not run (the process was stopped or starved of CPU): a freeze \
                         as long as session.timeout.ms costs the member its group session, and a \
                         commit refused after it ends consume"
                    );
                }
            })
            .expect("a thread for the consumer's freeze watch");
        FreezeWatch { ticks, threshold }
    }

    /// The freezes so far, one that has just ended counted before the thread has woken to see it
    /// (whoever asks is running, so the process is).
    fn count(&self) -> u64 {
        let t = self.ticks.lock().unwrap();
        let ending = t.last.elapsed() >= self.threshold;
        t.freezes.len() as u64 + u64::from(ending)
    }

    /// The longest freeze after the first `seen` (one just ended included).
    fn longest_since(&self, seen: u64) -> Duration {
        let t = self.ticks.lock().unwrap();
        let ending = Some(t.last.elapsed()).filter(|gap| *gap >= self.threshold);
        t.freezes
            .iter()
            .skip(seen as usize)
            .copied()
            .chain(ending)
            .max()
            .unwrap_or_default()
    }
}

/// An offset commit on its way to the broker (`consumer.async_offset_commit`), on a blocking
/// thread: the next batch is received and looked up meanwhile, and writes nothing before its
/// answer — so a member evicted from its group ends on the refusal exactly as with a synchronous
/// commit, one round trip to the broker later and nothing applied in between.
pub(super) struct PendingCommit {
    /// The broker's answer, and what the member had seen when it came.
    answer: tokio::task::JoinHandle<(KafkaResult<()>, Seen)>,
    consumer: Arc<StreamConsumer<MemberLog>>,
    /// [`MemberLog::seen`] when the batch was received.
    received: Seen,
}

impl PendingCommit {
    /// Waits for the broker's answer. Polled again after it was dropped unfinished, it goes on
    /// waiting (a `select!` may drop it); not polled again once it has answered. An accepted
    /// commit of a batch the member lost its assignment across is refused all the same
    /// ([`MemberLog`]): the outcome no longer depends on who won the race. A refusal ends
    /// `consume` unless the broker was away ([`Refusal`]).
    pub(super) async fn answer(&mut self) -> Result<(), CommitRefused> {
        let answer = self.answer_of_broker().await;
        if let (Err(_), Some(m)) = (&answer, crate::metrics::recording()) {
            m.consumer_commit_failures.inc();
        }
        answer
    }

    async fn answer_of_broker(&mut self) -> Result<(), CommitRefused> {
        let (answer, at_answer) = match (&mut self.answer).await {
            Ok(answered) => answered,
            Err(e) => return Err(CommitRefused(format!("the commit's thread failed: {e}"))),
        };
        match answer {
            Ok(()) if self.assignment_lost() => self.refused(Refused::AcrossLostAssignment),
            Ok(()) => {
                *self.consumer.context().standing.lock().unwrap() = at_answer;
                Ok(())
            }
            // Not a refusal, so not counted as one (that counter's alert says: restart `consume`).
            Err(e) if no_broker_reached(&e) => {
                self.consumer.context().unreachable_sign(e.to_string());
                tracing::warn!(error = %e, "offset commit not answered: no broker could be reached for the group's coordinator, so nothing was committed; the batch's messages will be delivered again once the broker is back and change nothing");
                Ok(())
            }
            Err(e) => self.refused(Refused::ByBroker(e)),
        }
    }

    /// A refusal, judged ([`Refusal`]): `consume` ends with it, or — the broker was away — says
    /// what it saw and goes on.
    fn refused(&self, refused: Refused) -> Result<(), CommitRefused> {
        match self.consumer.context().refusal() {
            Refusal::BrokerAway { signs, last } => {
                match refused {
                    Refused::ByBroker(e) => tracing::warn!(
                        error = %e, unreachable_signs = signs, last_sign = %last,
                        "offset commit refused after no broker could be reached (the process ran all along: its group session ended because no broker heard its heartbeats): nothing was committed; consume goes on and rejoins the group, and the batch's messages come again to whoever owns their partitions and change nothing (processed_event has them)"
                    ),
                    Refused::AcrossLostAssignment => tracing::warn!(
                        unreachable_signs = signs, last_sign = %last,
                        "offset commit accepted under a new group membership after the partitions were revoked as lost while no broker could be reached (the process ran all along): the batch was applied, so its offsets lose nothing; consume goes on, and a partition another member owns now comes again from its own commit and changes nothing"
                    ),
                }
                Ok(())
            }
            Refusal::Froze { longest } => Err(CommitRefused(format!(
                "{refused}, after the process did not run for {longest:.1?} (stopped or starved \
                 of CPU) while its group went on without it"
            ))),
            Refusal::Unexplained => Err(CommitRefused(refused.to_string())),
        }
    }

    /// Lost since the batch was received: still lost (librdkafka's own flag, until the member is
    /// assigned again), or lost and assigned again meanwhile (the count went up).
    fn assignment_lost(&self) -> bool {
        self.consumer.assignment_lost() || self.consumer.context().seen().lost != self.received.lost
    }

    /// [`PendingCommit::answer`], consuming the commit, as `consume`'s error.
    pub(super) async fn await_answer(mut self) -> anyhow::Result<()> {
        Ok(self.answer().await?)
    }

    /// Starts committing `offsets` (the next offset to read per partition) on a blocking thread.
    /// Called only once the batch's database commit is known; the answer is awaited right away
    /// (synchronous commit) or before the next batch writes anything (`async_offset_commit`).
    /// `received`: [`MemberLog::seen`] when the batch was received.
    pub(super) fn start(
        consumer: &Arc<StreamConsumer<MemberLog>>,
        offsets: TopicPartitionList,
        received: Seen,
    ) -> PendingCommit {
        let committing = consumer.clone();
        PendingCommit {
            // What was seen is taken as the answer comes, not when it is awaited: a sign of an
            // outage that began after the broker answered belongs after the member's standing.
            answer: tokio::task::spawn_blocking(move || {
                let answer = committing.commit(&offsets, CommitMode::Sync);
                (answer, committing.context().seen())
            }),
            consumer: consumer.clone(),
            received,
        }
    }
}

/// What the broker did with a commit that is not simply accepted.
enum Refused {
    ByBroker(KafkaError),
    AcrossLostAssignment,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::ByBroker(e) => write!(f, "{e}"),
            Refused::AcrossLostAssignment => f.write_str(
                "the member's partitions were revoked as lost while it applied the batch (no \
                 heartbeat answered within session.timeout.ms), so another member may own them now",
            ),
        }
    }
}

/// True when `e` says no broker could be reached, or the group's coordinator could not: a
/// connection refused or lost, every broker down, a name not resolved, a request timed out, no
/// coordinator (yet). One list for librdkafka's errors and for commit answers: a commit so
/// answered was answered by no broker — nothing was committed, and it is no refusal (the member
/// unknown to the group, an old generation: see [`CommitRefused`]).
fn no_broker_reached(e: &KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode as Code;
    matches!(
        e.rdkafka_error_code(),
        Some(
            Code::WaitingForCoordinator
                | Code::CoordinatorNotAvailable
                | Code::NotCoordinator
                | Code::CoordinatorLoadInProgress
                | Code::AllBrokersDown
                | Code::BrokerTransportFailure
                | Code::Resolve
                | Code::RequestTimedOut
                | Code::OperationTimedOut
                | Code::NetworkException
        )
    )
}

/// The broker refused an offset commit (the member was evicted from its group: unknown to it, or
/// of an old generation), or accepted one across a lost assignment, and the member froze or cannot
/// tell why: `consume` ends with it. Never retried as a database error is — the partitions may be
/// someone else's now.
#[derive(Debug)]
pub(super) struct CommitRefused(String);

impl std::fmt::Display for CommitRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "offset commit failed: {} (the batches since the last committed offset will be redelivered and change nothing)", self.0)
    }
}

impl std::error::Error for CommitRefused {}

/// For each partition in the batch, the offset after its last message.
pub(super) fn next_offsets(batch: &[OwnedMessage]) -> BTreeMap<(String, i32), i64> {
    let mut next: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for m in batch {
        let e = next
            .entry((m.topic().to_string(), m.partition()))
            .or_insert(0);
        *e = (*e).max(m.offset() + 1);
    }
    next
}

/// The offsets of [`next_offsets`] as librdkafka takes them.
pub(super) fn to_tpl(next: &BTreeMap<(String, i32), i64>) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for ((topic, partition), offset) in next {
        tpl.add_partition_offset(topic, *partition, Offset::Offset(*offset))
            .expect("valid offset");
    }
    tpl
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(unreachable: u64, freezes: u64) -> Seen {
        Seen {
            lost: 0,
            unreachable,
            freezes,
        }
    }

    #[test]
    fn a_refusal_after_the_broker_was_away_is_told_from_one_after_a_freeze() {
        let last = || "AllBrokersDown: 2/2 brokers are down".to_string();
        let froze = Duration::from_secs(12);
        // Signs that no broker answered, and the process ran: the broker was away.
        assert_eq!(
            Refusal::judge(seen(1, 0), seen(4, 0), Duration::ZERO, last),
            Refusal::BrokerAway {
                signs: 3,
                last: last()
            }
        );
        // A freeze since the member last stood well weighs first, signs of an outage or not.
        assert_eq!(
            Refusal::judge(seen(0, 0), seen(0, 1), froze, last),
            Refusal::Froze { longest: froze }
        );
        assert_eq!(
            Refusal::judge(seen(2, 1), seen(5, 2), froze, last),
            Refusal::Froze { longest: froze }
        );
        // What was seen before the member last stood well explains nothing.
        assert_eq!(
            Refusal::judge(seen(3, 1), seen(3, 1), froze, last),
            Refusal::Unexplained
        );
    }

    #[test]
    fn a_freeze_is_counted_as_soon_as_it_ends_and_once() {
        let threshold = Duration::from_secs(5);
        let ticks = Arc::new(Mutex::new(Ticks {
            last: Instant::now() - Duration::from_secs(7),
            freezes: vec![Duration::from_secs(6)],
        }));
        let watch = FreezeWatch {
            ticks: ticks.clone(),
            threshold,
        };
        // The thread has not woken since the process ran again: the freeze is counted already.
        assert_eq!(watch.count(), 2);
        assert!(watch.longest_since(1) >= Duration::from_secs(7));
        // Once it has, it is counted once, as the one recorded.
        {
            let mut t = ticks.lock().unwrap();
            let gap = t.last.elapsed();
            t.freezes.push(gap);
            t.last = Instant::now();
        }
        assert_eq!(watch.count(), 2);
        assert!(watch.longest_since(1) >= Duration::from_secs(7));
        assert_eq!(watch.longest_since(2), Duration::ZERO);
    }

    #[test]
    fn the_watch_sees_no_freeze_in_a_process_that_runs() {
        let watch = FreezeWatch::start(Duration::from_secs(5));
        std::thread::sleep(FreezeWatch::TICK * 3);
        assert_eq!(watch.count(), 0);
    }
}
