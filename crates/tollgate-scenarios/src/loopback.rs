//! The bench sends load only to servers on this machine: every Redis address must name a
//! loopback host (`127.0.0.0/8`, `::1` or `localhost`). Anything else is refused before a single
//! request is sent.

use std::net::IpAddr;

use crate::ScenarioError;

/// Checks that `url` is a `redis://` address (or, with `cluster`, a `redis+cluster://` list) whose
/// every host is a loopback host.
///
/// ```
/// use tollgate_scenarios::loopback::check_url;
///
/// assert!(check_url("redis", "redis://127.0.0.1:6379/", false).is_ok());
/// assert!(check_url("redis", "redis://[::1]:6379", false).is_ok());
/// assert!(check_url("redis-cluster", "redis+cluster://localhost:7000,127.0.0.2:7001", true).is_ok());
/// assert!(check_url("redis", "redis://192.0.2.5:6379", false).is_err());
/// assert!(check_url("redis", "redis+cluster://127.0.0.1:7000", false).is_err());
/// ```
pub fn check_url(arg: &'static str, url: &str, cluster: bool) -> Result<(), ScenarioError> {
    let bad = |why: String| ScenarioError::BadRedisUrl {
        arg,
        url: url.to_string(),
        why,
    };
    let scheme = if cluster { "redis+cluster://" } else { "redis://" };
    let Some(rest) = url.strip_prefix(scheme) else {
        return Err(bad(format!("expected an address starting with {scheme}")));
    };
    let nodes: Vec<&str> = if cluster {
        rest.split(',').map(str::trim).collect()
    } else {
        vec![rest]
    };
    for node in nodes {
        let host = host_of(node).ok_or_else(|| bad(format!("no host in `{node}`")))?;
        if !is_loopback(host) {
            return Err(bad(format!(
                "host `{host}` is not a loopback address; the bench sends load only to \
                 127.0.0.0/8, ::1 or localhost"
            )));
        }
    }
    tollgate_redis::Target::parse(url).map_err(|err| bad(err.to_string()))?;
    Ok(())
}

/// The host of `user:password@host:port/db`, without brackets for IPv6.
fn host_of(node: &str) -> Option<&str> {
    let authority = node.split('/').next().unwrap_or("");
    let authority = authority.rsplit('@').next().unwrap_or("");
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        authority.split(':').next().unwrap_or("")
    };
    (!host.is_empty()).then_some(host)
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_host_behind_credentials_and_database() {
        assert_eq!(host_of("user:pw@127.0.0.1:6379/2"), Some("127.0.0.1"));
        assert_eq!(host_of("[::1]:6379"), Some("::1"));
        assert_eq!(host_of(":6379"), None);
    }

    #[test]
    fn refuses_every_non_loopback_host() {
        for url in [
            "redis://192.168.1.10:6379",
            "redis://example.com:6379",
            "redis://0.0.0.0:6379",
            "redis://:6379",
        ] {
            assert!(check_url("redis", url, false).is_err(), "{url}");
        }
        let mixed = "redis+cluster://127.0.0.1:7000,10.1.1.1:7001";
        assert!(check_url("redis-cluster", mixed, true).is_err());
    }
}
