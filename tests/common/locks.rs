//! What the lock tests share (`console_actions`, `lock_hardening`, `cluster`): an instance of
//! the test's own and the lock layer that takes locks as it, so a holder named in a listing or
//! an audit row is always one this test created.

use idemguard::config::Config;
use idemguard::contracts::Instance;
use idemguard::lock::Locks;
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
