//! What each `idemguard` subcommand does, one concern a file, apart from the entry
//! (main.rs: parse, configure, dispatch): the flags themselves (args.rs), readying a system
//! (setup.rs), the two services (services.rs), the exercises against the stack (exercise.rs),
//! the operator's reads (inspect.rs) and actions (act.rs, redrive.rs; both through the one
//! executor below). Each is a thin shell over the library: the one-shot reads' documents, say,
//! are built by the library's console/cli/ and only printed here — through stdout.rs, where a
//! reader that stops reading (`| head`) ends the command quietly.

pub(crate) mod act;
pub(crate) mod args;
pub(crate) mod exercise;
pub(crate) mod inspect;
pub(crate) mod redrive;
pub(crate) mod services;
pub(crate) mod setup;
pub(crate) mod stdout;

use idemguard::config::Config;
use idemguard::contracts::Instance;
use idemguard::db::Database;
use idemguard::lock::Locks;
use idemguard::ops::Actions;
use idemguard::trace::Tracer;

/// The executor every operator action runs through (the same the TUI uses), on the actions'
/// own database URL and Redis, with the tracer it writes to.
pub(crate) async fn action_executor(
    config: &Config,
    allow_actions: bool,
) -> anyhow::Result<(Actions, Tracer)> {
    let instance = Instance::current();
    let tracer = Tracer::from_config(config, &instance)?;
    let db = Database::connect_for_actions(config).await?;
    let locks = Locks::from_config(&config.for_actions(), &instance, tracer.clone())?;
    let actions = Actions::new(config, db, locks, tracer.clone(), allow_actions).await;
    Ok((actions, tracer))
}
