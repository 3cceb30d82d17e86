//! Release a stale lock: a compare-and-delete of the exact value(s) the operator saw, on every
//! node; whose lock it is, is judged from the value stored in Redis, never from the value typed.

use super::{json, Action, ActionOutcome, ActionResult, Actions};
use crate::contracts::{keys, LockHolder};
use crate::lock::LockView;

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
        if !key.starts_with("lock:") {
            return self
                .refuse(
                    action,
                    None,
                    format!("{key} is not a lock key (lock:*); the console releases only locks"),
                )
                .await;
        }
        if expect.is_empty() {
            return self.refuse(action, None, "no --expect-value given: a release deletes only the exact value you saw (idemguard locks shows it)".into()).await;
        }
        let view = self.locks.inspect(key).await;
        let before = Some(json(&view));
        if !self.allowed {
            return self.refuse(action, before, self.read_only_hint()).await;
        }
        if force && reason.is_none_or(|r| r.trim().is_empty()) {
            return self
                .refuse(
                    action,
                    before,
                    "--force needs --reason: say why a live owner's lock is released".into(),
                )
                .await;
        }
        // Only what is stored counts (issue 15: a value typed with a dead instance and the live
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

        let mut deleted = Vec::new();
        let mut now_held: Option<String> = None;
        let mut errors = Vec::new();
        for v in &values {
            match self.locks.release_if_value(key, v).await {
                Ok(report) => {
                    for (node, r) in &report.nodes {
                        match r {
                            crate::lock::NodeRelease::Deleted => deleted.push(node.clone()),
                            crate::lock::NodeRelease::Unreachable { error } => {
                                errors.push(format!("{node}: {error}"))
                            }
                            _ => {}
                        }
                    }
                    if now_held.is_none() {
                        now_held = report.current().map(str::to_string);
                    }
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        deleted.sort();
        deleted.dedup();
        let mut fence_note = String::new();
        let mut fence_failed = false;
        if bump_fence && !deleted.is_empty() {
            match self.locks.bump_fence(key).await {
                Ok(f) => {
                    fence_note = format!(
                        "; {} raised to {f}: the old holder's writes are refused",
                        keys::fence(key)
                    )
                }
                Err(e) => {
                    fence_failed = true;
                    errors.push(format!(
                        "fence bump failed: {e} — the old holder's writes are NOT refused"
                    ));
                }
            }
        }
        let after_view = self.locks.inspect(key).await;
        let after = Some(json(&after_view));
        let (outcome, mut detail) = if !deleted.is_empty() {
            (
                ActionOutcome::Done,
                format!(
                    "deleted on {} node(s): {}{fence_note}",
                    deleted.len(),
                    deleted.join(", ")
                ),
            )
        } else if let Some(cur) = now_held {
            let who = LockHolder::from_value(&cur).map_or(format!("value {cur:?}"), |h| {
                format!("{} (fence {})", h.instance, h.fence)
            });
            (ActionOutcome::Changed, format!("the lock changed hands since it was displayed: now held by {who}; nothing was deleted"))
        } else if !errors.is_empty() {
            (
                ActionOutcome::Error,
                "no node could be asked; nothing was deleted".to_string(),
            )
        } else {
            (ActionOutcome::Changed, "the lock is gone (it expired or was released since it was displayed); nothing was deleted".to_string())
        };
        // A fence asked for and not raised leaves the zombie holder able to write: not success
        // (exit 1), although the lock itself is gone.
        let outcome = if fence_failed {
            ActionOutcome::Error
        } else {
            outcome
        };
        if !errors.is_empty() {
            if outcome == ActionOutcome::Done || fence_failed {
                detail.push_str("; PARTIAL");
            }
            detail.push_str(&format!(
                "; errors: {} (scripts/stack status)",
                errors.join("; ")
            ));
        }
        self.finish(action, id, outcome, before, after, detail)
            .await
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
        if let Some(kind) = view.other_type() {
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
        let detail = match view.holder() {
            _ if stored.is_empty() => "the lock is gone (it expired or was released since it was displayed); nothing was deleted".to_string(),
            Some(h) => format!("the lock changed hands since it was displayed, or the value given was never its: it is held by {} (fence {}); nothing was deleted", h.instance, h.fence),
            None => format!("the lock changed hands since it was displayed, or the value given was never its: it holds {:?}; nothing was deleted", stored[0]),
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
