//! The real `idemguard` binary as separate processes the chaos nemesis can kill: the order
//! service (`serve`) and a lock holder (`lock-hold`). A SIGKILL is what a crashed machine or an
//! OOM kill does — no release, no goodbye, no flush — which an in-process task cannot imitate
//! (its spawned connections and heartbeat would live on).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::config::{Config, CONTEXT_ENV};

/// The run's exact configuration in a private file (0600: it holds the database URL) for the
/// child processes; removed when dropped.
pub struct ChildConfig {
    path: PathBuf,
}

impl ChildConfig {
    pub fn write(config: &Config, run_id: &str) -> anyhow::Result<ChildConfig> {
        let path = std::env::temp_dir().join(format!("idemguard-storm-{run_id}.toml"));
        std::fs::write(&path, toml::to_string(config)?)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        }
        Ok(ChildConfig { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `binary --config FILE args…`, reading nothing else from the environment.
    pub fn command(&self, binary: &Path, args: &[&str]) -> Command {
        let mut c = Command::new(binary);
        c.arg("--config")
            .arg(&self.path)
            .args(args)
            .env_remove("IDEMGUARD_CONFIG")
            // The file is the configuration resolved: it has no contexts to choose from.
            .env_remove(CONTEXT_ENV)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        c
    }
}

impl Drop for ChildConfig {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Spawns `command` with stdout piped and returns its first line (bounded by `within`).
async fn spawn_until_line(
    mut command: Command,
    within: Duration,
) -> anyhow::Result<(Child, String)> {
    let mut child = command.stdout(Stdio::piped()).spawn()?;
    let stdout = child.stdout.take().expect("piped");
    let mut lines = BufReader::new(stdout).lines();
    match tokio::time::timeout(within, lines.next_line()).await {
        Ok(Ok(Some(line))) => Ok((child, line)),
        Ok(other) => {
            let status = child.wait().await?;
            anyhow::bail!("exited ({status}) before saying it was ready: {other:?}")
        }
        Err(_) => {
            let _ = child.kill().await;
            anyhow::bail!("not ready within {within:?}")
        }
    }
}

/// `idemguard serve` on a fixed loopback address (the storm client's), killed and restarted by
/// the nemesis.
pub struct ServiceProcess {
    binary: PathBuf,
    listen: String,
    child: Option<Child>,
}

impl ServiceProcess {
    /// Starts the service on `listen` and waits until it listens.
    pub async fn start(
        binary: &Path,
        config: &ChildConfig,
        listen: &str,
    ) -> anyhow::Result<ServiceProcess> {
        let mut service = ServiceProcess {
            binary: binary.to_path_buf(),
            listen: listen.to_string(),
            child: None,
        };
        service.restart(config).await?;
        Ok(service)
    }

    /// Starts it again (after [`ServiceProcess::kill`]); a port just freed may take a few tries.
    pub async fn restart(&mut self, config: &ChildConfig) -> anyhow::Result<()> {
        let mut last = None;
        for _ in 0..20 {
            let command = config.command(&self.binary, &["serve", "--listen", &self.listen]);
            match spawn_until_line(command, Duration::from_secs(30)).await {
                Ok((child, line)) if line.contains("listening on") => {
                    self.child = Some(child);
                    return Ok(());
                }
                Ok((mut child, line)) => {
                    let _ = child.kill().await;
                    last = Some(anyhow::anyhow!("said {line:?}"));
                }
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(last
            .unwrap_or_else(|| anyhow::anyhow!("no attempt"))
            .context(format!(
                "{} serve --listen {} did not start",
                self.binary.display(),
                self.listen
            )))
    }

    /// SIGKILL: requests in flight get a reset, their records stay PROCESSING under a dead
    /// owner, unpublished outbox rows wait for the next start.
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
    }

    /// Ctrl-C (SIGINT) and wait (bounded): the requests in flight finish, the outbox is published.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        let Some(mut c) = self.child.take() else {
            return Ok(());
        };
        if let Some(pid) = c.id() {
            signal(pid, "-INT");
        }
        match tokio::time::timeout(Duration::from_secs(30), c.wait()).await {
            Ok(status) => {
                let status = status?;
                anyhow::ensure!(
                    status.success(),
                    "{} serve exited with {status} on Ctrl-C",
                    self.binary.display()
                );
                Ok(())
            }
            Err(_) => {
                let _ = c.kill().await;
                anyhow::bail!(
                    "{} serve did not stop within 30s of Ctrl-C",
                    self.binary.display()
                )
            }
        }
    }
}

/// What `idemguard lock-hold` printed when it took the lock.
#[derive(Debug, serde::Deserialize)]
pub struct Held {
    pub held: bool,
    pub fence: i64,
}

/// Runs `idemguard lock-hold KEY --ttl TTL` (watchdog on) and waits until it holds the lock.
pub async fn hold_lock(
    binary: &Path,
    config: &ChildConfig,
    key: &str,
    ttl: Duration,
) -> anyhow::Result<(Child, Held)> {
    let ttl = format!("{}ms", ttl.as_millis());
    let command = config.command(binary, &["lock-hold", key, "--ttl", &ttl]);
    let (child, line) = spawn_until_line(command, Duration::from_secs(20))
        .await
        .map_err(|e| e.context(format!("lock-hold {key}")))?;
    let held: Held = serde_json::from_str(&line)
        .map_err(|e| anyhow::anyhow!("lock-hold {key} said {line:?}: {e}"))?;
    anyhow::ensure!(held.held, "lock-hold {key} did not get the lock: {line}");
    Ok((child, held))
}

pub fn signal(pid: u32, sig: &str) {
    let _ = std::process::Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .status();
}
