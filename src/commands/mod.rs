//! What each `idemguard` subcommand does, apart from the entry (main.rs): the flags
//! themselves (args.rs), the operator's reads (inspect.rs) and actions (act.rs, redrive.rs).

pub(crate) mod act;
pub(crate) mod args;
pub(crate) mod inspect;
pub(crate) mod redrive;
