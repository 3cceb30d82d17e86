//! What TLS costs, against plaintext in the same run, on the stack (`scripts/stack up`):
//!
//! (a) `idemguard trace` of one order — the headless twin as the CLI runs it (its own database
//!     pool, Redis connection and Kafka readers per trace) — against PostgreSQL 5432 / Redis
//!     6379 / Kafka 9092 and against their TLS twins 5433 (verify-full) / 6390 (mutual TLS) /
//!     9093 (stunnel, mutual TLS), topics of the bench's own on each broker; and the TLS
//!     handshakes one trace makes, counted by the servers: PostgreSQL's new sessions, Redis's
//!     connections received, stunnel's accepted connections;
//! (b) lock acquire + release cycles on one node (the lock layer's own connection, reused),
//!     Redis 6379 against 6390, with the connections each round opened.
//!
//! Medians of `IDEMGUARD_BENCH_ROUNDS` rounds (default 5), `IDEMGUARD_BENCH_CYCLES` lock cycles
//! a side and round (default 20,000: about a second in a release build, so that a round is not
//! decided by the one connect it makes); the sides take turns going first. Ratios TLS / plaintext.
//! Run: `cargo bench --bench tls`.

#[path = "support/stats.rs"]
mod stats;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idemguard::config::{Config, ConfigSource, KafkaSecurityProtocol};
use idemguard::console::cli::headless;
use idemguard::contracts::{Instance, OrderNo, RequestId, TraceTarget};
use idemguard::db::orders::{NewOrder, Orders};
use idemguard::db::{migrate, Database};
use idemguard::lock::{Acquisition, Locks, RedisAccess};
use idemguard::trace::Tracer;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use stats::{knob, median};

const TRACES: usize = 10;
const TASKS: usize = 16;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

fn stack_file(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".stack/tls")
        .join(name);
    assert!(p.exists(), "{}: run `scripts/stack up`", p.display());
    p.display().to_string()
}

fn plaintext() -> Config {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/local.toml");
    let mut c = Config::load(&ConfigSource {
        file: Some(file),
        env: vec![],
    })
    .unwrap();
    c.redis.redlock_nodes = vec![];
    c.redis.command_timeout = Duration::from_secs(3);
    c
}

fn tls() -> Config {
    let mut c = plaintext();
    let ca = stack_file("ca.pem");
    c.database.url = format!(
        "postgres://idemguard@localhost:5433/postgres?sslmode=verify-full&sslrootcert={ca}"
    );
    c.database.password_file = stack_file("database.password");
    c.redis.url = "rediss://idemguard@localhost:6390".into();
    c.redis.tls_ca_file = ca.clone();
    c.redis.tls_cert_file = stack_file("client.pem");
    c.redis.tls_key_file = stack_file("client.key");
    c.redis.password_file = stack_file("redis.password");
    c.kafka.bootstrap_servers = "localhost:9093".into();
    c.kafka.security_protocol = KafkaSecurityProtocol::Ssl;
    c.kafka.ssl_ca_file = ca;
    c.kafka.ssl_cert_file = stack_file("client.pem");
    c.kafka.ssl_key_file = stack_file("client.key");
    c
}

/// A database, migrated, with one order, and topics of the bench's own: the order's ID.
async fn world(config: &mut Config) -> (String, Database, String) {
    let suffix = format!("{:x}", rand::random::<u32>());
    let name = format!("igb_tls_{suffix}");
    let server = {
        let mut u = url::Url::parse(&config.database.url).unwrap();
        u.set_path("/postgres");
        u.to_string()
    };
    let admin = Database::connect_url(config, &server)
        .await
        .expect("the database");
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&admin.pool)
        .await
        .unwrap();
    admin.pool.close().await;
    let mut u = url::Url::parse(&server).unwrap();
    u.set_path(&format!("/{name}"));
    config.database.url = u.to_string();
    let db = Database::connect(config).await.unwrap();
    migrate::migrate(&db).await.unwrap();
    sqlx::query("INSERT INTO inventory (sku_id, stock, updated_at) VALUES (1, 100, 0)")
        .execute(&db.pool)
        .await
        .unwrap();
    let instance = Instance::current();
    let orders = Orders::new(db.clone(), Tracer::log_only(&instance));
    let order_no = OrderNo::generate();
    orders
        .create(&NewOrder {
            request_id: RequestId::generate("APP", "ORDER"),
            order_no: order_no.clone(),
            user_id: 7,
            sku_id: 1,
            quantity: 1,
            amount: 1999,
            fence: None,
        })
        .await
        .expect("the order");
    let admin: AdminClient<DefaultClientContext> =
        idemguard::kafka_client::client_config(&config.kafka)
            .create()
            .unwrap();
    let topics: Vec<String> = ["payment", "trace"]
        .iter()
        .map(|t| format!("igb.{t}.{suffix}"))
        .collect();
    let new: Vec<NewTopic> = topics
        .iter()
        .map(|t| NewTopic::new(t, 3, TopicReplication::Fixed(1)))
        .collect();
    admin
        .create_topics(&new, &AdminOptions::new())
        .await
        .unwrap();
    config.kafka.payment_topic = topics[0].clone();
    config.kafka.trace_topic = topics[1].clone();
    (name, db, order_no.as_str().to_string())
}

async fn drop_world(config: &Config, name: &str) {
    let server = {
        let mut u = url::Url::parse(&config.database.url).unwrap();
        u.set_path("/postgres");
        u.to_string()
    };
    if let Ok(admin) = Database::connect_url(config, &server).await {
        let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&admin.pool)
            .await;
    }
    let admin: AdminClient<DefaultClientContext> =
        idemguard::kafka_client::client_config(&config.kafka)
            .create()
            .unwrap();
    let _ = admin
        .delete_topics(
            &[&config.kafka.payment_topic, &config.kafka.trace_topic],
            &AdminOptions::new(),
        )
        .await;
}

/// New connections the TLS servers saw: PostgreSQL sessions (all databases), Redis connections
/// received, stunnel's accepted connections on the Kafka TLS port.
async fn tls_connections(admin: &Database) -> (i64, i64, usize) {
    tokio::time::sleep(Duration::from_millis(1200)).await; // PostgreSQL flushes its statistics
    let pg: i64 = sqlx::query_scalar("SELECT CAST(SUM(sessions) AS BIGINT) FROM pg_stat_database")
        .fetch_one(&admin.pool)
        .await
        .unwrap();
    let redis = RedisAccess::of(&tls().redis)
        .client(&tls().redis.url)
        .unwrap();
    let mut c = redis.get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(&mut c)
        .await
        .unwrap();
    let received = info
        .lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let log =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(".stack/stunnel.log"))
            .unwrap_or_default();
    let accepted = log
        .lines()
        .filter(|l| l.contains("[kafka-tls] accepted connection"))
        .count();
    (pg, received, accepted)
}

async fn trace_ms(config: &Config, order_no: &str) -> f64 {
    let target = TraceTarget::classify(order_no);
    let started = Instant::now();
    let doc = headless::trace(config, &target).await;
    assert!(
        doc.ok && doc.data.found,
        "the trace of {order_no}: {:?}",
        doc.backends
    );
    started.elapsed().as_secs_f64() * 1000.0
}

async fn lock_cycles(config: &Config, cycles: usize) -> f64 {
    let instance = Instance::current();
    let locks = Locks::from_config(config, &instance, Tracer::log_only(&instance)).unwrap();
    let next = Arc::new(AtomicUsize::new(0));
    let round = format!("{:x}", rand::random::<u32>());
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (locks, next, round) = (locks.clone(), next.clone(), round.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= cycles {
                        return;
                    }
                    let key = format!("lock:order:BT{round}x{i}");
                    match locks.acquire(&key).await.expect("acquire") {
                        Acquisition::Held(g) => {
                            assert!(g.release().await.expect("release").released())
                        }
                        Acquisition::Contended(c) => panic!("distinct keys never contend: {c:?}"),
                    }
                }
            })
        })
        .collect();
    futures::future::join_all(tasks).await;
    cycles as f64 / started.elapsed().as_secs_f64()
}

async fn run() {
    let rounds: usize = knob("IDEMGUARD_BENCH_ROUNDS", 5);
    let cycles: usize = knob("IDEMGUARD_BENCH_CYCLES", 20_000);
    let (mut plain, mut secure) = (plaintext(), tls());
    let (plain_db_name, _plain_db, plain_order) = world(&mut plain).await;
    let (tls_db_name, tls_db, tls_order) = world(&mut secure).await;
    // Warm both (the first connect to each server, the first read of each topic).
    trace_ms(&plain, &plain_order).await;
    trace_ms(&secure, &tls_order).await;

    let before = tls_connections(&tls_db).await;
    let mut per_round = Vec::new();
    let (mut t_plain, mut t_tls) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let mut p = Vec::new();
        let mut s = Vec::new();
        for _ in 0..TRACES {
            p.push(trace_ms(&plain, &plain_order).await);
            s.push(trace_ms(&secure, &tls_order).await);
        }
        let (mp, ms) = (median(&p), median(&s));
        println!("(a) round {}: trace median plaintext {mp:.1} ms, TLS {ms:.1} ms, ratio (plaintext/TLS speed) {:.2}", round + 1, mp / ms);
        per_round.push(mp / ms);
        t_plain.push(mp);
        t_tls.push(ms);
    }
    let after = tls_connections(&tls_db).await;
    let traces = (rounds * TRACES) as f64;
    // The counting itself opened one PostgreSQL session and one Redis connection.
    let pg = (after.0 - before.0 - 1) as f64 / traces;
    let redis = (after.1 - before.1 - 1) as f64 / traces;
    let kafka = (after.2 - before.2) as f64 / traces;
    println!(
        "(a) trace of one order: median plaintext {:.1} ms, TLS {:.1} ms; speed TLS/plaintext {:.2} (median of rounds)",
        median(&t_plain),
        median(&t_tls),
        median(&per_round)
    );
    println!(
        "(a) TLS handshakes per trace: {:.1} PostgreSQL + {:.1} Redis + {:.1} Kafka = {:.1}",
        pg,
        redis,
        kafka,
        pg + redis + kafka
    );

    let mut ratios = Vec::new();
    let (mut c_plain, mut c_tls) = (Vec::new(), Vec::new());
    lock_cycles(&plain, cycles / 10).await;
    lock_cycles(&secure, cycles / 10).await;
    for round in 0..rounds {
        let before = tls_connections(&tls_db).await.1;
        let (p, s) = if round % 2 == 0 {
            let p = lock_cycles(&plain, cycles).await;
            (p, lock_cycles(&secure, cycles).await)
        } else {
            let s = lock_cycles(&secure, cycles).await;
            (lock_cycles(&plain, cycles).await, s)
        };
        let opened = tls_connections(&tls_db).await.1 - before - 1;
        println!("(b) round {}: lock acquire+release plaintext {p:.0}/s, TLS {s:.0}/s, ratio {:.2}; TLS connections opened {opened} for {cycles} cycles", round + 1, s / p);
        ratios.push(s / p);
        c_plain.push(p);
        c_tls.push(s);
    }
    println!(
        "(b) lock cycle: median plaintext {:.0}/s, TLS {:.0}/s; TLS/plaintext {:.2} (median of rounds)",
        median(&c_plain),
        median(&c_tls),
        median(&ratios)
    );
    drop_world(&plain, &plain_db_name).await;
    drop_world(&secure, &tls_db_name).await;
}
