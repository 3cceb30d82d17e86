//! A private `redis-server` on a free loopback port, for the `redis-down` scenario (the storm
//! kills it mid-run) and for the tests and benches that must stop a node. The shared stack's
//! Redis is never stopped — other users depend on it. Killed (SIGKILL) and reaped when dropped.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct PrivateRedis {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
}

impl PrivateRedis {
    /// Starts one (up to 5 tries on fresh ports) and waits for PING.
    pub fn start() -> anyhow::Result<PrivateRedis> {
        let mut last = String::new();
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            let dir = std::env::temp_dir().join(format!(
                "idemguard-storm-redis-{port}-{}",
                std::process::id()
            ));
            std::fs::create_dir_all(&dir)?;
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(&dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| anyhow::anyhow!("cannot start redis-server ({e}); the redis-down scenario needs it on PATH (scripts/stack up installs it)"))?;
            let mut server = PrivateRedis {
                port,
                child: Some(child),
                dir,
            };
            match server.wait_ready(Duration::from_secs(5)) {
                Ok(()) => return Ok(server),
                Err(e) => last = e,
            }
        }
        anyhow::bail!("a private redis-server did not come up on a free loopback port: {last}")
    }

    fn wait_ready(&mut self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        let client = redis::Client::open(self.url()).map_err(|e| e.to_string())?;
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(format!(
                    "redis-server on port {} exited: {status}",
                    self.port
                ));
            }
            if let Ok(mut c) = client.get_connection_with_timeout(Duration::from_millis(200)) {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "redis-server on port {} did not answer PING within {within:?}",
                    self.port
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:{port}`, as error messages name a node.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// SIGKILL and reap: gone the way a crashed node is.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
