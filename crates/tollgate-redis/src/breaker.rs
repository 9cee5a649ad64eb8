//! Circuit breakers, so a dead Redis costs one timeout per probe instead of one per call, while a
//! short stall costs little more than the stall itself.
//!
//! Closed: every call goes to Redis. After a call fails for lack of Redis (timeout, connection,
//! cluster), the breaker opens for `first_wait`: calls fail at once without touching the network.
//! When the wait is up, exactly one call is let through as a *probe* (half-open). Its success
//! closes the breaker; its failure opens it again for twice the last wait, up to `max_wait`. So
//! the time spent open follows the fault: a 60 ms stall keeps the breaker open for about the
//! stall, a dead Redis is probed every `max_wait`. A zero `max_wait` turns the breaker off:
//! every call goes to Redis, for callers that want each failure reported as it happened.
//!
//! Failures of calls that were already in flight when the breaker opened do not lengthen the
//! wait: only a failed probe does, so a hundred calls timing out together count as one failure.
//! Any success closes the breaker, since Redis answered.
//!
//! A breaker keeps the failure that last opened it, so a refused call can still name the Redis
//! error behind it (the refusal's `source()`). On a cluster the store keeps one breaker per
//! master ([`Breakers`]), so one sick master does not refuse the calls of the healthy ones.
//!
//! The same breakers guard a node's *replicas* for the calls that wait for them ([`Watch`]):
//! once a node's replicas fell short of acknowledging a call's writes, the next calls go without
//! waiting (their denials stand, their admissions count as not acknowledged), and a probe waits
//! again soon, then less and less often. Without this, every waiting call would hold the
//! connection for its whole `WAIT` while a replica is away, and the calls behind it would miss
//! their deadlines.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use redis::RedisError;

/// What a breaker watches, for its log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Watch {
    /// The node itself: every call to it.
    Node,
    /// The node's replicas acknowledging writes: the calls that wait for them.
    Replicas,
}

pub(crate) struct Breaker {
    /// The node's `host:port` (or the standalone address), for the log lines.
    node: String,
    watch: Watch,
    started: Instant,
    first_wait_us: u64,
    max_wait_us: u64,
    /// µs since `started` until which calls are refused; 0 when closed.
    open_until_us: AtomicU64,
    /// The wait the breaker is open for now (doubles with each failed probe).
    wait_us: AtomicU64,
    /// The failure that last opened the breaker. Only touched when a call fails or is refused.
    cause: Mutex<Option<RedisError>>,
}

/// Whether a call may go to Redis.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Closed (`probe: false`), or this call is the probe of an open breaker.
    Call {
        /// Whether this call is the probe: its failure lengthens the wait.
        probe: bool,
    },
    /// Open: fail now; the next probe is this far away.
    Refuse(Duration),
}

impl Breaker {
    #[cfg(test)]
    pub(crate) fn new(first_wait: Duration, max_wait: Duration) -> Self {
        Self::for_node(String::new(), Watch::Node, first_wait, max_wait)
    }

    /// A breaker whose log lines name `node`.
    pub(crate) fn for_node(node: String, watch: Watch, first_wait: Duration, max_wait: Duration) -> Self {
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 4);
        let max_wait_us = us(max_wait);
        Breaker {
            node,
            watch,
            started: Instant::now(),
            first_wait_us: us(first_wait).min(max_wait_us).max(1),
            max_wait_us,
            open_until_us: AtomicU64::new(0),
            wait_us: AtomicU64::new(0),
            cause: Mutex::new(None),
        }
    }

    pub(crate) fn admit(&self) -> Admission {
        self.admit_at(self.now_us())
    }

    fn admit_at(&self, now: u64) -> Admission {
        let open_until = self.open_until_us.load(Ordering::Acquire);
        if open_until == 0 {
            return Admission::Call { probe: false };
        }
        if now < open_until {
            return Admission::Refuse(Duration::from_micros(open_until - now));
        }
        // The wait is up: the one caller that moves the deadline is the probe. Until the probe
        // answers, the others are refused for as long as the probe's own deadline could last.
        let wait = self.wait_us.load(Ordering::Acquire).max(self.first_wait_us);
        let next = now + wait;
        match self
            .open_until_us
            .compare_exchange(open_until, next, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Admission::Call { probe: true },
            Err(_) => Admission::Refuse(Duration::from_micros(wait)),
        }
    }

    pub(crate) fn succeeded(&self) {
        let open_until = self.open_until_us.load(Ordering::Relaxed);
        // One caller closes it (and logs), however many succeed at once.
        if open_until != 0
            && self
                .open_until_us
                .compare_exchange(open_until, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            self.wait_us.store(0, Ordering::Release);
            match self.watch {
                Watch::Node => {
                    tracing::info!(node = %self.node, "redis circuit breaker closed: the node answers again")
                }
                Watch::Replicas => tracing::info!(
                    node = %self.node,
                    "redis replicas acknowledge again: policies that wait for replicas admit again"
                ),
            }
        }
    }

    /// Records a call that failed for lack of Redis (or, watching replicas, of their
    /// acknowledgement): a closed breaker opens for the first wait, a failed probe doubles the
    /// wait.
    pub(crate) fn failed(&self, cause: RedisError, probe: bool) {
        let was_open = self.is_open();
        *self.cause.lock() = Some(cause.clone());
        self.failed_at(self.now_us(), probe);
        if !was_open && self.is_open() {
            match self.watch {
                Watch::Node => tracing::warn!(
                    node = %self.node,
                    error = %cause,
                    "redis circuit breaker opened: calls to the node fail fast (failure modes decide) until a probe succeeds"
                ),
                Watch::Replicas => tracing::warn!(
                    node = %self.node,
                    error = %cause,
                    "redis replicas fell short of acknowledging an admission: admissions that wait for them fail fast (failure modes decide) until a probe is acknowledged"
                ),
            }
        }
    }

    /// The failure that last opened the breaker.
    pub(crate) fn cause(&self) -> Option<RedisError> {
        self.cause.lock().clone()
    }

    fn failed_at(&self, now: u64, probe: bool) {
        if self.max_wait_us == 0 {
            return;
        }
        let open = self.open_until_us.load(Ordering::Acquire) != 0;
        let wait = match (open, probe) {
            // A call sent before the breaker opened: the breaker already knows.
            (true, false) => return,
            (true, true) => {
                let last = self.wait_us.load(Ordering::Acquire).max(self.first_wait_us);
                last.saturating_mul(2).min(self.max_wait_us)
            }
            (false, _) => self.first_wait_us,
        };
        self.wait_us.store(wait, Ordering::Release);
        self.open_until_us.store(now + wait, Ordering::Release);
    }

    pub(crate) fn is_open(&self) -> bool {
        self.open_until_us.load(Ordering::Acquire) != 0
    }

    fn now_us(&self) -> u64 {
        self.started.elapsed().as_micros() as u64 + 1
    }
}

/// One breaker per Redis node, made on first use. Standalone Redis has one node; a cluster one
/// per master, named `host:port`.
pub(crate) struct Breakers {
    watch: Watch,
    first_wait: Duration,
    max_wait: Duration,
    nodes: RwLock<HashMap<String, Arc<Breaker>>>,
}

impl Breakers {
    pub(crate) fn new(watch: Watch, first_wait: Duration, max_wait: Duration) -> Self {
        Breakers {
            watch,
            first_wait,
            max_wait,
            nodes: RwLock::new(HashMap::new()),
        }
    }

    /// The breaker of `node`.
    pub(crate) fn node(&self, node: &str) -> Arc<Breaker> {
        if let Some(breaker) = self.nodes.read().get(node) {
            return breaker.clone();
        }
        self.nodes
            .write()
            .entry(node.to_string())
            .or_insert_with(|| {
                Arc::new(Breaker::for_node(
                    node.to_string(),
                    self.watch,
                    self.first_wait,
                    self.max_wait,
                ))
            })
            .clone()
    }

    /// Whether any breaker is open.
    pub(crate) fn any_open(&self) -> bool {
        self.nodes.read().values().any(|b| b.is_open())
    }

    /// Each node's name and whether its breaker is open, sorted by name.
    pub(crate) fn states(&self) -> Vec<(String, bool)> {
        let mut states: Vec<(String, bool)> = self
            .nodes
            .read()
            .iter()
            .map(|(name, b)| (name.clone(), b.is_open()))
            .collect();
        states.sort();
        states
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000;

    #[test]
    fn the_first_probe_comes_soon_and_its_success_closes() {
        let breaker = Breaker::new(Duration::from_millis(10), Duration::from_millis(500));
        assert_eq!(breaker.admit_at(1), Admission::Call { probe: false });
        breaker.failed_at(1, false);
        assert_eq!(
            breaker.admit_at(5 * MS),
            Admission::Refuse(Duration::from_micros(5 * MS + 1))
        );
        assert_eq!(breaker.admit_at(10 * MS + 1), Admission::Call { probe: true });
        assert!(
            matches!(breaker.admit_at(10 * MS + 2), Admission::Refuse(_)),
            "only one probe"
        );
        breaker.succeeded();
        assert!(!breaker.is_open());
        assert_eq!(breaker.admit_at(10 * MS + 3), Admission::Call { probe: false });
    }

    #[test]
    fn failed_probes_double_the_wait_up_to_the_maximum() {
        let breaker = Breaker::new(Duration::from_millis(10), Duration::from_millis(35));
        breaker.failed_at(0, false);
        let mut now = 0;
        let mut waits = vec![];
        for _ in 0..4 {
            // Probe as soon as allowed, and fail.
            let mut t = now;
            while breaker.admit_at(t) != (Admission::Call { probe: true }) {
                t += 100;
            }
            waits.push((t - now) / MS);
            breaker.failed_at(t, true);
            now = t;
        }
        assert_eq!(waits, [10, 20, 35, 35]);
        // After a success, the next trip starts from the first wait again.
        breaker.succeeded();
        breaker.failed_at(now, false);
        assert_eq!(breaker.admit_at(now + 10 * MS), Admission::Call { probe: true });
    }

    #[test]
    fn failures_of_calls_already_in_flight_do_not_lengthen_the_wait() {
        let breaker = Breaker::new(Duration::from_millis(10), Duration::from_millis(500));
        breaker.failed_at(0, false);
        for i in 1..100 {
            breaker.failed_at(i, false);
        }
        assert_eq!(breaker.admit_at(10 * MS), Admission::Call { probe: true });
    }

    #[test]
    fn a_zero_maximum_never_opens() {
        let breaker = Breaker::new(Duration::ZERO, Duration::ZERO);
        breaker.failed_at(1, false);
        assert!(!breaker.is_open());
        assert_eq!(breaker.admit_at(2), Admission::Call { probe: false });
    }

    #[test]
    fn one_node_failing_leaves_the_others_closed() {
        let breakers = Breakers::new(Watch::Node, Duration::from_millis(10), Duration::from_millis(500));
        breakers.node("a:1").failed_at(1, false);
        assert!(breakers.node("a:1").is_open());
        assert_eq!(breakers.node("b:2").admit(), Admission::Call { probe: false });
        assert_eq!(
            breakers.states(),
            [("a:1".to_string(), true), ("b:2".to_string(), false)]
        );
        assert!(breakers.any_open());
    }
}
