//! The Redis / Kafka / logs side: a team's system idemguard did not build. Locks are
//! written here the way the foreign clients write them — Redisson's lock script through EVAL,
//! redis-py's `Lock` (the stack's venv), a bare requestId UUID (the article's §3.2) — and read
//! back through the real binary (`locks --json`, `release-lock`). Every test uses its own key
//! prefix, and deletes what it wrote.

use crate::common;
use crate::common::article;

use std::time::Duration;

use futures::StreamExt;
use idemguard::config::{Config, Dialect};
use serde_json::Value as Json;

use article::{expiring_list, redis_py_lock, redisson_lock};

async fn redis_conn(config: &Config) -> redis::aio::MultiplexedConnection {
    redis::Client::open(config.redis.url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("the main Redis answers (scripts/stack up)")
}

/// Deletes every key under `prefix` when dropped.
struct Keys(String, String);
impl Drop for Keys {
    fn drop(&mut self) {
        let Ok(client) = redis::Client::open(self.0.as_str()) else {
            return;
        };
        let Ok(mut c) = client.get_connection() else {
            return;
        };
        let found: Vec<String> = redis::cmd("KEYS")
            .arg(format!("*{}*", self.1))
            .query(&mut c)
            .unwrap_or_default();
        for k in found {
            let _: Result<i64, _> = redis::cmd("DEL").arg(k).query(&mut c);
        }
    }
}

/// Runs the binary with the stack's config, `env` on top.
fn idemguard(env: &[(&str, String)], args: &[&str]) -> (Option<i32>, String) {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml");
    article::run_with_config(config, env, args)
}

fn locks_json(env: &[(&str, String)]) -> Vec<Json> {
    let (code, out) = idemguard(env, &["locks", "--json"]);
    assert_eq!(code, Some(0), "{out}");
    let json: Json = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    json["data"]["locks"].as_array().expect("locks").clone()
}

fn row<'a>(rows: &'a [Json], key: &str) -> &'a Json {
    rows.iter()
        .find(|r| r["key"] == key)
        .unwrap_or_else(|| panic!("{key} not listed: {rows:?}"))
}

// ---------------------------------------------------------------------------------------------
// lock formats
// ---------------------------------------------------------------------------------------------

/// Redisson, redis-py, a bare requestId and a key of another type, under the team's own key
/// patterns: `locks --json` lists each with its holder decoded (and the other key with its type
/// and TTL).
#[tokio::test]
async fn locks_json_lists_every_format_with_its_holder_decoded() {
    let config = common::local_config();
    let p = format!("fx{}", common::unique_suffix());
    let _keys = Keys(config.redis.url.clone(), p.clone());
    let mut c = redis_conn(&config).await;
    let client = uuid::Uuid::new_v4().to_string();
    let redisson = format!("{p}:order:lock:1");
    redisson_lock(&mut c, &redisson, &format!("{client}:57")).await;
    redisson_lock(&mut c, &redisson, &format!("{client}:57")).await; // re-entered
    let py = format!("{p}:order:lock:2");
    let token = redis_py_lock(&config.redis.url, &py);
    let bare = format!("{p}Lock");
    let request_id = uuid::Uuid::new_v4().to_string();
    let _: () = redis::cmd("SET")
        .arg(&bare)
        .arg(&request_id)
        .arg("PX")
        .arg(30_000)
        .query_async(&mut c)
        .await
        .unwrap();
    let list = format!("{p}:order:lock:3");
    expiring_list(&mut c, &list).await;

    let patterns = format!("lock:*,{p}:order:lock:*,{p}Lock");
    let rows = locks_json(&[("IDEMGUARD_FOREIGN_LOCKS__PATTERNS", patterns)]);

    let r = row(&rows, &redisson);
    assert_eq!(r["type"], "hash", "{r}");
    assert_eq!(r["format"]["kind"], "redisson", "{r}");
    assert_eq!(r["format"]["client_id"], client.as_str(), "{r}");
    assert_eq!(r["format"]["thread_id"], "57", "{r}");
    assert_eq!(r["format"]["count"], 2, "{r}");
    let pttl = r["pttl_ms"].as_i64().unwrap();
    assert!(pttl > 20_000 && pttl <= 30_000, "{r}");

    let r = row(&rows, &py);
    assert_eq!(
        (r["format"]["kind"].as_str(), r["format"]["shape"].as_str()),
        (Some("token"), Some("hex")),
        "{r}"
    );
    assert_eq!(r["format"]["token"], token.as_str(), "{r}");
    assert_eq!(r["value"], token.as_str(), "{r}");

    let r = row(&rows, &bare);
    assert_eq!(r["format"]["kind"], "token", "{r}");
    assert_eq!(r["format"]["shape"], "uuid", "{r}");
    assert_eq!(r["value"], request_id.as_str(), "{r}");
    assert_eq!(r["flags"], serde_json::json!([]), "{r}");

    let r = row(&rows, &list);
    assert_eq!(
        (r["type"].as_str(), r["format"]["kind"].as_str()),
        (Some("list"), Some("unknown")),
        "{r}"
    );
    assert!(r["pttl_ms"].as_i64().unwrap() > 0, "{r}");

    // The decoders are the configured ones, in order: without `redisson` the hash is unknown.
    let rows = locks_json(&[
        (
            "IDEMGUARD_FOREIGN_LOCKS__PATTERNS",
            format!("{p}:order:lock:*"),
        ),
        (
            "IDEMGUARD_FOREIGN_LOCKS__DECODERS",
            "idemguard,token".into(),
        ),
    ]);
    assert_eq!(row(&rows, &redisson)["format"]["kind"], "unknown");
    assert!(
        rows.iter().all(|r| r["key"] != bare.as_str()),
        "{bare} matches no configured pattern"
    );
}

// ---------------------------------------------------------------------------------------------
// safe release of a Redisson lock
// ---------------------------------------------------------------------------------------------

async fn release_env(p: &str) -> (Vec<(&'static str, String)>, Config) {
    let (config, _db) = common::migrated_database(Dialect::Postgres).await;
    let env = vec![
        ("IDEMGUARD_DATABASE__URL", config.database.url.clone()),
        (
            "IDEMGUARD_FOREIGN_LOCKS__PATTERNS",
            format!("lock:*,{p}:order:lock:*"),
        ),
    ];
    (env, config)
}

/// A release test's set-up: the stack's config, keys under a prefix of their own (deleted when
/// the test ends), the binary's environment with a database for the audit, a Redis connection.
struct ReleaseCase {
    config: Config,
    p: String,
    env: Vec<(&'static str, String)>,
    c: redis::aio::MultiplexedConnection,
    _keys: Keys,
}

async fn release_case(tag: &str) -> ReleaseCase {
    let config = common::local_config();
    let p = format!("{tag}{}", common::unique_suffix());
    let _keys = Keys(config.redis.url.clone(), p.clone());
    let (env, _) = release_env(&p).await;
    let c = redis_conn(&config).await;
    ReleaseCase {
        config,
        p,
        env,
        c,
        _keys,
    }
}

fn release(env: &[(&str, String)], key: &str, seen: &str) -> Json {
    let (_, out) = idemguard(
        env,
        &[
            "release-lock",
            key,
            "--expect-value",
            seen,
            "--force",
            "--reason",
            "foreign streams test",
            "--allow-actions",
            "--json",
        ],
    );
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// A Redisson lock is deleted by `release-lock` with the field and count seen, and a client
/// waiting on Redisson's channel receives the unlock message.
#[tokio::test]
async fn a_redisson_lock_is_released_safely_and_its_waiter_wakes() {
    let ReleaseCase {
        config,
        p,
        env,
        mut c,
        _keys,
    } = release_case("fr").await;
    let key = format!("{p}:order:lock:9");
    let field = format!("{}:1", uuid::Uuid::new_v4());
    redisson_lock(&mut c, &key, &field).await;

    let rows = locks_json(&env);
    let seen = row(&rows, &key)["format"]["seen"]
        .as_str()
        .expect("a Redisson lock says what a release compares")
        .to_string();
    assert_eq!(seen, format!("{field}=1"));

    // A waiter, as Redisson's lock() subscribes while it waits.
    let client = redis::Client::open(config.redis.url.as_str()).unwrap();
    let mut waiter = client.get_async_pubsub().await.unwrap();
    waiter
        .subscribe(format!("redisson_lock__channel:{{{key}}}"))
        .await
        .unwrap();

    let result = release(&env, &key, &seen);
    assert_eq!(result["outcome"], "done", "{result}");
    assert!(result["audit_id"].is_i64(), "{result}");
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&key)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(exists, 0, "the lock is gone");
    let mut messages = waiter.on_message();
    let msg = tokio::time::timeout(Duration::from_secs(5), messages.next())
        .await
        .expect("the waiter is woken within 5 s")
        .expect("a message");
    assert_eq!(
        msg.get_payload::<String>().unwrap(),
        "0",
        "Redisson's UNLOCK_MESSAGE"
    );
}

/// The holder re-entered (count 1 → 2) after the operator saw it: the release is refused and the
/// lock kept, and no unlock message wakes anybody.
#[tokio::test]
async fn a_changed_redisson_count_is_refused() {
    let ReleaseCase {
        config,
        p,
        env,
        mut c,
        _keys,
    } = release_case("fc").await;
    let key = format!("{p}:order:lock:5");
    let field = format!("{}:7", uuid::Uuid::new_v4());
    redisson_lock(&mut c, &key, &field).await;
    let seen = format!("{field}=1");
    redisson_lock(&mut c, &key, &field).await; // re-entered since it was seen

    let client = redis::Client::open(config.redis.url.as_str()).unwrap();
    let mut waiter = client.get_async_pubsub().await.unwrap();
    waiter
        .subscribe(format!("redisson_lock__channel:{{{key}}}"))
        .await
        .unwrap();
    let result = release(&env, &key, &seen);
    assert_ne!(result["outcome"], "done", "{result}");
    let count: Option<i64> = redis::cmd("HGET")
        .arg(&key)
        .arg(&field)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(count, Some(2), "the lock is kept as its holder left it");
    // The script itself compares (a re-entry between the read and the release): asked directly
    // with the count seen, it keeps the lock too.
    let who = idemguard::contracts::Instance {
        id: format!("test-{p}"),
        host: "testhost".into(),
        pid: 1,
    };
    let locks = idemguard::lock::Locks::from_config(
        &config,
        &who,
        idemguard::trace::Tracer::log_only(&who),
    )
    .unwrap();
    let report = locks.release_redisson(&key, &field, 1).await.unwrap();
    assert!(!report.released(), "{report:?}");
    let mut messages = waiter.on_message();
    let woke = tokio::time::timeout(Duration::from_millis(500), messages.next()).await;
    assert!(woke.is_err(), "no unlock message for a lock that was kept");
}

/// Another thread of another client took the same Redisson lock's hash since it was seen (a
/// second field): the key is still there, so the release says the lock changed — naming what it
/// holds now — never that it is gone, and keeps it.
#[tokio::test]
async fn a_redisson_lock_that_gained_a_field_is_said_changed_not_gone() {
    let ReleaseCase {
        p,
        env,
        mut c,
        _keys,
        ..
    } = release_case("fg").await;
    let key = format!("{p}:order:lock:6");
    let field = format!("{}:3", uuid::Uuid::new_v4());
    redisson_lock(&mut c, &key, &field).await;
    let seen = format!("{field}=1");
    let other = format!("{}:4", uuid::Uuid::new_v4());
    let _: i64 = redis::cmd("HSET")
        .arg(&key)
        .arg(&other)
        .arg(1)
        .query_async(&mut c)
        .await
        .unwrap();
    let result = release(&env, &key, &seen);
    assert_eq!(result["outcome"], "changed", "{result}");
    let detail = result["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("changed since it was displayed")
            && detail.contains(&format!("{other}=1"))
            && !detail.contains("gone"),
        "{result}"
    );
    let fields: i64 = redis::cmd("HLEN")
        .arg(&key)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(fields, 2, "the lock is kept as it is");
}

/// The article's §3.2 lock (`setIfAbsent(lockKey, requestId, 30s)`): `release-lock` deletes it
/// by compare-and-delete of the token seen, says what it cannot guarantee on a foreign lock, and
/// refuses — keeping the lock — when the token changed since it was seen.
#[tokio::test]
async fn a_plain_token_lock_is_released_by_its_token_and_a_changed_one_is_kept() {
    let ReleaseCase {
        p,
        env,
        mut c,
        _keys,
        ..
    } = release_case("ft").await;
    let key = format!("{p}:order:lock:7");
    let token = uuid::Uuid::new_v4().to_string();
    let set = |value: &str| {
        redis::cmd("SET")
            .arg(&key)
            .arg(value)
            .arg("PX")
            .arg(30_000)
            .clone()
    };
    let _: () = set(&token).query_async(&mut c).await.unwrap();
    let r = row(&locks_json(&env), &key).clone();
    assert_eq!(r["format"]["kind"], "token", "{r}");
    assert_eq!(r["value"], token.as_str(), "{r}");

    // Another client took it again since the operator saw it: refused, kept as it is.
    let newer = uuid::Uuid::new_v4().to_string();
    let _: () = set(&newer).query_async(&mut c).await.unwrap();
    let refused = release(&env, &key, &token);
    assert_eq!(refused["outcome"], "changed", "{refused}");
    let stored: Option<String> = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(
        stored.as_deref(),
        Some(newer.as_str()),
        "the newer holder keeps it"
    );

    // The token seen is still the one stored: deleted, audited, and the caveats said.
    let result = release(&env, &key, &newer);
    assert_eq!(result["outcome"], "done", "{result}");
    assert!(result["audit_id"].is_i64(), "{result}");
    let detail = result["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("NOT guaranteed: there is no fence token to bump")
            && detail.contains("NOT guaranteed: there is no owner heartbeat"),
        "{result}"
    );
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&key)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(exists, 0, "the lock is gone");
}

// ---------------------------------------------------------------------------------------------
// IDs in Kafka message bodies; no trace topic
// ---------------------------------------------------------------------------------------------

/// Produces `body` to `topic` with no key and no headers: the IDs live in the JSON body only.
async fn produce_bare(config: &Config, topic: &str, body: &Json) {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .create()
        .unwrap();
    let payload = body.to_string();
    producer
        .send(
            FutureRecord::<(), _>::to(topic).payload(&payload),
            Duration::from_secs(10),
        )
        .await
        .unwrap_or_else(|(e, _)| panic!("produce to {topic}: {e}"));
}

/// A team's payment event names its order only in the JSON body (`{"orderNo": …}`), and the
/// team has no trace topic: with `kafka_ids.payment` pointing into the body, `trace ORDER`
/// finds the event, and says that there is no trace topic.
#[tokio::test]
async fn payment_events_with_ids_only_in_the_body_are_found_by_a_trace() {
    let (config, _db) = common::migrated_database(Dialect::Postgres).await;
    let topics = common::fresh_topics(&config, &["payment"]).await;
    let order_no = format!("FX{}", common::unique_suffix());
    let request_id = format!("APP:ORDER:20261201:{}", common::unique_suffix());
    let event_id = uuid::Uuid::new_v4().to_string();
    let body = serde_json::json!({
        "eventType": "PAYMENT_SUCCEEDED",
        "data": {"requestId": request_id, "eventId": event_id},
        "orderNo": order_no,
        "amount": 990,
    });
    produce_bare(&config, &topics[0], &body).await;
    let env = vec![
        ("IDEMGUARD_DATABASE__URL", config.database.url.clone()),
        ("IDEMGUARD_KAFKA__PAYMENT_TOPIC", topics[0].clone()),
        ("IDEMGUARD_KAFKA__TRACE_TOPIC", String::new()),
        ("IDEMGUARD_KAFKA__PARTITIONER", "none".into()),
        (
            "IDEMGUARD_KAFKA_IDS__PAYMENT__ORDER_NO",
            "json:/orderNo".into(),
        ),
        (
            "IDEMGUARD_KAFKA_IDS__PAYMENT__REQUEST_ID",
            "json:/data/requestId".into(),
        ),
        (
            "IDEMGUARD_KAFKA_IDS__PAYMENT__EVENT_ID",
            "json:/data/eventId".into(),
        ),
    ];
    let (_, out) = idemguard(&env, &["trace", &order_no, "--json"]);
    let j: Json = serde_json::Deserializer::from_str(&out)
        .into_iter()
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("no JSON document: {out}"));
    let d = &j["data"];
    assert_eq!(d["events"][0]["event_id"], event_id.as_str(), "{out}");
    assert_eq!(d["events"][0]["kafka_copies"], 1, "{out}");
    assert_eq!(d["request_id"], request_id.as_str(), "{out}");
    assert!(
        out.contains("no trace topic"),
        "the trace says it has no trace topic: {out}"
    );
    assert_eq!(
        j["ok"], true,
        "an absent trace topic is not a failed backend: {out}"
    );
}

// ---------------------------------------------------------------------------------------------
// logs as a trace source
// ---------------------------------------------------------------------------------------------

fn log_line(ms: i64, service: &str, level: &str, order_no: &str, message: &str) -> String {
    serde_json::json!({
        "timestamp": ms, "service": service, "level": level, "orderNo": order_no,
        "requestId": format!("APP:ORDER:20261201:{order_no}"), "message": message,
    })
    .to_string()
}

/// Three "services" log JSON lines naming an order — one file rotated and gzip-compressed — and
/// `trace ORDER` shows each line with its service, level and message, in time order; lines of
/// another order, or outside the window read, are not shown.
#[tokio::test]
async fn a_json_log_file_of_three_services_appears_in_the_timeline() {
    use std::io::Write;
    let (config, _db) = common::migrated_database(Dialect::Postgres).await;
    let dir = tempfile::tempdir().unwrap();
    let order_no = format!("LG{}", common::unique_suffix());
    let now = idemguard::contracts::now_ms();
    let write = |name: &str, lines: &[String]| {
        std::fs::write(dir.path().join(name), lines.join("\n") + "\n").unwrap()
    };
    write(
        "order-api.log",
        &[
            log_line(now - 3_000, "order-api", "INFO", &order_no, "order created"),
            log_line(
                now - 2_500,
                "order-api",
                "INFO",
                "OTHER-ORDER",
                "not this one",
            ),
            log_line(
                now - 3 * 86_400_000,
                "order-api",
                "WARN",
                &order_no,
                "too old",
            ),
        ],
    );
    let gz = std::fs::File::create(dir.path().join("payment.log.1.gz")).unwrap();
    let mut enc = flate2::write::GzEncoder::new(gz, flate2::Compression::default());
    let rotated = log_line(
        now - 2_000,
        "payment-svc",
        "WARN",
        &order_no,
        "callback retried",
    );
    writeln!(enc, "{rotated}\nnot json at all").unwrap();
    enc.finish().unwrap();
    write(
        "points.log",
        &[log_line(
            now - 1_000,
            "points-svc",
            "INFO",
            &order_no,
            "points granted",
        )],
    );
    let env = vec![
        ("IDEMGUARD_DATABASE__URL", config.database.url.clone()),
        ("IDEMGUARD_KAFKA__TRACE_TOPIC", String::new()),
        (
            "IDEMGUARD_LOGS__FILES",
            format!("{}/*.log*", dir.path().display()),
        ),
    ];
    let (_, out) = idemguard(&env, &["trace", &order_no, "--json"]);
    let j: Json = serde_json::Deserializer::from_str(&out)
        .into_iter()
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("no JSON document: {out}"));
    let logs: Vec<(String, String, String)> = j["data"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["layer"] == "log")
        .map(|e| {
            let f = &e["fields"];
            let s = |k: &str| f[k].as_str().unwrap_or("").to_string();
            (s("service"), s("level"), s("message"))
        })
        .collect();
    let want = |s: &str, l: &str, m: &str| (s.to_string(), l.to_string(), m.to_string());
    assert_eq!(
        logs,
        vec![
            want("order-api", "INFO", "order created"),
            want("payment-svc", "WARN", "callback retried"),
            want("points-svc", "INFO", "points granted"),
        ],
        "{out}"
    );
}

// ---------------------------------------------------------------------------------------------
// Redis half: least privilege
// ---------------------------------------------------------------------------------------------

/// An ACL user on the main Redis, deleted when dropped.
struct AclUser {
    url: String,
    name: String,
}

impl AclUser {
    async fn create(config: &Config, name: &str, rules: &[&str]) -> AclUser {
        let mut c = redis_conn(config).await;
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER")
            .arg(name)
            .arg("reset")
            .arg("on")
            .arg(">pw-foreign");
        cmd.arg("~*").arg("resetchannels");
        for r in rules {
            cmd.arg(*r);
        }
        let _: () = cmd.query_async(&mut c).await.expect("ACL SETUSER");
        AclUser {
            url: config.redis.url.clone(),
            name: name.to_string(),
        }
    }

    fn url(&self) -> String {
        self.url
            .replacen("redis://", &format!("redis://{}:pw-foreign@", self.name), 1)
    }
}

impl Drop for AclUser {
    fn drop(&mut self) {
        if let Ok(mut c) = redis::Client::open(self.url.as_str()).and_then(|c| c.get_connection()) {
            let _: Result<i64, _> = redis::cmd("ACL")
                .arg("DELUSER")
                .arg(&self.name)
                .query(&mut c);
        }
    }
}

/// What the console's read-only Redis user needs: the reads of the issue, and what a connection
/// and a MULTI of reads need.
const READ_ONLY: &[&str] = &[
    "-@all",
    "+scan",
    "+type",
    "+get",
    "+hgetall",
    "+pttl",
    "+exists",
    "+multi",
    "+exec",
    "+ping",
    "+hello",
    "+client|setname",
    "+select",
    "+command|info",
];

/// The console lists and decodes every format as a user that can only read; without HGETALL
/// the Redisson lock is still listed, and says which command it lacks; a release as the
/// read-only user deletes nothing, and with the actions' own credentials it goes through.
#[tokio::test]
async fn a_read_only_acl_user_lists_locks_and_a_missing_permission_is_named() {
    let config = common::local_config();
    let p = format!("fa{}", common::unique_suffix());
    let _keys = Keys(config.redis.url.clone(), p.clone());
    let mut c = redis_conn(&config).await;
    let key = format!("{p}:order:lock:1");
    let field = format!("{}:3", uuid::Uuid::new_v4());
    redisson_lock(&mut c, &key, &field).await;
    let token_key = format!("{p}:order:lock:2");
    let token = uuid::Uuid::new_v4().to_string();
    let _: () = redis::cmd("SET")
        .arg(&token_key)
        .arg(&token)
        .arg("PX")
        .arg(30_000)
        .query_async(&mut c)
        .await
        .unwrap();
    let patterns = format!("{p}:order:lock:*");

    let ro = AclUser::create(&config, &format!("ig_ro_{p}"), READ_ONLY).await;
    let env = vec![
        ("IDEMGUARD_REDIS__URL", ro.url()),
        ("IDEMGUARD_REDIS__REDLOCK_NODES", String::new()),
        ("IDEMGUARD_FOREIGN_LOCKS__PATTERNS", patterns.clone()),
    ];
    let rows = locks_json(&env);
    assert_eq!(row(&rows, &key)["format"]["kind"], "redisson");
    assert_eq!(row(&rows, &token_key)["format"]["token"], token.as_str());

    let without: Vec<&str> = READ_ONLY
        .iter()
        .copied()
        .filter(|r| *r != "+hgetall")
        .collect();
    let no_hash = AclUser::create(&config, &format!("ig_nohash_{p}"), &without).await;
    let env = vec![
        ("IDEMGUARD_REDIS__URL", no_hash.url()),
        ("IDEMGUARD_REDIS__REDLOCK_NODES", String::new()),
        ("IDEMGUARD_FOREIGN_LOCKS__PATTERNS", patterns),
    ];
    let rows = locks_json(&env);
    let r = row(&rows, &key);
    assert_eq!(r["type"], "hash", "{r}");
    assert_eq!(r["denied"], serde_json::json!(["HGETALL"]), "{r}");
    assert_eq!(
        row(&rows, &token_key)["format"]["token"],
        token.as_str(),
        "nothing else breaks"
    );

    // Actions run with their own credentials: the read-only user cannot release, a user
    // allowed the release scripts (and Redisson's channel) can.
    let (db_env, _) = release_env(&p).await;
    let mut env = vec![
        ("IDEMGUARD_REDIS__URL", ro.url()),
        ("IDEMGUARD_REDIS__REDLOCK_NODES", String::new()),
    ];
    env.extend(db_env);
    let seen = format!("{field}=1");
    let refused = release(&env, &key, &seen);
    assert_ne!(refused["outcome"], "done", "{refused}");
    let mut rules: Vec<&str> = READ_ONLY.to_vec();
    rules.extend(["+eval", "+evalsha", "+script|load", "+del", "+publish"]);
    rules.push("&redisson_lock__channel:*");
    let actor = AclUser::create(&config, &format!("ig_act_{p}"), &rules).await;
    env.push(("IDEMGUARD_FOREIGN_LOCKS__ACTIONS_REDIS_URL", actor.url()));
    let done = release(&env, &key, &seen);
    assert_eq!(done["outcome"], "done", "{done}");
}
