//! What the lock tests share (`console_actions`, `console_faults`, `lock_attacks`, `cluster`):
//! an instance of the test's own and the lock layer that takes locks as it, so a holder named in
//! a listing or an audit row is always one this test created; the operator's actions on top.

use idemguard::config::Config;
use idemguard::contracts::Instance;
use idemguard::db::Database;
use idemguard::lock::Locks;
use idemguard::ops::Actions;
use idemguard::trace::Tracer;

use super::unique_suffix;

/// An instance `test-{tag}-{unique}` on host `testhost`.
pub fn instance(tag: &str) -> Instance {
    instance_in("test", tag)
}

/// An instance `{family}-{tag}-{unique}`: a test file whose listings are checked by the holder's
/// prefix (the cluster tests' `clu-`) names its own family.
pub fn instance_in(family: &str, tag: &str) -> Instance {
    Instance {
        id: format!("{family}-{tag}-{}", unique_suffix()),
        host: "testhost".into(),
        pid: 1,
    }
}

/// The lock layer of `config`, taking locks as `who` (trace events only logged).
pub fn locks_for(config: &Config, who: &Instance) -> Locks {
    Locks::from_config(config, who, Tracer::log_only(who)).expect("lock layer")
}

/// The console's actions on `config` and `db`, as an operator instance of the test's own;
/// `allow`: actions allowed (`--allow-actions`).
pub async fn actions_for(config: &Config, db: &Database, allow: bool) -> Actions {
    let me = instance("operator");
    Actions::new(
        config,
        db.clone(),
        locks_for(config, &me),
        Tracer::log_only(&me),
        allow,
    )
    .await
}
