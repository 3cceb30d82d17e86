//! The console's actions (issue 8) on the real services: releasing a stale lock, finalizing a
//! stuck record, read-only mode, and the audit of every attempt. Finalize runs on PostgreSQL and
//! MySQL; lock releases use the shared Redis (single node) and the RedLock nodes, with keys unique
//! to each test.

mod common;

use std::time::Duration;

use idemguard::api::fast_path::FastPathValue;
use idemguard::api::idempotency::{self, ClaimRequest, IdempotencyRecord};
use idemguard::api::server::OrderView;
use idemguard::config::{Config, Dialect, LockMode};
use idemguard::console::actions::{self, Action, ActionOutcome, Actions, AuditRow};
use idemguard::contracts::{keys, Instance, OrderNo, RequestId};
use idemguard::db::orders::{NewOrder, Orders};
use idemguard::db::Database;
use idemguard::lock::{Acquisition, LockGuard, Locks};
use idemguard::trace::Tracer;

fn instance(tag: &str) -> Instance {
    Instance { id: format!("test-{tag}-{}", common::unique_suffix()), host: "testhost".into(), pid: 1 }
}

fn locks_for(config: &Config, who: &Instance) -> Locks {
    Locks::from_config(config, who, Tracer::log_only(who)).expect("lock layer")
}

async fn actions_for(config: &Config, db: &Database, allow: bool) -> Actions {
    let me = instance("operator");
    Actions::new(config, db.clone(), locks_for(config, &me), Tracer::log_only(&me), allow).await
}

/// Hold `key` as `who` (no watchdog, long TTL) and leave it held: the process "died" holding it.
async fn hold_and_abandon(locks: &Locks, key: &str) -> String {
    let guard: LockGuard = match locks.acquire_with(key, &locks.options().ttl(Duration::from_secs(60)).without_watchdog()).await.expect("acquire") {
        Acquisition::Held(g) => g,
        Acquisition::Contended(c) => panic!("{key} unexpectedly held: {c:?}"),
    };
    let value = guard.value();
    // Forgetting the guard skips its release on drop: exactly what a crashed holder leaves.
    std::mem::forget(guard);
    value
}

fn order_key() -> String {
    keys::order_lock(OrderNo::generate().as_str())
}

async fn audit(db: &Database, target: &str) -> Vec<AuditRow> {
    actions::audit_rows(db, 0, i64::MAX, 1000).await.expect("read ops_audit").into_iter().filter(|r| r.target == target).collect()
}

async fn redis_get(config: &Config, key: &str) -> Option<String> {
    let mut c = redis::Client::open(config.redis.url.as_str()).unwrap().get_multiplexed_async_connection().await.expect("redis (scripts/stack up)");
    redis::cmd("GET").arg(key).query_async(&mut c).await.unwrap()
}

// ---------------------------------------------------------------------------------------------
// release a stale lock
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn release_of_a_dead_owners_lock_succeeds_and_is_audited() {
    let (config, db) = common::migrated_database(Dialect::Postgres).await;
    let dead = instance("dead");
    let holder = locks_for(&config, &dead);
    let key = order_key();
    let value = hold_and_abandon(&holder, &key).await;
    let fence_before = holder.current_fence(&key).await.unwrap().unwrap();

    let ops = actions_for(&config, &db, true).await;
    let view = ops.locks().inspect(&key).await;
    assert_eq!(view.values(), vec![value.as_str()]);
    let r = ops.run(&actions::release_of(&view, false, true, None)).await;
    assert_eq!(r.outcome, ActionOutcome::Done, "{}", r.detail);
    assert!(ops.locks().inspect(&key).await.is_free(), "the lock is gone");
    let fence_after = holder.current_fence(&key).await.unwrap().unwrap();
    assert!(fence_after > fence_before, "--bump-fence raised {} past {fence_before}: {fence_after}", keys::fence(&key));

    let rows = audit(&db, &key).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].outcome, "done");
    assert_eq!(rows[0].action, "release_lock");
    assert!(rows[0].before_state.as_deref().unwrap().contains(&value), "before names the value seen");
    assert_eq!(Some(rows[0].id), r.audit_id);
    db.pool.close().await;
}

#[tokio::test]
async fn a_lock_reacquired_after_it_was_displayed_is_not_deleted() {
    let (config, db) = common::migrated_database(Dialect::Postgres).await;
    let first = locks_for(&config, &instance("first"));
    let key = order_key();
    let ops = actions_for(&config, &db, true).await;

    let guard = first.acquire_with(&key, &first.options().without_watchdog()).await.unwrap().held().unwrap();
    let shown = ops.locks().inspect(&key).await; // what the operator saw
    guard.release().await.unwrap();
    let second = locks_for(&config, &instance("second"));
    let now_held = hold_and_abandon(&second, &key).await; // a dead owner too: only the value differs

    let r = ops.run(&actions::release_of(&shown, false, false, None)).await;
    assert_eq!(r.outcome, ActionOutcome::Changed, "{}", r.detail);
    assert!(r.detail.contains("changed hands"), "{}", r.detail);
    assert_eq!(ops.locks().inspect(&key).await.values(), vec![now_held.as_str()], "the new holder's lock is intact");
    let rows = audit(&db, &key).await;
    assert_eq!(rows.iter().map(|r| r.outcome.as_str()).collect::<Vec<_>>(), vec!["changed"]);
    ops.locks().release_if_value(&key, &now_held).await.unwrap();
    db.pool.close().await;
}

#[tokio::test]
async fn a_live_owners_lock_is_refused_without_force_and_released_with_force_and_reason() {
    let (config, db) = common::migrated_database(Dialect::Mysql).await;
    let live = instance("live");
    let holder = locks_for(&config, &live);
    let heartbeat = holder.liveness().start(&live).await.expect("heartbeat");
    let key = order_key();
    let value = hold_and_abandon(&holder, &key).await;
    let ops = actions_for(&config, &db, true).await;
    let view = ops.locks().inspect(&key).await;

    let r = ops.run(&actions::release_of(&view, false, false, None)).await;
    assert_eq!(r.outcome, ActionOutcome::Refused, "{}", r.detail);
    assert!(r.detail.contains("alive"), "{}", r.detail);
    assert_eq!(ops.locks().inspect(&key).await.values(), vec![value.as_str()], "nothing deleted");

    let r = ops.run(&actions::release_of(&view, true, false, None)).await;
    assert_eq!(r.outcome, ActionOutcome::Refused, "force without a reason: {}", r.detail);

    let r = ops.run(&actions::release_of(&view, true, false, Some("holder hung in GC for 10 min".into()))).await;
    assert_eq!(r.outcome, ActionOutcome::Done, "{}", r.detail);
    assert!(ops.locks().inspect(&key).await.is_free());

    let rows = audit(&db, &key).await;
    let mut outcomes: Vec<&str> = rows.iter().map(|r| r.outcome.as_str()).collect();
    outcomes.reverse(); // newest first → oldest first
    assert_eq!(outcomes, vec!["refused", "refused", "done"]);
    assert_eq!(rows[0].reason.as_deref(), Some("holder hung in GC for 10 min"));
    heartbeat.stop().await.unwrap();
    db.pool.close().await;
}

#[tokio::test]
async fn redlock_release_deletes_the_acquisition_on_every_node() {
    let (mut config, db) = common::migrated_database(Dialect::Postgres).await;
    config.lock.mode = LockMode::Redlock;
    let holder = locks_for(&config, &instance("dead-redlock"));
    let key = order_key();
    hold_and_abandon(&holder, &key).await;
    let ops = actions_for(&config, &db, true).await;
    let view = ops.locks().inspect(&key).await;
    assert!(view.agreeing_nodes() >= ops.locks().quorum(), "{view:?}");
    // The operator passes one node's value (a runbook copying one line of `idemguard locks`):
    // the other nodes' values of the same acquisition go too.
    let one = view.values()[0].to_string();
    let r = ops
        .run(&Action::ReleaseLock { key: key.clone(), expect_values: vec![one], force: false, bump_fence: false, reason: None })
        .await;
    assert_eq!(r.outcome, ActionOutcome::Done, "{}", r.detail);
    assert!(ops.locks().inspect(&key).await.is_free(), "deleted on every node");
    db.pool.close().await;
}

// ---------------------------------------------------------------------------------------------
// finalize a stuck record
// ---------------------------------------------------------------------------------------------

/// A PROCESSING record owned by `owner`, as a claim that never finished leaves it.
async fn stuck_record(config: &Config, db: &Database, owner: &str) -> IdempotencyRecord {
    let rid = RequestId::generate("APP", "ORDER");
    let claim = ClaimRequest {
        request_id: rid.as_str(),
        biz_type: &config.idempotency.biz_type,
        request_hash: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        owner,
        fence: 0,
        lease_ms: 1,
        retention_ms: 86_400_000,
    };
    assert_eq!(idempotency::claim(db, &claim).await.unwrap(), idempotency::Claim::New);
    idempotency::get(db, rid.as_str()).await.unwrap().unwrap()
}

async fn place_order(db: &Database, request_id: &str) -> idemguard::db::orders::OrderRecord {
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
    orders.create(&new).await.unwrap().into_order()
}

fn finalize(rec: &IdempotencyRecord) -> Action {
    Action::Finalize { request_id: rec.request_id.clone(), expect_version: Some(rec.version), reason: Some("incident 42".into()) }
}

#[tokio::test]
async fn reconcile_picks_succeeded_when_the_order_exists() {
    for dialect in common::DIALECTS {
        let (config, db) = common::migrated_database(dialect).await;
        let rec = stuck_record(&config, &db, &instance("dead").id).await;
        let order = place_order(&db, &rec.request_id).await;
        let ops = actions_for(&config, &db, true).await;
        let r = ops.run(&finalize(&rec)).await;
        assert_eq!(r.outcome, ActionOutcome::Done, "{dialect}: {}", r.detail);

        let now = idempotency::get(&db, &rec.request_id).await.unwrap().unwrap();
        assert_eq!(now.status, "SUCCEEDED");
        assert_eq!(now.response_code, Some(201));
        // The API's body for this order: OrderView of the row, serialized the way the API does.
        assert_eq!(now.response_body.as_deref(), Some(serde_json::to_string(&OrderView::from(&order)).unwrap().as_str()), "{dialect}");
        assert_eq!(now.order_no.as_deref(), Some(order.order_no.as_str()));
        assert_eq!(now.version, rec.version + 1);
        let fast: FastPathValue = serde_json::from_str(&redis_get(&config, &keys::idempotency_fast_path(&rec.request_id)).await.expect("fast path set")).unwrap();
        assert_eq!(fast, FastPathValue::Finished { hash: rec.request_hash.clone(), code: 201, body: now.response_body.clone().unwrap() });
        let rows = audit(&db, &rec.request_id).await;
        assert_eq!(rows.len(), 1, "{dialect}: {rows:?}");
        assert_eq!((rows[0].outcome.as_str(), rows[0].action.as_str()), ("done", "finalize"));
        assert!(rows[0].after_state.as_deref().unwrap().contains("SUCCEEDED"));
        db.pool.close().await;
    }
}

#[tokio::test]
async fn reconcile_picks_failed_when_no_order_exists_and_the_owner_is_dead() {
    for dialect in common::DIALECTS {
        let (config, db) = common::migrated_database(dialect).await;
        let rec = stuck_record(&config, &db, &instance("dead").id).await;
        let ops = actions_for(&config, &db, true).await;
        let r = ops.run(&finalize(&rec)).await;
        assert_eq!(r.outcome, ActionOutcome::Done, "{dialect}: {}", r.detail);
        let now = idempotency::get(&db, &rec.request_id).await.unwrap().unwrap();
        assert_eq!(now.status, "FAILED");
        assert_eq!(now.response_code, Some(409));
        let body: serde_json::Value = serde_json::from_str(now.response_body.as_deref().unwrap()).unwrap();
        assert_eq!(body["type"], "https://idemguard.dev/problems/request-not-completed");
        assert!(body["detail"].as_str().unwrap().contains("incident 42"), "the reason is in the problem: {body}");
        assert_eq!(now.order_no, None);
        assert_eq!(audit(&db, &rec.request_id).await[0].outcome, "done");
        db.pool.close().await;
    }
}

#[tokio::test]
async fn finalize_is_refused_while_the_owner_is_alive() {
    for dialect in common::DIALECTS {
        let (config, db) = common::migrated_database(dialect).await;
        let live = instance("live");
        let liveness = idemguard::lock::Liveness::from_config(&config).unwrap();
        let heartbeat = liveness.start(&live).await.unwrap();
        let rec = stuck_record(&config, &db, &live.id).await;
        let ops = actions_for(&config, &db, true).await;
        let r = ops.run(&finalize(&rec)).await;
        assert_eq!(r.outcome, ActionOutcome::Refused, "{dialect}: {}", r.detail);
        assert_eq!(idempotency::get(&db, &rec.request_id).await.unwrap().unwrap(), rec, "{dialect}: record untouched");
        assert_eq!(audit(&db, &rec.request_id).await[0].outcome, "refused");
        heartbeat.stop().await.unwrap();
        db.pool.close().await;
    }
}

#[tokio::test]
async fn finalize_of_a_record_that_completed_after_it_was_displayed_writes_nothing() {
    for dialect in common::DIALECTS {
        let (config, db) = common::migrated_database(dialect).await;
        let owner = instance("slow").id;
        let shown = stuck_record(&config, &db, &owner).await; // what the operator saw
        // The owner finishes a moment later (its own conditional finalize).
        let outcome = idempotency::Outcome { status: "SUCCEEDED", code: 201, body: "{\"the\":\"owner's answer\"}".into(), order_no: None };
        assert!(idempotency::finalize(&db, &shown.request_id, &owner, &outcome, 86_400_000).await.unwrap());
        let finished = idempotency::get(&db, &shown.request_id).await.unwrap().unwrap();

        let ops = actions_for(&config, &db, true).await;
        let r = ops.run(&finalize(&shown)).await;
        assert_eq!(r.outcome, ActionOutcome::Changed, "{dialect}: {}", r.detail);
        assert_eq!(idempotency::get(&db, &shown.request_id).await.unwrap().unwrap(), finished, "{dialect}: nothing written");

        // Taken over by a retry (still PROCESSING, a new version): the version seen no longer matches.
        let other = stuck_record(&config, &db, &owner).await;
        assert!(idempotency::reclaim(&db, &other, "retrying-instance", 0, 60_000).await.unwrap());
        let taken = idempotency::get(&db, &other.request_id).await.unwrap().unwrap();
        let r = ops.run(&finalize(&other)).await;
        assert_eq!(r.outcome, ActionOutcome::Changed, "{dialect}: {}", r.detail);
        assert_eq!(idempotency::get(&db, &other.request_id).await.unwrap().unwrap(), taken, "{dialect}: nothing written");

        assert_eq!(audit(&db, &shown.request_id).await[0].outcome, "changed");
        assert_eq!(audit(&db, &other.request_id).await[0].outcome, "changed");
        db.pool.close().await;
    }
}

// ---------------------------------------------------------------------------------------------
// read-only mode and the audit
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn read_only_mode_writes_nothing_but_audits_every_attempt() {
    for dialect in common::DIALECTS {
        let (config, db) = common::migrated_database(dialect).await;
        assert!(!config.environment.allow_actions, "config/local.toml is read-only by default");
        let ops = actions_for(&config, &db, false).await;
        assert!(!ops.allowed());

        // A dead owner's lock and a stuck record whose order exists: both would be done if allowed.
        let holder = locks_for(&config, &instance("dead"));
        let key = order_key();
        let value = hold_and_abandon(&holder, &key).await;
        let fence = holder.current_fence(&key).await.unwrap();
        let rec = stuck_record(&config, &db, &instance("dead").id).await;
        place_order(&db, &rec.request_id).await;
        let fast_key = keys::idempotency_fast_path(&rec.request_id);
        let placeholder = "{\"state\":\"PROCESSING\",\"hash\":\"h\",\"owner\":\"x\",\"nonce\":\"n\"}";
        let mut c = redis::Client::open(config.redis.url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("SET").arg(&fast_key).arg(placeholder).arg("PX").arg(60_000).query_async(&mut c).await.unwrap();

        let view = ops.locks().inspect(&key).await;
        let r1 = ops.run(&actions::release_of(&view, false, true, None)).await;
        let r2 = ops.run(&finalize(&rec)).await;
        for r in [&r1, &r2] {
            assert_eq!(r.outcome, ActionOutcome::Refused, "{dialect}: {}", r.detail);
            assert!(r.detail.contains("--allow-actions"), "says how to enable: {}", r.detail);
        }
        // Nothing written on Redis …
        assert_eq!(ops.locks().inspect(&key).await.values(), vec![value.as_str()]);
        assert_eq!(holder.current_fence(&key).await.unwrap(), fence, "no fence bump");
        assert_eq!(redis_get(&config, &fast_key).await.as_deref(), Some(placeholder));
        // … nor on the database,
        assert_eq!(idempotency::get(&db, &rec.request_id).await.unwrap().unwrap(), rec);
        // … but both attempts are in ops_audit.
        assert_eq!(audit(&db, &key).await[0].outcome, "refused");
        assert_eq!(audit(&db, &rec.request_id).await[0].outcome, "refused");
        assert_eq!(common::count(&db, "ops_audit").await, 2);
        ops.locks().release_if_value(&key, &value).await.unwrap();
        db.pool.close().await;
    }
}

#[tokio::test]
async fn an_action_whose_audit_cannot_be_written_is_not_performed() {
    for dialect in common::DIALECTS {
        let (config, db) = common::migrated_database(dialect).await;
        let rec = stuck_record(&config, &db, &instance("dead").id).await;
        let holder = locks_for(&config, &instance("dead"));
        let key = order_key();
        let value = hold_and_abandon(&holder, &key).await;
        sqlx::query("DROP TABLE ops_audit").execute(&db.pool).await.unwrap();

        let ops = actions_for(&config, &db, true).await;
        let r = ops.run(&finalize(&rec)).await;
        assert_eq!((r.outcome, r.audit_id), (ActionOutcome::Error, None), "{dialect}: {}", r.detail);
        assert!(r.detail.contains("not performed"), "{}", r.detail);
        assert_eq!(idempotency::get(&db, &rec.request_id).await.unwrap().unwrap(), rec, "{dialect}: record untouched");

        let view = ops.locks().inspect(&key).await;
        let r = ops.run(&actions::release_of(&view, false, false, None)).await;
        assert_eq!((r.outcome, r.audit_id), (ActionOutcome::Error, None), "{dialect}: {}", r.detail);
        assert_eq!(ops.locks().inspect(&key).await.values(), vec![value.as_str()], "{dialect}: lock untouched");
        ops.locks().release_if_value(&key, &value).await.unwrap();
        db.pool.close().await;
    }
}

// ---------------------------------------------------------------------------------------------
// the headless twins, and the trace event
// ---------------------------------------------------------------------------------------------

/// `idemguard finalize` / `release-lock` as a runbook runs them: same guards, exit status 4 on a
/// refusal, 5 when the target changed, 0 when done; and every attempt is an `operator_action`
/// event on the trace topic.
#[tokio::test]
async fn headless_twins_guard_audit_and_trace_like_the_library() {
    for dialect in common::DIALECTS {
        let (mut config, db) = common::migrated_database(dialect).await;
        let topics = common::fresh_topics(&config, &["idemguard.trace"]).await;
        config.kafka.trace_topic = topics[0].clone();
        let rec = stuck_record(&config, &db, &instance("dead").id).await;
        let holder = locks_for(&config, &instance("dead"));
        let key = order_key();
        let value = hold_and_abandon(&holder, &key).await;

        let run = |args: Vec<String>| {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
                .arg("--config")
                .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml"))
                .args(&args)
                .env("IDEMGUARD_DATABASE__URL", &config.database.url)
                .env("IDEMGUARD_KAFKA__TRACE_TOPIC", &config.kafka.trace_topic)
                .env("IDEMGUARD_LOG", "error")
                .output()
                .expect("run idemguard");
            (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
        };
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();

        let (code, out) = run(s(&["finalize", &rec.request_id]));
        assert_eq!(code, Some(4), "{dialect}: read-only refuses: {out}");
        assert!(out.contains("--allow-actions"), "{out}");
        let (code, out) = run(s(&["finalize", &rec.request_id, "--expect-version", &(rec.version + 7).to_string(), "--allow-actions"]));
        assert_eq!(code, Some(5), "{dialect}: another version: {out}");
        let (code, out) = run(s(&["finalize", &rec.request_id, "--allow-actions", "--reason", "runbook 7"]));
        assert_eq!(code, Some(0), "{dialect}: {out}");
        assert!(out.contains("finalize") && out.contains("done") && out.contains("FAILED"), "{out}");
        assert_eq!(idempotency::get(&db, &rec.request_id).await.unwrap().unwrap().status, "FAILED");

        let (code, out) = run(s(&["release-lock", &key, "--expect-value", "not-the-value", "--allow-actions"]));
        assert_eq!(code, Some(5), "{dialect}: a value never seen deletes nothing: {out}");
        assert_eq!(holder.inspect(&key).await.values(), vec![value.as_str()]);
        let (code, out) = run(s(&["release-lock", &key, "--expect-value", &value, "--bump-fence", "--allow-actions", "--json"]));
        assert_eq!(code, Some(0), "{dialect}: {out}");
        let json: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(json["outcome"], "done");
        assert!(holder.inspect(&key).await.is_free());

        let outcomes: Vec<String> = audit(&db, &rec.request_id).await.into_iter().rev().map(|r| r.outcome).collect();
        assert_eq!(outcomes, vec!["refused", "changed", "done"], "{dialect}");
        let outcomes: Vec<String> = audit(&db, &key).await.into_iter().rev().map(|r| r.outcome).collect();
        assert_eq!(outcomes, vec!["changed", "done"], "{dialect}");

        let log = idemguard::console::headless::read_trace_log(&config, idemguard::console::topics::StartAt::Beginning).await.unwrap();
        let events = log.matching(None, Some(&rec.request_id), &Default::default());
        let ops: Vec<&idemguard::contracts::TraceEvent> =
            events.iter().filter(|e| e.outcome == idemguard::contracts::Outcome::OperatorAction).collect();
        assert_eq!(ops.len(), 3, "{dialect}: one operator_action event per attempt: {events:?}");
        assert!(ops.iter().all(|e| e.layer == idemguard::contracts::Layer::Console));
        db.pool.close().await;
    }
}
