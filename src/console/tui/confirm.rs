//! The confirmation popup of the console's actions: what exactly will run (key, the holder value
//! seen, PTTL, the SQL `WHERE`), and — for bulk actions and production environments — the phrase
//! the operator must type. Built from the rows on screen — the lock layer's [`LockView`], the
//! same value the executor re-reads and compares — so what is confirmed is what was seen.

use crate::config::{Dialect, LockMode};

use crate::console::format::age;
use crate::console::read::records::StuckRecord;
use crate::lock::LockView;
use crate::ops::{self, Action, ActionOutcome, TeamRecord};

/// One action of a confirmed batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// Which lock nodes it goes to: the main Redis or the RedLock nodes (the Locks view lists
    /// both).
    pub scope: LockMode,
    pub action: Action,
}

/// The popup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirm {
    pub title: String,
    pub planned: Vec<Planned>,
    /// The exact effect, line by line.
    pub lines: Vec<String>,
    /// Typed before Enter is accepted: bulk actions and production environments.
    pub phrase: Option<String>,
    /// A live owner's lock is in the batch: a reason is required (it is forced).
    pub needs_reason: bool,
    /// What the operator typed: the phrase (if any), then the reason.
    pub typed: String,
}

impl Confirm {
    /// The reason part of what was typed (after the phrase).
    pub fn reason(&self) -> Option<String> {
        let rest = match &self.phrase {
            Some(p) => self.typed.strip_prefix(p.as_str()).unwrap_or(""),
            None => self.typed.as_str(),
        };
        let r = rest.trim();
        (!r.is_empty()).then(|| r.to_string())
    }

    /// None when Enter may run the batch; otherwise what is still missing.
    pub fn missing(&self) -> Option<String> {
        if let Some(p) = &self.phrase {
            if !self.typed.starts_with(p.as_str()) {
                return Some(format!("type `{p}` to confirm"));
            }
        }
        if self.needs_reason && self.reason().is_none() {
            return Some(match &self.phrase {
                Some(p) => format!(
                    "after `{p}`, type the reason: a live owner's lock is released only by force"
                ),
                None => "type the reason: a live owner's lock is released only by force".into(),
            });
        }
        None
    }

    /// The batch with the typed reason filled in.
    pub fn confirmed(&self) -> Vec<Planned> {
        let reason = self.reason();
        self.planned
            .iter()
            .cloned()
            .map(|mut p| {
                match &mut p.action {
                    Action::ReleaseLock { reason: r, .. }
                    | Action::Finalize { reason: r, .. }
                    | Action::Redrive { reason: r, .. } => *r = reason.clone(),
                }
                p
            })
            .collect()
    }
}

fn phrase(verb: &str, n: usize, env: &str, production: bool) -> Option<String> {
    (n > 1 || production).then(|| format!("{verb} {n} in {env}"))
}

/// The owner line of a lock idemguard did not write: what its format names, never a liveness.
fn foreign_owner(row: &LockView) -> String {
    use crate::lock::formats::LockFormat;
    match &row.format {
        LockFormat::Redisson {
            client_id,
            thread_id,
            count,
            ..
        } => format!(
            "Redisson client {client_id} thread {thread_id} (count {count}), liveness unknown — forced"
        ),
        LockFormat::Token { token, .. } => {
            format!("token {token}, owner and liveness unknown — forced")
        }
        _ => match row.other_type() {
            Some(t) => format!("none: a {t} key, not an idemguard lock — will be refused"),
            None => "undecodable value, owner unknown — forced".into(),
        },
    }
}

/// Release the given lock rows (the selection or the tagged rows).
pub fn release(rows: &[&LockView], now_ms: i64, env: &str, production: bool) -> Confirm {
    let mut lines = Vec::new();
    let mut planned = Vec::new();
    let mut needs_reason = false;
    for row in rows {
        // Released without force only when the owner is proven dead (no heartbeat).
        let live = row.owner_alive != Some(false);
        needs_reason |= live;
        let pttl = row.pttl_now(now_ms);
        let owner = match (row.holder(), row.owner_alive) {
            (Some(h), Some(true)) => format!("{} ALIVE (heartbeat) — forced", h.instance),
            (Some(h), Some(false)) => format!("{} dead (no heartbeat)", h.instance),
            (Some(h), None) => format!("{} liveness unknown — forced", h.instance),
            (None, _) => foreign_owner(row),
        };
        let action = ops::release_of(row, live, true, None);
        lines.push(format!(
            "{} [{}] owner {owner} · PTTL {} · fence {}",
            row.key,
            row.scope,
            if pttl < 0 {
                "none (no TTL)".into()
            } else {
                age(pttl)
            },
            row.holder()
                .map(|h| h.fence.to_string())
                .unwrap_or_else(|| "?".into())
        ));
        let effect = action.effect_seen(None, Some(row));
        lines.extend(effect.into_iter().map(|l| format!("  {l}")));
        planned.push(Planned {
            scope: row.scope,
            action,
        });
    }
    Confirm {
        title: format!(" Release {} lock(s) ", rows.len()),
        planned,
        lines,
        phrase: phrase("release", rows.len(), env, production),
        needs_reason,
        typed: String::new(),
    }
}

/// Where a finalize writes: the dialect of idemguard's own statement, or the team's record.
#[derive(Debug, Clone, Copy)]
pub struct FinalizeIn<'a> {
    pub dialect: Dialect,
    /// The profile's foreign record (its status codes, its version column), when it maps one.
    pub team: Option<&'a TeamRecord>,
}

/// What a foreign record becomes, in the team's codes (the response code is the HTTP answer
/// stored with it; no owner to check: the team's system keeps none).
fn team_expected(r: &StuckRecord, team: &TeamRecord) -> String {
    let s = &team.status_column;
    if r.order_exists {
        format!(
            "order {} exists in the team's order table → SUCCEEDED: {s} = {} (the team's code), response_code 200",
            r.found_order_no.as_deref().unwrap_or("?"),
            team.succeeded
        )
    } else {
        format!(
            "no order in the team's order table → FAILED: {s} = {} (the team's code), response_code 422 request-abandoned (the client must send a new key)",
            team.failed
        )
    }
}

/// Finalize the given stuck records.
pub fn finalize(
    rows: &[&StuckRecord],
    how: FinalizeIn<'_>,
    env: &str,
    production: bool,
) -> Confirm {
    let mut lines = Vec::new();
    let mut planned = Vec::new();
    for r in rows {
        let team = how.team.filter(|_| r.foreign);
        let expected = if let Some(team) = team {
            team_expected(r, team)
        } else if r.order_exists {
            format!(
                "order {} exists → SUCCEEDED 201 with the API's response",
                r.found_order_no.as_deref().unwrap_or("?")
            )
        } else {
            match r.owner_alive {
                Some(false) => format!("no order, owner {} dead → FAILED 422 request-abandoned (client must send a new key)", r.owner),
                Some(true) => format!("no order, owner {} ALIVE → will be refused", r.owner),
                None => format!("no order, owner {} liveness unknown → decided when run", r.owner),
            }
        };
        let action = Action::Finalize {
            request_id: r.request_id.clone(),
            expect_version: r.version,
            reason: None,
        };
        lines.push(format!(
            "{} (version {}): {expected}",
            r.request_id,
            crate::console::read::records::or_unknown(r.version)
        ));
        if r.foreign {
            lines.push(format!(
                "  reconcile with the team's order table, then one conditional update to the team's status code (only if still PROCESSING as seen); {}",
                crate::ops::UNFENCED
            ));
        }
        let effect = match team {
            Some(team) => team.effect(&r.request_id, r.version),
            None => action
                .effect(Some(how.dialect))
                .into_iter()
                .skip(1)
                .collect(),
        };
        lines.extend(effect.into_iter().map(|l| format!("  {l}")));
        planned.push(Planned {
            scope: LockMode::Single,
            action,
        });
    }
    Confirm {
        title: format!(" Finalize {} record(s) ", rows.len()),
        planned,
        lines,
        phrase: phrase("finalize", rows.len(), env, production),
        needs_reason: false,
        typed: String::new(),
    }
}

/// Redrive the given DLQ messages: per message, where it goes and what the consumer would do
/// with it now (the verdict the view shows), then the exact effect.
pub fn redrive(
    rows: &[&crate::console::read::dlq::DlqMessage],
    dlq_topic: &str,
    env: &str,
    production: bool,
) -> Confirm {
    use crate::console::read::dlq::Verdict;
    let mut lines = Vec::new();
    let mut planned = Vec::new();
    for m in rows {
        let action = Action::redrive(dlq_topic, m.partition, m.offset, None);
        let to = m
            .source
            .as_ref()
            .map_or("an unknown source: will be refused".into(), |s| {
                format!("{} partition {}", s.topic, s.partition)
            });
        let expected = match &m.verdict {
            Verdict::WouldApply => {
                "the consumer applies it once (order → PAID, points, notification)".into()
            }
            Verdict::AlreadyApplied { how } => format!("changes nothing: {how}"),
            Verdict::WouldBeRejected { status } => {
                format!("recorded as rejected: the order is {status}")
            }
            Verdict::StillPoison { reason, .. } => {
                format!("still poison ({reason}): back in the DLQ once, never again")
            }
            Verdict::NotLookedUp { why } => format!("not known: {why}"),
        };
        lines.push(format!(
            "{} {}@{} → {to}: {expected}",
            dlq_topic, m.partition, m.offset
        ));
        if m.redriven.is_some() || m.returned_from.is_some() {
            lines.push("  already redriven: will be refused".into());
        }
        planned.push(Planned {
            scope: LockMode::Single,
            action,
        });
    }
    if let Some(p) = planned.first() {
        lines.extend(
            p.action
                .effect(None)
                .into_iter()
                .skip(1)
                .map(|l| format!("  {l}")),
        );
    }
    Confirm {
        title: format!(" Redrive {} DLQ message(s) ", rows.len()),
        planned,
        lines,
        phrase: phrase("redrive", rows.len(), env, production),
        needs_reason: false,
        typed: String::new(),
    }
}

/// The result of one action of a batch, shown next to its row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowResult {
    pub outcome: ActionOutcome,
    pub detail: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contracts::LockHolder;

    fn holder() -> LockHolder {
        LockHolder {
            instance: "i1".into(),
            host: "h".into(),
            pid: 1,
            acquired_at: 0,
            ttl_ms: 30_000,
            fence: 4,
            nonce: "n".into(),
        }
    }

    fn row_with_fence(key: &str, alive: Option<bool>, fence_counter: Option<i64>) -> LockView {
        let node = LockView::held_on("127.0.0.1:6379", holder().to_value(), 12_000);
        let mut view = LockView::new(key.into(), LockMode::Single, vec![node], fence_counter, 0);
        let live: std::collections::BTreeSet<String> = if alive == Some(true) {
            ["i1".to_string()].into()
        } else {
            Default::default()
        };
        view.judge_owner(alive.map(|_| &live));
        view
    }

    fn row(key: &str, alive: Option<bool>) -> LockView {
        row_with_fence(key, alive, Some(4))
    }

    #[test]
    fn without_a_fence_counter_the_popup_does_not_promise_the_old_holder_is_refused() {
        let promise = "so the old holder's writes are refused";
        let counted = release(&[&row("lock:order:1", Some(false))], 0, "local", false);
        assert!(
            counted.lines.iter().any(|l| l.contains(promise)),
            "{:?}",
            counted.lines
        );
        let missing = row_with_fence("lock:order:1", Some(false), None);
        let c = release(&[&missing], 0, "local", false);
        assert!(
            !c.lines.iter().any(|l| l.contains(promise)),
            "{:?}",
            c.lines
        );
        assert!(
            c.lines
                .iter()
                .any(|l| l.contains("missing") && l.contains("NOT known to be refused")),
            "says what the bump does: {:?}",
            c.lines
        );
    }

    /// Before the operator confirms the release of a lock idemguard did not
    /// write, the popup says how it is released and what cannot be guaranteed — and promises
    /// no fence bump.
    #[test]
    fn a_foreign_lock_popup_says_what_cannot_be_guaranteed_before_confirming() {
        let token = "3f2b8c1e-5d4a-4e7b-9c2d-1a2b3c4d5e6f";
        let node = LockView::held_on("127.0.0.1:6379", token.into(), 12_000);
        let mut view = LockView::new("order:lock:7".into(), LockMode::Single, vec![node], None, 0);
        view.format = crate::lock::formats::decode(
            "string",
            Some(token),
            &[],
            &crate::lock::formats::Decoder::ALL,
        );
        view.judge_owner(None);
        let c = release(&[&view], 0, "local", false);
        let has = |needle: &str| c.lines.iter().any(|l| l.contains(needle));
        assert!(
            has("FOREIGN LOCK — a plain token: compare-and-delete of the value seen"),
            "{:?}",
            c.lines
        );
        assert!(
            has("NOT guaranteed: there is no fence token to bump"),
            "{:?}",
            c.lines
        );
        assert!(
            has("NOT guaranteed: there is no owner heartbeat"),
            "{:?}",
            c.lines
        );
        assert!(
            !has("so the old holder's writes are refused"),
            "no fence promise on a foreign lock: {:?}",
            c.lines
        );
        assert!(has(token), "the value compared is shown: {:?}", c.lines);
    }

    #[test]
    fn a_foreign_record_is_finalized_to_the_teams_own_codes() {
        let team = TeamRecord {
            table: "idempotency_record".into(),
            status_column: "status".into(),
            processing: "0".into(),
            succeeded: "1".into(),
            failed: "2".into(),
            version: None,
        };
        let record = |order: Option<&str>| StuckRecord {
            request_id: "req-1".into(),
            order_no: None,
            owner: String::new(),
            owner_alive: None,
            fence: None,
            created_at: 0,
            updated_at: None,
            lease_until: None,
            replay_count: None,
            version: None,
            order_exists: order.is_some(),
            order_status: None,
            found_order_no: order.map(String::from),
            foreign: true,
        };
        let how = FinalizeIn {
            dialect: Dialect::Mysql,
            team: Some(&team),
        };
        let paid = record(Some("O1"));
        let text = finalize(&[&paid], how, "shop", false).lines.join("\n");
        assert!(
            text.contains("SUCCEEDED: status = 1 (the team's code), response_code 200"),
            "{text}"
        );
        assert!(!text.contains("201"), "{text}");
        assert!(text.contains("no version column"), "{text}");
        assert!(text.contains("cannot be fenced"), "{text}");
        let abandoned = record(None);
        let text = finalize(&[&abandoned], how, "shop", false).lines.join("\n");
        assert!(text.contains("FAILED: status = 2"), "{text}");
        let versioned = TeamRecord {
            version: Some("version".into()),
            ..team.clone()
        };
        let seen = StuckRecord {
            version: Some(3),
            ..paid
        };
        let how = FinalizeIn {
            team: Some(&versioned),
            ..how
        };
        let text = finalize(&[&seen], how, "shop", false).lines.join("\n");
        assert!(text.contains("version = version + 1"), "{text}");
        assert!(text.contains("AND version = 3"), "{text}");
    }

    #[test]
    fn one_release_outside_production_needs_no_phrase() {
        let r = row("lock:order:1", Some(false));
        let c = release(&[&r], 0, "local", false);
        assert_eq!(
            (c.phrase.clone(), c.needs_reason, c.missing()),
            (None, false, None)
        );
        assert!(
            c.lines.iter().any(|l| l.contains(r.value())),
            "the exact value is shown: {:?}",
            c.lines
        );
        assert!(
            c.lines.iter().any(|l| l.contains("PTTL 12")),
            "{:?}",
            c.lines
        );
    }

    #[test]
    fn production_and_bulk_need_the_phrase_and_force_needs_a_reason() {
        let (a, b) = (
            row("lock:order:1", Some(false)),
            row("lock:order:2", Some(true)),
        );
        let mut c = release(&[&a], 0, "prod-eu", true);
        assert_eq!(
            c.phrase.as_deref(),
            Some("release 1 in prod-eu"),
            "production: even one action"
        );
        c.typed = "release 1 in prod".into();
        assert!(c.missing().is_some());
        c.typed = "release 1 in prod-eu".into();
        assert_eq!(c.missing(), None);

        let mut c = release(&[&a, &b], 0, "local", false);
        assert_eq!(c.phrase.as_deref(), Some("release 2 in local"), "bulk");
        assert!(c.needs_reason, "the live owner's lock is forced");
        c.typed = "release 2 in local".into();
        assert!(c.missing().unwrap().contains("reason"));
        c.typed = "release 2 in local  holder wedged".into();
        assert_eq!(c.missing(), None);
        let batch = c.confirmed();
        assert!(batch.iter().all(|p| matches!(&p.action, Action::ReleaseLock { reason: Some(r), bump_fence: true, .. } if r == "holder wedged")));
        assert!(matches!(
            &batch[1].action,
            Action::ReleaseLock { force: true, .. }
        ));
        assert!(matches!(
            &batch[0].action,
            Action::ReleaseLock { force: false, .. }
        ));
    }
}
