//! Where statistics go beyond the HTTP port's `/metrics`: upstream's statsd names to a statsd
//! server, and the Prometheus text on a listener of its own, from flags (each also a
//! `TOLLGATE_*` variable) or envoyproxy/ratelimit's variables. A flag wins over upstream's
//! variable.
//!
//! | upstream variable | flag | default |
//! |---|---|---|
//! | `USE_STATSD` with `STATSD_HOST`, `STATSD_PORT` | `--statsd host:port` | off (upstream's default is on; tollgate serves `/metrics` instead) |
//! | `STATSD_PROTOCOL` (`tcp`, `udp`) | `--statsd-protocol` | `tcp`, as upstream's |
//! | `STATS_FLUSH_INTERVAL` | `--stats-flush-interval` | `10s` |
//! | `EXTRA_TAGS` (`k:v,k:v`) | | none |
//! | `DISABLE_STATS` | | off; `true` turns statsd off whatever else says |
//! | `USE_PROMETHEUS` with `PROMETHEUS_ADDR` (`:9090`), `PROMETHEUS_PATH` (`/metrics`) | `--prometheus-addr`, `--prometheus-path` | off |
//! | `PROMETHEUS_MAPPER_YAML`, `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS` | checked to be readable / a boolean, otherwise unused: tollgate's series are its own (`docs/metrics.md`) | |
//! | `USE_DOG_STATSD` | refused when `true`: DogStatsD's tags are not sent | |

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use clap::Args;
use tollgate_server::statsd::{StatsdOptions, StatsdProtocol};

use crate::env_var::{EnvError, boolean};
use crate::listener_args::duration;

/// The statistics flags.
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct StatsArgs {
    /// Send envoyproxy/ratelimit's statistics, by its names, to this statsd server (as
    /// USE_STATSD=true with STATSD_HOST and STATSD_PORT, which are read too).
    #[arg(long, env = "TOLLGATE_STATSD")]
    statsd: Option<String>,
    /// `tcp` (upstream's default) or `udp` [default: STATSD_PROTOCOL, else tcp].
    #[arg(long, env = "TOLLGATE_STATSD_PROTOCOL", value_parser = protocol)]
    statsd_protocol: Option<StatsdProtocol>,
    /// How often counters are sent [default: STATS_FLUSH_INTERVAL, else 10s].
    #[arg(long, env = "TOLLGATE_STATS_FLUSH_INTERVAL", value_parser = duration)]
    stats_flush_interval: Option<Duration>,
    /// Also serve the Prometheus metrics on this address (as USE_PROMETHEUS=true with
    /// PROMETHEUS_ADDR, which are read too).
    #[arg(long, env = "TOLLGATE_PROMETHEUS_ADDR")]
    prometheus_addr: Option<SocketAddr>,
    /// The path of the metrics on --prometheus-addr [default: PROMETHEUS_PATH, else /metrics].
    #[arg(long, env = "TOLLGATE_PROMETHEUS_PATH", requires = "prometheus_addr")]
    prometheus_path: Option<String>,
}

/// Where statistics go: what upstream's variables ask for, or flags and variables together.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Stats {
    pub statsd: Option<StatsdOptions>,
    pub prometheus: Option<(SocketAddr, String)>,
}

impl StatsArgs {
    /// The statsd options and the Prometheus listener, flags over `upstream`.
    pub(crate) fn resolve(&self, upstream: Stats) -> Result<Stats, String> {
        let mut statsd = match (&self.statsd, upstream.statsd) {
            (Some(server), Some(mut upstream)) => {
                upstream.server.clone_from(server);
                Some(upstream)
            }
            (Some(server), None) => Some(StatsdOptions::new(server.clone())),
            (None, upstream) => upstream,
        };
        if let Some(statsd) = statsd.as_mut() {
            if let Some(protocol) = self.statsd_protocol {
                statsd.protocol = protocol;
            }
            if let Some(interval) = self.stats_flush_interval {
                statsd.flush_interval = interval;
            }
        }
        let prometheus = match (self.prometheus_addr, upstream.prometheus) {
            (Some(addr), upstream) => {
                let path = self
                    .prometheus_path
                    .clone()
                    .or(upstream.map(|(_, path)| path))
                    .unwrap_or_else(|| "/metrics".to_owned());
                Some((addr, check_path(&path)?))
            }
            (None, upstream) => upstream,
        };
        Ok(Stats { statsd, prometheus })
    }
}

/// Upstream's statistics variables.
pub(crate) fn from_env(get: &impl Fn(&str) -> Option<String>) -> Result<Stats, EnvError> {
    if boolean("USE_DOG_STATSD", get("USE_DOG_STATSD"))? {
        return Err(EnvError::new(
            "USE_DOG_STATSD",
            "true",
            "DogStatsD is not supported; use USE_STATSD=true (plain statsd) or /metrics",
        ));
    }
    if let Some(path) = get("PROMETHEUS_MAPPER_YAML")
        && let Err(err) = std::fs::metadata(&path)
    {
        return Err(EnvError::new(
            "PROMETHEUS_MAPPER_YAML",
            &path,
            format!("cannot read it: {err}"),
        ));
    }
    boolean(
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        get("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS"),
    )?;
    let disabled = boolean("DISABLE_STATS", get("DISABLE_STATS"))?;
    let statsd = if boolean("USE_STATSD", get("USE_STATSD"))? && !disabled {
        let host = get("STATSD_HOST").unwrap_or_else(|| "localhost".to_owned());
        let port: u16 = match get("STATSD_PORT") {
            None => 8125,
            Some(port) => port
                .trim()
                .parse()
                .map_err(|_| EnvError::new("STATSD_PORT", &port, "expected a port number (0 to 65535)"))?,
        };
        let server = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let mut options = StatsdOptions::new(server);
        if let Some(value) = get("STATSD_PROTOCOL") {
            options.protocol =
                protocol(&value).map_err(|why| EnvError::new("STATSD_PROTOCOL", &value, why))?;
        }
        if let Some(value) = get("STATS_FLUSH_INTERVAL") {
            options.flush_interval =
                duration(&value).map_err(|why| EnvError::new("STATS_FLUSH_INTERVAL", &value, why))?;
        }
        if let Some(tags) = get("EXTRA_TAGS") {
            for pair in tags.split(',') {
                match pair.split(':').collect::<Vec<_>>()[..] {
                    [name, value] => options.tags.push((name.to_owned(), value.to_owned())),
                    _ => {
                        return Err(EnvError::new(
                            "EXTRA_TAGS",
                            &tags,
                            "expected name:value pairs separated by commas",
                        ));
                    }
                }
            }
        }
        Some(options)
    } else {
        None
    };
    let prometheus = if boolean("USE_PROMETHEUS", get("USE_PROMETHEUS"))? {
        let value = get("PROMETHEUS_ADDR").unwrap_or_else(|| ":9090".to_owned());
        let addr = listen_addr(&value).ok_or_else(|| {
            EnvError::new(
                "PROMETHEUS_ADDR",
                &value,
                "expected host:port or :port, like :19001",
            )
        })?;
        let path = get("PROMETHEUS_PATH").unwrap_or_else(|| "/metrics".to_owned());
        let path = check_path(&path).map_err(|why| EnvError::new("PROMETHEUS_PATH", &path, why))?;
        Some((addr, path))
    } else {
        None
    };
    Ok(Stats { statsd, prometheus })
}

/// Go's listen address: `:port` listens on every interface.
fn listen_addr(value: &str) -> Option<SocketAddr> {
    let (host, port) = value.trim().rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let ip = match host.trim_start_matches('[').trim_end_matches(']') {
        "" => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
        host => host.parse().ok()?,
    };
    Some(SocketAddr::new(ip, port))
}

/// A route path: starts with `/`, has no `{`, `}` or `*` that the router would read as a
/// parameter.
fn check_path(path: &str) -> Result<String, String> {
    if path.starts_with('/') && !path.contains(['{', '}', '*']) && !path.contains("//") {
        Ok(path.to_owned())
    } else {
        Err("expected a path like /metrics".to_owned())
    }
}

fn protocol(text: &str) -> Result<StatsdProtocol, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "tcp" | "tcp4" | "tcp6" => Ok(StatsdProtocol::Tcp),
        "udp" | "udp4" | "udp6" => Ok(StatsdProtocol::Udp),
        _ => Err("expected tcp or udp".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env_var::lookup as env;

    #[test]
    fn envoy_gateways_prometheus_listener_is_read_as_go_reads_it() {
        let stats = from_env(&env(&[
            ("USE_STATSD", "false"),
            ("USE_PROMETHEUS", "true"),
            ("PROMETHEUS_ADDR", ":19001"),
        ]))
        .expect("reads");
        assert!(stats.statsd.is_none());
        assert_eq!(
            stats.prometheus,
            Some(("0.0.0.0:19001".parse().expect("addr"), "/metrics".to_owned()))
        );
    }

    #[test]
    fn statsd_takes_upstreams_host_port_protocol_and_tags() {
        let stats = from_env(&env(&[
            ("USE_STATSD", "true"),
            ("STATSD_PORT", "9125"),
            ("STATSD_PROTOCOL", "udp"),
            ("EXTRA_TAGS", "env:prod"),
        ]))
        .expect("reads");
        let statsd = stats.statsd.expect("on");
        assert_eq!(
            (statsd.server.as_str(), statsd.protocol),
            ("localhost:9125", StatsdProtocol::Udp)
        );
        assert_eq!(statsd.tags, [("env".to_owned(), "prod".to_owned())]);
        assert!(
            from_env(&env(&[("USE_STATSD", "true"), ("DISABLE_STATS", "true")]))
                .expect("reads")
                .statsd
                .is_none()
        );
        let err = from_env(&env(&[("USE_DOG_STATSD", "true")])).unwrap_err();
        assert_eq!(err.var, "USE_DOG_STATSD");
        let err = from_env(&env(&[("USE_STATSD", "true"), ("STATSD_PROTOCOL", "quic")])).unwrap_err();
        assert_eq!(err.var, "STATSD_PROTOCOL");
    }
}
