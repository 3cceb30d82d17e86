//! The Kafka side of a suggested profile, and of `doctor`'s partitioning row: a bounded sample of
//! a topic's newest messages, where they carry the orderNo, requestId and eventId (a header, the
//! key or a JSON pointer into the body), whether they parse as idemguard trace events, and which
//! partitioner agrees with the partitions their keys are in — or that they have no key, in which
//! case a trace must read every partition.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::message::Headers;
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::config::Config;
use crate::console::read::messages;
use crate::console::read::topics;
use crate::stream::partitioner::Partitioner;

/// Example values kept per place (checked against the database by the caller).
const EXAMPLES: usize = 10;

/// Bytes of one message's body kept for the analysis.
const BODY_BYTES: usize = 16 * 1024;

/// One sampled message.
#[derive(Debug, Clone)]
pub struct Sampled {
    pub partition: i32,
    pub key: Option<Vec<u8>>,
    pub headers: Vec<(String, String)>,
    /// The body as JSON (`None`: not JSON, or larger than kept).
    pub body: Option<serde_json::Value>,
    pub trace_event: bool,
}

/// The newest messages of a topic.
#[derive(Debug, Clone, Default)]
pub struct TopicSample {
    pub topic: String,
    pub partitions: i32,
    pub messages: Vec<Sampled>,
}

/// Up to `limit` of the newest messages of `topic` (spread over its partitions), within
/// `deadline`; blocking.
pub fn sample(
    config: &Config,
    topic: &str,
    limit: usize,
    deadline: Duration,
) -> anyhow::Result<TopicSample> {
    let servers = &config.kafka.bootstrap_servers;
    let consumer = topics::reader(config, "profile")?;
    let marks = topics::watermarks(&consumer, servers, topic)?;
    let per_partition = (limit / marks.len().max(1)).max(1) as i64;
    let mut tpl = TopicPartitionList::new();
    let mut left: BTreeMap<i32, i64> = BTreeMap::new();
    for (p, low, high) in &marks {
        if high > low {
            tpl.add_partition_offset(topic, *p, Offset::Offset((*high - per_partition).max(*low)))?;
            left.insert(*p, *high);
        }
    }
    let mut out = TopicSample {
        topic: topic.to_string(),
        partitions: marks.len() as i32,
        messages: Vec::new(),
    };
    if left.is_empty() {
        return Ok(out);
    }
    consumer.assign(&tpl)?;
    let started = Instant::now();
    let mut idle = 0;
    while !left.is_empty() && out.messages.len() < limit && started.elapsed() < deadline && idle < 3
    {
        match consumer.poll(Duration::from_millis(300)) {
            Some(Ok(m)) => {
                idle = 0;
                if left
                    .get(&m.partition())
                    .is_some_and(|h| m.offset() + 1 >= *h)
                {
                    left.remove(&m.partition());
                }
                out.messages.push(sampled(&m));
            }
            Some(Err(e)) => anyhow::bail!("kafka {servers}: reading {topic}: {e}"),
            None => idle += 1,
        }
    }
    Ok(out)
}

fn sampled(m: &rdkafka::message::BorrowedMessage<'_>) -> Sampled {
    let payload = m.payload().unwrap_or_default();
    let body = (payload.len() <= BODY_BYTES)
        .then(|| serde_json::from_slice::<serde_json::Value>(payload).ok())
        .flatten();
    let headers = m
        .headers()
        .map(|h| {
            h.iter()
                .map(|x| {
                    let v = x.value.map(|v| String::from_utf8_lossy(v).into_owned());
                    (x.key.to_string(), v.unwrap_or_default())
                })
                .collect()
        })
        .unwrap_or_default();
    Sampled {
        partition: m.partition(),
        key: m.key().filter(|k| !k.is_empty()).map(<[u8]>::to_vec),
        headers,
        trace_event: messages::trace_event_of(m).is_some(),
        body,
    }
}

/// How the keys of a sample sit in the partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Partitioning {
    /// Nothing to judge by.
    Empty,
    /// Every message keyed, and this partitioner puts every key where it is.
    Agrees {
        partitioner: Partitioner,
        messages: usize,
    },
    /// Some messages have no key: they went to any partition.
    Unkeyed { unkeyed: usize, messages: usize },
    /// Keyed, but no known partitioner puts the keys where they are (a custom one, or keys
    /// chosen per message).
    Neither { messages: usize },
}

impl Partitioning {
    /// What `kafka.partitioner` should say for this topic.
    pub fn partitioner(&self) -> Partitioner {
        match self {
            Partitioning::Agrees { partitioner, .. } => *partitioner,
            _ => Partitioner::None,
        }
    }

    /// One line: what was observed.
    pub fn describe(&self) -> String {
        match self {
            Partitioning::Empty => "no message to judge the partitioning by".into(),
            Partitioning::Agrees { partitioner, messages } => format!(
                "{messages} message(s) sampled, all keyed; {} puts every key in the partition it is in",
                partitioner.name()
            ),
            Partitioning::Unkeyed { unkeyed, messages } => format!(
                "{unkeyed} of {messages} message(s) sampled have no key: they are in any partition, so a trace reads every partition (partitioner \"none\")"
            ),
            Partitioning::Neither { messages } => format!(
                "{messages} message(s) sampled, keyed, but neither consistent_random (crc32) nor murmur2_random puts their keys where they are: a trace reads every partition (partitioner \"none\")"
            ),
        }
    }
}

/// The partitioning the sample shows.
pub fn partitioning(sample: &TopicSample) -> Partitioning {
    let n = sample.messages.len();
    if n == 0 || sample.partitions <= 0 {
        return Partitioning::Empty;
    }
    let unkeyed = sample.messages.iter().filter(|m| m.key.is_none()).count();
    if unkeyed > 0 {
        return Partitioning::Unkeyed {
            unkeyed,
            messages: n,
        };
    }
    // With one partition every partitioner agrees: the shortcut cannot be wrong there.
    let candidates = [Partitioner::Murmur2Random, Partitioner::ConsistentRandom];
    let agrees = |p: Partitioner| {
        sample.messages.iter().all(|m| {
            let key = m.key.as_deref().unwrap_or_default();
            p.partition_of(key, sample.partitions) == Some(m.partition)
        })
    };
    match candidates.into_iter().find(|p| agrees(*p)) {
        Some(partitioner) => Partitioning::Agrees {
            partitioner,
            messages: n,
        },
        None => Partitioning::Neither { messages: n },
    }
}

/// Where the messages carry one ID: the place (`header:NAME`, `key`, `json:/POINTER`) and in
/// how many of the messages sampled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdPlace {
    pub place: String,
    pub found_in: usize,
    /// Example values, for the caller to check against the database.
    pub examples: Vec<String>,
}

/// The names a team gives each ID, compared without case, `_` or `-`.
pub fn id_names(id: &str) -> &'static [&'static str] {
    match id {
        "order_no" => &["orderno", "ordernumber", "orderid", "bizorderno"],
        "request_id" => &["requestid", "reqid", "idempotencykey", "idemkey"],
        "event_id" => &["eventid", "paymenteventid", "messageid", "msgid"],
        _ => &[],
    }
}

fn normalized(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Every (JSON pointer, text) of a body, three levels deep at most.
fn leaves(v: &serde_json::Value, prefix: &str, depth: usize, out: &mut Vec<(String, String)>) {
    let serde_json::Value::Object(map) = v else {
        return;
    };
    for (k, v) in map {
        let pointer = format!("{prefix}/{}", k.replace('~', "~0").replace('/', "~1"));
        match v {
            serde_json::Value::String(s) => out.push((pointer, s.clone())),
            serde_json::Value::Number(n) => out.push((pointer, n.to_string())),
            serde_json::Value::Object(_) if depth < 3 => leaves(v, &pointer, depth + 1, out),
            _ => {}
        }
    }
}

/// The places, best first, where the sample carries `id` (`order_no`, `request_id`, `event_id`),
/// by name; the key is a place of the orderNo when it equals the value found by name.
pub fn id_places(sample: &TopicSample, id: &str) -> Vec<IdPlace> {
    let names = id_names(id);
    let named = |n: &str| names.contains(&normalized(n).as_str());
    let mut places: BTreeMap<String, IdPlace> = BTreeMap::new();
    let mut note = |place: String, value: &str| {
        let p = places.entry(place.clone()).or_insert(IdPlace {
            place,
            found_in: 0,
            examples: Vec::new(),
        });
        p.found_in += 1;
        if p.examples.len() < EXAMPLES && !value.is_empty() {
            p.examples.push(value.to_string());
        }
    };
    for m in &sample.messages {
        let mut values = Vec::new();
        for (k, v) in m.headers.iter().filter(|(k, v)| named(k) && !v.is_empty()) {
            note(format!("header:{k}"), v);
            values.push(v.clone());
        }
        let mut found = Vec::new();
        if let Some(b) = &m.body {
            leaves(b, "", 0, &mut found);
        }
        for (pointer, v) in found
            .iter()
            .filter(|(p, v)| !v.is_empty() && p.rsplit('/').next().is_some_and(&named))
        {
            note(format!("json:{pointer}"), v);
            values.push(v.clone());
        }
        let key = m.key.as_deref().map(String::from_utf8_lossy);
        if id == "order_no"
            && key
                .as_deref()
                .is_some_and(|k| values.iter().any(|v| v == k))
        {
            note("key".into(), key.as_deref().unwrap_or_default());
        }
    }
    let mut out: Vec<IdPlace> = places.into_values().collect();
    // Most messages first; a header before the body before the key at a tie (the cheapest read).
    let rank = |p: &str| {
        if p.starts_with("header:") {
            0
        } else if p.starts_with("json:") {
            1
        } else {
            2
        }
    };
    out.sort_by(|a, b| {
        b.found_in
            .cmp(&a.found_in)
            .then(rank(&a.place).cmp(&rank(&b.place)))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(partition: i32, key: Option<&str>, body: serde_json::Value) -> Sampled {
        Sampled {
            partition,
            key: key.map(|k| k.as_bytes().to_vec()),
            headers: Vec::new(),
            body: Some(body),
            trace_event: false,
        }
    }

    #[test]
    fn the_partitioner_that_puts_every_key_where_it_is_is_found() {
        let keys = ["ORD-1", "ORD-2", "ORD-3", "ORD-4", "ORD-5", "ORD-6"];
        let of = |p: Partitioner| TopicSample {
            topic: "t".into(),
            partitions: 3,
            messages: keys
                .iter()
                .map(|k| {
                    message(
                        p.partition_of(k.as_bytes(), 3).unwrap(),
                        Some(k),
                        serde_json::json!({}),
                    )
                })
                .collect(),
        };
        let murmur = of(Partitioner::Murmur2Random);
        assert_eq!(
            partitioning(&murmur).partitioner(),
            Partitioner::Murmur2Random
        );
        let crc = of(Partitioner::ConsistentRandom);
        assert_eq!(
            partitioning(&crc).partitioner(),
            Partitioner::ConsistentRandom
        );
        let mut mixed = murmur.clone();
        mixed.messages.push(message(2, None, serde_json::json!({})));
        assert!(matches!(
            partitioning(&mixed),
            Partitioning::Unkeyed {
                unkeyed: 1,
                messages: 7
            }
        ));
        assert_eq!(partitioning(&mixed).partitioner(), Partitioner::None);
    }

    #[test]
    fn ids_are_found_by_name_in_the_body_and_the_key() {
        let sample = TopicSample {
            topic: "t".into(),
            partitions: 3,
            messages: vec![
                message(
                    0,
                    Some("A1"),
                    serde_json::json!({"data": {"orderNo": "A1", "eventId": "e1"}}),
                ),
                message(
                    1,
                    None,
                    serde_json::json!({"data": {"orderNo": "A2", "eventId": "e2"}}),
                ),
            ],
        };
        let order = id_places(&sample, "order_no");
        assert_eq!(order[0].place, "json:/data/orderNo");
        assert_eq!(order[0].found_in, 2);
        assert_eq!(order[1].place, "key");
        assert_eq!(
            id_places(&sample, "event_id")[0].place,
            "json:/data/eventId"
        );
        assert!(id_places(&sample, "request_id").is_empty());
    }
}
