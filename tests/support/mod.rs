//! The services and tools the tests drive as a person would: a browser, a terminal, the Java
//! Kafka client, a private Redis, the report page read back.
#![allow(dead_code)]

pub mod chromium;
pub mod java_kafka;
pub mod redis_server;
pub mod report_page;
pub mod tmux;
