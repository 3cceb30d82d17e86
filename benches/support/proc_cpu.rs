//! Where the machine's CPU went during a measured window, per process group, from
//! `/proc/<pid>/stat` (utime + stime) and `/proc/stat`: the cheapest honest answer to "what
//! saturates" on a VM where `perf` has no hardware counters.
//!
//! Groups: the service (this process), the load generator (its pid), the database server
//! (PostgreSQL: the postmaster's helpers and the backends connected to the bench's own
//! database, never other tests' backends; MariaDB: the whole `mariadbd`), `redis-server` on
//! 6379, the Kafka broker (Apache Kafka: the `java` process running `kafka.Kafka`), the five
//! RedLock nodes (`redis-server` on 6381-6385,
//! `redlock` only). "others" is the rest of the machine's busy time — other
//! helpers' compiles and tests on this shared machine.
#![allow(dead_code)]

use std::collections::HashMap;
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Group {
    Service,
    Client,
    Database,
    Redis,
    Kafka,
    /// The stack's five RedLock nodes (redis-server on 6381-6385).
    LockNodes,
}

pub const GROUPS: [Group; 5] = [
    Group::Service,
    Group::Client,
    Group::Database,
    Group::Redis,
    Group::Kafka,
];

impl Group {
    pub fn name(self) -> &'static str {
        match self {
            Group::Service => "service",
            Group::Client => "client",
            Group::Database => "db",
            Group::Redis => "redis",
            Group::Kafka => "kafka",
            Group::LockNodes => "lock nodes",
        }
    }
}

/// The database name of a database URL: the bench's own database, whose PostgreSQL backends
/// count as the database's CPU.
pub fn database_name(database_url: &str) -> String {
    url::Url::parse(database_url)
        .expect("database url")
        .path()
        .trim_start_matches('/')
        .to_string()
}

/// Which processes count for which group.
#[derive(Debug, Clone)]
pub struct Watch {
    pub client_pid: u32,
    /// The bench's own database name: PostgreSQL backends of other databases are not counted.
    pub database_name: String,
}

impl Watch {
    fn group(&self, pid: u32, comm: &str, cmdline: &str) -> Option<Group> {
        if pid == std::process::id() {
            return Some(Group::Service);
        }
        if pid == self.client_pid {
            return Some(Group::Client);
        }
        match comm {
            // A backend's title is "postgres: 15/main: user db 127.0.0.1(port) state".
            "postgres"
                if !cmdline.contains("127.0.0.1(") || cmdline.contains(&self.database_name) =>
            {
                Some(Group::Database)
            }
            "mariadbd" | "mysqld" => Some(Group::Database),
            "redis-server" if cmdline.contains(":6379") => Some(Group::Redis),
            "redis-server" if (6381..=6385).any(|p| cmdline.contains(&format!(":{p}"))) => {
                Some(Group::LockNodes)
            }
            "java" if is_kafka_broker(cmdline) => Some(Group::Kafka),
            _ => None,
        }
    }
}

/// Apache Kafka's broker: a JVM whose main class is `kafka.Kafka` (`cmdline` with its NULs
/// turned into spaces).
pub fn is_kafka_broker(cmdline: &str) -> bool {
    cmdline.split_whitespace().any(|arg| arg == "kafka.Kafka")
}

/// The pid of Apache Kafka's broker on this machine, if one runs.
pub fn kafka_broker_pid() -> Option<u32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let dir = entry.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != "java" {
            continue;
        }
        let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
        if is_kafka_broker(&String::from_utf8_lossy(&cmdline).replace('\0', " ")) {
            return Some(pid);
        }
    }
    None
}

/// CPU ticks per watched pid, and the machine's busy and total ticks.
pub struct Sample {
    at: Instant,
    per_pid: HashMap<u32, (Group, u64)>,
    machine_busy: u64,
    machine_total: u64,
}

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as f64
}

/// utime + stime of a pid, in ticks (fields 14 and 15; the command may contain spaces, so count
/// from the closing parenthesis).
fn pid_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

fn machine_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let cpu: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = cpu.iter().take(8).sum();
    let idle = cpu.get(3).copied().unwrap_or(0) + cpu.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

pub fn sample(watch: &Watch) -> Sample {
    let mut per_pid = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let dir = entry.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let Some(group) = watch.group(pid, comm.trim(), &cmdline) else {
            continue;
        };
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        if let Some(t) = pid_ticks(&stat) {
            per_pid.insert(pid, (group, t));
        }
    }
    let (machine_busy, machine_total) = machine_ticks();
    Sample {
        at: Instant::now(),
        per_pid,
        machine_busy,
        machine_total,
    }
}

/// CPU used between two samples, in cores (1.0 = one core busy for the whole window).
#[derive(Debug, Clone, Default)]
pub struct Usage {
    pub cores: HashMap<Group, f64>,
    pub others: f64,
    pub idle: f64,
    /// The window's length.
    pub secs: f64,
}

pub fn usage(before: &Sample, after: &Sample) -> Usage {
    let secs = after.at.duration_since(before.at).as_secs_f64().max(1e-9);
    let hz = ticks_per_second();
    let mut cores: HashMap<Group, f64> = HashMap::new();
    // Only pids alive at both ends: a process that started or ended inside the window is
    // counted in "others" (pool connections live for the whole bench).
    for (pid, (group, t1)) in &after.per_pid {
        if let Some((_, t0)) = before.per_pid.get(pid) {
            *cores.entry(*group).or_default() += t1.saturating_sub(*t0) as f64 / hz / secs;
        }
    }
    let total = (after.machine_total - before.machine_total) as f64;
    let busy = (after.machine_busy - before.machine_busy) as f64;
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let machine_busy = if total > 0.0 {
        busy / total * ncpu
    } else {
        0.0
    };
    let ours: f64 = cores.values().sum();
    Usage {
        others: (machine_busy - ours).max(0.0),
        idle: (ncpu - machine_busy).max(0.0),
        cores,
        secs,
    }
}

impl Usage {
    pub fn of(&self, g: Group) -> f64 {
        self.cores.get(&g).copied().unwrap_or(0.0)
    }

    /// "service 0.95 client 0.40 db 0.31 redis 0.05 kafka 0.02 others 0.20 idle 0.07" (cores).
    pub fn line(&self) -> String {
        let mut s: Vec<String> = GROUPS
            .iter()
            .map(|g| format!("{} {:.2}", g.name(), self.of(*g)))
            .collect();
        s.push(format!("others {:.2}", self.others));
        s.push(format!("idle {:.2}", self.idle));
        s.join(" ")
    }
}

/// [`usage`], also counting the processes that started inside the window (all their ticks are
/// the window's): a connection the pool opens mid-run and its PostgreSQL backend, which
/// [`usage`] leaves in "others". For benches whose pools grow while they are measured
/// (`stream_layer`: the consumer's concurrent sinks open connections as they need them).
pub fn usage_counting_new(before: &Sample, after: &Sample) -> Usage {
    let mut from = Sample {
        at: before.at,
        per_pid: before.per_pid.clone(),
        machine_busy: before.machine_busy,
        machine_total: before.machine_total,
    };
    for (pid, (group, _)) in &after.per_pid {
        from.per_pid.entry(*pid).or_insert((*group, 0));
    }
    usage(&from, after)
}
