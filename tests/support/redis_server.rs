//! A private redis-server process on a free loopback port, for tests and benchmarks that must
//! stop a node (the shared stack nodes are never stopped) or must not disturb other users.
//! Killed (SIGKILL) and reaped when dropped.
#![allow(dead_code)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    /// Start one; panics with a hint when redis-server is missing or never answers.
    pub fn start() -> RedisServer {
        let mut last_error = String::new();
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free loopback port").port();
            let dir = tempfile::tempdir().expect("temp dir for redis-server");
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start redis-server ({e}); install it: scripts/stack up"));
            let mut server = RedisServer { port, child: Some(child), _dir: dir };
            match server.wait_ready(Duration::from_secs(5)) {
                Ok(()) => return server,
                Err(e) => last_error = e, // port taken between bind and start: try another one
            }
        }
        panic!("redis-server did not come up on a free port: {last_error}");
    }

    fn wait_ready(&mut self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        let client = redis::Client::open(self.url()).map_err(|e| e.to_string())?;
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                return Err(format!("redis-server on port {} exited: {status}", self.port));
            }
            if let Ok(mut c) = client.get_connection_with_timeout(Duration::from_millis(200)) {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(format!("redis-server on port {} did not answer PING within {within:?}", self.port));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// SIGKILL, then reap: the node is gone the way a crashed one is.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
