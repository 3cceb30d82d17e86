//! The console's fault branches, each reached under its fault on the real services.
//! - the terminal is restored after an error and after a panic inside the console, not
//!   only after `q` — the real binary in a real terminal (tmux), with its FAULT INJECTION switch
//!   `IDEMGUARD_FAULT_CONSOLE`.
//! - The actions' executor ([`Actions::run`]): the record changing between the reconcile and
//!   the write, a failed audit write, a lock that expired after it was displayed, a partial
//!   release on the RedLock nodes, a failed fence bump, a liveness error and a failed fast-path
//!   store. Each test uses its own database, keys and private Redis, removed pass or fail.

use crate::common;
use crate::support::redis_server;
use crate::support::tmux;

use std::future::Future;
use std::process::Command;
use std::time::{Duration, Instant};

use idemguard::api::idempotency::{self, ClaimRequest, IdempotencyRecord};
use idemguard::config::{Config, Dialect, LockMode};
use idemguard::contracts::{keys, OrderNo, RequestId};
use idemguard::db::orders::{NewOrder, Orders};
use idemguard::db::Database;
use idemguard::lock::{Acquisition, Locks};
use idemguard::ops::{self, Action, ActionOutcome, AuditRow};
use idemguard::trace::Tracer;
use redis_server::RedisServer;
use tmux::Terminal;

use common::locks::{actions_for, instance, locks_for};

// ---------------------------------------------------------------------------------------------
// harness: own database, own keys, removed pass or fail
// ---------------------------------------------------------------------------------------------

/// Runs `body` over a fresh migrated database of `dialect`; the harness (tests/common) drops
/// it when the test's thread ends, pass or fail.
async fn in_own_database<F, Fut>(dialect: Dialect, body: F)
where
    F: FnOnce(Config, Database) -> Fut,
    Fut: Future<Output = ()>,
{
    let (config, db) = common::migrated_database(dialect).await;
    body(config, db).await;
}

/// Every lock node of `config` (the main Redis in single mode).
fn lock_node_urls(config: &Config) -> Vec<String> {
    match config.lock.mode {
        LockMode::Single => vec![config.redis.url.clone()],
        LockMode::Redlock => config.redis.redlock_nodes.clone(),
    }
}

async fn redis(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("redis (scripts/stack up)")
}

/// Removes the test's lock key and its fence counter from every lock node.
async fn remove_keys(config: &Config, key: &str) {
    for url in lock_node_urls(config) {
        let mut c = redis(&url).await;
        let _: () = redis::cmd("DEL")
            .arg(key)
            .arg(keys::fence(key))
            .query_async(&mut c)
            .await
            .unwrap();
    }
}

/// Hold `key` (no watchdog) and forget the guard: the process "died" holding it.
async fn hold_and_abandon(locks: &Locks, key: &str, ttl: Duration) -> String {
    let guard = match locks
        .acquire_with(key, &locks.options().ttl(ttl).without_watchdog())
        .await
        .expect("acquire")
    {
        Acquisition::Held(g) => g,
        Acquisition::Contended(c) => panic!("{key} unexpectedly held: {c:?}"),
    };
    let value = guard.value();
    std::mem::forget(guard);
    value
}

async fn audit(db: &Database, target: &str) -> Vec<AuditRow> {
    ops::audit_rows(db, 0, i64::MAX, 1000)
        .await
        .expect("read ops_audit")
        .into_iter()
        .filter(|r| r.target == target)
        .collect()
}

/// A PROCESSING record whose lease is over and whose owner has no heartbeat.
async fn stuck_record(db: &Database) -> IdempotencyRecord {
    let rid = RequestId::generate("APP", "ORDER");
    let owner = instance("dead").id;
    let claim = ClaimRequest {
        request_id: rid.as_str(),
        biz_type: "ORDER",
        request_hash: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        owner: &owner,
        fence: 0,
        lease_ms: 1,
        retention_ms: 86_400_000,
    };
    assert_eq!(
        idempotency::claim(db, &claim).await.unwrap(),
        idempotency::Claim::New
    );
    tokio::time::sleep(Duration::from_millis(5)).await; // past the 1 ms lease
    idempotency::get(db, rid.as_str()).await.unwrap().unwrap()
}

async fn place_order(db: &Database, request_id: &str) {
    let orders = Orders::new(db.clone(), Tracer::log_only(&instance("api")));
    orders.set_stock(1, 100).await.unwrap();
    let new = NewOrder {
        request_id: RequestId::parse(request_id).unwrap(),
        order_no: OrderNo::generate(),
        user_id: 7,
        sku_id: 1,
        quantity: 1,
        amount: 1999,
        fence: None,
    };
    orders.create(&new).await.unwrap();
}

fn finalize(rec: &IdempotencyRecord) -> Action {
    Action::Finalize {
        request_id: rec.request_id.clone(),
        expect_version: Some(rec.version),
        reason: Some("fault test".into()),
    }
}

async fn record(db: &Database, request_id: &str) -> IdempotencyRecord {
    idempotency::get(db, request_id).await.unwrap().unwrap()
}

// ---------------------------------------------------------------------------------------------
// (a) the record changes between the reconcile and the write
// ---------------------------------------------------------------------------------------------

/// The operator's finalize reads the record, reconciles and writes its audit row; a transaction
/// of the test holds the record's row lock meanwhile and moves the version on (a retry took the
/// record over). The finalize, blocked on that row lock, must then see the new version: changed
/// since seen (exit 5), nothing written.
async fn record_changed_between_reconcile_and_write(dialect: Dialect) {
    in_own_database(dialect, |config, db| async move {
        let rec = stuck_record(&db).await;
        let ops = actions_for(&config, &db, true).await;
        let p = common::placeholders(dialect, 1);
        let mut other = db.pool.begin().await.unwrap();
        sqlx::query(&format!("SELECT status FROM idempotency_record WHERE request_id = {p} FOR UPDATE"))
            .bind(rec.request_id.as_str())
            .fetch_one(&mut *other)
            .await
            .unwrap();
        let action = finalize(&rec);
        let run = ops.run(&action);
        tokio::pin!(run);
        // Drive the finalize until its audit row says "attempt": it has reconciled and is now at
        // (or about to reach) the row lock the other transaction holds.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            tokio::select! {
                r = &mut run => panic!("{dialect}: the finalize ended before the record changed: {r:?}"),
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
            if audit(&db, &rec.request_id).await.iter().any(|r| r.outcome == "attempt") {
                break;
            }
            assert!(Instant::now() < deadline, "{dialect}: no audit attempt row");
        }
        sqlx::query(&format!("UPDATE idempotency_record SET version = version + 1 WHERE request_id = {p}"))
            .bind(rec.request_id.as_str())
            .execute(&mut *other)
            .await
            .unwrap();
        other.commit().await.unwrap();
        let moved = record(&db, &rec.request_id).await;
        let r = run.await;
        assert_eq!(r.outcome, ActionOutcome::Changed, "{dialect}: {}", r.detail);
        assert_eq!(ops::exit_code(r.outcome), 5);
        assert_eq!(record(&db, &rec.request_id).await, moved, "{dialect}: nothing written");
        assert_eq!(moved.status, "PROCESSING");
        assert_eq!(audit(&db, &rec.request_id).await[0].outcome, "changed", "{dialect}");
    })
    .await;
}

per_dialect!(record_changed_between_reconcile_and_write => record_changed_between_reconcile_and_write_postgres, record_changed_between_reconcile_and_write_mysql);

// ---------------------------------------------------------------------------------------------
// (b) a failed audit write: the action does not run
// ---------------------------------------------------------------------------------------------

async fn failed_audit_write_runs_nothing(dialect: Dialect) {
    in_own_database(dialect, |config, db| async move {
        let rec = stuck_record(&db).await;
        let key = keys::order_lock(OrderNo::generate().as_str());
        let value = hold_and_abandon(
            &locks_for(&config, &instance("dead")),
            &key,
            Duration::from_secs(60),
        )
        .await;
        let ops = actions_for(&config, &db, true).await;
        let view = ops.locks().inspect(&key).await;
        // The audit table cannot be written (gone, as a broken migration or a revoked grant leaves it).
        sqlx::Executor::execute(&db.pool, "ALTER TABLE ops_audit RENAME TO ops_audit_gone")
            .await
            .unwrap();

        let r = ops.run(&finalize(&rec)).await;
        assert_eq!(
            (r.outcome, r.audit_id),
            (ActionOutcome::Error, None),
            "{dialect}: {}",
            r.detail
        );
        assert!(
            r.detail.contains("not performed") && r.detail.contains("audit"),
            "{dialect}: {}",
            r.detail
        );
        assert_eq!(
            record(&db, &rec.request_id).await,
            rec,
            "{dialect}: the record is untouched"
        );

        let r = ops.run(&ops::release_of(&view, false, true, None)).await;
        assert_eq!(
            (r.outcome, r.audit_id),
            (ActionOutcome::Error, None),
            "{dialect}: {}",
            r.detail
        );
        assert_eq!(
            ops.locks().inspect(&key).await.values(),
            vec![value.as_str()],
            "{dialect}: the lock is still there"
        );
        remove_keys(&config, &key).await;
    })
    .await;
}

per_dialect!(failed_audit_write_runs_nothing => failed_audit_write_runs_nothing_postgres, failed_audit_write_runs_nothing_mysql);

// ---------------------------------------------------------------------------------------------
// (c) a lock that expired after it was displayed
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn release_of_a_lock_that_expired_after_it_was_displayed_deletes_nothing() {
    in_own_database(Dialect::Postgres, |config, db| async move {
        let key = keys::order_lock(OrderNo::generate().as_str());
        hold_and_abandon(
            &locks_for(&config, &instance("dead")),
            &key,
            Duration::from_millis(400),
        )
        .await;
        let ops = actions_for(&config, &db, true).await;
        let shown = ops.locks().inspect(&key).await;
        assert!(!shown.is_free());
        let deadline = Instant::now() + Duration::from_secs(5);
        while !ops.locks().inspect(&key).await.is_free() {
            assert!(Instant::now() < deadline, "the lock did not expire");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let r = ops.run(&ops::release_of(&shown, false, true, None)).await;
        assert_eq!(r.outcome, ActionOutcome::Changed, "{}", r.detail);
        assert!(
            r.detail.contains("the lock is gone") && r.detail.contains("nothing was deleted"),
            "{}",
            r.detail
        );
        let rows = audit(&db, &key).await;
        assert_eq!(
            rows.iter().map(|r| r.outcome.as_str()).collect::<Vec<_>>(),
            vec!["changed"]
        );
        remove_keys(&config, &key).await;
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// (d) a partial release on the RedLock nodes; a failed fence bump
// ---------------------------------------------------------------------------------------------

fn redlock(mut config: Config) -> Config {
    config.lock.mode = LockMode::Redlock;
    config
}

/// The value seen is still on three nodes; one lost it (expired there) and one now holds
/// another holder's value. The release deletes it on the three, keeps the other value, and
/// names the nodes it deleted on.
#[tokio::test]
async fn redlock_partial_release_deletes_where_the_value_matches_and_names_those_nodes() {
    in_own_database(Dialect::Postgres, |config, db| async move {
        let config = redlock(config);
        let nodes = lock_node_urls(&config);
        assert_eq!(nodes.len(), 5, "the stack's five RedLock nodes");
        let key = keys::order_lock(OrderNo::generate().as_str());
        let value = hold_and_abandon(
            &locks_for(&config, &instance("dead")),
            &key,
            Duration::from_secs(60),
        )
        .await;
        let ops = actions_for(&config, &db, true).await;
        let shown = ops.locks().inspect(&key).await;
        assert_eq!(
            shown.values(),
            vec![value.as_str()],
            "one acquisition, one value on every node"
        );

        let _: () = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut redis(&nodes[3]).await)
            .await
            .unwrap();
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg("someone-else")
            .arg("PX")
            .arg(60_000)
            .query_async(&mut redis(&nodes[4]).await)
            .await
            .unwrap();
        let r = ops.run(&ops::release_of(&shown, false, false, None)).await;
        assert_eq!(r.outcome, ActionOutcome::Done, "{}", r.detail);
        let addr = |url: &str| {
            url.trim_start_matches("redis://")
                .trim_end_matches('/')
                .to_string()
        };
        for url in &nodes[..3] {
            assert!(
                r.detail.contains(&addr(url)),
                "the result names {url}: {}",
                r.detail
            );
        }
        for url in &nodes[3..] {
            assert!(
                !r.detail.contains(&addr(url)),
                "{url} deleted nothing: {}",
                r.detail
            );
        }
        assert!(r.detail.starts_with("deleted on 3 node(s)"), "{}", r.detail);
        let mut c = redis(&nodes[4]).await;
        let kept: Option<String> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(
            kept.as_deref(),
            Some("someone-else"),
            "another holder's value is kept"
        );
        remove_keys(&config, &key).await;
    })
    .await;
}

/// `--bump-fence` whose bump fails (the fence counter overwritten with text, so INCR fails) on
/// the single node, or on a majority of the RedLock nodes: the lock is deleted, but the result
/// must not claim success — the old holder's writes are not fenced off.
async fn failed_fence_bump_is_not_reported_as_success(mode: LockMode) {
    in_own_database(Dialect::Postgres, |mut config, db| async move {
        config.lock.mode = mode;
        let nodes = lock_node_urls(&config);
        let key = keys::order_lock(OrderNo::generate().as_str());
        hold_and_abandon(
            &locks_for(&config, &instance("dead")),
            &key,
            Duration::from_secs(60),
        )
        .await;
        let ops = actions_for(&config, &db, true).await;
        let shown = ops.locks().inspect(&key).await;
        for url in &nodes[..ops.locks().quorum()] {
            let _: () = redis::cmd("SET")
                .arg(keys::fence(&key))
                .arg("not-a-number")
                .arg("PX")
                .arg(60_000)
                .query_async(&mut redis(url).await)
                .await
                .unwrap();
        }
        let r = ops.run(&ops::release_of(&shown, false, true, None)).await;
        assert_eq!(
            r.outcome,
            ActionOutcome::Error,
            "{mode:?}: a fence not raised is not success: {}",
            r.detail
        );
        assert_ne!(ops::exit_code(r.outcome), 0);
        assert!(
            r.detail.contains("fence bump failed") && !r.detail.contains("raised to"),
            "{mode:?}: {}",
            r.detail
        );
        assert!(
            ops.locks().inspect(&key).await.is_free(),
            "{mode:?}: the release itself happened, and says so: {}",
            r.detail
        );
        assert!(r.detail.contains("deleted on"), "{}", r.detail);
        assert_eq!(audit(&db, &key).await[0].outcome, "error");
        remove_keys(&config, &key).await;
    })
    .await;
}

#[tokio::test]
async fn failed_fence_bump_is_not_reported_as_success_single() {
    failed_fence_bump_is_not_reported_as_success(LockMode::Single).await;
}

#[tokio::test]
async fn failed_fence_bump_is_not_reported_as_success_redlock() {
    failed_fence_bump_is_not_reported_as_success(LockMode::Redlock).await;
}

// ---------------------------------------------------------------------------------------------
// (e) a liveness error
// ---------------------------------------------------------------------------------------------

/// The heartbeats live on the main Redis (a private one here, killed); the lock on the RedLock
/// nodes is readable. Without --force the release is refused — an owner that cannot be proven
/// dead is not released — and nothing is deleted; with --force and a reason it is.
#[tokio::test]
async fn release_is_refused_when_liveness_cannot_be_read() {
    in_own_database(Dialect::Postgres, |config, db| async move {
        let mut main = RedisServer::start();
        let mut config = redlock(config);
        config.redis.url = main.url();
        let key = keys::order_lock(OrderNo::generate().as_str());
        let value = hold_and_abandon(
            &locks_for(&config, &instance("dead")),
            &key,
            Duration::from_secs(60),
        )
        .await;
        let ops = actions_for(&config, &db, true).await;
        let shown = ops.locks().inspect(&key).await;
        main.kill();

        let r = ops.run(&ops::release_of(&shown, false, false, None)).await;
        assert_eq!(r.outcome, ActionOutcome::Refused, "{}", r.detail);
        assert!(
            r.detail.contains("cannot tell whether the owner is alive"),
            "{}",
            r.detail
        );
        assert_eq!(
            ops.locks().inspect(&key).await.values(),
            vec![value.as_str()],
            "nothing deleted"
        );

        let r = ops
            .run(&ops::release_of(
                &shown,
                true,
                false,
                Some("heartbeat Redis down, holder host gone".into()),
            ))
            .await;
        assert_eq!(r.outcome, ActionOutcome::Done, "{}", r.detail);
        assert!(ops.locks().inspect(&key).await.is_free());
        let mut outcomes: Vec<String> = audit(&db, &key)
            .await
            .into_iter()
            .map(|r| r.outcome)
            .collect();
        outcomes.reverse();
        assert_eq!(outcomes, vec!["refused", "done"]);
        remove_keys(&config, &key).await;
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// (f) a failed fast-path store after finalize
// ---------------------------------------------------------------------------------------------

/// The fast path's Redis (a private one) dies after the executor started, or is already down
/// when it starts: the record is still finalized (SUCCEEDED: the order exists), and the result
/// says the fast-path key was not updated.
async fn finalize_reports_a_fast_path_it_could_not_update(dialect: Dialect, down_at_start: bool) {
    in_own_database(dialect, |mut config, db| async move {
        let mut main = RedisServer::start();
        config.redis.url = main.url();
        assert!(
            config.idempotency.fast_path,
            "config/local.toml has the fast path on"
        );
        let rec = stuck_record(&db).await;
        place_order(&db, &rec.request_id).await;
        if down_at_start {
            main.kill();
        }
        let ops = actions_for(&config, &db, true).await;
        main.kill();

        let r = ops.run(&finalize(&rec)).await;
        assert_eq!(r.outcome, ActionOutcome::Done, "{dialect}: {}", r.detail);
        let fp = keys::idempotency_fast_path(&rec.request_id);
        assert!(
            r.detail.contains(&format!("{fp} not updated")),
            "{dialect}: the result names the stale key: {}",
            r.detail
        );
        let now = record(&db, &rec.request_id).await;
        assert_eq!(
            (now.status.as_str(), now.response_code),
            ("SUCCEEDED", Some(201)),
            "{dialect}"
        );
        assert_eq!(audit(&db, &rec.request_id).await[0].outcome, "done");
    })
    .await;
}

#[tokio::test]
async fn finalize_reports_a_fast_path_store_that_failed_postgres() {
    finalize_reports_a_fast_path_it_could_not_update(Dialect::Postgres, false).await;
}

#[tokio::test]
async fn finalize_reports_a_fast_path_store_that_failed_mysql() {
    finalize_reports_a_fast_path_it_could_not_update(Dialect::Mysql, false).await;
}

#[tokio::test]
async fn finalize_reports_a_fast_path_down_since_start_postgres() {
    finalize_reports_a_fast_path_it_could_not_update(Dialect::Postgres, true).await;
}

#[tokio::test]
async fn finalize_reports_a_fast_path_down_since_start_mysql() {
    finalize_reports_a_fast_path_it_could_not_update(Dialect::Mysql, true).await;
}

// ---------------------------------------------------------------------------------------------
// claim 7: the terminal is restored after an error and after a panic
// ---------------------------------------------------------------------------------------------

/// How long the pane may take to show what a step waits for.
const WAIT: Duration = Duration::from_secs(30);

fn has_line(screen: &str, f: impl Fn(&str) -> bool) -> bool {
    screen.lines().any(|l| f(l.trim_end()))
}

/// The real binary's console in a real terminal, with `IDEMGUARD_FAULT_CONSOLE=fault`: once it
/// has drawn its first frame (alternate screen, cursor hidden, raw mode), a key makes it fail;
/// then the pane must be back to normal and show the failure's message.
async fn terminal_is_restored_after(
    fault: &'static str,
    exit_code: &'static str,
    message: &'static str,
) {
    in_own_database(Dialect::Postgres, |mut config, _db| async move {
        let topics = common::fresh_topics(&config, &["idemguard.trace", "payment.succeeded"]).await;
        config.kafka.trace_topic = topics[0].clone();
        config.kafka.payment_topic = topics[1].clone();
        let log = std::env::temp_dir().join(format!("igt-console-{}.log", common::unique_suffix()));
        let env = [
            (
                "IDEMGUARD_CONFIG",
                concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml").to_string(),
            ),
            ("IDEMGUARD_DATABASE__URL", config.database.url.clone()),
            (
                "IDEMGUARD_KAFKA__PAYMENT_TOPIC",
                config.kafka.payment_topic.clone(),
            ),
            (
                "IDEMGUARD_KAFKA__TRACE_TOPIC",
                config.kafka.trace_topic.clone(),
            ),
            ("IDEMGUARD_CONSOLE__LOG_FILE", log.display().to_string()),
            ("IDEMGUARD_FAULT_CONSOLE", fault.to_string()),
            // A backtrace would scroll the panic's message off the 45-line pane.
            ("RUST_BACKTRACE", "0".to_string()),
        ];
        let pane = Terminal::shell("igt", (160, 45), &env);
        pane.wait_for("the shell's prompt", WAIT, |s| s.starts_with('$'));
        pane.type_line(&format!(
            "{} console; echo EXITED-$?",
            env!("CARGO_BIN_EXE_idemguard")
        ));
        // Its first frame: the alternate screen, the cursor hidden, the header drawn.
        pane.wait_for("the console's first frame", WAIT, |s| {
            pane.flag("#{alternate_on}") == "1"
                && pane.flag("#{cursor_flag}") == "0"
                && s.contains("idemguard console  1:Overview")
        });
        pane.keys(&["j"]);
        let s = pane.wait_for("the console's exit", WAIT, |s| {
            has_line(s, |l| l.starts_with("EXITED-"))
        });
        assert!(
            has_line(&s, |l| l == format!("EXITED-{exit_code}")),
            "{fault}: exit status {exit_code}:\n{s}"
        );
        assert_eq!(
            pane.flag("#{alternate_on}"),
            "0",
            "{fault}: back on the main screen:\n{s}"
        );
        assert_eq!(
            pane.flag("#{cursor_flag}"),
            "1",
            "{fault}: the cursor is shown"
        );
        // Printed after the restore, so on the main screen, and not drawn over by what follows.
        assert!(
            s.contains(message),
            "{fault}: the message {message:?} is on the restored screen:\n{s}"
        );
        if fault == "panic" {
            assert!(
                s.contains("panicked at src/console/tui/terminal.rs"),
                "{fault}: the panic's first line, not written over:\n{s}"
            );
        }
        // Raw mode is off: a line typed at the shell is echoed and runs on Enter.
        pane.type_line("echo ok-$((40+2))");
        let s = pane.wait_for("`echo ok` to run", WAIT, |s| has_line(s, |l| l == "ok-42"));
        assert!(
            s.contains("$ echo ok-$((40+2))"),
            "{fault}: the typed line is echoed:\n{s}"
        );
        assert!(
            s.contains(message),
            "{fault}: the message is still on screen after the next command:\n{s}"
        );
        drop(pane);
        let _ = std::fs::remove_file(&log);
        delete_topics(&config, &topics).await;
    })
    .await;
}

async fn delete_topics(config: &Config, topics: &[String]) {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .create()
        .unwrap();
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let _ = admin
        .delete_topics(
            &names,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await;
}

#[tokio::test]
async fn terminal_is_restored_after_a_panic_in_the_console() {
    terminal_is_restored_after(
        "panic",
        "101",
        "FAULT INJECTION: IDEMGUARD_FAULT_CONSOLE=panic, a key was pressed",
    )
    .await;
}

#[tokio::test]
async fn terminal_is_restored_after_an_error_in_the_console() {
    terminal_is_restored_after("error", "1", "idemguard: reading the terminal: FAULT INJECTION: IDEMGUARD_FAULT_CONSOLE=error, a key was pressed").await;
}

/// The fault switch is refused in production, before the terminal is touched.
#[test]
fn console_fault_injection_is_refused_in_production() {
    let out = Command::new(env!("CARGO_BIN_EXE_idemguard"))
        .args([
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml"),
            "console",
        ])
        .env("IDEMGUARD_ENVIRONMENT__PRODUCTION", "true")
        .env(common::ALLOW_UNVERIFIED.0, common::ALLOW_UNVERIFIED.1)
        .env("IDEMGUARD_FAULT_CONSOLE", "panic")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("IDEMGUARD_FAULT_CONSOLE is fault injection and may not be used when environment.production = true"), "{stderr}");
}
