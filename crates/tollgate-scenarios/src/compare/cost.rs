//! What a decision costs the store: CPU per 1 000 decisions and memory per key.
//!
//! - Redis: `INFO cpu` (`used_cpu_user` + `used_cpu_sys`, the whole server process) read on
//!   every node before and after the throughput run, and `MEMORY USAGE ... SAMPLES 0` (every
//!   element counted, not estimated) of each sampled key's Redis keys: the state hash, and for
//!   the sliding log its sorted set too. A cluster's nodes are the ones `CLUSTER NODES` lists,
//!   each checked to be on loopback before it is asked anything.
//! - Memory store: this process's CPU time (`/proc/self/stat`, user + system, so the load
//!   generator's own work is included) and its resident memory growth (`/proc/self/status`
//!   `VmRSS`) while a fresh store fills: what the keys really cost, allocator and table slack
//!   included. Both need Linux; elsewhere the columns say n/a.

use redis::aio::MultiplexedConnection;

use crate::ScenarioError;

/// Connections to every node of one Redis deployment.
pub(crate) struct Nodes {
    store: &'static str,
    nodes: Vec<(String, MultiplexedConnection)>,
}

impl Nodes {
    /// Every node behind `url` (`redis://` or `redis+cluster://`).
    pub(crate) async fn open(store: &'static str, url: &str, cluster: bool) -> Result<Nodes, ScenarioError> {
        let failed = |what: String| move |source| ScenarioError::RedisInfo { store, what, source };
        let first = if cluster {
            let rest = url.trim_start_matches("redis+cluster://");
            format!("redis://{}", rest.split(',').next().unwrap_or("").trim())
        } else {
            url.to_string()
        };
        let seed = connect(&first)
            .await
            .map_err(failed(format!("connect to {first}")))?;
        if !cluster {
            return Ok(Nodes {
                store,
                nodes: vec![(first, seed)],
            });
        }
        let mut seed = seed;
        let listing: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async(&mut seed)
            .await
            .map_err(failed("CLUSTER NODES".into()))?;
        let mut nodes = vec![];
        for line in listing.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(addr), Some(flags)) = (fields.get(1), fields.get(2)) else {
                continue;
            };
            if flags.contains("fail") || flags.contains("noaddr") || flags.contains("handshake") {
                continue;
            }
            // `ip:port@bus-port[,hostname]`
            let addr = addr.split(['@', ',']).next().unwrap_or("");
            let node_url = format!("redis://{addr}");
            crate::loopback::check_url("redis-cluster", &node_url, false)?;
            let conn = connect(&node_url)
                .await
                .map_err(failed(format!("connect to {node_url}")))?;
            nodes.push((node_url, conn));
        }
        Ok(Nodes { store, nodes })
    }

    /// How many nodes.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// CPU seconds (user + system) the Redis processes have used so far, summed over nodes.
    pub(crate) async fn cpu_seconds(&mut self) -> Result<f64, ScenarioError> {
        let mut total = 0.0;
        for (url, conn) in &mut self.nodes {
            let info: String = redis::cmd("INFO")
                .arg("cpu")
                .query_async(conn)
                .await
                .map_err(|source| ScenarioError::RedisInfo {
                    store: self.store,
                    what: format!("INFO cpu on {url}"),
                    source,
                })?;
            total += used_cpu(&info).ok_or_else(|| ScenarioError::BadReply {
                store: self.store,
                what: format!("INFO cpu on {url} has no used_cpu_user/used_cpu_sys: {info}"),
            })?;
        }
        Ok(total)
    }

    /// `MEMORY USAGE name SAMPLES 0`, asked of the node that holds `name` (the others answer
    /// MOVED); 0 when no node has it.
    pub(crate) async fn memory_usage(&mut self, name: &[u8]) -> Result<u64, ScenarioError> {
        let mut last_error = None;
        for (url, conn) in &mut self.nodes {
            let answer: Result<Option<u64>, _> = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(name)
                .arg("SAMPLES")
                .arg(0)
                .query_async(conn)
                .await;
            match answer {
                Ok(Some(bytes)) => return Ok(bytes),
                Ok(None) => {}
                Err(err) if err.code() == Some("MOVED") => {}
                Err(source) => {
                    last_error = Some(ScenarioError::RedisInfo {
                        store: self.store,
                        what: format!("MEMORY USAGE on {url}"),
                        source,
                    })
                }
            }
        }
        match last_error {
            Some(err) => Err(err),
            None => Ok(0),
        }
    }
}

async fn connect(url: &str) -> Result<MultiplexedConnection, redis::RedisError> {
    let client = redis::Client::open(url)?;
    let connecting = client.get_multiplexed_async_connection();
    match tokio::time::timeout(std::time::Duration::from_secs(10), connecting).await {
        Ok(conn) => conn,
        Err(_) => Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "no answer within 10 s",
        ))),
    }
}

/// `used_cpu_user + used_cpu_sys` from an `INFO cpu` reply.
///
/// ```text
/// # CPU
/// used_cpu_sys:0.052811
/// used_cpu_user:0.101352
/// ```
pub(crate) fn used_cpu(info: &str) -> Option<f64> {
    let field = |name: &str| {
        info.lines().find_map(|line| {
            line.trim()
                .strip_prefix(name)?
                .strip_prefix(':')?
                .parse::<f64>()
                .ok()
        })
    };
    Some(field("used_cpu_user")? + field("used_cpu_sys")?)
}

/// This process's CPU time so far (user + system, every thread), from `/proc/self/stat`; None
/// where there is no such file.
pub(crate) fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    parse_stat_cpu(&stat)
}

/// utime and stime are fields 14 and 15 of `/proc/<pid>/stat`, in clock ticks; Linux reports
/// them in USER_HZ, which is 100 on every architecture it supports. The command name (field 2)
/// may hold spaces, so fields are counted after its closing parenthesis.
fn parse_stat_cpu(stat: &str) -> Option<f64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<u64>().ok();
    // After the name, field 3 (state) is index 0: utime (14) is index 11, stime (15) index 12.
    Some((ticks(11)? + ticks(12)?) as f64 / 100.0)
}

/// This process's resident memory in bytes (`VmRSS` of `/proc/self/status`); None where there
/// is no such file.
pub(crate) fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kb: u64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cpu_from_info_and_from_proc_stat() {
        let info = "# CPU\r\nused_cpu_sys:0.25\r\nused_cpu_user:1.5\r\nused_cpu_sys_children:9\r\n";
        assert_eq!(used_cpu(info), Some(1.75));
        assert_eq!(used_cpu("# CPU\r\n"), None);
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0";
        assert_eq!(parse_stat_cpu(stat), Some(3.0));
        assert_eq!(parse_stat_cpu("garbage"), None);
    }

    #[test]
    fn this_process_has_cpu_time_and_resident_memory() {
        if cfg!(target_os = "linux") {
            assert!(process_cpu_seconds().is_some());
            assert!(resident_bytes().is_some_and(|b| b > 0));
        }
    }
}
