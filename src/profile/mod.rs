//! First contact with a team's system: the source profile read from the live systems instead of
//! written by hand ([`suggest`]), and the checks that keep a profile honest where the console
//! relies on it ([`crate::db::clock`]: the zone of wall-clock times; [`messages`]: how a topic
//! is partitioned). A profile that is wrong must be said, never answered with "not found".
//!
//! - [`schema`]: the database's tables, columns, unique keys, time kinds and status values;
//! - [`keys`]: a bounded SCAN of Redis, grouped into key patterns with their value shapes;
//! - [`messages`]: a bounded sample of a topic — where the IDs are, which partitioner agrees;
//! - [`loglines`]: the field names of the JSON log lines;
//! - [`render`]: the commented TOML; [`suggest`]: all of it, bounded in time and size.

pub mod keys;
pub mod loglines;
pub mod messages;
pub mod render;
pub mod schema;
pub mod suggest;
