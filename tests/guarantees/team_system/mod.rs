//! A team's own system: its tables, lock patterns, topics and logs read under its source
//! profile, and each assumption of `profile suggest` broken.
mod console;
mod db;
mod first_contact;
mod redis_kafka_logs;
mod trace;
