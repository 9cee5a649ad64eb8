//! envoyproxy/ratelimit's statistics over statsd (`USE_STATSD`), by upstream's names and types,
//! so the statsd exporter beside an Envoy rate limit service (and the mapping upstream ships
//! for it) turns them into the Prometheus series its dashboards already read.
//!
//! | statistic | type |
//! |---|---|
//! | `ratelimit.service.rate_limit.<stats key>.total_hits`, `.over_limit`, `.near_limit`, `.within_limit`, `.shadow_mode` | counter |
//! | `ratelimit.service.config_load_success`, `ratelimit.service.config_load_error` | counter |
//! | `ratelimit.service.global_shadow_mode` | counter |
//! | `ratelimit.service.call.should_rate_limit.redis_error`, `.service_error` | counter |
//! | `ratelimit_server.ShouldRateLimit.total_requests` | counter |
//! | `ratelimit_server.ShouldRateLimit.response_time` | timer, milliseconds |
//!
//! As upstream's stats library does, counters are added up in memory and sent as the change
//! since the last flush (every `STATS_FLUSH_INTERVAL`, 10 s by default; a counter that did not
//! move is not sent), and each call's response time is its own line. Lines are `name:value|c`
//! and `name:value|ms`, packed whole into datagrams of at most 1,432 bytes over UDP or written
//! to one connection over TCP (upstream's default protocol).
//!
//! Nothing here can hold up a decision: a decision adds to atomics and queues its timing in a
//! bounded buffer; a background task does the network. A full timing buffer, an unreachable
//! statsd server or a failed write drops lines, counted in `tollgate_statsd_dropped_lines_total`.
//! The number of stats keys is bounded by the Envoy settings' `max_stats_keys`, so memory is.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UdpSocket};

/// How many response times wait for the next flush at most; more are dropped (and counted).
const MAX_PENDING_TIMES: usize = 65_536;

/// The largest datagram: whole lines that fit one Ethernet frame unfragmented, as upstream's.
const MAX_DATAGRAM: usize = 1_432;

/// How response times are flushed at least, whatever the counters' interval.
const TIMER_FLUSH: Duration = Duration::from_secs(1);

/// How statsd lines travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StatsdProtocol {
    /// One connection, reopened when it breaks (upstream's default).
    Tcp,
    /// Datagrams.
    Udp,
}

/// Where and how statistics are sent.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatsdOptions {
    /// The statsd server, `host:port` (resolved at each connection).
    pub server: String,
    /// TCP or UDP.
    pub protocol: StatsdProtocol,
    /// How often counters are sent.
    pub flush_interval: Duration,
    /// Tags added to every name as upstream's `EXTRA_TAGS` are: `.__name=value`, sorted.
    pub tags: Vec<(String, String)>,
}

impl StatsdOptions {
    /// Options for `server` with upstream's defaults: TCP, every 10 s, no tags.
    ///
    /// ```
    /// use tollgate_server::statsd::{StatsdOptions, StatsdProtocol};
    ///
    /// let options = StatsdOptions::new("localhost:8125");
    /// assert_eq!(options.protocol, StatsdProtocol::Tcp);
    /// assert_eq!(options.flush_interval, std::time::Duration::from_secs(10));
    /// ```
    pub fn new(server: impl Into<String>) -> Self {
        StatsdOptions {
            server: server.into(),
            protocol: StatsdProtocol::Tcp,
            flush_interval: Duration::from_secs(10),
            tags: Vec::new(),
        }
    }

    /// The tag suffix of every name: `.__k=v` for each tag, sorted by name, with `.`, `:` and
    /// `|` in values made `_` as upstream's stats library does.
    fn suffix(&self) -> String {
        let mut tags = self.tags.clone();
        tags.sort();
        tags.iter()
            .map(|(name, value)| format!(".__{name}={}", value.replace(['.', ':', '|'], "_")))
            .collect()
    }
}

/// The counters of one stats key.
#[derive(Debug, Default)]
pub(crate) struct KeyStats {
    pub(crate) total_hits: AtomicU64,
    pub(crate) over_limit: AtomicU64,
    pub(crate) near_limit: AtomicU64,
    pub(crate) within_limit: AtomicU64,
    pub(crate) shadow_mode: AtomicU64,
}

/// The service's own counters.
#[derive(Debug, Default)]
struct ServiceStats {
    config_load_success: AtomicU64,
    config_load_error: AtomicU64,
    global_shadow_mode: AtomicU64,
    redis_error: AtomicU64,
    service_error: AtomicU64,
    total_requests: AtomicU64,
}

/// What is waiting to be sent.
struct Sink {
    options: StatsdOptions,
    suffix: String,
    service: ServiceStats,
    keys: Mutex<Vec<(String, Arc<KeyStats>)>>,
    times_ms: Mutex<Vec<u64>>,
}

static SINK: OnceLock<Sink> = OnceLock::new();

/// Turns statistics on for this process (the first call wins) and returns the task that sends
/// them until `stop` completes, with a last flush then.
pub(crate) fn start(
    options: StatsdOptions,
    stop: impl Future<Output = ()> + Send + 'static,
) -> impl Future<Output = ()> + Send + 'static {
    let suffix = options.suffix();
    let _ = SINK.set(Sink {
        options,
        suffix,
        service: ServiceStats::default(),
        keys: Mutex::new(Vec::new()),
        times_ms: Mutex::new(Vec::new()),
    });
    async move {
        let Some(sink) = SINK.get() else { return };
        let mut sender = Sender::new(&sink.options);
        let mut stop = std::pin::pin!(stop);
        let mut counters = tokio::time::interval(sink.options.flush_interval);
        let mut timers = tokio::time::interval(TIMER_FLUSH.min(sink.options.flush_interval));
        counters.tick().await;
        timers.tick().await;
        loop {
            tokio::select! {
                () = &mut stop => break,
                _ = counters.tick() => {
                    let mut lines = sink.counter_lines();
                    lines.extend(sink.timer_lines());
                    sender.send(lines).await;
                }
                _ = timers.tick() => sender.send(sink.timer_lines()).await,
            }
        }
        let mut lines = sink.counter_lines();
        lines.extend(sink.timer_lines());
        sender.send(lines).await;
    }
}

/// The counters of `stats_key`, registered for sending; `None` when statsd is off. Called once
/// per stats key: the caller keeps them.
pub(crate) fn key(stats_key: &str) -> Option<Arc<KeyStats>> {
    let sink = SINK.get()?;
    let stats = Arc::new(KeyStats::default());
    let name = format!("ratelimit.service.rate_limit.{}", sanitize(stats_key));
    sink.keys
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((name, Arc::clone(&stats)));
    Some(stats)
}

/// A config load (a reload, a push), successful or not.
pub(crate) fn config_load(ok: bool) {
    if let Some(sink) = SINK.get() {
        let counter = match ok {
            true => &sink.service.config_load_success,
            false => &sink.service.config_load_error,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// A request global shadow mode let through.
pub(crate) fn global_shadow_mode() {
    if let Some(sink) = SINK.get() {
        sink.service.global_shadow_mode.fetch_add(1, Ordering::Relaxed);
    }
}

/// How a `ShouldRateLimit` call ended, for upstream's call statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallEnd {
    Answered,
    /// The store failed (upstream's `redis_error`).
    StoreError,
    /// Any other error (upstream's `service_error`).
    ServiceError,
}

/// One `ShouldRateLimit` call over gRPC and how long it took.
pub(crate) fn should_rate_limit(end: CallEnd, took: Duration) {
    let Some(sink) = SINK.get() else { return };
    let service = &sink.service;
    service.total_requests.fetch_add(1, Ordering::Relaxed);
    match end {
        CallEnd::Answered => {}
        CallEnd::StoreError => {
            service.redis_error.fetch_add(1, Ordering::Relaxed);
        }
        CallEnd::ServiceError => {
            service.service_error.fetch_add(1, Ordering::Relaxed);
        }
    }
    let mut times = sink.times_ms.lock().unwrap_or_else(PoisonError::into_inner);
    if times.len() < MAX_PENDING_TIMES {
        // Whole milliseconds, truncated, as upstream's timer reports them.
        times.push(u64::try_from(took.as_millis()).unwrap_or(u64::MAX));
    } else {
        drop(times);
        crate::ops::metrics::statsd_dropped(1);
    }
}

impl Sink {
    /// The counters that moved since the last flush, taken (so they start again from zero).
    fn counter_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let mut line = |name: &str, counter: &AtomicU64| {
            let delta = counter.swap(0, Ordering::Relaxed);
            if delta > 0 {
                lines.push(format!("{name}{}:{delta}|c\n", self.suffix));
            }
        };
        let service = &self.service;
        line(
            "ratelimit.service.config_load_success",
            &service.config_load_success,
        );
        line("ratelimit.service.config_load_error", &service.config_load_error);
        line(
            "ratelimit.service.global_shadow_mode",
            &service.global_shadow_mode,
        );
        line(
            "ratelimit.service.call.should_rate_limit.redis_error",
            &service.redis_error,
        );
        line(
            "ratelimit.service.call.should_rate_limit.service_error",
            &service.service_error,
        );
        line(
            "ratelimit_server.ShouldRateLimit.total_requests",
            &service.total_requests,
        );
        let keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        let mut name = String::new();
        for (prefix, stats) in keys.iter() {
            for (stat, counter) in [
                ("total_hits", &stats.total_hits),
                ("over_limit", &stats.over_limit),
                ("near_limit", &stats.near_limit),
                ("within_limit", &stats.within_limit),
                ("shadow_mode", &stats.shadow_mode),
            ] {
                name.clear();
                let _ = write!(name, "{prefix}.{stat}");
                line(&name, counter);
            }
        }
        lines
    }

    /// The response times waiting, taken.
    fn timer_lines(&self) -> Vec<String> {
        let times = std::mem::take(&mut *self.times_ms.lock().unwrap_or_else(PoisonError::into_inner));
        times
            .into_iter()
            .map(|ms| {
                format!(
                    "ratelimit_server.ShouldRateLimit.response_time{}:{ms}|ms\n",
                    self.suffix
                )
            })
            .collect()
    }
}

/// A stats key as a statsd name part, as upstream's sanitizer makes it: `:` and `|` (and line
/// breaks, which would end the line) become `_`, and so do the dots of an IPv4 address, so an
/// address stays one part of the name.
pub(crate) fn sanitize(stats_key: &str) -> String {
    let cleaned: String = stats_key
        .chars()
        .map(|c| {
            if matches!(c, ':' | '|' | '\n' | '\r') {
                '_'
            } else {
                c
            }
        })
        .collect();
    let parts: Vec<&str> = cleaned.split('.').collect();
    let mut out = String::with_capacity(cleaned.len());
    let mut i = 0;
    while i < parts.len() {
        if !out.is_empty() {
            out.push('.');
        }
        if let Some(quad) = ipv4_at(&parts[i..]) {
            out.push_str(&quad);
            i += 4;
        } else {
            out.push_str(parts[i]);
            i += 1;
        }
    }
    out
}

/// Four parts that end and start an IPv4 address (`key_10`, `0`, `0`, `1`), joined with `_`.
fn ipv4_at(parts: &[&str]) -> Option<String> {
    let [first, second, third, fourth, ..] = parts else {
        return None;
    };
    let octet = |part: &str| (1..=3).contains(&part.len()) && part.bytes().all(|b| b.is_ascii_digit());
    let leading_digits = first.bytes().rev().take_while(u8::is_ascii_digit).count();
    let trailing_digits = fourth.bytes().take_while(u8::is_ascii_digit).count();
    let ok = (1..=3).contains(&leading_digits)
        && octet(second)
        && octet(third)
        && (1..=3).contains(&trailing_digits);
    ok.then(|| format!("{first}_{second}_{third}_{fourth}"))
}

/// Sends lines over the chosen protocol, reconnecting as needed.
struct Sender {
    server: String,
    protocol: StatsdProtocol,
    tcp: Option<TcpStream>,
    udp: Option<(UdpSocket, SocketAddr)>,
}

impl Sender {
    fn new(options: &StatsdOptions) -> Self {
        Sender {
            server: options.server.clone(),
            protocol: options.protocol,
            tcp: None,
            udp: None,
        }
    }

    /// Sends `lines`; what cannot be sent is dropped and counted.
    async fn send(&mut self, lines: Vec<String>) {
        if lines.is_empty() {
            return;
        }
        let count = lines.len() as u64;
        let sent = match self.protocol {
            StatsdProtocol::Tcp => self.send_tcp(&lines.concat()).await,
            StatsdProtocol::Udp => self.send_udp(&lines).await,
        };
        if let Err(err) = sent {
            crate::ops::metrics::statsd_dropped(count);
            tracing::debug!(server = %self.server, error = %err, lines = count, "statsd lines dropped");
        } else {
            crate::ops::metrics::statsd_sent(count);
        }
    }

    async fn send_tcp(&mut self, text: &str) -> std::io::Result<()> {
        if self.tcp.is_none() {
            let connect = TcpStream::connect(self.server.as_str());
            let stream = tokio::time::timeout(Duration::from_millis(1_500), connect)
                .await
                .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
            self.tcp = Some(stream);
        }
        let Some(stream) = self.tcp.as_mut() else {
            return Ok(());
        };
        let written = tokio::time::timeout(Duration::from_secs(1), stream.write_all(text.as_bytes())).await;
        match written {
            Ok(Ok(())) => Ok(()),
            Ok(Err(err)) => {
                self.tcp = None;
                Err(err)
            }
            Err(_) => {
                self.tcp = None;
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "write timed out",
                ))
            }
        }
    }

    async fn send_udp(&mut self, lines: &[String]) -> std::io::Result<()> {
        if self.udp.is_none() {
            let target = tokio::net::lookup_host(self.server.as_str())
                .await?
                .next()
                .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address"))?;
            let local: SocketAddr = if target.is_ipv4() {
                (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
            } else {
                (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
            };
            self.udp = Some((UdpSocket::bind(local).await?, target));
        }
        let Some((socket, target)) = &self.udp else {
            return Ok(());
        };
        for datagram in datagrams(lines) {
            socket.send_to(datagram.as_bytes(), target).await?;
        }
        Ok(())
    }
}

/// Whole lines packed into datagrams of at most [`MAX_DATAGRAM`] bytes (a longer line goes alone).
fn datagrams(lines: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in lines {
        if !current.is_empty() && current.len() + line.len() > MAX_DATAGRAM {
            out.push(std::mem::take(&mut current));
        }
        current.push_str(line);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_sanitized_as_upstream_does() {
        assert_eq!(
            sanitize("edge.remote_address_10.0.0.1"),
            "edge.remote_address_10_0_0_1"
        );
        assert_eq!(sanitize("edge.path_/a:b|c"), "edge.path_/a_b_c");
        assert_eq!(sanitize("edge.host_api.example.com"), "edge.host_api.example.com");
        assert_eq!(sanitize("d.k_v\nevil:1|c"), "d.k_v_evil_1_c");
        assert_eq!(sanitize("basic.key1"), "basic.key1");
    }

    #[test]
    fn datagrams_hold_whole_lines_within_the_frame() {
        let lines: Vec<String> = (0..100)
            .map(|i| format!("ratelimit.service.rate_limit.d.k{i}.total_hits:1|c\n"))
            .collect();
        let packed = datagrams(&lines);
        assert!(packed.len() > 1);
        assert!(
            packed
                .iter()
                .all(|d| d.len() <= MAX_DATAGRAM && d.ends_with('\n'))
        );
        assert_eq!(packed.concat(), lines.concat());
    }

    #[test]
    fn tags_are_sorted_and_cleaned() {
        let mut options = StatsdOptions::new("localhost:8125");
        options.tags = vec![("zone".into(), "eu.west:1".into()), ("app".into(), "edge".into())];
        assert_eq!(options.suffix(), ".__app=edge.__zone=eu_west_1");
    }
}
