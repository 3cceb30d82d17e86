//! The console pointed at an order system idemguard did not build (database side):
//! the article's DDL as written (tests/common/article.rs), read through the example profile
//! config/profiles/article-mysql.toml — trace, stuck records, finalize, report, doctor and the
//! least-privilege roles, on MariaDB and PostgreSQL.

use crate::common;
use crate::common::article;

use article::{article_system, now_ms, ArticleSystem};
use idemguard::config::Dialect;
use idemguard::console::read::records::{self, TraceIds};
use idemguard::console::read::timeline;
use idemguard::console::report::{self, ReportScope};
use idemguard::contracts::Instance;
use idemguard::db::{queries, Database};
use idemguard::lock::Locks;
use idemguard::ops::{Action, ActionOutcome, Actions};
use idemguard::trace::Tracer;

const MINUTE: i64 = 60_000;

/// A paid order with its record and its effects, and two stuck records: one whose order
/// exists (status 0), one that created nothing.
async fn seeded(dialect: Dialect) -> (ArticleSystem, Database) {
    let sys = article_system(dialect).await;
    let now = now_ms();
    sys.record("req-paid-0001", 1, now - 30 * MINUTE).await;
    sys.order(
        "req-paid-0001",
        "ORD202612010001",
        Some("evt-pay-0001"),
        now - 30 * MINUTE,
    )
    .await;
    sys.paid(
        "ORD202612010001",
        "PAY-0001",
        "evt-pay-0001",
        now - 29 * MINUTE,
    )
    .await;
    sys.record("req-stuck-order", 0, now - 20 * MINUTE).await;
    sys.order(
        "req-stuck-order",
        "ORD202612010002",
        None,
        now - 20 * MINUTE,
    )
    .await;
    sys.record("req-stuck-none", 0, now - 15 * MINUTE).await;
    sys.record("req-fresh", 0, now - 1000).await;
    let db = Database::connect(&sys.config)
        .await
        .expect("connect through the profile");
    (sys, db)
}

async fn trace_of_an_order_shows_its_records(dialect: Dialect) {
    let (_sys, db) = seeded(dialect).await;
    let ids = TraceIds {
        order_no: Some("ORD202612010001".into()),
        ..Default::default()
    };
    let rows = records::trace_rows(&db, &ids)
        .await
        .expect("trace through the profile");
    assert_eq!(rows.ids.request_id.as_deref(), Some("req-paid-0001"));
    assert_eq!(rows.idempotency.len(), 1, "{rows:?}");
    let rec = &rows.idempotency[0];
    assert_eq!(rec.status, "SUCCEEDED");
    assert_eq!(rec.owner, "unknown");
    assert_eq!((rec.version, rec.lease_until), (None, None));
    let age = now_ms() - rec.created_at;
    assert!(
        (29 * MINUTE..31 * MINUTE).contains(&age),
        "DATETIME +08:00 read as epoch ms: age {age}"
    );
    assert_eq!(rows.orders.len(), 1);
    assert_eq!(rows.orders[0].status, "PAID");
    assert_eq!(rows.orders[0].version, Some(1));
    assert_eq!(
        rows.orders[0].payment_event_id.as_deref(),
        Some("evt-pay-0001")
    );
    assert_eq!(rows.payments.len(), 1);
    assert_eq!(rows.points.len(), 1);
    assert_eq!(rows.notifications.len(), 1);
    assert!(rows.stock_movements.is_empty() && rows.outbox.is_empty());
    let said = rows.unavailable.join("\n");
    for what in ["stock movements", "outbox rows", "processed events"] {
        assert!(
            said.contains(what),
            "the trace says it cannot show {what}: {said}"
        );
    }
    let target = idemguard::contracts::TraceTarget::classify("ORD202612010001");
    let timeline = timeline::build(timeline::TimelineInputs {
        target: &target,
        rows: Some(&rows),
        keys: None,
        messages: &[],
        events: &[],
        now_ms: now_ms(),
        mask: &idemguard::mask::Mask::none(),
    });
    assert!(timeline.found);
    let last = &timeline.entries.last().unwrap().summary;
    assert!(
        last.contains("not shown (table"),
        "the timeline says it too: {last}"
    );
}

async fn stuck_records_are_listed_with_unknowns(dialect: Dialect) {
    let (_sys, db) = seeded(dialect).await;
    let stuck = records::stuck_records(&db, now_ms(), std::time::Duration::from_secs(300))
        .await
        .expect("stuck through the profile");
    let ids: Vec<&str> = stuck.iter().map(|s| s.request_id.as_str()).collect();
    assert_eq!(
        ids,
        ["req-stuck-order", "req-stuck-none"],
        "oldest first, the fresh one not yet"
    );
    assert!(stuck[0].order_exists);
    assert_eq!(stuck[0].order_status.as_deref(), Some("CREATED"));
    assert!(!stuck[1].order_exists);
    assert_eq!(stuck[1].owner, "unknown");
    assert_eq!((stuck[1].lease_until, stuck[1].version), (None, None));
}

/// The audit table in the team's database, as its DBA creates it (queries/<d>/console_audit_table.sql).
async fn audit_table(sys: &ArticleSystem) {
    for statement in queries::statements(sys.admin.sql("console_audit_table")) {
        sqlx::Executor::execute(&sys.admin.pool, statement.as_str())
            .await
            .expect("audit table");
    }
}

async fn actions(sys: &ArticleSystem, db: &Database) -> Actions {
    let me = Instance {
        id: format!("test-operator-{}", common::unique_suffix()),
        host: "testhost".into(),
        pid: 1,
    };
    let locks = Locks::from_config(&sys.config, &me, Tracer::log_only(&me)).expect("lock layer");
    Actions::new(&sys.config, db.clone(), locks, Tracer::log_only(&me), true).await
}

fn finalize(request_id: &str) -> Action {
    Action::Finalize {
        request_id: request_id.into(),
        expect_version: None,
        reason: Some("23:07 incident".into()),
    }
}

async fn stuck_records_are_finalized_to_the_teams_codes(dialect: Dialect) {
    let (sys, db) = seeded(dialect).await;
    audit_table(&sys).await;
    let actions = actions(&sys, &db).await;

    let done = actions.run(&finalize("req-stuck-order")).await;
    assert_eq!(done.outcome, ActionOutcome::Done, "{done:?}");
    assert!(
        done.detail.contains("cannot be fenced from here"),
        "{}",
        done.detail
    );
    assert!(
        done.detail
            .contains("SUCCEEDED (status = 1, the team's code; response_code 200)"),
        "the audit names the team's own code: {}",
        done.detail
    );
    assert_eq!(
        sys.record_status("req-stuck-order").await,
        1,
        "SUCCEEDED is the team's 1"
    );
    let failed = actions.run(&finalize("req-stuck-none")).await;
    assert_eq!(failed.outcome, ActionOutcome::Done, "{failed:?}");
    assert_eq!(
        sys.record_status("req-stuck-none").await,
        2,
        "FAILED is the team's 2"
    );
    assert!(
        done.audit_id.is_some() && failed.audit_id.is_some(),
        "audited as today"
    );

    let again = actions.run(&finalize("req-stuck-none")).await;
    assert_eq!(
        again.outcome,
        ActionOutcome::Changed,
        "a finished record is left alone: {again:?}"
    );
    let paid = actions.run(&finalize("req-paid-0001")).await;
    assert_eq!(paid.outcome, ActionOutcome::Changed);
    assert_eq!(sys.record_status("req-paid-0001").await, 1);
    let stuck = records::stuck_records(&db, now_ms(), std::time::Duration::from_secs(300))
        .await
        .unwrap();
    assert!(stuck.is_empty(), "{stuck:?}");
}

#[tokio::test]
async fn mysql_stuck_records_are_finalized_to_the_teams_codes() {
    stuck_records_are_finalized_to_the_teams_codes(Dialect::Mysql).await
}

#[tokio::test]
async fn postgres_stuck_records_are_finalized_to_the_teams_codes() {
    stuck_records_are_finalized_to_the_teams_codes(Dialect::Postgres).await
}

/// A team that keeps a version on its record, as §2.3 does on its orders (`version = version +
/// 1 … AND version = ?`): finalize writes only at the version the operator saw, and bumps it.
async fn a_versioned_record_is_finalized_at_the_version_seen(dialect: Dialect) {
    let (mut sys, _) = seeded(dialect).await;
    let column = "ALTER TABLE shop_idem_request ADD COLUMN version INT NOT NULL DEFAULT 0";
    sys.exec(column, &[]).await;
    sys.exec(
        "UPDATE shop_idem_request SET version = 3 WHERE request_id = ?",
        &["req-stuck-order"],
    )
    .await;
    let columns = &mut sys.config.source.idempotency_record.columns;
    columns.insert("version".into(), "version".into());
    let db = Database::connect(&sys.config).await.unwrap();
    audit_table(&sys).await;
    let actions = actions(&sys, &db).await;
    let at = |v: i64| Action::Finalize {
        request_id: "req-stuck-order".into(),
        expect_version: Some(v),
        reason: None,
    };

    let stale = actions.run(&at(2)).await;
    assert_eq!(stale.outcome, ActionOutcome::Changed, "{stale:?}");
    assert_eq!(sys.record_status("req-stuck-order").await, 0);
    let done = actions.run(&at(3)).await;
    assert_eq!(done.outcome, ActionOutcome::Done, "{done:?}");
    assert_eq!(sys.record_status("req-stuck-order").await, 1);
    let version: i64 = sqlx::query_scalar(if dialect == Dialect::Postgres {
        "SELECT CAST(version AS BIGINT) FROM shop_idem_request WHERE request_id = $1"
    } else {
        "SELECT CAST(version AS SIGNED) FROM shop_idem_request WHERE request_id = ?"
    })
    .bind("req-stuck-order")
    .fetch_one(&sys.admin.pool)
    .await
    .unwrap();
    assert_eq!(version, 4, "bumped as §2.3 bumps it");
}

#[tokio::test]
async fn mysql_a_versioned_record_is_finalized_at_the_version_seen() {
    a_versioned_record_is_finalized_at_the_version_seen(Dialect::Mysql).await
}

#[tokio::test]
async fn postgres_a_versioned_record_is_finalized_at_the_version_seen() {
    a_versioned_record_is_finalized_at_the_version_seen(Dialect::Postgres).await
}

/// Plain-token locks whose values are requestIds the database knows are linked to their
/// request and order — 1,500 tokens, so more than one batch — and the others stay raw.
async fn token_locks_are_linked_in_batches(dialect: Dialect) {
    use idemguard::config::LockMode;
    use idemguard::console::read::locks;
    use idemguard::lock::formats::LockFormat;
    use idemguard::lock::LockView;
    let (_sys, db) = seeded(dialect).await;
    let view = |key: String, value: &str| {
        let node = LockView::held_on("127.0.0.1:6379", value.to_string(), 30_000);
        LockView::new(key, LockMode::Single, vec![node], None, now_ms())
    };
    let mut views = vec![
        view("lock:order:ORD202612010002".into(), "req-stuck-order"),
        view("lock:req:x".into(), "req-stuck-none"),
    ];
    views.extend(
        (0..1_500).map(|i| view(format!("lock:order:n{i}"), &format!("no-such-request-{i}"))),
    );
    views.push(view("lock:order:last".into(), "req-paid-0001"));
    locks::link_tokens(&db, &mut views).await.expect("linked");
    let linked = |v: &LockView| match &v.format {
        LockFormat::Token {
            request_id,
            order_no,
            ..
        } => (request_id.clone(), order_no.clone()),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        linked(&views[0]),
        (
            Some("req-stuck-order".into()),
            Some("ORD202612010002".into())
        )
    );
    assert_eq!(linked(&views[1]), (Some("req-stuck-none".into()), None));
    assert_eq!(
        linked(views.last().unwrap()),
        (Some("req-paid-0001".into()), Some("ORD202612010001".into()))
    );
    assert!(views[2..1_502].iter().all(|v| linked(v) == (None, None)));
}

#[tokio::test]
async fn mysql_token_locks_are_linked_in_batches() {
    token_locks_are_linked_in_batches(Dialect::Mysql).await
}

#[tokio::test]
async fn postgres_token_locks_are_linked_in_batches() {
    token_locks_are_linked_in_batches(Dialect::Postgres).await
}

/// The article's §1.1 incident: one order's payment callback booked three times, and a record
/// marked FAILED although its order exists. The report finds both, through the profile, and
/// records the operator's finalize with its "cannot be fenced" note.
async fn report_works_on_the_article_system(dialect: Dialect) {
    let (sys, db) = seeded(dialect).await;
    audit_table(&sys).await;
    let now = now_ms();
    for n in 2..=3 {
        let at = now - (29 - n) * MINUTE;
        sys.exec(
            &format!("INSERT INTO {} (pay_no, order_no, amount, status, event_id, created_at) VALUES (?, 'ORD202612010001', 9900, 'SUCCESS', ?, CAST(? AS TIMESTAMP))", article::PAYMENTS),
            &[&format!("PAY-000{n}"), &format!("evt-pay-000{n}"), &article::wall_clock(at)],
        )
        .await;
    }
    sys.record("req-failed-but-ordered", 2, now - 10 * MINUTE)
        .await;
    sys.order(
        "req-failed-but-ordered",
        "ORD202612010003",
        None,
        now - 10 * MINUTE,
    )
    .await;
    let done = actions(&sys, &db)
        .await
        .run(&finalize("req-stuck-none"))
        .await;
    assert_eq!(done.outcome, ActionOutcome::Done, "{done:?}");

    let scope = ReportScope::Window {
        since_ms: now - 3_600_000,
        until_ms: now_ms() + 1,
    };
    let report = report::build(&sys.config, &scope)
        .await
        .expect("report through the profile");
    assert_eq!(report.orders_in_window, 3, "{report:?}");
    let leak = report
        .leaks
        .iter()
        .find(|l| l.table == "payment_flow")
        .expect("the triple booking");
    assert_eq!((leak.key.as_str(), leak.rows), ("ORD202612010001", 3));
    assert!(
        report
            .contradictions
            .iter()
            .any(|c| c.request_id == "req-failed-but-ordered" && c.problem == "failed_with_order"),
        "{:?}",
        report.contradictions
    );
    assert!(
        !report
            .contradictions
            .iter()
            .any(|c| c.request_id == "req-paid-0001"),
        "a paid order is no contradiction"
    );
    let action = report
        .operator_actions
        .iter()
        .find(|a| a.target == "req-stuck-none")
        .expect("the finalize is in the report");
    assert!(
        action
            .detail
            .as_deref()
            .unwrap_or_default()
            .contains("cannot be fenced from here"),
        "{action:?}"
    );
}

#[tokio::test]
async fn mysql_report_works_on_the_article_system() {
    report_works_on_the_article_system(Dialect::Mysql).await
}

#[tokio::test]
async fn postgres_report_works_on_the_article_system() {
    report_works_on_the_article_system(Dialect::Postgres).await
}

/// `doctor` passes the example profile, and names a deliberately wrong column with its fix.
async fn doctor_names_a_wrong_column(dialect: Dialect) {
    let (sys, _db) = seeded(dialect).await;
    let rows = idemguard::doctor::run(&sys.config).await;
    let profile: Vec<_> = rows
        .iter()
        .filter(|r| r.service == "source profile")
        .collect();
    assert!(profile.len() == 1 && profile[0].ok, "{profile:#?}");
    assert!(
        profile[0].detail.contains("6 tables"),
        "{}",
        profile[0].detail
    );
    let db_row = rows.iter().find(|r| r.service == "database").unwrap();
    assert!(
        db_row.ok,
        "no idemguard schema is expected on a team's system: {db_row:?}"
    );

    let mut wrong = article::article_config(&[(
        "IDEMGUARD_SOURCE__IDEMPOTENCY_RECORD__COLUMNS__STATUS",
        "state",
    )]);
    wrong.database.url = sys.config.database.url.clone();
    let rows = idemguard::doctor::run(&wrong).await;
    let bad = rows
        .iter()
        .find(|r| r.target == "source.idempotency_record.columns.status")
        .unwrap_or_else(|| panic!("the wrong column is named: {rows:#?}"));
    assert!(!bad.ok);
    assert!(
        bad.detail
            .contains("shop_idem_request.state does not exist"),
        "{}",
        bad.detail
    );
    assert!(
        bad.hint
            .as_deref()
            .unwrap()
            .contains("request_id, request_hash, status"),
        "{bad:?}"
    );
    assert!(
        rows.iter()
            .any(|r| r.target.ends_with("console_stuck.sql") && !r.ok),
        "the statements that use it do not prepare: {rows:#?}"
    );
    assert!(idemguard::doctor::failures(&rows).is_some());

    let mut wrong_time =
        article::article_config(&[("IDEMGUARD_SOURCE__ORDER_RECORD__TIME", "epoch_ms")]);
    wrong_time.database.url = sys.config.database.url.clone();
    let rows = idemguard::doctor::run(&wrong_time).await;
    let bad = rows
        .iter()
        .find(|r| r.target == "source.order_record.columns.created_at")
        .expect("a DATETIME read as epoch ms is named");
    assert!(
        bad.hint
            .as_deref()
            .unwrap()
            .contains("source.order_record.time"),
        "{bad:?}"
    );
}

#[tokio::test]
async fn mysql_doctor_names_a_wrong_column() {
    doctor_names_a_wrong_column(Dialect::Mysql).await
}

#[tokio::test]
async fn postgres_doctor_names_a_wrong_column() {
    doctor_names_a_wrong_column(Dialect::Postgres).await
}

/// PostgreSQL roles are cluster-wide: dropped when the test ends, pass or fail (the harness
/// drops MariaDB users and the database itself).
struct PgRoles {
    db_url: String,
    names: Vec<String>,
}

impl Drop for PgRoles {
    fn drop(&mut self) {
        let (url, names) = (self.db_url.clone(), std::mem::take(&mut self.names));
        let _ = std::thread::Builder::new()
            .stack_size(16 << 20)
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    let admin = Database::connect_url(&common::local_config(), &url)
                        .await
                        .expect("admin");
                    for r in names {
                        for sql in [
                            format!("DROP OWNED BY {r}"),
                            format!("DROP ROLE IF EXISTS {r}"),
                        ] {
                            if let Err(e) = sqlx::Executor::execute(&admin.pool, sql.as_str()).await
                            {
                                eprintln!("test cleanup: {sql}: {e}");
                            }
                        }
                    }
                });
            })
            .map(|t| t.join());
    }
}

/// A login role (user) with `grants`, each "PRIVILEGES ON table"; returns its URL.
async fn role(sys: &ArticleSystem, roles: &mut PgRoles, tag: &str, grants: &[String]) -> String {
    let name = format!("ig_{tag}_{}", common::unique_suffix());
    let password = format!("pw{}", common::unique_suffix());
    let mut url = url::Url::parse(&sys.config.database.url).unwrap();
    let db_name = url.path().trim_start_matches('/').to_string();
    let mut statements = Vec::new();
    if sys.dialect == Dialect::Postgres {
        roles.names.push(name.clone());
        statements.push(format!("CREATE ROLE {name} LOGIN PASSWORD '{password}'"));
        for g in grants {
            statements.push(format!("GRANT {g} TO {name}"));
        }
    } else {
        common::remove_mysql_user_at_end(&name);
        statements.push(format!(
            "CREATE USER '{name}'@'%' IDENTIFIED BY '{password}'"
        ));
        for g in grants {
            let g = g
                .replacen(" ON ", &format!(" ON `{db_name}`."), 1)
                .replace("SEQUENCE ", "");
            if !g.starts_with("USAGE") {
                statements.push(format!("GRANT {g} TO '{name}'@'%'"));
            }
        }
    }
    for sql in statements {
        sqlx::Executor::execute(&sys.admin.pool, sql.as_str())
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    url.set_username(&name).unwrap();
    url.set_password(Some(&password)).unwrap();
    url.to_string()
}

/// Least privilege: the console reads with a read-only role that lacks SELECT on one table —
/// that view says which privilege, everything else shows; the read-only role cannot finalize
/// (its audit row cannot be written, so nothing is done); the actions role, with SELECT on the
/// two tables it reconciles, UPDATE on the record and INSERT/UPDATE on the audit, can.
async fn least_privilege_roles(dialect: Dialect) {
    use article::{IDEM, INVENTORY, MESSAGES, ORDERS, PAYMENTS};
    let (sys, _db) = seeded(dialect).await;
    audit_table(&sys).await;
    let mut roles = PgRoles {
        db_url: sys.config.database.url.clone(),
        names: vec![],
    };
    let reads: Vec<String> = [IDEM, ORDERS, INVENTORY, PAYMENTS, MESSAGES]
        .iter()
        .map(|t| format!("SELECT ON {t}"))
        .collect();
    let reader = role(&sys, &mut roles, "ro", &reads).await;
    let audit = sys.config.tables.ops_audit.clone();
    let writes = vec![
        format!("SELECT, UPDATE ON {IDEM}"),
        format!("SELECT ON {ORDERS}"),
        format!("SELECT, INSERT, UPDATE ON {audit}"),
        format!("USAGE ON SEQUENCE {audit}_id_seq"),
    ];
    let actor = role(&sys, &mut roles, "act", &writes).await;

    let mut config = sys.config.clone();
    config.database.url = reader;
    let console = Database::connect_for_reads(&config)
        .await
        .expect("the read-only role connects");
    let ids = TraceIds {
        order_no: Some("ORD202612010001".into()),
        ..Default::default()
    };
    let rows = records::trace_rows(&console, &ids)
        .await
        .expect("nothing else breaks");
    assert_eq!(
        (
            rows.idempotency.len(),
            rows.orders.len(),
            rows.payments.len(),
            rows.notifications.len()
        ),
        (1, 1, 1, 1)
    );
    assert!(rows.points.is_empty());
    let said = rows.unavailable.join("\n");
    assert!(
        said.contains("points: not shown") && said.contains("SELECT privilege"),
        "{said}"
    );
    let stuck = records::stuck_records(&console, now_ms(), std::time::Duration::from_secs(300))
        .await
        .unwrap();
    assert_eq!(stuck.len(), 2);

    let read_only = actions(&sys, &Database::connect_for_actions(&config).await.unwrap()).await;
    let refused = read_only.run(&finalize("req-stuck-order")).await;
    assert_ne!(refused.outcome, ActionOutcome::Done, "{refused:?}");
    assert_eq!(
        sys.record_status("req-stuck-order").await,
        0,
        "the read-only role wrote nothing"
    );

    config.database.actions_url = actor;
    let acting = actions(&sys, &Database::connect_for_actions(&config).await.unwrap()).await;
    let done = acting.run(&finalize("req-stuck-order")).await;
    assert_eq!(done.outcome, ActionOutcome::Done, "{done:?}");
    assert_eq!(sys.record_status("req-stuck-order").await, 1);
    console.pool.close().await;
}

#[tokio::test]
async fn mysql_least_privilege_roles() {
    least_privilege_roles(Dialect::Mysql).await
}

#[tokio::test]
async fn postgres_least_privilege_roles() {
    least_privilege_roles(Dialect::Postgres).await
}

#[tokio::test]
async fn mysql_trace_of_an_order_shows_its_records() {
    trace_of_an_order_shows_its_records(Dialect::Mysql).await
}

#[tokio::test]
async fn postgres_trace_of_an_order_shows_its_records() {
    trace_of_an_order_shows_its_records(Dialect::Postgres).await
}

#[tokio::test]
async fn mysql_stuck_records_are_listed_with_unknowns() {
    stuck_records_are_listed_with_unknowns(Dialect::Mysql).await
}

#[tokio::test]
async fn postgres_stuck_records_are_listed_with_unknowns() {
    stuck_records_are_listed_with_unknowns(Dialect::Postgres).await
}
