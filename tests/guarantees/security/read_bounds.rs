//! Nothing waits for ever: every read of what other systems hold has a bound, and a read that
//! reaches it says what it waited for.
//!
//! - **A locked table.** Another session holds `idempotency_record` locked (PostgreSQL `LOCK
//!   TABLE … IN ACCESS EXCLUSIVE MODE`, MariaDB `LOCK TABLES … WRITE`, each in a transaction or
//!   session the test keeps open). `trace ID`, `report --id` and `stuck` end within their read
//!   bound (`database.read_timeout`, 5 s by default) instead of waiting for the lock, name the
//!   table and where to look (`pg_locks`, `SHOW PROCESSLIST`), and leave no session of theirs
//!   queued on the lock; the console shows the database as SLOW within a second or two — never
//!   "ok" while its reads are blocked — then the table it waited for, and its reads never pile
//!   up on the lock.
//! - **A source that does not answer.** With the database (either dialect) or Redis refusing
//!   connections, or the table locked, `trace` says first that it is PARTIAL and which source
//!   did not answer; an ID nothing that answered names is "nothing that answered names this ID",
//!   never "no row … names this ID" or "the database has no row"; its JSON says `partial` and
//!   lists the sources that did not answer.
//! - **The log source** (`logs.files`): a FIFO named like a rotated log and a symlink to
//!   `/dev/zero` are skipped at once and said; a `.gz` of a few MB holding a 1.5 GB line is read
//!   only up to `logs.max_file_bytes`, never holding more than `logs.max_line_bytes` of a line
//!   (the `trace` binary's memory is measured); a line longer than that is skipped and counted,
//!   the lines after it kept; a `\xff` byte costs only its own line's bytes; a `**` glob through
//!   a symlink loop reads the file once.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use idemguard::config::{Config, Dialect};
use idemguard::console::read::logs::{self, LogRead};
use idemguard::console::read::window::TimeWindow;
use idemguard::console::tui::app::{App, Health};
use idemguard::console::tui::backend::{BackendId, Backends};
use idemguard::db::Database;

/// A test database whose `idempotency_record` another session holds locked until
/// [`LockedTable::release`]; fresh topics, so a trace's topic reads are short.
struct LockedTable {
    config: Config,
    db: Database,
    holder: sqlx::pool::PoolConnection<sqlx::Any>,
}

impl LockedTable {
    async fn new(dialect: Dialect) -> LockedTable {
        let (mut config, db) = migrated_database(dialect).await;
        let topics = fresh_topics(&config, &["payment.succeeded", "idemguard.trace"]).await;
        config.kafka.payment_topic = topics[0].clone();
        config.kafka.trace_topic = topics[1].clone();
        let mut holder = db.pool.acquire().await.unwrap();
        let lock = match dialect {
            Dialect::Postgres => "BEGIN; LOCK TABLE idempotency_record IN ACCESS EXCLUSIVE MODE",
            Dialect::Mysql => "LOCK TABLES idempotency_record WRITE",
        };
        sqlx::raw_sql(lock).execute(&mut *holder).await.unwrap();
        LockedTable { config, db, holder }
    }

    async fn release(mut self) {
        let unlock = match self.db.dialect() {
            Dialect::Postgres => "ROLLBACK",
            Dialect::Mysql => "UNLOCK TABLES",
        };
        sqlx::raw_sql(unlock)
            .execute(&mut *self.holder)
            .await
            .unwrap();
    }

    /// Sessions of the test's database waiting for a lock (the holder itself is idle).
    async fn waiting(&self) -> i64 {
        let sql = match self.db.dialect() {
            Dialect::Postgres => {
                "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND wait_event_type = 'Lock'"
            }
            Dialect::Mysql => {
                "SELECT CAST(COUNT(*) AS SIGNED) FROM information_schema.PROCESSLIST \
                 WHERE DB = DATABASE() AND STATE LIKE 'Waiting for%lock%'"
            }
        };
        let mut other = self.db.pool.acquire().await.unwrap();
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(&mut *other)
            .await
            .unwrap()
    }

    /// The binary on this database and its topics, killed if it has not ended after 40 s:
    /// (exit code, stdout + stderr, how long it took).
    async fn run(&self, args: &[&str]) -> (Option<i32>, String, Duration) {
        let c = &self.config;
        let started = Instant::now();
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
            .args([
                "--config",
                concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml"),
            ])
            .args(args)
            .env("IDEMGUARD_DATABASE__URL", &c.database.url)
            .env("IDEMGUARD_KAFKA__PAYMENT_TOPIC", &c.kafka.payment_topic)
            .env("IDEMGUARD_KAFKA__TRACE_TOPIC", &c.kafka.trace_topic)
            .env("IDEMGUARD_REDIS__REDLOCK_NODES", "")
            .env("IDEMGUARD_TRACE__ENABLED", "false")
            .env("IDEMGUARD_LOG", "error")
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(40), child)
            .await
            .unwrap_or_else(|_| panic!("`idemguard {}` still waits after 40 s", args.join(" ")))
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text, started.elapsed())
    }
}

/// What an answer to a read behind the lock must say: the table, the bound, where to look.
fn names_the_locked_table(dialect: Dialect, face: &str, text: &str) {
    let look = match dialect {
        Dialect::Postgres => "pg_locks",
        Dialect::Mysql => "SHOW PROCESSLIST",
    };
    for part in ["idempotency_record", "did not answer within 5s", look] {
        assert!(
            text.contains(part),
            "{dialect} {face}: no `{part}` in:\n{text}"
        );
    }
}

/// `trace`, `report --id` and `stuck`, run at once behind the lock: each ends within its bound
/// (a read waits at most 5 s; `report` makes two reads of the locked table, and both faces read
/// the topics too), says what it waited for and exits non-zero; no session is left waiting.
async fn the_one_shot_faces_end_behind_a_locked_table(dialect: Dialect) {
    let w = LockedTable::new(dialect).await;
    let order = idemguard::contracts::OrderNo::generate().to_string();
    let report = std::env::temp_dir().join(format!("igt-report-{}.md", unique_suffix()));
    let report_path = report.to_string_lossy().into_owned();
    let (trace_args, report_args) = (
        ["trace", &order],
        ["report", "--id", &order, "-o", &report_path],
    );
    let (trace, report_id, stuck) =
        tokio::join!(w.run(&trace_args), w.run(&report_args), w.run(&["stuck"]),);
    let _ = std::fs::remove_file(&report);
    for (face, (code, text, took), most) in [
        ("trace", trace, 15),
        ("report --id", report_id, 20),
        ("stuck", stuck, 10),
    ] {
        assert!(
            took < Duration::from_secs(most),
            "{dialect} {face} took {took:?} behind the lock:\n{text}"
        );
        assert_ne!(code, Some(0), "{dialect} {face}: {text}");
        names_the_locked_table(dialect, face, &text);
        if face == "trace" {
            says_partial_for(dialect, &text, "the database");
        }
    }
    assert_eq!(
        w.waiting().await,
        0,
        "{dialect}: a read that gave up left its statement queued on the lock"
    );
    w.release().await;
}

per_dialect!(the_one_shot_faces_end_behind_a_locked_table => trace_report_and_stuck_end_behind_a_locked_table_postgres, trace_report_and_stuck_end_behind_a_locked_table_mysql);

/// The console behind the lock: its database is SLOW within two seconds of its first read and
/// never shown "ok"; once a read reaches its bound, the header names the table and where to look;
/// at no moment is more than one of its reads waiting on the lock.
async fn the_console_shows_a_locked_table_as_slow(dialect: Dialect) {
    let w = LockedTable::new(dialect).await;
    let mut backends = Backends::spawn(&w.config);
    let mut app = App::new(&w.config, Some(backends.focus.clone()));
    let started = Instant::now();
    let health = |app: &App| app.stores.backends[&BackendId::Database].health.clone();
    let mut slow_at = None;
    let mut most_waiting = 0;
    let mut named = None;
    while started.elapsed() < Duration::from_secs(14) && named.is_none() {
        if let Ok(Some(u)) =
            tokio::time::timeout(Duration::from_millis(250), backends.updates.recv()).await
        {
            app.apply(u);
        }
        match health(&app) {
            Health::Up => panic!("{dialect}: the console says `database ok` behind the lock"),
            Health::Slow(reason) => {
                slow_at.get_or_insert(started.elapsed());
                if reason.contains("did not answer") {
                    named = Some(reason);
                }
            }
            _ => {}
        }
        most_waiting = most_waiting.max(w.waiting().await);
    }
    drop(backends);
    let slow_at = slow_at.unwrap_or_else(|| panic!("{dialect}: never slow: {:?}", health(&app)));
    assert!(
        slow_at < Duration::from_secs(3),
        "{dialect}: slow only after {slow_at:?}"
    );
    let named = named.unwrap_or_else(|| panic!("{dialect}: {:?}", health(&app)));
    names_the_locked_table(dialect, "console", &named);
    assert!(
        most_waiting <= 1,
        "{dialect}: {most_waiting} of the console's reads waited on the lock at once"
    );
    w.release().await;
}

per_dialect!(the_console_shows_a_locked_table_as_slow => the_console_shows_a_locked_table_as_slow_postgres, the_console_shows_a_locked_table_as_slow_mysql);

// ---------------------------------------------------------------------------------------------
// The log source

const ORDER: &str = "20261202101500123abcdef012345";

/// A JSON log line of `ORDER` at a time inside [`window`].
fn log_line(message: &str) -> String {
    format!(
        r#"{{"timestamp": 1764669600000, "service": "order", "level": "INFO", "message": "{message}", "orderNo": "{ORDER}"}}"#
    )
}

fn window() -> Vec<TimeWindow> {
    vec![TimeWindow {
        from_ms: 1_764_669_000_000,
        to_ms: 1_764_670_000_000,
    }]
}

/// The log lines of `ORDER` from `glob`, with budgets small enough for a fast test.
async fn read_logs_of(glob: &str) -> LogRead {
    let mut config = local_config();
    config.logs.files = vec![glob.to_string()];
    config.logs.max_file_bytes = 8 << 20;
    config.logs.max_trace_bytes = 32 << 20;
    config.logs.max_line_bytes = 64 << 10;
    let started = Instant::now();
    let read = tokio::time::timeout(
        Duration::from_secs(20),
        logs::read_logs(&config, &[ORDER.to_string()], &window()),
    )
    .await
    .unwrap_or_else(|_| panic!("reading {glob} still waits after 20 s"));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{glob}: {:?}",
        started.elapsed()
    );
    read
}

fn messages(read: &LogRead) -> Vec<&str> {
    read.lines.iter().map(|l| l.message.as_str()).collect()
}

fn skipped<'a>(read: &'a LogRead, reason: &str) -> &'a logs::Skipped {
    read.skipped
        .iter()
        .find(|s| s.reason.contains(reason))
        .unwrap_or_else(|| panic!("nothing skipped for `{reason}`: {read:?}"))
}

/// A FIFO named like a rotated log and a symlink to /dev/zero next to a real log: the real one
/// is read, the others are skipped at once and said.
#[tokio::test]
async fn a_fifo_and_dev_zero_are_skipped_and_said() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.log"), log_line("real") + "\n").unwrap();
    let fifo = dir.path().join("app.log.1");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    std::os::unix::fs::symlink("/dev/zero", dir.path().join("app.log.2")).unwrap();
    let read = read_logs_of(&format!("{}/app.log*", dir.path().display())).await;
    assert_eq!(messages(&read), ["real"], "{read:?}");
    assert_eq!(read.files_read, 1, "{read:?}");
    assert!(
        skipped(&read, "a FIFO").first.ends_with("app.log.1"),
        "{read:?}"
    );
    let zero = skipped(&read, "a character device");
    assert!(zero.first.ends_with("app.log.2"), "{read:?}");
}

/// A line with a `\xff` byte: read with that byte replaced, and every later line kept. A line
/// longer than logs.max_line_bytes: skipped and counted, the lines after it kept.
#[tokio::test]
async fn a_bad_byte_or_a_long_line_costs_only_its_own_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = log_line("before").into_bytes();
    text.extend_from_slice(b"\n");
    let bad = log_line("bad here");
    let at = bad.find("here").unwrap();
    text.extend_from_slice(&bad.as_bytes()[..at]);
    text.push(0xff);
    text.extend_from_slice(&bad.as_bytes()[at..]);
    text.extend_from_slice(b"\n");
    text.extend_from_slice(log_line(&"x".repeat(200_000)).as_bytes());
    text.extend_from_slice(b"\n");
    text.extend_from_slice(log_line("after").as_bytes());
    text.extend_from_slice(b"\n");
    std::fs::write(dir.path().join("app.log"), text).unwrap();
    let read = read_logs_of(&format!("{}/app.log", dir.path().display())).await;
    let shown = messages(&read);
    assert_eq!(shown, ["before", "bad \u{fffd}here", "after"], "{read:?}");
    let long = skipped(&read, "longer than logs.max_line_bytes");
    assert!(
        long.count == 1 && long.first.ends_with("app.log:3"),
        "{read:?}"
    );
}

/// `dir/loop -> dir` and a `**` glob: the one log file is named dozens of times and read once.
#[tokio::test]
async fn a_symlink_loop_reads_a_file_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.log"), log_line("once") + "\n").unwrap();
    std::os::unix::fs::symlink(dir.path(), dir.path().join("loop")).unwrap();
    let read = read_logs_of(&format!("{}/**/app.log", dir.path().display())).await;
    assert_eq!(messages(&read), ["once"], "{read:?}");
    let again = skipped(&read, "the same file as one already read");
    assert!(again.count >= 2, "{read:?}");
}

/// A gzip file of a few MB holding one 1.5 GB line (then a line of the order): `trace` reads it
/// only up to logs.max_file_bytes (here 32 MiB), says so, and never holds the line.
#[tokio::test]
async fn a_small_gz_of_a_huge_line_is_read_within_its_budget() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    // 96 gzip members of 16 MiB of zeros each: 1.5 GiB once inflated, ~1.6 MB on disk.
    let mut member = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    member.write_all(&vec![b'0'; 16 << 20]).unwrap();
    let member = member.finish().unwrap();
    let path = dir.path().join("app.log.3.gz");
    let mut file = std::fs::File::create(&path).unwrap();
    for _ in 0..96 {
        file.write_all(&member).unwrap();
    }
    let mut tail = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    tail.write_all(format!("\n{}\n", log_line("after the huge line")).as_bytes())
        .unwrap();
    file.write_all(&tail.finish().unwrap()).unwrap();
    drop(file);
    let (config, _db) = migrated_database(Dialect::Postgres).await;
    let started = Instant::now();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
        .args([
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml"),
            "trace",
            ORDER,
            "--json",
        ])
        .env("IDEMGUARD_DATABASE__URL", &config.database.url)
        .env("IDEMGUARD_LOGS__FILES", path.to_str().unwrap())
        .env("IDEMGUARD_LOGS__MAX_FILE_BYTES", (32u64 << 20).to_string())
        .env("IDEMGUARD_KAFKA__TRACE_TOPIC", "")
        .env("IDEMGUARD_LOG", "error")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let mut peak_kb = 0u64;
    let out = loop {
        peak_kb = peak_memory_kb(pid).unwrap_or(peak_kb);
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "trace still reads the .gz after 60 s ({peak_kb} kB)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut stdout = String::new();
    use tokio::io::AsyncReadExt;
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .await
        .unwrap();
    let doc: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let warnings = doc["data"]["warnings"].to_string();
    assert!(
        warnings.contains("read only its first logs.max_file_bytes")
            && warnings.contains("app.log.3.gz"),
        "{out:?}: {warnings}"
    );
    assert!(
        peak_kb < 150_000,
        "trace held {peak_kb} kB reading a line it keeps at most 64 KiB of"
    );
}

/// A loopback TCP proxy in front of a database that can be frozen: it then forwards nothing
/// either way and keeps every socket open — a server that stops answering (a frozen process, a
/// host gone), whose own statement bound never fires. New connections are accepted and held too.
struct FreezableProxy {
    addr: std::net::SocketAddr,
    open: tokio::sync::watch::Sender<bool>,
    accepting: tokio::task::JoinHandle<()>,
}

impl FreezableProxy {
    async fn start(upstream: String) -> FreezableProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (open, seen) = tokio::sync::watch::channel(true);
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(Self::pump(cr, sw, seen.clone()));
                tokio::spawn(Self::pump(sr, cw, seen.clone()));
            }
        });
        FreezableProxy {
            addr,
            open,
            accepting,
        }
    }

    /// Bytes from `from` to `to`, held while the proxy is frozen.
    async fn pump(
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        mut open: tokio::sync::watch::Receiver<bool>,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if open.wait_for(|o| *o).await.is_err() || to.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    }

    fn freeze(&self) {
        self.open.send_replace(false);
    }

    fn thaw(&self) {
        self.open.send_replace(true);
    }

    /// `url` (the test's database) reached through the proxy.
    fn url_for(&self, url: &str) -> String {
        let mut u = url::Url::parse(url).unwrap();
        u.set_port(Some(self.addr.port())).unwrap();
        u.to_string()
    }
}

impl Drop for FreezableProxy {
    fn drop(&mut self) {
        self.thaw();
        self.accepting.abort();
    }
}

/// The server's bound the services get in these tests, and what a statement may take at most
/// before its caller hears of it: the bound, [`CLIENT_GRACE`], and slack for a loaded machine.
const BOUND: Duration = Duration::from_secs(2);
const SLACK: Duration = Duration::from_millis(2500);

/// `idemguard serve` / `consume` on `url` (through the proxy) with [`BOUND`], and a pool
/// acquire timeout longer than the client deadline, so the deadline is what ends a statement;
/// its stderr lines collected, its first stdout line returned; killed when dropped.
struct Service {
    child: tokio::process::Child,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    first_line: String,
}

impl Service {
    async fn spawn(config: &Config, url: &str, args: &[&str]) -> Service {
        use tokio::io::AsyncBufReadExt;
        let c = &config.kafka;
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
            .args([
                "--config",
                concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml"),
            ])
            .args(args)
            .env_remove("IDEMGUARD_CONFIG")
            .env("IDEMGUARD_DATABASE__URL", url)
            .env("IDEMGUARD_DATABASE__STATEMENT_TIMEOUT", "2s")
            .env("IDEMGUARD_DATABASE__CONNECT_TIMEOUT", "20s")
            .env("IDEMGUARD_KAFKA__PAYMENT_TOPIC", &c.payment_topic)
            .env("IDEMGUARD_KAFKA__DLQ_TOPIC", &c.dlq_topic)
            .env("IDEMGUARD_KAFKA__TRACE_TOPIC", &c.trace_topic)
            .env("IDEMGUARD_REDIS__REDLOCK_NODES", "")
            .env("IDEMGUARD_TRACE__ENABLED", "false")
            .env("IDEMGUARD_LOG", "warn,idemguard=info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the idemguard binary starts");
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut err = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let into = log.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = err.next_line().await {
                into.lock().unwrap().push(line);
            }
        });
        let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let first_line = match args[0] {
            "serve" => tokio::time::timeout(Duration::from_secs(30), out.next_line())
                .await
                .expect("serve prints its address within 30s")
                .unwrap()
                .unwrap_or_default(),
            _ => String::new(),
        };
        tokio::spawn(async move { while let Ok(Some(_)) = out.next_line().await {} });
        Service {
            child,
            log,
            first_line,
        }
    }

    /// The first log line holding `part`, waited for at most `secs`.
    async fn line_with(&self, part: &str, secs: u64) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let found = self
                .log
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.contains(part))
                .cloned();
            if let Some(line) = found {
                return line;
            }
            assert!(
                Instant::now() < deadline,
                "no log line with `{part}` within {secs}s; the log:\n{}",
                self.log.lock().unwrap().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// What a service says of a statement that got no answer: the table (`table`), the bound and
/// its setting, through `no_answer`'s wording; never the statement's SQL.
fn says_no_answer(dialect: Dialect, line: &str, table: &str, sql: &str) {
    for part in [
        table,
        "did not answer within 2s",
        "the server did not answer at all",
        "database.statement_timeout",
    ] {
        assert!(line.contains(part), "{dialect}: no `{part}` in: {line}");
    }
    assert!(!line.contains(sql.trim()), "{dialect}: the SQL in: {line}");
}

/// `serve` in front of a database that stops answering: a request that reaches the database
/// is answered 500 (error id, no internal text) within the bound and its grace — not held for
/// ever — the log names the table that did not answer; once the database answers again, the
/// service serves again.
async fn serve_answers_when_the_database_stops_answering(dialect: Dialect) {
    let (mut config, db) = migrated_database(dialect).await;
    let topics = fresh_topics(&config, &["payment.succeeded", "idemguard.trace"]).await;
    config.kafka.payment_topic = topics[0].clone();
    config.kafka.trace_topic = topics[1].clone();
    idemguard::db::inventory::set_stock(&db, 1, 1000)
        .await
        .unwrap();
    let proxy = FreezableProxy::start(idemguard::config::host_port(&config.database.url)).await;
    let service = Service::spawn(
        &config,
        &proxy.url_for(&config.database.url),
        &["serve", "--listen", "127.0.0.1:0"],
    )
    .await;
    let base = service.first_line.rsplit(' ').next().unwrap().to_string();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let post = |key: String| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let r = http
                .post(format!("{base}/orders"))
                .header("Idempotency-Key", key)
                .json(&serde_json::json!({"userId": 42, "skuId": 1, "quantity": 1, "amount": 1999}))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let key = || idemguard::contracts::RequestId::generate("APP", "ORDER").to_string();
    let (status, body) = post(key()).await;
    assert_eq!(status, 201, "{dialect}: before the freeze: {body}");

    proxy.freeze();
    let frozen_key = key();
    let started = Instant::now();
    let (status, body) = post(frozen_key.clone()).await;
    let took = started.elapsed();
    assert_eq!(status, 500, "{dialect}: {body}");
    assert!(body.contains("errorId"), "{dialect}: {body}");
    assert!(
        !body.contains("did not answer") && !body.contains("idempotency_record"),
        "{dialect}: internal text in the answer: {body}"
    );
    assert!(
        took < BOUND + idemguard::db::bounds::CLIENT_GRACE + SLACK,
        "{dialect}: answered after {took:?}"
    );
    let line = service.line_with("idempotency_record (statement", 10).await;
    says_no_answer(
        dialect,
        &line,
        "idempotency_record",
        db.sql("api_idem_claim"),
    );

    proxy.thaw();
    let (status, body) = post(key()).await;
    assert_eq!(status, 201, "{dialect}: after the thaw: {body}");
    let frozen_orders = count(&db, &format!("order_record WHERE req_id = '{frozen_key}'")).await;
    assert_eq!(
        frozen_orders, 0,
        "{dialect}: the unanswered request made no order"
    );
}

per_dialect!(serve_answers_when_the_database_stops_answering => serve_answers_when_the_database_stops_answering_postgres, serve_answers_when_the_database_stops_answering_mysql);

/// `consume` in front of a database that stops answering mid-run: the batch fails within the
/// bound and its grace, the log names the table that did not answer, nothing is committed to
/// Kafka; once the database answers again the event is applied exactly once.
async fn consume_retries_when_the_database_stops_answering(dialect: Dialect) {
    use common::consumer::*;
    let s = consumer_setup(dialect).await;
    let proxy = FreezableProxy::start(idemguard::config::host_port(&s.config.database.url)).await;
    let url = proxy.url_for(&s.config.database.url);
    let service = Service::spawn(&s.config, &url, &["consume", "--group", &s.group]).await;
    let p = producer(&s.config);
    let paid = |order_no: String| {
        let db = s.db.clone();
        async move {
            count(
                &db,
                &format!("order_record WHERE order_no = '{order_no}' AND status = 'PAID'"),
            )
            .await
        }
    };
    let until_paid = |order_no: String, secs: u64| {
        let paid = &paid;
        async move {
            let deadline = Instant::now() + Duration::from_secs(secs);
            while paid(order_no.clone()).await == 0 {
                assert!(
                    Instant::now() < deadline,
                    "{dialect}: order {order_no} not PAID within {secs}s"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let (first, req) = create_order(&s.db, 7).await;
    produce(&p, &s.config.kafka.payment_topic, &payment(&first, &req, 7)).await;
    until_paid(first, 60).await;
    // The batch ends with its processed_event row: frozen before it, the freeze would catch
    // this batch's last writes instead of the next batch's first read.
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(&s.db, "processed_event").await < 1 {
        assert!(
            Instant::now() < deadline,
            "{dialect}: the first batch did not end"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let (second, req) = create_order(&s.db, 8).await;
    proxy.freeze();
    let started = Instant::now();
    produce(
        &p,
        &s.config.kafka.payment_topic,
        &payment(&second, &req, 8),
    )
    .await;
    let line = service.line_with("did not answer within", 20).await;
    let took = started.elapsed();
    assert!(
        took < BOUND + idemguard::db::bounds::CLIENT_GRACE + SLACK,
        "{dialect}: the batch failed after {took:?}; the log:\n{}",
        service.log.lock().unwrap().join("\n")
    );
    says_no_answer(
        dialect,
        &line,
        "processed_event",
        s.db.sql("stream_processed_find"),
    );
    assert_eq!(paid(second.clone()).await, 0, "{dialect}");

    proxy.thaw();
    until_paid(second, 60).await;
    for table in ["points_ledger", "notification", "processed_event"] {
        let deadline = Instant::now() + Duration::from_secs(30);
        while count(&s.db, table).await < 2 {
            assert!(
                Instant::now() < deadline,
                "{dialect}: {table} lacks the second event"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Once, however many times the batch was tried (the statements held by the freeze reach
    // the server when it thaws).
    tokio::time::sleep(Duration::from_secs(2)).await;
    for table in ["points_ledger", "notification", "processed_event"] {
        assert_eq!(count(&s.db, table).await, 2, "{dialect}: {table}");
    }
}

per_dialect!(consume_retries_when_the_database_stops_answering => consume_retries_when_the_database_stops_answering_postgres, consume_retries_when_the_database_stops_answering_mysql);

/// A trace whose `source` did not answer says so first and never reports its rows or keys as
/// absent.
fn says_partial_for(dialect: Dialect, text: &str, source: &str) {
    let partial = format!("PARTIAL: {source} did not answer");
    assert!(
        text.contains(&partial),
        "{dialect}: no `{partial}` in:\n{text}"
    );
    for wrong in [
        "no row, key, message or trace event names this ID",
        "the database has no row of this ID",
    ] {
        assert!(!text.contains(wrong), "{dialect}: `{wrong}` in:\n{text}");
    }
}

/// `idemguard trace` on fresh topics with `env` set: (exit code, stdout, stderr).
async fn trace_where(
    config: &Config,
    env: &[(&str, &str)],
    args: &[&str],
) -> (Option<i32>, String, String) {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
        .args([
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml"),
        ])
        .arg("trace")
        .args(args)
        .env(
            "IDEMGUARD_KAFKA__PAYMENT_TOPIC",
            &config.kafka.payment_topic,
        )
        .env("IDEMGUARD_KAFKA__TRACE_TOPIC", &config.kafka.trace_topic)
        .env("IDEMGUARD_REDIS__REDLOCK_NODES", "")
        .env("IDEMGUARD_LOG", "error")
        .envs(env.iter().copied())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(40), child)
        .await
        .expect("`idemguard trace` ends within 40 s")
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// The database refuses connections (a closed port of the dialect's scheme): a paid order's
/// payment message is still found, but the trace is partial, exits non-zero and says so in both
/// faces; an ID nothing names is not called absent from the database.
async fn a_trace_without_its_database_says_it_is_partial(dialect: Dialect) {
    let mut config = migrated_database(dialect).await.0;
    let topics = fresh_topics(&config, &["payment.succeeded", "idemguard.trace"]).await;
    (config.kafka.payment_topic, config.kafka.trace_topic) = (topics[0].clone(), topics[1].clone());
    let order = idemguard::contracts::OrderNo::generate().to_string();
    let p = common::consumer::producer(&config);
    let paid = common::consumer::payment(&order, "req-partial", 7);
    common::consumer::produce(&p, &config.kafka.payment_topic, &paid).await;
    let scheme = match dialect {
        Dialect::Postgres => "postgres",
        Dialect::Mysql => "mysql",
    };
    let down = format!("{scheme}://root@127.0.0.1:1/idemguard");
    let env = [("IDEMGUARD_DATABASE__URL", down.as_str())];

    let (code, json, err) = trace_where(&config, &env, &[&order, "--json"]).await;
    assert_eq!(code, Some(1), "{dialect}: {json}{err}");
    let json: serde_json::Value = serde_json::from_str(&json)
        .unwrap_or_else(|e| panic!("{dialect}: not JSON ({e}):\n{json}"));
    let data = &json["data"];
    assert_eq!(data["partial"], true, "{dialect}: {data}");
    assert_eq!(
        data["unanswered"][0]["source"], "database",
        "{dialect}: {data}"
    );
    assert_eq!(
        data["found"], true,
        "{dialect}: the payment message names it: {data}"
    );

    let (code, text, _) = trace_where(&config, &env, &[&order]).await;
    assert_eq!(code, Some(1), "{dialect}: {text}");
    says_partial_for(dialect, &text, "the database");
    assert!(
        text.contains(&paid.event_id),
        "{dialect}: the Kafka copy is shown:\n{text}"
    );

    let unknown = idemguard::contracts::OrderNo::generate().to_string();
    let (code, text, _) = trace_where(&config, &env, &[&unknown]).await;
    assert_eq!(code, Some(1), "{dialect}: {text}");
    says_partial_for(dialect, &text, "the database");
    assert!(
        text.contains("nothing that answered names this ID")
            && text.contains("the database did not answer: the topics were searched"),
        "{dialect}: {text}"
    );
}

per_dialect!(a_trace_without_its_database_says_it_is_partial => a_trace_without_postgres_says_it_is_partial, a_trace_without_mariadb_says_it_is_partial);

/// Redis refuses connections: the rows are read, the keys are not, and the trace says which.
#[tokio::test]
async fn a_trace_without_redis_says_it_is_partial() {
    let (mut config, db) = migrated_database(Dialect::Postgres).await;
    let topics = fresh_topics(&config, &["payment.succeeded", "idemguard.trace"]).await;
    (config.kafka.payment_topic, config.kafka.trace_topic) = (topics[0].clone(), topics[1].clone());
    let (order, _) = common::consumer::create_order(&db, 7).await;
    let env = [
        ("IDEMGUARD_DATABASE__URL", config.database.url.as_str()),
        ("IDEMGUARD_REDIS__URL", "redis://127.0.0.1:1"),
    ];
    let (code, text, err) = trace_where(&config, &env, &[&order]).await;
    assert_eq!(code, Some(1), "{text}{err}");
    says_partial_for(Dialect::Postgres, &text, "Redis");
    assert!(
        text.contains("order_record"),
        "the database's rows are shown:\n{text}"
    );
    let (_, json, _) = trace_where(&config, &env, &[&order, "--json"]).await;
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let error = json["data"]["unanswered"][0]["error"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert_eq!(json["data"]["unanswered"][0]["source"], "redis", "{json}");
    assert_eq!(
        error.matches("127.0.0.1:1").count(),
        1,
        "the node is named once: {error}"
    );
}
