//! The smaller defects an operator meets, each replayed against the real
//! services (the pure ones have unit tests next to their code: the DLQ reason in
//! stream::consumer, doctor's closing line, the operator's login name in config, the report's
//! table header).

use crate::common;

use idemguard::api::guard::ReplayCounter;
use idemguard::api::idempotency::{self, Claim, ClaimRequest};
use idemguard::config::Dialect;
use idemguard::contracts::RequestId;
use idemguard::db::Database;

/// Counts the UPDATE statements run on idempotency_record (a trigger of the test database: one
/// row per statement on PostgreSQL; per row on MariaDB, where each statement here touches one),
/// each row with a tag of its transaction (`tx`).
async fn count_updates_of_the_record_table(db: &Database) {
    let statements: &[&str] = match db.dialect() {
        Dialect::Postgres => &[
            "CREATE TABLE igt_updates (tx BIGINT)",
            "CREATE FUNCTION igt_count_update() RETURNS trigger AS $$ BEGIN INSERT INTO igt_updates VALUES (txid_current()); RETURN NULL; END $$ LANGUAGE plpgsql",
            "CREATE TRIGGER igt_count AFTER UPDATE ON idempotency_record FOR EACH STATEMENT EXECUTE FUNCTION igt_count_update()",
        ],
        Dialect::Mysql => &[
            "CREATE TABLE igt_updates (tx BIGINT)",
            "CREATE TRIGGER igt_count AFTER UPDATE ON idempotency_record FOR EACH ROW INSERT INTO igt_updates VALUES (@@in_transaction)",
        ],
    };
    for s in statements {
        sqlx::Executor::execute(&db.pool, *s).await.unwrap();
    }
}

async fn claimed(db: &Database) -> String {
    let request_id = RequestId::generate("APP", "ORDER").to_string();
    let r = ClaimRequest {
        request_id: &request_id,
        biz_type: "ORDER",
        request_hash: "h",
        owner: "igt",
        fence: 1,
        lease_ms: 30_000,
        retention_ms: 60_000,
    };
    assert_eq!(idempotency::claim(db, &r).await.unwrap(), Claim::New);
    request_id
}

/// The replay counter promises one UPDATE per key per flush, all in one transaction; it sent
/// one per replay, then one autocommitted UPDATE per key.
async fn replay_counter_flushes_one_update_per_key(dialect: Dialect) {
    let (_config, db) = common::migrated_database(dialect).await;
    let (a, b) = (claimed(&db).await, claimed(&db).await);
    count_updates_of_the_record_table(&db).await;
    let counter = ReplayCounter::default();
    for _ in 0..25 {
        counter.add(&a);
    }
    for _ in 0..3 {
        counter.add(&b);
    }
    counter.flush(&db).await;
    assert_eq!(
        common::count(&db, "igt_updates").await,
        2,
        "{dialect}: one UPDATE per key, not one per replay"
    );
    // Each UPDATE notes its transaction: PostgreSQL its id, MariaDB whether it ran inside an
    // explicit one (0 when autocommitted).
    assert_eq!(
        (
            common::count(&db, "(SELECT DISTINCT tx FROM igt_updates) t").await,
            common::count(&db, "igt_updates WHERE tx = 0").await
        ),
        (1, 0),
        "{dialect}: the keys' UPDATEs in one transaction, one commit a flush"
    );
    assert_eq!(
        idempotency::get(&db, &a)
            .await
            .unwrap()
            .unwrap()
            .replay_count,
        25
    );
    assert_eq!(
        idempotency::get(&db, &b)
            .await
            .unwrap()
            .unwrap()
            .replay_count,
        3
    );
    counter.flush(&db).await;
    assert_eq!(
        common::count(&db, "igt_updates").await,
        2,
        "{dialect}: nothing left to write"
    );
}

per_dialect!(replay_counter_flushes_one_update_per_key => replay_counter_flushes_one_update_per_key_postgres, replay_counter_flushes_one_update_per_key_mysql);

/// `release-lock` and `doctor` with the Redis unreachable, `$USER` unset and stderr a pipe: the
/// warning does not speak of finalize, no line carries ANSI colour codes, the audit row names the
/// uid's login name, and doctor's closing line names the services that failed.
async fn operator_output_with_redis_down(dialect: Dialect) {
    let (config, _db) = common::migrated_database(dialect).await;
    let run = |args: &[&str]| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_idemguard"));
        c.args(args)
            .env(
                "IDEMGUARD_CONFIG",
                concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml"),
            )
            .env("IDEMGUARD_DATABASE__URL", &config.database.url)
            .env("IDEMGUARD_REDIS__URL", "redis://127.0.0.1:1")
            .env("IDEMGUARD_REDIS__REDLOCK_NODES", "")
            .env("IDEMGUARD_TRACE__ENABLED", "false")
            .env_remove("USER")
            .env_remove("IDEMGUARD_LOG");
        let out = c.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let login = String::from_utf8(
        std::process::Command::new("id")
            .arg("-un")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_string();

    let (code, stdout, stderr) = run(&[
        "release-lock",
        "lock:order:igt-nobody",
        "--expect-value",
        "x",
        "--allow-actions",
    ]);
    assert!(
        code.is_some_and(|c| c != 0),
        "{dialect}: nothing to release: {stdout}{stderr}"
    );
    assert!(
        stderr.contains("the main Redis is not reachable"),
        "{dialect}: {stderr}"
    );
    assert!(
        !stderr.contains("finalize") && !stdout.contains("finalize"),
        "{dialect}: release-lock speaks of finalize:\n{stdout}{stderr}"
    );
    assert!(
        !stderr.contains('\x1b'),
        "{dialect}: ANSI codes on a pipe: {stderr:?}"
    );
    assert!(
        stdout.contains(&format!("(operator {login},")),
        "{dialect}: the audit names the login name, not `unknown`: {stdout}"
    );

    let (code, _, stderr) = run(&["doctor"]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("check(s) failed: redis (127.0.0.1:1)"),
        "{dialect}: {stderr}"
    );
    assert!(!stderr.contains('\x1b'), "{stderr:?}");
}

per_dialect!(operator_output_with_redis_down => operator_output_with_redis_down_postgres, operator_output_with_redis_down_mysql);

#[test]
fn a_space_in_a_key_is_called_a_space() {
    let e = RequestId::parse("APP:ORDER:20261129:abc defgh")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("contains a space or a character that is not printable ASCII (at position 22)"),
        "{e}"
    );
}

/// scripts/demo ran `target/release/idemguard` whatever cargo had built: with CARGO_TARGET_DIR set
/// it failed with exit 127, with a stale ./target it ran an old binary. It now runs the executable
/// cargo reports for its build (`--print-binary` prints it; the dev profile keeps this cheap).
#[test]
fn the_demo_runs_the_binary_cargo_built() {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_idemguard"));
    let target_dir = bin
        .parent()
        .and_then(|d| d.parent())
        .expect("<target>/debug/idemguard");
    let out = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/demo"))
        .arg("--print-binary")
        .env("CARGO_TARGET_DIR", target_dir)
        .env("IDEMGUARD_DEMO_PROFILE", "dev")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        bin.to_str().unwrap(),
        "{stderr}"
    );
}
