//! What each `idemguard` subcommand does, apart from the entry (main.rs): so far the flags
//! themselves (args.rs), read in one place apart from what the commands do.

pub(crate) mod args;
