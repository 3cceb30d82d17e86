//! The consumer (line of defense 3) under its faults, against the real broker and services, on
//! both dialects:
//! - a database that kills the consumer's sessions mid-batch or refuses connections is retried
//!   with backoff — nothing to the DLQ, nothing lost or doubled, `db_retries` counted;
//! - a member killed with a batch applied but its offsets not committed loses its partitions to
//!   the other member, which applies nothing twice;
//! - two members paying overlapping orders in reverse order never deadlock;
//! - the order sink's refusals: a second payment (`paid_by_other`), a CANCELLED order
//!   (`rejected`), an eventId that already paid another order (DLQ) — no points, no notification;
//! - each parse rejection (non-UUID eventId, headers that disagree with the body, a negative
//!   amount, an empty payload) goes to the DLQ with its reason and applies nothing;
//! - the DLQ is published once per source message, across a crash before the offset commit;
//! - one poison message too large for the DLQ stops nothing: a 3 MB message and a gzip message
//!   that inflates to 60 MB are recorded in the DLQ (their first 64 KiB, their size), with
//!   `consume`'s memory bounded; one the DLQ refuses even as a record is kept in
//!   `processed_event` as `dlq_failed`; the payment after them on another partition is applied;
//! - the same rule when the DLQ topic's own `max.message.bytes` (below the DLQ producer's limit)
//!   refuses: the broker's refusal leads to a record cut to 64 KiB, or to `dlq_failed`;
//! - a Kafka receive error (the topic not there yet) is counted and survived;
//! - the broker SIGKILLed mid-batch and started again on its data (a broker of the test's own,
//!   never the shared one): nothing lost or applied twice; the batch's unanswered offset commit
//!   does not end `consume`, which says what it saw and rejoins by itself; `rates --json` says
//!   the broker did not answer, then gives the lag;
//! - a failed offset commit (the member evicted while frozen between its database commit and its
//!   offset commit) ends `consume` with the error, synchronous or asynchronous
//!   (`consumer.async_offset_commit`); the member that took over applies nothing twice.
//!
//! Every test has its own database, topics, group and keys, and removes them, pass or fail.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::consumer::*;
use common::own_broker::OwnBroker;
use common::*;
use idemguard::config::Dialect;
use idemguard::contracts::{headers, new_event_id, Instance, OrderNo, PaymentSucceeded};
use idemguard::db::orders::Orders;
use idemguard::db::Database;
use idemguard::stream::lag::consumer_lag;
use idemguard::stream::sinks::{self, Delivery, PaidDecision};
use idemguard::stream::ConsumeStats;
use idemguard::trace::Tracer;
use rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use tokio::io::AsyncBufReadExt;

// ---------------------------------------------------------------------------------------------
// Harness: a private database, topics and group; what the test created is removed at the end
// (tests/common), pass or fail.

/// The consumer tests' world, and what the database faults need besides.
struct Setup {
    world: ConsumerSetup,
    db_name: String,
    /// MariaDB: the private user the consumer connects as (so only it can be locked out).
    user: Option<String>,
}

impl std::ops::Deref for Setup {
    type Target = ConsumerSetup;
    fn deref(&self) -> &ConsumerSetup {
        &self.world
    }
}

impl std::ops::DerefMut for Setup {
    fn deref_mut(&mut self) -> &mut ConsumerSetup {
        &mut self.world
    }
}

async fn setup(dialect: Dialect) -> Setup {
    Setup::of(consumer_setup(dialect).await)
}

async fn admin(dialect: Dialect) -> Database {
    Database::connect_url(&local_config(), &server_url(dialect))
        .await
        .expect("the test server is reachable")
}

impl Setup {
    /// The tests' world around `world`: its database's name for the faults.
    fn of(world: ConsumerSetup) -> Setup {
        let db_name = url::Url::parse(&world.config.database.url)
            .unwrap()
            .path()
            .trim_start_matches('/')
            .to_string();
        Setup {
            world,
            db_name,
            user: None,
        }
    }

    /// MariaDB: the consumer connects as a user of its own with rights on this database only,
    /// so the test can lock that user out without touching anyone else's connections.
    async fn private_mysql_user(&mut self) {
        let user = format!("igtu_{}", unique_suffix());
        let password = format!("pw{}", unique_suffix());
        let a = admin(Dialect::Mysql).await;
        exec(
            &a,
            &format!("CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'"),
        )
        .await;
        remove_mysql_user_at_end(&user);
        exec(
            &a,
            &format!("GRANT ALL PRIVILEGES ON {}.* TO '{user}'@'%'", self.db_name),
        )
        .await;
        a.pool.close().await;
        let mut url = url::Url::parse(&self.config.database.url).unwrap();
        url.set_username(&user).unwrap();
        url.set_password(Some(&password)).unwrap();
        self.config.database.url = url.to_string();
        self.user = Some(user);
    }
}

/// `n` CREATED orders written straight into the schema in one statement: (orderNo, requestId).
async fn create_orders(db: &Database, n: usize) -> Vec<(String, String)> {
    let orders: Vec<(String, String)> = (0..n)
        .map(|_| {
            (
                OrderNo::generate().to_string(),
                format!("APP:ORDER:20261130:{}", uuid::Uuid::now_v7()),
            )
        })
        .collect();
    let rows: Vec<String> = (0..n)
        .map(|i| {
            let p = |k: usize| {
                if db.dialect() == Dialect::Postgres {
                    format!("${}", i * 2 + k)
                } else {
                    "?".into()
                }
            };
            format!("({}, {}, 42, 1, 1, 1999, 'CREATED', 0, 0)", p(1), p(2))
        })
        .collect();
    let sql = format!(
        "INSERT INTO order_record (req_id, order_no, user_id, sku_id, quantity, amount, status, created_at, updated_at) VALUES {}",
        rows.join(", ")
    );
    let mut q = sqlx::query(&sql);
    for (order_no, req) in &orders {
        q = q.bind(req).bind(order_no);
    }
    q.execute(&db.pool).await.unwrap();
    orders
}

/// A payment event for each of `n` new orders.
async fn paid_events(db: &Database, n: usize) -> Vec<PaymentSucceeded> {
    create_orders(db, n)
        .await
        .iter()
        .map(|(o, r)| payment(o, r, 42))
        .collect()
}

async fn produce_all(s: &Setup, events: &[PaymentSucceeded]) {
    let p = producer(&s.config);
    futures::future::join_all(
        events
            .iter()
            .map(|e| produce(&p, &s.config.kafka.payment_topic, e)),
    )
    .await;
}

/// Produces `events` one every `gap`, in the background: a consumer fed by it is busy the
/// whole time, so a fault injected meanwhile lands in the middle of batches.
fn feed(s: &Setup, events: Vec<PaymentSucceeded>, gap: Duration) -> tokio::task::JoinHandle<()> {
    let (p, topic) = (producer(&s.config), s.config.kafka.payment_topic.clone());
    tokio::spawn(async move {
        for e in &events {
            produce(&p, &topic, e).await;
            tokio::time::sleep(gap).await;
        }
    })
}

/// Exactly `n` events took effect, once each: one PAID order, points row, notification and
/// processed_event row per event.
async fn assert_applied_once(s: &Setup, n: i64) {
    let d = s.dialect;
    assert_eq!(
        count(
            &s.db,
            "order_record WHERE status = 'PAID' AND payment_event_id IS NOT NULL"
        )
        .await,
        n,
        "{d}: PAID orders"
    );
    for table in ["points_ledger", "notification", "processed_event"] {
        assert_eq!(count(&s.db, table).await, n, "{d}: {table}");
    }
}

/// Waits (bounded) until the database holds `n` processed events — the last sink of a batch.
async fn until_processed(s: &Setup, run: &Member, n: i64, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let done = count(&s.db, "processed_event").await;
        if done >= n {
            return;
        }
        assert!(
            !run.handle.is_finished(),
            "the consumer stopped on its own at {done} of {n} events: {:?}",
            run.stats
        );
        assert!(
            Instant::now() < deadline,
            "timed out after {secs}s: {done} of {n} events processed ({:?})",
            run.stats
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Claim: "A transient database error retries the batch with backoff (never the DLQ)".

/// The database misbehaving for the test's own database only.
struct Nemesis {
    admin: Database,
    dialect: Dialect,
    db_name: String,
    user: Option<String>,
}

impl Nemesis {
    async fn new(s: &Setup) -> Nemesis {
        Nemesis {
            admin: admin(s.dialect).await,
            dialect: s.dialect,
            db_name: s.db_name.clone(),
            user: s.user.clone(),
        }
    }

    /// Terminates the consumer's sessions (on PostgreSQL every session of the test database but
    /// the nemesis's own; on MariaDB the private user's). Returns how many it ended.
    async fn kill_sessions(&self) -> usize {
        match self.dialect {
            Dialect::Postgres => {
                let sql = "SELECT CAST(COUNT(*) AS BIGINT) FROM (SELECT pg_terminate_backend(pid) AS ended FROM pg_stat_activity \
                           WHERE datname = $1 AND pid <> pg_backend_pid()) AS k WHERE k.ended";
                let n: i64 = sqlx::query_scalar(sql)
                    .bind(&self.db_name)
                    .fetch_one(&self.admin.pool)
                    .await
                    .unwrap();
                n as usize
            }
            Dialect::Mysql => {
                let sql = "SELECT CAST(id AS SIGNED) FROM information_schema.processlist WHERE user = ? AND db = ?";
                let user = self.user.clone().expect("a private user on MariaDB");
                let ids: Vec<i64> = sqlx::query_scalar(sql)
                    .bind(user)
                    .bind(&self.db_name)
                    .fetch_all(&self.admin.pool)
                    .await
                    .unwrap();
                let mut ended = 0;
                for id in ids {
                    // Gone meanwhile is fine: it was ending anyway.
                    ended += sqlx::query(&format!("KILL CONNECTION {id}"))
                        .execute(&self.admin.pool)
                        .await
                        .is_ok() as usize;
                }
                ended
            }
        }
    }

    /// Refuses new connections (and ends the open ones) until `allow`.
    async fn refuse(&self) {
        match self.dialect {
            Dialect::Postgres => {
                exec(
                    &self.admin,
                    &format!("ALTER DATABASE {} ALLOW_CONNECTIONS false", self.db_name),
                )
                .await
            }
            Dialect::Mysql => {
                exec(
                    &self.admin,
                    &format!(
                        "ALTER USER '{}'@'%' ACCOUNT LOCK",
                        self.user.as_ref().unwrap()
                    ),
                )
                .await
            }
        }
        self.kill_sessions().await;
    }

    async fn allow(&self) {
        match self.dialect {
            Dialect::Postgres => {
                exec(
                    &self.admin,
                    &format!("ALTER DATABASE {} ALLOW_CONNECTIONS true", self.db_name),
                )
                .await
            }
            Dialect::Mysql => {
                exec(
                    &self.admin,
                    &format!(
                        "ALTER USER '{}'@'%' ACCOUNT UNLOCK",
                        self.user.as_ref().unwrap()
                    ),
                )
                .await
            }
        }
    }
}

async fn database_faults_are_retried_never_dead_lettered(s: &Setup) {
    let dialect = s.dialect;
    let nemesis = Nemesis::new(s).await;
    let mut events = paid_events(&s.db, 500).await;
    let after = events.split_off(300);
    let during_refusal = events.split_off(250);
    let run = s.start_member().await;

    // 1. Once the member consumes, sessions terminated again and again while 240 events
    //    arrive one by one.
    let first: Vec<PaymentSucceeded> = events.drain(..10).collect();
    produce_all(s, &first).await;
    run.until_applied(10, 60).await;
    let fed = feed(s, events, Duration::from_millis(8));
    let mut killed = 0;
    while !fed.is_finished() {
        killed += nemesis.kill_sessions().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    fed.await.unwrap();
    until_processed(s, &run, 250, 60).await;
    let retried_after_kills = run.get(|s| &s.db_retries);
    let applied_before_refusal = run.get(|s| &s.applied);

    // 2. The database refuses the consumer for 3 s while 50 events wait in Kafka.
    nemesis.refuse().await;
    produce_all(s, &during_refusal).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let retried_while_refused = run.get(|s| &s.db_retries) - retried_after_kills;
    let applied_while_refused = run.get(|s| &s.applied) - applied_before_refusal;
    nemesis.allow().await;

    // 3. Back: everything arrives, once.
    produce_all(s, &after).await;
    until_processed(s, &run, 500, 120).await;
    let stats = run.stop().await;
    assert!(killed > 0, "{dialect}: the nemesis ended no session");
    assert!(
        retried_after_kills > 0,
        "{dialect}: {killed} sessions killed mid-stream, yet no batch was retried"
    );
    eprintln!("{dialect}: {killed} sessions killed, {retried_after_kills} retries under the kills, {retried_while_refused} while refused; {stats:?}");
    assert!(retried_while_refused >= 2, "{dialect}: a refused database is retried with backoff ({retried_while_refused} retries in 3 s)");
    assert_eq!(
        applied_while_refused, 0,
        "{dialect}: applied while the database refused every connection?"
    );
    assert_eq!(
        ConsumeStats::get(&stats.dlq),
        0,
        "{dialect}: a database error went to the DLQ ({stats:?})"
    );
    // Not `stats.applied`: a session killed during a COMMIT the server had already made leaves
    // the consumer unsure; its retry finds the rows there and counts them as duplicates.
    assert_applied_once(s, 500).await;
    nemesis.admin.pool.close().await;
}

#[tokio::test]
async fn database_faults_are_retried_never_dead_lettered_postgres() {
    let s = setup(Dialect::Postgres).await;
    database_faults_are_retried_never_dead_lettered(&s).await;
}

#[tokio::test]
async fn database_faults_are_retried_never_dead_lettered_mysql() {
    let mut s = setup(Dialect::Mysql).await;
    s.private_mysql_user().await;
    database_faults_are_retried_never_dead_lettered(&s).await;
}

// ---------------------------------------------------------------------------------------------
// Claim: "a restart or a rebalance still catches replays" — with work applied, offsets not
// committed, when the member dies.

/// The real binary as a member of the test's group, its log lines collected as they come.
struct ConsumeChild {
    child: tokio::process::Child,
    log: Arc<std::sync::Mutex<Vec<String>>>,
}

/// A member aborting right after its first batch's database commit and before its offset
/// commit.
fn spawn_crashing_member(s: &Setup) -> ConsumeChild {
    ConsumeChild::spawn(
        s.consume_command(&["--crash-after-db-commit", "1"])
            .env("IDEMGUARD_CONSUMER__BATCH_SIZE", "50"),
    )
}

impl ConsumeChild {
    /// Starts `command` (a [`ConsumerSetup::consume_command`]) logging at info.
    fn spawn(command: &mut tokio::process::Command) -> ConsumeChild {
        let mut child = command
            .env("IDEMGUARD_LOG", "warn,idemguard=info")
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let sink = log.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                sink.lock().unwrap().push(line);
            }
        });
        ConsumeChild { child, log }
    }

    /// Its log so far, one line each.
    fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// The latest line of its log that `wanted` picks, once there is one (bounded); fails at
    /// once when the process has ended.
    async fn until_logged(
        &mut self,
        what: &str,
        secs: u64,
        wanted: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let found = self
                .log
                .lock()
                .unwrap()
                .iter()
                .rev()
                .find(|l| wanted(l))
                .cloned();
            if let Some(line) = found {
                return line;
            }
            self.assert_running(what);
            assert!(
                Instant::now() < deadline,
                "consume logged no {what} within {secs}s:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The partitions of its latest non-empty assignment, once it has one (bounded).
    async fn assignment(&mut self, secs: u64) -> String {
        self.until_logged("partition assigned", secs, |l| {
            l.contains("partitions assigned") && l.contains(".t")
        })
        .await
    }

    fn assert_running(&mut self, what: &str) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!(
                "consume ended ({status}) before {what}; its log:\n{}",
                self.log()
            );
        }
    }

    /// Ctrl-C, as an operator stops it: its exit status (within 30 s) and its whole log.
    async fn stop(mut self) -> (std::process::ExitStatus, String) {
        signal(self.child.id().expect("consume is running"), "-INT");
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("consume stops within 30 s of Ctrl-C:\n{}", self.log()))
            .unwrap();
        // The reader has the last lines once the pipe closed.
        tokio::time::sleep(Duration::from_millis(200)).await;
        (status, self.log())
    }
}

async fn a_member_dies_with_uncommitted_work(s: &Setup) {
    let dialect = s.dialect;
    let p = producer(&s.config);
    let warm_up = paid_events(&s.db, 1).await;
    let events = paid_events(&s.db, 300).await;
    // Member B joins first and proves it is consuming.
    let b = s.start_member().await;
    produce(&p, &s.config.kafka.payment_topic, &warm_up[0]).await;
    b.until_applied(1, 60).await;
    // Member A joins: the group rebalances and A owns some partitions.
    let mut a = spawn_crashing_member(s);
    let assigned = a.assignment(60).await;
    produce_all(s, &events).await;
    let status = tokio::time::timeout(Duration::from_secs(60), a.child.wait())
        .await
        .expect("member A crashed within 60s")
        .unwrap();
    assert!(
        !status.success(),
        "{dialect}: member A was meant to abort after its first database commit"
    );

    // B takes A's partitions over: A's uncommitted batch comes to B again.
    let handled =
        |s: &ConsumeStats| ConsumeStats::get(&s.applied) + ConsumeStats::get(&s.dedup_hits) >= 301;
    b.until("all 301 events handled by B", 120, handled).await;
    let stats = b.stop().await;
    let (b_applied, b_dedup) = (
        ConsumeStats::get(&stats.applied),
        ConsumeStats::get(&stats.dedup_hits),
    );
    assert!(b_dedup > 0, "{dialect}: B never received an event A had applied — it did not take A's partitions ({assigned}); {stats:?}");
    assert_eq!(
        b_applied + b_dedup,
        301,
        "{dialect}: every event reached B once: its own and A's redelivered ones ({stats:?})"
    );
    assert_eq!(
        ConsumeStats::get(&stats.sink_duplicates),
        0,
        "{dialect}: the dedup state caught every replay before the sinks"
    );
    assert_eq!(ConsumeStats::get(&stats.dlq), 0);
    assert_applied_once(s, 301).await;
}

per_dialect!(a_member_dies_with_uncommitted_work(&setup) => a_member_dies_with_uncommitted_work_and_the_other_takes_over_postgres, a_member_dies_with_uncommitted_work_and_the_other_takes_over_mysql);

// ---------------------------------------------------------------------------------------------
// Claim: the order sink locks the batch's orders in orderNo order, "so two consumers cannot
// deadlock".

fn deliveries(events: impl Iterator<Item = PaymentSucceeded>) -> Vec<Delivery> {
    events
        .enumerate()
        .map(|(i, event)| Delivery {
            event,
            topic: "t".into(),
            partition: 0,
            offset: i as i64,
        })
        .collect()
}

async fn reverse_order_batches_never_deadlock(s: &Setup) {
    let dialect = s.dialect;
    const ROUNDS: usize = 60; // without the sorted lock list MariaDB deadlocked in about half of 20-round runs
    const ORDERS: usize = 80;
    let tracer = Tracer::log_only(&Instance::current());
    let members = [
        Orders::new(Database::connect(&s.config).await.unwrap(), tracer.clone()),
        Orders::new(Database::connect(&s.config).await.unwrap(), tracer),
    ];
    let mut slowest = Duration::ZERO;
    for round in 0..ROUNDS {
        let orders = create_orders(&s.db, ORDERS).await;
        // The same orders, each with a different payment per member, one member in reverse.
        let forward = deliveries(orders.iter().map(|(o, r)| payment(o, r, 42)));
        let reverse = deliveries(orders.iter().rev().map(|(o, r)| payment(o, r, 42)));
        let start_line = Arc::new(tokio::sync::Barrier::new(2));
        let run = |orders: Orders, batch: Vec<Delivery>| {
            let start_line = start_line.clone();
            tokio::spawn(async move {
                start_line.wait().await;
                sinks::mark_paid(&orders, &batch).await
            })
        };
        let started = Instant::now();
        let (a, b) = (
            run(members[0].clone(), forward.clone()),
            run(members[1].clone(), reverse.clone()),
        );
        let (a, b) = tokio::time::timeout(Duration::from_secs(10), async {
            (a.await.unwrap(), b.await.unwrap())
        })
        .await
        .unwrap_or_else(|_| panic!("{dialect}: round {round} stalled for 10 s"));
        slowest = slowest.max(started.elapsed());
        let a = a.unwrap_or_else(|e| panic!("{dialect}: round {round}, forward member: {e:#}"));
        let b = b.unwrap_or_else(|e| panic!("{dialect}: round {round}, reverse member: {e:#}"));
        // Each order paid by exactly one of the two; the other sees it paid by the winner.
        for (i, d) in forward.iter().enumerate() {
            let theirs = &b[ORDERS - 1 - i];
            match (&a[i], theirs) {
                (PaidDecision::Applied, PaidDecision::PaidByOther(by)) => {
                    assert_eq!(*by, d.event.event_id)
                }
                (PaidDecision::PaidByOther(by), PaidDecision::Applied) => {
                    assert_eq!(*by, reverse[ORDERS - 1 - i].event.event_id)
                }
                other => panic!(
                    "{dialect}: round {round}, order {}: {other:?}",
                    d.event.order_no
                ),
            }
        }
    }
    assert_eq!(
        count(&s.db, "order_record WHERE status = 'PAID'").await,
        (ROUNDS * ORDERS) as i64
    );
    assert!(
        slowest < Duration::from_secs(5),
        "{dialect}: a round took {slowest:?}"
    );
}

per_dialect!(reverse_order_batches_never_deadlock(&setup) => reverse_order_batches_never_deadlock_postgres, reverse_order_batches_never_deadlock_mysql);

// =============================================================================================
// The consumer's fault branches: refusals, parse rejections and poison messages to the DLQ,
// receive errors, failed offset commits.

// ---------------------------------------------------------------------------------------------
// Harness

fn event_headers(e: &PaymentSucceeded) -> OwnedHeaders {
    OwnedHeaders::new()
        .insert(Header {
            key: headers::EVENT_ID,
            value: Some(e.event_id.as_bytes()),
        })
        .insert(Header {
            key: headers::ORDER_NO,
            value: Some(e.order_no.as_bytes()),
        })
}

/// Sends one message keyed `key` (one key → one partition, in order).
async fn send(s: &ConsumerSetup, key: &str, payload: Option<&[u8]>, h: Option<OwnedHeaders>) {
    let mut record: FutureRecord<'_, str, [u8]> =
        FutureRecord::to(&s.config.kafka.payment_topic).key(key);
    if let Some(p) = payload {
        record = record.payload(p);
    }
    if let Some(h) = h {
        record = record.headers(h);
    }
    producer(&s.config)
        .send(record, Duration::from_secs(10))
        .await
        .map_err(|(e, _)| e)
        .unwrap();
}

async fn send_event(s: &ConsumerSetup, key: &str, e: &PaymentSucceeded) {
    let body = serde_json::to_vec(e).unwrap();
    send(s, key, Some(&body), Some(event_headers(e))).await;
}

/// The group's committed offsets on the payment topic, summed over partitions.
async fn committed_total(s: &ConsumerSetup) -> i64 {
    let (kafka, topic, group) = (
        s.config.kafka.clone(),
        s.config.kafka.payment_topic.clone(),
        s.group.clone(),
    );
    tokio::task::spawn_blocking(move || {
        consumer_lag(&kafka, &group, &topic, Duration::from_secs(10)).unwrap()
    })
    .await
    .unwrap()
    .iter()
    .map(|p| p.committed.unwrap_or(0))
    .sum()
}

/// Every message the DLQ topic holds, read from the beginning of each partition up to its high
/// watermark: exact, no waiting for "nothing more arrives". (dlq.id, dlq.reason) each.
async fn dlq_messages(s: &ConsumerSetup) -> Vec<(String, String)> {
    dlq_records(s)
        .await
        .into_iter()
        .map(|r| (r.header("dlq.id"), r.header("dlq.reason")))
        .collect()
}

/// A message of the DLQ: its headers and how long its payload is.
#[derive(Debug)]
struct DlqRecord {
    headers: Vec<(String, String)>,
    payload_len: usize,
}

impl DlqRecord {
    fn header(&self, k: &str) -> String {
        self.headers
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }
}

/// [`dlq_messages`], whole.
async fn dlq_records(s: &ConsumerSetup) -> Vec<DlqRecord> {
    let (servers, topic) = (
        s.config.kafka.bootstrap_servers.clone(),
        s.config.kafka.dlq_topic.clone(),
    );
    tokio::task::spawn_blocking(move || {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &servers)
            .set("group.id", format!("dlq-reader-{}", unique_suffix()))
            .set("enable.auto.commit", "false")
            .set("log_level", "3")
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        let mut total = 0;
        for p in 0..3 {
            let (_, high) = c
                .fetch_watermarks(&topic, p, Duration::from_secs(10))
                .unwrap();
            total += high;
            tpl.add_partition_offset(&topic, p, Offset::Beginning)
                .unwrap();
        }
        c.assign(&tpl).unwrap();
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while (out.len() as i64) < total {
            assert!(Instant::now() < deadline, "DLQ not read back: {out:?}");
            if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
                let h = m.headers().expect("a DLQ message has headers");
                let headers = h
                    .iter()
                    .map(|x| {
                        let v = x.value.map(String::from_utf8_lossy).unwrap_or_default();
                        (x.key.to_string(), v.into_owned())
                    })
                    .collect();
                let payload_len = m.payload().map_or(0, <[u8]>::len);
                out.push(DlqRecord {
                    headers,
                    payload_len,
                });
            }
        }
        out
    })
    .await
    .unwrap()
}

/// Rows of `processed_event` with this outcome.
async fn processed(s: &ConsumerSetup, outcome: &str) -> i64 {
    count(
        &s.db,
        &format!("processed_event WHERE outcome = '{outcome}'"),
    )
    .await
}

// ---------------------------------------------------------------------------------------------
// The order sink's refusals, through the consumer.

async fn refusals_apply_nothing_further(s: &ConsumerSetup) {
    let d = s.dialect;
    let (a, a_req) = create_order(&s.db, 42).await;
    let (b, b_req) = create_order(&s.db, 42).await;
    let (c, _) = create_order(&s.db, 42).await;
    let (dd, d_req) = create_order(&s.db, 42).await;
    exec(
        &s.db,
        &format!("UPDATE order_record SET status = 'CANCELLED' WHERE order_no = '{b}'"),
    )
    .await;
    // Order C was paid by event `used` elsewhere (another group, another path).
    let used = new_event_id();
    exec(&s.db, &format!("UPDATE order_record SET status = 'PAID', payment_event_id = '{used}' WHERE order_no = '{c}'")).await;

    let first = payment(&a, &a_req, 42);
    let second = payment(&a, &a_req, 42); // a second payment for A: another eventId
    let cancelled = payment(&b, &b_req, 42);
    let elsewhere = PaymentSucceeded {
        event_id: used.clone(),
        ..payment(&dd, &d_req, 42)
    };
    // One key: one partition, in this order.
    for e in [&first, &second, &cancelled, &elsewhere] {
        send_event(s, "refusals", e).await;
    }
    let run = s.start_member().await;
    run.until("4 messages handled", 60, |st| {
        get(&st.applied) + get(&st.transitions_rejected) + get(&st.dlq) >= 4
    })
    .await;
    let st = run.stop().await;
    assert_eq!(get(&st.applied), 1, "{d}: only the first payment of A");
    assert_eq!(
        get(&st.transitions_rejected),
        2,
        "{d}: paid by other + cancelled"
    );
    assert_eq!(get(&st.dlq), 1, "{d}: the eventId that paid C");
    assert_eq!(processed(s, "applied").await, 1, "{d}");
    assert_eq!(processed(s, "paid_by_other").await, 1, "{d}");
    assert_eq!(processed(s, "rejected").await, 1, "{d}");
    assert_eq!(processed(s, "dlq").await, 1, "{d}");
    for (table, column) in [
        ("points_ledger", "source_event_no"),
        ("notification", "event_id"),
    ] {
        let first_id = &first.event_id;
        let of_first = format!("{table} WHERE {column} = '{first_id}'");
        assert_eq!(count(&s.db, &of_first).await, 1, "{d}: {table}");
        assert_eq!(count(&s.db, table).await, 1, "{d}: {table} of refusals");
    }
    let status = |o: String| {
        let db = s.db.clone();
        async move {
            sqlx::query_scalar::<_, String>(&format!(
                "SELECT status FROM order_record WHERE order_no = '{o}'"
            ))
            .fetch_one(&db.pool)
            .await
            .unwrap()
        }
    };
    assert_eq!(status(b).await, "CANCELLED", "{d}");
    assert_eq!(
        status(dd.clone()).await,
        "CREATED",
        "{d}: not paid by a used eventId"
    );
    assert_eq!(
        count(
            &s.db,
            &format!(
                "order_record WHERE order_no = '{a}' AND payment_event_id = '{}'",
                first.event_id
            )
        )
        .await,
        1,
        "{d}: A stays paid by its first event"
    );
    let dlq = dlq_messages(s).await;
    assert_eq!(dlq.len(), 1, "{d}: {dlq:?}");
    let reason = format!("event {used} already paid another order, so it cannot pay order {dd}");
    assert_eq!(
        dlq[0].1, reason,
        "{d}: the order named is the one refused, not {c}"
    );
    assert!(dlq[0].0.starts_with("dlq:"), "{d}: {dlq:?}");
}

per_dialect!(refusals_apply_nothing_further(&consumer_setup) => refusals_through_the_consumer_apply_nothing_further_postgres, refusals_through_the_consumer_apply_nothing_further_mysql);

// ---------------------------------------------------------------------------------------------
// Each parse rejection: to the DLQ with its reason, nothing applied, the partition goes on.

async fn parse_rejections_are_dead_lettered(s: &ConsumerSetup) {
    let d = s.dialect;
    let (o, r) = create_order(&s.db, 42).await;
    let base = payment(&o, &r, 42);
    let body = |e: &PaymentSucceeded| serde_json::to_vec(e).unwrap();
    let not_uuid = PaymentSucceeded {
        event_id: "not-a-uuid".into(),
        ..base.clone()
    };
    send(s, &o, Some(&body(&not_uuid)), None).await;
    let disagreeing = payment(&o, &r, 42);
    let other_id = new_event_id();
    let h = OwnedHeaders::new().insert(Header {
        key: headers::EVENT_ID,
        value: Some(other_id.as_bytes()),
    });
    send(s, &o, Some(&body(&disagreeing)), Some(h)).await;
    let negative = PaymentSucceeded {
        amount: -5,
        ..payment(&o, &r, 42)
    };
    send(
        s,
        &o,
        Some(&body(&negative)),
        Some(event_headers(&negative)),
    )
    .await;
    send(s, &o, None, None).await; // no payload at all
    send(s, &o, Some(b""), None).await; // a payload of zero bytes
    let good = payment(&o, &r, 42);
    send_event(s, &o, &good).await;

    let run = s.start_member().await;
    run.until("5 dead-lettered and 1 applied", 60, |st| {
        get(&st.dlq) >= 5 && get(&st.applied) >= 1
    })
    .await;
    let st = run.stop().await;
    assert_eq!((get(&st.dlq), get(&st.applied)), (5, 1), "{d}: {st:?}");
    assert_eq!(committed_total(s).await, 6, "{d}: the partition went on");
    // Nothing of the rejected messages applied: the one PAID is the good event's.
    assert_eq!(
        count(
            &s.db,
            &format!(
                "order_record WHERE order_no = '{o}' AND payment_event_id = '{}'",
                good.event_id
            )
        )
        .await,
        1,
        "{d}"
    );
    for table in ["points_ledger", "notification"] {
        assert_eq!(count(&s.db, table).await, 1, "{d}: {table}");
    }
    let mut reasons: Vec<String> = dlq_messages(s).await.into_iter().map(|m| m.1).collect();
    reasons.sort();
    let expected = [
        "event_id `not-a-uuid` is not a UUID".to_string(),
        format!(
            "header eventId `{other_id}` disagrees with the body `{}`",
            disagreeing.event_id
        ),
        "negative amount -5".to_string(),
        "empty message".to_string(),
    ];
    for e in &expected {
        assert!(reasons.contains(e), "{d}: no `{e}` in {reasons:?}");
    }
    // A zero-byte payload: librdkafka may hand it over as no payload or as zero bytes.
    assert!(
        reasons.iter().filter(|r| *r == "empty message").count() == 2
            || reasons.iter().any(|r| r.starts_with("payload is not JSON")),
        "{d}: {reasons:?}"
    );
    assert_eq!(reasons.len(), 5, "{d}: {reasons:?}");
}

per_dialect!(parse_rejections_are_dead_lettered(&consumer_setup) => each_parse_rejection_is_dead_lettered_with_its_reason_postgres, each_parse_rejection_is_dead_lettered_with_its_reason_mysql);

// ---------------------------------------------------------------------------------------------
// The DLQ, once per source message.

/// The real binary, aborting right after its first batch (database writes and DLQ publications
/// done) and before its offset commit.
async fn run_crashing_member(s: &ConsumerSetup) {
    let out = s
        .consume_command(&["--crash-after-db-commit", "1"])
        .stderr(std::process::Stdio::null())
        .status();
    let status = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("the consumer crashed within 60s")
        .unwrap();
    assert!(!status.success(), "the consumer was meant to abort");
}

async fn dlq_once_across_a_crash(s: &ConsumerSetup) {
    let d = s.dialect;
    let (o, r) = create_order(&s.db, 42).await;
    send(s, &o, Some(b"{not json"), None).await;
    send(s, &o, Some(b"[1, 2]"), None).await;
    send_event(s, &o, &payment(&o, &r, 42)).await;
    run_crashing_member(s).await;
    assert_eq!(
        committed_total(s).await,
        0,
        "{d}: crashed before the commit"
    );
    let before = dlq_messages(s).await.len();
    assert!(before >= 1, "{d}: the crashed batch had dead-lettered");

    let run = s.start_member().await;
    run.until("the batch redelivered", 60, |st| get(&st.received) >= 3)
        .await;
    let st = run.stop().await;
    assert_eq!(committed_total(s).await, 3, "{d}");
    let dlq = dlq_messages(s).await;
    assert_eq!(dlq.len(), 2, "{d}: each poison published once: {dlq:?}");
    assert_ne!(dlq[0].0, dlq[1].0, "{d}: {dlq:?}");
    assert_eq!(get(&st.dlq_duplicates) as usize, before, "{d}: {st:?}");
    assert_eq!(processed(s, "dlq").await, 2, "{d}");
}

per_dialect!(dlq_once_across_a_crash(&consumer_setup) => the_dlq_gets_each_poison_once_across_a_crash_postgres, the_dlq_gets_each_poison_once_across_a_crash_mysql);

/// Sends `payload` (no key) to partition `partition` of the payment topic through `p`.
async fn send_to_partition(s: &ConsumerSetup, p: &FutureProducer, partition: i32, payload: &[u8]) {
    let record: FutureRecord<'_, str, [u8]> = FutureRecord::to(&s.config.kafka.payment_topic)
        .partition(partition)
        .payload(payload);
    p.send(record, Duration::from_secs(30))
        .await
        .map_err(|(e, _)| e)
        .unwrap();
}

/// `e` keyed by its order, to partition `partition` (the test says which partition waits).
async fn send_event_to_partition(
    s: &ConsumerSetup,
    partition: i32,
    key: &str,
    e: &PaymentSucceeded,
) {
    let body = serde_json::to_vec(e).unwrap();
    let record: FutureRecord<'_, str, [u8]> = FutureRecord::to(&s.config.kafka.payment_topic)
        .partition(partition)
        .key(key)
        .payload(body.as_slice())
        .headers(event_headers(e));
    producer(&s.config)
        .send(record, Duration::from_secs(10))
        .await
        .map_err(|(e, _)| e)
        .unwrap();
}

/// A producer of messages up to 100 MB, gzip-compressed (`gzip`) or not.
fn large_producer(s: &ConsumerSetup, gzip: bool) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", &s.config.kafka.bootstrap_servers)
        .set("message.max.bytes", "100000000")
        .set("compression.type", if gzip { "gzip" } else { "none" })
        .create()
        .unwrap()
}

/// Lets the payment topic take batches of up to `bytes`: the broker refuses a larger one at
/// produce time (Apache Kafka's `max.message.bytes`, about 1 MB unless a topic says otherwise),
/// as a team's topic for large events would say. The DLQ topic keeps the broker's default.
async fn payment_topic_takes(s: &ConsumerSetup, bytes: usize) {
    topic_takes(s, &s.config.kafka.payment_topic, bytes).await;
}

/// Sets `topic`'s `max.message.bytes` on the broker: it refuses a larger batch at produce time.
async fn topic_takes(s: &ConsumerSetup, topic: &str, bytes: usize) {
    let admin: AdminClient<DefaultClientContext> =
        idemguard::kafka_client::client_config(&s.config.kafka)
            .create()
            .unwrap();
    let bytes = bytes.to_string();
    let change = AlterConfig::new(ResourceSpecifier::Topic(topic)).set("max.message.bytes", &bytes);
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    for r in admin.alter_configs([&change], &opts).await.unwrap() {
        r.unwrap_or_else(|e| panic!("max.message.bytes of {topic}: {e:?}"));
    }
}

/// The real `consume` until `done`, at most 90 s: its stderr and its peak resident memory
/// (VmHWM, kB). `env`: settings of this run.
async fn consume_until(
    s: &ConsumerSetup,
    env: &[(&str, &str)],
    what: &str,
    done: impl AsyncFn() -> bool,
) -> (String, u64) {
    let mut c = s.consume_command(&[]);
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c
        .env("IDEMGUARD_LOG", "warn")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = collect_stderr(&mut child);
    let pid = child.id().unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut peak_kb = 0;
    while !done().await {
        peak_kb = peak_memory_kb(pid).unwrap_or(peak_kb);
        if Instant::now() > deadline {
            child.start_kill().unwrap();
            let _ = child.wait().await;
            panic!(
                "{what} not within 90 s (peak memory {peak_kb} kB); consume's stderr:\n{}",
                stderr.await.unwrap()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    signal(child.id().unwrap(), "-INT");
    let _ = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
    (stderr.await.unwrap(), peak_kb)
}

/// One poison message too large for the DLQ must stop nothing. On partition 0: a small poison,
/// a 3,000,056-byte message and four gzip messages that inflate to 60 MB (60 KB on the wire);
/// then, on partition 1, a legitimate payment. The payment is applied, every offset committed,
/// and the DLQ holds the small poison whole and a record of each large one — its first 64 KiB,
/// `dlq.size` its whole size, `dlq.cut` what was cut — while `consume` never holds more than
/// 340 MB (it used to copy every message of a batch whole, and retried the DLQ for ever).
async fn a_message_too_large_for_the_dlq_stops_nothing(s: &ConsumerSetup) {
    let d = s.dialect;
    payment_topic_takes(s, 4_000_000).await;
    let (o, r) = create_order(&s.db, 42).await;
    send_to_partition(s, &producer(&s.config), 0, b"{not json").await;
    let huge = vec![b'x'; 3_000_056];
    send_to_partition(s, &large_producer(s, false), 0, &huge).await;
    drop(huge);
    let inflating = vec![b'0'; 60_000_000];
    let gzip = large_producer(s, true);
    for _ in 0..4 {
        send_to_partition(s, &gzip, 0, &inflating).await;
    }
    drop(inflating);
    send_event_to_partition(s, 1, &o, &payment(&o, &r, 42)).await;
    let done = async || committed_total(s).await >= 7;
    let (stderr, peak_kb) = consume_until(s, &[], "every offset committed", done).await;
    eprintln!("{d}: consume's peak resident memory: {peak_kb} kB");
    assert_eq!(
        count(
            &s.db,
            &format!("order_record WHERE order_no = '{o}' AND status = 'PAID'")
        )
        .await,
        1,
        "{d}: the payment on partition 1 was applied: {stderr}"
    );
    assert_eq!(processed(s, "dlq").await, 6, "{d}: {stderr}");
    let mut dlq = dlq_records(s).await;
    dlq.sort_by_key(|r| {
        (
            r.payload_len,
            r.header("dlq.size").parse::<u64>().unwrap_or(0),
        )
    });
    let sizes: Vec<(usize, String)> = dlq
        .iter()
        .map(|r| (r.payload_len, r.header("dlq.size")))
        .collect();
    assert_eq!(
        sizes,
        [
            (9, String::new()),
            (65_536, "3000056".to_string()),
            (65_536, "60000000".to_string()),
            (65_536, "60000000".to_string()),
            (65_536, "60000000".to_string()),
            (65_536, "60000000".to_string())
        ],
        "{d}: {dlq:?}"
    );
    for r in &dlq[1..] {
        assert!(
            r.header("dlq.reason")
                .contains("larger than consumer.max_message_bytes")
                && r.header("dlq.cut").contains("first 65536 bytes")
                && r.header("dlq.source.partition") == "0",
            "{d}: {r:?}"
        );
    }
    // librdkafka holds the message in hand, one read ahead and one being inflated (60 MB
    // each, ~215 MB with the process itself) — and under load its fetch thread can run one
    // message further ahead (269 MB measured on a loaded run), so the bound allows two such
    // messages more. Copying each message of a batch whole, as `consume` once did, takes
    // 240 MB for the copies alone (~455 MB): far past the bound.
    assert!(
        peak_kb < 340_000,
        "{d}: consume's memory peaked at {peak_kb} kB for messages it keeps 64 KiB of"
    );
}

per_dialect!(a_message_too_large_for_the_dlq_stops_nothing(&consumer_setup) => a_message_too_large_for_the_dlq_stops_nothing_postgres, a_message_too_large_for_the_dlq_stops_nothing_mysql);

/// A DLQ that refuses even a record of the poison (its limit, `consumer.dlq_max_message_bytes`,
/// is below the message's 1,500-byte key: the DLQ producer refuses it itself, as a broker would):
/// the poison is kept in `processed_event` as `dlq_failed`, the log says where it is, its size
/// and why, and the payment after it on another partition is applied.
async fn a_poison_the_dlq_refuses_is_kept_as_dlq_failed(s: &ConsumerSetup) {
    let d = s.dialect;
    let (o, r) = create_order(&s.db, 42).await;
    let key = "k".repeat(1_500);
    let record: FutureRecord<'_, str, [u8]> = FutureRecord::to(&s.config.kafka.payment_topic)
        .partition(0)
        .key(key.as_str())
        .payload(&b"{not json"[..]);
    producer(&s.config)
        .send(record, Duration::from_secs(10))
        .await
        .map_err(|(e, _)| e)
        .unwrap();
    send_event_to_partition(s, 1, &o, &payment(&o, &r, 42)).await;
    let env = [("IDEMGUARD_CONSUMER__DLQ_MAX_MESSAGE_BYTES", "1000")];
    let done = async || committed_total(s).await >= 2;
    let (stderr, _) = consume_until(s, &env, "both offsets committed", done).await;
    assert_eq!(
        count(
            &s.db,
            &format!("order_record WHERE order_no = '{o}' AND status = 'PAID'")
        )
        .await,
        1,
        "{d}: {stderr}"
    );
    assert_eq!(processed(s, "dlq_failed").await, 1, "{d}: {stderr}");
    assert!(dlq_records(s).await.is_empty(), "{d}: nothing in the DLQ");
    for part in [
        "NOT in the DLQ",
        "partition=0",
        "offset=0",
        "size=1509",
        "payload is not JSON",
        "dlq_failed",
    ] {
        assert!(
            stderr.contains(part),
            "{d}: no `{part}` in the log:\n{stderr}"
        );
    }
}

per_dialect!(a_poison_the_dlq_refuses_is_kept_as_dlq_failed(&consumer_setup) => a_poison_the_dlq_refuses_is_kept_as_dlq_failed_postgres, a_poison_the_dlq_refuses_is_kept_as_dlq_failed_mysql);

/// The DLQ topic's own limit, below the DLQ producer's: the topic takes 80,000 bytes
/// (`max.message.bytes`), `consumer.dlq_max_message_bytes` stays 1 MB, so the producer sends
/// what the broker then refuses (RECORD_TOO_LARGE). On partition 0, two poison messages the
/// broker refuses whole, then a payment; on partition 1, a payment. The rule of
/// `stream/poison.rs` holds with the broker's refusal: a 200,000-byte poison is published as a
/// record cut to its first 64 KiB (`dlq.size`, `dlq.cut`); one whose record is still too large
/// for the topic (a 20,000-byte key beside the 64 KiB) is kept as `dlq_failed`, and the log says
/// where it is; both payments are applied once and every offset is committed.
async fn a_poison_over_the_dlq_topics_limit_stops_nothing(s: &ConsumerSetup) {
    let d = s.dialect;
    topic_takes(s, &s.config.kafka.dlq_topic, 80_000).await;
    let (o1, r1) = create_order(&s.db, 42).await;
    let (o2, r2) = create_order(&s.db, 42).await;
    let p = producer(&s.config);
    send_to_partition(s, &p, 0, &vec![b'x'; 200_000]).await;
    let key = "k".repeat(20_000);
    let payload = vec![b'y'; 70_000];
    let record: FutureRecord<'_, str, [u8]> = FutureRecord::to(&s.config.kafka.payment_topic)
        .partition(0)
        .key(key.as_str())
        .payload(&payload);
    p.send(record, Duration::from_secs(10))
        .await
        .map_err(|(e, _)| e)
        .unwrap();
    send_event_to_partition(s, 0, &o1, &payment(&o1, &r1, 42)).await;
    send_event_to_partition(s, 1, &o2, &payment(&o2, &r2, 42)).await;
    let done = async || committed_total(s).await >= 4;
    let (stderr, _) = consume_until(s, &[], "every offset committed", done).await;
    for o in [&o1, &o2] {
        let paid = format!("order_record WHERE order_no = '{o}' AND status = 'PAID'");
        assert_eq!(count(&s.db, &paid).await, 1, "{d}: {o} paid: {stderr}");
    }
    for table in ["points_ledger", "notification"] {
        assert_eq!(count(&s.db, table).await, 2, "{d}: {table}: {stderr}");
    }
    assert_eq!(processed(s, "dlq").await, 1, "{d}: {stderr}");
    assert_eq!(processed(s, "dlq_failed").await, 1, "{d}: {stderr}");
    let dlq = dlq_records(s).await;
    assert_eq!(
        dlq.len(),
        1,
        "{d}: only the record of the first poison: {dlq:?}"
    );
    let record = &dlq[0];
    assert!(
        record.payload_len == 65_536
            && record.header("dlq.size") == "200000"
            && record.header("dlq.cut").contains("first 65536 bytes")
            && record.header("dlq.source.partition") == "0"
            && record.header("dlq.source.offset") == "0",
        "{d}: {record:?}"
    );
    for part in [
        "NOT in the DLQ",
        "partition=0",
        "offset=1",
        "size=90000",
        "dlq_failed",
    ] {
        assert!(
            stderr.contains(part),
            "{d}: no `{part}` in the log:\n{stderr}"
        );
    }
}

per_dialect!(a_poison_over_the_dlq_topics_limit_stops_nothing(&consumer_setup) => a_poison_over_the_dlq_topics_limit_stops_nothing_postgres, a_poison_over_the_dlq_topics_limit_stops_nothing_mysql);

// ---------------------------------------------------------------------------------------------
// A Kafka receive error: the consumer subscribed to a topic that does not exist yet. (Deleting
// the topic under a running consumer is not the fault used: against tansu it crashes
// librdkafka's metadata cache — a SIGSEGV in rd_kafka_metadata_cache_find — in any client.)

#[tokio::test]
async fn a_kafka_receive_error_is_counted_and_survived() {
    let mut s = consumer_setup(Dialect::Postgres).await;
    let topic = format!("payment.succeeded.t{}", unique_suffix());
    remove_topics_at_end(&s.config, std::slice::from_ref(&topic));
    s.config.kafka.payment_topic = topic.clone();
    let run = s.start_member().await;
    run.until("a receive error", 60, |st| get(&st.receive_errors) >= 1)
        .await;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &s.config.kafka.bootstrap_servers)
        .set("log_level", "3")
        .create()
        .unwrap();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    admin
        .create_topics(
            &[NewTopic::new(&topic, 3, TopicReplication::Fixed(1))],
            &opts,
        )
        .await
        .unwrap()
        .into_iter()
        .for_each(|r| {
            r.unwrap();
        });
    let (o, r) = create_order(&s.db, 42).await;
    send_event(&s, &o, &payment(&o, &r, 42)).await;
    run.until("the event applied once the topic exists", 90, |st| {
        get(&st.applied) >= 1
    })
    .await;
    let st = run.stop().await;
    assert_eq!((get(&st.applied), get(&st.dlq)), (1, 0), "{st:?}");
    assert_eq!(count(&s.db, "points_ledger").await, 1);
}

// ---------------------------------------------------------------------------------------------
// The broker killed (SIGKILL) in the middle of a stream and started again on its data. The
// broker is the test's own (tests/common/own_broker.rs): the shared one serves other tests.

/// A consumer test's world on `broker`: a fresh PostgreSQL database, and payment, DLQ and trace
/// topics of 3 partitions on that broker (gone with its data directory). The faults are the
/// broker's; the dialects' paths are the other tests'.
async fn setup_on(broker: &OwnBroker) -> Setup {
    let (mut config, db) = migrated_database(Dialect::Postgres).await;
    let suffix = unique_suffix();
    config.kafka.bootstrap_servers = broker.bootstrap_servers();
    config.kafka.payment_topic = format!("payment.succeeded.t{suffix}");
    config.kafka.dlq_topic = format!("payment.succeeded.dlq.t{suffix}");
    config.kafka.trace_topic = format!("idemguard.trace.t{suffix}");
    let k = &config.kafka;
    broker
        .create_topics(&[&k.payment_topic, &k.dlq_topic, &k.trace_topic], 3)
        .await;
    config.consumer.batch_size = 50;
    config.trace.enabled = false;
    Setup::of(ConsumerSetup {
        dialect: Dialect::Postgres,
        config,
        db,
        group: format!("igt-group-{suffix}"),
    })
}

/// `consume` on the test's own broker.
fn consume_on_own_broker(s: &Setup) -> tokio::process::Command {
    let mut c = s.consume_command(&[]);
    c.env(
        "IDEMGUARD_KAFKA__BOOTSTRAP_SERVERS",
        &s.config.kafka.bootstrap_servers,
    );
    c
}

/// `idemguard rates --json`, as an operator runs it, on the test's broker, topics and group
/// (bounded: 60 s): how the payment topic's backend answered, and the document.
async fn rates_json(s: &Setup) -> (serde_json::Value, serde_json::Value) {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml");
    let k = &s.config.kafka;
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
        .args(["--config", config, "rates", "--json"])
        .env_remove("IDEMGUARD_CONFIG")
        .env("IDEMGUARD_DATABASE__URL", &s.config.database.url)
        .env("IDEMGUARD_KAFKA__BOOTSTRAP_SERVERS", &k.bootstrap_servers)
        .env("IDEMGUARD_KAFKA__PAYMENT_TOPIC", &k.payment_topic)
        .env("IDEMGUARD_KAFKA__TRACE_TOPIC", &k.trace_topic)
        .env("IDEMGUARD_KAFKA__CONSUMER_GROUP", &s.group)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("rates --json answers within 60 s")
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "rates --json answers JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let payment = doc["backends"]
        .as_array()
        .and_then(|b| b.iter().find(|b| b["name"] == "payment topic"))
        .unwrap_or_else(|| panic!("no payment topic backend: {doc:#}"))
        .clone();
    (payment, doc)
}

/// Waits (bounded) until the database holds `n` processed events; fails at once if `consume`
/// ended.
async fn until_processed_by(s: &Setup, consume: &mut ConsumeChild, n: i64, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let done = count(&s.db, "processed_event").await;
        if done >= n {
            return;
        }
        consume.assert_running(&format!("{n} events were processed ({done} so far)"));
        assert!(
            Instant::now() < deadline,
            "timed out after {secs}s: {done} of {n} events processed; consume's log:\n{}",
            consume.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The broker SIGKILLed while `consume` is inside a batch (its database writes under way, its
/// offset commit still to come) in the middle of a stream of 300 payments, down until that
/// commit has gone unanswered and the group session has timed out, then started again on the
/// same data. Every payment is applied once (orders, points, notifications, processed_event),
/// nothing is dead-lettered, every offset is committed — and the same `consume` process
/// recovered by itself, having said in its log that the broker was down, that the commit was not
/// answered, that its partitions were revoked as lost and assigned again, and that it did not
/// freeze. `rates --json` says the payment topic did not answer while the broker was down, and
/// gives the lag after.
///
/// The batch after the held one, fetched before the kill, is held in turn at its last sink until
/// the broker is back, so its offset commit reaches the broker after the group session has
/// ended: it is refused under the member's old membership, or accepted under its new one across
/// the lost assignment. The process ran all along and saw no broker answer, so `consume` logs
/// that as the broker's absence (nothing lost: the batch comes again and changes nothing) and
/// goes on (`stream/commit.rs`); a frozen member's refusal still ends it
/// (`a_failed_offset_commit…`). When that batch had not been fetched before the kill, it is
/// applied after the restart and nothing is refused; the test prints which it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_killed_mid_batch_loses_nothing_doubles_nothing_and_consume_recovers() {
    let mut broker = OwnBroker::start().await;
    let s = setup_on(&broker).await;
    let events = paid_events(&s.db, 300).await;
    let held = events[99].clone();
    let hold = hold_batch_of(&s, &held).await;
    let mut consume = ConsumeChild::spawn(&mut consume_on_own_broker(&s));
    consume.assignment(60).await;
    let fed = feed(&s, events.clone(), Duration::from_millis(5));
    let held_notified = format!("notification WHERE event_id = '{}'", held.event_id);
    let deadline = Instant::now() + Duration::from_secs(60);
    while count(&s.db, &held_notified).await < 1 {
        consume.assert_running("the held batch reached its sinks");
        assert!(
            Instant::now() < deadline,
            "the held batch never reached its sinks"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The broker dies; the batch's database writes finish; its offset commit finds no broker.
    // Meanwhile the console reads the lag.
    let killed = Instant::now();
    broker.kill();
    hold.rollback().await.unwrap();
    // The next batch, fetched before the kill, is held in turn at its last sink until the broker
    // is back: its offset commit then reaches the broker after the group session has ended.
    let held_recorded = format!("processed_event WHERE event_id = '{}'", held.event_id);
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(&s.db, &held_recorded).await < 1 {
        consume.assert_running("the held batch was recorded");
        assert!(
            Instant::now() < deadline,
            "the held batch was never recorded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let at_kill = count(&s.db, "processed_event").await;
    let next = first_unprocessed(&s, &events).await;
    let hold_next = hold_batch_of(&s, &next).await;
    // librdkafka holds a commit made once it knows the coordinator gone for session.timeout.ms
    // (10 s); one sent before it knew waits for socket.timeout.ms (60 s).
    let unanswered = consume.until_logged("unanswered offset commit", 90, |l| {
        l.contains("offset commit not answered")
    });
    let (_, (payment, doc)) = tokio::join!(unanswered, rates_json(&s));
    let down_for = killed.elapsed();
    assert_eq!(payment["ok"], false, "{doc:#}");
    let said = payment["error"].as_str().unwrap_or_default();
    assert!(
        said.contains(&s.config.kafka.bootstrap_servers) && said.contains("did not answer"),
        "rates --json names the broker that did not answer: {doc:#}"
    );

    // Back on the same data: the same process rejoins and finishes the stream.
    let restarting = Instant::now();
    broker.restart().await;
    // The group's coordinator answers before the held batch commits: its commit is then answered,
    // not held until librdkafka gives up on it.
    let deadline = Instant::now() + Duration::from_secs(60);
    while rates_json(&s).await.0["ok"] != true {
        assert!(
            Instant::now() < deadline,
            "the group's coordinator answers within 60 s of the restart"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let next_notified = format!("notification WHERE event_id = '{}'", next.event_id);
    let applied_while_down = count(&s.db, &next_notified).await == 1;
    hold_next.rollback().await.unwrap();
    tokio::time::timeout(Duration::from_secs(120), fed)
        .await
        .expect("every payment produced within 120 s of the restart")
        .unwrap();
    until_processed_by(&s, &mut consume, 300, 90).await;
    until_caught_up(&s, &mut consume, 60).await;
    eprintln!(
        "{at_kill} events processed at the kill, the broker down for {down_for:?}, all committed \
         {:?} after its restart began",
        restarting.elapsed()
    );
    let (payment, doc) = rates_json(&s).await;
    assert_eq!(payment["ok"], true, "{doc:#}");
    let lag: Vec<i64> = doc["data"]["lag"]
        .as_array()
        .unwrap_or_else(|| panic!("a lag per partition: {doc:#}"))
        .iter()
        .map(|p| p["lag"].as_i64().unwrap())
        .collect();
    assert_eq!(lag, [0, 0, 0], "{doc:#}");

    let (status, log) = consume.stop().await;
    assert!(status.success(), "consume ended {status}:\n{log}");
    let said = |what: fn(&str) -> bool| log.lines().filter(|l| what(l)).count();
    assert!(
        said(|l| l.contains("kafka receive error") && l.contains("All broker connections are down")) > 0
            && said(|l| l.contains("partitions revoked as lost")) > 0
            && said(|l| l.contains("partitions assigned") && l.contains(".t")) >= 2,
        "consume says the broker was down, its session lost, and its partitions assigned again:\n{log}"
    );
    assert_eq!(
        said(|l| l.contains("consume did not run")),
        0,
        "consume ran all along (no freeze):\n{log}"
    );
    let refused = said(|l| {
        l.contains("offset commit refused after no broker could be reached")
            || l.contains("offset commit accepted under a new group membership")
    });
    eprintln!(
        "the next batch applied while the broker was down: {applied_while_down}; commits refused \
         or accepted across the lost assignment, consume going on: {refused}"
    );
    if applied_while_down {
        assert!(
            refused > 0,
            "the batch applied while the broker was down had its commit refused, and consume said so:\n{log}"
        );
    }
    assert_applied_once(&s, 300).await;
    assert_eq!(processed(&s, "dlq").await, 0, "{log}");
}

/// The first of `events` (in the order they are produced) with no `processed_event` row.
async fn first_unprocessed(s: &Setup, events: &[PaymentSucceeded]) -> PaymentSucceeded {
    for e in events {
        let recorded = format!("processed_event WHERE event_id = '{}'", e.event_id);
        if count(&s.db, &recorded).await == 0 {
            return e.clone();
        }
    }
    panic!("every event was processed before the broker came back");
}

/// Waits (bounded) until the group has committed every partition to its high watermark.
async fn until_caught_up(s: &Setup, consume: &mut ConsumeChild, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let (kafka, group, topic) = (
            s.config.kafka.clone(),
            s.group.clone(),
            s.config.kafka.payment_topic.clone(),
        );
        let lag = tokio::task::spawn_blocking(move || {
            consumer_lag(&kafka, &group, &topic, Duration::from_secs(10))
        })
        .await
        .unwrap();
        if matches!(&lag, Ok(parts) if parts.iter().all(|p| p.lag == 0)) {
            return;
        }
        consume.assert_running("every offset was committed");
        assert!(
            Instant::now() < deadline,
            "not caught up within {secs}s: {lag:?}; consume's log:\n{}",
            consume.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// A failed offset commit: the member was evicted from the group while stopped between its
// database commit and its offset commit.

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// The real binary M1 is held inside its batch (its `processed_event` insert waits on a row the
/// test holds uncommitted), then frozen (SIGSTOP) until member M2 has taken the partitions over
/// (M1 evicted: no heartbeat). Thawed, M1 finishes its database work and its offset commit
/// fails: `consume` exits with the error, having logged that it did not run, and M2 — which
/// received the same batch — applies nothing twice. Both members commit as
/// `s.config.consumer.async_offset_commit` says.
///
/// Which way the late commit fails is a race inside librdkafka: a commit sent under M1's old
/// membership is refused by the broker, but when librdkafka's session timeout is served first
/// the assignment is revoked as lost and the commit is deferred until M1 has rejoined, then
/// accepted under the new membership. The consumer refuses its own commit of a batch applied
/// across a lost assignment, and a refusal after a freeze ends it even when the broker was also
/// unreachable, so both branches end M1 (`stream/commit.rs`). M1's log is printed when it does not
/// end.
async fn a_failed_offset_commit(s: &ConsumerSetup) {
    let d = s.dialect;
    let mode = if s.config.consumer.async_offset_commit {
        "async commit"
    } else {
        "sync commit"
    };
    let d = format!("{d}, {mode}");
    let (o, r) = create_order(&s.db, 42).await;
    let events: Vec<PaymentSucceeded> = (0..3).map(|_| payment(&o, &r, 42)).collect();
    for e in &events {
        send_event(s, &o, e).await;
    }
    let hold = hold_batch_of(s, &events[0]).await;
    let mut m1 = s
        .consume_command(&[])
        .env(
            "IDEMGUARD_CONSUMER__ASYNC_OFFSET_COMMIT",
            s.config.consumer.async_offset_commit.to_string(),
        )
        .env("IDEMGUARD_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let m1_stderr = collect_stderr(&mut m1);
    let pid = m1.id().unwrap();
    // M1 is inside its batch: the sinks before processed_event have committed.
    let deadline = Instant::now() + Duration::from_secs(60);
    while count(&s.db, "notification").await < 1 {
        assert!(Instant::now() < deadline, "{d}: M1 never reached its sinks");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    signal(pid, "-STOP");
    hold.rollback().await.unwrap(); // M1's insert goes through, uncommitted: M1 is frozen
    let m2 = s.start_member().await;
    m2.until("M2 took the partitions over", 120, |st| {
        get(&st.received) >= 3
    })
    .await;
    signal(pid, "-CONT");
    let thawed = Instant::now();
    let status = match tokio::time::timeout(Duration::from_secs(60), m1.wait()).await {
        Ok(status) => status.unwrap(),
        Err(_) => {
            m1.start_kill().unwrap();
            let _ = m1.wait().await;
            panic!(
                "{d}: M1 did not end within 60 s of its thaw; its stderr:\n{}",
                m1_stderr.await.unwrap()
            );
        }
    };
    let stderr = m1_stderr.await.unwrap();
    eprintln!("{d}: M1 ended {:?} after its thaw", thawed.elapsed());
    assert!(!status.success(), "{d}: M1 exits with the failed commit");
    assert!(stderr.contains("offset commit failed"), "{d}: {stderr}");
    assert!(
        stderr.contains("consume did not run"),
        "{d}: M1 says it was frozen: {stderr}"
    );
    m2.until("M2 handled the batch", 60, |st| {
        get(&st.dedup_hits) + get(&st.sink_duplicates) + get(&st.applied) >= 3
    })
    .await;
    let st = m2.stop().await;
    assert_eq!(get(&st.applied), 0, "{d}: M1 had applied the batch: {st:?}");
    assert_eq!(committed_total(s).await, 3, "{d}: M2 committed");
    assert_eq!(
        count(&s.db, "points_ledger").await,
        1,
        "{d}: one order, one payment"
    );
    assert_eq!(count(&s.db, "processed_event").await, 3, "{d}");
}

/// Holds the consumer inside the batch that carries `e`: the test's open transaction has
/// inserted `e`'s `processed_event` row, so the consumer's own insert — its last sink, after the
/// order, the points and the notification — waits on that row until the transaction ends.
async fn hold_batch_of(
    s: &ConsumerSetup,
    e: &PaymentSucceeded,
) -> sqlx::Transaction<'static, sqlx::Any> {
    let mut hold = s.db.pool.begin().await.unwrap();
    let sql = format!(
        "INSERT INTO processed_event (consumer_group, event_id, order_no, topic, kafka_partition, kafka_offset, outcome, processed_at, expire_at) VALUES ({}, 'x', 0, 0, 'held', 0, 0)",
        placeholders(s.dialect, 3)
    );
    sqlx::query(&sql)
        .bind(&s.group)
        .bind(&e.event_id)
        .bind(&e.order_no)
        .execute(&mut *hold)
        .await
        .unwrap();
    hold
}

/// Everything the child writes on stderr, once it has closed it (read as it comes, so the pipe
/// never fills up).
fn collect_stderr(child: &mut tokio::process::Child) -> tokio::task::JoinHandle<String> {
    use tokio::io::AsyncReadExt;
    let mut pipe = child.stderr.take().expect("stderr piped");
    tokio::spawn(async move {
        let mut out = Vec::new();
        let _ = pipe.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    })
}

/// A consumer test's world whose members commit their offsets synchronously.
async fn sync_commit_setup(dialect: Dialect) -> ConsumerSetup {
    let mut s = consumer_setup(dialect).await;
    s.config.consumer.async_offset_commit = false;
    s
}

/// … and asynchronously: each batch's commit answered before the next batch writes anything.
async fn async_commit_setup(dialect: Dialect) -> ConsumerSetup {
    let mut s = consumer_setup(dialect).await;
    s.config.consumer.async_offset_commit = true;
    s
}

per_dialect!(a_failed_offset_commit(&sync_commit_setup) => a_failed_offset_commit_ends_consume_and_the_redelivery_changes_nothing_postgres, a_failed_offset_commit_ends_consume_and_the_redelivery_changes_nothing_mysql);
per_dialect!(a_failed_offset_commit(&async_commit_setup) => a_refused_async_offset_commit_ends_consume_and_the_redelivery_changes_nothing_postgres, a_refused_async_offset_commit_ends_consume_and_the_redelivery_changes_nothing_mysql);
