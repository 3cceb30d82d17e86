//! `idemguard storm` against the real stack, at reduced sizes: every scenario passes its
//! invariants (double-click and flash-sale on both dialects); with the API record, fast path and
//! request lock switched off the database alone still stops a double click — and the
//! interception table says so; a leak written behind the system's back fails the check and
//! names the event and the order; the run's metrics agree with the database, storms side by
//! side never mix their counts, and a counter that drifts from the database fails the run.

use crate::common;

use std::time::Duration;

use common::*;
use idemguard::config::{Config, Dialect};
use idemguard::contracts::{Layer, Outcome};
use idemguard::storm::invariants::{self, Scope};
use idemguard::storm::report::StormReport;
use idemguard::storm::{self, Scenario, StormOptions};

async fn storm_on(
    dialect: Dialect,
    scenario: Scenario,
    size: usize,
    tweak: impl FnOnce(&mut StormOptions),
) -> (Config, StormReport) {
    common::log::test_log();
    let (mut config, db) = migrated_database(dialect).await;
    db.pool.close().await;
    config.database.max_connections = 8;
    let mut options = StormOptions::new(scenario);
    options.size = Some(size);
    options.concurrency = 32;
    options.binary = Some(env!("CARGO_BIN_EXE_idemguard").into());
    tweak(&mut options);
    let report = storm::run(config.clone(), &options)
        .await
        .unwrap_or_else(|e| panic!("{} on {dialect}: {e:#}", scenario.name()));
    (config, report)
}

fn assert_passed(r: &StormReport) {
    assert!(r.passed, "{}", r.render());
    if r.scenario != "chaos" {
        assert!(
            r.invariants
                .iter()
                .any(|c| c.name == "metrics_agree_with_database"),
            "the metrics were held to the database: {}",
            r.render()
        );
    }
    assert!(
        r.invariants.len() >= 8,
        "every invariant was checked: {:?}",
        r.invariants.iter().map(|c| c.name).collect::<Vec<_>>()
    );
    assert!(
        r.http.errors.is_empty(),
        "no transport errors or 5xx: {}",
        r.render()
    );
}

async fn double_click(dialect: Dialect) {
    let (_, r) = storm_on(dialect, Scenario::DoubleClick, 120, |_| {}).await;
    assert_passed(&r);
    assert_eq!(
        r.http.replies.get(&storm::client::ReplyKind::Created),
        Some(&1),
        "{}",
        r.render()
    );
    // Every other copy was stopped in front of the database, and the trace agrees with the client.
    let api = r.interception.stopped(Layer::Api, Outcome::Replayed)
        + r.interception
            .stopped(Layer::Api, Outcome::InFlightRejected);
    assert_eq!(api, 119, "{}", r.render());
    assert!(r.interception.mismatches.is_empty(), "{}", r.render());
    assert_eq!(r.interception.main_stopper(), Some(Layer::Api));
    // The metrics said the same: one order created, the other copies replayed or rejected.
    let created = r.metrics.delta(Layer::Db, Outcome::OrderCreated);
    assert_eq!(created.map(|d| (d.counted, d.database)), Some((1, Some(1))));
    let replayed = [Outcome::Replayed, Outcome::InFlightRejected]
        .map(|o| r.metrics.delta(Layer::Api, o).map_or(0, |d| d.counted));
    assert_eq!(replayed.iter().sum::<u64>(), 119, "{}", r.render());
}

per_dialect!(double_click => double_click_postgres, double_click_mysql);

/// Two storms at once in one process: each report counts its own run only (one registry per
/// rig), not the other's.
#[tokio::test]
async fn storms_side_by_side_count_only_their_own_run() {
    let (a, b) = tokio::join!(
        storm_on(Dialect::Postgres, Scenario::DoubleClick, 40, |_| {}),
        storm_on(Dialect::Postgres, Scenario::DoubleClick, 40, |_| {}),
    );
    for (_, r) in [a, b] {
        assert_passed(&r);
        let created = r.metrics.delta(Layer::Db, Outcome::OrderCreated);
        assert_eq!(created.map(|d| d.counted), Some(1), "{}", r.render());
        let api: u64 = r
            .metrics
            .deltas
            .iter()
            .filter(|d| d.layer == "api")
            .map(|d| d.counted)
            .sum();
        assert!(
            api <= 40 + 1,
            "one run's API decisions only: {}",
            r.render()
        );
    }
}

async fn broken_configuration(dialect: Dialect) {
    let (_, r) = storm_on(dialect, Scenario::DoubleClick, 60, |o| o.broken = true).await;
    assert_passed(&r);
    assert!(r.broken);
    // Nothing above the database answered: every copy got 201 with the one order, read back
    // after the unique key refused its insert.
    assert_eq!(
        r.http.replies.get(&storm::client::ReplyKind::Created),
        Some(&60),
        "{}",
        r.render()
    );
    assert_eq!(
        r.interception.by_layer.get(&Layer::Api),
        Some(&0),
        "{}",
        r.render()
    );
    assert_eq!(
        r.interception.by_layer.get(&Layer::Lock),
        Some(&0),
        "{}",
        r.render()
    );
    assert_eq!(
        r.interception
            .stopped(Layer::Db, Outcome::UniqueViolationReplayed),
        59,
        "{}",
        r.render()
    );
    assert_eq!(
        r.interception.main_stopper(),
        Some(Layer::Db),
        "{}",
        r.render()
    );
}

per_dialect!(broken_configuration => broken_configuration_the_database_stops_a_double_click_postgres, broken_configuration_the_database_stops_a_double_click_mysql);

async fn flash_sale(dialect: Dialect) {
    let (config, r) = storm_on(dialect, Scenario::FlashSale, 150, |o| o.stock = 40).await;
    assert_passed(&r);
    let kinds = &r.http.replies;
    use storm::client::ReplyKind::*;
    assert!(
        kinds.get(&OutOfStock).copied().unwrap_or(0) >= 110,
        "110 users found it sold out: {}",
        r.render()
    );
    // 40 orders, each paid once however often the provider and Kafka repeated it.
    assert_eq!(r.consumer.applied, 40, "{}", r.render());
    assert!(
        r.interception.stopped(Layer::Stream, Outcome::DedupHit) >= 40,
        "the re-produced events: {}",
        r.render()
    );
    assert!(
        r.interception
            .stopped(Layer::Db, Outcome::UniqueViolationReplayed)
            >= 40,
        "the second notifications: {}",
        r.render()
    );
    // From the database, independently of the report: stock 40 → 0, 40 orders.
    let db = idemguard::db::Database::connect(&config).await.unwrap();
    let orders = invariants::orders_of_run(&db, &format!("STORM:ORDER:%:{}-%", r.run_id))
        .await
        .unwrap();
    assert_eq!(orders.len(), 40);
    assert!(
        orders.iter().all(|(_, _, status)| status == "PAID"),
        "{orders:?}"
    );
}

per_dialect!(flash_sale => flash_sale_postgres, flash_sale_mysql);

#[tokio::test]
async fn gateway_retry() {
    let (_, r) = storm_on(Dialect::Postgres, Scenario::GatewayRetry, 40, |o| {
        o.gateway_timeout = Duration::from_millis(1)
    })
    .await;
    assert_passed(&r);
    assert_eq!(
        r.http.replies.get(&storm::client::ReplyKind::Created),
        Some(&40),
        "{}",
        r.render()
    );
    assert!(
        r.interception
            .by_layer
            .get(&Layer::Api)
            .copied()
            .unwrap_or(0)
            > 0,
        "retries met the first attempt: {}",
        r.render()
    );
}

#[tokio::test]
async fn mq_replay() {
    let (_, r) = storm_on(Dialect::Mysql, Scenario::MqReplay, 30, |_| {}).await;
    assert_passed(&r);
    assert_eq!(r.consumer.applied, 30, "{}", r.render());
    assert_eq!(
        r.consumer.dedup_hits,
        60,
        "re-produced + rewound: {}",
        r.render()
    );
    let paid = r.metrics.delta(Layer::Db, Outcome::PaymentRecorded);
    assert_eq!(paid.map(|d| (d.counted, d.database)), Some((30, Some(30))));
    let hits = r.metrics.delta(Layer::Stream, Outcome::DedupHit);
    assert_eq!(hits.map(|d| d.counted), Some(60), "{}", r.render());
    let applied = r.metrics.delta(Layer::Stream, Outcome::SinkApplied);
    assert_eq!(applied.map(|d| d.counted), Some(30), "{}", r.render());
}

#[tokio::test]
async fn consumer_crash() {
    let (_, r) = storm_on(Dialect::Postgres, Scenario::ConsumerCrash, 30, |_| {}).await;
    assert_passed(&r);
    // The dead binary committed nothing to Kafka, so the restarted consumer received all 30:
    // the crashed batch (applied by the dead binary) as dedup hits, the rest applied, once each.
    let c = &r.consumer;
    assert_eq!(c.received, 30, "{}", r.render());
    assert!(
        c.dedup_hits >= 1,
        "the crashed batch came back: {}",
        r.render()
    );
    assert_eq!(c.applied + c.dedup_hits, 30, "{}", r.render());
    assert_eq!((c.sink_duplicates, c.dlq), (0, 0), "{}", r.render());
}

#[tokio::test]
async fn lock_expiry() {
    let (_, r) = storm_on(Dialect::Mysql, Scenario::LockExpiry, 8, |_| {}).await;
    assert_passed(&r);
    assert!(r
        .invariants
        .iter()
        .any(|c| c.name == "stale_writer_refused" && c.passed));
    assert_eq!(
        r.interception.stopped(Layer::Db, Outcome::FenceRejected),
        8,
        "{}",
        r.render()
    );
}

#[tokio::test]
async fn redis_down() {
    let (_, r) = storm_on(Dialect::Postgres, Scenario::RedisDown, 120, |_| {}).await;
    assert_passed(&r);
    assert!(
        r.notes.iter().any(|n| n.contains("SIGKILLed")),
        "{:?}",
        r.notes
    );
    // Every key settled (a key answered 409 for ever fails this check), and each of the 12
    // keys got its order: at least one 201 per key, first answers and their replays.
    assert!(
        r.invariants
            .iter()
            .any(|c| c.name == "every_key_settled_after_redis_died" && c.passed),
        "{}",
        r.render()
    );
    let created = r
        .http
        .replies
        .get(&storm::client::ReplyKind::Created)
        .copied()
        .unwrap_or(0);
    assert!(
        created >= 12,
        "{created} answers 201 for 12 keys: {}",
        r.render()
    );
}

/// A second points row for an already-paid order, written straight into the table (a sink
/// that forgot its unique key, a manual fix gone wrong): the check fails and names it.
#[tokio::test]
async fn an_injected_leak_fails_the_check_and_names_the_event() {
    let (config, r) = storm_on(Dialect::Postgres, Scenario::MqReplay, 5, |_| {}).await;
    assert_passed(&r);
    let db = idemguard::db::Database::connect(&config).await.unwrap();
    let pattern = format!("STORM:ORDER:%:{}-%", r.run_id);
    let orders = invariants::orders_of_run(&db, &pattern).await.unwrap();
    let (_, order_no, _) = orders
        .iter()
        .find(|o| o.2 == "PAID")
        .expect("a paid order")
        .clone();
    let leak = format!("LEAK-{}", uuid::Uuid::now_v7());
    sqlx::query("INSERT INTO points_ledger (source_event_no, order_no, user_id, points, created_at) VALUES ($1, $2, 1, 19, 0)")
        .bind(&leak)
        .bind(&order_no)
        .execute(&db.pool)
        .await
        .unwrap();
    let scope = Scope {
        order_pattern: pattern,
        group: format!("idemguard-storm-{}", r.run_id),
        ..Default::default()
    };
    let checks = invariants::check(&db, &scope).await.unwrap();
    let failed: Vec<_> = checks.iter().filter(|c| !c.passed).collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].name, "one_points_row_per_event_and_order");
    assert_eq!(failed[0].offenders.len(), 1, "{:?}", failed[0].offenders);
    let named = &failed[0].offenders[0];
    assert!(
        named.contains(&order_no) && named.contains(&leak) && named.contains("2 points rows"),
        "{named}"
    );
    a_drifting_counter_fails_and_is_named(&db, &scope.order_pattern, orders.len()).await;
}

/// A registry that counted every order but no payment, against the same run's rows: the
/// metrics check fails and names `payment_recorded`, and only it.
async fn a_drifting_counter_fails_and_is_named(
    db: &idemguard::db::Database,
    pattern: &str,
    orders: usize,
) {
    let drifted = idemguard::metrics::Metrics::new();
    for _ in 0..orders {
        drifted.decision(Layer::Db, Outcome::OrderCreated, 0);
    }
    let (seen, check) = storm::metered::read(&drifted, db, pattern, None)
        .await
        .unwrap();
    let check = check.expect("held to the database");
    assert!(!check.passed, "{seen:?}");
    assert_eq!(check.offenders.len(), 1, "{:?}", check.offenders);
    let named = &check.offenders[0];
    assert!(
        named.contains("outcome=\"payment_recorded\"") && named.contains("counted 0"),
        "{named}"
    );
}

/// A requestId the client was answered 201 for with no order behind it (an order lost after
/// its answer): "exactly one order per requestId" fails and names it — a GROUP BY over the
/// orders alone cannot see a requestId with none. Then a record left PROCESSING past its lease
/// fails "no record PROCESSING past its lease".
#[tokio::test]
async fn a_created_answer_without_an_order_fails_the_check() {
    let (config, r) = storm_on(Dialect::Mysql, Scenario::MqReplay, 5, |_| {}).await;
    assert_passed(&r);
    let db = idemguard::db::Database::connect(&config).await.unwrap();
    let pattern = format!("STORM:ORDER:%:{}-%", r.run_id);
    let orders = invariants::orders_of_run(&db, &pattern).await.unwrap();
    let lost = format!("STORM:ORDER:20261130:{}-lost", r.run_id);
    let created = orders
        .iter()
        .map(|o| o.0.clone())
        .chain([lost.clone()])
        .collect();
    let scope = Scope {
        order_pattern: pattern,
        group: format!("idemguard-storm-{}", r.run_id),
        created,
        ..Default::default()
    };
    let checks = invariants::check(&db, &scope).await.unwrap();
    let failed: Vec<_> = checks.iter().filter(|c| !c.passed).collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].name, "one_order_per_request");
    assert_eq!(
        failed[0].offenders,
        vec![format!("requestId {lost}: answered 201, 0 orders")]
    );

    // A record of the run left PROCESSING past its lease (its owner died, nobody retried).
    let stuck = format!("STORM:PAY:20261130:{}-stuck", r.run_id);
    sqlx::query(&format!(
        "INSERT INTO idempotency_record (request_id, biz_type, request_hash, status, owner, lease_until, created_at, updated_at, expire_at) \
         VALUES ('{stuck}', 'ORDER', 'h', 'PROCESSING', 'dead-owner', 1, 0, 0, 0)"
    ))
    .execute(&db.pool)
    .await
    .unwrap();
    let scope = Scope {
        record_pattern: format!("STORM:%:%:{}-%", r.run_id),
        ..scope
    };
    let checks = invariants::check(&db, &scope).await.unwrap();
    let failed: Vec<_> = checks
        .iter()
        .filter(|c| !c.passed)
        .map(|c| c.name)
        .collect();
    assert_eq!(
        failed,
        [
            "one_order_per_request",
            "no_record_processing_past_its_lease"
        ]
    );
}

/// The chaos storm at CI size (about a minute): the flash sale in rounds while the seeded
/// nemesis freezes Redis, ends database sessions, SIGKILLs and restarts the real `serve`,
/// SIGKILLs lock holders and restarts the consumer. The faults make connection errors and 5xx
/// answers (retried by the client, not asserted away); the invariants from the database must
/// all hold, among them no record left PROCESSING and the killed holders' locks fenced.
///
/// The seed was chosen when a gap was open: its schedule never kills the service within 3 s of a
/// session kill. A finalize refused by a session kill is retried in the background a second
/// later, and a service killed before that used to leave its record PROCESSING behind the fast
/// path's answer (found by the 180 s run, BENCHMARKS.md). The fast path now gets an answer only
/// once the record holds it, so the next retry takes such a record over (`order_service_faults`:
/// `a_refused_finalize_then_a_crash_leaves_no_record_processing_*`); the seed no longer avoids
/// anything and is kept so the CI run stays the one measured.
const CHAOS_SEED: u64 = 20261170;

async fn chaos(dialect: Dialect) {
    let asked = Duration::from_secs(40);
    let (_, r) = storm_on(dialect, Scenario::Chaos, 1, |o| {
        o.duration = asked;
        o.seed = CHAOS_SEED;
    })
    .await;
    eprintln!("{}", r.render()); // the fault counts, in the CI log
    assert!(r.passed, "{}", r.render());
    // The rounds run until the duration asked is up: the rate is over the whole run, not over
    // the rounds' traffic alone (a 180 s run once reported "35958 requests in 40.12s").
    assert!(
        r.http.seconds >= asked.as_secs_f64(),
        "the report's {:.2} s is not the whole run's ({asked:?} asked): {}",
        r.http.seconds,
        r.render()
    );
    assert!(r.invariants.len() >= 8, "{}", r.render());
    let note = r
        .notes
        .iter()
        .find(|n| n.starts_with(&format!("chaos seed {CHAOS_SEED}")))
        .unwrap_or_else(|| panic!("the seed is reported: {}", r.render()));
    for fault in [
        " 0 Redis freezes",
        " 0 session kills",
        " 0 service kills",
        " 0 lock holders killed",
    ] {
        assert!(!note.contains(fault), "the nemesis acted: {note}");
    }
    for check in [
        "no_record_processing_past_its_lease",
        "killed_lock_holder_fenced",
    ] {
        assert!(
            r.invariants.iter().any(|c| c.name == check),
            "{check}: {}",
            r.render()
        );
    }
    assert!(
        r.consumer.applied > 0
            && r.http
                .replies
                .contains_key(&storm::client::ReplyKind::Created),
        "{}",
        r.render()
    );
}

per_dialect!(chaos => chaos_postgres, chaos_mysql);
