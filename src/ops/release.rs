//! Release a stale lock: a compare-and-delete of the exact value(s) the operator saw, on every
//! node; whose lock it is, is judged from the value stored in Redis, never from the value typed.
//!
//! The steps, in order: [`Actions::release_target`] (what is stored, and may this operator
//! touch it), [`Actions::stored_targets`] (which of the given values are stored),
//! [`Actions::owner_not_proven_dead`], the audit row, [`Actions::delete_values`], the fence bump,
//! [`Deletion::conclusion`].

use super::{json, Action, ActionOutcome, ActionResult, Actions};
use crate::contracts::{keys, LockHolder};
use crate::lock::formats::{self, LockFormat};
use crate::lock::{LockView, NodeLockState, NodeRelease};

const GONE: &str =
    "the lock is gone (it expired or was released since it was displayed); nothing was deleted";

/// What the compare-and-deletes did, node by node.
#[derive(Default)]
struct Deletion {
    /// Nodes where a value was deleted (sorted, once each).
    deleted: Vec<String>,
    /// The value a node holds instead, when it held another one.
    now_held: Option<String>,
    errors: Vec<String>,
    /// `; fence:{key} raised to N …` when the bump ran; on a foreign lock, what a release of it
    /// cannot guarantee.
    fence_note: String,
    /// A bump was asked for and failed: the old holder's writes are NOT refused.
    fence_failed: bool,
}

/// The lock view's values, for an [`Action::ReleaseLock`] built from what is on screen.
pub fn release_of(
    view: &LockView,
    force: bool,
    bump_fence: bool,
    reason: Option<String>,
) -> Action {
    Action::ReleaseLock {
        key: view.key.clone(),
        expect_values: view.values().into_iter().map(str::to_string).collect(),
        force,
        bump_fence,
        reason,
    }
}

/// What the fence bump after a release does, given the lock as seen (None: not read). A counter
/// that is missing (expired, or never taken by idemguard) is seeded anew from the clock: nothing
/// shows that the old holder's token is below it, so the popup does not promise a refusal.
pub fn fence_step(key: &str, seen: Option<&LockView>) -> String {
    let fence = keys::fence(key);
    match seen {
        Some(view) if view.fence_counter.is_none() => format!(
            "then restart {fence}, which is missing (expired, or never taken by idemguard), from \
             the clock: the old holder's token cannot be compared with it, so its writes are NOT \
             known to be refused"
        ),
        _ => format!(
            "then raise {fence} past every token issued, so the old holder's writes are refused"
        ),
    }
}

/// What a release cannot guarantee on a lock idemguard did not write, said before the operator
/// confirms. Empty for idemguard's own locks.
pub fn foreign_caveats(seen: &LockView) -> Vec<String> {
    let how = match &seen.format {
        LockFormat::Idemguard => return Vec::new(),
        LockFormat::Redisson { .. } => {
            "a Redisson lock: deleted only while its hash holds exactly \
             the field and count seen, then Redisson's unlock message is published on \
             redisson_lock__channel so waiters wake"
                .to_string()
        }
        LockFormat::Token { .. } => "a plain token: compare-and-delete of the value seen".into(),
        LockFormat::Unknown => "an unknown format: it will be refused".into(),
    };
    vec![
        format!("FOREIGN LOCK — {how}"),
        "NOT guaranteed: there is no fence token to bump, so if its holder is still working it \
         keeps writing after the release (only its own checks stop it)"
            .into(),
        "NOT guaranteed: there is no owner heartbeat, so whether the holder is alive is unknown \
         (a Redisson watchdog or a client retry may take the lock again at once)"
            .into(),
    ]
}

impl Actions {
    pub(super) async fn release_lock(
        &self,
        action: &Action,
        key: &str,
        expect: &[String],
        force: bool,
        bump_fence: bool,
        reason: Option<&str>,
    ) -> ActionResult {
        let (view, before) = match self
            .release_target(action, key, expect, force, reason)
            .await
        {
            Ok(seen) => seen,
            Err(r) => return r,
        };
        // Only what is stored counts (a value typed with a dead instance and the live
        // holder's nonce got the live holder's lock deleted). The release deletes the stored
        // values equal, byte for byte, to a value the operator gave; their owners are judged
        // from those stored values.
        let values = match self.stored_targets(action, &view, expect, &before).await {
            Ok(values) => values,
            Err(r) => return r,
        };
        if !force {
            if let Some(why) = self.owner_not_proven_dead(&values).await {
                return self.refuse(action, before, why).await;
            }
        }
        let plan = format!(
            "compare-and-delete of {} value(s){}",
            values.len(),
            if bump_fence {
                ", then a fence bump"
            } else {
                ""
            }
        );
        let id = match self.begin(action, &before, &plan).await {
            Ok(id) => id,
            Err(r) => return r,
        };
        let mut deletion = self.delete_values(&view, &values).await;
        if view.format.is_foreign() {
            deletion.fence_note = foreign_caveats(&view)
                .iter()
                .skip(1)
                .map(|c| format!("; {c}"))
                .collect();
        } else if bump_fence && !deletion.deleted.is_empty() {
            self.bump_after_release(key, &mut deletion).await;
        }
        let after = Some(json(&self.locks.inspect(key).await));
        let (outcome, detail) = deletion.conclusion(expect);
        self.finish(action, id, outcome, before, after, detail)
            .await
    }

    /// The lock as stored now (and its JSON for the audit), once the request itself is
    /// acceptable: a lock key, the values seen, actions allowed, a reason for a force.
    async fn release_target(
        &self,
        action: &Action,
        key: &str,
        expect: &[String],
        force: bool,
        reason: Option<&str>,
    ) -> Result<(LockView, Option<String>), ActionResult> {
        let listed = self.lock_patterns.iter().any(|p| formats::matches(p, key));
        if !key.starts_with("lock:") && !listed {
            let why = format!(
                "{key} is not a lock key (lock:* or foreign_locks.patterns); the console releases \
                 only locks"
            );
            return Err(self.refuse(action, None, why).await);
        }
        if expect.is_empty() {
            let why = "no --expect-value given: a release deletes only the exact value you saw \
                       (idemguard locks shows it)";
            return Err(self.refuse(action, None, why.into()).await);
        }
        let view = self.locks.inspect(key).await;
        let before = Some(json(&view));
        if !self.allowed {
            return Err(self.refuse(action, before, self.read_only_hint()).await);
        }
        if force && reason.is_none_or(|r| r.trim().is_empty()) {
            let why = "--force needs --reason: say why a live owner's lock is released";
            return Err(self.refuse(action, before, why.into()).await);
        }
        Ok((view, before))
    }

    /// Compare-and-delete of each value on every node (a Redisson lock: its field and count).
    async fn delete_values(&self, view: &LockView, values: &[String]) -> Deletion {
        let key = view.key.as_str();
        let mut d = Deletion::default();
        for v in values {
            let released = match (&view.format, formats::parse_redisson_seen(v)) {
                (LockFormat::Redisson { .. }, Some((field, count))) => {
                    self.locks.release_redisson(key, field, count).await
                }
                _ => self.locks.release_if_value(key, v).await,
            };
            match released {
                Ok(report) => {
                    for (node, r) in &report.nodes {
                        match r {
                            NodeRelease::Deleted => d.deleted.push(node.clone()),
                            NodeRelease::Unreachable { error } => {
                                d.errors.push(format!("{node}: {error}"))
                            }
                            _ => {}
                        }
                    }
                    if d.now_held.is_none() {
                        d.now_held = report.current().map(str::to_string);
                    }
                }
                Err(e) => d.errors.push(e.to_string()),
            }
        }
        d.deleted.sort();
        d.deleted.dedup();
        d
    }

    /// Raise `fence:{key}` past every token issued, so the old holder's writes are refused.
    async fn bump_after_release(&self, key: &str, d: &mut Deletion) {
        match self.locks.bump_fence(key).await {
            Ok(f) => {
                d.fence_note = format!(
                    "; {} raised to {f}: the old holder's writes are refused",
                    keys::fence(key)
                )
            }
            Err(e) => {
                d.fence_failed = true;
                d.errors.push(format!(
                    "fence bump failed: {e} — the old holder's writes are NOT refused"
                ));
            }
        }
    }

    /// The stored values the release compares: those of `expect` some node holds exactly.
    /// None of them stored: the lock changed since it was seen (or cannot be read, or is not a
    /// string at all) — the result to return, nothing deleted.
    async fn stored_targets(
        &self,
        action: &Action,
        view: &LockView,
        expect: &[String],
        before: &Option<String>,
    ) -> Result<Vec<String>, ActionResult> {
        let stored = view.values();
        let mut targets: Vec<String> = Vec::new();
        for v in expect.iter().filter(|v| stored.contains(&v.as_str())) {
            if !targets.contains(v) {
                targets.push(v.clone());
            }
        }
        if !targets.is_empty() {
            return Ok(targets);
        }
        if let (Some(kind), false) = (view.other_type(), view.format.is_foreign()) {
            let why = format!("{} is a {kind}, not an idemguard lock (a Redisson lock is a hash); the console never deletes it", view.key);
            return Err(self.refuse(action, before.clone(), why).await);
        }
        let unreadable = view.unreachable();
        if stored.is_empty() && !unreadable.is_empty() {
            let detail = format!(
                "not performed: the lock could not be read ({}); nothing was deleted",
                unreadable.join("; ")
            );
            return Err(self.fail_unperformed(action, before.clone(), detail).await);
        }
        let detail = match (stored.first(), undecoded(view)) {
            (Some(raw), _) => not_matched(expect, view.holder(), raw),
            (None, Some(now)) => format!(
                "the lock changed since it was displayed: {} now holds {now}, which no decoder \
                 reads as a lock; nothing was deleted",
                view.key
            ),
            (None, None) => GONE.to_string(),
        };
        Err(self
            .changed_without_write(action, before.clone(), detail)
            .await)
    }
    /// Why the owners of these stored values may still be working (a release needs --force
    /// then), or None when every one is proven dead: an idemguard holder without a heartbeat.
    async fn owner_not_proven_dead(&self, stored: &[String]) -> Option<String> {
        let holders: Vec<LockHolder> = stored
            .iter()
            .filter_map(|v| LockHolder::from_value(v))
            .collect();
        if holders.len() < stored.len() {
            return Some("the value names no idemguard holder, so its owner cannot be proven dead; use --force --reason R".into());
        }
        let mut owners: Vec<String> = holders.into_iter().map(|h| h.instance).collect();
        owners.sort();
        owners.dedup();
        match self.locks.liveness().are_alive(&owners).await {
            Ok(alive) => owners.iter().zip(alive).find(|(_, a)| *a).map(|(owner, _)| {
                format!("owner {owner} has a heartbeat (alive): its lock is not stale; use --force --reason R to release it anyway")
            }),
            Err(e) => Some(format!("cannot tell whether the owner is alive ({e}); use --force --reason R to release anyway")),
        }
    }
}

impl Deletion {
    /// The outcome and the operator's line.
    fn conclusion(self, expect: &[String]) -> (ActionOutcome, String) {
        let (outcome, mut detail) = if !self.deleted.is_empty() {
            let nodes = self.deleted.join(", ");
            let n = self.deleted.len();
            (
                ActionOutcome::Done,
                format!("deleted on {n} node(s): {nodes}{}", self.fence_note),
            )
        } else if let Some(cur) = &self.now_held {
            let holder = LockHolder::from_value(cur);
            (
                ActionOutcome::Changed,
                not_matched(expect, holder.as_ref(), cur),
            )
        } else if !self.errors.is_empty() {
            let why = "no node could be asked; nothing was deleted".to_string();
            (ActionOutcome::Error, why)
        } else {
            (ActionOutcome::Changed, GONE.to_string())
        };
        // A fence asked for and not raised leaves the zombie holder able to write: not success
        // (exit 1), although the lock itself is gone.
        let outcome = if self.fence_failed {
            ActionOutcome::Error
        } else {
            outcome
        };
        if !self.errors.is_empty() {
            if outcome == ActionOutcome::Done || self.fence_failed {
                detail.push_str("; PARTIAL");
            }
            let errors = self.errors.join("; ");
            detail.push_str(&format!("; errors: {errors} (scripts/stack status)"));
        }
        (outcome, detail)
    }
}

/// What a key that is still there holds when no decoder reads it (a Redisson lock whose hash
/// gained a second field: another client's thread took it meanwhile): its type and, for a hash,
/// its first fields. `None`: the key holds a lock value, or nothing.
fn undecoded(view: &LockView) -> Option<String> {
    view.nodes.iter().find_map(|n| match &n.state {
        NodeLockState::Other {
            redis_type, fields, ..
        } if !fields.is_empty() => {
            let shown: Vec<String> = fields
                .iter()
                .take(3)
                .map(|(f, v)| format!("{f}={v}"))
                .collect();
            let more = if fields.len() > 3 { ", …" } else { "" };
            Some(format!(
                "a {redis_type} of {} field(s): {}{more}",
                fields.len(),
                shown.join(", ")
            ))
        }
        NodeLockState::Other { redis_type, .. } => Some(format!("a {redis_type}")),
        _ => None,
    })
}

/// Why the stored value is none of those given. "Changed hands" only when another instance
/// holds it: the same instance under another nonce (or fence) is a value that did not match —
/// re-acquired since it was displayed, or never stored as given.
fn not_matched(expect: &[String], stored: Option<&LockHolder>, raw: &str) -> String {
    let given: Vec<LockHolder> = expect
        .iter()
        .filter_map(|v| LockHolder::from_value(v))
        .collect();
    match stored {
        Some(h) if given.iter().any(|g| g.instance == h.instance) => {
            let seen: Vec<String> = given
                .iter()
                .filter(|g| g.instance == h.instance)
                .map(|g| format!("nonce {} (fence {})", g.nonce, g.fence))
                .collect();
            format!(
                "the value did not match: {} holds it with nonce {} (fence {}), the value given \
                 has {} — re-acquired since it was displayed, or never stored as given; nothing \
                 was deleted",
                h.instance,
                h.nonce,
                h.fence,
                seen.join(", ")
            )
        }
        Some(h) => format!(
            "the lock changed hands since it was displayed, or the value given was never its: it \
             is held by {} (fence {}); nothing was deleted",
            h.instance, h.fence
        ),
        None => format!("the value did not match: it holds {raw:?}; nothing was deleted"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(instance: &str, nonce: &str, fence: i64) -> LockHolder {
        LockHolder {
            instance: instance.into(),
            host: "h".into(),
            pid: 1,
            acquired_at: 0,
            ttl_ms: 30_000,
            fence,
            nonce: nonce.into(),
        }
    }

    #[test]
    fn a_wrong_nonce_of_the_same_instance_is_a_value_that_did_not_match() {
        let stored = holder("vm-1", "n-stored", 7);
        let given = vec![holder("vm-1", "n-typed", 7).to_value()];
        let why = not_matched(&given, Some(&stored), &stored.to_value());
        assert!(why.contains("did not match"), "{why}");
        assert!(
            !why.contains("changed hands"),
            "the same instance holds it: {why}"
        );
        assert!(why.contains("n-stored") && why.contains("n-typed"), "{why}");
    }

    #[test]
    fn another_instance_holding_it_changed_hands() {
        let stored = holder("vm-2", "n2", 8);
        let given = vec![holder("vm-1", "n1", 7).to_value()];
        let why = not_matched(&given, Some(&stored), &stored.to_value());
        assert!(
            why.contains("changed hands") && why.contains("vm-2"),
            "{why}"
        );
    }
}
