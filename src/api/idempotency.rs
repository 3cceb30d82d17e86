//! The idempotency record (seed §5.3): one row per Idempotency-Key, PROCESSING → SUCCEEDED /
//! FAILED, holding the first response so every retry gets it back byte for byte.
//!
//! The claim is atomic — never check-then-insert: the unique `request_id` insert decides who
//! processes a key; everyone else reads the record that won.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::contracts::now_ms;
use crate::db::orders::OrderRecord;
use crate::db::{is_unique_violation, Database};

pub const PROCESSING: &str = "PROCESSING";
pub const SUCCEEDED: &str = "SUCCEEDED";
pub const FAILED: &str = "FAILED";

/// A row of `idempotency_record`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct IdempotencyRecord {
    pub request_id: String,
    pub biz_type: String,
    pub request_hash: String,
    pub status: String,
    pub response_code: Option<i64>,
    pub response_body: Option<String>,
    pub order_no: Option<String>,
    pub owner: String,
    pub fence: i64,
    /// Epoch ms until which `owner` holds the record; 0 = the owner gave up (abandoned).
    pub lease_until: i64,
    pub replay_count: i64,
    pub created_at: i64,
    pub updated_at: i64,
    pub expire_at: i64,
    pub version: i64,
}

impl IdempotencyRecord {
    pub fn is_finished(&self) -> bool {
        self.status != PROCESSING
    }
    /// A finished record past its retention: its stored response may be stale (seed §6.4).
    pub fn is_expired(&self, now: i64) -> bool {
        self.is_finished() && self.expire_at < now
    }
    /// The owner gave up or its lease ran out. Whether a retry may take over also depends on
    /// the owner's heartbeat (see [`may_reclaim`]).
    pub fn lease_over(&self, now: i64) -> bool {
        self.lease_until == 0 || self.lease_until < now
    }
}

/// A PROCESSING record may be taken over when its owner abandoned it, or when its lease ran
/// out and its owner has no heartbeat. A live owner past its lease is still working (slow
/// database): taking over then would run the request twice at once.
pub fn may_reclaim(record: &IdempotencyRecord, now: i64, owner_alive: bool) -> bool {
    record.status == PROCESSING
        && (record.lease_until == 0 || (record.lease_until < now && !owner_alive))
}

/// SHA-256 of method + path + canonical body (JSON with sorted keys, no insignificant
/// whitespace): the same request written differently hashes the same; a different request
/// under the same key does not.
pub fn request_hash(method: &str, path: &str, body: &serde_json::Value) -> String {
    let mut h = Sha256::new();
    h.update(method.as_bytes());
    h.update(b"\n");
    h.update(path.as_bytes());
    h.update(b"\n");
    // serde_json's Map is ordered by key (no `preserve_order`), so this is canonical. Written
    // straight into the digest: the canonical text is never kept.
    serde_json::to_writer(Hashing(&mut h), body).expect("a JSON value serializes");
    hex::encode(h.finalize())
}

/// The digest as a writer, for [`request_hash`].
struct Hashing<'a>(&'a mut Sha256);

impl std::io::Write for Hashing<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The outcome of a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// We inserted the PROCESSING record: ours to process.
    New,
    /// The key already had a record.
    Existing(Box<IdempotencyRecord>),
}

pub struct ClaimRequest<'a> {
    pub request_id: &'a str,
    pub biz_type: &'a str,
    pub request_hash: &'a str,
    pub owner: &'a str,
    pub fence: i64,
    pub lease_ms: i64,
    pub retention_ms: i64,
}

pub async fn claim(db: &Database, r: &ClaimRequest<'_>) -> Result<Claim, sqlx::Error> {
    let now = now_ms();
    let inserted = sqlx::query(db.sql("api_idem_claim"))
        .bind(r.request_id)
        .bind(r.biz_type)
        .bind(r.request_hash)
        .bind(r.owner)
        .bind(r.fence)
        .bind(now + r.lease_ms)
        .bind(now)
        .bind(now)
        .bind(now + r.retention_ms)
        .execute(db)
        .await;
    let won = match inserted {
        Ok(res) => res.rows_affected() == 1,
        Err(e) if is_unique_violation(&e) => false,
        Err(e) => return Err(e),
    };
    if won {
        return Ok(Claim::New);
    }
    match get(db, r.request_id).await? {
        Some(rec) => Ok(Claim::Existing(Box::new(rec))),
        // Purged between our insert and our read: the next attempt will insert.
        None => Err(sqlx::Error::RowNotFound),
    }
}

pub async fn get(
    db: &Database,
    request_id: &str,
) -> Result<Option<IdempotencyRecord>, sqlx::Error> {
    sqlx::query_as::<_, IdempotencyRecord>(db.sql("api_idem_get"))
        .bind(request_id)
        .fetch_optional(db)
        .await
}

/// Take over a record we read at `version`; false when someone changed it meanwhile.
pub async fn reclaim(
    db: &Database,
    rec: &IdempotencyRecord,
    owner: &str,
    fence: i64,
    lease_ms: i64,
) -> Result<bool, sqlx::Error> {
    let now = now_ms();
    let n = sqlx::query(db.sql("api_idem_reclaim"))
        .bind(owner)
        .bind(fence)
        .bind(now + lease_ms)
        .bind(now)
        .bind(rec.request_id.as_str())
        .bind(rec.version)
        .execute(db)
        .await?
        .rows_affected();
    Ok(n == 1)
}

/// The final response of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinalResponse {
    /// SUCCEEDED, or FAILED for a business refusal (a retry must get the same refusal).
    pub status: &'static str,
    pub code: u16,
    pub body: String,
    pub order_no: Option<String>,
}

/// An order as the API shows it. Built only from the row, so the first response and a
/// read-back after a unique violation are the same bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OrderView {
    pub order_no: String,
    pub request_id: String,
    pub user_id: i64,
    pub sku_id: i64,
    pub quantity: i64,
    pub amount: i64,
    pub status: String,
    pub created_at: i64,
}

impl From<&OrderRecord> for OrderView {
    fn from(o: &OrderRecord) -> OrderView {
        OrderView {
            order_no: o.order_no.clone(),
            request_id: o.req_id.clone(),
            user_id: o.user_id,
            sku_id: o.sku_id,
            quantity: o.quantity,
            amount: o.amount,
            status: o.status.as_str().to_string(),
            created_at: o.created_at,
        }
    }
}

impl FinalResponse {
    /// The response of a created order: 201 with the order as the API shows it. The API answers
    /// it and an operator's finalize stores it, so a replay gives the same bytes either way.
    pub fn created(order: &OrderRecord) -> FinalResponse {
        FinalResponse {
            status: SUCCEEDED,
            code: 201,
            body: serde_json::to_string(&OrderView::from(order)).expect("an OrderView serializes"),
            order_no: Some(order.order_no.clone()),
        }
    }
}

/// The response a finished record holds, as an outcome to answer with (None while PROCESSING).
pub fn stored_response(rec: &IdempotencyRecord) -> Option<FinalResponse> {
    let status = match rec.status.as_str() {
        SUCCEEDED => SUCCEEDED,
        FAILED => FAILED,
        _ => return None,
    };
    Some(FinalResponse {
        status,
        code: u16::try_from(rec.response_code?).ok()?,
        body: rec.response_body.clone()?,
        order_no: rec.order_no.clone(),
    })
}

/// Store the outcome; false when we no longer own the record (an operator or a retry took it
/// over — the database layer gives both the same order, so the response is still right).
pub async fn finalize(
    db: &Database,
    request_id: &str,
    owner: &str,
    outcome: &FinalResponse,
    retention_ms: i64,
) -> Result<bool, sqlx::Error> {
    let now = now_ms();
    let n = sqlx::query(db.sql("api_idem_finalize"))
        .bind(outcome.status)
        .bind(i64::from(outcome.code))
        .bind(outcome.body.as_str())
        .bind(outcome.order_no.clone())
        .bind(now)
        .bind(now + retention_ms)
        .bind(request_id)
        .bind(owner)
        .execute(db)
        .await?
        .rows_affected();
    Ok(n == 1)
}

/// Give the record up after a failure whose outcome is unknown, so a retry (or an operator)
/// can resolve it at once instead of waiting for the lease — never a record that blocks forever.
pub async fn abandon(db: &Database, request_id: &str, owner: &str) -> Result<(), sqlx::Error> {
    sqlx::query(db.sql("api_idem_abandon"))
        .bind(now_ms())
        .bind(request_id)
        .bind(owner)
        .execute(db)
        .await?;
    Ok(())
}

/// Adds the replays a flush collected, (request id, how many) for each record, in one
/// transaction.
pub async fn count_replays(db: &Database, counts: &[(String, i64)]) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    for (request_id, n) in counts {
        sqlx::query(db.sql("api_idem_count_replay"))
            .bind(*n)
            .bind(request_id.as_str())
            .execute(&mut tx)
            .await?;
    }
    tx.commit().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_the_one_stored_records_hold() {
        // Records written before the canonical text was streamed into the digest hold this
        // value: SHA-256 of "POST\n/orders\n" + the canonical JSON.
        let body: serde_json::Value =
            serde_json::from_str(r#"{"userId":1,"skuId":2,"quantity":1,"amount":100}"#).unwrap();
        let text = r#"POST
/orders
{"amount":100,"quantity":1,"skuId":2,"userId":1}"#;
        assert_eq!(
            request_hash("POST", "/orders", &body),
            hex::encode(Sha256::digest(text.as_bytes()))
        );
    }

    #[test]
    fn hash_is_canonical_and_covers_method_path_body() {
        let a: serde_json::Value =
            serde_json::from_str(r#"{"userId":1,"skuId":2,"quantity":1,"amount":100}"#).unwrap();
        let b: serde_json::Value =
            serde_json::from_str(r#"{ "amount":100, "quantity":1, "skuId":2, "userId":1 }"#)
                .unwrap();
        let c: serde_json::Value =
            serde_json::from_str(r#"{"userId":1,"skuId":2,"quantity":2,"amount":100}"#).unwrap();
        assert_eq!(
            request_hash("POST", "/orders", &a),
            request_hash("POST", "/orders", &b)
        );
        assert_ne!(
            request_hash("POST", "/orders", &a),
            request_hash("POST", "/orders", &c)
        );
        assert_ne!(
            request_hash("POST", "/orders", &a),
            request_hash("POST", "/payments/callback", &a)
        );
        assert_eq!(request_hash("POST", "/orders", &a).len(), 64);
    }

    fn rec(status: &str, lease_until: i64) -> IdempotencyRecord {
        IdempotencyRecord {
            request_id: "r".into(),
            biz_type: "ORDER".into(),
            request_hash: "h".into(),
            status: status.into(),
            response_code: None,
            response_body: None,
            order_no: None,
            owner: "o".into(),
            fence: 0,
            lease_until,
            replay_count: 0,
            created_at: 0,
            updated_at: 0,
            expire_at: 100,
            version: 0,
        }
    }

    #[test]
    fn reclaim_rule() {
        assert!(
            !may_reclaim(&rec(PROCESSING, 1000), 500, false),
            "lease still running"
        );
        assert!(
            !may_reclaim(&rec(PROCESSING, 100), 500, true),
            "live owner past its lease is still working"
        );
        assert!(
            may_reclaim(&rec(PROCESSING, 100), 500, false),
            "dead owner, lease over"
        );
        assert!(may_reclaim(&rec(PROCESSING, 0), 500, true), "abandoned");
        assert!(
            !may_reclaim(&rec(SUCCEEDED, 0), 500, false),
            "finished records are replayed, not reclaimed"
        );
        assert!(rec(SUCCEEDED, 0).is_expired(101));
        assert!(!rec(PROCESSING, 0).is_expired(101));
    }
}
