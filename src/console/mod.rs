//! The operations console: the on-call engineer's view of the three lines of defense, live.
//!
//! `idemguard console` opens a terminal UI on the **Overview** — what is wrong now, across the
//! three layers: duplicates that got through, stuck records, dead-owner and no-TTL locks, DLQ
//! messages, consumer lag (unknown only when the broker did not answer), each
//! interception's last minutes against its hour; Enter opens a line's view or trace — and five
//! views: **Trace** (one orderNo, requestId or eventId across every layer, oldest first, and for
//! every duplicate the layer that stopped it), **Locks** (every `lock:*` key, holder, PTTL, owner
//! liveness, RedLock quorum), **Rates** (interceptions per layer per minute, consumer lag),
//! **Stuck** (`PROCESSING` records past the threshold and what the business tables say) and
//! **Audit** (operator actions). `idemguard trace ID`, `locks`, `rates` and `stuck` print the
//! same data once, as a table or as JSON.
//!
//! How it is built (collection → store → widget, one direction), in four parts; the faces
//! depend on [`read`] and [`report`], these two on no face, and [`cli`] never on [`tui`]:
//! - [`read`]: the readers every face shares — the sources ([`read::sources`]), database
//!   records ([`read::records`], SQL under `queries/*/console_*.sql`), locks ([`read::locks`],
//!   `SCAN`, never `KEYS`), topics ([`read::topics`], assigned partitions, never a group join or
//!   a commit) and their bounded reads ([`read::bounded`]), the stores ([`read::store`]), the
//!   timeline ([`read::timeline`]), the one assembly of a trace ([`read::trace`]: the target
//!   is parsed once where it is typed and travels as a [`crate::contracts::TraceTarget`]) and
//!   what is wrong now ([`read::overview`]: the leak queries the report shares, and the
//!   Overview's findings, pure);
//! - [`tui`]: the collectors ([`tui::backend`], one tokio task per source sending typed updates
//!   over a bounded channel), the state owned by the UI task alone ([`tui::app`]: UI state,
//!   stores and the actions pane, each with one owner), every key and command, popups' included
//!   ([`tui::keymap`]), drawing, pure ([`tui::ui`]), and the `select!` loop that restores the
//!   terminal ([`tui::terminal`]);
//! - [`cli`]: the one-shot twins ([`cli::headless`], each printing a [`cli::headless::Document`]);
//! - [`report`]: the post-incident report (an [`report::IncidentReport`], as Markdown), below
//!   both faces: `idemguard report` and the TUI's `:report` call it.
//!
//! Actions ([`crate::ops`]): releasing a stale lock (`x` in Locks) and finalizing a stuck record
//! (`f` in Stuck) are values shown in a confirmation popup ([`tui::confirm`]) with their exact
//! effect, never run from a key handler; the executor task
//! ([`tui::backend::Backends::spawn_executor`]) runs them. They are off unless `--allow-actions`
//! or `environment.allow_actions`; every attempt is audited in `ops_audit` (the **Audit** view,
//! `:audit`) and traced as `operator_action`. Headless twins: `idemguard release-lock`,
//! `idemguard finalize`. The post-incident report: `idemguard report`, or `:report` for the
//! order on screen, written into `console.report_dir`.
//!
//! # JSON of the headless commands (`--json`)
//!
//! Every command prints one [`cli::headless::Document`] of schema `idemguard.console/v1` (the
//! envelope; `backends` are [`read::sources::BackendStatus`]es):
//!
//! ```text
//! {
//!   "schema": "idemguard.console/v1",
//!   "command": "trace" | "locks" | "rates" | "stuck",
//!   "environment": { "name": "local", "color": "green", "production": false },
//!   "generated_at": "2026-11-29T23:07:42.123Z", "generated_at_ms": 1795993662123,
//!   "ok": true,                      // every backend answered (trace: and the ID was found)
//!   "backends": [ { "name": "database" | "redis" | "trace topic" | "payment topic",
//!                   "target": "postgres://root@127.0.0.1:5432/idemguard", "ok": true,
//!                   "error": null, "latency_ms": 3.2 } ],
//!   "data": …                        // per command, below
//! }
//! ```
//!
//! `trace` — `data` is a [`read::timeline::Timeline`]:
//! `{ query, kind: "order_no"|"request_id"|"event_id", order_no, request_id, event_ids: [..],
//! found, entries: [ { at_ms (null = current state), layer: "api"|"lock"|"db"|"kafka"|"stream"|
//! "sink", source (table, Redis key, "payment.succeeded p1@17" or "trace"), summary,
//! stopped_by (layer, for a decision that stopped a duplicate), fields: { every column / field } } ],
//! interceptions: [ { at_ms, layer, outcome, detail, instance } ],
//! events: [ { event_id, kafka_copies, processed_rows, dedup_hits, points_rows,
//! notification_rows } ] }`.
//!
//! `locks` — `data` is a [`crate::lock::LockScan`] (each lock a [`crate::lock::LockView`], the
//! one lock model: the same JSON is an audited release's before/after): `{ locks: [ { key,
//! scope: "single"|"redlock",
//! type: "string" (every lock value) | "hash" (a Redisson lock) | …, value ("" unless a string),
//! holder: { instance, host, pid, acquired_at, ttl_ms, fence, nonce } | null, pttl_ms
//! (-1 = no TTL), read_at_ms, owner_alive: bool|null, fence_counter, flags: ["no_ttl",
//! "dead_owner", "undecodable", "no_quorum", "other_type", "held_long", "fair_lock_leftover"],
//! held: { since_ms, held_ms, since: "acquired_at"|"first_seen" } | null, nodes: [ { node, value, pttl_ms,
//! agrees, error? } ] (redlock, or a node that could not be read; `agrees`: same holder nonce as
//! the majority), quorum: { agreeing, nodes, reached } (redlock), format: { kind: "idemguard" |
//! "redisson" (client_id, thread_id, count, seen) | "token" (token, shape; request_id and
//! order_no when the token is a requestId the database knows) | "unknown" },
//! denied: [commands the Redis user may not run] (absent when none) } ], nodes: [ { node, role:
//! "main"|"redlock", ok, error, keys, scan_ms } ], live_instances: [..] | null, scan_ms,
//! read_at_ms, truncated (more than 1,000,000 keys on a node: the list is a prefix) }`.
//!
//! `rates` — `{ rates: { window_minutes: 60, first_minute_ms, events_seen, series: [ { layer,
//! outcome, label, per_minute: [60 counts, oldest first], total, last_minute } ] },
//! lag: [ { topic, partition, high_watermark, committed, lag } ], consumer_group }`.
//!
//! `stuck` — `{ threshold_ms, records: [ { request_id, order_no, owner, owner_alive: bool|null,
//! fence, created_at, updated_at, lease_until, replay_count, version, order_exists,
//! order_status, found_order_no } ] }`, oldest first.
//!
//! Values are as stored, byte for byte (JSON escapes them; the tables show them through
//! [`crate::untrusted::escape`]), except the fields `[mask]` names: the string `"[masked]"`
//! ([`crate::mask`]) in place of the value, whatever its type.
//!
//! Exit status: 0 all answered; 1 a backend failed (the document still has what was read);
//! 3 `trace` found no trace of the ID anywhere.

pub mod cli;
pub mod columns;
pub mod format;
pub mod read;
pub mod report;
pub mod tui;

pub use tui::terminal::run;
