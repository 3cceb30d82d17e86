//! The flags and subcommands of `idemguard`, as clap reads them: every doc comment here is
//! help text, so the whole command-line surface can be read, and changed, in one place apart
//! from what the commands do.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "idemguard",
    version,
    about = "Stops duplicate orders in three lines of defense and shows where each duplicate was stopped",
    long_about = "idemguard: an order service guarded by an Idempotency-Key layer, Redis locks, database \
                  unique keys and a deduplicating payment-event consumer — and an operations console that \
                  traces one orderNo / requestId / eventId across every layer.\n\n\
                  Configuration: the built-in defaults (config/default.toml), then --config FILE or \
                  $IDEMGUARD_CONFIG, then IDEMGUARD_<SECTION>__<KEY> environment variables.",
    after_help = "Quick start on the local stack:\n  scripts/stack up\n  idemguard --config config/local.toml migrate\n  idemguard --config config/local.toml doctor"
)]
pub(crate) struct Cli {
    /// Configuration file laid over the built-in defaults [env: IDEMGUARD_CONFIG]
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,

    /// The context of the config file to use: one of its [contexts.NAME] tables, or `default`
    /// (its top-level sections) [env: IDEMGUARD_CONTEXT]
    #[arg(long, global = true, value_name = "NAME")]
    pub(crate) context: Option<String>,

    /// The actions' own database credentials (database.actions_url; prefer
    /// IDEMGUARD_DATABASE__ACTIONS_URL: a command line is visible to `ps`)
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) actions_database_url: Option<String>,

    /// Log format on stderr
    #[arg(long, global = true, value_enum, default_value = "text")]
    pub(crate) log_format: LogFormat,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

/// How `idemguard report` writes the report.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ReportOutput {
    /// For a ticket
    Markdown,
    /// One self-contained page: each order's swimlanes (which line of defense stopped each
    /// copy), then its table; opens offline
    Html,
    /// The `idemguard.report/v1` document
    Json,
}

#[derive(Subcommand)]
pub(crate) enum ProfileCommand {
    /// Write a commented source profile from what the configured database, Redis, topics and
    /// log files hold (read-only, with the console's credentials; each source sampled within a
    /// bound). Every value says what it was based on; check it, then `doctor` validates it.
    #[command(after_help = "First contact with a team's system:\n  \
        IDEMGUARD_DATABASE__URL=mysql://reader@db:3306/shop IDEMGUARD_KAFKA__PAYMENT_TOPIC=pay.events \\\n    \
        IDEMGUARD_LOGS__FILES=/var/log/order/*.log idemguard profile suggest --out shop.toml\n  \
        idemguard --config shop.toml doctor\n  idemguard --config shop.toml console")]
    Suggest {
        /// Write the profile to FILE instead of stdout (refused if FILE exists)
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// How long each source may be read
        #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
        deadline: std::time::Duration,
        /// Redis keys sampled at most (SCAN)
        #[arg(long, value_name = "N", default_value_t = 5000)]
        redis_keys: usize,
        /// Messages sampled per topic at most (the newest)
        #[arg(long, value_name = "N", default_value_t = 500)]
        messages: usize,
        /// Sample only the Redis keys matching this glob (a Redis shared by several
        /// applications: the team's prefix, e.g. 'shop:*')
        #[arg(long, value_name = "GLOB", default_value = "*")]
        redis_match: String,
        /// The file's `[environment]`, shown in the console's header: named NAME (default: the
        /// database's host) and yellow, never the defaults' green `local`
        #[arg(long, value_name = "NAME")]
        environment: Option<String>,
        /// Declare the environment production (red): every console action then asks for a
        /// typed confirmation, and every connection must be TLS with a verified certificate
        #[arg(long)]
        production: bool,
    },
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Create every table and index in the configured database (safe to run twice, or twice at
    /// once)
    Migrate,
    /// Check every configured service: database, Redis nodes, Kafka and its topics
    Doctor {
        /// Print the rows as JSON
        #[arg(long)]
        json: bool,
        /// Exit non-zero on a warning too: in a production environment, a plaintext or
        /// unverified connection
        #[arg(long)]
        strict: bool,
        /// Check every context of the config file, one table with a CONTEXT column
        #[arg(long, conflicts_with = "context")]
        all_contexts: bool,
    },
    /// Print the effective configuration (passwords hidden)
    Config,
    /// List the config file's contexts: environment, actions policy and services; `*` marks
    /// the one in use (--context, IDEMGUARD_CONTEXT, else `default`)
    Contexts {
        /// Print the rows as JSON
        #[arg(long)]
        json: bool,
    },
    /// The source profile of a team's system, read from the live systems (`profile suggest`)
    #[command(subcommand)]
    Profile(ProfileCommand),
    /// A live duplicate-order incident on the local stack, opened in the console
    ///
    /// Starts the order service and two consumers, drives double clicks, gateway retries, repeated
    /// payment
    /// callbacks and broker redeliveries, kills a service mid-request and a lock holder, then
    /// opens the console (actions enabled). Quitting the console stops everything it started.
    /// Run it through scripts/demo, which brings the stack up first.
    Demo {
        /// Do not open the console: wait until the stuck record and the dead owner's lock are
        /// visible, print where to look (JSON), stop everything
        #[arg(long)]
        no_tui: bool,
    },
    /// Consume payment events (a consumer-group member on kafka.payment_topic) until Ctrl-C
    Consume {
        /// Fault injection: abort right after the database commit of batch N, before the
        /// offset commit (what the sinks' unique keys exist for)
        #[arg(long, value_name = "N", hide = true)]
        crash_after_db_commit: Option<u64>,
        /// Consumer group (default: kafka.consumer_group)
        #[arg(long)]
        group: Option<String>,
        /// Serve GET /metrics (Prometheus) on this address [default: metrics.listen, off when empty]
        #[arg(long, value_name = "ADDR")]
        metrics_listen: Option<String>,
    },
    /// Run the order service (the API, its idempotency layer and the outbox relay)
    ///
    /// Serves POST /orders, POST /payments/callback, GET /orders/{orderNo},
    /// GET /healthz, with the Idempotency-Key layer and the outbox relay; Ctrl-C finishes the
    /// requests in flight, then stops
    Serve {
        /// Address to listen on [default: api.listen]
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
        /// Serve GET /metrics (Prometheus) on this address [default: metrics.listen, off when empty]
        #[arg(long, value_name = "ADDR")]
        metrics_listen: Option<String>,
        /// Fault injection: abort the process mid-request, once the request lock is held and
        /// before the database is written (leaves a stuck record and a dead owner's lock)
        #[arg(long, hide = true)]
        crash_after_request_lock: bool,
        /// Fault injection: abort in the outbox relay after it claimed committed payment
        /// events, before publishing them
        #[arg(long, hide = true)]
        crash_before_publish: bool,
        /// Fault injection: abort in the outbox relay after the broker acknowledged the
        /// events, before marking them sent (they are published again at the next start)
        #[arg(long, hide = true)]
        crash_after_publish: bool,
    },
    /// Replay a duplicate storm and prove from the database that nothing was processed twice
    ///
    /// Drives double clicks, gateway retries, broker redeliveries, crashes or a flash sale
    /// against the real service and consumer, then checks the invariants in the database. Exit
    /// status 1 when an
    /// invariant does not hold (the offending IDs are printed).
    #[command(
        after_help = "Each run creates its own topics and consumer group and writes orders whose requestIds \
                            carry the run id, so runs never mix. It needs the configured database, Redis and Kafka \
                            (scripts/stack up) and, for redis-down, redis-server on PATH (a private one is started and killed).\n\n\
                            Examples:\n  idemguard --config config/local.toml storm double-click\n  \
                            idemguard --config config/local.toml storm flash-sale --requests 2000 --json\n  \
                            idemguard --config config/local.toml storm double-click --broken"
    )]
    Storm {
        #[arg(value_enum)]
        scenario: idemguard::storm::Scenario,
        /// Size: requests (double-click, redis-down), keys (gateway-retry), orders (mq-replay,
        /// consumer-crash, lock-expiry) or users (flash-sale) [default: 500, 200, 200, 100, 20, 400, 2000]
        #[arg(long, value_name = "N")]
        requests: Option<usize>,
        /// Requests (flash-sale: users) in flight at once
        #[arg(long, value_name = "N", default_value_t = 64)]
        concurrency: usize,
        /// Initial stock of the flash-sale SKU
        #[arg(long, default_value_t = 500)]
        stock: i64,
        /// Fault injection: turn off the API idempotency record, the Redis fast path and the
        /// request lock, leaving the database layer alone against the storm
        #[arg(long)]
        broken: bool,
        /// Print the report as JSON on stdout (no progress bar)
        #[arg(long)]
        json: bool,
        /// chaos: how long the storm runs
        #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
        duration: std::time::Duration,
        /// chaos: the seed of the nemesis's schedule (printed in the report; default: random)
        #[arg(long)]
        seed: Option<u64>,
    },
    /// Hold one lock in this process until killed or `--hold` passes
    ///
    /// Tests and the storm tester use it to have a real, separate holder they can kill)
    #[command(hide = true)]
    LockHold {
        /// The lock key, e.g. lock:order:2026112914054212300000abcdef
        key: String,
        /// Lock TTL [default: lock.ttl]
        #[arg(long, value_parser = humantime::parse_duration)]
        ttl: Option<std::time::Duration>,
        /// Do not renew: the lock expires after --ttl even while held
        #[arg(long)]
        no_watchdog: bool,
        /// Release after this long [default: hold until killed]
        #[arg(long, value_parser = humantime::parse_duration)]
        hold: Option<std::time::Duration>,
    },
    /// Open the operations console (terminal UI), on its Overview of what is wrong now
    ///
    /// Views: Overview, Trace, Locks, Rates, Stuck, Audit and DLQ, live. Read-only unless
    /// --allow-actions or environment.allow_actions
    Console {
        /// Enable the actions (x release a lock, f finalize a record, r redrive a DLQ message),
        /// each confirmed and audited
        #[arg(long)]
        allow_actions: bool,
        /// Open on this view: overview, trace, locks, rates, stuck, audit or dlq (the `:`
        /// commands' names and aliases)
        #[arg(long, value_name = "VIEW", value_parser = parse_view, conflicts_with = "trace")]
        view: Option<idemguard::console::tui::keymap::View>,
        /// Open on the trace of this orderNo, requestId or eventId, as `:trace ID` does
        #[arg(long, value_name = "ID", value_parser = clap::builder::NonEmptyStringValueParser::new())]
        trace: Option<String>,
        /// Print every key and `:` command as Markdown tables (what `?` shows) and exit
        #[arg(long, conflicts_with_all = ["view", "trace", "allow_actions"])]
        keys: bool,
    },
    /// Trace one orderNo, requestId or eventId across every layer
    ///
    /// The console's Trace view, once, as a table or JSON
    Trace {
        /// An orderNo, a requestId (has ':') or an eventId (a UUID)
        id: String,
        /// Print the `idemguard.console/v1` JSON document instead of a table
        #[arg(long)]
        json: bool,
        /// Where an ID the database does not know is searched in the topics (a known ID is read
        /// around its rows' times): from this time, RFC 3339 or epoch ms [default: 24 h before
        /// --until]
        #[arg(long, value_parser = parse_time_arg)]
        since: Option<String>,
        /// ... up to this time [default: now]
        #[arg(long, value_parser = parse_time_arg)]
        until: Option<String>,
    },
    /// Every lock with its holder, TTL, owner liveness and RedLock quorum
    ///
    /// Every lock:* key, read with SCAN (never KEYS)
    Locks {
        #[arg(long)]
        json: bool,
    },
    /// Interceptions per layer per minute over the last hour, and the consumer group's lag
    Rates {
        #[arg(long)]
        json: bool,
    },
    /// PROCESSING idempotency records older than console.stuck_threshold, oldest first
    Stuck {
        #[arg(long)]
        json: bool,
    },
    /// The DLQ's messages, newest first, and what the consumer would do with each now
    ///
    /// The messages of kafka.dlq_topic, newest first, each with its reason, source, IDs, age,
    /// redrive and what the consumer would do with it now (still poison, would apply, already
    /// applied)
    Dlq {
        /// From this time, RFC 3339 or epoch ms [default: 7 days before --until]
        #[arg(long, value_parser = parse_time_arg)]
        since: Option<String>,
        /// ... up to this time [default: now]
        #[arg(long, value_parser = parse_time_arg)]
        until: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Publish DLQ messages again to their source topic and partition, each once
    ///
    /// Audited (the ops_audit
    /// row, written first, is the record: a second redrive is refused; a failed publish may be
    /// retried). Exit 0 done, 4 refused, 1 error (the worst of the messages), 130 interrupted
    Redrive {
        /// The DLQ message's position, PARTITION:OFFSET (repeat for several)
        #[arg(long = "dlq", value_name = "PARTITION:OFFSET", required_unless_present = "all_with_reason", value_parser = parse_dlq_position)]
        positions: Vec<(i32, i64)>,
        /// Every DLQ message of the window whose reason contains TEXT and that was not redriven
        /// yet, one after the other, with progress; Ctrl-C stops between messages
        #[arg(long, value_name = "TEXT", conflicts_with = "positions")]
        all_with_reason: Option<String>,
        /// With --all-with-reason: from this time, RFC 3339 or epoch ms [default: 7 days ago]
        #[arg(long, value_parser = parse_time_arg)]
        since: Option<String>,
        /// Show what would be published where, and what the consumer would do with it now;
        /// write nothing
        #[arg(long)]
        dry_run: bool,
        /// Why (written to ops_audit)
        #[arg(long)]
        reason: Option<String>,
        /// Enable actions for this run (otherwise environment.allow_actions decides)
        #[arg(long)]
        allow_actions: bool,
        #[arg(long)]
        json: bool,
    },
    /// Release a stale lock: compare-and-delete of the exact value you saw
    ///
    /// On every node (idemguard locks); refused when the owner is alive unless --force --reason.
    /// Audited in ops_audit.
    /// Exit 0 done, 4 refused, 5 the lock changed hands (nothing deleted), 1 error
    ReleaseLock {
        /// The lock key, e.g. lock:order:2026112914054212300000abcdef
        key: String,
        /// The exact value seen (repeat it for each RedLock node's value)
        #[arg(long = "expect-value", value_name = "VALUE", required = true)]
        expect_values: Vec<String>,
        /// Release although the owner has a heartbeat (needs --reason)
        #[arg(long, requires = "reason")]
        force: bool,
        /// Why (written to ops_audit)
        #[arg(long)]
        reason: Option<String>,
        /// Then raise fence:{key} so the old holder's writes are refused by the database
        #[arg(long)]
        bump_fence: bool,
        /// Enable actions for this run (otherwise environment.allow_actions decides)
        #[arg(long)]
        allow_actions: bool,
        #[arg(long)]
        json: bool,
    },
    /// Post-incident report of an order or a window (Markdown, HTML or JSON)
    ///
    /// Each affected order's cross-layer timeline, which layer stopped each duplicate, every
    /// duplicate that got through, operator actions, rates. Exit 0, or 6 when a duplicate got
    /// through or a record contradicts the orders
    Report {
        /// One orderNo, requestId or eventId
        #[arg(long, conflicts_with_all = ["since", "until"], required_unless_present = "since")]
        id: Option<String>,
        /// Window start: RFC 3339 (2026-11-29T14:00:00Z) or epoch ms
        #[arg(long, value_parser = parse_time_arg, requires = "until")]
        since: Option<String>,
        /// Window end (exclusive)
        #[arg(long, value_parser = parse_time_arg, requires = "since")]
        until: Option<String>,
        /// markdown, html (one self-contained page: the swimlanes of each order) or json
        #[arg(long, value_enum, default_value = "markdown")]
        format: ReportOutput,
        /// The same as --format json
        #[arg(long, conflicts_with = "format")]
        json: bool,
        /// Write to this file instead of stdout
        #[arg(long, short = 'o', visible_alias = "out", value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Delete what is past its retention, once (for a cron)
    ///
    /// `serve` and `consume` also do it every retention.interval: finished idempotency records past
    /// their expiry, published outbox rows
    /// older than retention.outbox_sent, processed_event rows past the dedup TTL. Batches of
    /// retention.batch rows; prints how many rows went from each table
    Purge {
        #[arg(long)]
        json: bool,
    },
    /// Finalize a stuck PROCESSING record (SUCCEEDED or FAILED, as the orders say)
    ///
    /// SUCCEEDED with the API's response when the order exists; FAILED (422 request-abandoned: the
    /// client must send a new key) when it does not
    /// and the owner gave up or is dead past its lease; refused otherwise. Locks the record row
    /// (as the create routine does) so a create in flight is waited for (at most 5 s) and seen.
    /// A conditional update on status and version; audited in ops_audit. Exit codes as release-lock
    Finalize {
        /// The requestId (Idempotency-Key)
        request_id: String,
        /// The record version you saw (idemguard stuck); nothing is written if it changed
        #[arg(long, value_name = "V")]
        expect_version: Option<i64>,
        /// Why (written to ops_audit and into a FAILED response)
        #[arg(long)]
        reason: Option<String>,
        /// Enable actions for this run (otherwise environment.allow_actions decides)
        #[arg(long)]
        allow_actions: bool,
        #[arg(long)]
        json: bool,
    },
}

/// `--since` and `--until`: RFC 3339 or epoch ms, checked as the command line is read, so a
/// malformed time is a usage error (exit 2) like any other. Kept as written: the command parses it
/// again into its window.
fn parse_time_arg(s: &str) -> Result<String, String> {
    idemguard::console::report::parse_time(s).map(|_| s.to_string())
}

/// `console --view`: a view's name, as the console's `:` commands spell it.
fn parse_view(s: &str) -> Result<idemguard::console::tui::keymap::View, String> {
    idemguard::console::tui::keymap::View::named(s)
}

/// `--dlq PARTITION:OFFSET`.
fn parse_dlq_position(s: &str) -> Result<(i32, i64), String> {
    let (p, o) = s.split_once(':').ok_or_else(|| {
        format!("`{s}`: give PARTITION:OFFSET, e.g. 0:42 (idemguard dlq lists them)")
    })?;
    let p = p.parse().map_err(|e| format!("partition `{p}`: {e}"))?;
    let o = o.parse().map_err(|e| format!("offset `{o}`: {e}"))?;
    Ok((p, o))
}
