//! The TUI checked in a real terminal on the article's system as written
//! (tests/common/article.rs). The real `idemguard console` runs in tmux with the example profile
//! (no trace topic), its logs in a JSON-lines file of three services and the team's locks in
//! Redis; what `tmux capture-pane` shows is checked: the trace of an order shows its records,
//! its lock decoded and linked to its request, and its log lines; the Locks view lists every
//! format; `q` leaves cleanly.

use crate::common;
use crate::common::article;
use crate::support::tmux;

use std::time::Duration;

use article::{
    article_system, expiring_list, now_ms, redis_conn, redis_py_lock, redisson_lock, set_if_absent,
    ArticleSystem, RedisKeys, PROFILE,
};
use idemguard::config::Dialect;
use tmux::Terminal;

const MINUTE: i64 = 60_000;

/// How long the console may take to show what a step waits for.
const WAIT: Duration = Duration::from_secs(30);

fn log_line(ms: i64, service: &str, level: &str, order_no: &str, message: &str) -> String {
    serde_json::json!({
        "timestamp": ms, "service": service, "level": level, "orderNo": order_no,
        "message": message,
    })
    .to_string()
}

/// The traced order (record, order, payment effects), its §3.2 lock, and locks of every other
/// format under the team's own patterns.
struct Fixture {
    sys: ArticleSystem,
    order: String,
    request: String,
    redisson_key: String,
    py_key: String,
    py_token: String,
    list_key: String,
    logs: tempfile::TempDir,
    _keys: RedisKeys,
}

async fn fixture() -> Fixture {
    let sys = article_system(Dialect::Mysql).await;
    let tag = common::unique_suffix();
    let order = format!("ORDT{tag}");
    let request = uuid::Uuid::new_v4().to_string();
    let event = format!("evt-{tag}");
    let now = now_ms();
    sys.record(&request, 1, now - 10 * MINUTE).await;
    sys.order(&request, &order, Some(&event), now - 10 * MINUTE)
        .await;
    sys.paid(&order, &format!("PAY{tag}"), &event, now - 9 * MINUTE)
        .await;

    let lock_key = format!("lock:order:{order}");
    let redisson_key = format!("order:lock:R{tag}");
    let py_key = format!("order:lock:P{tag}");
    let list_key = format!("order:lock:L{tag}");
    let keys = RedisKeys(vec![
        lock_key.clone(),
        redisson_key.clone(),
        py_key.clone(),
        list_key.clone(),
    ]);
    let mut c = redis_conn().await;
    set_if_absent(&mut c, &lock_key, &request).await;
    redisson_lock(
        &mut c,
        &redisson_key,
        &format!("{}:77", uuid::Uuid::new_v4()),
    )
    .await;
    let py_token = redis_py_lock("redis://127.0.0.1:6379", &py_key);
    expiring_list(&mut c, &list_key).await;

    let logs = tempfile::tempdir().unwrap();
    let write = |name: &str, lines: &[String]| {
        std::fs::write(logs.path().join(name), lines.join("\n") + "\n").unwrap()
    };
    write(
        "order-api.log",
        &[log_line(
            now - 10 * MINUTE,
            "order-api",
            "INFO",
            &order,
            "order created",
        )],
    );
    write(
        "payment-svc.log",
        &[log_line(
            now - 9 * MINUTE,
            "payment-svc",
            "WARN",
            &order,
            "callback retried",
        )],
    );
    write(
        "points-svc.log",
        &[log_line(
            now - 9 * MINUTE + 500,
            "points-svc",
            "INFO",
            &order,
            "points granted",
        )],
    );
    Fixture {
        sys,
        order,
        request,
        redisson_key,
        py_key,
        py_token,
        list_key,
        logs,
        _keys: keys,
    }
}

#[tokio::test]
async fn the_console_shows_an_article_order_its_lock_and_logs_in_a_real_terminal() {
    let f = fixture().await;
    let topics = common::fresh_topics(&f.sys.config, &["payment"]).await;
    let mut env = f.sys.binary_env();
    env.extend([
        ("IDEMGUARD_CONFIG".into(), PROFILE.into()),
        ("IDEMGUARD_REDIS__REDLOCK_NODES".into(), String::new()),
        ("IDEMGUARD_KAFKA__PAYMENT_TOPIC".into(), topics[0].clone()),
        (
            "IDEMGUARD_FOREIGN_LOCKS__PATTERNS".into(),
            "lock:order:{orderNo},lock:req:{requestId},order:lock:{orderNo}".into(),
        ),
        (
            "IDEMGUARD_LOGS__FILES".into(),
            format!("{}/*.log*", f.logs.path().display()),
        ),
        ("IDEMGUARD_TRACE__ENABLED".into(), "false".into()),
    ]);
    let t = Terminal::console("igf", (220, 50), &env, "");
    t.wait_for("the console", WAIT, |s| {
        s.contains("idemguard console") && s.contains("database ok")
    });

    t.keys(&[&format!(":trace {}", f.order), "Enter"]);
    // The sources answer one by one (the database's rows can come last): wait for every one.
    let trace = t.wait_for("the order's records, lock and log lines", WAIT, |s| {
        s.contains("SUCCEEDED")
            && s.contains("PAID")
            && s.contains("order created")
            && s.contains("points granted")
            && s.contains("= requestId")
    });
    for (what, text) in [
        ("the idempotency record", "SUCCEEDED".to_string()),
        ("the order row", "PAID".to_string()),
        ("the lock, decoded", "token (uuid)".to_string()),
        (
            "the lock's request",
            format!("= requestId {}", short(&f.request)),
        ),
        (
            "a log line with service and level",
            "payment-svc WARN callback retried".into(),
        ),
        ("the missing trace topic", "no trace topic".into()),
    ] {
        assert!(
            trace.contains(&text),
            "{what} ({text:?}) not on screen:\n{trace}"
        );
    }

    t.keys(&["3"]);
    let locks = t.wait_for("every format in the Locks view", WAIT, |s| {
        s.contains(&f.redisson_key) && s.contains(&f.py_key) && s.contains(&f.list_key)
    });
    for (what, text) in [
        ("the Redisson holder", "redisson ".to_string()),
        ("the redis-py token", f.py_token[..12].to_string()),
        ("the §3.2 token linked to its request", "req ".to_string()),
        (
            "the list, by its type",
            "(list, not a lock value)".to_string(),
        ),
        ("the §3.2 lock", format!("lock:order:{}", f.order)),
    ] {
        assert!(
            locks.contains(&text),
            "{what} ({text:?}) not on screen:\n{locks}"
        );
    }

    let after = t.quit_console(WAIT);
    tmux::assert_console_gone(&after);
}

/// The start of a requestId as the timeline shows it (long values are shortened on screen).
fn short(id: &str) -> &str {
    &id[..20]
}
