//! `finalize` must never answer FAILED for a request whose order can still be
//! created. The attack, against the real binary on both dialects: hold `SELECT … FOR UPDATE` on a
//! SKU's stock row, POST /orders with key KA (the create routine blocks on that row), `kill -9`
//! the service, once its heartbeat has expired run `idemguard finalize KA --allow-actions`,
//! release the row lock. The dead service's statement still commits its order. Before the fix
//! finalize wrote FAILED and the order appeared after it: FAILED + an order, and a client told
//! to send a new key. The service runs with a heartbeat of [`HEARTBEAT_TTL`], so its expiry is
//! waited for in about a second rather than the default's ten.

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use idemguard::api::idempotency::{self, ClaimRequest, IdempotencyRecord};
use idemguard::api::server::OrderView;
use idemguard::config::{Config, Dialect};
use idemguard::console::report;
use idemguard::contracts::{now_ms, Instance, OrderNo, RequestId};
use idemguard::db::orders::{find_order, NewOrder, OrderError, OrderKey, Orders};
use idemguard::db::{migrate, Database};
use idemguard::lock::Locks;
use idemguard::ops::{Action, ActionOutcome, Actions};
use idemguard::trace::Tracer;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

fn idemguard(config: &Config) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_idemguard"));
    c.arg("--config")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml"))
        .env("IDEMGUARD_DATABASE__URL", &config.database.url)
        .env("IDEMGUARD_TRACE__ENABLED", "false")
        .env("IDEMGUARD_LOG", "error")
        .kill_on_drop(true);
    c
}

/// The killed services' heartbeat TTL (`instance.heartbeat_ttl`): what finalize's liveness
/// check waits out after a kill.
const HEARTBEAT_TTL: &str = "1s";

/// `idemguard serve` on a random port with a heartbeat of [`HEARTBEAT_TTL`]; `lease` overrides
/// idempotency.lease.
async fn serve(config: &Config, lease: Option<&str>) -> (Child, String) {
    let mut cmd = idemguard(config);
    cmd.args(["serve", "--listen", "127.0.0.1:0"])
        .env("IDEMGUARD_INSTANCE__HEARTBEAT_TTL", HEARTBEAT_TTL)
        .stdout(Stdio::piped());
    if let Some(l) = lease {
        cmd.env("IDEMGUARD_IDEMPOTENCY__LEASE", l);
    }
    let mut child = cmd.spawn().expect("start idemguard serve");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("serve starts within 30 s")
        .unwrap()
        .expect("serve prints its address");
    let base = line.rsplit(' ').next().unwrap().to_string();
    assert!(base.starts_with("http://127.0.0.1:"), "{line}");
    (child, base)
}

/// `idemguard finalize KEY --allow-actions --json`: (exit status, the ActionResult).
async fn finalize_cli(config: &Config, key: &str) -> (Option<i32>, serde_json::Value) {
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        idemguard(config)
            .args(["finalize", key, "--allow-actions", "--json"])
            .output(),
    )
    .await
    .expect("finalize answers within 30 s")
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    (
        out.status.code(),
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("finalize --json: {e}: {text}")),
    )
}

/// The session of `conn` (PostgreSQL's backend pid, MariaDB's connection id).
async fn session_of(conn: &mut sqlx::AnyConnection, dialect: Dialect) -> i64 {
    let sql = match dialect {
        Dialect::Postgres => "SELECT CAST(pg_backend_pid() AS BIGINT)",
        Dialect::Mysql => "SELECT CAST(CONNECTION_ID() AS SIGNED)",
    };
    sqlx::query_scalar::<_, i64>(sql)
        .fetch_one(conn)
        .await
        .unwrap()
}

/// Statements of this test database waiting for a row lock, other than `holder`'s: the create
/// routine of the killed service, blocked on the stock row. MariaDB's INNODB_TRX does not list a
/// wait taken while the optimizer reads a row by primary key, so there the process list says it
/// — and it lists a statement whose answer has been sent for as long as the server takes to
/// finish it: the holder's `SELECT … FOR UPDATE`, or an earlier one of these counts (whose text
/// holds the pattern), was seen there in up to 1 % of tries on a busy machine. Counted, it let
/// the test kill the service before its POST had reached the database (no record at all).
async fn lock_waiters(db: &Database, holder: i64) -> i64 {
    let sql = match db.dialect() {
        Dialect::Postgres => "SELECT CAST(COUNT(*) AS BIGINT) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> $1",
        Dialect::Mysql => {
            "SELECT CAST(COUNT(*) AS SIGNED) FROM information_schema.PROCESSLIST \
             WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND ID <> ? AND COMMAND <> 'Sleep' \
             AND INFO LIKE '%FROM inventory%FOR UPDATE%' AND INFO NOT LIKE '%PROCESSLIST%'"
        }
    };
    sqlx::query_scalar::<_, i64>(sql)
        .bind(holder)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// Whether a finalize waits for the record row's lock (which the blocked create holds).
async fn finalize_waits(db: &Database) -> bool {
    let sql = match db.dialect() {
        Dialect::Postgres => "SELECT CAST(COUNT(*) AS BIGINT) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%FROM idempotency_record%FOR UPDATE%'",
        Dialect::Mysql => {
            "SELECT CAST(COUNT(*) AS SIGNED) FROM information_schema.PROCESSLIST \
             WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND COMMAND <> 'Sleep' \
             AND INFO LIKE '%FROM idempotency_record%FOR UPDATE%' AND INFO NOT LIKE '%PROCESSLIST%'"
        }
    };
    sqlx::query_scalar::<_, i64>(sql)
        .fetch_one(&db.pool)
        .await
        .unwrap()
        > 0
}

/// Statements of this test database still running (other than ours): the killed service's
/// create ends some milliseconds after its lock wait does, when it has committed.
async fn statements_running(db: &Database) -> i64 {
    let sql = match db.dialect() {
        Dialect::Postgres => "SELECT CAST(COUNT(*) AS BIGINT) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend' AND state = 'active'",
        Dialect::Mysql => "SELECT CAST(COUNT(*) AS SIGNED) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND COMMAND <> 'Sleep'",
    };
    sqlx::query_scalar::<_, i64>(sql)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

async fn wait_for<F, Fut>(what: &str, limit: Duration, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !done().await {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn order_body(sku: i64) -> serde_json::Value {
    serde_json::json!({"userId": 42, "skuId": sku, "quantity": 1, "amount": 1999})
}

/// The attack up to the kill: returns the killed service's record (PROCESSING) and the open
/// transaction holding the stock row.
async fn blocked_create_then_kill(
    config: &Config,
    db: &Database,
    sku: i64,
    lease: Option<&str>,
) -> (IdempotencyRecord, sqlx::Transaction<'static, sqlx::Any>) {
    let (mut child, base) = serve(config, lease).await;
    let mut holder = db.pool.begin().await.unwrap();
    let lock = format!("SELECT stock FROM inventory WHERE sku_id = {sku} FOR UPDATE");
    sqlx::query(&lock).fetch_one(&mut *holder).await.unwrap();
    // A statement after it on the same connection: the SELECT has ended on the server too.
    let holder_session = session_of(&mut holder, db.dialect()).await;
    let key = RequestId::generate("APP", "ORDER").to_string();
    let post = reqwest::Client::new()
        .post(format!("{base}/orders"))
        .header("Idempotency-Key", &key)
        .json(&order_body(sku))
        .timeout(Duration::from_secs(60))
        .send();
    let in_flight = tokio::spawn(async move {
        let r = post.await?;
        let status = r.status();
        Ok::<_, reqwest::Error>(format!("{status} {}", r.text().await?))
    });
    let deadline = Instant::now() + Duration::from_secs(15);
    while lock_waiters(db, holder_session).await == 0 {
        if in_flight.is_finished() {
            panic!(
                "POST /orders answered instead of blocking on the stock row: {:?}",
                in_flight.await.unwrap()
            );
        }
        assert!(
            Instant::now() < deadline,
            "the create routine blocks on the stock row: not within 15 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    child.kill().await.unwrap(); // SIGKILL
    let _ = in_flight.await;
    let rec = idempotency::get(db, &key)
        .await
        .unwrap()
        .expect("the service claimed the record before its create blocked");
    assert_eq!(rec.status, "PROCESSING", "{rec:?}");
    (rec, holder)
}

/// Waits (bounded) until the killed owner of `rec` has no heartbeat: its TTL ran out.
async fn until_no_heartbeat(config: &Config, rec: &IdempotencyRecord) {
    let me = Instance::current();
    let locks = Locks::from_config(config, &me, Tracer::log_only(&me)).unwrap();
    wait_for(
        "the killed owner's heartbeat expires",
        Duration::from_secs(10),
        || async { !locks.liveness().is_alive(&rec.owner).await.unwrap() },
    )
    .await;
}

/// After everything has settled: a FAILED record never coexists with an order.
async fn assert_never_failed_with_order(
    db: &Database,
    key: &str,
    dialect: Dialect,
) -> Option<idemguard::db::orders::OrderRecord> {
    let rec = idempotency::get(db, key).await.unwrap().unwrap();
    let order = find_order(db, OrderKey::RequestId(key)).await.unwrap();
    assert!(
        !(rec.status == "FAILED" && order.is_some()),
        "{dialect}: record FAILED although order {:?} exists",
        order.map(|o| o.order_no)
    );
    if rec.status == "SUCCEEDED" {
        let o = order.as_ref().expect("SUCCEEDED names an order");
        assert_eq!(
            rec.response_body.as_deref(),
            Some(serde_json::to_string(&OrderView::from(o)).unwrap().as_str()),
            "{dialect}: the stored response is the order's"
        );
    }
    let contradictions = report::contradictions(db, 0, i64::MAX).await.unwrap();
    assert!(
        contradictions.iter().all(|c| c.request_id != key),
        "{dialect}: {contradictions:?}"
    );
    order
}

/// The repro exactly, with the default lease (30 s): after the kill the owner's heartbeat runs
/// out but its lease is not over, so finalize refuses; the order then commits, and finalize
/// answers SUCCEEDED with the order's response.
async fn repro_with_the_default_lease(dialect: Dialect) {
    let (config, db) = fresh(dialect, 21).await;
    let (config, db) = (&config, &db);
    let (rec, holder) = blocked_create_then_kill(config, db, 21, None).await;
    until_no_heartbeat(config, &rec).await;
    assert!(
        rec.lease_until > now_ms() + 20_000,
        "{dialect}: the lease runs on: {rec:?}"
    );
    let key = rec.request_id.as_str();
    let (code, result) = finalize_cli(config, key).await;
    assert_eq!(
        (code, result["outcome"].as_str()),
        (Some(4), Some("refused")),
        "{dialect}: the lease is not over: {result}"
    );
    assert!(
        result["detail"].as_str().unwrap().contains("lease"),
        "{dialect}: {result}"
    );
    holder.rollback().await.unwrap();
    wait_for(
        "the dead service's statement ends",
        Duration::from_secs(15),
        || async { statements_running(db).await == 0 },
    )
    .await;
    assert!(
        assert_never_failed_with_order(db, key, dialect)
            .await
            .is_some(),
        "{dialect}: the killed instance's statement committed its order"
    );
    let (code, result) = finalize_cli(config, key).await;
    assert_finalized_with_the_order(code, &result, dialect);
    assert_never_failed_with_order(db, key, dialect).await;
    assert_eq!(
        common::count(db, "order_record").await,
        1,
        "{dialect}: one order, no second one anywhere"
    );
    db.pool.close().await;
}

/// `idemguard finalize` answered done, SUCCEEDED with the API's 201: it found the order.
fn assert_finalized_with_the_order(
    code: Option<i32>,
    result: &serde_json::Value,
    dialect: Dialect,
) {
    assert_eq!(
        (code, result["outcome"].as_str()),
        (Some(0), Some("done")),
        "{dialect}: {result}"
    );
    let detail = result["detail"].as_str().unwrap_or_default();
    assert!(detail.starts_with("SUCCEEDED 201"), "{dialect}: {result}");
}

/// The same with a lease of 2 s, so finalize gets past the lease and liveness checks while the
/// dead instance's create is still in flight: only the database can order the two. Finalize
/// waits on the record row the create holds; the stock row is released during that wait; the
/// order commits, and finalize sees it: SUCCEEDED — never FAILED.
async fn race_past_the_lease(dialect: Dialect) {
    let (config, db) = fresh(dialect, 22).await;
    let (config, db) = (&config, &db);
    let (rec, holder) = blocked_create_then_kill(config, db, 22, Some("2s")).await;
    until_no_heartbeat(config, &rec).await;
    wait_for("the lease runs out", Duration::from_secs(5), || async {
        now_ms() > rec.lease_until
    })
    .await;
    let key = rec.request_id.clone();
    let finalize = tokio::spawn({
        let (config, key) = (config.clone(), key.clone());
        async move { finalize_cli(&config, &key).await }
    });
    wait_for(
        "finalize waits for the record row",
        Duration::from_secs(20),
        || async { finalize_waits(db).await },
    )
    .await;
    holder.rollback().await.unwrap();
    let (code, result) = finalize.await.unwrap();
    wait_for(
        "the dead service's statement ends",
        Duration::from_secs(15),
        || async { statements_running(db).await == 0 },
    )
    .await;
    let order = assert_never_failed_with_order(db, &key, dialect).await;
    assert!(
        order.is_some(),
        "{dialect}: the killed instance's statement committed its order"
    );
    assert_finalized_with_the_order(code, &result, dialect);
    assert_eq!(
        common::count(db, "order_record").await,
        1,
        "{dialect}: one order, no second one anywhere"
    );
    db.pool.close().await;
}

/// A database of its own (so lock waiters are this scenario's) with stock for `sku`.
async fn fresh(dialect: Dialect, sku: i64) -> (Config, Database) {
    let (config, db) = common::migrated_database(dialect).await;
    Orders::new(db.clone(), Tracer::log_only(&Instance::current()))
        .set_stock(sku, 10)
        .await
        .unwrap();
    (config, db)
}

/// Both scenarios at once (each waits about a second for the dead owner's heartbeat to expire).
async fn finalize_against_an_in_flight_create(dialect: Dialect) {
    tokio::join!(
        repro_with_the_default_lease(dialect),
        race_past_the_lease(dialect)
    );
}

per_dialect!(finalize_against_an_in_flight_create => finalize_against_an_in_flight_create_postgres, finalize_against_an_in_flight_create_mysql);

/// The other order of the race: finalize answered FAILED first (422 request-abandoned), then a
/// create of that request id arrives (a paused instance waking up): the routine — installed by
/// `migrate` over a v2 database — refuses it and writes nothing, and a retry with the key
/// replays the 422.
async fn a_create_after_failed_writes_nothing(dialect: Dialect) {
    let (config, db) = common::migrated_database(dialect).await;
    // A v2 database: the old routine gone, versions 3 and later not recorded. `migrate` upgrades
    // it to the current schema.
    let drop = if dialect == Dialect::Postgres {
        "DROP FUNCTION order_record_create"
    } else {
        "DROP PROCEDURE order_record_create"
    };
    sqlx::Executor::execute(&db.pool, drop).await.unwrap();
    sqlx::query("DELETE FROM idemguard_schema_version WHERE version >= 3")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO idemguard_schema_version (version, applied_at) VALUES (2, 0)")
        .execute(&db.pool)
        .await
        .unwrap();
    let upgraded = migrate::migrate(&db).await.unwrap();
    assert_eq!(
        (upgraded.version_before, upgraded.version_after),
        (2, migrate::SCHEMA_VERSION),
        "{dialect}"
    );

    let orders = Orders::new(db.clone(), Tracer::log_only(&Instance::current()));
    orders.set_stock(23, 10).await.unwrap();
    let key = RequestId::generate("APP", "ORDER");
    let hash = idempotency::request_hash("POST", "/orders", &order_body(23));
    let claim = ClaimRequest {
        request_id: key.as_str(),
        biz_type: "ORDER",
        request_hash: &hash,
        owner: &format!("dead-{}", common::unique_suffix()),
        fence: 0,
        lease_ms: 1,
        retention_ms: 86_400_000,
    };
    assert_eq!(
        idempotency::claim(&db, &claim).await.unwrap(),
        idempotency::Claim::New
    );
    tokio::time::sleep(Duration::from_millis(5)).await;
    let me = Instance::current();
    let ops = Actions::new(
        &config,
        db.clone(),
        Locks::from_config(&config, &me, Tracer::log_only(&me)).unwrap(),
        Tracer::log_only(&me),
        true,
    )
    .await;
    let r = ops
        .run(&Action::Finalize {
            request_id: key.to_string(),
            expect_version: None,
            reason: Some("incident 15".into()),
        })
        .await;
    assert_eq!(r.outcome, ActionOutcome::Done, "{dialect}: {}", r.detail);
    assert!(
        r.detail.starts_with("FAILED 422"),
        "{dialect}: {}",
        r.detail
    );

    let late = NewOrder {
        request_id: key.clone(),
        order_no: OrderNo::generate(),
        user_id: 42,
        sku_id: 23,
        quantity: 1,
        amount: 1999,
        fence: None,
    };
    match orders.create(&late).await {
        Err(OrderError::RequestAbandoned { request_id }) => assert_eq!(request_id, key.as_str()),
        other => panic!("{dialect}: a create after FAILED must be refused, got {other:?}"),
    }
    assert_eq!(
        common::count(&db, "order_record").await,
        0,
        "{dialect}: no order"
    );
    assert_eq!(
        orders.stock_of(23).await.unwrap(),
        Some(10),
        "{dialect}: no stock taken"
    );
    // Without a record (the idempotency.enabled = false fault switch) the routine still creates.
    let unrecorded = NewOrder {
        request_id: RequestId::generate("APP", "ORDER"),
        order_no: OrderNo::generate(),
        ..late.clone()
    };
    assert!(
        !orders.create(&unrecorded).await.unwrap().is_replay(),
        "{dialect}"
    );

    // The client's retry with the same key replays the 422, which says: send a new key.
    let (mut child, base) = serve(&config, None).await;
    let r = reqwest::Client::new()
        .post(format!("{base}/orders"))
        .header("Idempotency-Key", key.as_str())
        .json(&order_body(23))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        reqwest::StatusCode::UNPROCESSABLE_ENTITY,
        "{dialect}"
    );
    let p: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        p["type"], "https://idemguard.dev/problems/request-abandoned",
        "{dialect}: {p}"
    );
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains("new Idempotency-Key"),
        "{p}"
    );
    child.kill().await.unwrap();
    assert_eq!(
        common::count(&db, &format!("order_record WHERE req_id = '{key}'")).await,
        0,
        "{dialect}"
    );
    db.pool.close().await;
}

per_dialect!(a_create_after_failed_writes_nothing => a_create_after_failed_writes_nothing_postgres, a_create_after_failed_writes_nothing_mysql);

/// The report names a record whose status contradicts the order tables.
async fn the_report_lists_a_failed_record_with_an_order(dialect: Dialect) {
    let (_config, db) = common::migrated_database(dialect).await;
    let orders = Orders::new(db.clone(), Tracer::log_only(&Instance::current()));
    orders.set_stock(24, 10).await.unwrap();
    let key = RequestId::generate("APP", "ORDER");
    let new = NewOrder {
        request_id: key.clone(),
        order_no: OrderNo::generate(),
        user_id: 42,
        sku_id: 24,
        quantity: 1,
        amount: 1999,
        fence: None,
    };
    let order = orders.create(&new).await.unwrap().into_order();
    // What the race left before the fix: the order, and a record that says FAILED.
    let ph = common::placeholders(dialect, 7);
    sqlx::query(&format!(
        "INSERT INTO idempotency_record (request_id, biz_type, request_hash, status, owner, lease_until, created_at, updated_at, expire_at) \
         VALUES ({ph}, 0, 1)"
    ))
    .bind(key.as_str())
    .bind("ORDER")
    .bind("h")
    .bind("FAILED")
    .bind("dead")
    .bind(0i64)
    .bind(idemguard::contracts::now_ms())
    .execute(&db.pool)
    .await
    .unwrap();
    let found = report::contradictions(&db, 0, i64::MAX).await.unwrap();
    assert_eq!(found.len(), 1, "{dialect}: {found:?}");
    assert_eq!(
        (
            found[0].request_id.as_str(),
            found[0].status.as_str(),
            found[0].order_no.as_str()
        ),
        (key.as_str(), "FAILED", order.order_no.as_str())
    );
    assert_eq!(found[0].problem, "failed_with_order");
    db.pool.close().await;
}

per_dialect!(the_report_lists_a_failed_record_with_an_order => the_report_lists_a_failed_record_with_an_order_postgres, the_report_lists_a_failed_record_with_an_order_mysql);

/// Finalize's wait for the record row is bounded: while a create transaction holds it, finalize
/// gives up after 5 s, says why, and writes nothing.
async fn finalize_waits_at_most_five_seconds(dialect: Dialect) {
    let (config, db) = common::migrated_database(dialect).await;
    let key = RequestId::generate("APP", "ORDER");
    let claim = ClaimRequest {
        request_id: key.as_str(),
        biz_type: "ORDER",
        request_hash: "h",
        owner: &format!("dead-{}", common::unique_suffix()),
        fence: 0,
        lease_ms: 1,
        retention_ms: 86_400_000,
    };
    idempotency::claim(&db, &claim).await.unwrap();
    let rec = idempotency::get(&db, key.as_str()).await.unwrap().unwrap();
    // What the create routine holds while it waits on a stock row.
    let mut in_flight = db.pool.begin().await.unwrap();
    sqlx::query(&format!(
        "SELECT status FROM idempotency_record WHERE request_id = '{key}' FOR UPDATE"
    ))
    .fetch_one(&mut *in_flight)
    .await
    .unwrap();

    let me = Instance::current();
    let ops = Actions::new(
        &config,
        db.clone(),
        Locks::from_config(&config, &me, Tracer::log_only(&me)).unwrap(),
        Tracer::log_only(&me),
        true,
    )
    .await;
    let started = Instant::now();
    let r = ops
        .run(&Action::Finalize {
            request_id: key.to_string(),
            expect_version: Some(rec.version),
            reason: None,
        })
        .await;
    let waited = started.elapsed();
    assert_eq!(r.outcome, ActionOutcome::Refused, "{dialect}: {}", r.detail);
    assert!(
        r.detail.contains("still in flight"),
        "{dialect}: {}",
        r.detail
    );
    assert!(
        waited >= Duration::from_secs(4) && waited < Duration::from_secs(15),
        "{dialect}: waited {waited:?}"
    );
    in_flight.rollback().await.unwrap();
    assert_eq!(
        idempotency::get(&db, key.as_str()).await.unwrap().unwrap(),
        rec,
        "{dialect}: nothing written"
    );
    db.pool.close().await;
}

per_dialect!(finalize_waits_at_most_five_seconds => finalize_waits_at_most_five_seconds_postgres, finalize_waits_at_most_five_seconds_mysql);
