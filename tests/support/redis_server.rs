//! The library's private redis-server ([`PrivateRedis`]) for tests and benches: started on a
//! free loopback port, killed (SIGKILL) and reaped when dropped; a failure to start panics with
//! the hint, as a test should.
#![allow(dead_code)]

use std::ops::{Deref, DerefMut};

use idemguard::storm::redis_server::PrivateRedis;

pub struct RedisServer(PrivateRedis);

impl RedisServer {
    pub fn start() -> RedisServer {
        RedisServer(PrivateRedis::start().unwrap_or_else(|e| panic!("{e:#}")))
    }

    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }
}

impl Deref for RedisServer {
    type Target = PrivateRedis;
    fn deref(&self) -> &PrivateRedis {
        &self.0
    }
}

impl DerefMut for RedisServer {
    fn deref_mut(&mut self) -> &mut PrivateRedis {
        &mut self.0
    }
}
