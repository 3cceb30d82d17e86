//! Switching context in the console: `:ctx NAME` until the new context's Overview shows with its
//! database answering, against opening a new console on that context (the baseline: what an
//! operator did before, quit and start again), in one run.
//!
//!     cargo bench --bench context_switch
//!
//! The real binary in tmux (100×30) on `config/contexts.toml`: the local stack's plaintext
//! services (`default`) and its TLS ones (`tls`, every connection verified). Each round opens
//! a console on one context and times its first Overview with the database ok (the baseline),
//! then switches back and forth `IDEMGUARD_BENCH_SWITCHES` times (default 10), timing each
//! switch the same way. Target: every switch < 2 s. The ratio to the open says what the switch
//! adds to opening the context afresh: closing the old context's collectors first. The screen is
//! read every 20 ms, so figures are ±20 ms.
//! Rounds: `IDEMGUARD_BENCH_ROUNDS` (default 3). Every target is on loopback; every wait is
//! bounded.

#[path = "support/stats.rs"]
mod stats;
#[path = "../tests/support/tmux.rs"]
mod tmux;

use stats::{knob, median, percentile};
use std::time::{Duration, Instant};

const CONTEXTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/contexts.toml");
const BOUND: Duration = Duration::from_secs(30);

/// Whether `screen` is the Overview of `context` with its database answering.
fn overview_of(screen: &str, context: &str) -> bool {
    let header = screen.lines().next().unwrap_or_default();
    header.contains(&format!("ctx {context} "))
        && screen.contains("database ok")
        && screen.contains("Overview — what is wrong now")
}

/// Polls `t`'s screen every 20 ms until `done`: the time it took from `from`.
fn until(t: &tmux::Terminal, from: Instant, what: &str, done: impl Fn(&str) -> bool) -> f64 {
    loop {
        if done(&t.screen()) {
            return from.elapsed().as_secs_f64() * 1000.0;
        }
        assert!(
            from.elapsed() < BOUND,
            "{what} did not show within {BOUND:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn main() {
    let rounds: usize = knob("IDEMGUARD_BENCH_ROUNDS", 3);
    let switches: usize = knob("IDEMGUARD_BENCH_SWITCHES", 10);
    let env: [(&str, &str); 0] = [];
    let (mut opens, mut moves) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let first = ["default", "tls"][round % 2];
        let started = Instant::now();
        let args = format!(" --config {CONTEXTS} --context {first}");
        let t = tmux::Terminal::console("igbctx", (100, 30), &env, &args);
        opens.push(until(&t, started, "the first Overview", |s| {
            overview_of(s, first)
        }));
        let mut at = first;
        for _ in 0..switches {
            let next = if at == "tls" { "default" } else { "tls" };
            t.keys(&[":"]);
            t.keys(&["-l", &format!("ctx {next}")]);
            let pressed = Instant::now();
            t.keys(&["Enter"]);
            moves.push(until(&t, pressed, "the switched Overview", |s| {
                overview_of(s, next)
            }));
            at = next;
        }
        t.quit_console(BOUND);
    }
    let (open, switch) = (median(&opens), median(&moves));
    println!("context switch, config/contexts.toml (default = plaintext stack, tls = TLS stack)");
    println!(
        "  open a console    n={:<3} median {open:7.0} ms  p99 {:7.0} ms",
        opens.len(),
        percentile(&opens, 0.99)
    );
    println!(
        "  :ctx switch       n={:<3} median {switch:7.0} ms  p99 {:7.0} ms  max {:7.0} ms",
        moves.len(),
        percentile(&moves, 0.99),
        percentile(&moves, 1.0)
    );
    println!(
        "  switch / open     {:.2}  (every switch < 2000 ms, the target: {})",
        switch / open,
        if percentile(&moves, 1.0) < 2000.0 {
            "yes"
        } else {
            "NO"
        }
    );
}
