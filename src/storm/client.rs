//! The storm's HTTP client: sends orders and payment callbacks to the service and records what
//! came back — status kind, latency, and which orderNo each response named (checked against the
//! database afterwards: every response for one key must name the same order).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde::Serialize;

/// How a response (or its absence) is counted in the summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplyKind {
    /// 201: this request created the order / booked the payment.
    Created,
    /// 200 without the replay header (a payment already booked, answered by the database).
    Ok,
    /// `Idempotent-Replayed: true`: the API layer answered from the stored first response.
    Replayed,
    /// 409 + Retry-After: the first request with this key was still running.
    InFlight,
    /// 422 idempotency-key-reused.
    KeyReused,
    /// 422 out-of-stock (a business refusal, not an error).
    OutOfStock,
    /// Any other 4xx.
    ClientError,
    /// 5xx.
    ServerError,
    /// The client gave up waiting (deliberate in gateway-retry).
    Timeout,
    /// Connection refused/reset.
    Transport,
}

impl ReplyKind {
    pub fn is_error(self) -> bool {
        matches!(
            self,
            ReplyKind::ClientError | ReplyKind::ServerError | ReplyKind::Transport
        )
    }
}

/// One answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub kind: ReplyKind,
    pub status: u16,
    pub order_no: Option<String>,
    pub retry_after: Option<u64>,
}

/// Everything the client saw, merged across tasks.
#[derive(Debug, Default)]
pub struct HttpLog {
    pub latencies_us: Vec<u64>,
    pub by_kind: BTreeMap<ReplyKind, u64>,
    /// requestId → every orderNo a 2xx order response named for it.
    pub orders_named: HashMap<String, BTreeSet<String>>,
    /// Every requestId answered 201 Created: each must have exactly one order.
    pub created: BTreeSet<String>,
    /// A few examples of errors, for the report.
    pub error_samples: Vec<String>,
}

#[derive(Clone)]
pub struct StormClient {
    http: reqwest::Client,
    base: String,
    log: Arc<Mutex<HttpLog>>,
    progress: ProgressBar,
    /// A gateway's retry window (see [`StormClient::patient`]); None: every answer is returned.
    patience: Option<Duration>,
}

impl StormClient {
    pub fn new(base: String, progress: ProgressBar) -> anyhow::Result<StormClient> {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(256)
            .timeout(Duration::from_secs(60))
            .no_proxy()
            .build()?;
        Ok(StormClient {
            http,
            base,
            log: Arc::new(Mutex::new(HttpLog::default())),
            progress,
            patience: None,
        })
    }

    /// The same client (and log) behind a gateway that retries with the same Idempotency-Key
    /// and body — after a connection error, a timeout, a 5xx or a 409 (its Retry-After capped
    /// at 100 ms) — until it gets another answer or `window` has passed. What a client of a
    /// service that is killed and restarted sees; each attempt is logged.
    pub fn patient(&self, window: Duration) -> StormClient {
        StormClient {
            patience: Some(window),
            ..self.clone()
        }
    }

    pub fn progress(&self) -> &ProgressBar {
        &self.progress
    }

    /// POST /orders with `key`; `timeout` is the gateway's patience (None: the client default).
    pub async fn order(
        &self,
        key: &str,
        user_id: i64,
        sku_id: i64,
        quantity: i64,
        timeout: Option<Duration>,
    ) -> Reply {
        let body = serde_json::json!({"userId": user_id, "skuId": sku_id, "quantity": quantity, "amount": 1999 * quantity});
        let reply = self.post("/orders", key, &body, timeout).await;
        let mut log = self.log.lock().expect("http log");
        if let (true, Some(o)) = (reply.status / 100 == 2, &reply.order_no) {
            log.orders_named
                .entry(key.to_string())
                .or_default()
                .insert(o.clone());
        }
        if reply.kind == ReplyKind::Created {
            log.created.insert(key.to_string());
        }
        drop(log);
        reply
    }

    /// POST /payments/callback with `key`.
    pub async fn pay(&self, key: &str, pay_no: &str, order_no: &str, amount: i64) -> Reply {
        let body = serde_json::json!({"payNo": pay_no, "orderNo": order_no, "amount": amount});
        self.post("/payments/callback", key, &body, None).await
    }

    async fn post(
        &self,
        path: &str,
        key: &str,
        body: &serde_json::Value,
        timeout: Option<Duration>,
    ) -> Reply {
        let Some(window) = self.patience else {
            return self.attempt(path, key, body, timeout).await;
        };
        let started = Instant::now();
        let mut pause = Duration::from_millis(20);
        loop {
            let reply = self.attempt(path, key, body, timeout).await;
            let again = matches!(
                reply.kind,
                ReplyKind::Transport
                    | ReplyKind::Timeout
                    | ReplyKind::ServerError
                    | ReplyKind::InFlight
            );
            if !again || started.elapsed() >= window {
                return reply;
            }
            let wait = match reply.retry_after {
                Some(s) if reply.kind == ReplyKind::InFlight => {
                    Duration::from_secs(s).min(Duration::from_millis(100))
                }
                _ => pause,
            };
            tokio::time::sleep(wait).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    /// One HTTP request, logged.
    async fn attempt(
        &self,
        path: &str,
        key: &str,
        body: &serde_json::Value,
        timeout: Option<Duration>,
    ) -> Reply {
        let started = Instant::now();
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .header("Idempotency-Key", key)
            .json(body);
        if let Some(t) = timeout {
            req = req.timeout(t);
        }
        let reply = match req.send().await {
            Ok(res) => {
                let status = res.status().as_u16();
                let replayed = res.headers().get("idempotent-replayed").is_some();
                let retry_after = res
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse().ok());
                let text = res.text().await.unwrap_or_default();
                let json: serde_json::Value =
                    serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
                let problem = json.get("type").and_then(|t| t.as_str()).unwrap_or("");
                let kind = match status {
                    _ if replayed => ReplyKind::Replayed,
                    201 => ReplyKind::Created,
                    200..=299 => ReplyKind::Ok,
                    409 => ReplyKind::InFlight,
                    422 if problem.ends_with("/idempotency-key-reused") => ReplyKind::KeyReused,
                    422 if problem.ends_with("/out-of-stock") => ReplyKind::OutOfStock,
                    400..=499 => ReplyKind::ClientError,
                    _ => ReplyKind::ServerError,
                };
                if kind.is_error() {
                    self.sample(format!(
                        "{path} {key}: {status} {}",
                        text.chars().take(200).collect::<String>()
                    ));
                }
                let order_no = json
                    .get("orderNo")
                    .and_then(|o| o.as_str())
                    .map(str::to_string);
                Reply {
                    kind,
                    status,
                    order_no,
                    retry_after,
                }
            }
            Err(e) if e.is_timeout() => Reply {
                kind: ReplyKind::Timeout,
                status: 0,
                order_no: None,
                retry_after: None,
            },
            Err(e) => {
                self.sample(format!("{path} {key}: {e}"));
                Reply {
                    kind: ReplyKind::Transport,
                    status: 0,
                    order_no: None,
                    retry_after: None,
                }
            }
        };
        {
            let mut log = self.log.lock().expect("http log");
            log.latencies_us.push(started.elapsed().as_micros() as u64);
            *log.by_kind.entry(reply.kind).or_insert(0) += 1;
        }
        self.progress.inc(1);
        reply
    }

    fn sample(&self, text: String) {
        let mut log = self.log.lock().expect("http log");
        if log.error_samples.len() < 10 {
            log.error_samples.push(text);
        }
    }

    /// What was seen so far.
    pub fn take_log(&self) -> HttpLog {
        std::mem::take(&mut *self.log.lock().expect("http log"))
    }
}
