//! Storm throughput: requests/s and latency of `idemguard storm double-click` (500 identical
//! requests) and `flash-sale` (2,000 users, stock 500), against a baseline measured in the same
//! run: the same service taking 500 DISTINCT orders (gateway-retry with a gateway that never
//! times out — no duplicates at all). Ratio = storm req/s ÷ baseline req/s per round, median
//! of the rounds. Fresh database per dialect, dropped at the end.
//!
//!     cargo bench --bench storm
//!     IDEMGUARD_BENCH_ROUNDS=5 IDEMGUARD_STORM_USERS=2000 cargo bench --bench storm

#[path = "support/stats.rs"]
mod stats;
use stats::{knob, median};
#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Duration;

use idemguard::config::Dialect;
use idemguard::db::Database;
use idemguard::storm::report::StormReport;
use idemguard::storm::{self, Scenario, StormOptions};

async fn once(
    config: &idemguard::config::Config,
    scenario: Scenario,
    size: usize,
    tweak: impl FnOnce(&mut StormOptions),
) -> StormReport {
    let mut o = StormOptions::new(scenario);
    o.size = Some(size);
    tweak(&mut o);
    let r = storm::run(config.clone(), &o)
        .await
        .unwrap_or_else(|e| panic!("{}: {e:#}", scenario.name()));
    assert!(r.passed, "{}", r.render());
    r
}

async fn bench_dialect(dialect: Dialect, rounds: usize, users: usize) {
    let (mut config, db) = common::migrated_database(dialect).await;
    db.pool.close().await;
    config.database.max_connections = 16;
    println!("storm on {dialect} ({rounds} rounds; double-click 500, flash-sale {users} users / stock 500, baseline 500 distinct orders)");
    let mut rows: Vec<[StormReport; 3]> = Vec::new();
    for round in 0..rounds {
        let base = once(&config, Scenario::GatewayRetry, 500, |o| {
            o.gateway_timeout = Duration::from_secs(30)
        })
        .await;
        let dc = once(&config, Scenario::DoubleClick, 500, |_| {}).await;
        let fs = once(&config, Scenario::FlashSale, users, |o| o.stock = 500).await;
        println!(
            "  round {}: distinct {:.0} req/s, double-click {:.0} req/s (p99 {:.1} ms), flash-sale {:.0} req/s (p99 {:.1} ms)",
            round + 1,
            base.http.requests_per_second,
            dc.http.requests_per_second,
            dc.http.latency.p99_ms,
            fs.http.requests_per_second,
            fs.http.latency.p99_ms
        );
        rows.push([base, dc, fs]);
    }
    let rate = |i: usize| {
        median(
            &rows
                .iter()
                .map(|r| r[i].http.requests_per_second)
                .collect::<Vec<_>>(),
        )
    };
    let lat = |i: usize, f: fn(&StormReport) -> f64| {
        median(&rows.iter().map(|r| f(&r[i])).collect::<Vec<_>>())
    };
    let ratio = |i: usize| {
        median(
            &rows
                .iter()
                .map(|r| r[i].http.requests_per_second / r[0].http.requests_per_second)
                .collect::<Vec<_>>(),
        )
    };
    for (i, name) in [
        (0, "distinct (baseline)"),
        (1, "double-click"),
        (2, "flash-sale"),
    ] {
        println!(
            "  {name:<20} median {:>7.0} req/s  p50 {:>6.1} ms  p95 {:>6.1} ms  p99 {:>6.1} ms  max {:>6.1} ms  ratio {:.2}",
            rate(i),
            lat(i, |r| r.http.latency.p50_ms),
            lat(i, |r| r.http.latency.p95_ms),
            lat(i, |r| r.http.latency.p99_ms),
            lat(i, |r| r.http.latency.max_ms),
            ratio(i)
        );
    }
    let last = &rows[rows.len() - 1][2];
    println!("  flash-sale interception (last round):");
    for r in last.interception.rows.iter().filter(|r| r.stopped > 0) {
        println!(
            "    {:<7} {:<28} {}",
            r.layer.as_str(),
            r.outcome.as_str(),
            r.stopped
        );
    }
    let name = config
        .database
        .url
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let admin = Database::connect_url(&common::local_config(), &common::server_url(dialect))
        .await
        .expect("admin connection");
    sqlx::Executor::execute(&admin.pool, format!("DROP DATABASE {name}").as_str())
        .await
        .expect("drop the bench database");
    admin.pool.close().await;
}

fn main() {
    let rounds = knob::<usize>("IDEMGUARD_BENCH_ROUNDS", 3).clamp(3, 15);
    let users = knob::<usize>("IDEMGUARD_STORM_USERS", 2000).clamp(500, 20_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        for dialect in common::DIALECTS {
            bench_dialect(dialect, rounds, users).await;
        }
    });
}
