//! A password never leaves the process. A secret is put in every URL of the
//! configuration, both ways — the userinfo (`postgres://root:S@…`, `redis://:S@…`) and a
//! password-like query parameter in any case (`?PassWord=S`, `?sslpassword=S`, `?token=S`) — in
//! the database, the replica, the main Redis and the RedLock nodes; then the real binary's
//! subcommands run against reachable services (success paths) and unreachable ones (error
//! paths), and every byte of their stdout and stderr (logs at debug level included) is searched
//! for it. A string that is no URL with a host (`postgres:/root:S@h`, `postgresql:root:S@h`, an
//! empty host) is refused at start naming its key, and its password is not echoed either.

use crate::common;
use crate::support::redis_server;

use std::time::Duration;

use idemguard::config::Dialect;
use redis_server::RedisServer;

/// Alphanumeric, so it reads the same raw and percent-encoded.
const SECRET: &str = "Sup3rS3cretValue42";
const UNKNOWN_ID: &str = "APP:ORDER:20261129:nobody-knows-me";

/// The subcommands that show a URL or an error that may embed one.
const COMMANDS: &[&[&str]] = &[
    &["config"],
    &["doctor"],
    &["doctor", "--json"],
    &["--log-format", "json", "doctor"],
    &["migrate"],
    &["stuck"],
    &["stuck", "--json"],
    &["report", "--id", UNKNOWN_ID],
    &["locks"],
    &["locks", "--json"],
    &["trace", UNKNOWN_ID],
    &["trace", UNKNOWN_ID, "--json"],
    &[
        "finalize",
        UNKNOWN_ID,
        "--allow-actions",
        "--reason",
        "test",
    ],
    &[
        "release-lock",
        "lock:order:nobody",
        "--expect-value",
        "x",
        "--allow-actions",
    ],
];

/// A private redis-server that asks for SECRET (private, so setting its password is ours to do).
async fn redis_with_password() -> RedisServer {
    let r = RedisServer::start();
    let mut c = r.conn().await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg(SECRET)
        .query_async(&mut c)
        .await
        .unwrap();
    r
}

/// Runs the binary with `env` (over config/local.toml); (exit code, stdout + stderr).
async fn idemguard(args: &[&str], env: &[(String, String)]) -> (Option<i32>, String) {
    let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemguard"));
    c.args(args)
        .env(
            "IDEMGUARD_CONFIG",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml"),
        )
        .env("IDEMGUARD_LOG", "debug")
        .env_remove("IDEMGUARD_LOG_FORMAT")
        .kill_on_drop(true);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(90), c.output())
        .await
        .unwrap_or_else(|_| panic!("idemguard {args:?} did not finish within 90 s"))
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

fn with_password_in_userinfo(url: &str) -> String {
    let mut u = url::Url::parse(url).unwrap();
    u.set_password(Some(SECRET)).unwrap();
    u.to_string()
}

fn with_query(url: &str, query: &str) -> String {
    format!("{url}?{query}")
}

async fn secrets_are_never_printed(dialect: Dialect) {
    let (config, _db) = common::migrated_database(dialect).await;
    let topics = common::fresh_topics(&config, &["payment.succeeded", "idemguard.trace"]).await;
    let main = redis_with_password().await;
    let nodes = [
        redis_with_password().await,
        redis_with_password().await,
        redis_with_password().await,
    ];
    let db = config.database.url.clone();
    let userinfo_db = with_password_in_userinfo(&db);
    let param_db = with_query(&db, &format!("PassWord={SECRET}&application_name=igt"));
    let replica = with_query(&db, &format!("sslpassword={SECRET}"));
    let redis_url = format!("redis://:{SECRET}@127.0.0.1:{}", main.port);
    let redlock = format!(
        "redis://:{SECRET}@127.0.0.1:{},redis://default:{SECRET}@127.0.0.1:{},redis://default:{SECRET}@127.0.0.1:{}/0?token={SECRET}",
        nodes[0].port, nodes[1].port, nodes[2].port
    );
    let dead_db = {
        let mut u = url::Url::parse(&userinfo_db).unwrap();
        u.set_port(Some(1)).unwrap();
        with_query(u.as_str(), &format!("password={SECRET}"))
    };
    let dead_redis = format!("redis://:{SECRET}@127.0.0.1:1");
    let dead_redlock = format!("redis://:{SECRET}@127.0.0.1:1,redis://u:{SECRET}@127.0.0.1:2,redis://127.0.0.1:3?Password={SECRET}");

    let base = |db: &str, replica: &str, redis: &str, redlock: &str| -> Vec<(String, String)> {
        vec![
            ("IDEMGUARD_DATABASE__URL".into(), db.into()),
            ("IDEMGUARD_DATABASE__REPLICA_URL".into(), replica.into()),
            ("IDEMGUARD_REDIS__URL".into(), redis.into()),
            ("IDEMGUARD_REDIS__REDLOCK_NODES".into(), redlock.into()),
            ("IDEMGUARD_KAFKA__PAYMENT_TOPIC".into(), topics[0].clone()),
            ("IDEMGUARD_KAFKA__TRACE_TOPIC".into(), topics[1].clone()),
            (
                "IDEMGUARD_KAFKA__CONSUMER_GROUP".into(),
                format!("igt-group-{}", common::unique_suffix()),
            ),
        ]
    };
    let setups = [
        (
            "password in the userinfo",
            base(&userinfo_db, &replica, &redis_url, &redlock),
        ),
        (
            "password as a query parameter",
            base(&param_db, &replica, &redis_url, &redlock),
        ),
        (
            "every service unreachable",
            base(&dead_db, &dead_db, &dead_redis, &dead_redlock),
        ),
    ];
    for (setup, env) in &setups {
        for args in COMMANDS {
            let (code, out) = idemguard(args, env).await;
            assert!(
                !out.contains(SECRET),
                "{dialect}, {setup}: `idemguard {}` (exit {code:?}) printed the secret:\n{out}",
                args.join(" ")
            );
            if args == &["config"] {
                assert_eq!(code, Some(0), "{out}");
                assert!(
                    out.contains(":***@") && out.contains("=***"),
                    "{dialect}, {setup}: the URLs are shown, redacted:\n{out}"
                );
            }
        }
    }
    // The working paths really ran: the service with a password in its query parameter was used.
    let (code, out) = idemguard(&["migrate"], &setups[1].1).await;
    assert_eq!(
        code,
        Some(0),
        "{dialect}: migrate through ?PassWord=: {out}"
    );
    assert!(out.contains("PassWord=***"), "{out}");
    let (code, out) = idemguard(&["locks", "--json"], &setups[0].1).await;
    assert_eq!(
        code,
        Some(0),
        "{dialect}: the Redis nodes answered with their password: {out}"
    );

    // Kafka addresses cannot carry credentials: refused, without echoing them.
    let mut env = setups[0].1.clone();
    env.push((
        "IDEMGUARD_KAFKA__BOOTSTRAP_SERVERS".into(),
        format!("user:{SECRET}@127.0.0.1:9092"),
    ));
    let (code, out) = idemguard(&["config"], &env).await;
    assert_eq!(code, Some(2), "{out}");
    assert!(
        !out.contains(SECRET) && out.contains("kafka.bootstrap_servers"),
        "{out}"
    );
}

per_dialect!(secrets_are_never_printed => secrets_are_never_printed_postgres, secrets_are_never_printed_mysql);

/// A URL that is no URL with a host — one slash (`postgres:/root:S@h`), none
/// (`postgresql:root:S@h`), an empty host (`postgres://root:S@/db`), a port out of range — has
/// no userinfo the url crate can see: every URL key, and `--actions-database-url`, refuse it at
/// start naming the key, and neither the refusal nor any subcommand echoes its password.
#[tokio::test]
async fn a_malformed_url_never_echoes_its_password() {
    let db_shapes = [
        format!("postgres:/root:{SECRET}@127.0.0.1:5432/idemguard"),
        format!("postgresql:root:{SECRET}@127.0.0.1:5432/idemguard"),
        format!("postgres://root:{SECRET}@/idemguard"),
        format!("postgres://root:{SECRET}@127.0.0.1:99999/idemguard"),
        format!("postgresql:root:{SECRET}"),
    ];
    let redis_shapes = [
        format!("redis:/:{SECRET}@127.0.0.1:6379"),
        format!("redis:default:{SECRET}@127.0.0.1:6379"),
        format!("rediss://:{SECRET}@/0"),
    ];
    let keys: [(&str, &str, &[String]); 6] = [
        ("IDEMGUARD_DATABASE__URL", "database.url", &db_shapes),
        (
            "IDEMGUARD_DATABASE__REPLICA_URL",
            "database.replica_url",
            &db_shapes,
        ),
        (
            "IDEMGUARD_DATABASE__ACTIONS_URL",
            "database.actions_url",
            &db_shapes,
        ),
        ("IDEMGUARD_REDIS__URL", "redis.url", &redis_shapes),
        (
            "IDEMGUARD_REDIS__REDLOCK_NODES",
            "redis.redlock_nodes",
            &redis_shapes,
        ),
        (
            "IDEMGUARD_FOREIGN_LOCKS__ACTIONS_REDIS_URL",
            "foreign_locks.actions_redis_url",
            &redis_shapes,
        ),
    ];
    let commands: [&[&str]; 3] = [&["config"], &["doctor"], &["trace", UNKNOWN_ID]];
    for (var, key, shapes) in keys {
        for shape in shapes {
            // A RedLock list with the bad node second: the node is named too.
            let value = if var.ends_with("REDLOCK_NODES") {
                format!("redis://127.0.0.1:6381,{shape}")
            } else {
                shape.clone()
            };
            for args in commands {
                let (code, out) = idemguard(args, &[(var.to_string(), value.clone())]).await;
                assert!(
                    !out.contains(SECRET),
                    "{var}={value}: `idemguard {}` printed the secret:\n{out}",
                    args.join(" ")
                );
                assert_eq!(code, Some(2), "{var}={value}: refused at start:\n{out}");
                assert!(
                    out.contains(&format!("key `{key}`")),
                    "{var}={value}:\n{out}"
                );
            }
        }
    }
    for shape in &db_shapes {
        let args = [
            "finalize",
            UNKNOWN_ID,
            "--allow-actions",
            "--actions-database-url",
            shape.as_str(),
        ];
        let (code, out) = idemguard(&args, &[]).await;
        assert!(
            !out.contains(SECRET),
            "--actions-database-url {shape}:\n{out}"
        );
        assert_eq!(code, Some(2), "{shape}: refused at start:\n{out}");
    }
}

/// The secrets that are no part of a URL: the Kafka SASL password and key passphrase (given
/// directly, through the environment, or in a file), a secret `[kafka.client]` property, and the
/// passwords read from `database.password_file` and `redis.password_file` — none is printed by
/// any subcommand, on the working paths (the TLS database and Redis, logged in with those files)
/// and the failing ones (a SASL login the broker refuses; every service unreachable).
#[tokio::test(flavor = "multi_thread")]
async fn the_password_files_and_kafka_secrets_are_never_printed() {
    let tls = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".stack/tls");
    let file = |name: &str| tls.join(name).display().to_string();
    let real: Vec<String> = ["database.password", "redis.password"]
        .iter()
        .map(|f| std::fs::read_to_string(file(f)).expect("scripts/stack up makes .stack/tls"))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("kafka.password");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();
    let ca = file("ca.pem");
    let common_env = |db: &str, redis: &str| -> Vec<(String, String)> {
        vec![
            ("IDEMGUARD_DATABASE__URL".into(), db.into()),
            (
                "IDEMGUARD_DATABASE__PASSWORD_FILE".into(),
                file("database.password"),
            ),
            ("IDEMGUARD_REDIS__URL".into(), redis.into()),
            ("IDEMGUARD_REDIS__REDLOCK_NODES".into(), String::new()),
            // Sixteen processes connecting over TLS at once on a small machine.
            ("IDEMGUARD_REDIS__COMMAND_TIMEOUT".into(), "3s".into()),
            ("IDEMGUARD_REDIS__TLS_CA_FILE".into(), ca.clone()),
            ("IDEMGUARD_REDIS__TLS_CERT_FILE".into(), file("client.pem")),
            ("IDEMGUARD_REDIS__TLS_KEY_FILE".into(), file("client.key")),
            (
                "IDEMGUARD_REDIS__PASSWORD_FILE".into(),
                file("redis.password"),
            ),
            (
                "IDEMGUARD_KAFKA__SECURITY_PROTOCOL".into(),
                "SASL_SSL".into(),
            ),
            ("IDEMGUARD_KAFKA__SSL_CA_FILE".into(), ca.clone()),
            ("IDEMGUARD_KAFKA__SASL_USERNAME".into(), "alice".into()),
            (
                "IDEMGUARD_KAFKA__CLIENT".into(),
                format!("{{ \"sasl.oauthbearer.config\" = \"principal={SECRET}\" }}"),
            ),
        ]
    };
    let db = format!(
        "postgres://idemguard@localhost:5433/idemguard?sslmode=verify-full&sslrootcert={ca}"
    );
    let mut working = common_env(&db, "rediss://idemguard@localhost:6390");
    working.push((
        "IDEMGUARD_KAFKA__BOOTSTRAP_SERVERS".into(),
        "localhost:9094".into(),
    ));
    working.push(("IDEMGUARD_KAFKA__SASL_PASSWORD".into(), SECRET.into()));
    working.push(("IDEMGUARD_KAFKA__SSL_KEY_PASSWORD".into(), SECRET.into()));
    let mut unreachable = common_env(&db.replace(":5433", ":1"), "rediss://idemguard@localhost:1");
    unreachable.push((
        "IDEMGUARD_KAFKA__BOOTSTRAP_SERVERS".into(),
        "localhost:1".into(),
    ));
    unreachable.push((
        "IDEMGUARD_KAFKA__SASL_PASSWORD_FILE".into(),
        secret_file.display().to_string(),
    ));
    let commands: &[&[&str]] = &[
        &["config"],
        &["doctor"],
        &["doctor", "--json"],
        &["--log-format", "json", "doctor"],
        &["migrate"],
        &["locks", "--json"],
        &["stuck"],
        &["trace", UNKNOWN_ID, "--json"],
    ];
    let mut runs = Vec::new();
    for (setup, env) in [("working", &working), ("unreachable", &unreachable)] {
        for args in commands {
            runs.push(async move { (setup, *args, idemguard(args, env).await) });
        }
    }
    for (setup, args, (code, out)) in futures::future::join_all(runs).await {
        for secret in std::iter::once(SECRET).chain(real.iter().map(|s| s.trim())) {
            assert!(
                !out.contains(secret),
                "{setup}: `idemguard {}` (exit {code:?}) printed a secret:\n{out}",
                args.join(" ")
            );
        }
        if args == ["config"] {
            assert_eq!(code, Some(0), "{setup}: {out}");
            assert!(
                out.contains("\"sasl.oauthbearer.config\" = \"***\""),
                "{setup}: {out}"
            );
        }
        if setup == "working" && args == ["locks", "--json"] {
            assert_eq!(
                code,
                Some(0),
                "the TLS Redis, its password from the file: {out}"
            );
        }
        if setup == "working" && args == ["migrate"] {
            assert_eq!(
                code,
                Some(0),
                "the TLS database, its password from the file: {out}"
            );
        }
    }
}

/// Secret and certificate files are read as files, and only so much: `/dev/zero` as the
/// database's password file and as Redis's CA, a FIFO as Kafka's SASL password file (nobody
/// writes to it), a 5 MB password file and a directory — `idemguard config` refuses each within
/// seconds (no memory filled, no wait on the pipe), naming the setting and the file. A password
/// file every user may read is refused in production.
#[test]
fn secret_and_certificate_files_are_read_as_bounded_files() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("sasl.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string; mkfifo only creates the node.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let big = dir.path().join("big.password");
    std::fs::write(&big, vec![b'x'; 5_000_000]).unwrap();
    let open = dir.path().join("open.password");
    std::fs::write(&open, "s3cret\n").unwrap();
    let path = |p: &std::path::Path| p.display().to_string();
    // The setting, its environment, what the refusal must say.
    type Case<'a> = (&'a str, Vec<(&'a str, String)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            "database.password_file",
            vec![("IDEMGUARD_DATABASE__PASSWORD_FILE", "/dev/zero".into())],
            "not a regular file",
        ),
        (
            "redis.tls_ca_file",
            vec![
                ("IDEMGUARD_REDIS__URL", "rediss://127.0.0.1:6390".into()),
                ("IDEMGUARD_REDIS__TLS_CA_FILE", "/dev/zero".into()),
            ],
            "not a regular file",
        ),
        (
            "kafka.sasl_password_file",
            vec![
                ("IDEMGUARD_KAFKA__SECURITY_PROTOCOL", "SASL_SSL".into()),
                ("IDEMGUARD_KAFKA__SASL_USERNAME", "idemguard".into()),
                ("IDEMGUARD_KAFKA__SASL_PASSWORD_FILE", path(&fifo)),
            ],
            "not a regular file",
        ),
        (
            "redis.password_file",
            vec![("IDEMGUARD_REDIS__PASSWORD_FILE", path(&big))],
            "more than the 65536",
        ),
        (
            "redis.password_file",
            vec![("IDEMGUARD_REDIS__PASSWORD_FILE", path(dir.path()))],
            "not a regular file",
        ),
        (
            "database.password_file",
            vec![
                ("IDEMGUARD_DATABASE__PASSWORD_FILE", path(&open)),
                ("IDEMGUARD_ENVIRONMENT__PRODUCTION", "true".into()),
            ],
            "readable by every user",
        ),
    ];
    for (key, env, says) in cases {
        let started = std::time::Instant::now();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_idemguard"));
        cmd.args([
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml"),
        ])
        .arg("config")
        .env_remove("IDEMGUARD_CONFIG")
        .stdin(std::process::Stdio::null());
        for (k, v) in &env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > Duration::from_secs(10) {
                child.kill().unwrap();
                panic!("{key} = {env:?}: `idemguard config` still running after 10 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{key} = {env:?}: {err}");
        assert!(
            err.contains(key) && err.contains(says) && !err.contains("s3cret"),
            "{key} = {env:?}: {err}"
        );
    }
}
