//! The consumer's offset commits: a batch's offsets are committed only once its database commit
//! is known, and a refused commit ends `consume` before another batch is applied.
//!
//! With `consumer.async_offset_commit` the loop does not wait for the broker's answer at once:
//! the commit runs while the next batch is received and looked up, and its answer is awaited
//! before that batch writes anything (and at a stop). [`RebalanceLog`] counts the assignments
//! lost, so a batch applied across such a loss is refused alike whichever way the race between
//! librdkafka's session timer and the commit went.
//!
//! A commit no broker answered is not a refusal ([`not_answered`]): with the broker down,
//! librdkafka holds a commit until the group's coordinator is back, at most `session.timeout.ms`,
//! then gives up. Nothing was committed and the member claimed nothing; the batch's messages come
//! again to whoever owns their partitions once the broker is back, and change nothing. `consume`
//! says so and goes on: it rejoins the group by itself, where ending on a broker restart left the
//! consumer down until someone started it again.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

/// Logs partition assignment changes; offsets are committed after every batch, so a revoke
/// never has processed-but-uncommitted work to lose.
///
/// No `commit_callback`: librdkafka hands the answer to a manual asynchronous commit
/// (`rd_kafka_commit(…, async)`) only to an `offset_commit_cb`, which rdkafka never installs —
/// its OFFSET_COMMIT event carries the auto-commit's answers only. A refusal was never seen there
/// (librdkafka logged it at warning level, below our `log_level` 3), which is why an evicted
/// member kept consuming with `async_offset_commit` on. The loop awaits every commit's answer
/// itself ([`PendingCommit`]).
///
/// It counts the assignments lost (`lost`): a member whose group session timed out — frozen or
/// starved for `session.timeout.ms` — has its partitions revoked as lost by librdkafka itself,
/// which then rejoins. A batch applied across such a loss must not go on as if nothing happened:
/// its late commit is refused by the broker, or — when librdkafka rejoined before sending it —
/// accepted under the new membership; which of the two is a race between librdkafka's session
/// timer and the commit. [`PendingCommit::answer`] treats both alike.
#[derive(Default)]
pub(super) struct RebalanceLog {
    lost: AtomicU64,
}

impl ClientContext for RebalanceLog {}

impl ConsumerContext for RebalanceLog {
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

impl RebalanceLog {
    /// The assignments lost so far.
    pub(super) fn lost(&self) -> u64 {
        self.lost.load(Ordering::SeqCst)
    }
}

/// An offset commit on its way to the broker (`consumer.async_offset_commit`), on a blocking
/// thread: the next batch is received and looked up meanwhile, and writes nothing before its
/// answer — so a member evicted from its group ends on the refusal exactly as with a synchronous
/// commit, one round trip to the broker later and nothing applied in between.
pub(super) struct PendingCommit {
    answer: tokio::task::JoinHandle<KafkaResult<()>>,
    consumer: Arc<StreamConsumer<RebalanceLog>>,
    /// [`RebalanceLog::lost`] when the batch was received.
    lost_before: u64,
}

impl PendingCommit {
    /// Waits for the broker's answer. Polled again after it was dropped unfinished, it goes on
    /// waiting (a `select!` may drop it); not polled again once it has answered. An accepted
    /// commit of a batch the member lost its assignment across is refused all the same
    /// ([`RebalanceLog`]): the outcome no longer depends on who won the race.
    pub(super) async fn answer(&mut self) -> Result<(), CommitRefused> {
        let answer = self.answer_of_broker().await;
        if let (Err(_), Some(m)) = (&answer, crate::metrics::recording()) {
            m.consumer_commit_failures.inc();
        }
        answer
    }

    async fn answer_of_broker(&mut self) -> Result<(), CommitRefused> {
        match (&mut self.answer).await {
            Ok(Ok(())) if self.assignment_lost() => Err(CommitRefused(
                "the member's partitions were revoked as lost while it applied the batch (no \
                 heartbeat within session.timeout.ms: the process was frozen or starved), so \
                 another member may own them now"
                    .into(),
            )),
            Ok(Ok(())) => Ok(()),
            // Not a refusal, so not counted as one (that counter's alert says: restart `consume`).
            Ok(Err(e)) if not_answered(&e) => {
                tracing::warn!(error = %e, "offset commit not answered: no broker could be reached for the group's coordinator, so nothing was committed; the batch's messages will be delivered again once the broker is back and change nothing");
                Ok(())
            }
            Ok(Err(e)) => Err(CommitRefused(e.to_string())),
            Err(e) => Err(CommitRefused(format!("the commit's thread failed: {e}"))),
        }
    }

    /// Lost since the batch was received: still lost (librdkafka's own flag, until the member is
    /// assigned again), or lost and assigned again meanwhile (the count went up).
    fn assignment_lost(&self) -> bool {
        self.consumer.assignment_lost() || self.consumer.context().lost() != self.lost_before
    }

    /// [`PendingCommit::answer`], consuming the commit, as `consume`'s error.
    pub(super) async fn await_answer(mut self) -> anyhow::Result<()> {
        Ok(self.answer().await?)
    }

    /// Starts committing `offsets` (the next offset to read per partition) on a blocking thread.
    /// Called only once the batch's database commit is known; the answer is awaited right away
    /// (synchronous commit) or before the next batch writes anything (`async_offset_commit`).
    /// `lost_before`: [`RebalanceLog::lost`] when the batch was received.
    pub(super) fn start(
        consumer: &Arc<StreamConsumer<RebalanceLog>>,
        offsets: TopicPartitionList,
        lost_before: u64,
    ) -> PendingCommit {
        let committing = consumer.clone();
        PendingCommit {
            answer: tokio::task::spawn_blocking(move || {
                committing.commit(&offsets, CommitMode::Sync)
            }),
            consumer: consumer.clone(),
            lost_before,
        }
    }
}

/// True when no broker answered the commit: the coordinator was not reachable (a broker down,
/// restarting or unreachable) or not ready to take it — nothing was committed. A refusal (the
/// member unknown to the group, an old generation) is an answer: see [`CommitRefused`].
fn not_answered(e: &KafkaError) -> bool {
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
                | Code::RequestTimedOut
                | Code::OperationTimedOut
                | Code::NetworkException
        )
    )
}

/// The broker refused an offset commit (the member was evicted from its group: unknown to it, or
/// of an old generation), or accepted one across a lost assignment: `consume` ends with it.
/// Never retried as a database error is — the partitions may be someone else's now.
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
