//! The README's guarantees about faults, each proven under the fault it is about, against the
//! real services, on both dialects:
//! - line 3: a database that kills the consumer's sessions mid-batch or refuses connections is
//!   retried with backoff — nothing to the DLQ, nothing lost or doubled, `db_retries` counted;
//! - line 3: a member killed with a batch applied but its offsets not committed loses its
//!   partitions to the other member, which applies nothing twice;
//! - line 3: two members paying overlapping orders in reverse order never deadlock;
//! - API: a business refusal stored as FAILED is replayed, byte for byte, even once the stock is
//!   back or the SKU exists.
//!
//! Every test has its own database, topics, group and keys, and removes them, pass or fail.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::consumer::*;
use common::*;
use idemguard::config::Dialect;
use idemguard::contracts::{Instance, OrderNo, PaymentSucceeded};
use idemguard::db::orders::Orders;
use idemguard::db::Database;
use idemguard::stream::sinks::{self, Delivery, PaidDecision};
use idemguard::stream::ConsumeStats;
use idemguard::trace::Tracer;
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
    let world = consumer_setup(dialect).await;
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

async fn admin(dialect: Dialect) -> Database {
    Database::connect_url(&local_config(), &server_url(dialect))
        .await
        .expect("the test server is reachable")
}

impl Setup {
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

/// The real binary as a member of the test's group, aborting right after its first batch's
/// database commit and before its offset commit. Its log lines are collected.
struct CrashingMember {
    child: tokio::process::Child,
    log: Arc<std::sync::Mutex<Vec<String>>>,
}

fn spawn_crashing_member(s: &Setup) -> CrashingMember {
    let mut child = s
        .consume_command(&["--crash-after-db-commit", "1"])
        .env("IDEMGUARD_CONSUMER__BATCH_SIZE", "50")
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
    CrashingMember { child, log }
}

impl CrashingMember {
    /// The partitions of its latest non-empty assignment, once it has one (bounded).
    async fn assignment(&self, secs: u64) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let found = self
                .log
                .lock()
                .unwrap()
                .iter()
                .rev()
                .find(|l| l.contains("partitions assigned") && l.contains(".t"))
                .cloned();
            if let Some(line) = found {
                return line;
            }
            assert!(
                Instant::now() < deadline,
                "the binary member got no partition within {secs}s: {:?}",
                self.log.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
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

// ---------------------------------------------------------------------------------------------
// Claim: "Business refusals (out of stock, unknown SKU) are stored as FAILED, so a retry gets
// the same answer."

async fn a_refusal_is_replayed(s: &Setup) {
    let dialect = s.dialect;
    let server = idemguard::api::server::start(s.config.clone(), "127.0.0.1:0")
        .await
        .expect("service starts");
    let base = format!("http://{}", server.addr);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let orders = Orders::new(s.db.clone(), Tracer::log_only(&Instance::current()));
    let redis = redis::Client::open(s.config.redis.url.as_str()).unwrap();
    let mut fast_path = redis.get_multiplexed_async_connection().await.unwrap();
    let (sold_out, unknown) = (11, 12);
    orders.set_stock(sold_out, 0).await.unwrap();
    let post = |key: String, sku: i64| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let body =
                serde_json::json!({"userId": 42, "skuId": sku, "quantity": 1, "amount": 1999});
            let r = http
                .post(format!("{base}/orders"))
                .header("Idempotency-Key", key)
                .json(&body)
                .send()
                .await
                .unwrap();
            let replayed = r
                .headers()
                .get("idempotent-replayed")
                .map(|v| v.to_str().unwrap().to_string());
            (r.status().as_u16(), replayed, r.bytes().await.unwrap())
        }
    };
    for (sku, problem) in [(sold_out, "out-of-stock"), (unknown, "unknown-sku")] {
        let key = format!("APP:ORDER:20261130:{}", uuid::Uuid::now_v7());
        let (status, replayed, first) = post(key.clone(), sku).await;
        assert_eq!(
            status,
            422,
            "{dialect}: {}",
            String::from_utf8_lossy(&first)
        );
        assert!(replayed.is_none());
        let p: serde_json::Value = serde_json::from_slice(&first).unwrap();
        assert!(
            p["type"].as_str().unwrap().ends_with(problem),
            "{dialect}: {p}"
        );
        // The world changes — stock arrives, the SKU is created — and the retry still gets the
        // first answer: from the fast path, then from the database record alone.
        orders.set_stock(sku, 10).await.unwrap();
        for from in ["fast path", "database"] {
            if from == "database" {
                let _: () = redis::cmd("DEL")
                    .arg(format!("idem:{key}"))
                    .query_async(&mut fast_path)
                    .await
                    .unwrap();
            }
            let (status, replayed, again) = post(key.clone(), sku).await;
            assert_eq!(
                (status, replayed.as_deref()),
                (422, Some("true")),
                "{dialect}, {problem} from the {from}: {}",
                String::from_utf8_lossy(&again)
            );
            assert_eq!(
                again, first,
                "{dialect}, {problem} from the {from}: the same bytes"
            );
        }
        let stored = count(
            &s.db,
            &format!("idempotency_record WHERE request_id = '{key}' AND status = 'FAILED'"),
        )
        .await;
        assert_eq!(stored, 1, "{dialect}: the refusal is stored as FAILED");
    }
    assert_eq!(
        count(&s.db, "order_record").await,
        0,
        "{dialect}: a retry of a refusal created an order"
    );
    server.shutdown.cancel();
    server.done.await.unwrap().unwrap();
}

per_dialect!(a_refusal_is_replayed(&setup) => a_refusal_is_replayed_byte_for_byte_postgres, a_refusal_is_replayed_byte_for_byte_mysql);
