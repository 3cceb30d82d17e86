//! The console's actions on the real services: releasing a stale lock, finalizing a
//! stuck record, read-only mode, and the audit of every attempt. Finalize runs on PostgreSQL and
//! MySQL; lock releases use the shared Redis (single node) and the RedLock nodes, with keys unique
//! to each test.

use crate::common;

use std::time::Duration;

use idemguard::api::fast_path::FastPathValue;
use idemguard::api::idempotency::OrderView;
use idemguard::api::idempotency::{self, ClaimRequest, IdempotencyRecord};
use idemguard::config::{Config, Dialect, LockMode};
use idemguard::contracts::{keys, Instance, OrderNo, RequestId, TraceTarget};
use idemguard::db::orders::{NewOrder, Orders};
use idemguard::db::Database;
use idemguard::lock::{Acquisition, LockGuard, Locks};
use idemguard::ops::{self, Action, ActionOutcome, AuditRow};
use idemguard::trace::Tracer;

use common::locks::{actions_for, instance, locks_for};

/// Hold `key` as `who` (no watchdog, long TTL) and leave it held: the process "died" holding it.
async fn hold_and_abandon(locks: &Locks, key: &str) -> String {
    let guard: LockGuard = match locks
        .acquire_with(
            key,
            &locks
                .options()
                .ttl(Duration::from_secs(60))
                .without_watchdog(),
        )
        .await
        .expect("acquire")
    {
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
    ops::audit_rows(db, 0, i64::MAX, 1000)
        .await
        .expect("read ops_audit")
        .into_iter()
        .filter(|r| r.target == target)
        .collect()
}

async fn redis_get(config: &Config, key: &str) -> Option<String> {
    let mut c = redis::Client::open(config.redis.url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("redis (scripts/stack up)");
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut c)
        .await
        .unwrap()
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
    let r = ops.run(&ops::release_of(&view, false, true, None)).await;
    assert_eq!(r.outcome, ActionOutcome::Done, "{}", r.detail);
    assert!(
        ops.locks().inspect(&key).await.is_free(),
        "the lock is gone"
    );
    let fence_after = holder.current_fence(&key).await.unwrap().unwrap();
    assert!(
        fence_after > fence_before,
        "--bump-fence raised {} past {fence_before}: {fence_after}",
        keys::fence(&key)
    );

    let rows = audit(&db, &key).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].outcome, "done");
    assert_eq!(rows[0].action, "release_lock");
    assert!(
        rows[0].before_state.as_deref().unwrap().contains(&value),
        "before names the value seen"
    );
    assert_eq!(Some(rows[0].id), r.audit_id);
    db.pool.close().await;
}

#[tokio::test]
async fn a_lock_reacquired_after_it_was_displayed_is_not_deleted() {
    let (config, db) = common::migrated_database(Dialect::Postgres).await;
    let first = locks_for(&config, &instance("first"));
    let key = order_key();
    let ops = actions_for(&config, &db, true).await;

    let guard = first
        .acquire_with(&key, &first.options().without_watchdog())
        .await
        .unwrap()
        .held()
        .unwrap();
    let shown = ops.locks().inspect(&key).await; // what the operator saw
    guard.release().await.unwrap();
    let second = locks_for(&config, &instance("second"));
    let now_held = hold_and_abandon(&second, &key).await; // a dead owner too: only the value differs

    let r = ops.run(&ops::release_of(&shown, false, false, None)).await;
    assert_eq!(r.outcome, ActionOutcome::Changed, "{}", r.detail);
    assert!(r.detail.contains("changed hands"), "{}", r.detail);
    assert_eq!(
        ops.locks().inspect(&key).await.values(),
        vec![now_held.as_str()],
        "the new holder's lock is intact"
    );
    let rows = audit(&db, &key).await;
    assert_eq!(
        rows.iter().map(|r| r.outcome.as_str()).collect::<Vec<_>>(),
        vec!["changed"]
    );
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

    let r = ops.run(&ops::release_of(&view, false, false, None)).await;
    assert_eq!(r.outcome, ActionOutcome::Refused, "{}", r.detail);
    assert!(r.detail.contains("alive"), "{}", r.detail);
    assert_eq!(
        ops.locks().inspect(&key).await.values(),
        vec![value.as_str()],
        "nothing deleted"
    );

    let r = ops.run(&ops::release_of(&view, true, false, None)).await;
    assert_eq!(
        r.outcome,
        ActionOutcome::Refused,
        "force without a reason: {}",
        r.detail
    );

    let r = ops
        .run(&ops::release_of(
            &view,
            true,
            false,
            Some("holder hung in GC for 10 min".into()),
        ))
        .await;
    assert_eq!(r.outcome, ActionOutcome::Done, "{}", r.detail);
    assert!(ops.locks().inspect(&key).await.is_free());

    let rows = audit(&db, &key).await;
    let mut outcomes: Vec<&str> = rows.iter().map(|r| r.outcome.as_str()).collect();
    outcomes.reverse(); // newest first → oldest first
    assert_eq!(outcomes, vec!["refused", "refused", "done"]);
    assert_eq!(
        rows[0].reason.as_deref(),
        Some("holder hung in GC for 10 min")
    );
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
    // Every node's value, as `idemguard locks` lists them: each is compared byte for byte (one
    // acquisition's nodes usually hold the same value; a node that counted differently holds
    // its own, and only the values given are deleted).
    let values: Vec<String> = view.values().into_iter().map(str::to_string).collect();
    let r = ops
        .run(&Action::ReleaseLock {
            key: key.clone(),
            expect_values: values,
            force: false,
            bump_fence: false,
            reason: None,
        })
        .await;
    assert_eq!(r.outcome, ActionOutcome::Done, "{}", r.detail);
    assert!(
        ops.locks().inspect(&key).await.is_free(),
        "deleted on every node"
    );
    db.pool.close().await;
}

// ---------------------------------------------------------------------------------------------
// finalize a stuck record
// ---------------------------------------------------------------------------------------------

/// A PROCESSING record owned by `owner`, as a claim that never finished leaves it.
async fn stuck_record(db: &Database, owner: &str) -> IdempotencyRecord {
    let rid = RequestId::generate("APP", "ORDER");
    let claim = ClaimRequest {
        request_id: rid.as_str(),
        biz_type: "ORDER",
        request_hash: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        owner,
        fence: 0,
        lease_ms: 1,
        retention_ms: 86_400_000,
    };
    assert_eq!(
        idempotency::claim(db, &claim).await.unwrap(),
        idempotency::Claim::New
    );
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
    Action::Finalize {
        request_id: rec.request_id.clone(),
        expect_version: Some(rec.version),
        reason: Some("incident 42".into()),
    }
}

async fn reconcile_picks_succeeded_when_the_order_exists(dialect: Dialect) {
    let (config, db) = common::migrated_database(dialect).await;
    let rec = stuck_record(&db, &instance("dead").id).await;
    let order = place_order(&db, &rec.request_id).await;
    let ops = actions_for(&config, &db, true).await;
    let r = ops.run(&finalize(&rec)).await;
    assert_eq!(r.outcome, ActionOutcome::Done, "{dialect}: {}", r.detail);

    let now = idempotency::get(&db, &rec.request_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(now.status, "SUCCEEDED");
    assert_eq!(now.response_code, Some(201));
    // The API's body for this order: OrderView of the row, serialized the way the API does.
    assert_eq!(
        now.response_body.as_deref(),
        Some(
            serde_json::to_string(&OrderView::from(&order))
                .unwrap()
                .as_str()
        ),
        "{dialect}"
    );
    assert_eq!(now.order_no.as_deref(), Some(order.order_no.as_str()));
    assert_eq!(now.version, rec.version + 1);
    let fast: FastPathValue = serde_json::from_str(
        &redis_get(&config, &keys::idempotency_fast_path(&rec.request_id))
            .await
            .expect("fast path set"),
    )
    .unwrap();
    assert_eq!(
        fast,
        FastPathValue::Finished {
            hash: rec.request_hash.clone(),
            code: 201,
            body: now.response_body.clone().unwrap()
        }
    );
    let rows = audit(&db, &rec.request_id).await;
    assert_eq!(rows.len(), 1, "{dialect}: {rows:?}");
    assert_eq!(
        (rows[0].outcome.as_str(), rows[0].action.as_str()),
        ("done", "finalize")
    );
    assert!(rows[0]
        .after_state
        .as_deref()
        .unwrap()
        .contains("SUCCEEDED"));
    db.pool.close().await;
}

per_dialect!(reconcile_picks_succeeded_when_the_order_exists => reconcile_picks_succeeded_when_the_order_exists_postgres, reconcile_picks_succeeded_when_the_order_exists_mysql);

async fn reconcile_picks_failed_when_no_order_exists_and_the_owner_is_dead(dialect: Dialect) {
    let (config, db) = common::migrated_database(dialect).await;
    let rec = stuck_record(&db, &instance("dead").id).await;
    let ops = actions_for(&config, &db, true).await;
    let r = ops.run(&finalize(&rec)).await;
    assert_eq!(r.outcome, ActionOutcome::Done, "{dialect}: {}", r.detail);
    let now = idempotency::get(&db, &rec.request_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(now.status, "FAILED");
    assert_eq!(
        now.response_code,
        Some(422),
        "not 409, which clients retry with the same key for ever"
    );
    let body: serde_json::Value =
        serde_json::from_str(now.response_body.as_deref().unwrap()).unwrap();
    assert_eq!(
        body["type"],
        "https://idemguard.dev/problems/request-abandoned"
    );
    assert!(
        body["detail"].as_str().unwrap().contains("incident 42"),
        "the reason is in the problem: {body}"
    );
    assert_eq!(now.order_no, None);
    assert_eq!(audit(&db, &rec.request_id).await[0].outcome, "done");
    db.pool.close().await;
}

per_dialect!(reconcile_picks_failed_when_no_order_exists_and_the_owner_is_dead => reconcile_picks_failed_when_no_order_exists_and_the_owner_is_dead_postgres, reconcile_picks_failed_when_no_order_exists_and_the_owner_is_dead_mysql);

async fn finalize_is_refused_while_the_owner_is_alive(dialect: Dialect) {
    let (config, db) = common::migrated_database(dialect).await;
    let live = instance("live");
    let liveness = idemguard::lock::Liveness::from_config(&config).unwrap();
    let heartbeat = liveness.start(&live).await.unwrap();
    let rec = stuck_record(&db, &live.id).await;
    let ops = actions_for(&config, &db, true).await;
    let r = ops.run(&finalize(&rec)).await;
    assert_eq!(r.outcome, ActionOutcome::Refused, "{dialect}: {}", r.detail);
    assert_eq!(
        idempotency::get(&db, &rec.request_id)
            .await
            .unwrap()
            .unwrap(),
        rec,
        "{dialect}: record untouched"
    );
    assert_eq!(audit(&db, &rec.request_id).await[0].outcome, "refused");
    heartbeat.stop().await.unwrap();
    db.pool.close().await;
}

per_dialect!(finalize_is_refused_while_the_owner_is_alive => finalize_is_refused_while_the_owner_is_alive_postgres, finalize_is_refused_while_the_owner_is_alive_mysql);

async fn finalize_of_a_record_that_completed_after_it_was_displayed_writes_nothing(
    dialect: Dialect,
) {
    let (config, db) = common::migrated_database(dialect).await;
    let owner = instance("slow").id;
    let shown = stuck_record(&db, &owner).await; // what the operator saw
                                                 // The owner finishes a moment later (its own conditional finalize).
    let outcome = idempotency::FinalResponse {
        status: "SUCCEEDED",
        code: 201,
        body: "{\"the\":\"owner's answer\"}".into(),
        order_no: None,
    };
    assert!(
        idempotency::finalize(&db, &shown.request_id, &owner, &outcome, 86_400_000)
            .await
            .unwrap()
    );
    let finished = idempotency::get(&db, &shown.request_id)
        .await
        .unwrap()
        .unwrap();

    let ops = actions_for(&config, &db, true).await;
    let r = ops.run(&finalize(&shown)).await;
    assert_eq!(r.outcome, ActionOutcome::Changed, "{dialect}: {}", r.detail);
    assert_eq!(
        idempotency::get(&db, &shown.request_id)
            .await
            .unwrap()
            .unwrap(),
        finished,
        "{dialect}: nothing written"
    );

    // Taken over by a retry (still PROCESSING, a new version): the version seen no longer matches.
    let other = stuck_record(&db, &owner).await;
    assert!(
        idempotency::reclaim(&db, &other, "retrying-instance", 0, 60_000)
            .await
            .unwrap()
    );
    let taken = idempotency::get(&db, &other.request_id)
        .await
        .unwrap()
        .unwrap();
    let r = ops.run(&finalize(&other)).await;
    assert_eq!(r.outcome, ActionOutcome::Changed, "{dialect}: {}", r.detail);
    assert_eq!(
        idempotency::get(&db, &other.request_id)
            .await
            .unwrap()
            .unwrap(),
        taken,
        "{dialect}: nothing written"
    );

    assert_eq!(audit(&db, &shown.request_id).await[0].outcome, "changed");
    assert_eq!(audit(&db, &other.request_id).await[0].outcome, "changed");
    db.pool.close().await;
}

per_dialect!(finalize_of_a_record_that_completed_after_it_was_displayed_writes_nothing => finalize_of_a_record_that_completed_after_it_was_displayed_writes_nothing_postgres, finalize_of_a_record_that_completed_after_it_was_displayed_writes_nothing_mysql);

// ---------------------------------------------------------------------------------------------
// read-only mode and the audit
// ---------------------------------------------------------------------------------------------

async fn read_only_mode_writes_nothing_but_audits_every_attempt(dialect: Dialect) {
    let (config, db) = common::migrated_database(dialect).await;
    assert!(
        !config.environment.allow_actions,
        "config/local.toml is read-only by default"
    );
    let ops = actions_for(&config, &db, false).await;
    assert!(!ops.allowed());

    // A dead owner's lock and a stuck record whose order exists: both would be done if allowed.
    let holder = locks_for(&config, &instance("dead"));
    let key = order_key();
    let value = hold_and_abandon(&holder, &key).await;
    let fence = holder.current_fence(&key).await.unwrap();
    let rec = stuck_record(&db, &instance("dead").id).await;
    place_order(&db, &rec.request_id).await;
    let fast_key = keys::idempotency_fast_path(&rec.request_id);
    let placeholder = "{\"state\":\"PROCESSING\",\"hash\":\"h\",\"owner\":\"x\",\"nonce\":\"n\"}";
    let mut c = redis::Client::open(config.redis.url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(&fast_key)
        .arg(placeholder)
        .arg("PX")
        .arg(60_000)
        .query_async(&mut c)
        .await
        .unwrap();

    let view = ops.locks().inspect(&key).await;
    let r1 = ops.run(&ops::release_of(&view, false, true, None)).await;
    let r2 = ops.run(&finalize(&rec)).await;
    for r in [&r1, &r2] {
        assert_eq!(r.outcome, ActionOutcome::Refused, "{dialect}: {}", r.detail);
        assert!(
            r.detail.contains("--allow-actions"),
            "says how to enable: {}",
            r.detail
        );
    }
    // Nothing written on Redis …
    assert_eq!(
        ops.locks().inspect(&key).await.values(),
        vec![value.as_str()]
    );
    assert_eq!(
        holder.current_fence(&key).await.unwrap(),
        fence,
        "no fence bump"
    );
    assert_eq!(
        redis_get(&config, &fast_key).await.as_deref(),
        Some(placeholder)
    );
    // … nor on the database,
    assert_eq!(
        idempotency::get(&db, &rec.request_id)
            .await
            .unwrap()
            .unwrap(),
        rec
    );
    // … but both attempts are in ops_audit.
    assert_eq!(audit(&db, &key).await[0].outcome, "refused");
    assert_eq!(audit(&db, &rec.request_id).await[0].outcome, "refused");
    assert_eq!(common::count(&db, "ops_audit").await, 2);
    ops.locks().release_if_value(&key, &value).await.unwrap();
    db.pool.close().await;
}

per_dialect!(read_only_mode_writes_nothing_but_audits_every_attempt => read_only_mode_writes_nothing_but_audits_every_attempt_postgres, read_only_mode_writes_nothing_but_audits_every_attempt_mysql);

async fn an_action_whose_audit_cannot_be_written_is_not_performed(dialect: Dialect) {
    let (config, db) = common::migrated_database(dialect).await;
    let rec = stuck_record(&db, &instance("dead").id).await;
    let holder = locks_for(&config, &instance("dead"));
    let key = order_key();
    let value = hold_and_abandon(&holder, &key).await;
    sqlx::query("DROP TABLE ops_audit")
        .execute(&db.pool)
        .await
        .unwrap();

    let ops = actions_for(&config, &db, true).await;
    let r = ops.run(&finalize(&rec)).await;
    assert_eq!(
        (r.outcome, r.audit_id),
        (ActionOutcome::Error, None),
        "{dialect}: {}",
        r.detail
    );
    assert!(r.detail.contains("not performed"), "{}", r.detail);
    assert_eq!(
        idempotency::get(&db, &rec.request_id)
            .await
            .unwrap()
            .unwrap(),
        rec,
        "{dialect}: record untouched"
    );

    let view = ops.locks().inspect(&key).await;
    let r = ops.run(&ops::release_of(&view, false, false, None)).await;
    assert_eq!(
        (r.outcome, r.audit_id),
        (ActionOutcome::Error, None),
        "{dialect}: {}",
        r.detail
    );
    assert_eq!(
        ops.locks().inspect(&key).await.values(),
        vec![value.as_str()],
        "{dialect}: lock untouched"
    );
    ops.locks().release_if_value(&key, &value).await.unwrap();
    db.pool.close().await;
}

per_dialect!(an_action_whose_audit_cannot_be_written_is_not_performed => an_action_whose_audit_cannot_be_written_is_not_performed_postgres, an_action_whose_audit_cannot_be_written_is_not_performed_mysql);

// ---------------------------------------------------------------------------------------------
// the headless twins, and the trace event
// ---------------------------------------------------------------------------------------------

/// `idemguard finalize` / `release-lock` as a runbook runs them: same guards, exit status 4 on a
/// refusal, 5 when the target changed, 0 when done; and every attempt is an `operator_action`
/// event on the trace topic.
async fn headless_twins_guard_audit_and_trace_like_the_library(dialect: Dialect) {
    let (mut config, db) = common::migrated_database(dialect).await;
    let topics = common::fresh_topics(&config, &["idemguard.trace"]).await;
    config.kafka.trace_topic = topics[0].clone();
    let rec = stuck_record(&db, &instance("dead").id).await;
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
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();

    let (code, out) = run(s(&["finalize", &rec.request_id]));
    assert_eq!(code, Some(4), "{dialect}: read-only refuses: {out}");
    assert!(out.contains("--allow-actions"), "{out}");
    let (code, out) = run(s(&[
        "finalize",
        &rec.request_id,
        "--expect-version",
        &(rec.version + 7).to_string(),
        "--allow-actions",
    ]));
    assert_eq!(code, Some(5), "{dialect}: another version: {out}");
    let (code, out) = run(s(&[
        "finalize",
        &rec.request_id,
        "--allow-actions",
        "--reason",
        "runbook 7",
    ]));
    assert_eq!(code, Some(0), "{dialect}: {out}");
    assert!(
        out.contains("finalize") && out.contains("done") && out.contains("FAILED"),
        "{out}"
    );
    assert_eq!(
        idempotency::get(&db, &rec.request_id)
            .await
            .unwrap()
            .unwrap()
            .status,
        "FAILED"
    );

    // The same owner, an earlier acquisition (another nonce): what the operator saw is gone.
    let mut earlier = idemguard::contracts::LockHolder::from_value(&value).unwrap();
    earlier.nonce = "0".repeat(32);
    let (code, out) = run(s(&[
        "release-lock",
        &key,
        "--expect-value",
        &earlier.to_value(),
        "--allow-actions",
    ]));
    assert_eq!(
        code,
        Some(5),
        "{dialect}: a value no longer held deletes nothing: {out}"
    );
    assert_eq!(holder.inspect(&key).await.values(), vec![value.as_str()]);
    let (code, out) = run(s(&[
        "release-lock",
        &key,
        "--expect-value",
        &value,
        "--bump-fence",
        "--allow-actions",
        "--json",
    ]));
    assert_eq!(code, Some(0), "{dialect}: {out}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["outcome"], "done");
    assert!(holder.inspect(&key).await.is_free());

    let outcomes: Vec<String> = audit(&db, &rec.request_id)
        .await
        .into_iter()
        .rev()
        .map(|r| r.outcome)
        .collect();
    assert_eq!(outcomes, vec!["refused", "changed", "done"], "{dialect}");
    let outcomes: Vec<String> = audit(&db, &key)
        .await
        .into_iter()
        .rev()
        .map(|r| r.outcome)
        .collect();
    assert_eq!(outcomes, vec!["changed", "done"], "{dialect}");

    let log = idemguard::console::read::bounded::read_trace_log(
        &config,
        idemguard::console::read::catch_up::StartAt::Beginning,
    )
    .await
    .unwrap();
    let events = log.matching(None, Some(&rec.request_id), &Default::default());
    let ops: Vec<&idemguard::contracts::TraceEvent> = events
        .iter()
        .filter(|e| e.outcome == idemguard::contracts::Outcome::OperatorAction)
        .collect();
    assert_eq!(
        ops.len(),
        3,
        "{dialect}: one operator_action event per attempt: {events:?}"
    );
    assert!(ops
        .iter()
        .all(|e| e.layer == idemguard::contracts::Layer::Console));
    db.pool.close().await;
}

per_dialect!(headless_twins_guard_audit_and_trace_like_the_library => headless_twins_guard_audit_and_trace_like_the_library_postgres, headless_twins_guard_audit_and_trace_like_the_library_mysql);

// ---------------------------------------------------------------------------------------------
// the console: confirm popup, tags, read-only keys, per-row results, the Audit view
// ---------------------------------------------------------------------------------------------

#[allow(unused_imports)]
use crate::console::fixture as console_fixture;

use console_fixture::{
    age_after, assert_refresh_drawn, cell, parse_age, press, pump_until, screen, type_str,
};
use crossterm::event::KeyCode;
use idemguard::console::tui::app::App;
use idemguard::console::tui::backend::Backends;
use idemguard::console::tui::keymap::View;

fn redactions() -> Vec<(&'static str, &'static str)> {
    vec![
        (r"[A-Z]+:ORDER:\d{8}:[0-9a-f-]*…?", "[request_id]"),
        (r"\b\d{17}[0-9a-f]{0,12}…?", "[order_no]"),
        (r"\b[0-9a-f]{32}\b", "[nonce]"),
        (r"\b\d\d:\d\d:\d\d\.\d{3}\b", "[time]"),
        (r"\b1\d{12}\b", "[ms]"),
        (r"\b1\d{15}\b", "[fence]"),
        (
            r"(\b\d+m\d\ds\b|\b\d+h\d\dm\b|\b\d+(\.\d)?s\b|\b\d+ms\b) *",
            "[dur] ",
        ),
        (r"igt_[0-9a-f]+", "igt_[db]"),
        (r"127\.0\.0\.1:\d{4,5}", "127.0.0.1:[port]"),
        (r"operator [A-Za-z0-9_.-]+", "operator [op]"),
    ]
}

macro_rules! snapshot {
    ($name:expr, $text:expr) => {
        insta::with_settings!({ filters => redactions(), prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!($name, $text);
        });
    };
}

const DEAD_KEY: &str = "lock:order:incident-dead";
const LIVE_KEY: &str = "lock:order:incident-live";

/// A world of the test's own: a fresh database, a Redis server of its own (so the Locks view
/// lists exactly these locks), a dead owner's lock, a live owner's lock and two stuck records.
async fn console_world() -> (
    console_fixture::RedisServer,
    Config,
    Database,
    Vec<IdempotencyRecord>,
    idemguard::lock::Heartbeat,
) {
    let redis = console_fixture::RedisServer::start();
    let (mut config, db) = common::migrated_database(Dialect::Postgres).await;
    config.redis.url = redis.url();
    config.redis.redlock_nodes = vec![];
    config.lock.mode = LockMode::Single;
    config.console.stuck_threshold = Duration::ZERO;
    config.console.operator = "oncall".into();
    config.trace.enabled = false;
    let topics = common::fresh_topics(&config, &["idemguard.trace", "payment.succeeded"]).await;
    config.kafka.trace_topic = topics[0].clone();
    config.kafka.payment_topic = topics[1].clone();
    let dead = Instance {
        id: "dead-owner".into(),
        host: "h1".into(),
        pid: 11,
    };
    let live = Instance {
        id: "live-owner".into(),
        host: "h2".into(),
        pid: 22,
    };
    hold_and_abandon(&locks_for(&config, &dead), DEAD_KEY).await;
    let live_locks = locks_for(&config, &live);
    let heartbeat = live_locks.liveness().start(&live).await.unwrap();
    hold_and_abandon(&live_locks, LIVE_KEY).await;
    let with_order = stuck_record(&db, "dead-owner").await;
    place_order(&db, &with_order.request_id).await;
    let without = stuck_record(&db, "dead-owner").await;
    tokio::time::sleep(Duration::from_millis(5)).await; // older than the (zero) threshold
    (redis, config, db, vec![with_order, without], heartbeat)
}

#[tokio::test]
async fn console_release_finalize_bulk_and_audit_through_the_confirm_popup() {
    let before = idemguard::contracts::now_ms();
    let (_redis, config, db, stuck, heartbeat) = console_world().await;
    let made = before..=idemguard::contracts::now_ms();
    let mut backends = Backends::spawn(&config);
    let exec = backends.spawn_executor(&config, true);
    let mut app = App::new(&config, None);
    app.allow_actions(true);
    app.attach_executor(exec);
    pump_until(
        &mut app,
        &mut backends.updates,
        "two locks and two stuck records",
        |a| {
            a.stores.locks.as_ref().is_some_and(|l| l.locks.len() == 2)
                && a.stores.stuck.as_ref().is_some_and(|s| s.len() == 2)
                && a.actions.audit.is_some()
        },
    )
    .await;

    // Locks: the dead owner's lock, confirmed with Enter.
    press(&mut app, KeyCode::Char('3'));
    type_str(&mut app, "/dead-owner");
    press(&mut app, KeyCode::Enter);
    press(&mut app, KeyCode::Char('x'));
    let c = app
        .actions
        .confirm
        .clone()
        .expect("x opens the confirmation");
    assert!(c.phrase.is_none() && !c.needs_reason, "{c:?}");
    let s = screen(&mut app, 200, 30);
    assert!(
        s.contains(DEAD_KEY)
            && s.contains("dead (no heartbeat)")
            && s.contains("compare-and-delete")
            && s.contains("PTTL"),
        "{s}"
    );
    snapshot!("actions_confirm_release", popup(&s));
    // What the snapshot redacts, on the drawn cells: the PTTL is within the lock's
    // 60 s TTL, the holder's acquired_at is when the world was made.
    let left = age_after(&s, "· PTTL ");
    assert!(left > 0 && left <= 60_000, "PTTL {left} ms: {s}");
    let at = number_after(&s, "\"acquired_at\":");
    assert!(made.contains(&at), "acquired_at {at} not in {made:?}: {s}");
    press(&mut app, KeyCode::Enter);
    assert!(app.actions.confirm.is_none());
    // Until the batch has ended (its summary), not its first result: Esc stops a running batch
    // instead of clearing the filter.
    pump_until(&mut app, &mut backends.updates, "the release result", |a| {
        !a.actions.last_batch(a.ui.view).is_empty() && !a.actions.is_running()
    })
    .await;
    assert_eq!(
        app.actions.last_batch(app.ui.view)[0].outcome,
        ActionOutcome::Done,
        "{:?}",
        app.actions.last_batch(app.ui.view)
    );
    assert!(ops_locks(&config).inspect(DEAD_KEY).await.is_free());

    // The live owner's lock: forced, so a reason is required before Enter runs it.
    press(&mut app, KeyCode::Esc); // clear the filter
    type_str(&mut app, "/live-owner");
    press(&mut app, KeyCode::Enter);
    press(&mut app, KeyCode::Char('x'));
    assert!(app.actions.confirm.as_ref().unwrap().needs_reason);
    press(&mut app, KeyCode::Enter);
    assert!(
        app.actions.confirm.is_some(),
        "Enter without a reason does nothing"
    );
    assert!(
        app.ui.message.as_ref().unwrap().0.contains("reason"),
        "{:?}",
        app.ui.message
    );
    type_str(&mut app, "holder hung since 03:00");
    press(&mut app, KeyCode::Enter);
    pump_until(&mut app, &mut backends.updates, "the forced release", |a| {
        a.actions
            .last_batch(a.ui.view)
            .first()
            .is_some_and(|r| r.target == LIVE_KEY)
            && !a.actions.is_running()
    })
    .await;
    assert_eq!(
        app.actions.last_batch(app.ui.view)[0].outcome,
        ActionOutcome::Done,
        "{:?}",
        app.actions.last_batch(app.ui.view)
    );
    assert!(ops_locks(&config).inspect(LIVE_KEY).await.is_free());

    // Stuck: Space tags both rows; a bulk action needs the typed phrase; each row its result.
    press(&mut app, KeyCode::Char('5'));
    pump_until(&mut app, &mut backends.updates, "stuck rows", |a| {
        a.row_count(View::Stuck) == 2
    })
    .await;
    press(&mut app, KeyCode::Char('g'));
    press(&mut app, KeyCode::Char(' '));
    press(&mut app, KeyCode::Char(' '));
    assert!(!app.ui.paused, "space tags in the Stuck view");
    assert_eq!(
        app.actions.tagged.get(&View::Stuck).map(|t| t.len()),
        Some(2)
    );
    press(&mut app, KeyCode::Char('f'));
    let c = app.actions.confirm.clone().unwrap();
    assert_eq!(c.phrase.as_deref(), Some("finalize 2 in local"));
    assert!(
        c.lines
            .iter()
            .any(|l| l.contains("AND status = 'PROCESSING' AND version = $8")),
        "the SQL WHERE is shown: {:?}",
        c.lines
    );
    press(&mut app, KeyCode::Enter);
    assert!(
        app.actions.confirm.is_some(),
        "no phrase typed: nothing runs"
    );
    type_str(&mut app, "finalize 2 in local");
    press(&mut app, KeyCode::Enter);
    pump_until(
        &mut app,
        &mut backends.updates,
        "two finalize results",
        |a| a.actions.last_batch(a.ui.view).len() == 2 && !a.actions.is_running(),
    )
    .await;
    assert!(
        app.actions
            .last_batch(app.ui.view)
            .iter()
            .all(|r| r.outcome == ActionOutcome::Done),
        "{:?}",
        app.actions.last_batch(app.ui.view)
    );
    let statuses: Vec<String> = futures_statuses(&db, &stuck).await;
    assert_eq!(statuses, vec!["SUCCEEDED", "FAILED"]);
    let s = screen(&mut app, 160, 30);
    assert!(
        s.contains("Last actions, per row")
            && s.contains("SUCCEEDED 201")
            && s.contains("FAILED 422"),
        "{s}"
    );

    // The Audit view lists every attempt.
    type_str(&mut app, ":audit");
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.ui.view, View::Audit);
    pump_until(&mut app, &mut backends.updates, "four audit rows", |a| {
        a.audit_rows().len() == 4
    })
    .await;
    let s = screen(&mut app, 200, 14);
    assert!(
        s.contains("release_lock") && s.contains("finalize") && s.contains("holder hung since 03"),
        "{s}"
    );
    assert_eq!(
        common::count(&db, "ops_audit WHERE outcome = 'done'").await,
        4
    );
    heartbeat.stop().await.unwrap();
    backends.shutdown().await;
    db.pool.close().await;
}

/// The integer drawn right after `label` (epoch ms in the popup's JSON).
fn number_after(text: &str, label: &str) -> i64 {
    let at = text
        .find(label)
        .unwrap_or_else(|| panic!("`{label}` in: {text}"))
        + label.len();
    let digits: String = text[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("`{label}` not a number: {text}"))
}

/// The popup's lines of a screen (the rest has volatile backend states).
fn popup(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.contains("╭ Release") || l.contains("╭ Finalize"))
        .expect("a popup on screen");
    let end = start
        + lines[start..]
            .iter()
            .position(|l| l.trim_start_matches('│').trim_start().starts_with('╰'))
            .expect("its bottom");
    lines[start..=end]
        .iter()
        .map(|l| l.trim_start_matches('│').trim_end_matches('│').trim())
        .collect::<Vec<_>>()
        .join("\n")
}

fn ops_locks(config: &Config) -> Locks {
    locks_for(config, &instance("reader"))
}

async fn futures_statuses(db: &Database, recs: &[IdempotencyRecord]) -> Vec<String> {
    let mut out = Vec::new();
    for r in recs {
        out.push(
            idempotency::get(db, &r.request_id)
                .await
                .unwrap()
                .unwrap()
                .status,
        );
    }
    out
}

#[tokio::test]
async fn read_only_console_greys_the_action_keys_and_audits_the_refused_attempt() {
    let made = idemguard::contracts::now_ms();
    let (_redis, config, db, stuck, heartbeat) = console_world().await;
    let mut backends = Backends::spawn(&config);
    let exec = backends.spawn_executor(&config, false);
    let mut app = App::new(&config, None);
    app.attach_executor(exec);
    pump_until(
        &mut app,
        &mut backends.updates,
        "locks and stuck records",
        |a| {
            a.stores.locks.as_ref().is_some_and(|l| l.locks.len() == 2)
                && a.stores.stuck.as_ref().is_some_and(|s| s.len() == 2)
        },
    )
    .await;
    press(&mut app, KeyCode::Char('3'));
    type_str(&mut app, "/dead-owner");
    press(&mut app, KeyCode::Enter);
    let s = screen(&mut app, 160, 12);
    assert!(
        s.contains("<x> release (read-only: --allow-actions)") && s.contains("read-only"),
        "{s}"
    );
    // The backends' line is volatile (the topics may still be connecting): left out.
    let stable: Vec<&str> = s
        .lines()
        .enumerate()
        .filter(|(i, _)| *i != 1)
        .map(|(_, l)| l)
        .collect();
    snapshot!("actions_locks_read_only", stable.join("\n"));
    // What the snapshot redacts, on the drawn cells: HELD is at most the time since
    // the world was made, the PTTL within the 60 s TTL; the refresh is the configured one.
    assert_refresh_drawn(&s, config.console.refresh);
    let get = |h: &str| cell(&s, idemguard::console::columns::LOCKS, DEAD_KEY, h);
    let held = parse_age(&get("HELD")).unwrap_or_else(|| panic!("HELD: {s}"));
    assert!(
        (0..=idemguard::contracts::now_ms() - made).contains(&held),
        "HELD {held} ms: {s}"
    );
    let left = parse_age(&get("PTTL")).unwrap_or_else(|| panic!("PTTL: {s}"));
    assert!(left > 0 && left <= 60_000, "PTTL {left} ms: {s}");
    assert_eq!(get("OWNER"), "DEAD", "{s}");
    press(&mut app, KeyCode::Char('x'));
    assert!(
        app.actions.confirm.is_none(),
        "read-only: no confirmation opens"
    );
    assert!(
        app.ui
            .message
            .as_ref()
            .unwrap()
            .0
            .contains("--allow-actions"),
        "{:?}",
        app.ui.message
    );
    pump_until(
        &mut app,
        &mut backends.updates,
        "the refused attempt",
        |a| !a.actions.last_batch(a.ui.view).is_empty(),
    )
    .await;
    assert_eq!(
        app.actions.last_batch(app.ui.view)[0].outcome,
        ActionOutcome::Refused
    );
    assert!(
        !ops_locks(&config).inspect(DEAD_KEY).await.is_free(),
        "nothing deleted"
    );
    assert_eq!(audit(&db, DEAD_KEY).await[0].outcome, "refused");
    assert_eq!(
        idempotency::get(&db, &stuck[0].request_id)
            .await
            .unwrap()
            .unwrap(),
        stuck[0]
    );

    // The console exports the post-incident report of an order (the same as `idemguard report`).
    type_str(&mut app, &format!(":report {}", stuck[0].request_id));
    press(&mut app, KeyCode::Enter);
    pump_until(&mut app, &mut backends.updates, "the report written", |a| {
        a.ui.message
            .as_ref()
            .is_some_and(|m| m.0.contains("written"))
    })
    .await;
    let msg = app.ui.message.clone().unwrap().0;
    // "report written to /full/path/idemguard-report-….md: …" (into console.report_dir).
    let path = msg
        .strip_prefix("report written to ")
        .and_then(|m| m.split(".md: ").next())
        .map(|p| format!("{p}.md"))
        .unwrap_or_else(|| panic!("{msg}"));
    let md = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(
        md.starts_with("# Post-incident report") && md.contains(&stuck[0].request_id),
        "{msg}\n{md}"
    );

    // Space still pauses outside Locks, Stuck and the DLQ; p pauses everywhere; the help says so.
    press(&mut app, KeyCode::Char('4'));
    press(&mut app, KeyCode::Char(' '));
    assert!(app.ui.paused);
    press(&mut app, KeyCode::Char('3'));
    press(&mut app, KeyCode::Char('p'));
    assert!(!app.ui.paused);
    press(&mut app, KeyCode::Char('?'));
    let help = screen(&mut app, 170, 50);
    assert!(
        help.contains("Locks, Stuck, DLQ: tag / untag the row")
            && help.contains("pause / resume live updates (every view)")
            && help.contains(":audit")
            && help.contains("DLQ: redrive the selected"),
        "{help}"
    );
    heartbeat.stop().await.unwrap();
    backends.shutdown().await;
    db.pool.close().await;
}

// ---------------------------------------------------------------------------------------------
// the post-incident report
// ---------------------------------------------------------------------------------------------

async fn the_report_names_a_points_row_written_behind_the_systems_back(dialect: Dialect) {
    use idemguard::console::report::{self, ReportScope};
    let (mut config, db) = common::migrated_database(dialect).await;
    let topics = common::fresh_topics(&config, &["idemguard.trace", "payment.succeeded"]).await;
    config.kafka.trace_topic = topics[0].clone();
    config.kafka.payment_topic = topics[1].clone();
    let since = idemguard::contracts::now_ms() - 1;

    // An order, and a duplicate create the database layer turned into a replay (traced).
    let me = instance("api");
    let tracer = Tracer::from_config(&config, &me).unwrap();
    let orders = Orders::new(db.clone(), tracer.clone());
    orders.set_stock(1, 100).await.unwrap();
    let rid = RequestId::generate("APP", "ORDER");
    let new = NewOrder {
        request_id: rid.clone(),
        order_no: OrderNo::generate(),
        user_id: 7,
        sku_id: 1,
        quantity: 1,
        amount: 1999,
        fence: None,
    };
    let order = orders.create(&new).await.unwrap().into_order();
    let again = NewOrder {
        order_no: OrderNo::generate(),
        ..new.clone()
    };
    assert!(orders.create(&again).await.unwrap().is_replay());
    // Another, clean order in the same window.
    let clean = orders
        .create(&NewOrder {
            request_id: RequestId::generate("APP", "ORDER"),
            order_no: OrderNo::generate(),
            ..new.clone()
        })
        .await
        .unwrap()
        .into_order();
    tracer.flush(Duration::from_secs(5));

    // The leak: points credited twice for one order under two event numbers.
    let p = common::placeholders(dialect, 5);
    for event in ["evt-legit-0001", "evt-leaked-0002"] {
        sqlx::query(&format!("INSERT INTO points_ledger (source_event_no, order_no, user_id, points, created_at) VALUES ({p})"))
            .bind(event)
            .bind(order.order_no.as_str())
            .bind(7i64)
            .bind(19i64)
            .bind(idemguard::contracts::now_ms())
            .execute(&db.pool)
            .await
            .unwrap();
    }
    // An operator attempt on this order (read-only: refused, audited).
    let ops = actions_for(&config, &db, false).await;
    let key = keys::order_lock(&order.order_no);
    ops.run(&Action::ReleaseLock {
        key,
        expect_values: vec!["v".into()],
        force: false,
        bump_fence: false,
        reason: None,
    })
    .await;
    let until = idemguard::contracts::now_ms() + 1;

    let r = report::build(
        &config,
        &ReportScope::Window {
            since_ms: since,
            until_ms: until,
        },
    )
    .await
    .unwrap();
    assert!(r.errors.is_empty(), "{dialect}: {:?}", r.errors);
    assert_eq!(r.orders_in_window, 2, "{dialect}");
    assert_eq!(
        r.leaks.len(),
        1,
        "{dialect}: only the points leak: {:?}",
        r.leaks
    );
    let leak = &r.leaks[0];
    assert_eq!(
        (
            leak.table.as_str(),
            leak.by.as_str(),
            leak.key.as_str(),
            leak.rows
        ),
        ("points_ledger", "order_no", order.order_no.as_str(), 2)
    );
    assert_eq!(
        (leak.first.as_str(), leak.last.as_str()),
        ("evt-leaked-0002", "evt-legit-0001")
    );
    let md = report::markdown(&r);
    assert!(
        md.contains("duplicates that got through: 1")
            && md.contains("| points_ledger | 2 |")
            && md.contains("evt-leaked-0002"),
        "{md}"
    );
    assert!(
        md.contains(&clean.order_no),
        "every order of the window has a timeline"
    );
    assert_eq!(r.operator_actions.len(), 1);

    let r = report::build(
        &config,
        &ReportScope::Id(TraceTarget::classify(&order.order_no)),
    )
    .await
    .unwrap();
    assert_eq!(r.leaks.len(), 1, "{dialect}");
    assert_eq!(r.timelines.len(), 1);
    let t = &r.timelines[0];
    assert!(
        t.stopped_count() >= 1,
        "{dialect}: the replayed create is a stopped duplicate: {:?}",
        t.interceptions
    );
    assert!(
        t.interceptions.iter().any(|i| i.layer == "db"),
        "{:?}",
        t.interceptions
    );
    assert_eq!(
        r.operator_actions.len(),
        1,
        "the refused release of lock:order:{}",
        order.order_no
    );
    let md = report::markdown(&r);
    // Every value in the report is escaped for Markdown: `release\_lock` renders as release_lock.
    assert!(
        md.contains("by **db**") && md.contains("evt-leaked-0002") && md.contains(r"release\_lock"),
        "{md}"
    );
    let r = report::build(
        &config,
        &ReportScope::Id(TraceTarget::classify(&clean.order_no)),
    )
    .await
    .unwrap();
    assert!(
        r.leaks.is_empty() && r.operator_actions.is_empty(),
        "{dialect}: a clean order's report names no leak"
    );

    // The command: JSON, exit 6 when a duplicate got through, 0 when none did.
    let cli = |id: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
            .args([
                "--config",
                concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml"),
                "report",
                "--id",
                id,
                "--json",
            ])
            .env("IDEMGUARD_DATABASE__URL", &config.database.url)
            .env("IDEMGUARD_KAFKA__TRACE_TOPIC", &config.kafka.trace_topic)
            .env(
                "IDEMGUARD_KAFKA__PAYMENT_TOPIC",
                &config.kafka.payment_topic,
            )
            .env("IDEMGUARD_LOG", "error")
            .output()
            .unwrap()
    };
    let out = cli(&order.order_no);
    assert_eq!(
        out.status.code(),
        Some(6),
        "{dialect}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["schema"], "idemguard.report/v1");
    assert_eq!(json["leaks"][0]["first"], "evt-leaked-0002");
    assert_eq!(cli(&clean.order_no).status.code(), Some(0), "{dialect}");
    db.pool.close().await;
}

per_dialect!(the_report_names_a_points_row_written_behind_the_systems_back => the_report_names_a_points_row_written_behind_the_systems_back_postgres, the_report_names_a_points_row_written_behind_the_systems_back_mysql);

/// The finalize statement itself (queries/*/console_finalize.sql): a version or status that
/// moved on matches nothing — the guard that holds even if a record changes between the
/// reconcile and the write.
async fn the_conditional_update_matches_nothing_once_the_record_moved_on(dialect: Dialect) {
    let (_, db) = common::migrated_database(dialect).await;
    let rec = stuck_record(&db, "someone").await;
    let run = |version: i64| {
        sqlx::query(db.sql("console_finalize"))
            .bind("FAILED")
            .bind(409i64)
            .bind("{}")
            .bind(None::<String>)
            .bind(1i64)
            .bind(2i64)
            .bind(rec.request_id.clone())
            .bind(version)
            .execute(&db.pool)
    };
    assert_eq!(
        run(rec.version + 1).await.unwrap().rows_affected(),
        0,
        "{dialect}: another version"
    );
    assert_eq!(
        idempotency::get(&db, &rec.request_id)
            .await
            .unwrap()
            .unwrap(),
        rec
    );
    assert_eq!(
        run(rec.version).await.unwrap().rows_affected(),
        1,
        "{dialect}: the version seen"
    );
    assert_eq!(
        run(rec.version + 1).await.unwrap().rows_affected(),
        0,
        "{dialect}: no longer PROCESSING"
    );
    let now = idempotency::get(&db, &rec.request_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (now.status.as_str(), now.version, now.lease_until),
        ("FAILED", rec.version + 1, 0)
    );
    db.pool.close().await;
}

per_dialect!(the_conditional_update_matches_nothing_once_the_record_moved_on => the_conditional_update_matches_nothing_once_the_record_moved_on_postgres, the_conditional_update_matches_nothing_once_the_record_moved_on_mysql);

#[tokio::test]
async fn a_value_naming_no_holder_is_released_only_by_force() {
    let (config, db) = common::migrated_database(Dialect::Postgres).await;
    let key = order_key();
    let mut c = redis::Client::open(config.redis.url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("set-by-some-script")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut c)
        .await
        .unwrap();
    let ops = actions_for(&config, &db, true).await;
    let release = |force: bool| Action::ReleaseLock {
        key: key.clone(),
        expect_values: vec!["set-by-some-script".into()],
        force,
        bump_fence: false,
        reason: force.then(|| "left by a migration script".into()),
    };
    let r = ops.run(&release(false)).await;
    assert_eq!(r.outcome, ActionOutcome::Refused, "{}", r.detail);
    assert_eq!(
        redis_get(&config, &key).await.as_deref(),
        Some("set-by-some-script")
    );
    let r = ops.run(&release(true)).await;
    assert_eq!(r.outcome, ActionOutcome::Done, "{}", r.detail);
    assert_eq!(redis_get(&config, &key).await, None);
    db.pool.close().await;
}
