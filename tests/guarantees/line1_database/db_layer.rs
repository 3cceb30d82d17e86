//! Line of defense 1 against the real PostgreSQL and MariaDB, each test on both dialects:
//! duplicate creates become replays of the first order, stock never oversells, the state
//! machine and the version make transitions idempotent, stale fence tokens change nothing.
//!
//! Pools stay at 16 connections; the concurrency comes from hundreds of tasks waiting on them.

use crate::common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use idemguard::config::Dialect;
use idemguard::contracts::{new_event_id, Instance, OrderNo, RequestId};
use idemguard::db::orders::{
    find_order, CreateOutcome, NewOrder, OrderError, OrderKey, OrderRecord, Orders, Transition,
    TransitionOutcome,
};
use idemguard::db::state_machine::OrderStatus;
use idemguard::db::Database;
use idemguard::trace::Tracer;

/// A fresh migrated database and the order table on it. The pool waits up to a minute for a
/// connection: the storms below queue hundreds of tasks on 16 connections on purpose.
async fn orders_on(dialect: Dialect) -> Orders {
    let (_, db) = migrated_database_with(dialect, |c| {
        c.database.max_connections = 16;
        c.database.connect_timeout = Duration::from_secs(60);
    })
    .await;
    Orders::new(db, Tracer::log_only(&Instance::current()))
}

fn new_order(request_id: &RequestId, sku_id: i64, fence: Option<i64>) -> NewOrder {
    NewOrder {
        request_id: request_id.clone(),
        order_no: OrderNo::generate(),
        user_id: 42,
        sku_id,
        quantity: 1,
        amount: 1999,
        fence,
    }
}

/// The order as the database holds it now.
async fn row(orders: &Orders, order_no: &str) -> OrderRecord {
    orders
        .find_by_order_no(order_no)
        .await
        .unwrap()
        .expect("the order exists")
}

/// A new order of `sku_id`, created without a lock or under fence token `fence`.
async fn placed(orders: &Orders, sku_id: i64, fence: Option<i64>) -> OrderRecord {
    let request = RequestId::generate("APP", "ORDER");
    orders
        .create(&new_order(&request, sku_id, fence))
        .await
        .unwrap()
        .into_order()
}

/// Applies `t` and asserts its outcome matches the pattern; the outcome.
macro_rules! assert_moves {
    ($orders:expr, $t:expr, $dialect:expr, $($outcome:tt)+) => {{
        let out = $orders.transition(&$t).await.unwrap();
        assert!(matches!(&out, $($outcome)+), "{}: {out:?}", $dialect);
        out
    }};
}

/// `SELECT CAST(COUNT(*) AS <bigint>) FROM table WHERE where_` — test-only inspection of the
/// tables, written per dialect here rather than in queries/ (no product code runs it).
async fn count(db: &Database, table: &str, where_: &str) -> i64 {
    let bigint = if db.dialect() == Dialect::Postgres {
        "BIGINT"
    } else {
        "SIGNED"
    };
    let sql = format!("SELECT CAST(COUNT(*) AS {bigint}) FROM {table} WHERE {where_}");
    sqlx::query_scalar(sql.as_str())
        .fetch_one(&db.pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

// ---------------------------------------------------------------------------------------------

async fn five_hundred_creates_of_one_request_make_one_order(dialect: Dialect) {
    let orders = orders_on(dialect).await;
    orders.set_stock(1, 1000).await.unwrap();
    let request_id = RequestId::generate("APP", "ORDER");
    let tasks: Vec<_> = (0..500)
        .map(|_| {
            let orders = orders.clone();
            // Each caller brings its own orderNo, as retries of the API layer would.
            let order = new_order(&request_id, 1, None);
            tokio::spawn(async move { orders.create(&order).await })
        })
        .collect();
    let mut created = 0;
    let mut order_nos = HashSet::new();
    for t in tasks {
        let outcome = t
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{dialect}: a duplicate create must not fail: {e}"));
        if let CreateOutcome::Created(_) = outcome {
            created += 1;
        }
        assert_eq!(outcome.order().req_id, request_id.as_str());
        order_nos.insert(outcome.order().order_no.clone());
    }
    assert_eq!(created, 1, "{dialect}: exactly one caller creates");
    assert_eq!(
        order_nos.len(),
        1,
        "{dialect}: every caller gets the same orderNo: {order_nos:?}"
    );
    let order_no = order_nos.into_iter().next().unwrap();
    let db = orders.database();
    assert_eq!(
        count(db, "order_record", "1 = 1").await,
        1,
        "{dialect}: order rows"
    );
    assert_eq!(
        count(db, "stock_movement", "1 = 1").await,
        1,
        "{dialect}: stock movements"
    );
    assert_eq!(
        orders.stock_of(1).await.unwrap(),
        Some(999),
        "{dialect}: stock taken once"
    );
    let by_request = orders
        .find_by_request_id(request_id.as_str())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(by_request.order_no, order_no);
    assert_eq!(
        by_request.replay_count, 499,
        "{dialect}: each duplicate was told apart from a new order and counted"
    );
    assert_eq!(row(&orders, &order_no).await, by_request);
    assert_eq!(
        find_order(db, OrderKey::OrderNo(&order_no)).await.unwrap(),
        Some(by_request)
    );
}

per_dialect!(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] five_hundred_creates_of_one_request_make_one_order => one_request_storm_postgres, one_request_storm_mysql);

// ---------------------------------------------------------------------------------------------

async fn three_hundred_orders_on_a_hundred_units(dialect: Dialect) {
    let orders = orders_on(dialect).await;
    orders.set_stock(7, 100).await.unwrap();
    // No watcher for "never below zero": the CHECK constraint makes that unobservable. The
    // proof is the exact end state: 100 created, 200 refused, stock 0, 100 movements.
    let tasks: Vec<_> = (0..300)
        .map(|_| {
            let orders = orders.clone();
            let order = new_order(&RequestId::generate("APP", "ORDER"), 7, None);
            tokio::spawn(async move { orders.create(&order).await })
        })
        .collect();
    let (mut created, mut out_of_stock) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            Ok(CreateOutcome::Created(o)) => {
                assert_eq!(o.status, OrderStatus::Created);
                created += 1;
            }
            Ok(CreateOutcome::Replayed(o)) => panic!(
                "{dialect}: distinct requestIds were replayed as {}",
                o.order_no
            ),
            Err(OrderError::OutOfStock {
                sku_id: 7,
                available: 0,
                wanted: 1,
            }) => out_of_stock += 1,
            Err(e) => panic!("{dialect}: unexpected error {e}"),
        }
    }
    assert_eq!((created, out_of_stock), (100, 200), "{dialect}");
    assert_eq!(
        orders.stock_of(7).await.unwrap(),
        Some(0),
        "{dialect}: stock ends at 0"
    );
    let db = orders.database();
    assert_eq!(
        count(db, "order_record", "1 = 1").await,
        100,
        "{dialect}: a refused order writes nothing"
    );
    assert_eq!(
        count(db, "stock_movement", "delta = -1").await,
        100,
        "{dialect}: one movement per order"
    );
    assert_eq!(
        count(
            db,
            "order_record o",
            "NOT EXISTS (SELECT 1 FROM stock_movement m WHERE m.order_no = o.order_no)"
        )
        .await,
        0
    );
}

per_dialect!(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] three_hundred_orders_on_a_hundred_units => stock_storm_postgres, stock_storm_mysql);

// ---------------------------------------------------------------------------------------------

async fn two_hundred_payments_of_one_order_apply_once(dialect: Dialect) {
    let orders = orders_on(dialect).await;
    orders.set_stock(3, 10).await.unwrap();
    let order = placed(&orders, 3, None).await;
    let event_id = new_event_id();
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let orders = orders.clone();
            let t = Transition::paid(order.order_no.clone(), event_id.clone());
            tokio::spawn(async move { orders.transition(&t).await })
        })
        .collect();
    let (mut applied, mut already) = (0, 0);
    for t in tasks {
        match t
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{dialect}: {e}"))
        {
            TransitionOutcome::Applied(o) => {
                assert_eq!((o.status, o.version), (OrderStatus::Paid, 1));
                applied += 1;
            }
            TransitionOutcome::AlreadyApplied(o) => {
                assert_eq!(o.status, OrderStatus::Paid);
                already += 1;
            }
            other => panic!(
                "{dialect}: a replayed payment must be applied or already applied, got {other:?}"
            ),
        }
    }
    assert_eq!((applied, already), (1, 199), "{dialect}");
    let paid = orders
        .find_by_payment_event_id(&event_id)
        .await
        .unwrap()
        .expect("the order is found by its payment event");
    assert_eq!(
        (paid.order_no.as_str(), paid.status, paid.version),
        (order.order_no.as_str(), OrderStatus::Paid, 1)
    );

    // A late or replayed event never moves the order back, nor sideways out of PAID.
    for status in [OrderStatus::Created, OrderStatus::Cancelled] {
        let t = Transition::to(order.order_no.clone(), status);
        assert_moves!(orders, t, dialect, TransitionOutcome::Rejected(o) if o.status == OrderStatus::Paid);
    }
    // A second, different payment event for a paid order changes nothing; the record says
    // which event paid it.
    let t = Transition::paid(order.order_no.clone(), new_event_id());
    assert_moves!(orders, t, dialect, TransitionOutcome::AlreadyApplied(o) if o.payment_event_id.as_deref() == Some(event_id.as_str()));
    let t = Transition::to(order.order_no.clone(), OrderStatus::Refunded);
    assert_moves!(orders, t, dialect, TransitionOutcome::Applied(o) if o.status == OrderStatus::Refunded && o.version == 2);
    let after = row(&orders, &order.order_no).await;
    assert_eq!(
        (
            after.status,
            after.version,
            after.payment_event_id.as_deref()
        ),
        (OrderStatus::Refunded, 2, Some(event_id.as_str()))
    );

    // The same event cannot pay a second order (payment_event_id is unique).
    let other = placed(&orders, 3, None).await;
    let err = orders
        .transition(&Transition::paid(other.order_no.clone(), event_id.clone()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, OrderError::PaymentEventTaken { .. }),
        "{dialect}: {err}"
    );
    assert_eq!(
        row(&orders, &other.order_no).await.status,
        OrderStatus::Created
    );
}

per_dialect!(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] two_hundred_payments_of_one_order_apply_once => payment_storm_postgres, payment_storm_mysql);

// ---------------------------------------------------------------------------------------------

async fn a_stale_fence_token_changes_nothing(dialect: Dialect) {
    let orders = orders_on(dialect).await;
    orders.set_stock(5, 10).await.unwrap();
    // Created under the lock's token 7.
    let order = placed(&orders, 5, Some(7)).await;
    assert_eq!(order.fence, 7);
    let before = row(&orders, &order.order_no).await;

    // Token 5: its holder's lock expired long ago. Refused whether the layer reads first...
    let stale = Transition::paid(order.order_no.clone(), new_event_id()).with_fence(5);
    assert_moves!(orders, stale, dialect, TransitionOutcome::FenceRejected { offered: 5, current } if current.fence == 7);
    // ...or goes straight to the conditional UPDATE (known version): the SQL refuses it itself.
    let t = stale.clone().with_expected_version(0);
    assert_moves!(
        orders,
        t,
        dialect,
        TransitionOutcome::FenceRejected { offered: 5, .. }
    );
    assert_eq!(
        row(&orders, &order.order_no).await,
        before,
        "{dialect}: the stale writes changed the row"
    );

    // The successor's token 9 applies and raises the stored fence; the old token stays out.
    let t = Transition::paid(order.order_no.clone(), new_event_id()).with_fence(9);
    let out = assert_moves!(orders, t, dialect, TransitionOutcome::Applied(o) if o.fence == 9 && o.status == OrderStatus::Paid);
    let paid = out.order().clone();
    let t = Transition::to(order.order_no.clone(), OrderStatus::Refunded)
        .with_fence(7)
        .with_expected_version(1);
    assert_moves!(
        orders,
        t,
        dialect,
        TransitionOutcome::FenceRejected { offered: 7, .. }
    );
    assert_eq!(
        row(&orders, &order.order_no).await,
        paid,
        "{dialect}: the stale refund changed the row"
    );
    // An equal token is the same holder: allowed.
    let t = Transition::to(order.order_no.clone(), OrderStatus::Refunded).with_fence(9);
    assert_moves!(orders, t, dialect, TransitionOutcome::Applied(o) if o.fence == 9 && o.status == OrderStatus::Refunded);
}

per_dialect!(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] a_stale_fence_token_changes_nothing => fencing_postgres, fencing_mysql);

// ---------------------------------------------------------------------------------------------

/// The create routine tells new from duplicate (`order_create`, called as the layer calls it).
/// On MySQL the rule inside is affected rows: sqlx connects with CLIENT_FOUND_ROWS, so a no-op
/// `ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id)` reports 1 for a duplicate — the same as a
/// new row — while the routine's `replay_count = replay_count + 1` reports 2. PostgreSQL's
/// `ON CONFLICT DO NOTHING … RETURNING` returns no id.
async fn affected_rows_tell_new_from_duplicate(dialect: Dialect) {
    let orders = orders_on(dialect).await;
    let db = orders.database();
    orders.set_stock(1, 10).await.unwrap();
    let create = |req: &'static str, order_no: &'static str| {
        sqlx::query(db.sql("order_create"))
            .bind(req)
            .bind(order_no)
            .bind(1_i64)
            .bind(1_i64)
            .bind(1_i64)
            .bind(100_i64)
            .bind("CREATED")
            .bind(0_i64)
            .bind(0_i64)
    };
    // By position: sqlx names a MySQL CALL's columns from the prepared statement, which has none.
    let outcome = |row: sqlx::any::AnyRow| -> (String, Option<i64>, Option<i64>) {
        use sqlx::Row;
        (
            row.get::<String, _>(0).trim().to_string(),
            row.get(1),
            row.get(2),
        )
    };
    let first = outcome(
        create("APP:ORDER:20261129:first-req", "O-first")
            .fetch_one(&db.pool)
            .await
            .unwrap(),
    );
    let dup = outcome(
        create("APP:ORDER:20261129:first-req", "O-second")
            .fetch_one(&db.pool)
            .await
            .unwrap(),
    );
    assert_eq!(first.0, "created", "{dialect}");
    assert!(
        first.1.is_some() && first.2 == Some(10),
        "{dialect}: {first:?}"
    );
    assert_eq!(dup, ("replayed".to_string(), None, None), "{dialect}");
    assert_eq!(count(db, "order_record", "1 = 1").await, 1, "{dialect}");
    assert_eq!(
        count(db, "stock_movement", "1 = 1").await,
        1,
        "{dialect}: the duplicate took no stock"
    );
    assert_eq!(orders.stock_of(1).await.unwrap(), Some(9), "{dialect}");
    if dialect == Dialect::Mysql {
        assert_eq!(
            count(db, "order_record", "replay_count = 1").await,
            1,
            "the routine counted the replay"
        );
        let noop = "INSERT INTO order_record (req_id, order_no, user_id, sku_id, quantity, amount, status, fence, created_at, updated_at) \
                    VALUES (?, ?, 1, 1, 1, 100, 'CREATED', 0, 0, 0) ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id)";
        let new = sqlx::query(noop)
            .bind("APP:ORDER:20261129:noop-req")
            .bind("O-noop-1")
            .execute(&db.pool)
            .await
            .unwrap();
        let again = sqlx::query(noop)
            .bind("APP:ORDER:20261129:noop-req")
            .bind("O-noop-2")
            .execute(&db.pool)
            .await
            .unwrap();
        assert_eq!(
            (new.rows_affected(), again.rows_affected()),
            (1, 1),
            "the no-op form cannot tell them apart under CLIENT_FOUND_ROWS"
        );
    }
}

per_dialect!(affected_rows_tell_new_from_duplicate => affected_rows_postgres, affected_rows_mysql);

// ---------------------------------------------------------------------------------------------

async fn refusals_write_nothing(dialect: Dialect) {
    let orders = orders_on(dialect).await;
    let db = orders.database();
    let err = orders
        .create(&new_order(&RequestId::generate("APP", "ORDER"), 404, None))
        .await
        .unwrap_err();
    assert!(
        matches!(err, OrderError::UnknownSku { sku_id: 404 }),
        "{dialect}: {err}"
    );
    orders.set_stock(2, 1).await.unwrap();
    let mut big = new_order(&RequestId::generate("APP", "ORDER"), 2, None);
    big.quantity = 2;
    let err = orders.create(&big).await.unwrap_err();
    assert!(
        matches!(
            err,
            OrderError::OutOfStock {
                sku_id: 2,
                available: 1,
                wanted: 2
            }
        ),
        "{dialect}: {err}"
    );
    assert_eq!(
        count(db, "order_record", "1 = 1").await,
        0,
        "{dialect}: a refused create left an order"
    );
    assert_eq!(count(db, "stock_movement", "1 = 1").await, 0);
    assert_eq!(orders.stock_of(2).await.unwrap(), Some(1));
    assert_eq!(orders.stock_of(404).await.unwrap(), None);
    // After a refusal the same requestId may still succeed (nothing of it was kept).
    big.quantity = 1;
    assert!(matches!(
        orders.create(&big).await.unwrap(),
        CreateOutcome::Created(_)
    ));

    // Another request that happens to bring a taken orderNo is refused, not given that order.
    let mut clash = new_order(&RequestId::generate("APP", "ORDER"), 2, None);
    clash.order_no = big.order_no.clone();
    let err = orders.create(&clash).await.unwrap_err();
    assert!(
        matches!(&err, OrderError::OrderNoTaken { order_no } if order_no == big.order_no.as_str()),
        "{dialect}: {err}"
    );
    assert_eq!(count(db, "order_record", "1 = 1").await, 1);

    // A stale expected version is refused; the unknown order is an error.
    let order = orders
        .find_by_order_no(big.order_no.as_str())
        .await
        .unwrap()
        .unwrap();
    let out = orders
        .transition(
            &Transition::to(order.order_no.clone(), OrderStatus::Cancelled)
                .with_expected_version(5),
        )
        .await
        .unwrap();
    assert!(
        matches!(&out, TransitionOutcome::Rejected(o) if o.status == OrderStatus::Created && o.version == 0),
        "{dialect}: {out:?}"
    );
    let err = orders
        .transition(&Transition::to("no-such-order", OrderStatus::Cancelled))
        .await
        .unwrap_err();
    assert!(
        matches!(err, OrderError::NotFound { .. }),
        "{dialect}: {err}"
    );
    assert!(orders
        .find_by_request_id("APP:ORDER:20261129:never-sent")
        .await
        .unwrap()
        .is_none());
}

per_dialect!(refusals_write_nothing => refusals_postgres, refusals_mysql);

// ---------------------------------------------------------------------------------------------

/// The consumer's form: the PAID transition inside the caller's own transaction, from a
/// spawned task (the future must be `Send`). A rollback of the caller undoes it.
async fn transition_inside_a_callers_transaction(dialect: Dialect) {
    let orders = orders_on(dialect).await;
    orders.set_stock(9, 5).await.unwrap();
    let order = orders
        .create(&new_order(&RequestId::generate("APP", "ORDER"), 9, None))
        .await
        .unwrap()
        .into_order();
    let event_id = new_event_id();

    let rolled_back = {
        let (orders, order_no, event_id) =
            (orders.clone(), order.order_no.clone(), event_id.clone());
        tokio::spawn(async move {
            let mut tx = orders.database().begin().await.unwrap();
            let out = orders
                .transition_in(&mut tx, &Transition::paid(order_no, event_id))
                .await
                .unwrap();
            tx.rollback().await.unwrap();
            out
        })
    }
    .await
    .unwrap();
    assert!(matches!(rolled_back, TransitionOutcome::Applied(_)));
    assert_eq!(
        row(&orders, &order.order_no).await.status,
        OrderStatus::Created,
        "{dialect}"
    );

    let committed = {
        let (orders, order_no, event_id) =
            (orders.clone(), order.order_no.clone(), event_id.clone());
        tokio::spawn(async move {
            let mut tx = orders.database().begin().await.unwrap();
            let out = orders
                .transition_in(
                    &mut tx,
                    &Transition::paid(order_no.clone(), event_id.clone()),
                )
                .await
                .unwrap();
            // The replay inside the same transaction sees its own write.
            let again = orders
                .transition_in(&mut tx, &Transition::paid(order_no, event_id))
                .await
                .unwrap();
            tx.commit().await.unwrap();
            (out, again)
        })
    }
    .await
    .unwrap();
    assert!(
        matches!(
            committed,
            (
                TransitionOutcome::Applied(_),
                TransitionOutcome::AlreadyApplied(_)
            )
        ),
        "{dialect}: {committed:?}"
    );
    let paid = orders
        .find_by_payment_event_id(&event_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (paid.status, paid.version),
        (OrderStatus::Paid, 1),
        "{dialect}"
    );
}

per_dialect!(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] transition_inside_a_callers_transaction => transition_in_postgres, transition_in_mysql);

// ---------------------------------------------------------------------------------------------

/// The batched transition (the consumer's order sink) decides exactly as `transition_in` one
/// by one, in batch order: two identical sets of orders, the same moves, one set batched and
/// the other one by one — the same decisions and the same rows.
async fn a_batch_of_transitions_decides_as_one_by_one(dialect: Dialect) {
    let orders = orders_on(dialect).await;
    orders.set_stock(11, 100).await.unwrap();
    let mut sets: Vec<Vec<OrderRecord>> = Vec::new();
    for _ in 0..2 {
        let mut set = Vec::new();
        for _ in 0..5 {
            set.push(
                orders
                    .create(&new_order(&RequestId::generate("APP", "ORDER"), 11, None))
                    .await
                    .unwrap()
                    .into_order(),
            );
        }
        sets.push(set);
    }
    // Per set: order 2 cancelled, order 3 already paid by its own event, order 4 written under
    // fence 9.
    let mut earlier = Vec::new();
    for (s, set) in sets.iter().enumerate() {
        assert!(orders
            .transition(&Transition::to(
                set[2].order_no.clone(),
                OrderStatus::Cancelled
            ))
            .await
            .unwrap()
            .is_success());
        let paid_event = format!("E-{s}-paid-before");
        assert!(orders
            .transition(&Transition::paid(
                set[3].order_no.clone(),
                paid_event.clone()
            ))
            .await
            .unwrap()
            .is_success());
        assert!(orders
            .transition(
                &Transition::to(set[4].order_no.clone(), OrderStatus::Cancelled).with_fence(9)
            )
            .await
            .unwrap()
            .is_success());
        earlier.push(paid_event);
    }
    let moves = |s: usize| -> Vec<Transition> {
        let set = &sets[s];
        let ev = |n: &str| format!("E-{s}-{n}");
        vec![
            Transition::paid(set[0].order_no.clone(), ev("a")), // applied
            Transition::paid(set[0].order_no.clone(), ev("a")), // the same event again: already applied
            Transition::paid(set[0].order_no.clone(), ev("b")), // a second payment: already PAID by "a"
            Transition::paid(set[1].order_no.clone(), earlier[s].clone()), // the event paid order 3: taken
            Transition::paid(set[1].order_no.clone(), ev("c")),            // applied
            Transition::paid(set[2].order_no.clone(), ev("d")),            // CANCELLED: rejected
            Transition::paid(set[3].order_no.clone(), earlier[s].clone()), // replay: already applied
            Transition::paid(format!("O-missing-{s}"), ev("e")),           // no such order
            Transition::to(set[1].order_no.clone(), OrderStatus::Refunded).with_fence(3), // after its PAID above: applied
            Transition::to(set[4].order_no.clone(), OrderStatus::Created), // never back: rejected
            Transition::paid(set[0].order_no.clone(), ev("f")).with_expected_version(0), // stale version, already PAID
        ]
    };
    let kind = |r: &Result<TransitionOutcome, OrderError>| -> String {
        match r {
            Ok(TransitionOutcome::Applied(o)) => format!(
                "applied {} v{} fence {} by {:?}",
                o.status,
                o.version,
                o.fence,
                o.payment_event_id.as_deref().map(|e| &e[4..])
            ),
            Ok(TransitionOutcome::AlreadyApplied(o)) => format!(
                "already {} by {:?}",
                o.status,
                o.payment_event_id.as_deref().map(|e| &e[4..])
            ),
            Ok(TransitionOutcome::Rejected(o)) => {
                format!("rejected at {} v{}", o.status, o.version)
            }
            Ok(TransitionOutcome::FenceRejected { offered, .. }) => {
                format!("fence {offered} rejected")
            }
            Err(OrderError::NotFound { .. }) => "not found".to_string(),
            Err(OrderError::PaymentEventTaken { .. }) => "event taken".to_string(),
            Err(e) => format!("error {e}"),
        }
    };

    let mut tx = orders.database().begin().await.unwrap();
    let batched: Vec<String> = orders
        .transition_batch_in(&mut tx, &moves(0))
        .await
        .unwrap()
        .iter()
        .map(kind)
        .collect();
    tx.commit().await.unwrap();
    // One by one, each in a transaction of its own (a unique violation aborts a PostgreSQL
    // transaction; the batch checks the event first and never runs into it).
    let mut one_by_one = Vec::new();
    for t in moves(1) {
        one_by_one.push(kind(&orders.transition(&t).await));
    }
    assert_eq!(batched, one_by_one, "{dialect}");
    assert_eq!(
        batched,
        [
            "applied PAID v1 fence 0 by Some(\"a\")",
            "already PAID by Some(\"a\")",
            "already PAID by Some(\"a\")",
            "event taken",
            "applied PAID v1 fence 0 by Some(\"c\")",
            "rejected at CANCELLED v1",
            "already PAID by Some(\"paid-before\")",
            "not found",
            "applied REFUNDED v2 fence 3 by Some(\"c\")",
            "rejected at CANCELLED v1",
            "already PAID by Some(\"a\")",
        ],
        "{dialect}"
    );
    // The rows, as written: the same in both sets.
    for (s, set) in sets.iter().enumerate() {
        let rows: Vec<(OrderStatus, i64, i64, Option<String>)> = {
            let mut v = Vec::new();
            for o in set {
                let r = row(&orders, &o.order_no).await;
                v.push((
                    r.status,
                    r.version,
                    r.fence,
                    r.payment_event_id.map(|e| e[4..].to_string()),
                ));
            }
            v
        };
        assert_eq!(
            rows,
            vec![
                (OrderStatus::Paid, 1, 0, Some("a".to_string())),
                (OrderStatus::Refunded, 2, 3, Some("c".to_string())),
                (OrderStatus::Cancelled, 1, 0, None),
                (OrderStatus::Paid, 1, 0, Some("paid-before".to_string())),
                (OrderStatus::Cancelled, 1, 9, None),
            ],
            "{dialect}, set {s}"
        );
    }
}

per_dialect!(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] a_batch_of_transitions_decides_as_one_by_one => transition_batch_postgres, transition_batch_mysql);
