//! `idemguard demo`: a live duplicate-order incident on the local stack, opened in the console.
//!
//! It migrates the configured database, starts the order service and two consumers as child
//! processes of this binary, and drives the seed's 23:07 incident at them: a customer who
//! clicks five times, gateway retries, ordinary orders, payment callbacks repeated by the
//! provider, payment events redelivered by the broker. Then two processes really die: an order
//! service aborts mid-request (its idempotency record stays PROCESSING, owner dead), and a lock
//! holder is SIGKILLed (its lock stays, owner dead). The console opens on all of it with actions
//! enabled under a DEMO environment; quitting it stops every process the demo started.
//! `--no-tui` waits for both incidents to be visible instead, prints what to look at, and stops.

use std::process::Stdio;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::config::Config;
use crate::contracts::{keys, Instance, RequestId};
use crate::db::orders::Orders;
use crate::db::{migrate, Database};
use crate::storm::client::StormClient;
use crate::trace::Tracer;

/// The SKU the demo sells.
pub const DEMO_SKU: i64 = 2307;

/// What the demo left for the operator to find.
#[derive(Debug, Clone, Serialize)]
pub struct DemoState {
    /// The order the customer clicked five times.
    pub clicked_five_times: String,
    pub clicked_request_id: String,
    /// The request whose service died mid-request: PROCESSING, owner dead.
    pub stuck_request_id: String,
    /// The lock whose holder was SIGKILLed.
    pub dead_lock_key: String,
    /// The order whose payment event arrived before it: refused as poison (order unknown),
    /// in the DLQ, valid since the order was created — a redrive applies it once.
    pub late_event_order: String,
    pub late_event_id: String,
    pub service: String,
    /// The consumer group of this run's consumers (its own, started at the payment topic's end).
    pub consumer_group: String,
    /// Process ids the demo started (all stopped when it ends).
    pub pids: Vec<u32>,
}

/// Shows a step on the spinner (a terminal) and in the log (anything else).
fn step(bar: &ProgressBar, what: &'static str) {
    bar.set_message(what);
    tracing::info!(step = what, "demo");
}

/// The demo's processes; every one is killed when this is dropped.
struct Children {
    procs: Vec<(String, Child)>,
}

impl Children {
    /// SIGINT to every child at once (the service finishes in-flight requests, consumers their
    /// batch and commit), then a shared 10 s for all of them before the stragglers are killed:
    /// one slow child never makes the others wait behind it.
    async fn stop(&mut self) {
        for (_, child) in &self.procs {
            if let Some(pid) = child.id() {
                let _ = std::process::Command::new("kill")
                    .args(["-INT", &pid.to_string()])
                    .status();
            }
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        for (name, child) in &mut self.procs {
            if tokio::time::timeout_at(deadline, child.wait())
                .await
                .is_err()
            {
                eprintln!("idemguard demo: {name} did not stop within 10s; killing it");
                let _ = child.kill().await;
            }
        }
        self.procs.clear();
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for (_, child) in &mut self.procs {
            let _ = child.start_kill();
        }
    }
}

fn idemguard(
    config_file: Option<&std::path::Path>,
    args: &[&str],
    env: &[(&str, String)],
) -> anyhow::Result<Command> {
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    if let Some(f) = config_file {
        cmd.arg("--config").arg(f);
    }
    cmd.args(args)
        .envs(env.iter().map(|(k, v)| (k.to_string(), v.clone())))
        .stdin(Stdio::null())
        .kill_on_drop(true);
    Ok(cmd)
}

/// Starts `idemguard serve` on a free port; returns the child and its base URL.
async fn start_service(
    config_file: Option<&std::path::Path>,
    env: &[(&str, String)],
    extra: &[&str],
) -> anyhow::Result<(Child, String)> {
    let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let mut child = idemguard(config_file, &args, env)?
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .map_err(|_| anyhow::anyhow!("the order service did not start within 30s"))??
        .ok_or_else(|| {
            anyhow::anyhow!("the order service exited at start (run `idemguard doctor`)")
        })?;
    let base = line.rsplit(' ').next().unwrap_or_default().to_string();
    anyhow::ensure!(
        base.starts_with("http://"),
        "unexpected first line from the order service: {line}"
    );
    Ok((child, base))
}

/// Runs the demo. `config_file` is passed on to the child processes; `env` are extra
/// IDEMGUARD_* settings for them (the demo's environment name, the stuck threshold).
///
/// The story in order: steps 1–4 are [`sale`] and [`pay_orders`], steps 6 and 7
/// [`leave_stuck_request`] and [`leave_dead_lock`] (each kills what it starts); the children that
/// live until the end are owned here, where they are stopped on the way out.
pub async fn run(
    mut config: Config,
    config_file: Option<std::path::PathBuf>,
    tui: bool,
) -> anyhow::Result<DemoState> {
    let bar = ProgressBar::new_spinner();
    bar.enable_steady_tick(Duration::from_millis(120));
    step(&bar, "making the consumers' group of this run");
    config.kafka.consumer_group = consumer_group_of_this_run(&config).await?;
    let env = demo_settings(&mut config);
    let cf = config_file.as_deref();

    step(&bar, "migrating the database");
    let db = Database::connect(&config).await?;
    migrate::migrate(&db).await?;
    let orders = Orders::new(db.clone(), Tracer::log_only(&Instance::current()));
    orders
        .set_stock(DEMO_SKU, 500)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;

    let mut children = Children { procs: Vec::new() };
    step(&bar, "starting the order service and two consumers");
    let (service, base) = start_service(cf, &env, &[]).await?;
    children.procs.push(("order service".into(), service));
    for n in 1..=2 {
        let c = idemguard(cf, &["consume"], &env)?
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        children.procs.push((format!("consumer {n}"), c));
    }

    let client = StormClient::new(base.clone(), bar.clone())?;
    let (clicked, clicked_order, paid) = sale(&bar, &client).await?;
    pay_orders(&bar, &client, &paid).await;

    // 5. The broker redelivers: copies of the first payment events.
    step(&bar, "the broker redelivers payment events");
    redeliver(&config, 10).await?;

    // 6. A service dies mid-request: its record stays PROCESSING and its owner goes silent.
    step(&bar, "an order service dies mid-request");
    let stuck = leave_stuck_request(cf, &env).await?;

    // 7. A lock holder is killed: its lock stays (no watchdog, long TTL) with a dead owner.
    step(&bar, "a lock holder is killed");
    let dead_lock = leave_dead_lock(cf, &env, &clicked_order).await?;

    // 8. A payment event arrives before its order: the DLQ holds it, then the order is created.
    step(&bar, "a payment event arrives before its order");
    let (late_order, late_event) = late_payment(&config, &orders).await?;

    let state = DemoState {
        late_event_order: late_order,
        late_event_id: late_event,
        clicked_five_times: clicked_order,
        clicked_request_id: clicked,
        stuck_request_id: stuck,
        dead_lock_key: dead_lock,
        service: base,
        consumer_group: config.kafka.consumer_group.clone(),
        pids: children.procs.iter().filter_map(|(_, c)| c.id()).collect(),
    };
    bar.finish_and_clear();

    let result = if tui {
        eprintln!("idemguard demo: opening the console (actions enabled). Quit with q; everything the demo started stops with it.");
        crate::console::tui::terminal::run_with(config, true)
            .await
            .map(|_| state)
    } else {
        wait_until_visible(&config, &state).await.map(|_| state)
    };
    children.stop().await;
    result
}

/// The demo's settings, in `config` and as the IDEMGUARD_* settings of its child processes.
fn demo_settings(config: &mut Config) -> Vec<(&'static str, String)> {
    let env: Vec<(&str, String)> = vec![
        ("IDEMGUARD_ENVIRONMENT__NAME", "demo".into()),
        ("IDEMGUARD_ENVIRONMENT__COLOR", "magenta".into()),
        ("IDEMGUARD_LOG", "error".into()),
        (
            "IDEMGUARD_KAFKA__CONSUMER_GROUP",
            config.kafka.consumer_group.clone(),
        ),
    ];
    config.environment.name = "demo".into();
    config.environment.color = "magenta".into();
    config.environment.allow_actions = true;
    // A record is "stuck" once its owner's heartbeat has run out, not after a minute.
    config.console.stuck_threshold = config.instance.heartbeat_ttl;
    env
}

/// Step 6: a service started to die after its request lock, and one request to it: the
/// request's record stays PROCESSING and its owner goes silent. Returns the request's ID.
async fn leave_stuck_request(
    cf: Option<&std::path::Path>,
    env: &[(&str, String)],
) -> anyhow::Result<String> {
    let stuck = RequestId::generate("APP", "ORDER").to_string();
    let (mut doomed, doomed_base) = start_service(cf, env, &["--crash-after-request-lock"]).await?;
    let doomed_client = StormClient::new(doomed_base, ProgressBar::hidden())?;
    let _ = doomed_client
        .order(&stuck, 2399, DEMO_SKU, 1, Some(Duration::from_secs(5)))
        .await;
    let _ = tokio::time::timeout(Duration::from_secs(5), doomed.wait()).await;
    Ok(stuck)
}

/// Step 7: a lock holder on `order`'s lock killed (no watchdog, long TTL): the lock stays with a
/// dead owner. Returns the lock's key.
async fn leave_dead_lock(
    cf: Option<&std::path::Path>,
    env: &[(&str, String)],
    order: &str,
) -> anyhow::Result<String> {
    let dead_lock = keys::order_lock(order);
    let ttl = "30m";
    let mut holder = idemguard(
        cf,
        &["lock-hold", &dead_lock, "--ttl", ttl, "--no-watchdog"],
        env,
    )?
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()?;
    let mut lines = BufReader::new(holder.stdout.take().expect("piped")).lines();
    let held = tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await;
    if !matches!(&held, Ok(Ok(Some(l))) if l.contains("\"held\":true")) {
        anyhow::bail!("the lock holder did not take {dead_lock}: {held:?}");
    }
    holder.start_kill()?; // SIGKILL: no release, no goodbye
    let _ = holder.wait().await;
    Ok(dead_lock)
}

/// Steps 1–3 of the story: the customer's five clicks, the gateway's retries, the rest of the
/// sale. Returns the clicked request, its order and every order to pay (order, request).
async fn sale(
    bar: &ProgressBar,
    client: &StormClient,
) -> anyhow::Result<(String, String, Vec<(String, String)>)> {
    // 1. 23:07 — a customer clicks "pay" five times at once: one order.
    step(bar, "a customer clicks five times");
    let clicked = RequestId::generate("APP", "ORDER").to_string();
    let clicks = (0..5).map(|_| client.order(&clicked, 2307, DEMO_SKU, 1, None));
    let replies = futures::future::join_all(clicks).await;
    let clicked_order = replies.iter().find_map(|r| r.order_no.clone());
    // Anyone who got a 409 comes back, as the app would, and gets the replay.
    let clicked_order = match clicked_order {
        Some(o) => o,
        None => client
            .order(&clicked, 2307, DEMO_SKU, 1, None)
            .await
            .order_no
            .ok_or_else(|| anyhow::anyhow!("the clicked order was not created"))?,
    };
    let _ = client.order(&clicked, 2307, DEMO_SKU, 1, None).await;

    // 2. Gateway retries: the first attempt times out at the gateway, the retry reuses the key.
    step(bar, "gateway retries");
    let mut paid: Vec<(String, String)> = vec![(clicked_order.clone(), clicked.clone())];
    for user in 0..20_i64 {
        let key = RequestId::generate("GW", "ORDER").to_string();
        let _ = client
            .order(
                &key,
                5000 + user,
                DEMO_SKU,
                1,
                Some(Duration::from_millis(2)),
            )
            .await;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = client.order(&key, 5000 + user, DEMO_SKU, 1, None).await;
            if let Some(o) = r.order_no {
                paid.push((o, key.clone()));
                break;
            }
            // 409: the first attempt is still running; anything else is the service failing.
            anyhow::ensure!(
                r.status == 409 && Instant::now() < deadline,
                "the order service answered {} to a retry; see `idemguard doctor`",
                r.status
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // 3. The rest of the sale.
    step(bar, "ordinary orders");
    for user in 0..40_i64 {
        let key = RequestId::generate("WEB", "ORDER").to_string();
        if let Some(o) = client
            .order(&key, 7000 + user, DEMO_SKU, 1, None)
            .await
            .order_no
        {
            paid.push((o, key));
        }
    }
    Ok((clicked, clicked_order, paid))
}

/// Step 4: the provider notifies every order; the clicked order's notice comes three times
/// (twice with one key, once with a new one).
async fn pay_orders(bar: &ProgressBar, client: &StormClient, paid: &[(String, String)]) {
    // 4. Payments: the provider notifies every order; the clicked order's notice comes three
    //    times (twice with one key, once with a new one).
    step(bar, "payment callbacks, some repeated by the provider");
    for (i, (order_no, _)) in paid.iter().enumerate() {
        let pay_no = format!("PAY-{order_no}");
        let key = RequestId::generate("PSP", "PAY").to_string();
        let _ = client.pay(&key, &pay_no, order_no, 1999).await;
        if i == 0 {
            let _ = client.pay(&key, &pay_no, order_no, 1999).await;
            let _ = client
                .pay(
                    &RequestId::generate("PSP", "PAY").to_string(),
                    &pay_no,
                    order_no,
                    1999,
                )
                .await;
        }
    }
}

/// Step 8: a payment event for an order that does not exist yet, published as the outbox
/// relay does; once a consumer has sent it to the DLQ (order unknown), the order is created:
/// the DLQ message is valid now. Returns the orderNo and the eventId.
async fn late_payment(config: &Config, orders: &Orders) -> anyhow::Result<(String, String)> {
    use crate::contracts::{headers, OrderNo, PaymentSucceeded};
    use rdkafka::message::{Header, OwnedHeaders};
    let order_no = OrderNo::generate();
    let request_id = RequestId::generate("APP", "ORDER");
    let event = PaymentSucceeded {
        event_id: uuid::Uuid::now_v7().to_string(),
        order_no: order_no.to_string(),
        request_id: request_id.to_string(),
        pay_no: format!("PAY-{order_no}"),
        user_id: 2399,
        amount: 1999,
        paid_at: crate::contracts::now_ms(),
    };
    let body = serde_json::to_vec(&event)?;
    let mut hs = OwnedHeaders::new();
    for (key, value) in [
        (headers::EVENT_ID, &event.event_id),
        (headers::REQUEST_ID, &event.request_id),
        (headers::ORDER_NO, &event.order_no),
    ] {
        hs = hs.insert(Header {
            key,
            value: Some(value.as_bytes()),
        });
    }
    let producer: FutureProducer = crate::kafka_client::producer_config(&config.kafka).create()?;
    let record = FutureRecord::to(&config.kafka.payment_topic)
        .key(&event.order_no)
        .payload(&body)
        .headers(hs);
    producer
        .send(record, Duration::from_secs(10))
        .await
        .map_err(|(e, _)| anyhow::anyhow!("publishing the late payment event: {e}"))?;
    until_dead_lettered(config, &event.event_id, event.paid_at - 60_000).await?;
    let new = crate::db::orders::NewOrder {
        request_id,
        order_no: order_no.clone(),
        user_id: 2399,
        sku_id: DEMO_SKU,
        quantity: 1,
        amount: 1999,
        fence: None,
    };
    orders
        .create(&new)
        .await
        .map_err(|e| anyhow::anyhow!("creating the late event's order: {e}"))?;
    Ok((event.order_no, event.event_id))
}

/// Waits (at most 30 s) until the DLQ view lists `event_id`: a consumer refused it as poison
/// (its order did not exist) and the broker took its DLQ copy.
async fn until_dead_lettered(config: &Config, event_id: &str, since_ms: i64) -> anyhow::Result<()> {
    use crate::console::read::{dlq::read_dlq, window::TimeWindow};
    let never = tokio_util::sync::CancellationToken::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let window = TimeWindow {
            from_ms: since_ms,
            to_ms: crate::contracts::now_ms() + 1,
        };
        let listing = read_dlq(config, window, &never).await?;
        if listing
            .messages
            .iter()
            .any(|m| m.event_id.as_deref() == Some(event_id))
        {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the consumers did not send the late payment event {event_id} to the DLQ within 30s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The demo's consumers form a group of their own, named for the run, whose offsets are first
/// committed at the payment topic's current end: the run reads its own events, not every earlier
/// run's. A group that other members just left can wait on the broker before it is given
/// partitions (tansu 0.6 was seen holding the configured group without an assignment for over
/// five minutes after a demo's two consumers left it), while the demo's story needs its
/// consumers at work at once.
async fn consumer_group_of_this_run(config: &Config) -> anyhow::Result<String> {
    let group = format!(
        "{}-demo-{}",
        config.kafka.consumer_group,
        uuid::Uuid::now_v7().simple()
    );
    let kafka = config.kafka.clone();
    let named = group.clone();
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let wait = Duration::from_secs(10);
        let c: BaseConsumer = crate::kafka_client::client_config(&kafka)
            .set("group.id", &named)
            .set("enable.auto.commit", "false")
            .create()?;
        let topic = kafka.payment_topic.as_str();
        let metadata = c.fetch_metadata(Some(topic), wait)?;
        let partitions = metadata
            .topics()
            .first()
            .map_or(0, |t| t.partitions().len());
        anyhow::ensure!(
            partitions > 0,
            "the payment topic {topic} has no partitions (run `idemguard doctor`)"
        );
        let mut ends = TopicPartitionList::new();
        for p in 0..partitions as i32 {
            let (_, high) = c.fetch_watermarks(topic, p, wait)?;
            ends.add_partition_offset(topic, p, Offset::Offset(high))?;
        }
        c.commit(&ends, CommitMode::Sync)?;
        Ok(())
    })
    .await?
    .map_err(|e| {
        anyhow::anyhow!("kafka: starting the demo's consumer group at the payment topic's end: {e}")
    })?;
    Ok(group)
}

/// Re-produces the first `n` payment events (an MQ replay).
async fn redeliver(config: &Config, n: usize) -> anyhow::Result<()> {
    let reader: BaseConsumer = crate::kafka_client::client_config(&config.kafka)
        .set(
            "group.id",
            format!("demo-replayer-{}", uuid::Uuid::new_v4()),
        )
        .create()?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..3 {
        tpl.add_partition_offset(&config.kafka.payment_topic, p, Offset::Beginning)?;
    }
    reader.assign(&tpl)?;
    let producer: FutureProducer = crate::kafka_client::producer_config(&config.kafka).create()?;
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut sent = 0;
    while sent < n && Instant::now() < deadline {
        let Some(Ok(m)) = reader.poll(Duration::from_millis(300)) else {
            continue;
        };
        let (Some(key), Some(payload)) = (m.key(), m.payload()) else {
            continue;
        };
        let mut copy = FutureRecord::to(&config.kafka.payment_topic)
            .key(key)
            .payload(payload);
        if let Some(h) = m.headers() {
            copy = copy.headers(h.detach());
        }
        producer
            .send(copy, Duration::from_secs(10))
            .await
            .map_err(|(e, _)| anyhow::anyhow!("redeliver: {e}"))?;
        sent += 1;
    }
    Ok(())
}

/// Headless: wait (at most 60 s) until the stuck record and the dead owner's lock are what the
/// console's headless twins report.
async fn wait_until_visible(config: &Config, state: &DemoState) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let stuck = serde_json::to_value(crate::console::cli::headless::stuck(config).await)?;
        let locks = serde_json::to_value(crate::console::cli::headless::locks(config).await)?;
        let stuck_seen = stuck["data"]["records"].as_array().is_some_and(|rs| {
            rs.iter().any(|r| {
                r["request_id"] == state.stuck_request_id.as_str() && r["owner_alive"] == false
            })
        });
        let lock_seen = locks["data"]["locks"].as_array().is_some_and(|ls| {
            ls.iter().any(|l| {
                l["key"] == state.dead_lock_key.as_str()
                    && l["flags"]
                        .as_array()
                        .is_some_and(|f| f.iter().any(|x| x == "dead_owner"))
            })
        });
        if stuck_seen && lock_seen {
            println!("{}", serde_json::to_string_pretty(state)?);
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!("the demo's incidents were not visible within 60s (stuck record: {stuck_seen}, dead-owner lock: {lock_seen})");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
