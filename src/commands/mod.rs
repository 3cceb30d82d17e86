//! What each `idemguard` subcommand does, one concern a file, apart from the entry
//! (main.rs: parse, configure, dispatch): the flags themselves (args.rs), readying a system
//! (setup.rs), the two services (services.rs), the exercises against the stack
//! (exercise.rs), the operator's reads (inspect.rs) and actions (act.rs, redrive.rs). Each
//! is a thin shell over the library: the one-shot reads' documents, say, are built by the
//! library's console/cli/ and only printed here.

pub(crate) mod act;
pub(crate) mod args;
pub(crate) mod exercise;
pub(crate) mod inspect;
pub(crate) mod redrive;
pub(crate) mod services;
pub(crate) mod setup;
