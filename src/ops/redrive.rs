//! Redrive: publish a DLQ message again to its source topic and partition, once the cause that
//! made it poison is gone (its order arrived late, a field was backfilled, a bug was fixed).
//!
//! Why each rule exists (ops re-published DLQ messages by hand, with nothing to stop a second
//! copy and nothing on the record):
//! - **exactly once per DLQ message**: the `ops_audit` row is the record, written BEFORE the
//!   publish. A redrive is refused when a row of the same DLQ message says `done` or `attempt`
//!   (under way, or interrupted: a person decides); it is checked again after our own row is
//!   written, so two operators redriving the same message at once do not both publish. A
//!   publish that fails turns the row to `error`, which does not count: it may be retried;
//! - **never loops**: the message carries `redrive.*` headers naming its DLQ position and its
//!   audit row ([`crate::stream::redrive`]); still poison, the consumer sends it back to the
//!   DLQ once with the redrive in its reason, and a redrive of a returned message is refused;
//! - **what is published is what was refused**: the original key, value and headers (the
//!   `dlq.*` and `redrive.*` ones dropped), never a record cut to fit the DLQ (refused: its value
//!   is an excerpt);
//! - **only where the consumer reads**: a DLQ message is data anyone who can write to the DLQ
//!   may have written, so its `dlq.source.topic` header never decides where idemguard writes: a
//!   redrive publishes only to the payment topic (`kafka.payment_topic`), and a message naming
//!   another topic (the trace topic, another team's, one that does not exist) is refused;
//! - a redrive of an event already applied changes nothing: the consumer's dedup
//!   (`processed_event`) and the sinks' unique keys drop it.

use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::Message;
use serde::Serialize;

use super::{json, Action, ActionOutcome, ActionResult, Actions};
use crate::stream::redrive::{audit_row_is_of, read_entry, DlqEntry, RedriveMark, SourcePosition};

/// How long the broker may take to acknowledge a redriven message.
const PUBLISH_TIMEOUT_MS: &str = "15000";

/// The exact effect of a redrive, for the confirmation and `--dry-run`.
pub fn effect(dlq_topic: &str, partition: i32, offset: i64) -> Vec<String> {
    vec![
        format!("read the message at {dlq_topic} {partition}@{offset}; refused if ops_audit records a redrive of it (done or under way), if it came back from a redrive, or if it is a record cut to fit the DLQ"),
        "refused unless its source topic (dlq.source.topic) is the payment topic the consumer reads".to_string(),
        "write the ops_audit row (outcome attempt), then publish its original key, value and headers (dlq.* and redrive.* dropped) to the payment topic, at its source partition (dlq.source.partition)".to_string(),
        "with headers redrive.dlq.topic, redrive.dlq.partition, redrive.dlq.offset and redrive.audit_id (that row)".to_string(),
        "the consumer then applies it once, drops it as already applied, or — still poison — sends it back to the DLQ once, never again".to_string(),
    ]
}

/// The IDs a DLQ message's headers name (orderNo, requestId, eventId): the redrive's trace
/// event carries them, so the order's timeline shows the redrive in place, and the audit row's
/// `before_state` names them, so `report --id ORDER` lists it.
#[derive(Debug, Default, Clone, Serialize)]
pub struct RedrivenIds {
    pub order_no: Option<String>,
    pub request_id: Option<String>,
    pub event_id: Option<String>,
}

impl RedrivenIds {
    fn of(entry: &DlqEntry) -> RedrivenIds {
        use crate::contracts::headers;
        use crate::stream::redrive::header_text;
        let m = &entry.message;
        RedrivenIds {
            order_no: header_text(m, headers::ORDER_NO),
            request_id: header_text(m, headers::REQUEST_ID),
            event_id: header_text(m, headers::EVENT_ID),
        }
    }
}

/// What a redrive saw of the DLQ message (the audit row's `before_state`).
#[derive(Serialize)]
struct Seen<'a> {
    dlq_partition: i32,
    dlq_offset: i64,
    /// Which message held that position (see [`audit_row_is_of`]).
    dlq_timestamp_ms: Option<i64>,
    #[serde(flatten)]
    ids: &'a RedrivenIds,
    reason: &'a str,
    source: Option<&'a SourcePosition>,
    returned_from: Option<&'a RedriveMark>,
}

/// Where the redriven copy went (the audit row's `after_state`).
#[derive(Serialize)]
struct Published<'a> {
    topic: &'a str,
    partition: i32,
    offset: i64,
}

impl Actions {
    /// The redrive, and the IDs of the message it read (none when it read nothing).
    pub(super) async fn redrive(
        &self,
        action: &Action,
        partition: i32,
        offset: i64,
    ) -> (ActionResult, RedrivenIds) {
        if !self.allowed {
            let r = self.refuse(action, None, self.read_only_hint()).await;
            return (r, RedrivenIds::default());
        }
        let entry = match self.read_dlq_entry(partition, offset).await {
            Ok(Some(e)) => e,
            Ok(None) => {
                let why = format!(
                    "the DLQ {} holds no message at {partition}@{offset} (past its end, or removed by retention): nothing to redrive",
                    self.config.kafka.dlq_topic
                );
                return (self.refuse(action, None, why).await, RedrivenIds::default());
            }
            Err(e) => {
                let why = format!("not performed: the DLQ message could not be read: {e:#}");
                let r = self.fail_unperformed(action, None, why).await;
                return (r, RedrivenIds::default());
            }
        };
        let ids = RedrivenIds::of(&entry);
        (self.redrive_entry(action, &entry, &ids).await, ids)
    }

    /// The message read: the refusals, then our audit row, then the publish.
    async fn redrive_entry(
        &self,
        action: &Action,
        entry: &DlqEntry,
        ids: &RedrivenIds,
    ) -> ActionResult {
        let (partition, offset) = (entry.partition, entry.offset);
        let before = Some(json(&Seen {
            dlq_partition: partition,
            dlq_offset: offset,
            dlq_timestamp_ms: entry.timestamp_ms,
            ids,
            reason: &entry.reason,
            source: entry.source.as_ref(),
            returned_from: entry.returned_from.as_ref(),
        }));
        let source = match not_redrivable(entry, &self.config.kafka.payment_topic) {
            Err(why) => return self.refuse(action, before, why).await,
            Ok(source) => source,
        };
        match self.live_redrives(action.target(), entry, 0).await {
            Ok(ids) if !ids.is_empty() => {
                let why = format!("already redriven: ops_audit row {} records a redrive of this DLQ message (done or under way); a message is redriven once", ids[0]);
                return self.refuse(action, before, why).await;
            }
            Ok(_) => {}
            Err(e) => {
                let why =
                    format!("not performed: the audit of earlier redrives could not be read: {e}");
                return self.fail_unperformed(action, before, why).await;
            }
        }
        let plan = format!(
            "publish {} {partition}@{offset} to {} partition {}",
            self.config.kafka.dlq_topic, source.topic, source.partition
        );
        let id = match self.begin(action, &before, &plan).await {
            Ok(id) => id,
            Err(result) => return result,
        };
        self.publish_once(action, id, before, entry, source).await
    }

    /// Our row written: checked again against a redrive that wrote its row meanwhile, then
    /// published, and the outcome recorded.
    async fn publish_once(
        &self,
        action: &Action,
        id: i64,
        before: Option<String>,
        entry: &DlqEntry,
        source: &SourcePosition,
    ) -> ActionResult {
        let (outcome, after, detail) = match self.live_redrives(action.target(), entry, id).await {
            Ok(ids) if !ids.is_empty() => (ActionOutcome::Refused, None, format!("not published: another redrive of this DLQ message (ops_audit row {}) is under way or done", ids[0])),
            Err(e) => (ActionOutcome::Error, None, format!("not published: the audit of other redrives could not be read ({e}); this redrive may be retried")),
            Ok(_) => match self.publish(entry, source, id).await {
                Ok((p, o)) => (
                    ActionOutcome::Done,
                    Some(json(&Published { topic: &source.topic, partition: p, offset: o })),
                    format!("published to {} {p}@{o} with redrive.audit_id {id}: the consumer applies it once, drops it as already applied, or returns it to the DLQ once", source.topic),
                ),
                Err(PublishError::NotAuthorized(why)) => (ActionOutcome::Refused, None, format!("not published: {why}")),
                Err(PublishError::Failed(e)) => (ActionOutcome::Error, None, format!("the publish to {} failed: {e}; this row says error, and the redrive may be retried (should the broker have taken it after all, the consumer's dedup drops the second copy)", source.topic)),
            },
        };
        self.finish(action, id, outcome, before, after, detail)
            .await
    }

    async fn read_dlq_entry(
        &self,
        partition: i32,
        offset: i64,
    ) -> anyhow::Result<Option<DlqEntry>> {
        let config = self.config.clone();
        tokio::task::spawn_blocking(move || read_entry(&config, partition, offset))
            .await
            .map_err(|e| anyhow::anyhow!("reader thread failed: {e}"))?
    }

    /// The ids of the rows other than `mine` that record a redrive of `entry` (at `target`) done
    /// or under way.
    async fn live_redrives(
        &self,
        target: &str,
        entry: &DlqEntry,
        mine: i64,
    ) -> Result<Vec<i64>, sqlx::Error> {
        let read =
            sqlx::query_as::<_, (i64, Option<String>)>(self.db.sql("console_audit_live_redrives"))
                .bind(target.to_string())
                .bind(mine)
                .fetch_all(&self.db.pool);
        let rows = self.db.bounded(read).await?;
        Ok(rows
            .into_iter()
            .filter(|(_, before)| audit_row_is_of(before.as_deref(), entry.timestamp_ms))
            .map(|(id, _)| id)
            .collect())
    }

    /// Publishes the original message to `source` with the redrive's headers; where it went.
    async fn publish(
        &self,
        entry: &DlqEntry,
        source: &SourcePosition,
        audit_id: i64,
    ) -> Result<(i32, i64), PublishError> {
        let kafka = &self.config.kafka;
        let producer: FutureProducer = crate::kafka_client::client_config(kafka)
            .set("acks", "all")
            .set("message.timeout.ms", PUBLISH_TIMEOUT_MS)
            .set(
                "message.max.bytes",
                self.config.consumer.dlq_max_message_bytes.to_string(),
            )
            .create()
            .map_err(|e| {
                PublishError::Failed(format!(
                    "cannot create a Kafka producer for {}: {e}",
                    kafka.bootstrap_servers
                ))
            })?;
        let m = &entry.message;
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&source.topic)
            .partition(source.partition)
            .headers(entry.redrive_headers(&kafka.dlq_topic, audit_id));
        if let Some(p) = m.payload() {
            record = record.payload(p);
        }
        if let Some(k) = m.key() {
            record = record.key(k);
        }
        producer
            .send(record, std::time::Duration::from_secs(15))
            .await
            .map(|d| (d.partition, d.offset))
            .map_err(|(e, _)| match e.rdkafka_error_code() {
                Some(RDKafkaErrorCode::TopicAuthorizationFailed) => {
                    PublishError::NotAuthorized(missing_write_acl(kafka, &source.topic))
                }
                _ => PublishError::Failed(e.to_string()),
            })
    }
}

/// Why a redrive's publish did not happen.
enum PublishError {
    /// The broker's ACLs do not let this principal write the topic: nothing to retry until they
    /// do.
    NotAuthorized(String),
    Failed(String),
}

/// The ACL a redrive to `topic` needs and this configuration's principal lacks, with the
/// command that grants it.
fn missing_write_acl(kafka: &crate::config::KafkaConfig, topic: &str) -> String {
    use crate::config::KafkaSecurityProtocol as P;
    let principal = match kafka.security_protocol {
        P::SaslSsl | P::SaslPlaintext => format!("User:{}", kafka.sasl_username),
        P::Ssl => "the principal of kafka.ssl_cert_file's certificate (User:CN=…)".into(),
        P::Plaintext => "User:ANONYMOUS".into(),
    };
    format!(
        "the broker refused to let {principal} write to topic {topic} (TOPIC_AUTHORIZATION_FAILED): a redrive needs the ACL Write on Topic:{topic} for it — `kafka-acls.sh --bootstrap-server {} --add --allow-principal {principal} --operation Write --topic {topic}` — or run the redrive with the credentials of a principal that has it (the console's least-privilege principal reads only)",
        kafka.bootstrap_servers
    )
}

/// Where `entry` goes back to (a partition of `payment_topic`), or why it may not.
fn not_redrivable<'a>(
    entry: &'a DlqEntry,
    payment_topic: &str,
) -> Result<&'a SourcePosition, String> {
    if let Some(mark) = &entry.returned_from {
        return Err(format!(
            "this message came back to the DLQ still poison after its redrive from {}@{} (ops_audit row {}): it is not redriven again (fix its cause and publish a corrected event)",
            mark.dlq_partition, mark.dlq_offset, mark.audit_id
        ));
    }
    if entry.cut {
        return Err("this is a record of a message too large for the DLQ, its value cut to an excerpt: publishing it would not be the original".into());
    }
    let source = entry.source.as_ref().ok_or_else(|| {
        "the message has no dlq.source.* headers: where it came from is unknown".to_string()
    })?;
    if source.topic != payment_topic {
        return Err(format!(
            "its dlq.source.topic header names {}, not the payment topic {payment_topic} the consumer reads: a redrive publishes only there (a DLQ message's headers never decide where idemguard writes)",
            crate::untrusted::escape_cut(&source.topic, 120)
        ));
    }
    Ok(source)
}
