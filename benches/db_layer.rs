//! Orders per second through line 1 (`Orders::create`: order insert + row-locked stock +
//! stock movement, one transaction) against a bare single-statement insert of the same row
//! into the same table — `INSERT … ON CONFLICT DO NOTHING` (PostgreSQL) / `INSERT IGNORE`
//! (MySQL) — in the same fresh database, same run, 16 concurrent clients on a 16-connection pool.
//!
//! Scenarios of the layer: `spread` gives each client its own SKU (the cost of the layer
//! itself); `hot` sends every client to one SKU (a flash sale: the row lock serializes them).
//! The target ratio (≥ 0.6) is for `spread`; `hot` is printed to show what one hot row costs.
//!
//!     cargo bench --bench db_layer
//!     IDEMGUARD_BENCH_SECS=10 IDEMGUARD_BENCH_ROUNDS=7 cargo bench --bench db_layer

#[path = "support/stats.rs"]
mod stats;
use stats::{knob, median};
#[path = "support/bare_insert.rs"]
mod bare_insert;
#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idemguard::config::Dialect;
use idemguard::contracts::{Instance, OrderNo, RequestId};
use idemguard::db::orders::{NewOrder, Orders};
use idemguard::db::{migrate, Database};
use idemguard::trace::Tracer;

const CLIENTS: usize = 16;
const TARGET_RATIO: f64 = 0.6;
const HOT_SKU: i64 = 1_000;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Load {
    Bare,
    Spread,
    Hot,
}

impl Load {
    fn name(self) -> &'static str {
        match self {
            Load::Bare => "bare insert",
            Load::Spread => "layer, spread",
            Load::Hot => "layer, hot SKU",
        }
    }
}

/// Orders per second of `load` over `secs` seconds with [`CLIENTS`] clients.
async fn measure(orders: &Orders, load: Load, secs: u64) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (orders, stop, done) = (orders.clone(), stop.clone(), done.clone());
            tokio::spawn(async move {
                let sku_id = if load == Load::Hot {
                    HOT_SKU
                } else {
                    client as i64 + 1
                };
                while !stop.load(Ordering::Relaxed) {
                    let order = NewOrder {
                        request_id: RequestId::generate("BENCH", "ORDER"),
                        order_no: OrderNo::generate(),
                        user_id: client as i64,
                        sku_id,
                        quantity: 1,
                        amount: 1999,
                        fence: None,
                    };
                    if load == Load::Bare {
                        bare_insert::insert_one(orders.database(), &order).await;
                    } else {
                        let out = orders
                            .create(&order)
                            .await
                            .expect("create through the layer");
                        assert!(!out.is_replay(), "fresh requestIds are never replays");
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.expect("bench client");
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

async fn bench_dialect(dialect: Dialect, secs: u64, rounds: usize) {
    let mut config = common::fresh_database_config(dialect).await;
    config.database.max_connections = CLIENTS as u32;
    config.database.connect_timeout = Duration::from_secs(30);
    let db = Database::connect(&config)
        .await
        .expect("connect to the bench database");
    migrate::migrate(&db)
        .await
        .expect("migrate the bench database");
    let orders = Orders::new(db, Tracer::log_only(&Instance::current()));
    for sku in (1..=CLIENTS as i64).chain([HOT_SKU]) {
        orders
            .set_stock(sku, 1_000_000_000)
            .await
            .expect("seed stock");
    }
    let server = orders.database().server_version().await.unwrap_or_default();
    println!(
        "\n{dialect} ({}), {CLIENTS} clients, {secs} s per measurement, {rounds} rounds",
        server.trim()
    );
    // Warm-up: connections opened, statements prepared, caches filled.
    measure(&orders, Load::Bare, 1).await;
    measure(&orders, Load::Spread, 1).await;

    let loads = [Load::Bare, Load::Spread, Load::Hot];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); loads.len()];
    for round in 0..rounds {
        // Alternate the order so the growing table does not favour one side.
        let order: Vec<usize> = if round % 2 == 0 {
            vec![0, 1, 2]
        } else {
            vec![2, 1, 0]
        };
        for i in order {
            let r = measure(&orders, loads[i], secs).await;
            rates[i].push(r);
        }
        println!(
            "  round {}: bare {:.0}/s, spread {:.0}/s, hot {:.0}/s",
            round + 1,
            rates[0][round],
            rates[1][round],
            rates[2][round]
        );
    }
    let medians: Vec<f64> = rates.iter().map(|r| median(r)).collect();
    for (load, m) in loads.iter().zip(&medians) {
        println!("  {:<16} median {:>8.0} orders/s", load.name(), m);
    }
    // The ratio of each round (its measurements ran back to back, under the same load from
    // the rest of the machine), then the median of those.
    let ratio = |i: usize| {
        median(
            &rates[i]
                .iter()
                .zip(&rates[0])
                .map(|(l, b)| l / b)
                .collect::<Vec<_>>(),
        )
    };
    let (spread_ratio, hot_ratio) = (ratio(1), ratio(2));
    println!(
        "  ratio spread/bare {spread_ratio:.2} (median of rounds; target >= {TARGET_RATIO}: {}), hot/bare {hot_ratio:.2}",
        if spread_ratio >= TARGET_RATIO { "met" } else { "NOT met" }
    );

    // Leave no bench database behind.
    let name = config
        .database
        .url
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    orders.database().pool.close().await;
    let admin = Database::connect_url(&common::local_config(), &common::server_url(dialect))
        .await
        .expect("admin connection");
    sqlx::Executor::execute(&admin.pool, format!("DROP DATABASE {name}").as_str())
        .await
        .expect("drop the bench database");
    admin.pool.close().await;
}

fn main() {
    let secs = knob::<u64>("IDEMGUARD_BENCH_SECS", 5).clamp(1, 60);
    let rounds = knob::<u64>("IDEMGUARD_BENCH_ROUNDS", 5).clamp(3, 15) as usize;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        for dialect in common::DIALECTS {
            bench_dialect(dialect, secs, rounds).await;
        }
    });
}
