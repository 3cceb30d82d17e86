//! What each `idemguard` subcommand does, apart from the entry (main.rs): the flags
//! themselves (args.rs), the operator's reads (inspect.rs).

pub(crate) mod args;
pub(crate) mod inspect;
